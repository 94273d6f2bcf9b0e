"""One check that two models share an architecture, used before every alignment and merge.

:func:`check_same_architecture` compares two modules or state dicts and raises ``LmcError``
with a one-line message naming the first difference:

1. entry names, shapes and floating-point-ness of the state dicts (in A's order, then B's
   extra entries), naming the tensor and both shapes;
2. for two modules, the type of every submodule by qualified name, so a hand-written model
   with ``nn.ReLU`` in A and ``nn.Tanh`` in B (identical shapes) is caught, naming the
   submodule.

When both models are zoo models (they carry the ``lmc_spec`` dict that
:func:`lmc.models.build` sets), a difference found above is explained by the first zoo option
that differs, e.g. ``models differ: option 'activation' is 'relu' in A but 'tanh' in B
(submodule 'act1' is ReLU in A but Tanh in B)``. Options alone never fail the check: two
spellings of one architecture (``input_size=(1, 8, 8)`` and ``64``, an option left at its
default and the same value given) pass.

The check is cheap (names, shapes and types only, no tensor data is read), so every merge
can afford it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError

__all__ = ["check_same_architecture"]


def _shape(t: Any) -> str:
    return "(" + ", ".join(str(d) for d in t.shape) + ")"


def _state(obj: nn.Module | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(obj, nn.Module):
        return obj.state_dict(keep_vars=True)  # no detach: names and shapes are all we read
    if isinstance(obj, Mapping):
        return obj
    raise LmcError(
        f"cannot compare a {type(obj).__name__} as a model: pass an nn.Module or a state dict"
    )


def _state_difference(
    state_a: Mapping[str, Any], state_b: Mapping[str, Any], na: str, nb: str
) -> str | None:
    """The first difference of entry names, shapes or floating-point-ness, or ``None``."""
    for key, ta in state_a.items():
        if key not in state_b:
            return f"{key!r} is in {na} but not in {nb}"
        tb = state_b[key]
        if not (isinstance(ta, torch.Tensor) and isinstance(tb, torch.Tensor)):
            continue  # extra state (any object): only its presence is compared
        if ta.shape != tb.shape:
            return f"{key!r} has shape {_shape(ta)} in {na} but {_shape(tb)} in {nb}"
        if ta.is_floating_point() != tb.is_floating_point():
            return f"{key!r} is {ta.dtype} in {na} but {tb.dtype} in {nb}"
    if len(state_b) != len(state_a):  # every entry of A is in B: B has more
        extra = next(key for key in state_b if key not in state_a)
        return f"{extra!r} is in {nb} but not in {na}"
    return None


def _type_key(module: nn.Module) -> tuple[str, str]:
    # by module and qualified name rather than identity, so a class re-imported in a
    # notebook still matches itself
    return type(module).__module__, type(module).__qualname__


def _module_difference(a: nn.Module, b: nn.Module, na: str, nb: str) -> str | None:
    """The first submodule (by qualified name, in A's order) whose type differs, or ``None``."""
    modules_b = dict(b.named_modules())
    seen = 0
    for name, ma in a.named_modules():
        mb = modules_b.get(name)
        label = f"submodule {name!r}" if name else "the model"
        if mb is None:
            return f"{label} is in {na} but not in {nb}"
        if _type_key(ma) != _type_key(mb):
            return f"{label} is {type(ma).__name__} in {na} but {type(mb).__name__} in {nb}"
        seen += 1
    if seen != len(modules_b):  # every submodule name of A is in B: B has more
        names_a = {name for name, _ in a.named_modules()}
        extra = next(name for name in modules_b if name not in names_a)
        return f"submodule {extra!r} is in {nb} but not in {na}"
    return None


def _normalised(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_normalised(v) for v in value)
    return value


def _zoo_options(model: nn.Module) -> tuple[str, dict[str, Any]] | None:
    """``(name, options with defaults filled in)`` of a zoo model, or ``None``."""
    spec = getattr(model, "lmc_spec", None)
    if not isinstance(spec, Mapping) or "name" not in spec:
        return None
    name = spec["name"]
    options = dict(spec.get("options") or {})
    try:
        from .registry import resolve_options

        options = resolve_options(name, options)
    except (ImportError, LmcError, TypeError):
        pass  # an unregistered name or options: compare them as given
    return name, options


def _option_difference(a: nn.Module, b: nn.Module, na: str, nb: str) -> str | None:
    """The first zoo option (or model name) that differs between two zoo models, or ``None``."""
    spec_a, spec_b = _zoo_options(a), _zoo_options(b)
    if spec_a is None or spec_b is None:
        return None
    (name_a, opts_a), (name_b, opts_b) = spec_a, spec_b
    if name_a != name_b:
        return f"the model is {name_a!r} in {na} but {name_b!r} in {nb}"
    for key, value in opts_a.items():
        if key in opts_b and _normalised(value) != _normalised(opts_b[key]):
            return f"option {key!r} is {value!r} in {na} but {opts_b[key]!r} in {nb}"
    return None


def check_same_architecture(
    a: nn.Module | Mapping[str, torch.Tensor],
    b: nn.Module | Mapping[str, torch.Tensor],
    *,
    names: tuple[str, str] = ("A", "B"),
    purpose: str = "merging",
) -> None:
    """Raise ``LmcError`` unless ``a`` and ``b`` share one architecture.

    ``a``, ``b``: ``nn.Module`` objects or state dicts (mappings of tensors), mixed if need be
    (then only the state dicts are compared). Compared, in order: the state dicts' entry
    names, shapes and floating-point-ness (in ``a``'s order, then ``b``'s extra entries); for
    two modules, the type of every submodule by name. The message is one line, ``models
    differ: <first difference>; <purpose> needs models of one architecture``, calling the
    models by ``names``; for two zoo models (``lmc_spec`` set by :func:`lmc.models.build`)
    the first differing option leads it, e.g. ``option 'activation' is 'relu' in A but
    'tanh' in B (submodule 'act1' is ReLU in A but Tanh in B)``. Only names, shapes and
    types are read, never tensor data.
    """
    na, nb = names
    found = _state_difference(_state(a), _state(b), na, nb)
    both_modules = isinstance(a, nn.Module) and isinstance(b, nn.Module)
    if found is None and both_modules:
        found = _module_difference(a, b, na, nb)
    if found is None:
        return
    option = _option_difference(a, b, na, nb) if both_modules else None
    if option is not None:
        found = f"{option} ({found})"
    raise LmcError(f"models differ: {found}; {purpose} needs models of one architecture")
