"""``iotfl-sim data download NAME``: fetch a dataset's official files into the layout :mod:`.data` reads.

Every file is checked against its publisher's checksum before it is kept (table :data:`SOURCES`, with the
source of each value). A transfer is written to ``<file>.part`` and resumed with an HTTP ``Range`` request
after a dropped connection (within the same command, and by running the command again). A file whose
checksum differs is moved aside to ``<file>.corrupt`` and the command fails. Archives are extracted into a
temporary folder under the root (members with absolute paths, ``..``, links or device files are refused)
and moved into place only once complete. A dataset that already loads is never touched.

Base URLs: the official ones, or ``<mirror>/<dataset>/<file>`` with ``--mirror URL`` / ``$IOTFL_DATA_MIRROR``.

Bounded and clean: an error that retrying will not cure (a host name that does not resolve, a refused
connection, an HTTP error) ends the command at once; a dropped or stalled transfer is retried (``RETRIES``),
but a server that sends nothing for ``timeout_s`` twice in a row is given up, and the whole command stops at
``deadline_s``. A failed command removes the folders it made that hold nothing, and mentions resuming only when
a ``.part`` with bytes in it is there to resume from (an empty one is removed).

Two datasets have no published checksums, which the command says when it runs:

- UCI HAR: UCI publishes none for ``UCI HAR Dataset.zip``. The zip's own CRC-32 of every member is checked,
  and the extracted train/test label files must hold the official 7,352 / 2,947 windows.
- FEMNIST: LEAF (https://github.com/TalwalkarLab/leaf) publishes no files, only the scripts that generate its
  JSON from NIST SD19, so there is no official download and no checksum. ``data download femnist --mirror URL``
  fetches LEAF-generated JSON from a mirror you trust: ``<mirror>/femnist/files.txt`` lists the files
  (``train/NAME.json`` and ``test/NAME.json``, one a line); each is checked to parse as LEAF JSON whose
  ``num_samples`` agree with the ``x``/``y`` lengths of every user.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import socket
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from iotfl_sim.fl.data import datasets as _data

MIRROR_ENV = "IOTFL_DATA_MIRROR"
CHUNK = 1 << 16
RETRIES = 5
TIMEOUT_S = 30.0  # a read that waits longer has stalled
DEADLINE_S = 3600.0  # the whole command


class DownloadError(Exception):
    """A download failed or a file did not verify; the message says what to do."""


@dataclass(frozen=True)
class RemoteFile:
    name: str  # file name at the base URL (and of the downloaded file)
    md5: str | None  # published MD5, or None where the publisher gives none


@dataclass(frozen=True)
class Source:
    base: str | None  # official base URL (None: no official download, a mirror is required)
    files: tuple[RemoteFile, ...]
    kind: str  # "files": saved into `folder` as they are | "tar" | "zip": extracted into the root
    folder: str  # the folder under the root that the loader reads (for archives: the archive's top folder)
    checksums: str  # where the checksums come from


_IDX_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
              "t10k-labels-idx1-ubyte.gz")


def _idx_source(base: str, md5s: tuple[str, str, str, str], folder: str, checksums: str) -> Source:
    """MNIST-style: the four idx files, saved as they are into ``folder`` (MD5s in ``_IDX_FILES`` order)."""
    return Source(base, tuple(map(RemoteFile, _IDX_FILES, md5s)), "files", folder, checksums)


SOURCES: dict[str, Source] = {
    # yann.lecun.com often refuses downloads; PyTorch's mirror serves the same files (same MD5s).
    "mnist": _idx_source(
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        ("f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
         "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c"),
        "mnist",
        "MD5s as listed by torchvision.datasets.MNIST.resources for the files of http://yann.lecun.com/exdb/mnist/",
    ),
    "fashion_mnist": _idx_source(
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
         "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310"),
        "fashion_mnist",
        "MD5s published in the README of https://github.com/zalandoresearch/fashion-mnist",
    ),
    "cifar10": Source(
        "https://www.cs.toronto.edu/~kriz/",
        (RemoteFile("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),),
        "tar", "cifar-10-batches-py",
        "MD5 published on https://www.cs.toronto.edu/~kriz/cifar.html",
    ),
    "cifar100": Source(
        "https://www.cs.toronto.edu/~kriz/",
        (RemoteFile("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"),),
        "tar", "cifar-100-python",
        "MD5 published on https://www.cs.toronto.edu/~kriz/cifar.html",
    ),
    "har": Source(
        "https://archive.ics.uci.edu/ml/machine-learning-databases/00240/",
        (RemoteFile("UCI HAR Dataset.zip", None),),
        "zip", "UCI HAR Dataset",
        "none published by UCI: the zip's CRC-32s and the official window counts (7,352 train / 2,947 test) are checked",
    ),
    "femnist": Source(
        None, (), "leaf", "femnist",
        "none: LEAF publishes generator scripts, not files; every JSON file must parse as LEAF output whose "
        "num_samples match its x and y",
    ),
}
# Extracted archives land under the loader's dataset folder (HAR: uci_har/UCI HAR Dataset/).
_PARENT = {"har": "uci_har"}
_HAR_COUNTS = {"train": 7352, "test": 2947}


def download(
    name: str,
    root: str | Path | None,
    *,
    mirror: str | None = None,
    checksums: Mapping[str, str | None] | None = None,
    log: Callable[[str], None] = print,
    retry_wait_s: float = 1.0,
    timeout_s: float = TIMEOUT_S,
    deadline_s: float = DEADLINE_S,
) -> Path:
    """Download dataset ``name`` under ``root`` (else ``$IOTFL_DATA``); returns the dataset's folder.

    ``checksums`` overrides the MD5 of files by name (tests serving stand-in files); ``mirror`` (else
    ``$IOTFL_DATA_MIRROR``) replaces the official base URL by ``<mirror>/<name>/``. ``timeout_s``: the
    longest a read may wait for a byte; ``deadline_s``: the whole command.
    """
    key = _data.canonical_name(name)
    if key == "digits":
        raise DownloadError("digits ships inside scikit-learn: nothing to download")
    resolved = _data.resolve_root(root)
    if resolved is None:
        raise DownloadError(f"give --root DIR or set {_data.ENV_VAR} to the folder the datasets go to")
    if not (timeout_s > 0 and deadline_s > 0):  # also refuses NaN
        raise DownloadError(f"--timeout and --deadline must be > 0 seconds (got {timeout_s:g} and {deadline_s:g})")
    clock = _Clock(time.monotonic() + deadline_s, deadline_s, timeout_s, retry_wait_s, log)
    made: list[Path] = []
    try:
        return _download(key, resolved, mirror, checksums, log, clock, made)
    except BaseException:
        _remove_empty(made)
        raise


def _mkdir(path: Path, made: list[Path]) -> None:
    """``path.mkdir(parents=True)``, noting in ``made`` every folder it creates."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    made.extend(reversed(missing))


