"""Dataset loaders and client partitions.

Real-data tests read the offline copies in ../shared/datasets (or $IOTFL_TEST_DATA) and skip when
they are absent; CIFAR, the raw HAR text layout and the idx parser are tested on tiny generated files.
FEMNIST json parsing (40 LEAF files, about 0.7 s here with orjson) is the slowest.
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from iotfl_sim.fl.data.datasets import DATASETS, Dataset, DatasetError, load_dataset, read_idx, resolve_root
from iotfl_sim.fl.data.partition import PartitionError, label_sets, partition

DATA = Path(os.environ.get("IOTFL_TEST_DATA") or Path(__file__).resolve().parents[2] / "shared" / "datasets")


def need(sub: str) -> Path:
    if not (DATA / sub).exists():
        pytest.skip(
            f"offline dataset copy {DATA / sub} not present (set IOTFL_TEST_DATA to the datasets folder)"
        )
    return DATA


def assert_normalized(ds: Dataset) -> None:
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    per_channel = ds.x_train[:].transpose(0, 1).reshape(ds.in_channels, -1)
    assert torch.allclose(per_channel.mean(1), torch.zeros(ds.in_channels), atol=1e-3)
    assert torch.allclose(per_channel.std(1), torch.ones(ds.in_channels), atol=1e-3)


# --------------------------------------------------------------------------------------- loaders


def test_digits_shapes_and_split() -> None:
    ds = load_dataset("digits", test_fraction=0.25, seed=3)
    assert ds.num_classes == 10 and ds.in_channels == 1 and ds.image_size == (8, 8)
    assert len(ds.x_train) + len(ds.x_test) == 1797
    assert len(ds.x_test) == pytest.approx(0.25 * 1797, abs=1)
    assert set(ds.y_test.tolist()) == set(range(10))  # stratified
    assert ds.groups_train is None
    assert_normalized(ds)
    assert load_dataset("digits", test_fraction=0.25, seed=3) is ds  # cached in-process
    other = load_dataset("digits", test_fraction=0.25, seed=4)
    assert not torch.equal(other.y_test, ds.y_test)


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_mnist_like(name: str) -> None:
    ds = load_dataset(name, need(name))
    assert tuple(ds.x_train.shape) == (60000, 1, 28, 28)
    assert tuple(ds.x_test.shape) == (10000, 1, 28, 28)
    assert ds.num_classes == 10 and set(ds.y_train.unique().tolist()) == set(range(10))
    assert_normalized(ds)


def test_femnist_natural_groups() -> None:
    ds = load_dataset("femnist", need("femnist"))
    assert ds.num_classes == 62 and ds.image_size == (28, 28)
    assert len(ds.x_train) == 14708 and len(ds.x_test) == 1685
    assert ds.groups_train is not None and ds.groups_test is not None
    assert len(np.unique(ds.groups_train)) == 105
    assert set(np.unique(ds.groups_test)) <= set(np.unique(ds.groups_train))  # same writer index space
    parts = partition(ds.y_train.numpy(), 20, "natural", np.random.default_rng(0), groups=ds.groups_train)
    assert all(len(np.unique(ds.groups_train[p])) == 1 for p in parts)


def test_har() -> None:
    ds = load_dataset("har", need("uci_har"))
    assert tuple(ds.x_train.shape) == (7352, 9, 1, 128) and tuple(ds.x_test.shape) == (2947, 9, 1, 128)
    assert ds.in_channels == 9 and ds.image_size == (1, 128)
    assert ds.num_classes == 6 and set(ds.y_train.unique().tolist()) == set(range(6))
    assert ds.groups_train is not None and ds.groups_test is not None
    assert len(np.union1d(ds.groups_train, ds.groups_test)) == 30
    assert_normalized(ds)


def test_har_official_text_layout(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    signals = ["body_acc", "body_gyro", "total_acc"]
    for split, n in (("train", 12), ("test", 6)):
        d = tmp_path / "UCI HAR Dataset" / split / "Inertial Signals"
        d.mkdir(parents=True)
        for s in signals:
            for axis in "xyz":
                np.savetxt(d / f"{s}_{axis}_{split}.txt", rng.normal(size=(n, 128)), fmt="%.6e")
        np.savetxt(d.parent / f"y_{split}.txt", np.arange(n) % 6 + 1, fmt="%d")
        np.savetxt(d.parent / f"subject_{split}.txt", np.arange(n) % 3 + 1, fmt="%d")
    ds = load_dataset("har", tmp_path)
    assert tuple(ds.x_train.shape) == (12, 9, 1, 128) and tuple(ds.x_test.shape) == (6, 9, 1, 128)
    assert ds.y_train.tolist() == [i % 6 for i in range(12)]
    assert ds.groups_train is not None and set(ds.groups_train.tolist()) == {1, 2, 3}


def write_cifar_batch(
    path: Path, n: int, label_key: bytes, num_classes: int, rng: np.random.Generator
) -> None:
    batch = {
        b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
        label_key: rng.integers(0, num_classes, size=n).tolist(),
        b"filenames": [f"img{i}.png".encode() for i in range(n)],
    }
    with path.open("wb") as f:
        pickle.dump(batch, f)


def test_cifar10_tiny(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    sizes = [7, 8, 9, 6, 5]  # uneven batches, like the local copy
    for i, n in enumerate(sizes, start=1):
        write_cifar_batch(folder / f"data_batch_{i}", n, b"labels", 10, rng)
    write_cifar_batch(folder / "test_batch", 4, b"labels", 10, rng)
    ds = load_dataset("cifar10", tmp_path)
    assert tuple(ds.x_train.shape) == (sum(sizes), 3, 32, 32) and tuple(ds.x_test.shape) == (4, 3, 32, 32)
    assert ds.num_classes == 10 and ds.in_channels == 3
    assert_normalized(ds)


def test_cifar100_tiny_and_pixel_layout(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    write_cifar_batch(folder / "train", 10, b"fine_labels", 100, rng)
    write_cifar_batch(folder / "test", 3, b"fine_labels", 100, rng)
    with (folder / "train").open("rb") as f:
        raw = pickle.load(f, encoding="bytes")
    ds = load_dataset("cifar100", tmp_path)
    assert ds.num_classes == 100 and tuple(ds.x_train.shape) == (10, 3, 32, 32)
    assert ds.y_train.tolist() == raw[b"fine_labels"]
    # Rows are channel-major (1024 red, 1024 green, 1024 blue): normalization is monotone per channel.
    first_red = raw[b"data"][0, :1024].astype(np.float64)
    assert np.corrcoef(first_red, ds.x_train[0, 0].flatten().numpy())[0, 1] > 0.999


def test_cifar10_tiny_notes_all_five_batches(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for i in range(1, 6):
        write_cifar_batch(folder / f"data_batch_{i}", 2, b"labels", 10, rng)
    write_cifar_batch(folder / "test_batch", 2, b"labels", 10, rng)
    ds = load_dataset("cifar10", tmp_path)
    assert len(ds.x_train) == 10
    assert "5 of the 5 official train batches" in ds.notes and "10 train images" in ds.notes


def _read_labels(path: Path) -> list[int]:
    with path.open("rb") as f:
        return pickle.load(f, encoding="bytes")[b"labels"]


def test_cifar10_loads_the_batches_present_in_order(tmp_path: Path) -> None:
    # Like the shared offline copy: a subset of the train batches. A non-batch file is ignored, and
    # batches are ordered by number, not by name.
    rng = np.random.default_rng(3)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    sizes = {4: 3, 2: 5}
    for i, n in sizes.items():
        write_cifar_batch(folder / f"data_batch_{i}", n, b"labels", 10, rng)
    write_cifar_batch(folder / "test_batch", 4, b"labels", 10, rng)
    (folder / "data_batch_1.md5").write_text("not a batch\n")
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"airplane"]}))
    ds = load_dataset("cifar10", tmp_path)
    assert tuple(ds.x_train.shape) == (8, 3, 32, 32) and tuple(ds.x_test.shape) == (4, 3, 32, 32)
    expected = _read_labels(folder / "data_batch_2") + _read_labels(folder / "data_batch_4")
    assert ds.y_train.tolist() == expected
    assert ds.notes == (
        f"cifar10: 2 of the 5 official train batches (data_batch_2, data_batch_4) in {folder.resolve()}, "
        "8 train images"
    )
    assert_normalized(ds)


def test_cifar10_batches_directly_in_root(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    write_cifar_batch(tmp_path / "data_batch_3", 3, b"labels", 10, rng)
    write_cifar_batch(tmp_path / "test_batch", 2, b"labels", 10, rng)
    ds = load_dataset("cifar10", tmp_path)
    assert len(ds.x_train) == 3 and "1 of the 5 official train batches (data_batch_3)" in ds.notes


def test_cifar10_without_train_batches_names_folder_and_fix(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    write_cifar_batch(folder / "test_batch", 2, b"labels", 10, np.random.default_rng(0))
    with pytest.raises(DatasetError) as err:
        load_dataset("cifar10", tmp_path)
    msg = str(err.value)
    assert f"no data_batch_* file in {folder.resolve()}" in msg
    assert "copy at least one of the official CIFAR-10 python batches there" in msg and "IOTFL_DATA" in msg
    assert "\n" not in msg


def test_cifar_missing_test_batch_names_file(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    write_cifar_batch(folder / "data_batch_1", 3, b"labels", 10, np.random.default_rng(0))
    with pytest.raises(DatasetError, match="test_batch not found"):
        load_dataset("cifar10", tmp_path)


def test_cifar10_shared_partial_copy() -> None:
    # The offline copy holds data_batch_1, data_batch_2 and test_batch, with a few images missing.
    root = need("cifar-10-batches-py")
    ds = load_dataset("cifar10", root)
    assert tuple(ds.x_train.shape) == (19_984, 3, 32, 32) and tuple(ds.x_test.shape) == (9_980, 3, 32, 32)
    assert ds.num_classes == 10 and set(ds.y_train.unique().tolist()) == set(range(10))
    assert ds.notes.startswith("cifar10: 2 of the 5 official train batches (data_batch_1, data_batch_2)")
    assert_normalized(ds)


def write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    code = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C}[array.dtype]
    blob = struct.pack(">BBBB", 0, 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    blob += array.tobytes()
    path.write_bytes(gzip.compress(blob) if compress else blob)


@pytest.mark.parametrize("compress", [True, False])
def test_idx_parser(tmp_path: Path, compress: bool) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 4, 3), dtype=np.uint8)
    write_idx(tmp_path / "a.idx", images, compress)
    assert np.array_equal(read_idx(tmp_path / "a.idx"), images)
    ints = np.arange(-3, 3, dtype=">i4")
    write_idx(tmp_path / "b.idx", ints, compress)
    assert read_idx(tmp_path / "b.idx").tolist() == list(range(-3, 3))


def test_idx_parser_rejects_corrupt(tmp_path: Path) -> None:
    (tmp_path / "bad").write_bytes(b"\x12\x34\x56\x78" + bytes(16))
    with pytest.raises(DatasetError, match="magic"):
        read_idx(tmp_path / "bad")
    write_idx(tmp_path / "short", np.zeros((4, 2, 2), dtype=np.uint8), compress=False)
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-3])
    with pytest.raises(DatasetError, match="corrupt"):
        read_idx(tmp_path / "short")


def test_mnist_files_directly_in_root(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 20), ("t10k", 5)):
        write_idx(
            tmp_path / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), False
        )
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", (np.arange(n) % 10).astype(np.uint8), True)
    ds = load_dataset("mnist", tmp_path)
    assert tuple(ds.x_train.shape) == (20, 1, 28, 28) and ds.y_test.tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("name", [d for d in DATASETS if d != "digits"])
def test_missing_dataset_names_path(tmp_path: Path, name: str) -> None:
    with pytest.raises(DatasetError) as err:
        load_dataset(name, tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and str(tmp_path.resolve()) in msg and "IOTFL_DATA" in msg


def test_no_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IOTFL_DATA", raising=False)
    assert resolve_root(None) is None
    with pytest.raises(DatasetError, match="mnist/train-images-idx3-ubyte.gz"):
        load_dataset("mnist")
    monkeypatch.setenv("IOTFL_DATA", "/some/where")
    assert resolve_root(None) == Path("/some/where")
    with pytest.raises(DatasetError, match="unknown dataset"):
        load_dataset("imagenet")


# ------------------------------------------------------------------------------------ partitions

LABELS = np.repeat(np.arange(10), 100)  # 1,000 samples, 10 balanced classes


def classes_per_client(parts: list[np.ndarray], labels: np.ndarray = LABELS) -> float:
    return float(np.mean([len(s) for s in label_sets(labels, parts)]))


def check_disjoint(parts: list[np.ndarray], n: int, covering: bool) -> None:
    allidx = np.concatenate(parts)
    assert all(p.dtype == np.int64 and len(p) > 0 for p in parts)
    assert len(np.unique(allidx)) == len(allidx)
    assert allidx.min() >= 0 and allidx.max() < n
    if covering:
        assert len(allidx) == n


def test_iid_disjoint_and_covering() -> None:
    parts = partition(LABELS, 7, "iid", np.random.default_rng(0))
    check_disjoint(parts, len(LABELS), covering=True)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert classes_per_client(parts) > 9


def test_dirichlet_skew_follows_alpha() -> None:
    skewed = partition(LABELS, 20, "dirichlet", np.random.default_rng(0), alpha=0.1)
    even = partition(LABELS, 20, "dirichlet", np.random.default_rng(0), alpha=100.0)
    check_disjoint(skewed, len(LABELS), covering=True)
    check_disjoint(even, len(LABELS), covering=True)
    assert classes_per_client(skewed) < 5 < classes_per_client(even)
    big = partition(LABELS, 10, "dirichlet", np.random.default_rng(0), alpha=0.5, min_size=20)
    assert min(map(len, big)) >= 20


def test_dirichlet_impossible_min_size() -> None:
    with pytest.raises(PartitionError, match="min_size"):
        partition(LABELS, 50, "dirichlet", np.random.default_rng(0), alpha=0.01, min_size=19)


@pytest.mark.parametrize(("clients", "k"), [(20, 2), (7, 3), (10, 10), (3, 1), (33, 4)])
def test_shards_exact_labels(clients: int, k: int) -> None:
    parts = partition(LABELS, clients, "shards", np.random.default_rng(1), classes_per_client=k)
    assert len(parts) == clients
    check_disjoint(parts, len(LABELS), covering=clients * k >= 10)
    assert all(len(s) == k for s in label_sets(LABELS, parts))


def test_shards_too_many_classes() -> None:
    with pytest.raises(PartitionError, match="classes_per_client"):
        partition(LABELS, 5, "shards", np.random.default_rng(0), classes_per_client=11)


def test_natural_groups() -> None:
    groups = np.arange(len(LABELS)) % 13
    parts = partition(LABELS, 5, "natural", np.random.default_rng(0), groups=groups)
    check_disjoint(parts, len(LABELS), covering=False)
    owners = [np.unique(groups[p]) for p in parts]
    assert all(len(o) == 1 for o in owners) and len({int(o[0]) for o in owners}) == 5
    assert all(len(p) == np.sum(groups == o[0]) for p, o in zip(parts, owners, strict=True))
    with pytest.raises(PartitionError, match="14 clients but only 13"):
        partition(LABELS, 14, "natural", np.random.default_rng(0), groups=groups)
    with pytest.raises(PartitionError, match="groups"):
        partition(LABELS, 2, "natural", np.random.default_rng(0))


@pytest.mark.parametrize("method", ["iid", "dirichlet", "shards", "natural"])
def test_partition_deterministic(method: str) -> None:
    groups = np.arange(len(LABELS)) % 40

    def run(seed: int) -> list[np.ndarray]:
        return partition(LABELS, 12, method, np.random.default_rng(seed), groups=groups)

    a, b, c = run(5), run(5), run(6)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_unknown_method() -> None:
    with pytest.raises(PartitionError, match="unknown partition method"):
        partition(LABELS, 3, "random", np.random.default_rng(0))


def test_femnist_json_floats_parse_to_the_correctly_rounded_float32(tmp_path: Path) -> None:
    """LEAF pixels are decimal strings; the loader's fast json parser must give each the float32 that
    float(text) rounds to (the values near float32 ties and the subnormals are where a sloppy parser differs)."""
    import json

    texts = ["0.1", "0.30000000000000004", "0.9999999403953552", "1e-45", "3.4028234663852886e+38", "0.5",
             "0.12345678901234567890123", "7.006492321624085e-46", "0.0", "1.0000000596046448"]
    pixels = (texts * 79)[:784]
    row = "[" + ",".join(pixels) + "]"
    for split in ("train", "test"):
        (tmp_path / "femnist" / split).mkdir(parents=True)
        blob = {"users": ["w"], "num_samples": [2], "user_data": {"w": {"x": ["XROW", "XROW"], "y": [0, 61]}}}
        (tmp_path / "femnist" / split / "a.json").write_text(json.dumps(blob).replace('"XROW"', row))
    from iotfl_sim.fl.data.readers import _read_leaf_split

    ((user, x, y),) = _read_leaf_split("femnist", tmp_path / "femnist" / "train", tmp_path)
    expected = np.array([np.float32(float(t)) for t in pixels], dtype=np.float32)
    assert user == "w" and y.tolist() == [0, 61]
    assert x.dtype == np.float32 and x.tobytes() == np.stack([expected, expected]).tobytes()
