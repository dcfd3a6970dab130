"""Images kept as uint8 codes (fl.data.images.PaletteImages): every way training, evaluation and the executors
index them gives the bits of the normalized float32 array, and only data of at most 256 values is coded."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from iotfl_sim.fl.data.dataset import channel_statistics, normalized, package
from iotfl_sim.fl.data.images import PaletteImages, palette, subset


def _float_path(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """What the loaders computed before images were coded: the whole float32 array, minus mean, over std."""
    out = x.astype(np.float32)
    out -= mean
    out /= std
    return out


def _bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().numpy().tobytes()


@pytest.mark.parametrize("kind", ["uint8", "leaf"])
def test_every_index_gives_the_normalized_float32_bits(kind: str) -> None:
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=(50, 3, 5, 4), dtype=np.uint8)
    x = raw if kind == "uint8" else (raw / 255.0).astype(np.float32)  # LEAF's pixels: bytes over 255
    mean, std = channel_statistics(x)
    images = normalized(x, mean, std)
    assert isinstance(images, PaletteImages) and images.identity == (kind == "uint8")
    expected = torch.from_numpy(_float_path(x, mean, std))
    picks = np.array([7, 3, 3, 49, 0])
    for index in (slice(None), slice(10, 20), slice(45, 60), torch.tensor([7, 3, 3, 49, 0]), picks, 5, -1,
                  torch.tensor([[1, 2], [3, 4]]),  # the fused trainer's (clients, batch) index
                  (0, 1), (slice(2, 9), 2), (torch.tensor([4, 1]), slice(None), 3), (np.int64(3), 0, slice(1, 3))):
        got = images[index]
        want = expected[torch.from_numpy(index) if isinstance(index, np.ndarray) else index]
        assert got.dtype == torch.float32 and got.shape == want.shape and _bytes(got) == _bytes(want)
    assert len(images) == 50 and images.shape == (50, 3, 5, 4) and images.codes.element_size() == 1
    assert [_bytes(row) for row in images] == [_bytes(row) for row in expected]  # iteration, as tests do


def test_each_code_keeps_the_value_the_file_holds() -> None:
    """Coding a float split reads each code's value from the data rather than recomputing k/255: a file whose
    value for some byte is one float32 step away from k/255 (another rounding of the same division) must give
    batches with the file's bits."""
    values = (np.arange(256) / 255.0).astype(np.float32)
    values[37] = np.nextafter(values[37], np.float32(1))  # still nearest to 37/255
    x = np.tile(values, 3).reshape(3, 1, 16, 16)
    codes, table = palette(x)
    assert table[37] == values[37] != np.float32(37 / 255)
    assert np.array_equal(table[codes].view(np.uint32), x.view(np.uint32))


@pytest.mark.parametrize("x", [
    np.linspace(0, 1, 300, dtype=np.float32).reshape(3, 1, 10, 10),  # 300 values
    np.array([0.5, np.nextafter(np.float32(0.5), np.float32(1))], dtype=np.float32).reshape(1, 1, 1, 2),  # one code, two values
    np.array([-0.1, 0.5], dtype=np.float32).reshape(1, 1, 1, 2),  # outside [0, 1] (HAR's signals)
    np.array([np.nan, 0.5], dtype=np.float32).reshape(1, 1, 1, 2),
    np.array([-0.0, 0.0], dtype=np.float32).reshape(1, 1, 1, 2),  # equal values, different bits
])
def test_data_that_cannot_be_coded_stays_float32(x: np.ndarray) -> None:
    assert palette(x) is None
    out = normalized(x, np.zeros((1, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32))
    assert isinstance(out, torch.Tensor) and _bytes(out) == x.tobytes()


def test_a_byte_dataset_takes_a_quarter_of_the_memory_and_survives_pickling() -> None:
    rng = np.random.default_rng(1)
    x_tr = rng.integers(0, 256, size=(40, 1, 28, 28), dtype=np.uint8)
    x_te = rng.integers(0, 256, size=(8, 1, 28, 28), dtype=np.uint8)
    ds = package("bytes", x_tr, np.zeros(40), x_te, np.zeros(8), 10)
    assert ds.x_train.codes.numel() * ds.x_train.codes.element_size() == x_tr.nbytes  # 1 byte per pixel
    assert ds.in_channels == 1 and ds.image_size == (28, 28)
    again = pickle.loads(pickle.dumps(ds.x_test.share_memory_()))
    assert _bytes(again[:]) == _bytes(ds.x_test[:]) and _bytes(ds.x_test.to("cpu")[2:5]) == _bytes(ds.x_test[2:5])


def test_a_subset_stays_coded_and_decodes_to_the_same_bits() -> None:
    raw = np.random.default_rng(1).integers(0, 256, size=(40, 1, 6, 6), dtype=np.uint8)
    mean, std = channel_statistics(raw)
    images = normalized(raw, mean, std)
    expected = torch.from_numpy(_float_path(raw, mean, std))
    window = subset(images, slice(8, 30))
    assert isinstance(window, PaletteImages) and window.codes.data_ptr() == images.codes[8:].data_ptr()  # a view
    assert len(window) == 22 and _bytes(window[3:9]) == _bytes(expected[11:17])
    picked = subset(images, torch.tensor([5, 0, 39]))
    assert isinstance(picked, PaletteImages) and _bytes(picked[0:3]) == _bytes(expected[[5, 0, 39]])
    plain = torch.randn(10, 1, 2, 2)
    assert torch.equal(subset(plain, slice(2, 5)), plain[2:5])  # float32 images: plain indexing
