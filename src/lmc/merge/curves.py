"""Curves between two models (Garipov et al. 2018): the line, a quadratic Bézier curve and a
polygonal chain with one bend, on whole state dicts.

Convention (docs/science.md, "Curves between two models"): t plays λ's role, t = 0 is A and
t = 1 is B, and every kind is a weighted sum of the endpoints and one control point θ_C:

- ``line``: θ(t) = (1 − t)θ_A + tθ_B, no control point (:func:`lmc.merge.lerp`'s path);
- ``bezier``: θ(t) = (1 − t)²θ_A + 2t(1 − t)θ_C + t²θ_B;
- ``chain``: θ(t) = θ_A + 2t(θ_C − θ_A) for t ≤ ½, θ_C + (2t − 1)(θ_B − θ_C) after (the bend
  θ_C is the point at t = ½).

:meth:`PathKind.weights` gives the three weights ``(w_A, w_C, w_B)`` of a kind at t (they sum
to 1); a later kind is one :func:`register_path_kind` call. The control point starts at the
midpoint (θ_A + θ_B)/2 (:func:`midpoint_control`), where both curves are the line.

State dicts: every floating entry (parameters *and* floating buffers such as BatchNorm running
statistics) lies on the curve. Integer and boolean entries (``num_batches_tracked``, an index
or mask buffer) are not interpolated: they are A's at every t < 1 and B's at t = 1, so both
endpoints are exact; when such an entry differs between A and B (other than a BatchNorm step
counter, ``num_batches_tracked``, read only to average statistics in training mode with
``momentum=None``) an :class:`lmc.config.LmcWarning` names it, since the interior points then
carry A's. Entries that
are not tensors (a module's ``get_extra_state``) are refused with ``LmcError``: they have no
point on a curve. A module's non-persistent buffers are not in its state dict and stay the
model's own (A's, in a copy of A) at every t. The floating buffers of a curve's point are
interpolated like the parameters but are not statistics of that point: a BatchNorm model's
statistics are recomputed at every evaluated point (the existing reset,
:func:`lmc.merge.reset_batchnorm`; :func:`lmc.metrics.curve_path.evaluate_curve` does it). A
point has A's dtypes and devices; the endpoints are exact (t = 0 gives A, t = 1 gives B, bit
for bit, and a chain at t = ½ gives θ_C), because terms of weight 0 are skipped.

Models: the curve is evaluated and fitted through the model's ``forward(x)``, which must
return the logits as one tensor (``(N, C)``, or ``(N, T, V)`` per token);
:func:`check_model_output` refuses a tuple, a dict or a Hugging Face ``ModelOutput`` with a
one-line ``LmcError`` (wrap such a model: :class:`lmc.models.factory.HFLogits`).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from lmc.config import LmcError, LmcWarning, check_lambda, lookup_name
from lmc.models import eval_mode, module_device
from lmc.models.compare import check_same_architecture
from lmc.store import tensors_digest

from .batchnorm import reset_batchnorm, resolve_bn_mode
from .interpolate import StateDict, lerp

Weights = tuple[float, float, float]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class PathKind:
    """One kind of path between two models: its ``name`` (the ``kind`` a setting or a result
    names), ``control_points`` (0 for the line, 1 for the curves), a one-line ``description``
    and ``formula`` for help texts, and the function ``weights(t) -> (w_A, w_C, w_B)`` giving
    θ(t) = w_A θ_A + w_C θ_C + w_B θ_B (``w_C`` is 0 for a kind without a control point).
    Compared by name."""

    name: str
    control_points: int
    description: str
    formula: str
    weights_fn: Callable[[float], Weights] = field(compare=False, repr=False)

    def weights(self, t: float) -> Weights:
        """``(w_A, w_C, w_B)`` at ``t`` in [0, 1] (``LmcError`` outside); they sum to 1."""
        return self.weights_fn(check_lambda(_as_float(t), "t"))

    def __str__(self) -> str:
        return self.name


def _as_float(t: float | torch.Tensor) -> float:
    if isinstance(t, torch.Tensor) and t.numel() == 1:
        return float(t.item())
    return t


def _line(t: float) -> Weights:
    return (1.0 - t, 0.0, t)


def _bezier(t: float) -> Weights:
    return ((1.0 - t) ** 2, 2.0 * t * (1.0 - t), t * t)


def _chain(t: float) -> Weights:
    if t <= 0.5:
        return (1.0 - 2.0 * t, 2.0 * t, 0.0)
    return (0.0, 2.0 - 2.0 * t, 2.0 * t - 1.0)


#: The path kinds by name (:func:`register_path_kind`).
PATH_KINDS: dict[str, PathKind] = {}


def register_path_kind(kind: PathKind) -> PathKind:
    """Add ``kind`` to :data:`PATH_KINDS` and return it; ``LmcError`` when its name is taken
    or its weights at 0 and 1 are not the endpoints (1, 0, 0) and (0, 0, 1)."""
    known = PATH_KINDS.get(kind.name)
    if known is not None and known is not kind:
        raise LmcError(f"a path kind named {kind.name!r} is already registered")
    if kind.weights_fn(0.0) != (1.0, 0.0, 0.0) or kind.weights_fn(1.0) != (0.0, 0.0, 1.0):
        raise LmcError(f"path kind {kind.name!r} must start at A (t = 0) and end at B (t = 1)")
    PATH_KINDS[kind.name] = kind
    return kind


LINE = register_path_kind(
    PathKind("line", 0, "the straight line from A to B", "(1 − t)θ_A + tθ_B", _line)
)
BEZIER = register_path_kind(
    PathKind(
        "bezier",
        1,
        "quadratic Bézier curve through one trained control point",
        "(1 − t)²θ_A + 2t(1 − t)θ_C + t²θ_B",
        _bezier,
    )
)
CHAIN = register_path_kind(
    PathKind(
        "chain",
        1,
        "polygonal chain A → θ_C → B with its bend θ_C at t = ½",
        "θ_A + 2t(θ_C − θ_A) for t ≤ ½, θ_C + (2t − 1)(θ_B − θ_C) after",
        _chain,
    )
)


def path_kind_names() -> tuple[str, ...]:
    """The registered kinds' names, in registration order (``line``, ``bezier``, ``chain``)."""
    return tuple(PATH_KINDS)


