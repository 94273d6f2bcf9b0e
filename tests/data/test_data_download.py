"""Downloads from a local file:// mirror: checksums, atomic writes, nothing half-written."""

from __future__ import annotations

import hashlib

import pytest
import torch

import lmc.data.download as dl
from lmc.config import LmcError
from lmc.data import load


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _mirror(tmp_path, helpers, name="mnist"):
    """A folder with the four tiny IDX files, served as a file:// URL, and its checksums."""
    src = tmp_path / "mirror"
    arrays = helpers.write_mnist_folder(src, seed=7)
    sums = {p.name: _md5(p.read_bytes()) for p in src.iterdir()}
    return dl.Resource(src.as_uri() + "/", sums), arrays


def test_official_checksums_are_listed():
    assert dl.RESOURCES["mnist"].base_url == "https://ossci-datasets.s3.amazonaws.com/mnist/"
    assert dl.RESOURCES["fashion-mnist"].base_url.startswith("http://fashion-mnist.s3-website")
    assert dl.RESOURCES["cifar10"].files == {
        "cifar-10-binary.tar.gz": "c32a1d4ab5d03f1284b67883e8d87530"
    }
    for res in dl.RESOURCES.values():
        assert all(len(md5) == 32 for md5 in res.files.values())


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_download_idx_into_cache(isolated, helpers, monkeypatch, tmp_path, name):
    resource, arrays = _mirror(tmp_path, helpers)
    monkeypatch.setitem(dl.RESOURCES, name, resource)
    ds = load(name, download=True)
    folder = isolated.cache / name
    assert sorted(p.name for p in folder.iterdir()) == sorted(resource.files)  # no temp files
    for file_name, md5 in resource.files.items():
        assert _md5((folder / file_name).read_bytes()) == md5
    assert ds.y_train.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    # Found in the cache next time, without downloading (the mirror is gone).
    monkeypatch.setitem(dl.RESOURCES, name, dl.Resource("file:///nonexistent/", resource.files))
    assert torch.equal(load(name).x_train, ds.x_train)
    assert torch.equal(load(name, download=True).x_train, ds.x_train)


def test_checksum_mismatch_leaves_nothing(isolated, helpers, monkeypatch, tmp_path):
    resource, _ = _mirror(tmp_path, helpers)
    sums = dict(resource.files)
    sums["t10k-images-idx3-ubyte.gz"] = "0" * 32
    monkeypatch.setitem(dl.RESOURCES, "mnist", dl.Resource(resource.base_url, sums))
    with pytest.raises(LmcError, match="MD5") as err:
        load("mnist", download=True)
    assert "t10k-images-idx3-ubyte.gz" in str(err.value)
    folder = isolated.cache / "mnist"
    assert not (folder / "t10k-images-idx3-ubyte.gz").exists()
    assert not [p for p in folder.iterdir() if p.name.endswith(".part")]


def test_fetch_replaces_atomically_and_keeps_old_file_on_failure(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"new contents")
    dest = tmp_path / "out" / "file.bin"
    dest.parent.mkdir()
    dest.write_bytes(b"old")
    with pytest.raises(LmcError, match="expected"):
        dl.fetch(src.as_uri(), dest, _md5(b"something else"))
    assert dest.read_bytes() == b"old"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["file.bin"]
    dl.fetch(src.as_uri(), dest, _md5(b"new contents"))
    assert dest.read_bytes() == b"new contents"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["file.bin"]


def test_unreachable_url_is_an_error_and_leaves_nothing(tmp_path):
    dest = tmp_path / "out" / "file.bin"
    with pytest.raises(LmcError, match="could not download"):
        dl.fetch((tmp_path / "missing.bin").as_uri(), dest, "0" * 32)
    assert list(dest.parent.iterdir()) == []


def test_download_cifar10_archive_is_checked_and_unpacked(isolated, helpers, monkeypatch, tmp_path):
    files = helpers.make_cifar10_files(seed=2)
    members = {f"cifar-10-batches-bin/{k}": v for k, v in files.items() if not k.startswith("_")}
    archive = helpers.write_tar_gz(tmp_path / "mirror" / "cifar-10-binary.tar.gz", members)
    sums = {"cifar-10-binary.tar.gz": _md5(archive.read_bytes())}
    monkeypatch.setitem(dl.RESOURCES, "cifar10", dl.Resource(archive.parent.as_uri() + "/", sums))
    ds = load("cifar10", download=True)
    assert ds.x_train.shape == (10, 3, 32, 32)
    assert ds.y_test.tolist() == files["_arrays"][3].tolist()
    folder = isolated.cache / "cifar10"
    assert sorted(p.name for p in folder.iterdir()) == ["cifar-10-batches-bin"]  # archive removed
    assert torch.equal(load("cifar10").x_train, ds.x_train)


def test_download_cifar_bad_checksum(isolated, helpers, monkeypatch, tmp_path):
    archive = helpers.write_tar_gz(tmp_path / "m" / "cifar-100-binary.tar.gz", {"a/b": b"1"})
    sums = {"cifar-100-binary.tar.gz": "f" * 32}
    monkeypatch.setitem(dl.RESOURCES, "cifar100", dl.Resource(archive.parent.as_uri() + "/", sums))
    with pytest.raises(LmcError, match="MD5"):
        load("cifar100", download=True)
    assert list((isolated.cache / "cifar100").iterdir()) == []


def test_nothing_to_download_for_bundled_datasets():
    with pytest.raises(LmcError, match="cannot be downloaded"):
        dl.download("digits", "/nonexistent")
    assert load("digits", download=True).name == "digits"
