"""IDX reader, MNIST/Fashion-MNIST loading, the lookup order and the not-found message."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

import lmc.data.paths as data_paths
from lmc.config import LmcError
from lmc.data import default_data_dirs, load
from lmc.data.idx import parse_idx, read_idx

# --------------------------------------------------------------------------- IDX reader


def test_idx_reads_raw_and_gzip(tmp_path, helpers):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = helpers.write_idx(tmp_path / "images", images, gz=False)
    gz = helpers.write_idx(tmp_path / "images.gz", images, gz=True)
    assert raw.read_bytes()[:8] == bytes([0, 0, 8, 3, 0, 0, 0, 2])
    for path in (raw, gz):
        out = read_idx(path)
        assert out.dtype == np.uint8 and out.shape == (2, 3, 4)
        assert np.array_equal(out, images)


def test_idx_big_endian_multibyte_types(tmp_path):
    # Hand-built: int32 type 0x0C, 1 dim of size 2, values 0x01020304 and -2, big-endian.
    data = bytes([0, 0, 0x0C, 1, 0, 0, 0, 2, 1, 2, 3, 4, 0xFF, 0xFF, 0xFF, 0xFE])
    (tmp_path / "ints").write_bytes(data)
    out = read_idx(tmp_path / "ints")
    assert out.tolist() == [0x01020304, -2]
    floats = np.array([1.5, -2.25], dtype=">f4")
    data = bytes([0, 0, 0x0D, 1, 0, 0, 0, 2]) + floats.tobytes()
    assert parse_idx(data).tolist() == [1.5, -2.25]


def test_idx_bad_magic_is_an_error_naming_the_file(tmp_path, helpers):
    good = helpers.idx_bytes(np.zeros((2, 2), dtype=np.uint8))
    for name, data in {"bad-type": good[:2] + b"\x07" + good[3:], "bad-zero": b"\x01" + good[1:],
                       "png": b"\x89PNG\r\n\x1a\n" + good}.items():  # fmt: skip
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(LmcError, match="magic") as err:
            read_idx(path)
        assert str(path) in str(err.value)


def test_idx_truncated_raw_and_gzip_are_errors(tmp_path, helpers):
    data = helpers.idx_bytes(np.ones((5, 28, 28), dtype=np.uint8))
    cases = {
        "short-data": data[:-1],
        "short-header": data[:9],
        "tiny": data[:2],
        "extra": data + b"\x00",
        "cut.gz": gzip.compress(data)[:-30],
    }
    for name, blob in cases.items():
        path = tmp_path / name
        path.write_bytes(blob)
        with pytest.raises(LmcError) as err:
            read_idx(path)
        message = str(err.value)
        assert str(path) in message and "\n" not in message


def test_idx_missing_file_is_an_error(tmp_path):
    with pytest.raises(LmcError, match="cannot read"):
        read_idx(tmp_path / "nope")


# --------------------------------------------------------------------------- loading


def _check_loaded(ds, arrays, name):
    xs = arrays["train-images-idx3-ubyte"]
    ys = arrays["train-labels-idx1-ubyte"]
    assert ds.name == name
    assert ds.input_shape == (1, 28, 28) and ds.num_classes == 10 and ds.augment is False
    assert ds.x_train.shape == (len(xs), 1, 28, 28) and ds.x_train.dtype == torch.float32
    assert ds.x_test.shape == (len(arrays["t10k-images-idx3-ubyte"]), 1, 28, 28)
    assert torch.equal(ds.y_train, torch.from_numpy(ys.astype(np.int64)))
    assert torch.equal(ds.y_test, torch.from_numpy(arrays["t10k-labels-idx1-ubyte"]).long())
    # Stats are those of the training pixels in [0, 1]; undoing them gives the bytes back.
    assert ds.mean[0] == pytest.approx(xs.mean() / 255, rel=1e-9)
    assert ds.std[0] == pytest.approx(xs.std() / 255, rel=1e-9)
    back = ds.x_train[:, 0].double() * ds.std[0] + ds.mean[0]
    assert torch.allclose(back * 255, torch.from_numpy(xs).double(), atol=1e-3)
    back = ds.x_test[:, 0].double() * ds.std[0] + ds.mean[0]
    assert torch.allclose(back * 255, torch.from_numpy(arrays["t10k-images-idx3-ubyte"]).double(),
                          atol=1e-3)  # fmt: skip


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_from_data_dir(isolated, helpers, gz):
    arrays = helpers.write_mnist_folder(isolated.root / "mnist", gz=gz)
    ds = load("mnist", data_dir=isolated.root)
    _check_loaded(ds, arrays, "mnist")
    again = load("mnist", data_dir=str(isolated.root))
    assert torch.equal(ds.x_train, again.x_train)


def test_fashion_mnist_from_lmc_data_env(isolated, helpers, monkeypatch):
    arrays = helpers.write_mnist_folder(isolated.env / "fashion-mnist", seed=3)
    monkeypatch.setenv("LMC_DATA", str(isolated.env))
    _check_loaded(load("fashion-mnist"), arrays, "fashion-mnist")
    with pytest.raises(LmcError, match="not found"):  # mnist is a different subfolder
        load("mnist")


def test_fashion_mnist_from_cache_folder(isolated, helpers):
    arrays = helpers.write_mnist_folder(isolated.cache / "fashion-mnist", seed=4)
    _check_loaded(load("fashion-mnist"), arrays, "fashion-mnist")


def test_fashion_mnist_from_debian_location_directly(isolated, helpers):
    arrays = helpers.write_mnist_folder(isolated.debian, seed=5)  # files directly in it
    _check_loaded(load("fashion-mnist"), arrays, "fashion-mnist")
    with pytest.raises(LmcError, match="not found"):  # only fashion-mnist looks there
        load("mnist")


def test_torchvision_layout_accepted(isolated, helpers):
    arrays = helpers.write_mnist_folder(isolated.root / "MNIST" / "raw", gz=False, seed=6)
    _check_loaded(load("mnist", data_dir=isolated.root), arrays, "mnist")


def test_lookup_order_data_dir_then_env_then_cache_then_debian(isolated, helpers, monkeypatch):
    marks = {}
    for seed, where in enumerate(
        [
            isolated.debian,
            isolated.cache / "fashion-mnist",
            isolated.env / "fashion-mnist",
            isolated.root / "fashion-mnist",
        ]  # fmt: skip
    ):
        marks[where] = helpers.write_mnist_folder(where, seed=10 + seed)["train-labels-idx1-ubyte"]
    monkeypatch.setenv("LMC_DATA", str(isolated.env))

    def labels(**kw):
        return load("fashion-mnist", **kw).y_train.numpy()

    assert np.array_equal(labels(data_dir=isolated.root), marks[isolated.root / "fashion-mnist"])
    assert np.array_equal(labels(), marks[isolated.env / "fashion-mnist"])
    monkeypatch.delenv("LMC_DATA")
    assert np.array_equal(labels(), marks[isolated.cache / "fashion-mnist"])
    monkeypatch.setenv("XDG_CACHE_HOME", str(isolated.root / "empty"))
    assert np.array_equal(labels(), marks[isolated.debian])


def test_default_data_dirs(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("LMC_DATA", str(tmp_path / "a") + ":" + str(tmp_path / "b"))
    assert default_data_dirs(tmp_path / "d") == [
        tmp_path / "d", tmp_path / "a", tmp_path / "b", tmp_path / "xdg" / "lmc"
    ]  # fmt: skip
    monkeypatch.delenv("LMC_DATA")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_data_dirs() == [tmp_path / "home" / ".cache" / "lmc"]


def test_missing_dataset_names_every_folder_searched(isolated, monkeypatch):
    monkeypatch.setenv("LMC_DATA", str(isolated.env))
    with pytest.raises(LmcError) as err:
        load("fashion-mnist", data_dir=isolated.root)
    message = str(err.value)
    assert "\n" not in message
    for folder in (isolated.root / "fashion-mnist", isolated.env / "fashion-mnist",
                   isolated.cache / "fashion-mnist", isolated.debian):  # fmt: skip
        assert str(folder) in message
    assert "--download" in message and "--data-dir" in message
    assert "apt-get install dataset-fashion-mnist" in message

    with pytest.raises(LmcError) as err:
        load("mnist")
    message = str(err.value)
    assert str(isolated.cache / "mnist") in message and "--download" in message
    assert "apt-get" not in message and str(isolated.debian) not in message


def test_incomplete_folder_is_reported(isolated, helpers):
    helpers.write_mnist_folder(isolated.root / "mnist")
    (isolated.root / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(LmcError, match="lacks t10k-labels-idx1-ubyte"):
        load("mnist", data_dir=isolated.root)


def test_corrupt_file_found_is_an_error_naming_it(isolated, helpers):
    helpers.write_mnist_folder(isolated.root / "mnist")
    bad = isolated.root / "mnist" / "train-images-idx3-ubyte.gz"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(LmcError) as err:
        load("mnist", data_dir=isolated.root)
    assert str(bad) in str(err.value)


def test_label_count_mismatch_is_an_error(isolated, helpers):
    helpers.write_mnist_folder(isolated.root / "mnist")
    labels = isolated.root / "mnist" / "train-labels-idx1-ubyte.gz"
    helpers.write_idx(labels, np.zeros(3, dtype=np.uint8))
    with pytest.raises(LmcError, match="labels"):
        load("mnist", data_dir=isolated.root)


# --------------------------------------------------------------------------- real data

REAL = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(
    not (REAL / "train-images-idx3-ubyte.gz").is_file(),
    reason="Debian's dataset-fashion-mnist package is not installed",
)
def test_real_fashion_mnist_from_debian_package(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing found before the Debian folder
    monkeypatch.delenv("LMC_DATA", raising=False)
    monkeypatch.setattr(data_paths, "DEBIAN_FASHION_MNIST", REAL)
    ds = load("fashion-mnist")
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert ds.num_classes == 10
    assert torch.equal(torch.bincount(ds.y_train), torch.full((10,), 6000))
    assert torch.equal(torch.bincount(ds.y_test), torch.full((10,), 1000))
    assert ds.mean[0] == pytest.approx(0.2860, abs=1e-4)
    assert ds.std[0] == pytest.approx(0.3530, abs=1e-4)
    assert abs(ds.x_train.double().mean().item()) < 1e-4
