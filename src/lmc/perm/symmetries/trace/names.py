"""The name an op is known by in the handler table (:mod:`.handlers`) and elsewhere.

A function is known by its name where it comes from torch, ``operator``, ``builtins`` or
``math`` (``torch.flatten``, ``operator.matmul``, ``F.relu``); an ATen op of an exported graph
(``aten.view.default``) by its op name (``view``); a method (``x.view(...)``) by its name. A
module call has no op name: it is known by its type.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from .tables import FUNCTION_MODULES


def function_name(target: Any) -> str | None:
    """The name of a torch / operator / builtins / math function, else ``None`` (unknown).
    An ATen op of an exported graph (``aten.view.default``) is known by its op name
    (``view``): ATen ops take their tensors in the order of the torch functions of that name
    (``aten.embedding``, which takes the table first, has a handler reading both orders)."""
    if isinstance(target, torch._ops.OpOverload):
        return target._opname if target.namespace == "aten" else None
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None)
    if name is None or module.split(".")[0] not in FUNCTION_MODULES:
        return None
    return name


def op_name(node: fx.Node) -> str | None:
    """The op name of a ``call_function`` (:func:`function_name`) or ``call_method`` node
    (the method's name); ``None`` for any other node (a submodule called ``reshape`` is no
    reshape)."""
    if node.op == "call_function":
        return function_name(node.target)
    if node.op == "call_method":
        return str(node.target)
    return None


__all__ = ["function_name", "op_name"]
