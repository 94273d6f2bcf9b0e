"""A seeded Gaussian-mixture classification task of any input shape.

Model: ``num_classes * clusters_per_class`` cluster centres ``mu_j ~ N(0, s^2 I_D)`` in
``D = prod(input_shape)`` dimensions, with ``s = separation / sqrt(2 D)`` so that two centres
are about ``separation`` apart. Cluster ``j`` belongs to class ``j % num_classes``. An example
of class ``k`` picks one of its clusters uniformly and adds isotropic noise ``N(0, I_D)``; it
is then reshaped to ``input_shape``. ``separation`` is therefore measured in units of the noise
standard deviation: larger is easier (with the defaults a nearest-class-mean classifier scores
about 89% on the test split, chance being 10%; ``separation=0`` is pure noise).
``clusters_per_class > 1`` makes each class multimodal, so it is no longer linearly separable.

Labels are balanced: split ``i`` holds ``i % num_classes`` for every index, then shuffled.
The centres, the training split and the test split each have their own random stream derived
from ``seed`` (numpy ``default_rng([seed, stream])``), so changing ``train_size`` does not
change the test set or the centres. Same arguments, same bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lmc.config import LmcError, check_int

DEFAULTS = {
    "input_shape": (32,),
    "num_classes": 10,
    "train_size": 4096,
    "test_size": 1024,
    "seed": 0,
    "separation": 4.0,
    "clusters_per_class": 1,
}


def _shape(value: object) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    try:
        shape = tuple(int(d) for d in value)  # type: ignore[union-attr]
        ok = len(shape) >= 1 and all(
            d >= 1 and float(d) == float(v)
            for d, v in zip(shape, value)  # type: ignore[arg-type]
        )
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise LmcError(
            f"synthetic input_shape {value!r} is not a tuple of positive integers; "
            "use e.g. (32,) or (3, 8, 8)"
        )
    return shape


def _int(name: str, value: object, minimum: int) -> int:
    return check_int(f"synthetic {name}", value, minimum=minimum)


def _sample(
    rng: np.random.Generator, n: int, centres: np.ndarray, num_classes: int, clusters: int
) -> tuple[np.ndarray, np.ndarray]:
    labels = np.arange(n, dtype=np.int64) % num_classes
    labels = labels[rng.permutation(n)]
    which = rng.integers(0, clusters, size=n)
    x = centres[which * num_classes + labels] + rng.standard_normal((n, centres.shape[1]))
    return x, labels


def make_synthetic(
    *,
    input_shape: Sequence[int] | int = DEFAULTS["input_shape"],
    num_classes: int = DEFAULTS["num_classes"],
    train_size: int = DEFAULTS["train_size"],
    test_size: int = DEFAULTS["test_size"],
    seed: int = DEFAULTS["seed"],
    separation: float = DEFAULTS["separation"],
    clusters_per_class: int = DEFAULTS["clusters_per_class"],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Raw ``(x_train, y_train, x_test, y_test)``: float64 ``(N, *input_shape)``, int64 ``(N,)``."""
    shape = _shape(input_shape)
    num_classes = _int("num_classes", num_classes, 2)
    train_size = _int("train_size", train_size, 1)
    test_size = _int("test_size", test_size, 1)
    seed = _int("seed", seed, 0)
    clusters = _int("clusters_per_class", clusters_per_class, 1)
    try:
        separation = float(separation)
    except (TypeError, ValueError):
        separation = -1.0
    if not (separation >= 0 and math.isfinite(separation)):
        raise LmcError(f"synthetic separation={separation!r} must be a number >= 0")
    dim = math.prod(shape)
    scale = separation / math.sqrt(2 * dim)
    centres = np.random.default_rng([seed, 0]).standard_normal((num_classes * clusters, dim))
    centres *= scale
    x_train, y_train = _sample(
        np.random.default_rng([seed, 1]), train_size, centres, num_classes, clusters
    )
    x_test, y_test = _sample(
        np.random.default_rng([seed, 2]), test_size, centres, num_classes, clusters
    )
    return (
        x_train.reshape((train_size, *shape)),
        y_train,
        x_test.reshape((test_size, *shape)),
        y_test,
    )
