"""The on-disk cache (fl.disk_cache) of operator traces, model costs, the digits split and FEMNIST's parsed json: what is read back is
what was computed, bit for bit; anything unreadable is computed again and replaced; another PyTorch or changed
numerics code never finds an old table; a folder that cannot be written, or the cache off, costs only time."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from iotfl_sim.fl import disk_cache
from iotfl_sim.fl.cost import footprint as cost
from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.data import datasets as data
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec

RECIPE = ModelRecipe("cnn_small", 10, 1, (8, 8))
SPEC = SubmodelSpec(0.5)


def _fresh(monkeypatch, folder) -> opcost.AffineTrace:
    """affine_trace as a new process would call it (its in-memory cache empty) with the disk cache at folder."""
    monkeypatch.setenv("IOTFL_CACHE_DIR", str(folder))
    opcost.affine_trace.cache_clear()
    return opcost.affine_trace(RECIPE, SPEC)


def _traces_run(monkeypatch, folder) -> tuple[opcost.AffineTrace, int]:
    before = opcost.TRACE_CALLS["n"]
    table = _fresh(monkeypatch, folder)
    return table, opcost.TRACE_CALLS["n"] - before


def _same(a: opcost.AffineTrace, b: opcost.AffineTrace) -> bool:
    return a.names == b.names and all(
        np.array_equal(x, y) and x.dtype == y.dtype == np.float64 for x, y in zip(a.arrays().values(), b.arrays().values(), strict=True)
    )


@pytest.fixture
def traced(monkeypatch):
    """The table traced with the cache off: what every cached answer must equal."""
    monkeypatch.setenv("IOTFL_CACHE_DIR", "off")
    opcost.affine_trace.cache_clear()
    table = opcost.affine_trace(RECIPE, SPEC)
    opcost.affine_trace.cache_clear()
    return table


def test_a_second_process_reads_the_trace_instead_of_tracing(tmp_path, monkeypatch, traced):
    first, n_first = _traces_run(monkeypatch, tmp_path)
    assert n_first == 2 and len(list((tmp_path / "traces").glob("*.npz"))) == 1
    again, n_again = _traces_run(monkeypatch, tmp_path)
    assert n_again == 0  # read back, not traced
    assert _same(first, traced) and _same(again, traced)
    assert not list((tmp_path / "traces").glob("*.tmp"))  # written under a temporary name, then renamed


@pytest.mark.parametrize("damage", ["truncated", "garbage", "short_array", "wrong_dtype", "empty", "too_big"])
def test_an_unreadable_file_is_traced_again_and_replaced(tmp_path, monkeypatch, traced, damage):
    _fresh(monkeypatch, tmp_path)
    (path,) = (tmp_path / "traces").glob("*.npz")
    if damage == "too_big":  # a compressed member that would unpack to 100 MB: refused before unpacking
        np.savez_compressed(path, names=np.array(traced.names), zeros=np.zeros(100 * 2**20, np.uint8),
                            **traced.arrays())  # fmt: skip
        assert path.stat().st_size < 2**20
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff" * 5000)
    elif damage == "short_array":  # a readable file whose arrays do not match its op names
        np.savez(path, names=np.array(traced.names), **{f: a[:-1] for f, a in traced.arrays().items()})
    elif damage == "wrong_dtype":  # op names stored as numbers
        np.savez(path, names=np.arange(len(traced.names)), **traced.arrays())
    else:
        path.write_bytes(b"")
    table, n = _traces_run(monkeypatch, tmp_path)
    assert n == 2 and _same(table, traced)
    again, n_again = _traces_run(monkeypatch, tmp_path)  # the damaged file was replaced by a good one
    assert n_again == 0 and _same(again, traced)


def test_another_torch_or_changed_numerics_code_never_finds_an_old_table(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path)
    monkeypatch.setattr(disk_cache.torch, "__version__", "0.0.0-other")
    assert _traces_run(monkeypatch, tmp_path)[1] == 2
    monkeypatch.undo()
    monkeypatch.setattr(disk_cache, "code_fingerprint", lambda: "edited")
    assert _traces_run(monkeypatch, tmp_path)[1] == 2
    assert len(list((tmp_path / "traces").glob("*.npz"))) == 3


def test_the_key_names_everything_a_trace_depends_on():
    def k(recipe=RECIPE, spec=SPEC, options=None, forward=False):
        return disk_cache.key("affine_trace", recipe, spec, options or opcost.StepOptions(), forward)

    others = [
        k(spec=SubmodelSpec(0.25)),
        k(spec=SubmodelSpec(0.5, depth=2)),
        k(recipe=ModelRecipe("cnn_small", 10, 3, (8, 8))),
        k(recipe=ModelRecipe("cnn_small", 10, 1, (8, 8), norm="gn")),
        k(options=opcost.StepOptions(momentum=0.0)),
        k(forward=True),
    ]
    assert len({k(), *others}) == 7 and k() == k()


def test_a_folder_that_cannot_be_written_or_the_cache_off_only_costs_the_trace(tmp_path, monkeypatch, traced):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    table, n = _traces_run(monkeypatch, blocker)
    assert n == 2 and _same(table, traced)
    table, n = _traces_run(monkeypatch, "off")
    assert n == 2 and _same(table, traced)
    assert disk_cache.cache_dir("traces") is None


def test_the_default_folder_follows_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.delenv("IOTFL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_cache.cache_dir("traces") == tmp_path / "xdg" / "iotfl-sim" / "traces"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert disk_cache.cache_dir("costs") == tmp_path / "home" / ".cache" / "iotfl-sim" / "costs"


def test_model_costs_read_back_equal_the_probe(tmp_path, monkeypatch):
    def measured():
        cost.measure_cost.cache_clear()
        return cost.measure_cost("cnn_small", SPEC, num_classes=10, in_channels=1, image_size=(8, 8), norm="bn")

    monkeypatch.setenv("IOTFL_CACHE_DIR", "off")
    probed = measured()
    monkeypatch.setenv("IOTFL_CACHE_DIR", str(tmp_path))
    assert measured() == probed  # computed, stored
    calls = []
    monkeypatch.setattr(cost, "_probe", lambda *a: calls.append(a))
    assert measured() == probed and calls == []  # read back without probing
    (path,) = (tmp_path / "costs").glob("*.npz")
    np.savez(path, params=np.float64(1.5), flops=np.float64(1), activation_bytes=np.float64(1))  # params not an int
    monkeypatch.undo()
    monkeypatch.setenv("IOTFL_CACHE_DIR", str(tmp_path))
    assert measured() == probed


def _digits(monkeypatch, folder, seed=0):
    monkeypatch.setenv("IOTFL_CACHE_DIR", str(folder))
    data.clear_dataset_cache()
    return data.load_dataset("digits", test_fraction=0.25, seed=seed)


def _equal(a, b) -> bool:
    return all(
        getattr(a, f).dtype == getattr(b, f).dtype and bool((getattr(a, f)[:] == getattr(b, f)[:]).all())
        for f in ("x_train", "y_train", "x_test", "y_test")
    )


def test_the_digits_split_read_back_is_scikit_learns_and_needs_no_import(tmp_path, monkeypatch):
    direct = _digits(monkeypatch, "off")
    assert _equal(_digits(monkeypatch, tmp_path), direct)  # computed, stored
    for module in ("sklearn", "sklearn.datasets", "sklearn.model_selection"):
        monkeypatch.setitem(sys.modules, module, None)  # importing scikit-learn now fails
    assert _equal(_digits(monkeypatch, tmp_path), direct)
    with pytest.raises(ImportError):  # another seed is another split: computed, which needs scikit-learn
        _digits(monkeypatch, tmp_path, seed=1)
    monkeypatch.undo()
    (path,) = (tmp_path / "datasets").glob("*.npz")
    with np.load(path) as kept:
        bad = {f: kept[f] for f in kept.files}
    bad["y_train"] = bad["y_train"] + 10  # labels out of range: refused, split again
    np.savez(path, **bad)
    assert _equal(_digits(monkeypatch, tmp_path), direct)
    data.clear_dataset_cache()


def test_a_file_unpacking_to_more_than_the_bound_is_not_unpacked(tmp_path, monkeypatch, traced):
    _fresh(monkeypatch, tmp_path)
    monkeypatch.setattr(disk_cache, "MAX_BYTES", 100)  # below any real table: the good file now counts as too big
    monkeypatch.setattr(disk_cache.np, "load", lambda *a, **k: pytest.fail("unpacked a file over the bound"))
    table, n = _traces_run(monkeypatch, tmp_path)
    assert n == 2 and _same(table, traced)


def _leaf_tree(root, pixel: float = 0.25, unit: int = 784) -> None:
    """Two writers' LEAF files per split (the second writer's train image holds ``pixel``), the other pixels
    multiples of 1/``unit``: 1/784 clashes with 0 on the nearest 8-bit code, so no palette fits and the images
    are kept as floats; 1/255 is LEAF's own grid, kept as codes."""
    import json

    for split, users in (("train", ("w0", "w1")), ("test", ("w1", "w2"))):
        folder = root / "femnist" / split
        folder.mkdir(parents=True, exist_ok=True)
        data_ = {u: {"x": [[i / unit] * 783 + [pixel if (split, u) == ("train", "w1") else 0.5]], "y": [i]}
                 for i, u in enumerate(users)}
        (folder / "a.json").write_text(json.dumps({"users": list(users), "num_samples": [1, 1], "user_data": data_}))


