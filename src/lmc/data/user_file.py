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
- optionally ``task``: the name of the file's task (:mod:`lmc.data.tasks`; default
  ``classification``), a string (in a ``.npz`` a 0-d string array, ``np.array("name")``; in a
  ``.safetensors`` file its metadata entry ``"task"``). For any other task than
  classification ``y`` holds that task's targets, checked by the task
  (:meth:`lmc.data.Task.check`): integer values stay ``int64``, floating ones become
  ``float32`` (finite); ``num_classes`` is the largest integer target + 1, or for floating
  targets the size of their last axis (1 for ``(N,)``), the number of outputs per example;
  without a test split a seeded random 25% of the examples (numpy ``default_rng(0)``) is the
  test split (1-D integer targets are split by class, as above). A task must be registered
  (:func:`lmc.data.register_task`) in the process that reads the file.

Other keys are ignored with a :class:`lmc.config.LmcWarning`. Nothing is unpickled
(``numpy.load(..., allow_pickle=False)``, ``safetensors``). Errors name the file and the key.
"""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from lmc.config import LmcError, LmcWarning, check_regular_file, resolve_device

from .dataset import Dataset
from .loaders import DIGITS_SPLIT_SEED, DIGITS_TEST_FRACTION, stratified_split
from .tasks import CLASSIFICATION, TASKS, Task

SUFFIXES = (".npz", ".safetensors")
KEYS = ("x", "y", "x_test", "y_test", "task")
#: The key (a ``.npz`` array, a ``.safetensors`` metadata entry) naming the file's task.
TASK_KEY = "task"
TEST_FRACTION = DIGITS_TEST_FRACTION
SPLIT_SEED = DIGITS_SPLIT_SEED


def is_data_file(text: str) -> bool:
    """Whether ``text`` names a data file (by its suffix) rather than a zoo dataset."""
    return Path(str(text)).suffix.lower() in SUFFIXES


def _read(path: Path) -> dict[str, np.ndarray]:
    """The file's arrays by key (a ``.safetensors`` file's metadata ``task`` as the 0-d string
    array ``task``)."""
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
        from safetensors import SafetensorError, safe_open
        from safetensors.torch import load_file

        try:
            tensors = load_file(str(path), device="cpu")
            with safe_open(str(path), "pt") as handle:
                metadata = handle.metadata() or {}
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise LmcError(f"{path} is not a readable safetensors file: {exc}") from exc
        out = {}
        for k, t in tensors.items():
            t = t.float() if t.dtype in (torch.bfloat16, torch.float16) else t
            out[k] = t.numpy()
        if TASK_KEY in metadata and TASK_KEY not in out:
            out[TASK_KEY] = np.asarray(metadata[TASK_KEY])
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


def _task(path: Path, arrays: dict[str, np.ndarray]) -> Task:
    """The file's task: ``classification`` without a ``task`` key, else the registered task
    the key names."""
    if TASK_KEY not in arrays:
        return CLASSIFICATION
    value = arrays[TASK_KEY]
    if value.shape != () or value.dtype.kind not in "US":
        raise LmcError(
            f"{path}[{TASK_KEY!r}] must be one string naming the task (np.array('name')), "
            f"has dtype {value.dtype} and shape {value.shape}"
        )
    name = str(value.item().decode() if value.dtype.kind == "S" else value.item())
    task = TASKS.get(name)
    if task is None:
        raise LmcError(
            f"{path}[{TASK_KEY!r}] names the task {name!r}, which is not registered (known: "
            f"{', '.join(sorted(TASKS))}); register it first (lmc.data.register_task)"
        )
    return task


def _targets(path: Path, key: str, y: np.ndarray, n: int, x_key: str, task: Task) -> torch.Tensor:
    """``y`` as the targets of ``task`` (not classification), checked by the task."""
    if y.ndim < 1 or len(y) != n:
        raise LmcError(
            f"{path}: {key!r} holds {len(y) if y.ndim else 0} targets but {x_key!r} {n} examples"
        )
    if np.issubdtype(y.dtype, np.integer):
        target = torch.from_numpy(np.ascontiguousarray(y).astype(np.int64))
    else:
        target = _inputs(path, key, y[:, None] if y.ndim == 1 else y)
        target = target.reshape(y.shape)
    task.check(None, target, name=f"{path}[{key!r}]")
    return target


def _outputs(task: Task, y_train: torch.Tensor, y_test: torch.Tensor) -> int:
    """The data's ``num_classes``: the largest label + 1 (integer targets), else the size of
    the targets' last axis (1 for ``(N,)``)."""
    if task is CLASSIFICATION or not y_train.is_floating_point():
        return int(max(int(y_train.max()), int(y_test.max()))) + 1
    return int(y_train.shape[-1]) if y_train.dim() > 1 else 1


