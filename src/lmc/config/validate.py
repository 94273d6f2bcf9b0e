"""Checks at the door: every public function and every CLI verb validates its input here, so
the library and the command line say the same thing about the same mistake.

Each check raises :class:`lmc.config.LmcError` (a ``ValueError``) whose one-line message names
the argument and what was wrong; :func:`warn_undefined` emits :class:`lmc.config.LmcWarning`
for a result that is undefined (NaN) and says why.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import numpy as np
import torch

from .errors import LmcError, LmcWarning

_T = TypeVar("_T")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int | None = 1, optional: bool = False) -> Any:
    """``value`` as an int, or ``LmcError`` if it is not an integer ≥ ``minimum``
    (``optional``: ``None`` passes through)."""
    if value is None and optional:
        return None
    if not _is_int(value):
        what = "an integer or None" if optional else "an integer"
        raise LmcError(f"{name} must be {what}, got {value!r}")
    if minimum is not None and value < minimum:
        raise LmcError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
) -> float:
    """``value`` as a finite float within the bounds (``positive``: > 0), or ``LmcError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise LmcError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise LmcError(f"{name} must be finite, got {value}")
    if positive and value <= 0:
        raise LmcError(f"{name} must be positive, got {value}")
    if minimum is not None and value < minimum:
        raise LmcError(f"{name} must be at least {minimum:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise LmcError(f"{name} must be at most {maximum:g}, got {value:g}")
    return float(value)


def check_flag(name: str, value: Any) -> bool:
    """``value`` as a bool (True/False, or 0/1), or ``LmcError``."""
    if not isinstance(value, (bool, np.bool_, numbers.Integral)) or value not in (0, 1):
        raise LmcError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_choice(name: str, value: Any, choices: tuple[str, ...], what: str = "value") -> str:
    """``value`` if it is one of ``choices``, else ``LmcError`` naming them."""
    if not isinstance(value, str) or value not in choices:
        raise LmcError(f"unknown {what} {name}={value!r}: choose one of {', '.join(choices)}")
    return value


def lookup_name(
    table: Mapping[str, _T], key: Any, what: str, listed: Iterable[str] | None = None
) -> _T:
    """``table[key]`` (a registry's entry by name), or ``LmcError`` saying the ``what`` named
    ``key`` is unknown and listing ``listed`` (default: the table's names, in its order)."""
    found = table.get(key) if isinstance(key, str) else None
    if found is None:
        names = table if listed is None else listed
        raise LmcError(f"unknown {what} {key!r}: use one of {', '.join(names)}")
    return found


def check_lambda(value: Any, name: str = "lambda") -> float:
    """A point of the path θ(λ) = (1 − λ)θ_A + λθ_B: a finite number in [0, 1]."""
    return check_number(name, value, minimum=0.0, maximum=1.0)


def nonfinite_count(tensor: torch.Tensor) -> int:
    """How many values of a floating (or complex) tensor are NaN or inf; 0 for an empty one.

    A NaN or inf anywhere makes the sum NaN or inf, so a finite sum proves every value finite
    without a mask the size of the tensor; a non-finite sum (which may also be an overflow of
    finite values) is settled by counting."""
    if not tensor.numel() or bool(torch.isfinite(tensor.sum())):
        return 0
    return int((~torch.isfinite(tensor)).sum())


def check_finite(name: str, value: torch.Tensor | Mapping[str, Any]) -> None:
    """``LmcError`` if a tensor (or any floating tensor of a state dict) holds NaN or inf,
    naming the tensor and how many values."""
    if isinstance(value, Mapping):
        for key, tensor in value.items():
            if isinstance(tensor, torch.Tensor):
                check_finite(f"{name}[{key!r}]", tensor)
        return
    if not isinstance(value, torch.Tensor):
        raise LmcError(f"{name} must be a tensor, got {type(value).__name__}")
    if value.is_floating_point() or value.is_complex():
        bad = nonfinite_count(value)
        if bad:
            raise LmcError(
                f"{name} holds {bad} non-finite value{'s' if bad > 1 else ''} (NaN or inf) of "
                f"{value.numel()}; check the data or the model's weights"
            )


def check_labels(name: str, labels: torch.Tensor, num_classes: int | None = None) -> None:
    """``LmcError`` unless ``labels`` is a 1-D integer tensor in [0, num_classes)."""
    if not isinstance(labels, torch.Tensor):
        raise LmcError(f"{name} must be a tensor of class indices, got {type(labels).__name__}")
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise LmcError(f"{name} must hold integer class indices, got dtype {labels.dtype}")
    if labels.dim() != 1:
        raise LmcError(f"{name} must be 1-D (one class index per example), got shape "
                       f"{tuple(labels.shape)}")  # fmt: skip
    if labels.numel() == 0:
        return
    low, high = int(labels.min()), int(labels.max())
    if low < 0:
        raise LmcError(f"{name} holds a negative class index ({low})")
    if num_classes is not None and high >= num_classes:
        raise LmcError(
            f"{name} holds class {high} but the model has {num_classes} classes "
            f"(0..{num_classes - 1})"
        )


def warn_undefined(message: str, *, stacklevel: int = 3) -> None:
    """Warn (:class:`LmcWarning`) that a result is undefined (NaN) and why."""
    warnings.warn(message, LmcWarning, stacklevel=stacklevel)