def _femnist(monkeypatch, cache, root):
    from iotfl_sim.fl.data import readers

    monkeypatch.setenv("IOTFL_CACHE_DIR", str(cache))
    calls = {"n": 0}
    parse = readers._parse_femnist

    def counted(*args):
        calls["n"] += 1
        return parse(*args)

    monkeypatch.setattr(readers, "_parse_femnist", counted)
    return readers.load_femnist("femnist", root), calls["n"]


def _same_dataset(a, b) -> bool:
    tensors = ("x_train", "y_train", "x_test", "y_test")
    return all(getattr(a, f)[:].numpy().tobytes() == getattr(b, f)[:].numpy().tobytes() for f in tensors) and all(
        np.array_equal(getattr(a, f), getattr(b, f)) for f in ("groups_train", "groups_test"))


def test_femnist_is_parsed_once_per_content_of_its_json(tmp_path, monkeypatch):
    root = tmp_path / "data"
    _leaf_tree(root)
    parsed, n1 = _femnist(monkeypatch, "off", root)
    first, n2 = _femnist(monkeypatch, tmp_path / "cache", root)
    again, n3 = _femnist(monkeypatch, tmp_path / "cache", root)
    assert (n1, n2, n3) == (1, 1, 0)  # the third load read the arrays back
    assert _same_dataset(again, parsed) and _same_dataset(first, parsed)
    assert again.groups_test.tolist() == [1, 2]  # writer indices follow the train files, as parsed
    # One pixel of one file changed: another key, parsed again, the new value seen (same size, same names)
    _leaf_tree(root, pixel=0.75)
    changed, n4 = _femnist(monkeypatch, tmp_path / "cache", root)
    assert n4 == 1 and not _same_dataset(changed, parsed)
    fresh, _ = _femnist(monkeypatch, "off", root)
    assert _same_dataset(changed, fresh)


