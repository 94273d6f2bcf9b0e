"""Binary CIFAR-10/100 readers, archive reading and safe extraction."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
import torch

from lmc.config import LmcError
from lmc.data import load
from lmc.data.cifar import LAYOUTS, extract_archive, parse_records


def _undo(ds, x):
    """Back from normalised floats to the bytes 0..255, per channel."""
    mean = torch.tensor(ds.mean, dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(ds.std, dtype=torch.float64).view(1, -1, 1, 1)
    return ((x.double() * std + mean) * 255).round().to(torch.uint8).numpy()


def test_pixel_order_is_chw():
    # One record: label 7, then R plane (value 10), G plane (20), B plane with a marker.
    pixels = np.concatenate([np.full(1024, 10), np.full(1024, 20), np.arange(1024) % 251])
    record = bytes([7]) + pixels.astype(np.uint8).tobytes()
    images, labels = parse_records(record, LAYOUTS["cifar10"])
    assert labels.tolist() == [7]
    assert images.shape == (1, 3, 32, 32)
    assert (images[0, 0] == 10).all() and (images[0, 1] == 20).all()
    # Row-major within a plane: pixel (row 1, column 2) is byte 1 * 32 + 2 of the blue plane.
    assert images[0, 2, 1, 2] == 34 and images[0, 2, 31, 31] == 1023 % 251


def test_cifar10_folder(isolated, helpers):
    files = helpers.make_cifar10_files()
    x_train, y_train, x_test, y_test = files["_arrays"]
    helpers.write_files(isolated.root / "cifar10", files)
    ds = load("cifar10", data_dir=isolated.root)
    assert ds.name == "cifar10" and ds.num_classes == 10 and ds.augment is True
    assert ds.input_shape == (3, 32, 32) and ds.x_train.dtype == torch.float32
    assert ds.x_train.shape == (10, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    assert torch.equal(ds.y_train, torch.from_numpy(y_train).long())  # batches 1..5 in order
    assert torch.equal(ds.y_test, torch.from_numpy(y_test).long())
    assert len(ds.mean) == 3 and len(ds.std) == 3
    for c in range(3):
        assert ds.mean[c] == pytest.approx(x_train[:, c].mean() / 255, rel=1e-9)
        assert ds.std[c] == pytest.approx(x_train[:, c].std() / 255, rel=1e-9)
    assert np.array_equal(_undo(ds, ds.x_train), x_train)
    assert np.array_equal(_undo(ds, ds.x_test), x_test)


def test_cifar10_extracted_folder_name_and_archive(isolated, helpers):
    files = helpers.make_cifar10_files(seed=1)
    helpers.write_files(isolated.root / "cifar-10-batches-bin", files)
    from_folder = load("cifar10", data_dir=isolated.root)
    members = {f"cifar-10-batches-bin/{k}": v for k, v in files.items() if not k.startswith("_")}
    members["cifar-10-batches-bin/batches.meta.txt"] = b"airplane\n"
    helpers.write_tar_gz(isolated.env / "cifar10" / "cifar-10-binary.tar.gz", members)
    from_archive = load("cifar10", data_dir=isolated.env)
    assert torch.equal(from_folder.x_train, from_archive.x_train)
    assert torch.equal(from_folder.y_test, from_archive.y_test)
    assert not (isolated.env / "cifar10" / "cifar-10-batches-bin").exists()  # read in place


def test_cifar100_uses_fine_labels(isolated, helpers):
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, (6, 3, 32, 32), dtype=np.uint8)
    x_test = rng.integers(0, 256, (4, 3, 32, 32), dtype=np.uint8)
    fine_train, fine_test = np.array([0, 99, 5, 42, 7, 63]), np.array([98, 1, 2, 3])
    coarse_train, coarse_test = fine_train // 5, fine_test // 5
    folder = isolated.root / "cifar100" / "cifar-100-binary"
    helpers.write_files(folder, {
        "train.bin": helpers.cifar_records(fine_train, x_train, coarse_train),
        "test.bin": helpers.cifar_records(fine_test, x_test, coarse_test),
    })  # fmt: skip
    ds = load("cifar100", data_dir=isolated.root)
    assert ds.num_classes == 100 and ds.augment is True and ds.input_shape == (3, 32, 32)
    assert ds.y_train.tolist() == fine_train.tolist()
    assert ds.y_test.tolist() == fine_test.tolist()
    assert np.array_equal(_undo(ds, ds.x_train), x_train)
    assert np.array_equal(_undo(ds, ds.x_test), x_test)


def test_cifar_bad_files_are_errors(isolated, helpers):
    files = helpers.make_cifar10_files()
    folder = helpers.write_files(isolated.root / "cifar10", files)
    (folder / "data_batch_3.bin").write_bytes(files["data_batch_3.bin"][:-5])
    with pytest.raises(LmcError, match="data_batch_3.bin"):
        load("cifar10", data_dir=isolated.root)
    rec = bytes([1, 200]) + bytes(3072)  # coarse 1, fine 200
    with pytest.raises(LmcError, match="label 200"):
        parse_records(rec, LAYOUTS["cifar100"])
    with pytest.raises(LmcError, match="label 10"):
        parse_records(bytes([10]) + bytes(3072), LAYOUTS["cifar10"])


def test_cifar_missing_lists_folders(isolated):
    with pytest.raises(LmcError) as err:
        load("cifar100", data_dir=isolated.root)
    message = str(err.value)
    for folder in ("cifar100", "cifar100/cifar-100-binary", "cifar-100-binary"):
        assert str(isolated.root / folder) in message
    assert str(isolated.cache / "cifar100") in message
    assert "--download" in message and "cifar-100-binary.tar.gz" in message


def test_archive_with_wrong_contents_is_an_error(isolated, helpers):
    helpers.write_tar_gz(isolated.root / "cifar10" / "cifar-10-binary.tar.gz", {"x/a.txt": b"x"})
    with pytest.raises(LmcError, match="lacks data_batch_1.bin"):
        load("cifar10", data_dir=isolated.root)
    (isolated.root / "cifar10" / "cifar-10-binary.tar.gz").write_bytes(b"not a tar at all")
    with pytest.raises(LmcError, match="not a readable CIFAR archive"):
        load("cifar10", data_dir=isolated.root)


# --------------------------------------------------------------------------- extraction


def test_extract_archive_places_files(tmp_path, helpers):
    archive = helpers.write_tar_gz(tmp_path / "a.tar.gz", {"top/x.bin": b"123", "top/s/y": b"4"})
    created = extract_archive(archive, tmp_path / "out")
    assert created == [tmp_path / "out" / "top"]
    assert (tmp_path / "out" / "top" / "x.bin").read_bytes() == b"123"
    assert (tmp_path / "out" / "top" / "s" / "y").read_bytes() == b"4"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["top"]  # no temp left


@pytest.mark.parametrize("evil", ["../escape.bin", "top/../../escape.bin", "/tmp/abs-escape.bin"])
def test_extract_archive_refuses_path_traversal(tmp_path, helpers, evil):
    archive = helpers.write_tar_gz(tmp_path / "a.tar.gz", {"top/ok.bin": b"1", evil: b"evil"})
    with pytest.raises(LmcError, match="unsafe path"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "escape.bin").exists()
    assert list((tmp_path / "out").iterdir()) == []  # nothing placed, temp folder removed


def test_extract_archive_skips_links(tmp_path):
    archive = tmp_path / "links.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("top/link")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
        info = tarfile.TarInfo("top/file")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "top" / "link").exists()
    assert not (tmp_path / "out" / "top" / "link").is_symlink()
    assert (tmp_path / "out" / "top" / "file").read_bytes() == b"ok"
