#!/usr/bin/env bash
# One-time set-up on a fresh machine: PyTorch (the CPU build where no CUDA GPU is present), then this
# package in editable mode with its test tools. Safe to run again: when everything is installed already it
# says so in a few seconds, without calling pip (scripts/setup_check.py).
#
# Where it installs (the same place scripts/in-venv runs commands from):
#   - the active virtual environment, if one is active ($VIRTUAL_ENV);
#   - otherwise a project-local .venv, created here with `python3 -m venv --system-site-packages` (and
#     --without-pip where the system's pip, which the venv then uses, is >= 21.3).
# A venv is needed because Debian 12, Ubuntu 24.04 and other PEP 668 systems refuse `pip install` into
# their own Python ("externally-managed-environment"). --system-site-packages lets the venv reuse a
# PyTorch (or anything else) already installed for that Python instead of downloading it again; pip
# installs whatever is missing or too old into .venv and never touches the system's packages.
#
# Environment: PYTHON (the interpreter that creates .venv; default python3), IOTFL_ISOLATED_VENV=1
# (create .venv without the system's site-packages), IOTFL_SETUP_SKIP_TORCH=1 (never install PyTorch
# here: for tests that provide it another way).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
  PY="$VIRTUAL_ENV/bin/python"
  echo "setup: using the active virtual environment $VIRTUAL_ENV"