def get_path_kind(kind: str | PathKind) -> PathKind:
    """The :class:`PathKind` named ``kind`` (a :class:`PathKind` is returned as it is);
    ``LmcError`` naming the known kinds otherwise."""
    if isinstance(kind, PathKind):
        return kind
    return lookup_name(PATH_KINDS, kind, "path kind")


@torch.no_grad()
def combine_into(
    out: torch.Tensor,
    weights: Weights,
    a: torch.Tensor,
    c: torch.Tensor | None,
    b: torch.Tensor,
) -> torch.Tensor:
    """Write ``w_A a + w_C c + w_B b`` into ``out`` (computed in ``out``'s dtype, on its
    device; no graph) and return it. The terms are taken in the order A, B, θ_C, terms of
    weight 0 skipped: the first is written (copied when its weight is 1, so a weight of
    exactly 1 gives that tensor's values exactly), the others added (``add_(…, alpha=w)``).
    ``c`` may be ``None`` when ``w_C`` is 0."""
    wa, wc, wb = weights
    first = True
    for w, t in ((wa, a), (wb, b), (wc, c)):
        if w == 0.0:
            continue
        if t is None:
            raise LmcError("this point of the curve needs its control point θ_C")
        t = t.detach().to(device=out.device, dtype=out.dtype)
        if first and w == 1.0:
            out.copy_(t)
        elif first:
            torch.mul(t, w, out=out)
        else:
            out.add_(t, alpha=w)
        first = False
    if first:
        raise LmcError(f"the weights {weights} of a point of a curve must not all be 0")
    return out


def combine(
    weights: Weights,
    a: torch.Tensor,
    c: torch.Tensor | None,
    b: torch.Tensor,
) -> torch.Tensor:
    """``w_A a + w_C c + w_B b`` (:func:`combine_into`) as a new tensor in ``a``'s dtype (half
    precision computed in float32) on ``a``'s device."""
    work = torch.float32 if a.dtype in _LOW_PRECISION else a.dtype
    out = torch.empty(a.shape, dtype=work, device=a.device)
    return combine_into(out, weights, a, c, b).to(a.dtype)


#: Integer entries that may differ between A and B without a warning: BatchNorm's step counter
#: (read only by a BatchNorm with ``momentum=None`` in training mode, never at evaluation).
UNCHECKED_INTEGER_SUFFIXES = ("num_batches_tracked",)


def check_tensor_entries(state: Mapping[str, object], name: str = "A") -> None:
    """``LmcError`` naming the first entry of ``state`` that is not a tensor (a module's extra
    state, ``get_extra_state``): a curve has no point for it."""
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise LmcError(
                f"entry {key!r} of {name} is a {type(value).__name__}, not a tensor (a module's "
                "extra state): curves and planes interpolate tensor entries only; give state "
                "dicts of tensors"
            )


