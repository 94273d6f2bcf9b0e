"""Stitching without a trained adapter (LLFC App. B.4).

A model of ``L`` layers is cut into ``L`` consecutive segments (:func:`stitch_segments`);
``stitch(model_a, model_b, layer)`` runs A's first ``layer`` segments and B's remaining
``L - layer`` ones, with nothing between them: ``layer = 0`` is B, ``layer = L`` is A. B
must be aligned to A (by permutation, or spawned from A) for the stitched model to make
sense; the stitched error against the endpoints' says how interchangeable the two models'
features are at each layer.

Layers (``L``):

- zoo ``mlp``: hidden layer ``i`` = fc_i -> norm_i -> act_i (the input flattening belongs to
  layer 1), then the logits layer ``out``: ``L = depth + 1``;
- zoo ``vgg11``/``vgg16``: conv_i -> norm_i -> act_i plus the max-pools that follow it, then
  the head (global pool, flatten, classifier): ``L = convs + 1``;
- zoo ``resnet20``: the stem (conv, norm, act), each of the nine residual blocks, the head:
  ``L = 11`` (cuts only between blocks, where the residual stream is one tensor);
- an ``nn.Sequential``: each Linear/Conv child starts a new layer; parameter-free children
  (activations, pools, flatten) belong to the layer before them (those before the first
  weight module to the first layer).

The stitched module *shares* A's and B's submodules (no copy): it computes with their current
weights and BatchNorm statistics (each model's own), and putting it in train/eval mode changes
theirs. :func:`stitching_errors` runs it in eval mode and restores the models' modes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, check_int
from lmc.data.tasks import Task, get_task
from lmc.models import MLP, VGG, ResNet20, check_same_architecture, eval_mode, module_device

from .probes import WEIGHT_TYPES


def stitch_segments(model: nn.Module) -> list[nn.Module]:
    """The ``L`` consecutive segments of ``model`` (module docstring); running them in order
    computes ``model(x)``. The segments share ``model``'s submodules."""
    if isinstance(model, MLP):
        segments: list[nn.Module] = []
        for i in range(1, model.depth + 1):
            parts = [getattr(model, f"{kind}{i}") for kind in ("fc", "norm", "act")]
            segments.append(nn.Sequential(*([model.flatten] if i == 1 else []), *parts))
        segments.append(model.out)
        return segments
    if isinstance(model, VGG):
        segments = []
        for name, module in model.features.named_children():
            if name.startswith("conv"):
                segments.append(nn.Sequential(module))
            else:
                segments[-1].append(module)
        segments.append(nn.Sequential(model.pool, model.flatten, model.classifier))
        return segments
    if isinstance(model, ResNet20):
        segments = [nn.Sequential(model.stem, model.stem_norm, model.stem_act)]
        for s in (1, 2, 3):
            segments.extend(getattr(model, f"stage{s}").children())
        segments.append(nn.Sequential(model.pool, model.flatten, model.out))
        return segments
    if isinstance(model, nn.Sequential):
        groups: list[list[nn.Module]] = []
        pending: list[nn.Module] = []
        for child in model.children():
            if isinstance(child, WEIGHT_TYPES):
                groups.append([*pending, child])
                pending = []
            elif groups:
                groups[-1].append(child)
            else:
                pending.append(child)
        if not groups:
            raise LmcError("this nn.Sequential has no Linear or Conv layer to stitch at")
        groups[-1].extend(pending)
        return [nn.Sequential(*g) for g in groups]
    raise LmcError(
        f"stitching knows the zoo's mlp, vgg and resnet20 and nn.Sequential models, not "
        f"{type(model).__name__}"
    )


def num_stitch_layers(model: nn.Module) -> int:
    """``L``: the number of segments of ``model`` (the largest ``layer`` of :func:`stitch`)."""
    return len(stitch_segments(model))


class Stitched(nn.Module):
    """A's first ``layer`` segments followed by B's last ``L - layer`` (see :func:`stitch`)."""

    def __init__(
        self, segments_a: Sequence[nn.Module], segments_b: Sequence[nn.Module], layer: int
    ):
        super().__init__()
        self.layer = layer
        self.segments = nn.ModuleList([*segments_a[:layer], *segments_b[layer:]])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for segment in self.segments:
            x = segment(x)
        return x


def stitch(model_a: nn.Module, model_b: nn.Module, layer: int) -> Stitched:
    """The model that runs A's layers 1..``layer`` and B's layers ``layer + 1``..L.

    ``layer`` is the number of A's layers used: 0 is all B, ``L`` (:func:`num_stitch_layers`)
    is all A. A and B must have the same architecture (``LmcError`` otherwise). The result
    shares A's and B's modules (module docstring).
    """
    check_same_architecture(model_a, model_b, names=("model A", "model B"), purpose="stitching")
    if type(model_a) is not type(model_b):
        raise LmcError(
            f"stitching needs two models of one class, got {type(model_a).__name__} and "
            f"{type(model_b).__name__}"
        )
    segments_a, segments_b = stitch_segments(model_a), stitch_segments(model_b)
    total = len(segments_a)
    layer = check_int("layer", layer, minimum=0)
    if layer > total:
        raise LmcError(f"layer must be at most {total} (the model's number of layers), got {layer}")
    return Stitched(segments_a, segments_b, layer)


def _test_split(data: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if hasattr(data, "x_test") and hasattr(data, "y_test"):
        return data.x_test, data.y_test
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data[0], data[1]
    raise LmcError(
        "data must be an lmc.data.Dataset (its test split is used) or a pair (inputs, labels)"
    )


@torch.no_grad()
def stitching_errors(
    model_a: nn.Module,
    model_b: nn.Module,
    data: Any,
    *,
    batch_size: int = 1024,
    task: Task | str | None = None,
) -> list[float]:
    """Test error (1 - accuracy, a fraction) of ``stitch(model_a, model_b, l)`` for
    ``l = 0..L``: entry ``l`` uses A's first ``l`` layers, so entry 0 is B's error and entry
    ``L`` A's.

    ``data``: an :class:`lmc.data.Dataset` (its test split) or ``(inputs, labels)``. Inputs are
    moved batch by batch to A's device; both models run in eval mode (their modes are
    restored afterwards). ``task`` (:mod:`lmc.data.tasks`): what a prediction is (default:
    the dataset's ``task``, or ``classification`` for a pair); the error is the fraction of
    wrong predictions (next-token: of every position of every window).
    """
    x, y = _test_split(data)
    task = get_task(task if task is not None else getattr(data, "task", None))
    task.check(None, y)
    if len(x) != len(y) or y.numel() == 0:
        raise LmcError(f"data needs as many labels as inputs (at least one), got {len(x)} "
                       f"inputs and {len(y)} labels")  # fmt: skip
    batch_size = check_int("batch_size", batch_size, minimum=1)
    device = module_device(model_a)
    total = num_stitch_layers(model_a)
    errors = []
    with eval_mode(model_a), eval_mode(model_b):
        for layer in range(total + 1):
            model = stitch(model_a, model_b, layer)
            wrong = 0
            for start in range(0, len(x), batch_size):
                xb = x[start : start + batch_size].to(device)
                yb = y[start : start + batch_size].to(device)
                right = task.correct_count(model(xb), yb)
                if right is None:
                    raise LmcError(
                        f"stitching measures test errors, and the {task.name} task has no "
                        "accuracy: stitching_errors needs a task whose predictions are right "
                        "or wrong (classification, next-token)"
                    )
                wrong += task.num_predictions(yb) - int(right)
            errors.append(wrong / task.num_predictions(y))
    return errors
