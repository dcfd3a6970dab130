"""Optional mirrors of rounds.csv: TensorBoard scalars and a Weights & Biases run (``output.tensorboard``,
``output.wandb``; both off by default, and their libraries are optional extras).

The run recorder calls :class:`RoundLoggers` after each rounds.csv row is written and flushed, with that
row: the loggers only ever see what the run already wrote, and the random-number states of the process
are saved before and restored after each call, so logging never changes a result. A logger that fails
(e.g. W&B online without a login) prints one warning and is switched off; the run goes on.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import random
import sys
from pathlib import Path
from typing import Any

import yaml

EXTRA = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_available(output: Any, source: str) -> None:
    """ScenarioError before the run starts when a logger is on but its library is not installed."""
    from iotfl_sim.core.errors import ScenarioError

    wanted = [k for k in ("tensorboard", "wandb") if getattr(output, k, None)]
    for k in wanted:
        if importlib.util.find_spec(k) is None:
            raise ScenarioError(
                f"{source}: output.{k}: the {k} package is not installed; pip install 'iotfl-sim[{EXTRA[k]}]' "
                f"or turn it off (output.{k}: {'false' if k == 'tensorboard' else 'null'})"
            )


class _KeepRandomState:
    """Save and restore Python's, NumPy's and torch's global RNG states around a logger call."""

    def __enter__(self) -> None:
        import numpy as np
        import torch

        self.states = (random.getstate(), np.random.get_state(), torch.get_rng_state())

    def __exit__(self, *exc: Any) -> None:
        import numpy as np
        import torch

        random.setstate(self.states[0])
        np.random.set_state(self.states[1])
        torch.set_rng_state(self.states[2])


def _scalars(row: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in row.items():
        if k == "round" or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(v):
            out[k] = float(v)
    return out


class RoundLoggers:
    """The loggers a run folder's scenario asks for; ``round(row)`` after each row, ``close()`` at the end."""

    def __init__(self, path: Path, resolved: dict[str, Any]) -> None:
        self.path = path
        self.resolved = resolved
        out = resolved.get("output") or {}
        self.tb: Any = None
        self.wb: Any = None
        if out.get("tensorboard"):
            self._start("tensorboard", self._start_tensorboard)
        if out.get("wandb"):
            self._start("wandb", lambda: self._start_wandb(out["wandb"]))

    @classmethod
    def for_run(cls, path: Path) -> RoundLoggers | None:
        """The loggers of the run in ``path`` (from its scenario.resolved.yaml), or None when all are off."""
        try:
            resolved = yaml.safe_load((path / "scenario.resolved.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            return None
        out = resolved.get("output") or {}
        if not (out.get("tensorboard") or out.get("wandb")):
            return None
        return cls(path, resolved)

    @property
    def active(self) -> bool:
        return self.tb is not None or self.wb is not None

    def _start(self, name: str, start: Any) -> None:
        try:
            with _KeepRandomState():
                start()
        except Exception as e:  # noqa: BLE001 - logging is a side channel: warn and go on without it
            print(f"warning: output.{name}: could not start ({type(e).__name__}: {e}); the run goes on without it",
                  file=sys.stderr)  # fmt: skip

    def _start_tensorboard(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.tb = SummaryWriter(log_dir=str(self.path / "tensorboard"))
        text = yaml.safe_dump(self.resolved, sort_keys=False)
        self.tb.add_text("scenario", "```yaml\n" + text + "\n```", global_step=0)
        self.tb.flush()

    def _start_wandb(self, cfg: dict[str, Any]) -> None:
        import wandb

        run_id = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:16]  # a resume continues it
        self.wb = wandb.init(
            project=cfg["project"], entity=cfg.get("entity"), mode=cfg.get("mode", "offline"), dir=str(self.path),
            name=self.path.name, id=run_id, resume="allow", config=self.resolved, reinit="create_new",
        )  # fmt: skip

    def round(self, row: dict[str, Any]) -> None:
        """Log one rounds.csv row (already written), at step ``row['round']``."""
        step = int(row["round"])
        values = _scalars(row)
        with _KeepRandomState():
            if self.tb is not None:
                try:
                    for k, v in values.items():
                        self.tb.add_scalar(k, v, global_step=step)
                    self.tb.flush()
                except Exception as e:  # noqa: BLE001
                    self._drop("tensorboard", e)
            if self.wb is not None:
                try:
                    self.wb.log(values, step=step)
                except Exception as e:  # noqa: BLE001
                    self._drop("wandb", e)

    def _drop(self, name: str, e: Exception) -> None:
        print(f"warning: output.{name}: stopped logging ({type(e).__name__}: {e})", file=sys.stderr)
        if name == "tensorboard":
            self.tb = None
        else:
            self.wb = None

    def close(self) -> None:
        with _KeepRandomState():
            if self.tb is not None:
                try:
                    self.tb.close()
                except Exception:  # noqa: BLE001, S110
                    pass
                self.tb = None
            if self.wb is not None:
                try:
                    self.wb.finish()
                except Exception:  # noqa: BLE001, S110
                    pass
                self.wb = None
