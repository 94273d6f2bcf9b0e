"""Batching by index and augmentation as batched tensor ops.

All randomness is drawn on the CPU from an explicit ``torch.Generator`` and then moved to the
data's device, so a seed gives the same batches and the same augmentations on every device.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from lmc.config import LmcError


def _check_cpu_generator(generator: torch.Generator, what: str) -> None:
    if generator.device.type != "cpu":
        raise LmcError(
            f"{what} needs a CPU torch.Generator (got one on {generator.device}); "
            "create it with torch.Generator().manual_seed(seed)"
        )


def batches(
    n: int,
    batch_size: int,
    *,
    generator: torch.Generator | None = None,
    shuffle: bool = False,
    drop_last: bool = False,
    device: str | torch.device = "cpu",
) -> Iterator[torch.Tensor]:
    """Yield ``int64`` index batches covering ``range(n)``, each on ``device``.

    With ``shuffle=True`` the order is ``torch.randperm(n, generator=generator)`` drawn on the
    CPU (a generator is then required: no hidden global randomness); otherwise ``0..n-1`` in
    order. Batches have ``batch_size`` indices, the last one fewer unless ``drop_last`` drops
    it. Use them as ``x[idx], y[idx]``.
    """
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise LmcError(f"batches: n={n!r} must be a non-negative integer")
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise LmcError(f"batch size {batch_size!r} must be a positive integer")
    n, batch_size = int(n), int(batch_size)
    dev = torch.device(device)
    if shuffle:
        if generator is None:
            raise LmcError(
                "batches(shuffle=True) needs a generator; pass "
                "generator=torch.Generator().manual_seed(seed)"
            )
        _check_cpu_generator(generator, "batches")
        order = torch.randperm(n, generator=generator, dtype=torch.int64).to(dev)
    else:
        order = torch.arange(n, dtype=torch.int64, device=dev)
    stop = n - n % batch_size if drop_last else n
    # Arguments are checked above, at the call; the batches themselves come lazily.
    return (order[start : start + batch_size] for start in range(0, stop, batch_size))


def num_batches(n: int, batch_size: int, *, drop_last: bool = False) -> int:
    """How many batches :func:`batches` yields for these arguments."""
    return n // batch_size if drop_last else -(-n // batch_size)


def random_crop_flip(
    x: torch.Tensor, generator: torch.Generator, padding: int = 4, flip: bool = True
) -> torch.Tensor:
    """Random-crop-with-padding and horizontal flip of a batch ``x`` of shape ``(B, C, H, W)``.

    Each example is zero-padded by ``padding`` pixels on every side (zero is the channel mean
    once data are normalised), cropped back to ``H x W`` at an offset ``(dy, dx)`` drawn
    uniformly from ``{0, .., 2*padding}^2``, and, when ``flip``, mirrored left-right with
    probability 1/2. Output pixel ``[b, c, i, j]`` is padded pixel ``[b, c, i + dy, j + dx]``
    (``W - 1 - j`` instead of ``j`` when flipped). Draw order from ``generator`` (CPU): ``dy``,
    then ``dx`` (B each), then the B flip bits. Returns a new tensor on ``x``'s device and dtype;
    ``x`` is not modified. Fully vectorised (one gather), no loop over examples.
    """
    if x.dim() != 4:
        raise LmcError(f"random_crop_flip expects a (B, C, H, W) batch, got shape {tuple(x.shape)}")
    if isinstance(padding, bool) or int(padding) != padding or padding < 0:
        raise LmcError(f"random_crop_flip padding={padding!r} must be a non-negative integer")
    _check_cpu_generator(generator, "random_crop_flip")
    padding = int(padding)
    b, c, h, w = x.shape
    dy = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    if flip:
        flips = torch.randint(0, 2, (b,), generator=generator).bool()
    else:
        flips = torch.zeros(b, dtype=torch.bool)
    dev = x.device
    dy, dx, flips = dy.to(dev), dx.to(dev), flips.to(dev)
    padded = F.pad(x, (padding, padding, padding, padding)) if padding else x
    rows = dy[:, None] + torch.arange(h, device=dev)  # (B, H)
    cols = torch.arange(w, device=dev).expand(b, w)
    cols = torch.where(flips[:, None], (w - 1) - cols, cols) + dx[:, None]  # (B, W)
    # One gather over the flattened padded planes (several times faster than advanced indexing).
    wp = w + 2 * padding
    flat_index = (rows[:, :, None] * wp + cols[:, None, :]).reshape(b, 1, h * w)
    planes = padded.reshape(b, c, (h + 2 * padding) * wp)
    return planes.gather(2, flat_index.expand(b, c, h * w)).reshape(b, c, h, w)
