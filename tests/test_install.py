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

import json
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
    every stdlib entry plus an ``EXTERNALLY-MANAGED`` marker, and its site directory (the one its own site.py
    reads: ``site-packages``, or ``dist-packages`` on Debian) holds only a ``.pth`` naming the running
    interpreter's site directories (torch and the rest become importable, as a distribution's packages would
    be). Stdlib entries named in ``without`` are left out. Returns its bin folder.
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
    # the .pth goes where this interpreter's site.py looks: site-packages on python.org builds and pyenv,
    # dist-packages on Debian (whose site.py never reads lib/python3.X/site-packages outside a venv)
    py = bin_dir / "python3"
    sp = _site_dir(py, prefix)
    sp.mkdir(parents=True, exist_ok=True)
    here = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    (sp / "running-tests.pth").write_text("".join(f"{p}\n" for p in here))
    # the marker is in force: pip refuses to install into this Python
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


def _site_dir(py: Path, prefix: Path) -> Path:
    """The first global site directory that the interpreter ``py`` reads under ``prefix``, as its own site.py
    names them (``-S``: nothing is imported or processed while asking)."""
    asked = subprocess.run(
        [str(py), "-S", "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
        capture_output=True, text=True, env=_clean_env(py.parent),
    )
    assert asked.returncode == 0, asked.stderr
    mine = [Path(p) for p in asked.stdout.splitlines() if Path(p).is_relative_to(prefix)]
    assert mine, f"{py} reads no site directory under {prefix}: {asked.stdout}"
    return mine[0]


def _clean_env(bin_dir: Path, skip_torch: bool = True, **extra: str) -> dict[str, str]:
    """This process's environment less any venv or PYTHONPATH, with ``bin_dir`` first on PATH; set-up is told
    not to install PyTorch unless ``skip_torch`` is False."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX", "IOTFL_SETUP_SKIP_TORCH")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(sys.prefix)]
    env["PATH"] = os.pathsep.join([str(bin_dir), *path])
    if skip_torch:
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


@pytest.mark.slow
def test_readme_setup_on_externally_managed_python(managed_python, tmp_path):
    """The stand-in for a distribution's Python, where the machine has none: where it has one, the test on
    that real Python checks all of this and more (same commands, same second set-up), so this one skips
    rather than pay a second set-up (about 25 s of CPU)."""
    if _debian_python()[0] is not None:
        pytest.skip(f"{DEBIAN_PYTHON} is tested for real by test_readme_two_commands_on_the_machines_debian_python")
    clone = _clone(tmp_path)
    env = _clean_env(managed_python)
    _check_quickstart(clone, env, tmp_path)
    assert (clone / ".venv" / "bin" / "python").exists()
    # a second set-up reuses .venv (safe to run again) and, nothing having changed, installs nothing
    again = _sh("bash scripts/setup.sh", clone, env)
    assert "creating" not in again.stdout and "already up to date" in again.stdout, again.stdout


@pytest.mark.slow
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


DEBIAN_PYTHON = Path("/usr/bin/python3")
SMALL_TEST_FILE = "tests/test_aggregate.py"  # 5 tests, about a second: torch, numpy and the package


def _debian_python() -> tuple[Path | None, str]:
    """(/usr/bin/python3, "") where it is a distribution's own Python that PEP 668 marks as externally
    managed (Debian's carries /usr/lib/python3.X/EXTERNALLY-MANAGED), >= 3.10, able to create venvs;
    else (None, why not)."""
    if not DEBIAN_PYTHON.exists():
        return None, f"no {DEBIAN_PYTHON} on this machine"
    probe = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", "import os, sys, sysconfig; print(sys.version_info >= (3, 10)); "
         "print(os.path.isfile(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED'))); "
         "import venv, ensurepip"],
        capture_output=True, text=True, env=_clean_env(DEBIAN_PYTHON.parent),
    )  # fmt: skip
    if probe.stdout.split()[:2] != ["True", "True"]:
        return None, f"{DEBIAN_PYTHON} is not an externally managed Python >= 3.10: {probe.stdout.split()}"
    if probe.returncode != 0:
        return None, f"{DEBIAN_PYTHON} cannot create venvs (python3-venv not installed): {probe.stderr.strip()[-200:]}"
    return DEBIAN_PYTHON, ""


@pytest.mark.slow
def test_readme_two_commands_on_the_machines_debian_python(tmp_path):
    """The README's two commands on this machine's own Debian Python (/usr/bin/python3 with its
    EXTERNALLY-MANAGED marker), first on PATH as it is for a Debian user, in a fresh clone under tmp_path:
    set-up + the quickstart, then set-up + the tests. Nothing is faked: set-up creates .venv from Debian's
    Python and installs whatever that Python lacks (PyTorch, Ray, the test tools: pip takes them from this
    machine's local wheels and index where it has them), so this fails wherever set-up breaks on Debian.

    Two bounds, to keep it cheap: the quickstart runs 1 round (``--set rounds=1``), and the test command runs
    one small file (``bash scripts/in-venv python -m pytest -n 0 tests/test_aggregate.py``) instead of the
    whole suite, which would run this test again inside itself (recursion); ``-n 0`` because five tests
    do not need worker processes (it also proves pytest-xdist was installed: without it ``-n`` is refused).
    The second set-up finds everything installed and must say so without calling pip. Skipped, with the
    reason, where the machine has no such Python. Cost: under 2 minutes of CPU, nearly all of it pip
    unpacking PyTorch and Ray into .venv (measured: 103 s user+sys; 122 s with pip byte-compiling, before
    PIP_COMPILE=0 below; 14 minutes of wall time on the shared 2-core machine at a load of 7-11).
    """
    debian, why = _debian_python()
    if debian is None:
        pytest.skip(why)
    clone = _clone(tmp_path)
    # PIP_COMPILE=0 (pip's --no-compile; PIP_NO_COMPILE=1 would turn compiling on): pip skips byte-compiling
    # what it installs, two thirds of PyTorch's install CPU time (33 s against 12 s measured here); Python
    # compiles the modules the commands import as it imports them
    env = _clean_env(debian.parent, skip_torch=False, PIP_COMPILE="0")
    had_torch = subprocess.run([str(debian), "-c", "import torch"], capture_output=True, env=env).returncode == 0
    out = tmp_path / "runs"
    first = _sh("bash scripts/setup.sh && " + QUICKSTART.format(out=out), clone, env, timeout=1800)
    assert "creating" in first.stdout and "run: " in first.stdout and "accuracy" in first.stdout, first.stdout
    assert len(list(out.glob("quickstart-*"))) == 1
    cfg = (clone / ".venv" / "pyvenv.cfg").read_text()
    assert f"home = {debian.parent}" in cfg and "include-system-site-packages = true" in cfg, cfg
    # the venv runs the clone's code on Debian's interpreter, and PyTorch came from set-up where Debian has none
    # (found, not imported: the quickstart above ran it, and an import here would compile its modules again)
    which = _sh("bash scripts/in-venv python -c 'import sys, iotfl_sim, importlib.util; "
                "print(sys.base_prefix, iotfl_sim.__file__, importlib.util.find_spec(\"torch\").origin)'", clone, env)
    base, package, torch_file = which.stdout.split()
    assert base == "/usr" and package == str(clone / "iotfl_sim" / "__init__.py")
    assert had_torch or torch_file.startswith(str(clone / ".venv")), torch_file
    second = _sh(f"bash scripts/setup.sh && bash scripts/in-venv python -m pytest -n 0 -p no:cacheprovider {SMALL_TEST_FILE}",
                 clone, env)
    assert "already up to date" in second.stdout, second.stdout
    assert " passed" in second.stdout and "failed" not in second.stdout and "error" not in second.stdout, second.stdout


# ---------------------------------------------------------------- scripts/setup_check.py, by hand


def _setup_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("setup_check", ROOT / "scripts" / "setup_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_setup_check_compares_release_numbers_not_strings():
    sc = _setup_check()
    assert sc.release("2.13.0+cpu") == (2, 13, 0) and sc.release("1.26.4.post1") == (1, 26, 4)
    assert sc.release("2.0.0rc1") is None and sc.release("2.1.dev3") is None  # in doubt: pip decides
    assert sc.at_least((10,), (9, 9)) and not sc.at_least((2, 1, 9), (2, 2))  # "10" < "9" as strings
    assert sc.at_least((1, 24), (1, 24, 0)) and sc.at_least((2, 13, 0), (2, 2))
    assert sc.unmet("pytest>=1") is None and sc.unmet("PyTest >= 1.0") is None  # names are normalised
    assert "older than 999" in sc.unmet("pytest>=999")
    assert "not installed" in sc.unmet("no-such-package-here>=1")
    assert "not a plain" in sc.unmet("pytest>=1; python_version < '3.99'")
    assert "not a plain" in sc.unmet("pytest==8.0")


def test_setup_check_wants_an_editable_install_newer_than_pyproject(tmp_path, monkeypatch):
    """A fake installed distribution on sys.path: current, then each way it can be out of date."""
    sc = _setup_check()
    root, site_dir = tmp_path / "proj", tmp_path / "site"
    info = site_dir / "fake_proj-1.0.dist-info"
    info.mkdir(parents=True)
    root.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-proj\nVersion: 1.0\n")
    (info / "RECORD").write_text("fake_proj-1.0.dist-info/RECORD,,\n")
    (info / "direct_url.json").write_text(json.dumps({"url": root.as_uri(), "dir_info": {"editable": True}}))
    pyproject = root / "pyproject.toml"
    pyproject.write_text('[project]\nname = "fake-proj"\nversion = "1.0"\ndependencies = ["pytest>=1"]\n'
                         '[project.optional-dependencies]\ndev = ["no-such-package-here>=1"]\n')
    installed = (info / "RECORD").stat().st_mtime
    os.utime(pyproject, (installed - 10, installed - 10))
    monkeypatch.syspath_prepend(str(site_dir))
    project = {"name": "fake-proj", "version": "1.0"}
    assert sc.own_install(root, project) is None
    assert sc.check(root, []) is None
    assert "no-such-package-here is not installed" in sc.check(root, ["dev"])
    assert "no optional dependencies [test]" in sc.check(root, ["test"])
    assert "pyproject.toml says 1.1" in sc.own_install(root, {**project, "version": "1.1"})
    assert "not installed in editable mode from" in sc.own_install(tmp_path, project)
    assert "command is missing" in sc.own_install(root, {**project, "scripts": {"no-such-command-here": "m:f"}})
    os.utime(pyproject, (installed + 10, installed + 10))
    assert sc.own_install(root, project) == "pyproject.toml changed since the last install"


def test_every_slow_entry_names_a_test():
    """tests/conftest.py's SLOW_TESTS and FULL_TIER name tests by file and function: a renamed test must not
    silently fall back into the fast subset or the landing run (nor an entry outlive its test)."""
    import re

    from conftest import FULL_TIER, SLOW_TESTS, _is_slow

    # node ids whose parameters hold a "/" (a path in a command) are matched on the file and test too
    assert _is_slow("tests/test_docs_all_examples.py::test_scenario_header_command_works[x.yaml:8:run scenarios/x.yaml]")
    assert _is_slow("tests/test_models.py::test_costs_grow_with_rate[mobilenetv2]")
    assert not _is_slow("tests/test_models.py::test_costs_grow_with_rate[conv]")
    assert _is_slow("tests/test_e2e.py::test_runs_never_overwrite") and not _is_slow("tests/test_quantize.py::test_x")
    # under --dist loadgroup xdist appends the group: the Ray test ran in the fast subset while this was missed
    assert _is_slow("tests/test_executors.py::test_ray_executor_gives_the_inline_bits@ray")
    assert _is_slow("tests/test_models.py::test_costs_grow_with_rate[mobilenetv2@x]")
    for entries in (SLOW_TESTS, FULL_TIER):
        assert len(set(entries)) == len(entries), [e for e in entries if entries.count(e) > 1]
    for entry in SLOW_TESTS + FULL_TIER:
        file, _, test = entry.partition("::")
        path = ROOT / "tests" / file
        assert path.is_file(), entry
        if test:
            assert re.search(rf"^def {re.escape(test.split('[')[0])}\(", path.read_text(), flags=re.M), entry


def test_a_full_tier_test_named_on_the_command_line_runs_without_full(monkeypatch):
    """The landing run leaves the full tier out, except a test its command line names (``path::test``, with or
    without its parameters): asking for one by name and getting "1 deselected" would be a trap."""
    from types import SimpleNamespace

    from conftest import _named_on_the_command_line

    monkeypatch.chdir(ROOT)  # a relative argument is relative to where pytest was started
    path = ROOT / "tests" / "test_resume.py"
    item = SimpleNamespace(path=path, nodeid="tests/test_resume.py::test_every_method_resumes_to_the_same_numbers[feddf]")

    def named(*args: str) -> bool:
        return _named_on_the_command_line(item, SimpleNamespace(args=list(args)))

    assert named(f"{path}::test_every_method_resumes_to_the_same_numbers")
    assert named("tests/test_resume.py::test_every_method_resumes_to_the_same_numbers[feddf]")
    assert not named(str(path))  # the file alone: the tier decides
    assert not named("tests/test_resume.py::test_every_method_resumes_to_the_same_numbers[fedavg]")
    assert not named("tests/test_thread_executor.py::test_every_method_resumes_to_the_same_numbers")


def test_the_landing_run_leaves_the_full_tier_out_and_full_keeps_it(monkeypatch):
    """FULL_TIER's entries and the ``full`` mark are deselected (and reported so) without --full, kept with it;
    every test left is marked slow or not as before."""
    from types import SimpleNamespace

    import conftest

    monkeypatch.chdir(ROOT)

    class Item:
        def __init__(self, nodeid: str, marks: tuple[str, ...] = ()):
            self.nodeid, self.path, self.marks = nodeid, ROOT / nodeid.partition("::")[0], set(marks)

        def get_closest_marker(self, name):
            return name if name in self.marks else None

        def add_marker(self, mark):
            self.marks.add(mark.name)

    def collect(full: bool) -> tuple[list[str], list[str]]:
        items = [Item("tests/test_docs_all_examples.py::test_scenario_header_variant_works[x]"),
                 Item("tests/test_resume.py::test_every_method_resumes_to_the_same_numbers[feddf]", ("full",)),
                 Item("tests/test_resume.py::test_every_method_resumes_to_the_same_numbers[fedavg]"),
                 Item("tests/test_quantize.py::test_x")]
        dropped: list[str] = []
        config = SimpleNamespace(args=["tests"], getoption=lambda name: full,
                                 hook=SimpleNamespace(pytest_deselected=lambda items: dropped.extend(i.nodeid for i in items)))
        conftest.pytest_collection_modifyitems(config, items)
        return [i.nodeid.rsplit("::", 1)[1] for i in items], [d.rsplit("::", 1)[1] for d in dropped]

    kept, dropped = collect(full=False)
    assert dropped == ["test_scenario_header_variant_works[x]", "test_every_method_resumes_to_the_same_numbers[feddf]"]
    assert sorted(kept) == ["test_every_method_resumes_to_the_same_numbers[fedavg]", "test_x"]
    kept, dropped = collect(full=True)
    assert dropped == [] and len(kept) == 4
