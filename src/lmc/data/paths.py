"""Where dataset files are looked for.

Lookup order of the *roots* (:func:`default_data_dirs`):

1. the ``data_dir`` argument (``--data-dir``), when given;
2. every folder in ``$LMC_DATA`` (one folder, or several joined with ``os.pathsep``), when set;
3. the user cache folder: ``$XDG_CACHE_HOME/lmc``, or ``~/.cache/lmc`` when that is unset.

Within each root a dataset is looked for in its own subfolders (see ``SUBFOLDERS``), never in
the root itself, because MNIST and Fashion-MNIST share file names. After all roots come the
dataset's system folders, used as they are: for Fashion-MNIST that is
``/usr/share/datasets/fashion-mnist`` (Debian's ``dataset-fashion-mnist`` package, which installs
``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz``
and ``t10k-labels-idx1-ubyte.gz`` directly in that folder); for the ``fortunes`` text corpus it
is ``/usr/share/games/fortunes`` (Debian's ``fortunes`` package: one plain-text fortune file per
topic, e.g. ``computers``, ``literature``, next to the ``.dat`` indexes of the ``fortune``
program).
"""

from __future__ import annotations

import os
from pathlib import Path

from lmc.config.user_cache import user_cache_dir

# Debian's dataset-fashion-mnist package puts the four gzipped IDX files here.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
# Debian's fortunes package puts its fortune files (plain text, '%' lines between fortunes) here.
DEBIAN_FORTUNES = Path("/usr/share/games/fortunes")

# Subfolders of a root searched for each dataset, in order. The torchvision layouts
# (``MNIST/raw``, ``FashionMNIST/raw``) are accepted as well.
SUBFOLDERS: dict[str, tuple[str, ...]] = {
    "mnist": ("mnist", "MNIST/raw"),
    "fashion-mnist": ("fashion-mnist", "FashionMNIST/raw"),
    "cifar10": ("cifar10", "cifar10/cifar-10-batches-bin", "cifar-10-batches-bin"),
    "cifar100": ("cifar100", "cifar100/cifar-100-binary", "cifar-100-binary"),
    "fortunes": ("fortunes",),
    "tiny-shakespeare": ("tiny-shakespeare", "tinyshakespeare"),
}


def cache_dir() -> Path:
    """The user cache folder for lmc data: ``$XDG_CACHE_HOME/lmc`` or ``~/.cache/lmc``."""
    return user_cache_dir().absolute()


def default_data_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """The roots searched for dataset files, in order, without duplicates.

    ``data_dir`` (if given), then each folder of ``$LMC_DATA`` (if set), then :func:`cache_dir`.
    Paths are absolute (``~`` expanded); they need not exist.
    """
    roots: list[Path] = []
    if data_dir is not None and str(data_dir) != "":
        roots.append(Path(data_dir).expanduser().absolute())
    env = os.environ.get("LMC_DATA", "")
    for part in env.split(os.pathsep):
        if part.strip():
            roots.append(Path(part.strip()).expanduser().absolute())
    roots.append(cache_dir())
    unique: list[Path] = []
    for r in roots:
        if r not in unique:
            unique.append(r)
    return unique


def system_dirs(name: str) -> list[Path]:
    """Folders installed by the operating system that hold ``name``'s files directly."""
    if name == "fashion-mnist":
        return [DEBIAN_FASHION_MNIST]
    if name == "fortunes":
        return [DEBIAN_FORTUNES]
    return []


def candidate_dirs(name: str, data_dir: str | os.PathLike | None = None) -> list[Path]:
    """Every folder searched for dataset ``name``, in order (see the module docstring)."""
    folders = [root / sub for root in default_data_dirs(data_dir) for sub in SUBFOLDERS[name]]
    folders += system_dirs(name)
    unique: list[Path] = []
    for f in folders:
        if f not in unique:
            unique.append(f)
    return unique
