"""The model zoo: MLP, VGG-11/16, ResNet-20, a ViT, a small causal GPT and a Llama-style LM.

Every architecture is one entry of the registry (:mod:`lmc.models.registry`): what its
``width`` means, its options with their defaults, and how its input options come from the
data. ``build(name, **options)`` returns an ``nn.Module`` with a ``probe_points()`` method (the
ordered layer outputs analysis hooks into) and an ``lmc_spec`` dict (name and options) from
which the same architecture can be rebuilt; ``resolve_options`` completes a model's options
(the one place defaults are filled in).

Widths: for ``mlp`` ``width`` is the number of hidden units; for ``vgg11``/``vgg16`` it
multiplies the standard channels (64, 128, 256, 512); for ``resnet20`` it multiplies the
stage channels (16, 32, 64); for ``vit``, ``gpt`` and ``llama`` it is the embedding dimension
(divisible by ``heads``). Transformers' probe points use the ``tokens`` layout (see
:class:`ProbePoint`): the residual stream after each block and each block's MLP hidden units.
``gpt`` and ``llama`` take token ids: build them with ``vocab`` and ``context`` (text data
fills both in).
"""

from __future__ import annotations

from torch import nn

from lmc.config import LmcError

from . import gpt as _gpt  # noqa: F401
from . import llama as _llama  # noqa: F401
from . import mlp as _mlp  # noqa: F401  (registers the zoo)
from . import resnet as _resnet  # noqa: F401
from . import vgg as _vgg  # noqa: F401
from . import vit as _vit  # noqa: F401
from .compare import check_same_architecture
from .gpt import GPT
from .init import initialize
from .mlp import MLP
from .modes import eval_mode, module_device, preserved_modes
from .probes import ProbePoint
from .registry import (
    MODELS,
    ModelEntry,
    build,
    check_fits_memory,
    check_options,
    get_model,
    has_input_options,
    image_inputs,
    parameter_count,
    register_model,
    resolve_options,
    vector_inputs,
)
from .resnet import ResNet20
from .vgg import VGG
from .vit import ViT


def probe_points(model: nn.Module) -> list[ProbePoint]:
    """The probe points of a zoo model, or ``LmcError`` for a model without them."""
    if hasattr(model, "probe_points"):
        return model.probe_points()
    raise LmcError(
        f"{type(model).__name__} declares no probe points: add a probe_points() method "
        "returning lmc.models.ProbePoint records"
    )


def count_parameters(model: nn.Module) -> int:
    """The number of scalars in ``model``'s parameters (buffers such as BatchNorm's running
    statistics are not counted)."""
    return sum(p.numel() for p in model.parameters())


__all__ = [
    "GPT",
    "MLP",
    "MODELS",
    "ModelEntry",
    "ProbePoint",
    "ResNet20",
    "VGG",
    "ViT",
    "build",
    "check_fits_memory",
    "check_options",
    "check_same_architecture",
    "count_parameters",
    "eval_mode",
    "get_model",
    "has_input_options",
    "image_inputs",
    "parameter_count",
    "initialize",
    "module_device",
    "preserved_modes",
    "probe_points",
    "register_model",
    "resolve_options",
    "vector_inputs",
]
