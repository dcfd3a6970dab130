"""``iotfl-sim data download`` against a loopback HTTP server serving small stand-in files.

The stand-ins are generated here (tiny idx files, a tiny CIFAR-10 tar, a tiny HAR zip, LEAF json) and their
MD5s are injected in place of the official table, so no test ever needs the real files or the network: every
download goes to 127.0.0.1 through ``mirror=``, and a guard fails any connection elsewhere.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle
import socket
import tarfile
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from iotfl_sim.cli import main
from iotfl_sim.fl.data import datasets as data_mod
from iotfl_sim.fl.data import download as dl


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Fail any connection that is not to 127.0.0.1 (the real URLs must never be contacted)."""
    real = socket.create_connection

    def guarded(address, *a, **k):
        # .invalid names never resolve (RFC 6761): the tests of a failed lookup use one
        assert address[0] in ("127.0.0.1", "localhost") or address[0].endswith(".invalid"), f"test tried to reach {address}"
        return real(address, *a, **k)

    monkeypatch.setattr(socket, "create_connection", guarded)
    monkeypatch.delenv(dl.MIRROR_ENV, raising=False)
    data_mod.clear_dataset_cache()


class Server:
    """Serves ``files`` (url path -> bytes) with Range support; ``cut_once`` paths drop mid-body once."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.cut_once: set[str] = set()
        self.ranges: list[tuple[str, str]] = []
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                path = self.path
                outer.requests.append(path)
                body = outer.files.get(path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng:
                    outer.ranges.append((path, rng))
                    start = int(rng.split("=")[1].split("-")[0])
                    if start >= len(body):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                rest = body[start:]
                self.send_header("Content-Length", str(len(rest)))
                self.end_headers()
                if path in outer.cut_once:
                    outer.cut_once.discard(path)
                    self.wfile.write(rest[: len(rest) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(rest)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def _md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def _idx(arr: np.ndarray) -> bytes:
    head = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return gzip.compress(head + arr.astype(np.uint8).tobytes(), mtime=0)


def _mnist_files(n_train=30, n_test=10) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    return {
        "train-images-idx3-ubyte.gz": _idx(rng.integers(0, 256, (n_train, 28, 28))),
        "train-labels-idx1-ubyte.gz": _idx(np.arange(n_train) % 10),
        "t10k-images-idx3-ubyte.gz": _idx(rng.integers(0, 256, (n_test, 28, 28))),
        "t10k-labels-idx1-ubyte.gz": _idx(np.arange(n_test) % 10),
    }


def _serve(server: Server, dataset: str, files: dict[str, bytes]) -> dict[str, str]:
    from urllib.parse import quote

    for name, body in files.items():
        server.files[f"/{dataset}/{quote(name)}"] = body
    return {name: _md5(body) for name, body in files.items()}


def test_mnist_download_verifies_and_loads(server, tmp_path):
    files = _mnist_files()
    sums = _serve(server, "mnist", files)
    folder = dl.download("mnist", tmp_path, mirror=server.url, checksums=sums, log=lambda s: None)
    assert folder == tmp_path / "mnist"
    for name, body in files.items():
        assert (folder / name).read_bytes() == body
    assert not list(folder.glob("*.part"))
    ds = data_mod.load_dataset("mnist", tmp_path)
    assert ds.x_train.shape == (30, 1, 28, 28) and ds.x_test.shape == (10, 1, 28, 28)
    # a complete dataset is never downloaded again nor overwritten
    server.requests.clear()
    dl.download("mnist", tmp_path, mirror=server.url, checksums=sums, log=lambda s: None)
    assert server.requests == []


def test_official_checksum_table_matches_the_offline_copies():
    shared = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    for key in ("mnist", "fashion_mnist"):
        if not (shared / key).is_dir():
            pytest.skip("no offline copies of the official files on this machine")
        for f in dl.SOURCES[key].files:
            assert dl.md5_of(shared / key / f.name) == f.md5, (key, f.name)


def test_corrupted_file_is_refused_and_quarantined(server, tmp_path):
    files = _mnist_files()
    sums = _serve(server, "mnist", files)
    server.files["/mnist/t10k-labels-idx1-ubyte.gz"] = b"not the published file"
    with pytest.raises(dl.DownloadError, match="differs from the published"):
        dl.download("mnist", tmp_path, mirror=server.url, checksums=sums, log=lambda s: None)
    folder = tmp_path / "mnist"
    assert not (folder / "t10k-labels-idx1-ubyte.gz").exists()
    assert (folder / "t10k-labels-idx1-ubyte.gz.corrupt").exists()
    with pytest.raises(data_mod.DatasetError):
        data_mod.load_dataset("mnist", tmp_path)


def test_interrupted_transfer_is_resumed_with_a_range_request(server, tmp_path):
    files = _mnist_files(n_train=200)
    sums = _serve(server, "mnist", files)
    server.cut_once.add("/mnist/train-images-idx3-ubyte.gz")
    dl.download("mnist", tmp_path, mirror=server.url, checksums=sums, log=lambda s: None, retry_wait_s=0)
    assert [p for p, _ in server.ranges] == ["/mnist/train-images-idx3-ubyte.gz"]
    half = len(files["train-images-idx3-ubyte.gz"]) // 2
    assert server.ranges[0][1] == f"bytes={half}-"
    assert (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").read_bytes() == files["train-images-idx3-ubyte.gz"]


def test_a_part_file_left_by_an_earlier_run_is_resumed(server, tmp_path):
    files = _mnist_files()
    sums = _serve(server, "mnist", files)
    folder = tmp_path / "mnist"
    folder.mkdir()
    body = files["train-images-idx3-ubyte.gz"]
    (folder / "train-images-idx3-ubyte.gz.part").write_bytes(body[:100])
    dl.download("mnist", tmp_path, mirror=server.url, checksums=sums, log=lambda s: None)
    assert ("/mnist/train-images-idx3-ubyte.gz", "bytes=100-") in server.ranges
    assert (folder / "train-images-idx3-ubyte.gz").read_bytes() == body


def _cifar10_tar(extra: tarfile.TarInfo | None = None) -> bytes:
    rng = np.random.default_rng(1)

    def batch(n):
        return pickle.dumps({b"labels": [i % 10 for i in range(n)], b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8)})

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, body in (("data_batch_1", batch(20)), ("test_batch", batch(10))):
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
        if extra is not None:
            tf.addfile(extra, io.BytesIO(b"x" * extra.size) if extra.isfile() else None)
    return buf.getvalue()


def test_cifar10_archive_is_extracted_into_the_loader_layout(server, tmp_path):
    sums = _serve(server, "cifar10", {"cifar-10-python.tar.gz": _cifar10_tar()})
    dl.download("cifar10", tmp_path, mirror=server.url, checksums=sums, log=lambda s: None)
    ds = data_mod.load_dataset("cifar10", tmp_path)
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (10, 3, 32, 32)
    assert not (tmp_path / ".iotfl-downloads").exists()


@pytest.mark.parametrize("evil", ["../escape", "/abs/path", "cifar-10-batches-py/../../escape", "link"])
def test_archive_members_outside_the_folder_are_refused(server, tmp_path, evil):
    if evil == "link":
        info = tarfile.TarInfo("cifar-10-batches-py/evil")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
    else:
        info = tarfile.TarInfo(evil)
        info.size = 1
    root = tmp_path / "root"
    sums = _serve(server, "cifar10", {"cifar-10-python.tar.gz": _cifar10_tar(info)})
    with pytest.raises(dl.DownloadError, match="refusing member"):
        dl.download("cifar10", root, mirror=server.url, checksums=sums, log=lambda s: None)
    assert not (root / "cifar-10-batches-py").exists()
    assert not (tmp_path / "escape").exists() and not (root / "escape").exists()


def test_har_zip_is_checked_and_loads(server, tmp_path, monkeypatch):
    monkeypatch.setattr(dl, "_HAR_COUNTS", {"train": 6, "test": 3})
    rng = np.random.default_rng(2)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for split, n in (("train", 6), ("test", 3)):
            base = f"UCI HAR Dataset/{split}"
            for s in data_mod.HAR_SIGNALS:
                rows = "\n".join(" ".join(f"{v:.4f}" for v in rng.normal(size=128)) for _ in range(n))
                zf.writestr(f"{base}/Inertial Signals/{s}_{split}.txt", rows + "\n")
            zf.writestr(f"{base}/y_{split}.txt", "".join(f"{i % 6 + 1}\n" for i in range(n)))
            zf.writestr(f"{base}/subject_{split}.txt", "".join(f"{i % 2 + 1}\n" for i in range(n)))
        zf.writestr("__MACOSX/UCI HAR Dataset/._junk", "x")
    # UCI publishes no checksum: the zip's CRCs and the window counts are what is verified
    _serve(server, "har", {"UCI HAR Dataset.zip": buf.getvalue()})
    dl.download("har", tmp_path, mirror=server.url, log=lambda s: None)
    ds = data_mod.load_dataset("har", tmp_path)
    assert ds.x_train.shape[0] == 6 and ds.x_test.shape[0] == 3


def _leaf(users: dict[str, int]) -> bytes:
    return json.dumps({
        "users": list(users),
        "num_samples": list(users.values()),
        "user_data": {u: {"x": [[0.5] * 784] * n, "y": [i % 62 for i in range(n)]} for u, n in users.items()},
    }).encode()


def test_femnist_from_a_mirror_is_parsed_and_counted(server, tmp_path):
    files = {
        "train/a.json": _leaf({"w1": 3, "w2": 2}),
        "test/a.json": _leaf({"w1": 1, "w2": 1}),
    }
    files["files.txt"] = "\n".join(k for k in files).encode()
    for name, body in files.items():
        server.files[f"/femnist/{name}"] = body
    with pytest.raises(dl.DownloadError, match="no official download"):
        dl.download("femnist", tmp_path, log=lambda s: None)
    dl.download("femnist", tmp_path, mirror=server.url, log=lambda s: None)
    ds = data_mod.load_dataset("femnist", tmp_path)
    assert len(ds.y_train) == 5 and len(ds.y_test) == 2


def test_femnist_bad_counts_are_refused(server, tmp_path):
    bad = json.loads(_leaf({"w1": 3}))
    bad["num_samples"] = [4]
    server.files["/femnist/files.txt"] = b"train/a.json\ntest/a.json\n"
    server.files["/femnist/train/a.json"] = json.dumps(bad).encode()
    server.files["/femnist/test/a.json"] = _leaf({"w1": 1})
    with pytest.raises(dl.DownloadError, match="num_samples 4"):
        dl.download("femnist", tmp_path, mirror=server.url, log=lambda s: None)


def test_cli_data_download(server, tmp_path, monkeypatch, capsys):
    files = _mnist_files()
    sums = _serve(server, "fashion_mnist", files)
    monkeypatch.setattr(dl, "SOURCES", {**dl.SOURCES, "fashion_mnist": dl.Source(
        "http://example.invalid/", tuple(dl.RemoteFile(n, sums[n]) for n in files), "files", "fashion_mnist", "test")})
    monkeypatch.setenv(dl.MIRROR_ENV, server.url)
    assert main(["data", "download", "fashion-mnist", "--root", str(tmp_path)]) == 0
    assert "ready in" in capsys.readouterr().out
    monkeypatch.delenv("IOTFL_DATA", raising=False)
    assert main(["data", "download", "mnist"]) == 2
    assert "--root" in capsys.readouterr().err


# ---------------------------------------------------------------- no network, a dead or a silent mirror


def _root_untouched(tmp_path):
    """A data root that does not exist yet: a failed download must not leave it (or anything in it) behind."""
    return tmp_path / "datasets"


def _fails_fast(mirror: str, root, **bounds) -> tuple[str, list[str], float]:
    logged: list[str] = []
    t0 = time.monotonic()
    with pytest.raises(dl.DownloadError) as e:
        dl.download("mnist", root, mirror=mirror, log=logged.append, retry_wait_s=0.5, **bounds)
    return str(e.value), logged, time.monotonic() - t0


def test_an_unresolvable_host_fails_at_once_and_leaves_nothing(tmp_path):
    root = _root_untouched(tmp_path)
    msg, logged, took = _fails_fast("http://nonexistent.invalid", root)
    assert "cannot resolve the host name" in msg and "--mirror" in msg
    assert "resume" not in msg and not any("retrying" in x for x in logged)  # no retries: it will not go away
    assert took < 10  # a lookup, not five retries with waits (22 s)
    assert not root.exists()


def test_a_refused_connection_fails_at_once_and_leaves_nothing(tmp_path):
    with socket.socket() as closed:  # bound, never listening: every connection to it is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        root = _root_untouched(tmp_path)
        msg, logged, _ = _fails_fast(f"http://127.0.0.1:{port}", root)
    assert "connection was refused" in msg and "resume" not in msg
    assert not any("retrying" in x for x in logged)
    assert not root.exists()


def test_http_404_fails_at_once_and_leaves_nothing(server, tmp_path):
    root = _root_untouched(tmp_path)
    msg, logged, _ = _fails_fast(server.url, root)
    assert "HTTP 404" in msg and "resume" not in msg
    assert server.requests == ["/mnist/train-images-idx3-ubyte.gz"]
    assert not root.exists()


def test_an_existing_root_stays_and_only_the_made_folders_go(server, tmp_path):
    root = tmp_path / "datasets"
    (root / "cifar-10-batches-py").mkdir(parents=True)  # the user's: untouched
    _fails_fast(server.url, root)
    assert sorted(p.name for p in root.iterdir()) == ["cifar-10-batches-py"]


def test_a_server_that_accepts_and_never_answers_is_given_up_after_two_timeouts(tmp_path):
    """A listening socket that never reads: the connection opens, no byte ever comes. With a 0.2 s bound the
    command gives up after two silent tries (not 6 x 60 s) and leaves nothing."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        root = _root_untouched(tmp_path)
        msg, logged, took = _fails_fast(f"http://127.0.0.1:{silent.getsockname()[1]}", root, timeout_s=0.2)
    assert "sent nothing for 0.2 s, twice" in msg and "resume" not in msg
    assert sum("retrying" in x for x in logged) == 1
    assert took < 5
    assert not root.exists()