def _random_split(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``(train_idx, test_idx)``: a seeded random ``round(TEST_FRACTION · n)`` of the
    ``n`` examples is the test split (numpy ``default_rng(SPLIT_SEED)``)."""
    k = int(np.floor(TEST_FRACTION * n + 0.5))
    test_idx = np.sort(np.random.default_rng(SPLIT_SEED).permutation(n)[:k])
    mask = np.ones(n, dtype=bool)
    mask[test_idx] = False
    return np.flatnonzero(mask), test_idx


def load_user_data(
    path: str | os.PathLike,
    *,
    device: str | torch.device = "cpu",
) -> Dataset:
    """The :class:`lmc.data.Dataset` in the file ``path`` (keys and conventions in the module
    docstring), on ``device``. ``name`` is the file's name, ``mean``/``std`` are 0 and 1 (the
    inputs are not normalised), ``augment`` is off and ``task`` the file's task (its ``task``
    key; ``classification`` without one)."""
    path = Path(path)
    check_regular_file(path, "data file")  # missing, a folder or a FIFO: one line, at once
    arrays = _read(path)
    held = ", ".join(sorted(arrays)) or "nothing"
    for key in ("x", "y"):
        if key not in arrays:
            raise LmcError(
                f"{path} has no {key!r} (it holds {held}); a data file holds x, y "
                "and optionally x_test, y_test and task"
            )
    if ("x_test" in arrays) != ("y_test" in arrays):
        have, lack = ("x_test", "y_test") if "x_test" in arrays else ("y_test", "x_test")
        raise LmcError(f"{path} has {have!r} but no {lack!r}: give both or neither")
    extra = sorted(set(arrays) - set(KEYS))
    if extra:
        warnings.warn(
            f"{path}: ignoring key(s) {', '.join(extra)} (a data file holds x, y and "
            "optionally x_test, y_test and task)",
            LmcWarning,
            stacklevel=2,
        )
    task = _task(path, arrays)
    labels = _labels if task is CLASSIFICATION else functools.partial(_targets, task=task)
    x = _inputs(path, "x", arrays["x"])
    y = labels(path, "y", arrays["y"], len(x), "x")
    if "x_test" in arrays:
        x_test = _inputs(path, "x_test", arrays["x_test"])
        y_test = labels(path, "y_test", arrays["y_test"], len(x_test), "x_test")
        if x_test.shape[1:] != x.shape[1:]:
            raise LmcError(
                f"{path}: 'x_test' has examples of shape {tuple(x_test.shape[1:])} "
                f"but 'x' of shape {tuple(x.shape[1:])}"
            )
        if x_test.is_floating_point() != x.is_floating_point():
            raise LmcError(f"{path}: 'x' and 'x_test' must both be floating or both integer")
        x_train, y_train = x, y
    else:
        by_class = task is CLASSIFICATION or (y.dim() == 1 and not y.is_floating_point())
        train_idx, test_idx = (
            stratified_split(y.numpy(), TEST_FRACTION, SPLIT_SEED) if by_class
            else _random_split(len(y))
        )  # fmt: skip
        train, test = torch.from_numpy(train_idx), torch.from_numpy(test_idx)
        x_train, y_train, x_test, y_test = x[train], y[train], x[test], y[test]
    for split, xs in (("training", x_train), ("test", x_test)):
        if len(xs) < 2:
            raise LmcError(
                f"{path}: the {split} split has {len(xs)} example(s); at least 2 are "
                "needed (add examples, or give x_test and y_test)"
            )
    num_classes = _outputs(task, y_train, y_test)
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
        task=task.name,
    )
    dev = resolve_device(device)
    return ds if dev.type == "cpu" else ds.to(dev)