def _remove_empty(made: list[Path]) -> None:
    """After a failure: remove the folders this command made, innermost first, where they hold nothing."""
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:  # not empty (a .part to resume from), or gone
            pass


def _download(key: str, resolved: Path, mirror, checksums, log, clock: _Clock, made: list[Path]) -> Path:
    _mkdir(resolved, made)
    src = SOURCES[key]
    target = resolved / _PARENT.get(key, "") / src.folder
    try:
        _data.check_files(key, resolved)
    except _data.DatasetError:
        pass
    else:
        log(f"{key}: already present under {resolved}; nothing downloaded (remove it first to download again)")
        return target
    mirror = mirror or os.environ.get(MIRROR_ENV) or None
    if mirror:
        base = mirror.rstrip("/") + f"/{key}/"
    elif src.base is None:
        raise DownloadError(
            f"{key}: there is no official download ({src.checksums}); give --mirror URL (or {MIRROR_ENV}) "
            f"serving <URL>/{key}/files.txt and the files it lists, or generate the files with LEAF"
        )
    else:
        base = src.base
    log(f"{key}: checksums: {src.checksums}")
    table = {f.name: f.md5 for f in src.files}
    if checksums:
        table.update(checksums)
    if src.kind == "files":
        _mkdir(target, made)
        for f in src.files:
            _fetch_verified(base + urllib.parse.quote(f.name), target / f.name, table.get(f.name), log, clock)
    elif src.kind in ("tar", "zip"):
        if target.exists():
            raise DownloadError(
                f"{key}: {target} exists but does not hold the complete dataset; move it away and run again "
                "(nothing is overwritten)"
            )
        staging = resolved / ".iotfl-downloads"
        _mkdir(staging, made)
        f = src.files[0]
        archive = staging / f.name
        _fetch_verified(base + urllib.parse.quote(f.name), archive, table.get(f.name), log, clock)
        _extract(archive, src.kind, src.folder, target, key)
        archive.unlink()
        try:
            staging.rmdir()
        except OSError:
            pass
        if key == "har":
            _check_har(target)
    else:  # LEAF json from a mirror
        _fetch_leaf(base, target, key, table, log, clock, made)
    _data.check_files(key, resolved)
    log(f"{key}: ready in {target}")
    return target


# ---------------------------------------------------------------------------------------------
# one file: resumable transfer, then checksum