def test_femnist_on_leafs_grid_is_kept_as_codes_and_read_back_to_the_parsed_bits(tmp_path, monkeypatch):
    root = tmp_path / "data"
    _leaf_tree(root, unit=255)
    parsed, n1 = _femnist(monkeypatch, "off", root)
    _femnist(monkeypatch, tmp_path / "cache", root)
    again, n3 = _femnist(monkeypatch, tmp_path / "cache", root)
    assert (n1, n3) == (1, 0) and _same_dataset(again, parsed)
    (table,) = (tmp_path / "cache" / "datasets").glob("*.npz")
    with np.load(table) as kept:
        assert kept["codes_train"].dtype == np.uint8 and "x_train" not in kept.files  # 1 byte a pixel, not 4
    # By hand: train pixels {0, 1/255, 0.5, 0.25}, 783 + 1 of each image; the test image of writer w1 (i = 0)
    # is 0 but its last pixel 0.5, standardized with the train split's mean and std
    train = np.array([0.0] * 783 + [0.5] + [1 / 255] * 783 + [0.25], dtype=np.float32).astype(np.float64)
    mean, std = train.mean(), train.std()
    assert again.x_test[0, 0, 0, 0].item() == pytest.approx((0 - mean) / std, rel=1e-6)
    assert again.x_test[0, 0, 27, 27].item() == pytest.approx((0.5 - mean) / std, rel=1e-6)


