"""``load(name)``: find, read, normalise and place a dataset on a device."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmc.config import LmcError, resolve_device

from . import paths
from .cifar import LAYOUTS, has_files, read_cifar
from .dataset import Dataset, build_dataset
from .download import TEXT_RESOURCES, TINY_SHAKESPEARE_FILE, file_digest
from .download import download as download_files
from .idx import read_idx
from .subsets import label_part_subset, random_train_subset
from .synthetic import DEFAULTS as SYNTHETIC_DEFAULTS
from .synthetic import make_synthetic
from .text import (
    FORTUNE_FILES,
    TEXT_DATASETS,
    TEXT_OPTIONS,
    TextDataset,
    build_text_dataset,
    check_tokenizer_digest,
    fortunes_text,
    read_text_file,
    text_options,
)

#: The classification datasets (the choices of ``lmc train --dataset`` and of studies).
DATASETS = ("digits", "mnist", "fashion-mnist", "cifar10", "cifar100", "synthetic")
#: Every name :func:`load` takes: the classification datasets and the text datasets
#: (:data:`lmc.data.text.TEXT_DATASETS`: ``text``, ``fortunes``, ``tiny-shakespeare``).
ALL_DATASETS = DATASETS + TEXT_DATASETS

_ALIASES = {
    "fashionmnist": "fashion-mnist",
    "fmnist": "fashion-mnist",
    "cifar-10": "cifar10",
    "cifar-100": "cifar100",
    "tinyshakespeare": "tiny-shakespeare",
    "shakespeare": "tiny-shakespeare",
}

# digits: fraction of each class held out for testing, and the fixed seed of that split.
DIGITS_TEST_FRACTION = 0.25
#: Options of every dataset except synthetic: a random training subset (``train_size``), or
#: one part of disjoint subsets chosen by label (``label_parts``, ``label_part``); the seed of
#: either is ``subset_seed``.
SUBSET_OPTIONS = ("train_size", "subset_seed", "label_parts", "label_part")
DIGITS_SPLIT_SEED = 0

# IDX file stems of MNIST and Fashion-MNIST (each may also end in .gz).
IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


def canonical_name(name: str) -> str:
    """The dataset's name as listed in ``DATASETS`` or ``TEXT_DATASETS`` (case, ``_`` and a few
    aliases forgiven)."""
    key = str(name).strip().lower().replace("_", "-")
    key = _ALIASES.get(key, _ALIASES.get(key.replace("-", ""), key))
    if key not in ALL_DATASETS:
        raise LmcError(f"unknown dataset {name!r}; choose one of: {', '.join(ALL_DATASETS)}")
    return key


# the shape of one example of each dataset (synthetic: its ``input_shape`` option)
INPUT_SHAPES = {
    "digits": (1, 8, 8),
    "mnist": (1, 28, 28),
    "fashion-mnist": (1, 28, 28),
    "cifar10": (3, 32, 32),
    "cifar100": (3, 32, 32),
}


def input_shape(name: str, **options: Any) -> tuple[int, ...]:
    """The shape of one example of dataset ``name`` (as ``load`` returns it), without loading
    any file."""
    key = canonical_name(name)
    if key in TEXT_DATASETS:
        return (text_options(key, _text_only(options))["context"],)
    if key == "synthetic":
        shape = options.get("input_shape", SYNTHETIC_DEFAULTS["input_shape"])
        return tuple(shape) if isinstance(shape, (list, tuple)) else (int(shape),)
    return INPUT_SHAPES[key]


def dataset_task(name: str) -> str:
    """The task (:mod:`lmc.data.tasks`) of dataset ``name``'s examples, without loading any
    file: the one its record declares, the default of its ``task`` field
    (:class:`lmc.data.text.TextDataset`'s ``next-token`` for the text datasets,
    :class:`lmc.data.Dataset`'s ``classification`` for every other). It is the ``task`` of
    what :func:`load` returns; ``lmc.data.get_task(dataset_task(name))`` is its
    :class:`lmc.data.Task`."""
    record = TextDataset if canonical_name(name) in TEXT_DATASETS else Dataset
    return next(f.default for f in dataclasses.fields(record) if f.name == "task")


def _text_only(options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k in TEXT_OPTIONS}


def dataset_options(name: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The options of dataset ``name`` as a run's config should record them: for a text dataset
    every text option with its default filled in (:func:`lmc.data.text.text_options`: the
    tokenizer, ``context``, ``stride`` and ``splits``, and a ``text`` file's ``sha256``, so the
    data a run read is named in full); for every other dataset ``options`` unchanged (existing
    runs keep their identity)."""
    key = canonical_name(name)
    options = dict(options or {})
    if key in TEXT_DATASETS:
        return text_options(key, options, record_digest=True)
    return options


def load(
    name: str,
    *,
    data_dir: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    download: bool = False,
    **options: Any,
) -> Dataset:
    """Load dataset ``name`` as normalised tensors on ``device``.

    ``name`` is one of ``DATASETS``. Files of mnist, fashion-mnist, cifar10 and cifar100 are
    looked for as described in :mod:`lmc.data.paths` (``data_dir``, ``$LMC_DATA``, the user
    cache, then system folders); with ``download=True`` a dataset not found is fetched into
    the cache and checked against its published MD5 sums. ``digits`` is bundled with
    scikit-learn; ``synthetic`` is generated, with the options ``input_shape`` (default
    ``(32,)``), ``num_classes`` (10), ``train_size`` (4096), ``test_size`` (1024), ``seed`` (0),
    ``separation`` (4.0) and ``clusters_per_class`` (1), documented in
    :mod:`lmc.data.synthetic`. Every other dataset takes ``train_size`` (keep a random subset
    of that many training examples: :func:`lmc.data.subsets.random_train_subset`), or
    ``label_parts`` and ``label_part`` (keep part ``label_part`` (default 0) of the disjoint
    subsets by label that ``label_parts`` lists, one list of per-label fractions per part:
    :func:`lmc.data.subsets.label_part_subset`), each seeded by ``subset_seed`` (default 0);
    the test split is always whole.

    The text datasets (``text``, ``fortunes``, ``tiny-shakespeare``: :mod:`lmc.data.text`)
    take ``tokenizer``, ``context``, ``stride``, ``splits`` (``text`` also ``path``, the file)
    and return a :class:`lmc.data.text.TextDataset` of token windows with a validation block;
    ``train_size``/``subset_seed`` pick whole training windows, ``label_parts`` does not apply.
    ``fortunes`` is found in Debian's ``/usr/share/games/fortunes`` (``apt-get install
    fortunes``) or in ``<root>/fortunes``; ``tiny-shakespeare``'s ``input.txt`` in
    ``<root>/tiny-shakespeare`` or, with ``download=True``, fetched into the cache (SHA-256
    checked).

    The result is deterministic: the same call gives the same bits. See :class:`Dataset` for
    shapes, dtypes and the normalisation convention.
    """
    key = canonical_name(name)
    dev = resolve_device(device)
    if key == "synthetic":
        unknown = sorted(set(options) - set(SYNTHETIC_DEFAULTS))
        if unknown:
            raise LmcError(
                f"unknown option(s) {', '.join(unknown)} for synthetic; "
                f"use: {', '.join(SYNTHETIC_DEFAULTS)}"
            )
        x_tr, y_tr, x_te, y_te = make_synthetic(**options)
        num_classes = int(options.get("num_classes", SYNTHETIC_DEFAULTS["num_classes"]))
        return build_dataset(
            key, x_tr, y_tr, x_te, y_te, num_classes=num_classes, augment=False, device=dev
        )
    if key in TEXT_DATASETS:
        return _load_text_dataset(key, data_dir, download, dev, options)
    unknown = sorted(set(options) - set(SUBSET_OPTIONS))
    if unknown:
        raise LmcError(
            f"unknown option(s) {', '.join(unknown)} for {key}; its options are "
            f"{', '.join(SUBSET_OPTIONS)} (a random training subset)"
        )
    if key == "digits":
        data = _load_digits(dev)
    elif key in ("mnist", "fashion-mnist"):
        data = _load_idx(key, data_dir, download, dev)
    else:
        data = _load_cifar(key, data_dir, download, dev)
    if "train_size" in options and "label_parts" in options:
        raise LmcError(f"{key}: train_size and label_parts are two kinds of subset; give one")
    if "train_size" in options:
        data = random_train_subset(data, options["train_size"], options.get("subset_seed", 0))
    elif "label_parts" in options:
        data = label_part_subset(
            data,
            options["label_parts"],
            options.get("label_part", 0),
            options.get("subset_seed", 0),
        )
    elif "subset_seed" in options or "label_part" in options:
        given = "subset_seed" if "subset_seed" in options else "label_part"
        raise LmcError(f"{key}: {given} needs train_size or label_parts (the subset it picks)")
    return data


# ---------------------------------------------------------------------------------------------
# digits


def stratified_split(
    y: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``(train_idx, test_idx)``: from each class (ascending), a seeded random
    ``round(test_fraction * count)`` of its examples go to test (numpy ``default_rng(seed)``)."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        k = int(np.floor(test_fraction * len(idx) + 0.5))
        test.append(rng.permutation(idx)[:k])
    test_idx = np.sort(np.concatenate(test))
    mask = np.ones(len(y), dtype=bool)
    mask[test_idx] = False
    return np.flatnonzero(mask), test_idx


def _load_digits(device: torch.device) -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images)
    raw = np.rint(images).astype(np.uint8)[:, None, :, :]  # values 0..16, (1797, 1, 8, 8)
    y = np.asarray(bunch.target, dtype=np.int64)
    train_idx, test_idx = stratified_split(y, DIGITS_TEST_FRACTION, DIGITS_SPLIT_SEED)
    return build_dataset(
        "digits",
        raw[train_idx],
        y[train_idx],
        raw[test_idx],
        y[test_idx],
        num_classes=10,
        augment=False,
        scale=16.0,
        device=device,
    )


# ---------------------------------------------------------------------------------------------
# finding files


#: The Debian package that installs a dataset where :mod:`lmc.data.paths` looks for it.
APT_PACKAGES = {"fashion-mnist": "dataset-fashion-mnist", "fortunes": "fortunes"}


def _not_found(name: str, searched: list[Path], notes: list[str], files: str) -> LmcError:
    where = ", ".join(str(p) for p in searched)
    extra = f" ({'; '.join(notes)})" if notes else ""
    apt = f"run `apt-get install {APT_PACKAGES[name]}`, " if name in APT_PACKAGES else ""
    get = (
        f"Get it with --download (download=True), which saves it in {paths.cache_dir() / name}, "
        if name != "fortunes"
        else "Get it: "
    )
    return LmcError(
        f"dataset {name!r} not found; looked in: {where}{extra}. {get}{apt}or put {files} "
        f"in <dir>/{name}/ and pass --data-dir <dir> or set LMC_DATA=<dir>"
    )


def _idx_files_in(folder: Path) -> tuple[dict[str, Path] | None, list[str]]:
    """The four IDX files in ``folder`` (raw or .gz), or None and the names that are missing."""
    found, missing = {}, []
    for key, stem in IDX_FILES.items():
        for candidate in (folder / stem, folder / f"{stem}.gz"):
            if candidate.is_file():
                found[key] = candidate
                break
        else:
            missing.append(stem)
    return (found if not missing else None), missing


def _find_idx(name: str, data_dir: str | os.PathLike | None) -> tuple[dict | None, list, list]:
    searched = paths.candidate_dirs(name, data_dir)
    notes = []
    for folder in searched:
        files, missing = _idx_files_in(folder)
        if files is not None:
            return files, searched, notes
        if len(missing) < len(IDX_FILES):
            notes.append(f"{folder} lacks {', '.join(missing)}")
    return None, searched, notes


def _load_idx(
    name: str, data_dir: str | os.PathLike | None, download: bool, device: torch.device
) -> Dataset:
    files, searched, notes = _find_idx(name, data_dir)
    if files is None and download:
        folder = download_files(name, paths.cache_dir())
        files, _ = _idx_files_in(folder)
    if files is None:
        raise _not_found(name, searched, notes, "the four *-ubyte(.gz) IDX files")
    arrays = {key: read_idx(path) for key, path in files.items()}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        xf, yf = files[f"x_{split}"], files[f"y_{split}"]
        if x.dtype != np.uint8 or x.ndim != 3:
            raise LmcError(f"{xf} should hold uint8 images (N, H, W), has {x.dtype} {x.shape}")
        if y.dtype != np.uint8 or y.ndim != 1 or len(y) != len(x):
            raise LmcError(
                f"{yf} should hold {len(x)} uint8 labels for {xf}, has {y.dtype} {y.shape}"
            )
        if len(y) and int(y.max()) >= 10:
            raise LmcError(f"{yf} has label {int(y.max())}; expected 0..9, is it the right file?")
    if arrays["x_train"].shape[1:] != arrays["x_test"].shape[1:]:
        raise LmcError(f"{files['x_train']} and {files['x_test']} hold images of different sizes")
    return build_dataset(
        name,
        arrays["x_train"][:, None],
        arrays["y_train"],
        arrays["x_test"][:, None],
        arrays["y_test"],
        num_classes=10,
        augment=False,
        scale=255.0,
        device=device,
    )


def _find_cifar(name: str, data_dir: str | os.PathLike | None) -> tuple[Path | None, list]:
    layout = LAYOUTS[name]
    searched = paths.candidate_dirs(name, data_dir)
    for folder in searched:
        if has_files(folder, layout):
            return folder, searched
        if (folder / layout.archive).is_file():
            return folder / layout.archive, searched
    return None, searched


def _load_cifar(
    name: str, data_dir: str | os.PathLike | None, download: bool, device: torch.device
) -> Dataset:
    layout = LAYOUTS[name]
    location, searched = _find_cifar(name, data_dir)
    if location is None and download:
        folder = download_files(name, paths.cache_dir())
        location = folder / layout.folder
    if location is None:
        files = f"{layout.archive} (or the {layout.folder} folder it unpacks to)"
        raise _not_found(name, searched, [], files)
    x_tr, y_tr, x_te, y_te = read_cifar(location, layout)
    return build_dataset(
        name,
        x_tr,
        y_tr,
        x_te,
        y_te,
        num_classes=layout.num_classes,
        augment=True,
        scale=255.0,
        device=device,
    )


# ---------------------------------------------------------------------------------------------
# text datasets


def _load_text_dataset(
    key: str,
    data_dir: str | os.PathLike | None,
    download: bool,
    device: torch.device,
    options: dict[str, Any],
) -> Dataset:
    allowed = TEXT_OPTIONS + ("train_size", "subset_seed")
    if "label_parts" in options or "label_part" in options:
        raise LmcError(
            f"{key}: label_parts/label_part pick subsets by class label; a text dataset takes "
            "train_size (whole training windows) instead"
        )
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        usable = [o for o in allowed if o != "path" or key == "text"]
        raise LmcError(
            f"unknown option(s) {', '.join(unknown)} for {key}; its options are {', '.join(usable)}"
        )
    if "subset_seed" in options and "train_size" not in options:
        raise LmcError(f"{key}: subset_seed needs train_size (the subset it picks)")
    opts = text_options(key, _text_only(options))  # every option checked before a file is read
    if opts.get("tokenizer_sha256") is not None:  # checked where recorded, as the text is
        check_tokenizer_digest(opts["tokenizer"], opts["tokenizer_sha256"])
    if key == "text":
        text = read_text_file(opts["path"], opts.get("sha256"))  # checked where recorded
        name, source = Path(opts["path"]).name, opts["path"]
    elif key == "fortunes":
        folder = _find_fortunes(data_dir)
        text, name, source = fortunes_text(folder), key, f"the fortunes in {folder}"
    else:
        path = _find_tiny_shakespeare(data_dir, download)
        text, name, source = read_text_file(path), key, str(path)
    data = build_text_dataset(
        name,
        text,
        tokenizer=opts["tokenizer"],
        context=opts["context"],
        stride=opts["stride"],
        splits=opts["splits"],
        source=source,
        device=device,
    )
    if "train_size" in options:
        data = random_train_subset(data, options["train_size"], options.get("subset_seed", 0))
    return data


def _find_fortunes(data_dir: str | os.PathLike | None) -> Path:
    """The first searched folder holding every file of ``FORTUNE_FILES``."""
    searched = paths.candidate_dirs("fortunes", data_dir)
    notes = []
    for folder in searched:
        missing = [f for f in FORTUNE_FILES if not (folder / f).is_file()]
        if not missing:
            return folder
        if len(missing) < len(FORTUNE_FILES):
            notes.append(
                f"{folder} lacks {len(missing)} of the {len(FORTUNE_FILES)} fortune files, "
                f"e.g. {missing[0]}"
            )
    raise _not_found("fortunes", searched, notes, "the fortune files (art, computers, ...)")


def _find_tiny_shakespeare(data_dir: str | os.PathLike | None, download: bool) -> Path:
    """char-rnn's ``input.txt`` in a searched folder (or downloaded), its SHA-256 checked."""
    name = "tiny-shakespeare"
    searched = paths.candidate_dirs(name, data_dir)
    found = next((f / TINY_SHAKESPEARE_FILE for f in searched
                  if (f / TINY_SHAKESPEARE_FILE).is_file()), None)  # fmt: skip
    if found is None and download:
        found = download_files(name, paths.cache_dir()) / TINY_SHAKESPEARE_FILE
    if found is None:
        raise _not_found(name, searched, [], f"char-rnn's {TINY_SHAKESPEARE_FILE}")
    resource = TEXT_RESOURCES[name]  # its digest: download.TINY_SHAKESPEARE_SHA256
    expected = resource.files[TINY_SHAKESPEARE_FILE]
    got = file_digest(found, resource.algorithm)
    if got != expected:
        raise LmcError(
            f"{found} is not char-rnn's tinyshakespeare {TINY_SHAKESPEARE_FILE} (SHA-256 "
            f"{got}, expected {expected}); remove it and use --download, or read it as "
            "dataset 'text' with path=<file>"
        )
    return found