def md5_of(path: Path) -> str:
    h = hashlib.md5()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fetch_verified(url: str, dest: Path, md5: str | None, log, clock: _Clock) -> None:
    if dest.is_file():
        if md5 is None or md5_of(dest) == md5:
            log(f"  {dest.name}: present and verified")
            return
        raise DownloadError(
            f"{dest} exists and its MD5 {md5_of(dest)} differs from the published {md5}; move it away and run again"
        )
    part = dest.with_name(dest.name + ".part")
    _transfer(url, part, clock)
    if md5 is not None:
        got = md5_of(part)
        if got != md5:
            bad = dest.with_name(dest.name + ".corrupt")
            part.replace(bad)
            raise DownloadError(
                f"{url}: MD5 {got} differs from the published {md5}; the file was moved to {bad} and not used "
                "(a bad mirror or a damaged transfer: run again, or try another --mirror)"
            )
    os.replace(part, dest)
    log(f"  {dest.name}: downloaded" + (" and verified (MD5)" if md5 else " (no published checksum)"))


@dataclass
class _Clock:
    """The command's bounds: its deadline (``time.monotonic``), the longest wait for a byte, the pause
    before a retry, and where to say so."""

    deadline: float
    deadline_s: float
    timeout_s: float
    retry_wait_s: float
    log: Callable[[str], None]

    def left(self) -> float:
        return self.deadline - time.monotonic()


def _permanent(exc: BaseException) -> str | None:
    """Why ``exc`` will not go away by retrying (None: it may): a name that does not resolve, a refused
    connection."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve the host name ({reason.strerror or reason}): no network, or a wrong --mirror"
    if isinstance(reason, ConnectionRefusedError):
        return "the connection was refused: nothing serves that address (a wrong --mirror, or the server is down)"
    return None


def _resume_hint(part: Path) -> str:
    """``; run the command again to resume ...`` where ``part`` holds bytes; else nothing (an empty ``part``
    is removed: there is nothing to resume)."""
    size = part.stat().st_size if part.is_file() else 0
    if size:
        return f"; run the command again to resume from {part} ({size:,} bytes)"
    part.unlink(missing_ok=True)
    return ""


def _transfer(url: str, part: Path, clock: _Clock) -> None:
    """Bring ``url`` into ``part``, resuming what is there with a Range request; retry dropped transfers,
    within the command's deadline."""
    last: Exception | None = None
    silent = 0  # tries in a row that received nothing
    for attempt in range(RETRIES + 1):
        have = part.stat().st_size if part.exists() else 0
        req = urllib.request.Request(url, headers={"User-Agent": "iotfl-sim"})
        if have:
            req.add_header("Range", f"bytes={have}-")
        got = 0
        try:
            with urllib.request.urlopen(req, timeout=max(0.01, min(clock.timeout_s, clock.left()))) as resp:
                if have and resp.status == 206:
                    clock.log(f"  {part.name}: resuming at byte {have:,}")
                    mode = "ab"
                else:
                    mode = "wb"  # 200: the server sent the whole file (no Range support)
                total = resp.headers.get("Content-Length")
                expect = int(total) if total is not None else None
                with part.open(mode) as out:
                    while True:
                        if clock.left() <= 0:
                            raise TimeoutError("the command's deadline passed")
                        block = resp.read1(CHUNK)  # what has arrived: a trickle cannot hold one read past the deadline
                        if not block:
                            break
                        out.write(block)
                        got += len(block)
                if expect is not None and got < expect:
                    raise http.client.IncompleteRead(b"", expect - got)
            return
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:  # nothing left to send: the .part is complete (the MD5 will tell)
                return
            raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}{_resume_hint(part)}") from exc
        except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError) as exc:
            why = _permanent(exc)
            if why is not None:
                raise DownloadError(f"{url}: {why}{_resume_hint(part)}") from exc
            last = exc
            silent = silent + 1 if got == 0 else 0
            if clock.left() <= 0:
                raise DownloadError(
                    f"{url}: stopped at the deadline ({clock.deadline_s:g} s, --deadline){_resume_hint(part)}"
                ) from exc
            if silent >= 2:
                raise DownloadError(
                    f"{url}: the server sent nothing for {clock.timeout_s:g} s, twice (--timeout){_resume_hint(part)}; "
                    "try again later or another --mirror"
                ) from exc
            if attempt < RETRIES:
                wait = min(clock.retry_wait_s * (attempt + 1), max(0.0, clock.left()))
                clock.log(f"  {part.name}: transfer interrupted ({type(exc).__name__}); retrying")
                time.sleep(wait)
    raise DownloadError(
        f"{url}: transfer failed after {RETRIES + 1} tries ({last}){_resume_hint(part)} (or try another --mirror)"
    )


# ---------------------------------------------------------------------------------------------
# archives


