"""docs/methods_and_modes.md, generated from the method registry: which built-in method runs in which mode, and
for each one it does not, why (``MethodConfig.modes`` and ``why_not_in``, the one place they are declared).

``python -m iotfl_sim.mode_matrix > docs/methods_and_modes.md`` writes it; ``tests/test_methods_and_modes.py``
checks that the file is what this prints and that ``validate`` refuses every "no" cell with its reason.
"""

from __future__ import annotations

import sys

from iotfl_sim import methods
from iotfl_sim.scenario.algorithms.base import MODES

_WHAT = {
    "sync": "`server.mode: sync`: rounds; a task still running at the round's deadline is dropped",
    "semi_async": "`server.mode: semi_async`: rounds whose late updates join a later round's aggregation, "
    "weighted by their staleness",
    "async": "`server.mode: async`: no rounds; each update is folded into the model as it arrives",
    "hierarchical": "`hierarchy:`: device -> gateway -> cloud, synchronous rounds at every tier",
}


def matrix() -> str:
    """The page's Markdown: the method x mode table, then the reason for each "no"."""
    builtins = [methods.method(name) for name, _, _ in methods.BUILTINS]
    out = [
        "# Methods and modes",
        "",
        "Generated from the method registry by `python -m iotfl_sim.mode_matrix > docs/methods_and_modes.md`; do not",
        "edit by hand. A method declares the modes it runs in on its options class (`modes`, docs/write_a_method.md);",
        "`iotfl-sim validate` refuses a scenario that asks a method for any other mode, with the reason below.",
        "",
        *(f"- **{mode}**: {_WHAT[mode]}" for mode in MODES),
        "",
        "| method | " + " | ".join(MODES) + " |",
        "|---|" + "---|" * len(MODES),
    ]
    for m in builtins:
        out.append(f"| `{m.name}` | " + " | ".join("yes" if mode in m.config.modes else "no" for mode in MODES) + " |")
    counts = [sum(mode in m.config.modes for m in builtins) for mode in MODES]
    out += [f"| of {len(builtins)} | " + " | ".join(str(c) for c in counts) + " |", "", "## Why not", ""]
    for m in builtins:
        for mode in MODES:
            why = m.config.why_not_in(mode)
            if why is not None:
                out.append(f"- `{m.name}`, {mode}: {why}")
    return "\n".join(out) + "\n"


def main() -> int:
    sys.stdout.write(matrix())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