def test_the_deadline_bounds_a_trickling_transfer_and_keeps_the_part_to_resume(tmp_path):
    """A server that sends a byte every 20 ms of a 1 MB file: the read timeout never fires, the deadline
    (0.5 s) does; the bytes received stay in the .part, and the message says how to resume from it."""
    stop = threading.Event()
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)

        def trickle():
            conn, _ = srv.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
                while not stop.is_set():
                    try:
                        conn.sendall(b"x")
                    except OSError:
                        return
                    time.sleep(0.02)

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        root = _root_untouched(tmp_path)
        try:
            msg, _, took = _fails_fast(f"http://127.0.0.1:{srv.getsockname()[1]}", root, timeout_s=5, deadline_s=0.5)
        finally:
            stop.set()
            t.join(5)
    part = root / "mnist" / "train-images-idx3-ubyte.gz.part"
    assert "stopped at the deadline (0.5 s" in msg and f"resume from {part}" in msg
    assert 0 < part.stat().st_size < 1000
    assert took < 5


def test_cli_download_without_network_is_one_line(tmp_path, capsys):
    root = _root_untouched(tmp_path)
    code = main(["data", "download", "mnist", "--root", str(root), "--mirror", "http://nonexistent.invalid", "--timeout", "1"])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("error: data download: http://nonexistent.invalid/mnist/") and "cannot resolve" in line
    assert not root.exists()
    assert main(["data", "download", "mnist", "--root", str(root), "--deadline", "nan"]) == 2
    assert "--deadline must be > 0" in capsys.readouterr().err and not root.exists()