def _safe_member(name: str, top: str, archive: Path) -> PurePosixPath:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or "\\" in name or not p.parts or p.parts[0] != top:
        raise DownloadError(f"{archive}: refusing member {name!r} (outside the archive's {top}/ folder)")
    return p


def _extract(archive: Path, kind: str, top: str, target: Path, key: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=archive.parent))
    try:
        if kind == "tar":
            with tarfile.open(archive, "r:*") as tf:
                for m in tf.getmembers():
                    rel = _safe_member(m.name, top, archive)
                    if m.isdir():
                        (tmp / rel).mkdir(parents=True, exist_ok=True)
                    elif m.isfile():
                        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                        src = tf.extractfile(m)
                        assert src is not None
                        with src, (tmp / rel).open("wb") as out:
                            shutil.copyfileobj(src, out)
                    else:
                        raise DownloadError(f"{archive}: refusing member {m.name!r} (a link or special file)")
        else:
            with zipfile.ZipFile(archive) as zf:
                bad = zf.testzip()
                if bad is not None:
                    raise DownloadError(f"{archive}: CRC check failed for {bad!r}; delete the archive and run again")
                for info in zf.infolist():
                    if info.filename.startswith("__MACOSX/"):
                        continue
                    rel = _safe_member(info.filename, top, archive)
                    if (info.external_attr >> 16) & 0o170000 == 0o120000:
                        raise DownloadError(f"{archive}: refusing member {info.filename!r} (a symbolic link)")
                    if info.is_dir():
                        (tmp / rel).mkdir(parents=True, exist_ok=True)
                        continue
                    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as src, (tmp / rel).open("wb") as out:
                        shutil.copyfileobj(src, out)
        if not (tmp / top).is_dir():
            raise DownloadError(f"{archive}: no {top}/ folder inside; not the official archive")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(tmp / top, target)  # fails rather than overwrite if target appeared meanwhile
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        raise DownloadError(f"{key}: {archive} is not a readable archive ({exc}); delete it and run again") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_har(base: Path) -> None:
    for split, n in _HAR_COUNTS.items():
        path = base / split / f"y_{split}.txt"
        lines = sum(1 for ln in path.read_text().splitlines() if ln.strip()) if path.is_file() else 0
        if lines != n:
            raise DownloadError(
                f"har: {path} holds {lines} windows, the official dataset {n}; not the official archive "
                f"(remove {base} and run again)"
            )


# ---------------------------------------------------------------------------------------------
# FEMNIST (LEAF json from a mirror)


def check_leaf_json(path: Path) -> int:
    """Parse one LEAF json file and check its ``num_samples`` against every user's x and y; sample count."""
    try:
        blob = json.loads(path.read_bytes())
        users, counts, data = blob["users"], blob["num_samples"], blob["user_data"]
        if len(users) != len(counts):
            raise ValueError(f"{len(users)} users but {len(counts)} num_samples")
        for user, n in zip(users, counts, strict=True):
            rec = data[user]
            if not len(rec["x"]) == len(rec["y"]) == n:
                raise ValueError(f"user {user}: num_samples {n}, x {len(rec['x'])}, y {len(rec['y'])}")
    except (ValueError, KeyError, TypeError) as exc:
        raise DownloadError(f"femnist: {path} is not valid LEAF json ({exc})") from exc
    return int(sum(counts))


def _fetch_leaf(base: str, target: Path, key: str, table, log, clock: _Clock, made: list[Path]) -> None:
    if target.exists() and any(target.iterdir()):
        raise DownloadError(f"{key}: {target} exists but does not load; move it away and run again")
    staging = target.with_name(target.name + ".download")
    _mkdir(staging, made)
    listing = staging / "files.txt"
    _fetch_verified(base + "files.txt", listing, table.get("files.txt"), log, clock)
    names = [ln.strip() for ln in listing.read_text().splitlines() if ln.strip()]
    total = {"train": 0, "test": 0}
    for rel in names:
        p = PurePosixPath(rel)
        if len(p.parts) != 2 or p.parts[0] not in total or p.suffix != ".json" or p.parts[1].startswith("."):
            raise DownloadError(f"{key}: files.txt lists {rel!r}; expected train/NAME.json or test/NAME.json")
        dest = staging / p
        _mkdir(dest.parent, made)
        _fetch_verified(base + urllib.parse.quote(rel), dest, table.get(rel), log, clock)
        total[p.parts[0]] += check_leaf_json(dest)
    if not total["train"] or not total["test"]:
        raise DownloadError(f"{key}: files.txt must list train/ and test/ json files")
    listing.unlink()
    if target.exists():
        target.rmdir()
    os.rename(staging, target)
    log(f"  {key}: {total['train']:,} train / {total['test']:,} test samples (LEAF json verified)")