else
  if [[ ! -x "$ROOT/.venv/bin/python" ]]; then
    BASE=${PYTHON:-python3}
    if ! command -v "$BASE" >/dev/null 2>&1; then
      echo "setup: $BASE not found; install Python >= 3.10 (Debian/Ubuntu: apt-get install python3 python3-venv)" >&2
      exit 1
    fi
    if ! "$BASE" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
      echo "setup: $("$BASE" -V 2>&1) is too old; Python >= 3.10 is needed (set PYTHON=python3.X to pick another)" >&2
      exit 1
    fi
    if ! "$BASE" -c 'import venv, ensurepip' 2>/dev/null; then
      ver=$("$BASE" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      echo "setup: $BASE cannot create virtual environments (no venv/ensurepip module);" \
        "on Debian/Ubuntu: sudo apt-get install python3-venv (or python$ver-venv), then run this again" >&2
      exit 1
    fi
    site=--system-site-packages
    [[ "${IOTFL_ISOLATED_VENV:-}" == 1 ]] && site=
    # A venv that sees the system's site-packages also sees the system's pip, which installs into the venv
    # (and never uninstalls the system's copy of a package it upgrades): where that pip can do an editable
    # install of a pyproject package (>= 21.3), the venv is made without its own (ensurepip: 6-7 s of CPU).
    own_pip=""
    if [[ -z $site ]] || ! "$BASE" - <<'PYCODE' 2>/dev/null; then
import sys
from importlib import metadata
sys.exit(tuple(int(x) for x in metadata.version("pip").split(".")[:2]) < (21, 3))
PYCODE
      own_pip=1
    fi
    echo "setup: creating $ROOT/.venv ($("$BASE" -V 2>&1)${site:+, seeing the system site-packages}${own_pip:-, using its pip})"
    rm -rf "$ROOT/.venv"
    if ! "$BASE" -m venv $site ${own_pip:---without-pip} "$ROOT/.venv"; then
      rm -rf "$ROOT/.venv"
      echo "setup: $BASE -m venv failed; on Debian/Ubuntu: sudo apt-get install python3-venv, then run this again" >&2
      exit 1
    fi
  fi
  PY="$ROOT/.venv/bin/python"
  echo "setup: using $ROOT/.venv"
fi

T0=$SECONDS
NEED_TORCH=0
if [[ "${IOTFL_SETUP_SKIP_TORCH:-}" != 1 ]]; then
  # A torch older than the package's floor (e.g. a distribution's) counts as missing, or pip would replace
  # it with a plain `torch` from the index below. Its installed metadata answers in a fraction of a second
  # (importing torch takes seconds); a torch without metadata is imported to learn its version.
  if ! "$PY" - <<'PYCODE' 2>/dev/null; then
import sys
from importlib import metadata
try:
    version = metadata.version("torch")
except metadata.PackageNotFoundError:
    import torch
    version = torch.__version__
sys.exit(tuple(int(x) for x in version.split("+")[0].split(".")[:2]) < (2, 2))
PYCODE
    NEED_TORCH=1
  fi
fi
# Nothing to do when everything pyproject.toml asks for is installed already (scripts/setup_check.py says
# exactly what it checks): a re-run then takes seconds instead of pip's editable build. Where Ray could not
# be installed for this Python before (the marker below), the test tools alone count as complete.
NO_RAY="$(dirname "$PY")/../.iotfl-sim-no-ray"
# pip byte-compiles the packages it installs, but not this editable one: every process then compiles the
# modules it imports (about half a second of CPU) wherever bytecode is not written back
# (PYTHONDONTWRITEBYTECODE=1, as some container images set). Compiling here takes under a second and, run
# again, only recompiles what changed since.
"$PY" -m compileall -q "$ROOT/iotfl_sim" >/dev/null 2>&1 || true
if [[ $NEED_TORCH == 0 ]]; then
  if why=$("$PY" scripts/setup_check.py "$ROOT" dev,ray); then
    echo "setup: already up to date (nothing installed; $((SECONDS - T0)) s)"
    exit 0
  elif [[ -e "$NO_RAY" ]] && "$PY" scripts/setup_check.py "$ROOT" dev >/dev/null; then
    echo "setup: already up to date, without Ray (no wheel for this Python at the last install; remove $NO_RAY to retry)"
    exit 0
  fi
  echo "setup: $why; installing"
fi

# First install (or something changed): pip shows its progress (downloads, then what it installs).
# pip byte-compiles what it installs on one core, most of its CPU time (PyTorch: 21 of 33 s): it installs
# without compiling (--no-compile), and compileall does it afterwards, PyTorch's part in the background while
# pip installs the rest, then the remainder on every core (measured: 46 s for PyTorch and Ray with pip
# compiling, 38 s installing then compiling in turn, less with the overlap).
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
COMPILING=""
if [[ $NEED_TORCH == 1 ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    echo "setup: [1/2] PyTorch, the index's default build (a CUDA GPU is present; a download of a few GB)"
    "$PY" -m pip install --no-compile torch
  else
    # A plain `torch` requirement may pull a multi-GB CUDA build: take the CPU one.
    echo "setup: [1/2] PyTorch, CPU build torch==2.13.0 (about 200 MB; 1-2 minutes from a local wheel on 2 cores)"
    "$PY" -m pip install --no-compile torch==2.13.0
  fi
  if [[ ! "${PIP_COMPILE:-}" =~ ^(0|false|no|off)$ ]]; then
    "$PY" -m compileall -q -j 1 "$SITE/torch" >/dev/null 2>&1 &
    COMPILING=$!
  fi
fi
# ray: the Ray executor is tested when Ray is installed, so the test set-up installs it; where Ray has no
# wheel for this Python, everything else is installed and the Ray tests skip themselves.
# pip builds the editable package in a throwaway environment it first installs setuptools into (about 5 s of
# CPU, a third of this step's own work); a setuptools in the venv that can build it alone (>= 70.1, which
# writes wheels without the `wheel` package; pyproject asks >= 68) does the same build without that.
NO_ISOLATION=""
if "$PY" - <<'PYCODE' 2>/dev/null; then
import sys
import setuptools
try:
    sys.exit(tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (70, 1))
except ValueError:
    sys.exit(1)
PYCODE
  NO_ISOLATION="--no-build-isolation"
fi
echo "setup: [2/2] iotfl-sim (editable), its dependencies, its test tools and Ray"
if "$PY" -m pip install --no-compile $NO_ISOLATION -e ".[dev,ray]"; then
  rm -f "$NO_RAY"
else
  echo "setup: installing with Ray failed; installing without it (the Ray executor's tests will skip)" >&2
  "$PY" -m pip install --no-compile $NO_ISOLATION -e ".[dev]"
  touch "$NO_RAY"
fi
if [[ -n $COMPILING ]]; then wait "$COMPILING" || true; fi
case "${PIP_COMPILE:-}" in
  0 | false | no | off) ;;  # told pip not to compile (pip's own setting): neither does set-up
  *)
    echo "setup: byte-compiling what was installed"
    # Ray's libraries on top of its core (RLlib, Serve, Tune, Train, Data, LLM, Workflow: 1,800 of its 2,600
    # modules) and the installers (pip, setuptools) are never imported by the simulator or its tests: left to
    # compile on first import, should anything import them
    "$PY" -m compileall -q -j 0 -x '/(ray/(rllib|serve|tune|train|data|llm|workflow)|pip|setuptools)/' "$SITE" \
      >/dev/null 2>&1 || true
    ;;
esac
echo "setup: done in $((SECONDS - T0)) s; run commands through it with: bash scripts/in-venv iotfl-sim ... | bash scripts/in-venv python -m pytest"
