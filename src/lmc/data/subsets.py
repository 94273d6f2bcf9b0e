"""Training subsets chosen by label (Git Re-Basin §5.4, split-data merging).

``label_split_subsets(dataset, [fractions_1, fractions_2, ...], seed)`` returns one
:class:`~lmc.data.Dataset` per fraction spec. Rules:

- A fraction spec maps a label, or a group of labels (a tuple, list, range or set of them),
  to the fraction of that label's *training* examples to keep, in [0, 1]. Labels the spec
  does not name get 0 (none of their examples); naming a label twice is an error.
- Counts: part ``s`` takes ``floor(f_s * n_k)`` of the ``n_k`` training examples of label
  ``k`` (floor, so a part never holds more than its fraction; ``f * n_k`` is computed in
  float64 and rounded to the nearest integer first when it lies within 1e-9 of one, so
  ``0.2 * 10`` counts 2 even though it is 2.0000000000000004 in binary).
- Which examples: one random order of each label's examples, drawn from
  ``numpy.random.default_rng([seed, k])`` (label ``k``'s own stream, so the order of one label
  does not depend on the others), is cut into consecutive pieces, part 0 first. Parts are
  therefore *disjoint*; the fractions of one label must add up to at most 1 (``LmcError``
  otherwise). Each part keeps its examples in the dataset's original order.
- The test split, the normalisation statistics (``mean``/``std``, those of the full training
  split) and every other field are unchanged; the name gets a ``[subset]`` suffix.

:func:`ab_split` is the paper's pair: A holds ``minority`` (20%) of each label below
``num_classes // 2`` and ``majority`` (80%) of each label from there on, B the reverse
(CIFAR-100: labels 0-49 and 50-99; 10 classes: 0-4 and 5-9).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from lmc.config import LmcError, check_int, check_number

from .dataset import Dataset

#: f * n within this of an integer counts as that integer (binary rounding of the product).
COUNT_TOL = 1e-9


def _labels_of(key: Any) -> list[int]:
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        return [int(key)]
    if isinstance(key, (tuple, list, range, set, frozenset)):
        out = []
        for k in key:
            if not isinstance(k, numbers.Integral) or isinstance(k, bool):
                raise LmcError(f"fractions: label group {key!r} holds {k!r}, not a label")
            out.append(int(k))
        return out
    raise LmcError(f"fractions: {key!r} is not a label or a group of labels")


def resolve_fractions(fractions: Mapping[Any, float], num_classes: int) -> list[float]:
    """The fraction of every label ``0..num_classes - 1`` a spec gives (0 for unnamed labels).

    ``LmcError`` for a label out of range, a label named twice, or a fraction outside [0, 1].
    """
    if not isinstance(fractions, Mapping):
        raise LmcError(
            f"fractions must map labels (or groups of labels) to fractions, got "
            f"{type(fractions).__name__}"
        )
    out: list[float | None] = [None] * num_classes
    for key, value in fractions.items():
        f = check_number(f"fraction of labels {key!r}", value, minimum=0.0, maximum=1.0)
        for k in _labels_of(key):
            if not 0 <= k < num_classes:
                raise LmcError(
                    f"fractions name label {k}, but the dataset has labels 0..{num_classes - 1}"
                )
            if out[k] is not None:
                raise LmcError(f"fractions name label {k} twice")
            out[k] = f
    return [0.0 if f is None else f for f in out]


def subset_count(fraction: float, n: int) -> int:
    """``floor(fraction * n)``, with products within :data:`COUNT_TOL` of an integer taken as
    that integer."""
    product = fraction * n
    nearest = round(product)
    return int(nearest) if abs(product - nearest) <= COUNT_TOL else math.floor(product)


def label_split_subsets(
    dataset: Dataset, specs: Sequence[Mapping[Any, float]], seed: int = 0
) -> list[Dataset]:
    """Disjoint training subsets by label, one per fraction spec (rules: module docstring)."""
    if not isinstance(dataset, Dataset):
        raise LmcError(f"dataset must be an lmc.data.Dataset, got {type(dataset).__name__}")
    seed = check_int("seed", seed, minimum=0)
    specs = list(specs)
    if not specs:
        raise LmcError("label_split_subsets needs at least one fraction spec")
    c = dataset.num_classes
    table = [resolve_fractions(spec, c) for spec in specs]
    for k in range(c):
        total = sum(row[k] for row in table)
        if total > 1.0 + COUNT_TOL:
            raise LmcError(
                f"the fractions of label {k} add up to {total:g} > 1: disjoint subsets cannot "
                "hold more than all of its examples"
            )
    labels = dataset.y_train.cpu().numpy()
    chosen: list[list[np.ndarray]] = [[] for _ in specs]
    for k in range(c):
        members = np.flatnonzero(labels == k)
        order = members[np.random.default_rng([seed, k]).permutation(len(members))]
        start = 0
        for s, row in enumerate(table):
            count = subset_count(row[k], len(members))
            chosen[s].append(order[start : start + count])
            start += count
    out = []
    for picks in chosen:
        index = torch.from_numpy(np.sort(np.concatenate(picks)).astype(np.int64))
        index = index.to(dataset.x_train.device)
        out.append(
            dataclasses.replace(
                dataset,
                name=f"{dataset.name}[subset]",
                x_train=dataset.x_train[index],
                y_train=dataset.y_train[index],
            )
        )
    return out


def label_split_subset(dataset: Dataset, fractions: Mapping[Any, float], seed: int = 0) -> Dataset:
    """One training subset by label: ``label_split_subsets(dataset, [fractions], seed)[0]``.

    ``fractions``: ``{label: f}`` or ``{group of labels: f}`` (e.g. ``{range(0, 5): 0.2,
    range(5, 10): 0.8}``); unnamed labels get 0. Part 0 of the seeded per-label order, so it
    is the same subset as the first part of a :func:`label_split_subsets` call with ``seed``.
    """
    return label_split_subsets(dataset, [fractions], seed)[0]


def label_part_subset(
    dataset: Dataset, parts: Sequence[Sequence[float]], part: int = 0, seed: int = 0
) -> Dataset:
    """Part ``part`` of the disjoint training subsets ``parts`` lists, as the dataset options
    ``label_parts`` / ``label_part`` / ``subset_seed`` ask (:func:`lmc.data.load`).

    ``parts``: one list per part of ``num_classes`` fractions, entry ``k`` the fraction of
    label ``k``'s training examples that part holds (e.g. Git Re-Basin §5.4's A and B:
    ``[[0.2] * 5 + [0.8] * 5, [0.8] * 5 + [0.2] * 5]``). Every part is cut from the same
    seeded order (:func:`label_split_subsets`), so the parts of one ``parts`` and ``seed``
    are disjoint whichever is loaded, and loading part ``s`` gives the same examples as the
    ``s``-th subset of ``label_split_subsets``.
    """
    if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence) or not parts:
        raise LmcError(
            f"label_parts must be a non-empty list of per-label fraction lists, got {parts!r}"
        )
    c = dataset.num_classes
    specs = []
    for s, row in enumerate(parts):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or len(row) != c:
            raise LmcError(
                f"label_parts[{s}] must list one fraction per label ({c} for {dataset.name}), "
                f"got {row!r}"
            )
        specs.append(dict(enumerate(row)))
    part = check_int("label_part", part, minimum=0)
    if part >= len(specs):
        raise LmcError(
            f"label_part must be below the {len(specs)} parts of label_parts, got {part}"
        )
    return label_split_subsets(dataset, specs, seed)[part]


def ab_split(
    dataset: Dataset,
    seed: int = 0,
    *,
    minority: float = 0.2,
    majority: float = 0.8,
    split_label: int | None = None,
) -> tuple[Dataset, Dataset]:
    """Git Re-Basin's §5.4 pair ``(A, B)`` of disjoint training subsets.

    A: ``minority`` of each label below ``split_label`` (default ``num_classes // 2``) and
    ``majority`` of each label from ``split_label`` on; B: the reverse. ``minority +
    majority`` must be at most 1 (disjointness). Both are settings (defaults 0.2 and 0.8).
    """
    c = dataset.num_classes
    split = c // 2 if split_label is None else check_int("split_label", split_label, minimum=1)
    if split >= c:
        raise LmcError(f"split_label must be below num_classes = {c}, got {split}")
    low, high = range(0, split), range(split, c)
    spec_a = {low: minority, high: majority}
    spec_b = {low: majority, high: minority}
    a, b = label_split_subsets(dataset, [spec_a, spec_b], seed)
    return a, b


def label_counts(labels: torch.Tensor | Iterable[int], num_classes: int) -> list[int]:
    """Examples per label ``0..num_classes - 1``."""
    y = torch.as_tensor(labels).cpu().long()
    return torch.bincount(y, minlength=num_classes).tolist()


def random_train_subset(dataset: Dataset, size: int, seed: int = 0) -> Dataset:
    """``dataset`` with only ``size`` of its training examples, drawn uniformly at random
    without replacement (``numpy.random.default_rng(seed)``) and kept in their original order.

    The test split and the normalisation statistics (those of the full training split) are
    unchanged; the name gets a ``[subset]`` suffix. ``size`` equal to the training split's size
    returns every example. ``LmcError`` for a size below 1 or above the split's size.
    """
    n = int(dataset.y_train.shape[0])
    size = check_int("train_size", size, minimum=1)
    seed = check_int("subset_seed", seed, minimum=0)
    if size > n:
        raise LmcError(f"train_size {size} exceeds the {n} training examples of {dataset.name}")
    picks = np.sort(np.random.default_rng(seed).permutation(n)[:size]).astype(np.int64)
    index = torch.from_numpy(picks).to(dataset.x_train.device)
    return dataclasses.replace(
        dataset,
        name=f"{dataset.name}[subset]",
        x_train=dataset.x_train[index],
        y_train=dataset.y_train[index],
    )
