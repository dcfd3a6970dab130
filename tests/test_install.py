"""The README's set-up commands on a fresh clone: on a PEP 668 ("externally managed") Python, and inside an
active virtual environment.

Each test clones this checkout's HEAD (committed code only) into a temporary folder and runs
``bash scripts/setup.sh`` there, then the README's quickstart command through ``scripts/in-venv`` with
``--set rounds=1`` to bound its time. No test downloads PyTorch: the throwaway Python prefix below sees the
packages of the Python running the tests (through a ``.pth`` file), and setup.sh's venv reuses them through
``--system-site-packages``; ``IOTFL_SETUP_SKIP_TORCH=1`` is set as well, so a test never reaches for the
multi-GB download. About a minute each on 2 loaded cores (most of it pip's editable build).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.install,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="set-up scripts are tested on Linux"),
    pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None, reason="needs git and bash"),
    pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout"),
]


def _real_python() -> Path:
    """The base interpreter's binary (not a venv's link to it)."""
    return Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))


@pytest.fixture(scope="module")
def managed_python(tmp_path_factory) -> Path:
    return _managed_prefix(tmp_path_factory.mktemp("managed-python"))


def _managed_prefix(prefix: Path, without: tuple[str, ...] = ()) -> Path:
    """A throwaway Python prefix that PEP 668 marks as externally managed, like Debian 12's /usr.

    bin/python3.X is a copy of the base interpreter (so its prefix is this folder), lib/python3.X links to
    every stdlib entry plus an ``EXTERNALLY-MANAGED`` marker, and its site-packages holds only a ``.pth``
    naming the running interpreter's site-packages (torch and the rest become importable, as a distribution's
    packages would be). Stdlib entries named in ``without`` are left out. Returns its bin folder.
    """
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    stdlib = Path(sysconfig.get_paths(vars={"installed_base": sys.base_prefix, "base": sys.base_prefix})["stdlib"])
    bin_dir = prefix / "bin"
    bin_dir.mkdir(parents=True)
    shutil.copy2(_real_python(), bin_dir / ver)
    (bin_dir / "python3").symlink_to(ver)
    lib = prefix / "lib" / ver
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name not in ("site-packages", "dist-packages", "EXTERNALLY-MANAGED", *without):
            (lib / entry.name).symlink_to(entry)
    (lib / "EXTERNALLY-MANAGED").write_text(
        "[externally-managed]\nError=This test Python is externally managed (PEP 668): use a venv.\n"
    )
    sp = lib / "site-packages"
    sp.mkdir()
    here = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    (sp / "running-tests.pth").write_text("".join(f"{p}\n" for p in here))
    # the marker is in force: pip refuses to install into this Python
    py = bin_dir / "python3"
    probe = subprocess.run(
        [str(py), "-c", "import sys, sysconfig, os; print(sys.prefix); "
         "print(os.path.isfile(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"],
        capture_output=True, text=True, env=_clean_env(bin_dir),
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == [str(prefix), "True"], probe.stdout
    refused = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-index", "six"], capture_output=True, text=True, env=_clean_env(bin_dir)
    )
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stdout + refused.stderr
    return bin_dir


def _clean_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(sys.prefix)]
    env["PATH"] = os.pathsep.join([str(bin_dir), *path])
    env["IOTFL_SETUP_SKIP_TORCH"] = "1"
    env.update(extra)
    return env


def _clone(tmp_path: Path) -> Path:
    dest = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    return dest


def _sh(cmd: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    return done


QUICKSTART = "bash scripts/in-venv iotfl-sim run scenarios/quickstart.yaml --set rounds=1 --quiet --out {out}"


def _check_quickstart(clone: Path, env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "runs"
    done = _sh("bash scripts/setup.sh && " + QUICKSTART.format(out=out), clone, env)
    assert "run: " in done.stdout and "accuracy" in done.stdout, done.stdout
    assert len(list(out.glob("quickstart-*"))) == 1
    # the launcher runs the clone's code, from any folder
    which = _sh(f"bash {clone}/scripts/in-venv python -c 'import iotfl_sim; print(iotfl_sim.__file__)'", tmp_path, env)
    assert which.stdout.strip() == str(clone / "iotfl_sim" / "__init__.py")


def test_readme_setup_on_externally_managed_python(managed_python, tmp_path):
    clone = _clone(tmp_path)
    env = _clean_env(managed_python)
    _check_quickstart(clone, env, tmp_path)
    assert (clone / ".venv" / "bin" / "python").exists()
    # a second set-up reuses .venv (safe to run again)
    again = _sh("bash scripts/setup.sh", clone, env)
    assert "creating" not in again.stdout


def test_readme_setup_inside_an_active_venv(managed_python, tmp_path):
    clone = _clone(tmp_path)
    venv = tmp_path / "myenv"
    subprocess.run([str(managed_python / "python3"), "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, env=_clean_env(managed_python))
    env = _clean_env(venv / "bin", VIRTUAL_ENV=str(venv))
    _check_quickstart(clone, env, tmp_path)
    assert not (clone / ".venv").exists()  # installed into the active venv, not a new one
    # a developer inside the venv types the commands directly
    direct = _sh("iotfl-sim profiles list && python3 -m pytest --version", clone, env)
    assert "raspberry_pi_4b" in direct.stdout


def test_setup_names_the_debian_package_when_venv_is_missing(tmp_path):
    """Debian's python3 without python3-venv has no ensurepip: setup says what to install, leaves no .venv."""
    bin_dir = _managed_prefix(tmp_path / "py", without=("ensurepip",))
    clone = _clone(tmp_path)
    done = subprocess.run(["bash", "scripts/setup.sh"], cwd=clone, env=_clean_env(bin_dir), capture_output=True, text=True)
    assert done.returncode == 1 and "apt-get install python3-venv" in done.stderr, done.stderr
    assert not (clone / ".venv").exists()


def test_ci_runs_the_readme_test_command_verbatim():
    import re

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", readme, flags=re.S)
    assert block, "README lost its two commands"
    lines = [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]
    assert len(lines) == 2 and "quickstart.yaml" in lines[0]
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert lines[1] in ci
