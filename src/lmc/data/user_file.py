"""The user's own data: a ``.npz`` or ``.safetensors`` file holding ``x`` and ``y``.

Keys:

- ``x``: the inputs, shape ``(N, *input_shape)``, used exactly as stored (no normalisation:
  the file holds what the model takes). Floating values become ``float32`` and must be
  finite; integer values (token ids) stay ``int64``.
- ``y``: integer class labels ``0..C−1``, shape ``(N,)``; ``C`` = the largest label + 1.
- optionally ``x_test`` and ``y_test`` (both or neither): the test split. Without them the
  examples are split as ``digits`` is: from each class a seeded random 25% (numpy
  ``default_rng(0)``, :func:`lmc.data.loaders.stratified_split`) is the test split, the rest
  the training split (BatchNorm resets and alignment read it).

Other keys are ignored with a :class:`lmc.config.LmcWarning`. Nothing is unpickled
(``numpy.load(..., allow_pickle=False)``, ``safetensors``). Errors name the file and the key.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch

from lmc.config import LmcError, LmcWarning, check_regular_file, resolve_device

from .dataset import Dataset
from .loaders import DIGITS_SPLIT_SEED, DIGITS_TEST_FRACTION, stratified_split

SUFFIXES = (".npz", ".safetensors")
KEYS = ("x", "y", "x_test", "y_test")
TEST_FRACTION = DIGITS_TEST_FRACTION
SPLIT_SEED = DIGITS_SPLIT_SEED


def is_data_file(text: str) -> bool:
    """Whether ``text`` names a data file (by its suffix) rather than a zoo dataset."""
    return Path(str(text)).suffix.lower() in SUFFIXES


def _read(path: Path) -> dict[str, np.ndarray]:
    suffix = path.suffix.lower()
    if suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as archive:
                return {k: np.asarray(archive[k]) for k in archive.files}
        except ValueError as exc:  # object arrays, which would need unpickling
            raise LmcError(
                f"{path}: cannot read without unpickling ({exc}); store numeric arrays only"
            ) from exc
        except (OSError, EOFError) as exc:
            raise LmcError(f"{path} is not a readable .npz file: {exc}") from exc
    if suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            tensors = load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise LmcError(f"{path} is not a readable safetensors file: {exc}") from exc
        out = {}
        for k, t in tensors.items():
            t = t.float() if t.dtype in (torch.bfloat16, torch.float16) else t
            out[k] = t.numpy()
        return out
    raise LmcError(f"{path}: data files are {' or '.join(SUFFIXES)}, not {suffix or '(none)'}")


def _inputs(path: Path, key: str, x: np.ndarray) -> torch.Tensor:
    if x.ndim < 2:
        raise LmcError(
            f"{path}[{key!r}] must have shape (N, ...) with one row per example, "
            f"has shape {x.shape}"
        )
    if x.dtype == np.bool_ or np.issubdtype(x.dtype, np.integer):
        return torch.from_numpy(np.ascontiguousarray(x).astype(np.int64))
    if not np.issubdtype(x.dtype, np.floating):
        raise LmcError(f"{path}[{key!r}] must hold numbers, has dtype {x.dtype}")
    t = torch.from_numpy(np.ascontiguousarray(x).astype(np.float32))
    bad = int((~torch.isfinite(t)).sum())
    if bad:
        raise LmcError(f"{path}[{key!r}] holds {bad} non-finite value(s) (NaN or inf)")
    return t


def _labels(path: Path, key: str, y: np.ndarray, n: int, x_key: str) -> torch.Tensor:
    if not np.issubdtype(y.dtype, np.integer):
        raise LmcError(
            f"{path}[{key!r}] must hold integer class labels 0..C-1, has dtype "
            f"{y.dtype} (save it as y.astype('int64'))"
        )
    if y.ndim != 1:
        raise LmcError(
            f"{path}[{key!r}] must have shape (N,), one label per example, has shape {y.shape}"
        )
    if len(y) != n:
        raise LmcError(f"{path}: {key!r} holds {len(y)} labels but {x_key!r} {n} examples")
    if len(y) and int(y.min()) < 0:
        raise LmcError(
            f"{path}[{key!r}] holds a negative label ({int(y.min())}); labels are 0..C-1"
        )
    return torch.from_numpy(np.ascontiguousarray(y).astype(np.int64))


def load_user_data(
    path: str | os.PathLike,
    *,
    device: str | torch.device = "cpu",
) -> Dataset:
    """The :class:`lmc.data.Dataset` in the file ``path`` (keys and conventions in the module
    docstring), on ``device``. ``name`` is the file's name, ``mean``/``std`` are 0 and 1 (the
    inputs are not normalised) and ``augment`` is off."""
    path = Path(path)
    check_regular_file(path, "data file")  # missing, a folder or a FIFO: one line, at once
    arrays = _read(path)
    held = ", ".join(sorted(arrays)) or "nothing"
    for key in ("x", "y"):
        if key not in arrays:
            raise LmcError(
                f"{path} has no {key!r} (it holds {held}); a data file holds x, y "
                "and optionally x_test, y_test"
            )
    if ("x_test" in arrays) != ("y_test" in arrays):
        have, lack = ("x_test", "y_test") if "x_test" in arrays else ("y_test", "x_test")
        raise LmcError(f"{path} has {have!r} but no {lack!r}: give both or neither")
    extra = sorted(set(arrays) - set(KEYS))
    if extra:
        warnings.warn(
            f"{path}: ignoring key(s) {', '.join(extra)} (a data file holds x, y and "
            "optionally x_test, y_test)",
            LmcWarning,
            stacklevel=2,
        )
    x = _inputs(path, "x", arrays["x"])
    y = _labels(path, "y", arrays["y"], len(x), "x")
    if "x_test" in arrays:
        x_test = _inputs(path, "x_test", arrays["x_test"])
        y_test = _labels(path, "y_test", arrays["y_test"], len(x_test), "x_test")
        if x_test.shape[1:] != x.shape[1:]:
            raise LmcError(
                f"{path}: 'x_test' has examples of shape {tuple(x_test.shape[1:])} "
                f"but 'x' of shape {tuple(x.shape[1:])}"
            )
        if x_test.is_floating_point() != x.is_floating_point():
            raise LmcError(f"{path}: 'x' and 'x_test' must both be floating or both integer")
        x_train, y_train = x, y
    else:
        train_idx, test_idx = stratified_split(y.numpy(), TEST_FRACTION, SPLIT_SEED)
        train, test = torch.from_numpy(train_idx), torch.from_numpy(test_idx)
        x_train, y_train, x_test, y_test = x[train], y[train], x[test], y[test]
    for split, xs in (("training", x_train), ("test", x_test)):
        if len(xs) < 2:
            raise LmcError(
                f"{path}: the {split} split has {len(xs)} example(s); at least 2 are "
                "needed (add examples, or give x_test and y_test)"
            )
    num_classes = int(max(int(y_train.max()), int(y_test.max()))) + 1
    shape = tuple(int(d) for d in x_train.shape[1:])
    channels = shape[0]
    ds = Dataset(
        name=path.name,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=num_classes,
        input_shape=shape,
        mean=(0.0,) * channels,
        std=(1.0,) * channels,
        augment=False,
    )
    dev = resolve_device(device)
    return ds if dev.type == "cpu" else ds.to(dev)
