"""Datasets as in-memory tensors on a device, batching by index, augmentation as tensor ops.

>>> from lmc.data import load, batches
>>> ds = load("digits")                       # bundled with scikit-learn: works offline
>>> ds.x_train.shape, ds.num_classes
(torch.Size([1346, 1, 8, 8]), 10)

Datasets: ``digits``, ``mnist``, ``fashion-mnist``, ``cifar10``, ``cifar100``, ``synthetic``
(classification, ``DATASETS``), and the text datasets ``text`` (a UTF-8 file), ``fortunes``
and ``tiny-shakespeare`` (next-token windows, ``TEXT_DATASETS``: :mod:`lmc.data.text`, with the
tokenizers of :mod:`lmc.data.tokenizers`).
Where files are looked for: :mod:`lmc.data.paths`. Formats: :mod:`lmc.data.idx` (MNIST and
Fashion-MNIST) and :mod:`lmc.data.cifar` (binary CIFAR). Nothing is ever unpickled.
"""

from .batching import batches, num_batches, random_crop_flip
from .dataset import Dataset
from .loaders import (
    ALL_DATASETS,
    DATASETS,
    canonical_name,
    dataset_options,
    dataset_task,
    input_shape,
    load,
)
from .paths import cache_dir, default_data_dirs
from .subsets import ab_split, label_split_subset, label_split_subsets, random_train_subset
from .tasks import CLASSIFICATION, NEXT_TOKEN, TASKS, Task, get_task, register_task
from .text import TEXT_DATASETS, TEXT_SPLITS, TextDataset, load_text
from .tokenizers import ByteTokenizer, CharTokenizer, HFTokenizer, Tokenizer, tokenizer_from_json

__all__ = [
    "CLASSIFICATION",
    "NEXT_TOKEN",
    "TASKS",
    "Task",
    "get_task",
    "register_task",
    "ALL_DATASETS",
    "ByteTokenizer",
    "CharTokenizer",
    "DATASETS",
    "Dataset",
    "HFTokenizer",
    "TEXT_DATASETS",
    "TEXT_SPLITS",
    "TextDataset",
    "Tokenizer",
    "ab_split",
    "batches",
    "cache_dir",
    "canonical_name",
    "dataset_options",
    "default_data_dirs",
    "dataset_task",
    "input_shape",
    "label_split_subset",
    "label_split_subsets",
    "load",
    "load_text",
    "num_batches",
    "random_crop_flip",
    "random_train_subset",
    "tokenizer_from_json",
]