def differing_integer_entries(
    state_a: Mapping[str, torch.Tensor], state_b: Mapping[str, torch.Tensor]
) -> list[str]:
    """The integer and boolean entries whose values differ between A and B, BatchNorm step
    counters (:data:`UNCHECKED_INTEGER_SUFFIXES`) left out."""
    out = []
    for key, a in state_a.items():
        if a.is_floating_point() or key.endswith(UNCHECKED_INTEGER_SUFFIXES):
            continue
        b = state_b[key]
        if not torch.equal(a, b.to(device=a.device, dtype=a.dtype)):
            out.append(key)
    return out


def warn_integer_entries(
    state_a: Mapping[str, torch.Tensor], state_b: Mapping[str, torch.Tensor], what: str
) -> None:
    """An :class:`lmc.config.LmcWarning` when integer entries differ between A and B (module
    doc): the interior points of ``what`` carry A's values of them."""
    keys = differing_integer_entries(state_a, state_b)
    if keys:
        shown = ", ".join(repr(k) for k in keys[:3]) + (" ..." if len(keys) > 3 else "")
        warnings.warn(
            f"integer entries differ between A and B ({shown}): they are not interpolated, so "
            f"every point of {what} but B itself carries A's values of them",
            LmcWarning,
            stacklevel=3,
        )


def check_logits(out: object, source: str = "the model") -> torch.Tensor:
    """``out`` when it is a tensor; else ``LmcError``: lmc's curves (and paths) read the
    logits as the one tensor ``forward(x)`` returns."""
    if isinstance(out, torch.Tensor):
        return out
    raise LmcError(
        f"{source} returns a {type(out).__name__}, not a tensor of logits: curves need "
        "forward(x) to return the logits as one tensor, (N, C) or (N, T, V) per token; wrap "
        "the model so that it does (for a Hugging Face model: lmc.models.factory.HFLogits)"
    )


@torch.no_grad()
def check_model_output(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor | None = None,
    task: object = None,
    *,
    device: torch.device | str | None = None,
    source: str = "the model",
) -> torch.Tensor:
    """The output of ``model`` (eval mode, restored after; no graph) on the first example of
    ``x`` (moved to ``device``, default the model's), checked to be a tensor
    (:func:`check_logits`) and, with ``task`` (a :class:`lmc.data.tasks.Task`) and ``y``
    (all the targets), to have the layout ``y`` asks for, every target within its classes
    (:meth:`Task.check`). ``model`` is not changed."""
    device = torch.device(device) if device is not None else module_device(model)
    with eval_mode(model):
        out = check_logits(model(x[:1].to(device)), source)
    if task is not None and y is not None:
        task.check(out, y, name="y")
    return out


