"""Index batches and random crop + flip augmentation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lmc.config import LmcError
from lmc.data import batches, num_batches, random_crop_flip


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- batches


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("n,batch_size", [(10, 3), (12, 4), (1, 5), (7, 7)])
def test_batches_cover_every_index_once(n, batch_size, shuffle):
    out = list(batches(n, batch_size, generator=_gen(0), shuffle=shuffle))
    assert all(b.dtype == torch.int64 and b.device.type == "cpu" for b in out)
    assert [len(b) for b in out[:-1]] == [batch_size] * (len(out) - 1)
    assert len(out) == num_batches(n, batch_size)
    flat = torch.cat(out)
    assert sorted(flat.tolist()) == list(range(n))
    if not shuffle:
        assert flat.tolist() == list(range(n))


def test_batches_same_seed_same_order():
    a = torch.cat(list(batches(100, 16, generator=_gen(5), shuffle=True)))
    b = torch.cat(list(batches(100, 16, generator=_gen(5), shuffle=True)))
    c = torch.cat(list(batches(100, 16, generator=_gen(6), shuffle=True)))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(a, torch.arange(100))
    assert torch.equal(a, torch.randperm(100, generator=_gen(5)))  # the documented draw


def test_batches_drop_last():
    out = list(batches(10, 3, drop_last=True))
    assert [b.tolist() for b in out] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert num_batches(10, 3, drop_last=True) == 3
    out = list(batches(10, 3, generator=_gen(0), shuffle=True, drop_last=True))
    assert [len(b) for b in out] == [3, 3, 3]
    assert len(set(torch.cat(out).tolist())) == 9
    assert len(list(batches(9, 3, drop_last=True))) == 3
    assert list(batches(2, 3, drop_last=True)) == []
    assert list(batches(0, 3)) == []


def test_batches_bad_arguments():
    # Raised at the call, not at the first batch.
    with pytest.raises(LmcError, match="generator"):
        batches(10, 3, shuffle=True)
    with pytest.raises(LmcError, match="batch size"):
        batches(10, 0)
    with pytest.raises(LmcError):
        batches(-1, 3)


# --------------------------------------------------------------------------- augmentation


def _images(b=16, c=3, h=8, w=10) -> torch.Tensor:
    # Unique, non-zero values so every pixel can be traced back to where it came from.
    return torch.arange(1, b * c * h * w + 1, dtype=torch.float32).reshape(b, c, h, w)


def test_crop_flip_shape_dtype_and_input_untouched():
    x = _images()
    before = x.clone()
    out = random_crop_flip(x, _gen(0))
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert torch.equal(x, before)
    assert random_crop_flip(x[:0], _gen(0)).shape == (0, *x.shape[1:])
    out64 = random_crop_flip(x.double(), _gen(0))
    assert out64.dtype == torch.float64 and torch.equal(out64.float(), out)


def test_crop_flip_deterministic_per_seed():
    x = torch.randn(32, 3, 12, 12)
    a, b = random_crop_flip(x, _gen(1)), random_crop_flip(x, _gen(1))
    assert torch.equal(a, b)
    assert not torch.equal(a, random_crop_flip(x, _gen(2)))
    g = _gen(1)
    first, second = random_crop_flip(x, g), random_crop_flip(x, g)
    assert not torch.equal(first, second)  # the generator advances


def test_flip_only_gives_image_or_mirror():
    x = torch.randn(64, 2, 5, 7)
    out = random_crop_flip(x, _gen(3), padding=0, flip=True)
    same = (out == x).flatten(1).all(1)
    mirrored = (out == x.flip(-1)).flatten(1).all(1)
    assert bool((same | mirrored).all())
    assert 10 < int(mirrored.sum()) < 54  # p = 1/2 per example
    assert torch.equal(random_crop_flip(x, _gen(3), padding=0, flip=False), x)


def test_crop_is_a_shifted_window_of_the_padded_image():
    p = 2
    x = _images(b=40)
    out = random_crop_flip(x, _gen(4), padding=p, flip=False)
    padded = F.pad(x, (p, p, p, p))
    h, w = x.shape[-2:]
    offsets = set()
    for i in range(len(x)):
        matches = [
            (dy, dx)
            for dy in range(2 * p + 1)
            for dx in range(2 * p + 1)
            if torch.equal(out[i], padded[i, :, dy : dy + h, dx : dx + w])
        ]
        assert len(matches) == 1, f"example {i} is not a shifted copy"
        offsets.add(matches[0])
    assert len(offsets) > 8  # offsets vary across examples
    # A shift moves the image: same pixel values, zeros where the border came in.
    shifted = [i for i in range(len(x)) if not torch.equal(out[i], x[i])]
    assert shifted and all((out[i] == 0).any() for i in shifted)


def test_crop_and_flip_follow_the_documented_draws():
    p = 3
    x = _images(b=20, h=6, w=9)
    out = random_crop_flip(x, _gen(7), padding=p, flip=True)
    g = _gen(7)
    dy = torch.randint(0, 2 * p + 1, (20,), generator=g)
    dx = torch.randint(0, 2 * p + 1, (20,), generator=g)
    flips = torch.randint(0, 2, (20,), generator=g).bool()
    padded = F.pad(x, (p, p, p, p))
    for i in range(20):
        window = padded[i, :, dy[i] : dy[i] + 6, dx[i] : dx[i] + 9]
        assert torch.equal(out[i], window.flip(-1) if flips[i] else window)


def test_crop_flip_bad_input():
    with pytest.raises(LmcError, match="B, C, H, W"):
        random_crop_flip(torch.zeros(3, 8, 8), _gen(0))
    with pytest.raises(LmcError, match="padding"):
        random_crop_flip(torch.zeros(1, 1, 8, 8), _gen(0), padding=-1)
