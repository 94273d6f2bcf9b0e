"""The model zoo: MLP, VGG-11/16 and ResNet-20 with width, norm, activation and bias options.

``build(name, **options)`` returns an ``nn.Module`` with a ``probe_points()`` method (the
ordered layer outputs analysis hooks into) and an ``lmc_spec`` dict (name and options) from
which the same architecture can be rebuilt.

Widths: for ``mlp`` ``width`` is the number of hidden units; for ``vgg11``/``vgg16`` it
multiplies the standard channels (64, 128, 256, 512); for ``resnet20`` it multiplies the
stage channels (16, 32, 64).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from lmc.config import LmcError

from .init import initialize
from .layers import ACTIVATIONS, NORMS, check_choice
from .mlp import MLP, mlp
from .modes import eval_mode, module_device, preserved_modes
from .probes import ProbePoint
from .resnet import ResNet20, resnet20
from .vgg import VGG, vgg11, vgg16

MODELS: dict[str, Callable[..., nn.Module]] = {
    "mlp": mlp,
    "vgg11": vgg11,
    "vgg16": vgg16,
    "resnet20": resnet20,
}

_OPTIONS = {
    "mlp": {"input_size", "num_classes", "width", "depth", "norm", "activation", "bias"},
    "vgg11": {"in_channels", "num_classes", "width", "norm", "activation", "bias"},
    "vgg16": {"in_channels", "num_classes", "width", "norm", "activation", "bias"},
    "resnet20": {"in_channels", "num_classes", "width", "norm", "activation", "bias"},
}


def build(name: str, *, seed: int | None = None, **options: Any) -> nn.Module:
    """Build zoo model ``name`` with ``options``; with ``seed``, initialise from that seed.

    Raises ``LmcError`` for an unknown name or option.
    """
    if name not in MODELS:
        raise LmcError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")
    unknown = set(options) - _OPTIONS[name]
    if unknown:
        raise LmcError(
            f"model {name!r} has no option {sorted(unknown)[0]!r}: "
            f"its options are {', '.join(sorted(_OPTIONS[name]))}"
        )
    if "norm" in options:
        check_choice("norm", options["norm"], NORMS)
    if "activation" in options:
        check_choice("activation", options["activation"], ACTIVATIONS)
    model = MODELS[name](**options)
    model.lmc_spec = {"name": name, "options": dict(options)}
    if seed is not None:
        initialize(model, seed)
    return model


def probe_points(model: nn.Module) -> list[ProbePoint]:
    """The probe points of a zoo model, or ``LmcError`` for a model without them."""
    if hasattr(model, "probe_points"):
        return model.probe_points()
    raise LmcError(
        f"{type(model).__name__} declares no probe points: add a probe_points() method "
        "returning lmc.models.ProbePoint records"
    )


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = [
    "MLP",
    "MODELS",
    "ProbePoint",
    "ResNet20",
    "VGG",
    "build",
    "count_parameters",
    "eval_mode",
    "initialize",
    "module_device",
    "preserved_modes",
    "probe_points",
]