@torch.no_grad()
def midpoint_control(
    state_a: Mapping[str, torch.Tensor], state_b: Mapping[str, torch.Tensor]
) -> StateDict:
    """The control point where every curve starts: (θ_A + θ_B)/2 (``lerp(A, B, ½)``; integer
    entries A's). Both a Bézier curve and a chain through it are the line."""
    return lerp(state_a, state_b, 0.5)


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 (hex) over every entry's name, dtype, shape and bytes, in name order: names a
    state dict in a curve's config and binds a checkpoint to its endpoints
    (:func:`lmc.store.tensors_digest`)."""
    return tensors_digest(state)


class Curve:
    """A path θ(t) of ``kind`` from ``state_a`` (t = 0) to ``state_b`` (t = 1) through
    ``control`` (θ_C, a state dict of the same names and shapes; default the midpoint; a line
    has none). The states are held as given (detached, B and θ_C on A's devices), not copied:
    changing them changes the curve.
    """

    def __init__(
        self,
        kind: str | PathKind,
        state_a: Mapping[str, torch.Tensor],
        state_b: Mapping[str, torch.Tensor],
        control: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        self.kind = get_path_kind(kind)
        check_tensor_entries(state_a, "A")
        check_tensor_entries(state_b, "B")
        check_same_architecture(state_a, state_b, purpose="a curve")
        self.state_a = {k: v.detach() for k, v in state_a.items()}
        self.state_b = {k: state_b[k].detach().to(v.device) for k, v in self.state_a.items()}
        warn_integer_entries(self.state_a, self.state_b, "the curve")
        if self.kind.control_points == 0:
            if control is not None:
                raise LmcError(f"a {self.kind.name} has no control point; pass control=None")
            self.control: StateDict | None = None
        else:
            if control is None:
                control = midpoint_control(self.state_a, self.state_b)
            check_tensor_entries(control, "the control point")
            check_same_architecture(
                self.state_a, control, names=("A", "the control point"), purpose="a curve"
            )
            self.control = {k: control[k].detach().to(v.device) for k, v in self.state_a.items()}

    def weights(self, t: float) -> Weights:
        """``(w_A, w_C, w_B)`` at ``t`` (:meth:`PathKind.weights`)."""
        return self.kind.weights(t)

    @torch.no_grad()
    def point(self, t: float) -> StateDict:
        """The state dict θ(t): floating entries on the curve, integer entries A's (B's at
        t = 1; module doc). ``t = 0`` is A and ``t = 1`` is B bit for bit (B's values in A's
        dtypes). The output never shares storage with the curve's states."""
        w = self.weights(t)
        out: StateDict = {}
        at_b = w == (0.0, 0.0, 1.0)
        for key, a in self.state_a.items():
            if not a.is_floating_point():
                out[key] = self.state_b[key].to(a.dtype, copy=True) if at_b else a.clone()
            else:
                c = None if self.control is None else self.control[key]
                out[key] = combine(w, a, c, self.state_b[key])
        return out

    def bend_distance(self, names: list[str] | None = None) -> float:
        """‖θ_C − (θ_A + θ_B)/2‖ / ‖θ_A − θ_B‖ over the floating entries ``names`` (default
        all of them), norms in float64: 0 for the line and for an untrained control point
        (docs/science.md). NaN when A and B are equal on those entries."""
        if self.control is None:
            return 0.0
        keys = [k for k, v in self.state_a.items() if v.is_floating_point()]
        if names is not None:
            wanted = set(names)
            keys = [k for k in keys if k in wanted]
        num = den = 0.0
        for k in keys:
            a, b, c = (s[k].detach().double() for s in (self.state_a, self.state_b, self.control))
            num += float((c - 0.5 * (a + b)).square().sum())
            den += float((a - b).square().sum())
        return math.sqrt(num) / math.sqrt(den) if den > 0 else math.nan


def curve_merge_fn(
    kind: str | PathKind,
    control: Mapping[str, torch.Tensor] | None,
    model: nn.Module,
    *,
    bn: str = "auto",
    train_inputs: torch.Tensor | None = None,
) -> Callable[[StateDict, StateDict, float], StateDict]:
    """The point θ(t) of a curve of ``kind`` through ``control`` as a function
    ``merge(state_a, state_b, t) -> state``: the form :func:`lmc.analysis.analyze` takes as
    its ``merge_fn`` (in place of the line's θ(λ)), so the layerwise analysis runs at any point
    of a curve (``lam`` read as t; t = 0 is A). The endpoints are the states the caller passes
    (e.g. B aligned to A), the control point is ``control`` (``None`` for the line).

    BatchNorm: ``bn`` is resolved on ``model`` (:func:`lmc.merge.resolve_bn_mode`); ``reset``
    (``auto`` on a BatchNorm model) recomputes every point's statistics on ``train_inputs``
    (:func:`lmc.merge.reset_batchnorm`, as :func:`lmc.metrics.curve_path.evaluate_curve`
    does); ``none`` keeps the interpolated buffers; ``repair`` is refused (it targets the
    line). ``model`` (of the curve's architecture) is not changed."""
    kind = get_path_kind(kind)
    mode = resolve_bn_mode(model, bn)
    if mode == "repair":
        raise LmcError("REPAIR is defined for the line only; use bn='reset' for a curve")
    if mode == "reset" and train_inputs is None:
        raise LmcError("resetting BatchNorm along a curve needs train_inputs")
    scratch = copy.deepcopy(model) if mode == "reset" else None

    def merge(state_a: StateDict, state_b: StateDict, t: float) -> StateDict:
        point = Curve(kind, state_a, state_b, control).point(t)
        if scratch is None:
            return point
        scratch.load_state_dict(point)
        reset_batchnorm(scratch, train_inputs)
        return {k: v.detach().clone() for k, v in scratch.state_dict().items()}

    return merge


__all__ = [
    "BEZIER",
    "CHAIN",
    "LINE",
    "PATH_KINDS",
    "Curve",
    "PathKind",
    "UNCHECKED_INTEGER_SUFFIXES",
    "check_logits",
    "check_model_output",
    "check_tensor_entries",
    "combine",
    "combine_into",
    "differing_integer_entries",
    "curve_merge_fn",
    "get_path_kind",
    "midpoint_control",
    "path_kind_names",
    "register_path_kind",
    "state_digest",
    "warn_integer_entries",
]
