"""Is this environment already set up for the checkout at ROOT? (scripts/setup.sh asks before calling pip.)

    python scripts/setup_check.py ROOT EXTRA[,EXTRA...]

Exit 0 when nothing needs installing: ``iotfl-sim`` is installed in editable mode from ROOT, after
ROOT/pyproject.toml last changed, at pyproject's version, with its console script; and every requirement of
``[project] dependencies`` and of the named optional-dependency groups is installed at a version that
satisfies it. Exit 1 otherwise, with one line on stdout naming the first thing missing (setup.sh then runs
pip, which decides what to install). Anything this check cannot judge with certainty (a requirement with an
environment marker or an operator other than ``>=``, a pre-release, Python 3.10 without ``tomllib``) counts as
not satisfied, so in doubt pip runs: a wrong "yes" would leave a broken environment, a wrong "no" costs only
pip's time. Runs on the standard library only (the package may not be importable yet).
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata
from pathlib import Path

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(?:>=\s*([0-9]+(?:\.[0-9]+)*))?\s*$")
RELEASE = re.compile(r"^([0-9]+(?:\.[0-9]+)*)(\.post[0-9]+)?(\+[A-Za-z0-9.]+)?$")


def release(version: str) -> tuple[int, ...] | None:
    """The release numbers of a final (or post) release, local label dropped; None for a pre-release, a dev
    release or anything else this check does not judge."""
    m = RELEASE.match(version.strip())
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def at_least(installed: tuple[int, ...], floor: tuple[int, ...]) -> bool:
    n = max(len(installed), len(floor))
    return installed + (0,) * (n - len(installed)) >= floor + (0,) * (n - len(floor))


def unmet(requirement: str) -> str | None:
    """Why ``requirement`` is not satisfied here, or None when it is."""
    m = REQUIREMENT.match(requirement)
    if not m:
        return f"{requirement!r}: not a plain 'name>=version' requirement"
    name, _extras, floor = m.groups()
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        return f"{name} is not installed"
    have = release(version)
    if have is None:
        return f"{name} {version}: not a final release"
    if floor and not at_least(have, tuple(int(x) for x in floor.split("."))):
        return f"{name} {version} is older than {floor}"
    return None


def own_install(root: Path, project: dict) -> str | None:
    """Why this checkout's own editable install is missing or stale, or None when it is current."""
    try:
        dist = metadata.distribution(project["name"])
    except metadata.PackageNotFoundError:
        return f"{project['name']} is not installed"
    if dist.version != project["version"]:
        return f"{project['name']} {dist.version} is installed, pyproject.toml says {project['version']}"
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if not direct.get("dir_info", {}).get("editable") or direct.get("url") != root.as_uri():
        return f"{project['name']} is not installed in editable mode from {root}"
    files = dist.files or []
    record = next((f for f in files if f.name == "RECORD"), None)
    if record is None:
        return f"{project['name']}'s install has no RECORD"
    if Path(str(record.locate())).stat().st_mtime < (root / "pyproject.toml").stat().st_mtime:
        return "pyproject.toml changed since the last install"
    bin_dir = Path(sys.executable).parent
    for script in project.get("scripts", {}):
        if not (bin_dir / script).exists():
            return f"the {script} command is missing from {bin_dir}"
    return None


def check(root: Path, extras: list[str]) -> str | None:
    """Why ``root`` needs pip (one line), or None when everything is installed."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return "no tomllib to read pyproject.toml (Python 3.10)"
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    groups = project.get("optional-dependencies", {})
    wanted = list(project.get("dependencies", []))
    for extra in extras:
        if extra not in groups:
            return f"pyproject.toml has no optional dependencies [{extra}]"
        wanted += groups[extra]
    for requirement in wanted:
        why = unmet(requirement)
        if why:
            return why
    return own_install(root, project)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/setup_check.py ROOT EXTRA[,EXTRA...]", file=sys.stderr)
        return 2
    why = check(Path(argv[0]).resolve(), [e for e in argv[1].split(",") if e])
    if why:
        print(why)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
