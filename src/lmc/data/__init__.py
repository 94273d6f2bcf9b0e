"""Datasets as in-memory tensors on a device, batching by index, augmentation as tensor ops.

>>> from lmc.data import load, batches
>>> ds = load("digits")                       # bundled with scikit-learn: works offline
>>> ds.x_train.shape, ds.num_classes
(torch.Size([1346, 1, 8, 8]), 10)

Datasets: ``digits``, ``mnist``, ``fashion-mnist``, ``cifar10``, ``cifar100``, ``synthetic``.
Where files are looked for: :mod:`lmc.data.paths`. Formats: :mod:`lmc.data.idx` (MNIST and
Fashion-MNIST) and :mod:`lmc.data.cifar` (binary CIFAR). Nothing is ever unpickled.
"""

from .batching import batches, num_batches, random_crop_flip
from .dataset import Dataset
from .loaders import DATASETS, canonical_name, input_shape, load
from .paths import cache_dir, default_data_dirs
from .subsets import ab_split, label_split_subset, label_split_subsets, random_train_subset

__all__ = [
    "DATASETS",
    "Dataset",
    "ab_split",
    "batches",
    "cache_dir",
    "canonical_name",
    "default_data_dirs",
    "input_shape",
    "label_split_subset",
    "label_split_subsets",
    "load",
    "num_batches",
    "random_crop_flip",
    "random_train_subset",
]