@pytest.mark.parametrize("field, bad", [("table_train", np.zeros(255, np.float32)), ("std", np.zeros((1, 1, 1, 1), np.float32)),
                                        ("codes_test", np.zeros((2, 1, 28, 27), np.uint8))])  # fmt: skip
def test_a_femnist_table_with_a_bad_coding_is_parsed_again(tmp_path, monkeypatch, field, bad):
    root = tmp_path / "data"
    _leaf_tree(root, unit=255)
    parsed, _ = _femnist(monkeypatch, tmp_path / "cache", root)
    (table,) = (tmp_path / "cache" / "datasets").glob("*.npz")
    with np.load(table) as kept:
        arrays = {f: kept[f] for f in kept.files}
    np.savez(table, **{**arrays, field: bad})
    again, n = _femnist(monkeypatch, tmp_path / "cache", root)
    assert n == 1 and _same_dataset(again, parsed)


def test_a_corrupt_femnist_table_is_parsed_again(tmp_path, monkeypatch):
    root = tmp_path / "data"
    _leaf_tree(root)
    parsed, _ = _femnist(monkeypatch, tmp_path / "cache", root)
    (table,) = (tmp_path / "cache" / "datasets").glob("*.npz")
    table.write_bytes(table.read_bytes()[:200])
    again, n = _femnist(monkeypatch, tmp_path / "cache", root)
    assert n == 1 and _same_dataset(again, parsed)


def test_tables_larger_than_the_reader_accepts_are_not_written(tmp_path, monkeypatch):
    monkeypatch.setenv("IOTFL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(disk_cache, "MAX_BYTES", 1000)
    disk_cache.store("kind", "small", {"a": np.zeros(100, np.uint8)})
    disk_cache.store("kind", "big", {"a": np.zeros(1000, np.uint8)})
    assert [p.name for p in (tmp_path / "kind").iterdir()] == ["small.npz"]


def test_femnist_json_too_large_for_a_table_is_neither_hashed_nor_kept(tmp_path, monkeypatch):
    from iotfl_sim.fl.data import readers

    root = tmp_path / "data"
    _leaf_tree(root)
    json_bytes = sum(p.stat().st_size for p in (root / "femnist").rglob("*.json"))
    monkeypatch.setattr(disk_cache, "MAX_BYTES", json_bytes // readers.LEAF_JSON_PER_TABLE_BYTE - 1)
    monkeypatch.setattr(readers, "_read", lambda *a: pytest.fail("hashed json that cannot be kept"))
    parsed, n1 = _femnist(monkeypatch, tmp_path / "cache", root)
    again, n2 = _femnist(monkeypatch, tmp_path / "cache", root)
    assert (n1, n2) == (1, 1) and not (tmp_path / "cache" / "datasets").exists() and _same_dataset(again, parsed)
