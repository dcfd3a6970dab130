"""How many cores this process may really use: its CPU affinity, capped by its cgroup's CPU quota.

``os.cpu_count()`` counts the machine's cores. A container (Docker ``--cpus``, Kubernetes CPU limits, a
systemd slice) or ``taskset`` gives a process fewer: one worker per counted core would then oversubscribe
the quota and run slower than fewer workers. The quota is read from cgroup v2 (``cpu.max``) or v1
(``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``) along the process's cgroup path, the tightest level winning,
and rounded down (1.5 CPUs of quota keep one worker busy without throttling; never fewer than one).

A sweep that runs N runs at once on this machine tells each of them so (``SHARE_ENV``, set by
``study.dispatch``): each then counts its share, the usable cores divided by N, so that N runs with
``executor: auto`` do not start N x cores workers. ``Cores.unshared`` is the count before the share, what a run
alone gets: ``exec.auto`` decides between the GPU and the host by it, so that a run's numbers never depend on
whether it runs in a sweep.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
SHARE_ENV = "IOTFL_CORES_SHARE"  # how many runs share this machine's cores (a sweep's parallel runs)


@dataclass(frozen=True)
class Cores:
    usable: int  # what to size a pool by
    affinity: int  # cores the scheduler may run this process on
    quota: float | None  # cgroup CPU quota in cores; None: no limit
    shared: int = 1  # runs sharing them (SHARE_ENV)

    @property
    def unshared(self) -> int:
        """The usable cores before the sweep's share: what this machine gives a run alone."""
        return _capped(self.affinity, self.quota)

    def why(self) -> str:
        limit = "no cgroup CPU limit" if self.quota is None else f"cgroup CPU limit {self.quota:g}"
        share = f", shared by {self.shared} parallel runs" if self.shared > 1 else ""
        return f"{self.usable} usable core{'s' * (self.usable != 1)} (affinity {self.affinity}, {limit}{share})"


def _shared() -> int:
    try:
        return max(1, int(os.environ.get(SHARE_ENV, "1")))
    except ValueError:  # not ours to judge: an unreadable share counts as none
        return 1


def _affinity() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _levels(root: Path, rel: str) -> list[Path]:
    """``root/rel`` and every folder above it up to ``root``: a limit anywhere on the path applies."""
    out = [root]
    for part in [p for p in rel.split("/") if p]:
        out.append(out[-1] / part)
    return out


def _v2_quota(root: Path, rel: str) -> float | None:
    limits = []
    for level in _levels(root, rel):
        text = _read(level / "cpu.max")
        if text is None:
            continue
        quota, _, period = text.partition(" ")
        if quota != "max" and period:
            try:
                limits.append(int(quota) / int(period))
            except (ValueError, ZeroDivisionError):
                continue
    return min(limits) if limits else None


def _v1_quota(root: Path, rel: str) -> float | None:
    limits = []
    for level in _levels(root, rel):
        quota, period = _read(level / "cpu.cfs_quota_us"), _read(level / "cpu.cfs_period_us")
        try:
            q, p = int(quota or ""), int(period or "")
        except ValueError:
            continue
        if q > 0 and p > 0:
            limits.append(q / p)
    return min(limits) if limits else None


def cgroup_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in cores (None: no limit, or no cgroup to read)."""
    text = _read(proc_cgroup)
    if text is None:
        return None
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, rel = rest.partition(":")
        if hier == "0" and controllers == "":  # cgroup v2 (unified)
            quota = _v2_quota(root, rel)
        elif "cpu" in controllers.split(","):  # cgroup v1, the cpu controller's hierarchy
            quota = _v1_quota(root / controllers, rel)
            if quota is None and (root / "cpu").is_dir() and controllers != "cpu":
                quota = _v1_quota(root / "cpu", rel)
        else:
            continue
        if quota is not None:
            return quota
    return None


def _capped(affinity: int, quota: float | None) -> int:
    """``affinity`` capped by the cgroup ``quota`` rounded down (see the module docstring); at least 1."""
    return affinity if quota is None else max(1, min(affinity, math.floor(quota + 1e-9)))


def available_cores(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> Cores:
    """The cores this process may keep busy: affinity, capped by the cgroup quota (rounded down), divided among
    the runs sharing them (``SHARE_ENV``); at least 1."""
    affinity = _affinity()
    quota = cgroup_quota(root, proc_cgroup)
    shared = _shared()
    return Cores(max(1, _capped(affinity, quota) // shared), affinity, quota, shared)
