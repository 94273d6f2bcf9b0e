"""Evaluating the linear path between two models in few passes over the data.

Path: theta(lam) = (1 - lam) * theta_A + lam * theta_B on a grid of lambdas (``lambda_grid``),
lam = 0 is A, lam = 1 is B. Per lambda, :func:`evaluate_path` reports (every number in float64;
the examples it uses in parentheses):

- ``loss``: mean cross-entropy (nats) of theta(lam) (full split)
- ``accuracy``: fraction of correct argmax predictions (full split)
- ``logit_norm``: mean over examples of the L2 norm of the logits (full split)
- ``ensemble_loss`` / ``ensemble_accuracy``: of the logits (1 - lam) f_A + lam f_B (full split)
- ``inverse_temperature``: beta fitted on the calibration subset (20% subset)
- ``calibrated_loss``: cross-entropy of softmax(beta * logits) (80% subset)
- ``heldout_loss``: uncalibrated cross-entropy (beta = 1) (80% subset)
- ``ensemble_inverse_temperature`` / ``ensemble_calibrated_loss``: the same for the ensemble.

When the calibration subset is perfectly classified the cross-entropy falls for ever as beta
grows: beta is not identifiable, ``fit_inverse_temperature`` returns its upper bound, and the
calibrated loss (hence every calibrated barrier using it) is NaN (``null`` in JSON); the lambdas
concerned are listed in ``calibration_at_bound`` (``ensemble_calibration_at_bound``). Small
splits make this likely (digits' 451 test examples give a 90-example calibration subset).

The calibration subset is a fixed random ``calibration_fraction`` (default 20%) of the split's
examples: the first ``round(fraction * N)`` of ``torch.randperm(N)`` drawn from
``torch.Generator().manual_seed(calibration_seed)``; the held-out subset is the rest. The same
subsets serve every lambda (endpoints included), so calibrated barriers compare like with like,
and ``heldout_loss`` gives the uncalibrated loss on the very examples ``calibrated_loss`` uses.

How the grid is evaluated (``method``):

- ``batched`` (the default whenever nothing has to be recomputed per lambda, i.e. the resolved
  BatchNorm mode is ``none``): the interior lambdas' weights are stacked (``lerp_stack``) and
  evaluated together in one batched forward per batch of examples, in chunks of lambdas bounded
  by ``max_stack_bytes``: ``torch.vmap`` over ``torch.func.functional_call`` for any model, or,
  for a plain chain of Linear layers and activations (:func:`chain_plan`: the zoo's MLPs without
  BatchNorm), layer by layer one ``addmm`` per model (bias fused) into reused buffers with the
  activation applied in place.
- ``loop``: one forward pass over the split per lambda (needed when BatchNorm statistics are
  reset or REPAIRed for each lambda).

The endpoints are always the models themselves (A, and B or ``state_b``), evaluated with a plain
forward; their logits serve as lam = 0 and lam = 1 of the path, so the path's endpoints equal the
models' own numbers bit for bit. With BatchNorm ``reset``/``repair`` only the interior points are
reset (the endpoints keep the statistics training gave them) unless ``reset_endpoints=True``.

Memory: the logits of the two endpoints and of one chunk of lambdas, ``(2 + k) * N * C`` floats,
are held on the models' device; no hidden activations are kept.
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lmc.config import LmcError, progress
from lmc.merge import (
    batchnorm_output_stats,
    check_compatible,
    lerp_into,
    lerp_stack,
    repair,
    reset_batchnorm,
    resolve_bn_mode,
)

from .barriers import barriers as _barriers
from .calibration import BETA_MAX, BETA_MIN, fit_inverse_temperature, mean_cross_entropy

METHODS = ("auto", "batched", "loop")
#: Default examples per forward pass (per lambda in the batched method).
TARGET_ROWS = 2048
#: Bound on the largest activation tensor of one forward pass when choosing the batch size.
ACTIVATION_BUDGET_BYTES = 256 << 20
#: Bound on the logits buffered before their metrics are computed (loop method).
LOGIT_BUFFER_BYTES = 256 << 20
_TOL = 1e-9


def lambda_grid(lambdas: int | Sequence[float] = 11) -> tuple[list[float], list[float]]:
    """The evaluated grid and the values that were added to it.

    An integer ``N >= 2`` means ``N`` evenly spaced points ``i / (N - 1)`` from 0 to 1. A list is
    sorted and de-duplicated; its values must lie in [0, 1]. In both cases 0, 1 and ½ are added
    when missing (the endpoints define every barrier, ½ the midpoint barriers), and the added
    values are returned as the second element.
    """
    if isinstance(lambdas, bool):
        raise LmcError("lambdas must be a number of points or a list of values, got a bool")
    if isinstance(lambdas, numbers.Integral):
        lambdas = int(lambdas)
        if lambdas < 2:
            raise LmcError(f"a path needs at least 2 lambdas (the endpoints), got {lambdas}")
        values = [i / (lambdas - 1) for i in range(lambdas)]
    else:
        try:
            values = [float(v) for v in lambdas]
        except (TypeError, ValueError) as exc:
            raise LmcError(f"lambdas must be numbers, got {lambdas!r}") from exc
        for v in values:
            if not math.isfinite(v) or v < -_TOL or v > 1 + _TOL:
                raise LmcError(f"lambda {v} is outside [0, 1]; the path runs from A (0) to B (1)")
        values = [min(1.0, max(0.0, v)) for v in values]
    grid: list[float] = []
    for v in sorted(values):
        if not grid or v - grid[-1] > _TOL:
            grid.append(v)
    added = []
    for v in (0.0, 0.5, 1.0):
        if all(abs(v - g) > _TOL for g in grid):
            grid.append(v)
            added.append(v)
    grid.sort()
    for v in (0.0, 0.5, 1.0):  # snap near-hits to the exact value
        grid = [v if abs(g - v) <= _TOL else g for g in grid]
    return grid, added


@dataclass
class PathResult:
    """Metrics along the path theta(lam); lists have one entry per lambda (see module doc)."""

    lambdas: list[float]
    loss: list[float]
    accuracy: list[float]
    logit_norm: list[float]
    ensemble_loss: list[float]
    ensemble_accuracy: list[float]
    inverse_temperature: list[float] | None = None
    calibrated_loss: list[float] | None = None
    heldout_loss: list[float] | None = None
    ensemble_inverse_temperature: list[float] | None = None
    ensemble_calibrated_loss: list[float] | None = None
    bn: str = "none"
    method: str = "loop"
    calibrate: bool = False
    calibration_seed: int | None = None
    calibration_fraction: float | None = None
    num_examples: int = 0
    num_calibration: int | None = None
    num_heldout: int | None = None
    added_lambdas: list[float] = field(default_factory=list)
    calibration_at_bound: list[float] = field(default_factory=list)
    ensemble_calibration_at_bound: list[float] = field(default_factory=list)

    def barriers(self) -> dict[str, float | None]:
        """All barriers (:func:`lmc.metrics.barriers`)."""
        return _barriers(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> list[dict[str, float | None]]:
        """One dict per lambda with every per-lambda metric (``None`` when not computed)."""
        keys = [
            "loss", "accuracy", "logit_norm", "ensemble_loss", "ensemble_accuracy",
            "heldout_loss", "calibrated_loss", "inverse_temperature",
            "ensemble_calibrated_loss", "ensemble_inverse_temperature",
        ]  # fmt: skip
        rows = []
        for i, lam in enumerate(self.lambdas):
            row: dict[str, float | None] = {"lambda": lam}
            for key in keys:
                values = getattr(self, key)
                row[key] = None if values is None else values[i]
            rows.append(row)
        return rows


def calibration_split(
    n: int, seed: int, fraction: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(calibration, heldout)`` example indices: the first ``round(fraction * n)`` (at least 1,
    at most n - 1) of ``torch.randperm(n)`` from ``torch.Generator().manual_seed(seed)``, and the
    rest (both sorted)."""
    if n < 2:
        raise LmcError(f"calibration needs at least 2 examples, got {n}")
    if not 0.0 < fraction < 1.0:
        raise LmcError(f"calibration fraction must be in (0, 1), got {fraction}")
    k = min(n - 1, max(1, round(fraction * n)))
    order = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    return order[:k].sort().values, order[k:].sort().values


def _device_of(model: nn.Module) -> torch.device:
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    return torch.device("cpu")


def at_bound(beta: float) -> bool:
    """Whether a fitted beta is NaN or sits on a bound of the search (no interior minimum)."""
    return math.isnan(beta) or beta >= BETA_MAX * (1 - 1e-6) or beta <= BETA_MIN * (1 + 1e-6)


def _fit(z: torch.Tensor, y: torch.Tensor) -> float:
    if not torch.isfinite(z).all():
        return math.nan
    return fit_inverse_temperature(z, y)


class _Metrics:
    """Turns a stack of models' logits on the split into the per-lambda numbers.

    Everything but the beta searches is computed for the whole stack at once (a handful of
    kernels per chunk of lambdas, not per lambda), and each example's cross-entropy is computed
    once: the held-out loss is a subset mean of the same rows.
    """

    def __init__(self, y: torch.Tensor, calibrate: bool, seed: int, fraction: float) -> None:
        self.y = y
        self.calibrate = calibrate
        if calibrate:
            cal, held = calibration_split(len(y), seed, fraction)
            self.cal, self.held = cal.to(y.device), held.to(y.device)
            self.y_cal, self.y_held = y[self.cal], y[self.held]

    def _ce_rows(self, z: torch.Tensor) -> torch.Tensor:
        """(k, N) float64 cross-entropy of every example under every model of the stack."""
        zd = z.double()
        target = zd.gather(2, self.y.view(1, -1, 1).expand(zd.shape[0], -1, 1)).squeeze(2)
        return torch.logsumexp(zd, dim=2) - target

    def _calibrate(self, z: torch.Tensor) -> tuple[list[float], list[float]]:
        """Per model of the stack: beta on the calibration subset, calibrated held-out loss.

        A beta on a bound of the search (:func:`at_bound`: the loss has no minimum inside,
        e.g. a perfectly classified calibration subset, where beta -> infinity) leaves the
        calibrated loss undefined: it is NaN, not the loss at the arbitrary bound.
        """
        betas = [_fit(z[k, self.cal], self.y_cal) for k in range(z.shape[0])]
        finite = torch.tensor([0.0 if math.isnan(b) else b for b in betas], dtype=torch.float64)
        scaled = z[:, self.held].double() * finite.to(z.device).view(-1, 1, 1)
        losses = mean_cross_entropy(scaled, self.y_held).tolist()
        return betas, [math.nan if at_bound(b) else v for b, v in zip(betas, losses)]

    def __call__(
        self, lams: list[float], z: torch.Tensor, z_a: torch.Tensor, z_b: torch.Tensor
    ) -> list[dict[str, float]]:
        """Rows for ``lams``; ``z``: (k, N, C) logits of theta(lam) for those lambdas, ``z_a``,
        ``z_b``: (N, C) logits of the endpoints (for the ensemble (1 - lam) f_A + lam f_B)."""
        y = self.y
        lam = torch.tensor(lams, dtype=z_a.dtype, device=z_a.device).view(-1, 1, 1)
        z_ens = (1.0 - lam) * z_a + lam * z_b
        ce = self._ce_rows(z)
        cols: dict[str, list[float]] = {
            "loss": ce.mean(dim=1).tolist(),
            "accuracy": (z.argmax(2) == y).double().mean(dim=1).tolist(),
            "logit_norm": torch.linalg.vector_norm(z.double(), dim=2).mean(dim=1).tolist(),
            "ensemble_loss": self._ce_rows(z_ens).mean(dim=1).tolist(),
            "ensemble_accuracy": (z_ens.argmax(2) == y).double().mean(dim=1).tolist(),
        }
        if self.calibrate:
            cols["heldout_loss"] = ce[:, self.held].mean(dim=1).tolist()
            cols["inverse_temperature"], cols["calibrated_loss"] = self._calibrate(z)
            (
                cols["ensemble_inverse_temperature"],
                cols["ensemble_calibrated_loss"],
            ) = self._calibrate(z_ens)
        return [{key: values[k] for key, values in cols.items()} for k in range(len(lams))]


def _spans(n: int, batch_size: int) -> list[tuple[int, int]]:
    """``ceil(n / batch_size)`` contiguous ``(start, stop)`` spans of (nearly) equal size.

    Equal sizes keep every matrix product the same shape (no small, slow remainder batch).
    """
    count = max(1, -(-n // max(1, batch_size)))
    bounds = [round(i * n / count) for i in range(count + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(count) if bounds[i + 1] > bounds[i]]


@torch.inference_mode()
def _logits(
    model: nn.Module, x: torch.Tensor, batch_size: int, device: torch.device
) -> torch.Tensor:
    """The model's logits on every example of ``x`` (one plain forward per batch)."""
    out = [model(x[s:e].to(device, non_blocking=True)) for s, e in _spans(len(x), batch_size)]
    return torch.cat(out).float()


_ACTIVATIONS: dict[type, Callable[[nn.Module, torch.Tensor], torch.Tensor]] = {
    nn.ReLU: lambda m, h: h.relu_(),
    nn.LeakyReLU: lambda m, h: F.leaky_relu_(h, m.negative_slope),
    nn.Tanh: lambda m, h: h.tanh_(),
    nn.Sigmoid: lambda m, h: h.sigmoid_(),
    nn.GELU: lambda m, h: F.gelu(h, approximate=m.approximate),
}
#: whether the activation above works in place (GELU returns a new tensor)
_IN_PLACE = {nn.ReLU: True, nn.LeakyReLU: True, nn.Tanh: True, nn.Sigmoid: True, nn.GELU: False}
_PASS_THROUGH = (nn.Identity, nn.Dropout)


def chain_plan(model: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """The model as a plain chain of modules the stacked fast path knows, or ``None``.

    The forward must trace (``torch.fx``) to a sequence ``input -> m1 -> m2 -> ... -> output``
    of calls to submodules, each taking only the previous result, where every module is a
    ``Linear``, ``LayerNorm`` over the last axis, an activation (ReLU, LeakyReLU, GELU, Tanh,
    Sigmoid), ``Identity``/``Dropout`` (eval), and ``Flatten`` only before the first ``Linear``.
    MLPs of :mod:`lmc.models` without BatchNorm qualify. Anything else returns ``None`` (the
    generic ``torch.vmap`` path is used).
    """
    import torch.fx

    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # noqa: BLE001 - untraceable forward: use the generic path
        return None
    modules = dict(model.named_modules())
    plan: list[tuple[str, nn.Module]] = []
    previous = None
    for node in graph.nodes:
        if node.op == "placeholder":
            if previous is not None:
                return None
            previous = node
        elif node.op == "call_module":
            module = modules[node.target]
            if node.args != (previous,) or node.kwargs:
                return None
            linear_seen = any(isinstance(m, nn.Linear) for _, m in plan)
            ok = (
                isinstance(module, (nn.Linear, *_PASS_THROUGH))
                or type(module) in _ACTIVATIONS
                or (isinstance(module, nn.Flatten) and not linear_seen)
                or (isinstance(module, nn.LayerNorm) and len(module.normalized_shape) == 1)
            )
            if not ok:
                return None
            plan.append((node.target, module))
            previous = node
        elif node.op == "output":
            if node.args != (previous,):
                return None
        else:
            return None
    if not any(isinstance(m, nn.Linear) for _, m in plan):
        return None
    return plan


class _Workspace:
    """Two reusable flat buffers for the chain path's layer outputs (ping-pong).

    Reusing them avoids allocating (and, for large tensors, page-faulting) fresh memory for every
    layer of every batch.
    """

    def __init__(self) -> None:
        self.flat: list[torch.Tensor | None] = [None, None]

    def view(self, slot: int, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        numel = math.prod(shape)
        buf = self.flat[slot]
        if buf is None or buf.numel() < numel or buf.dtype != like.dtype:
            buf = self.flat[slot] = torch.empty(numel, dtype=like.dtype, device=like.device)
        return buf[:numel].view(shape)


def _chain_forward(
    plan: list[tuple[str, nn.Module]],
    stacked: dict[str, torch.Tensor],
    x: torch.Tensor,
    workspace: _Workspace | None = None,
) -> torch.Tensor:
    """k stacked models of a chain (:func:`chain_plan`) on one batch of examples: (k, b, out).

    Layer by layer, each model's Linear is one ``addmm`` (bias fused, the same kernel
    ``nn.Linear`` uses) written into a reused buffer, and activations run in place on it, model
    by model while its slice is hot in cache. The input is shared by all k models until the
    first Linear. The result is a view into ``workspace``: copy it before the next call.
    """
    workspace = workspace or _Workspace()
    k = next(iter(stacked.values())).shape[0]
    h = x
    shared = True  # h is the one input of all k models (no leading k axis yet)
    h_slot: int | None = None  # which workspace buffer h lives in
    fresh = False  # whether h is memory this function owns (in-place is safe)
    for name, module in plan:
        prefix = f"{name}." if name else ""
        if isinstance(module, nn.Flatten):
            h = module(h)
        elif isinstance(module, nn.Linear):
            w = stacked[prefix + "weight"]
            bias = stacked.get(prefix + "bias")
            slot = 1 if h_slot == 0 else 0
            rows = h.shape[-2] if not shared else h.shape[0]
            out = workspace.view(slot, (k, rows, w.shape[1]), w)
            for j in range(k):
                src = h if shared else h[j]
                if bias is None:
                    torch.mm(src, w[j].t(), out=out[j])
                else:
                    torch.addmm(bias[j], src, w[j].t(), out=out[j])
            h, h_slot, shared, fresh = out, slot, False, True
        elif isinstance(module, nn.LayerNorm):
            if shared:
                h = h.unsqueeze(0).expand(k, *h.shape)
            weight = stacked.get(prefix + "weight")
            bias = stacked.get(prefix + "bias")
            h = torch.stack(
                [
                    F.layer_norm(
                        h[j],
                        module.normalized_shape,
                        None if weight is None else weight[j],
                        None if bias is None else bias[j],
                        module.eps,
                    )
                    for j in range(k)
                ]
            )
            h_slot, shared, fresh = None, False, True
        elif type(module) in _ACTIVATIONS:
            if shared:
                h = h.unsqueeze(0).expand(k, *h.shape)
                shared, fresh = False, False
            apply = _ACTIVATIONS[type(module)]
            if _IN_PLACE[type(module)]:
                if not fresh:
                    h, h_slot, fresh = h.clone(), None, True
                for j in range(k):  # model by model, while its slice is hot in cache
                    apply(module, h[j])
            else:
                h = torch.stack([apply(module, h[j]) for j in range(k)])
                h_slot, fresh = None, True
    if shared:  # no Linear ran: cannot happen for a valid plan
        h = h.unsqueeze(0).expand(k, *h.shape)
    return h


def _batched_logits(
    model: nn.Module,
    stacked: dict[str, torch.Tensor],
    x: torch.Tensor,
    batch_size: int,
    device: torch.device,
    plan: list[tuple[str, nn.Module]] | None = None,
) -> torch.Tensor:
    """Logits of every stacked state on ``x``: shape (k, N, C), one batched forward per batch of
    examples: :func:`_chain_forward` when ``plan`` is given, else ``torch.vmap`` over
    ``torch.func.functional_call``."""
    from torch.func import functional_call, vmap

    def forward(params: dict[str, torch.Tensor], xb: torch.Tensor) -> torch.Tensor:
        return functional_call(model, params, (xb,))

    if plan is not None:
        batched = functools.partial(_chain_forward, plan, workspace=_Workspace())
    else:
        batched = vmap(forward, in_dims=(0, None))
    out: torch.Tensor | None = None
    with torch.inference_mode():
        for s, e in _spans(len(x), batch_size):
            z = batched(stacked, x[s:e].to(device, non_blocking=True))
            if out is None:
                out = torch.empty(
                    (z.shape[0], len(x), z.shape[2]), dtype=torch.float32, device=device
                )
            out[:, s:e] = z
    assert out is not None
    return out


def _activation_bytes(model: nn.Module, x: torch.Tensor, device: torch.device) -> int:
    """Bytes of the largest module output per example, from a forward pass on 2 examples."""
    largest = 0

    def hook(_module, _inputs, out):
        nonlocal largest
        if isinstance(out, torch.Tensor) and out.dim() > 0 and out.shape[0] > 0:
            largest = max(largest, out[0].numel() * out.element_size())

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    try:
        with torch.inference_mode():
            model(x[:2].to(device))
    finally:
        for h in handles:
            h.remove()
    return max(1, largest)


def _auto_batch_size(model: nn.Module, x: torch.Tensor, k: int, device: torch.device) -> int:
    """Examples per forward pass when ``batch_size`` is not given.

    ``TARGET_ROWS`` examples (matrix products of that many rows run near the machine's matmul
    rate), fewer when the largest activation of ``k`` stacked models would exceed
    ``ACTIVATION_BUDGET_BYTES``; at least 16, at most the whole split.
    """
    per_example = k * _activation_bytes(model, x, device)
    rows = min(TARGET_ROWS, max(16, ACTIVATION_BUDGET_BYTES // per_example))
    return int(min(len(x), rows))


def _state_bytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def evaluate_path(
    model_a: nn.Module,
    model_b: nn.Module | None,
    x: torch.Tensor,
    y: torch.Tensor,
    lambdas: int | Sequence[float] = 11,
    *,
    bn: str = "auto",
    bn_inputs: torch.Tensor | None = None,
    bn_batch_size: int = 256,
    bn_num_batches: int | None = None,
    reset_endpoints: bool = False,
    calibrate: bool = False,
    calibration_seed: int = 0,
    calibration_fraction: float = 0.2,
    batch_size: int | None = None,
    method: str = "auto",
    max_stack_bytes: int = 1 << 30,
    seed: int = 0,
    quiet: bool = True,
    state_b: dict[str, torch.Tensor] | None = None,
    fast: bool = True,
) -> PathResult:
    """Evaluate theta(lam) = (1 - lam) theta_A + lam theta_B on ``x, y`` for every lam of the grid.

    Args:
        model_a, model_b: two models of one architecture (``model_b`` may be ``None`` when
            ``state_b`` is given). Neither is changed (their train/eval modes are restored).
        x, y: the evaluation split, ``(N, ...)`` inputs and ``(N,)`` int64 labels, on any device
            (batches are moved to ``model_a``'s device).
        lambdas: number of evenly spaced points (default 11) or a list; see
            :func:`lambda_grid` (0, ½ and 1 are always included; additions are recorded in
            ``added_lambdas``).
        bn: ``auto``/``reset``/``repair``/``none`` (:func:`lmc.merge.resolve_bn_mode`); the
            resolved mode is recorded in ``PathResult.bn``.
        bn_inputs: training inputs for ``reset``/``repair`` (required for those modes);
            ``bn_batch_size``, ``bn_num_batches`` and ``seed`` select the batches
            (:func:`lmc.merge.reset_batchnorm`).
        reset_endpoints: also reset/repair the endpoints (default: keep their own statistics).
        calibrate: fit an inverse temperature per lambda (see module doc for the subsets).
        calibration_seed, calibration_fraction: the calibration subset (default 20%).
        batch_size: examples per forward pass (per lambda in the batched method); default
            ``TARGET_ROWS`` (2048), fewer when the largest activation of the k models evaluated
            together would exceed ``ACTIVATION_BUDGET_BYTES`` (256 MiB).
        method: ``auto`` (``batched`` when the resolved bn mode is ``none``, else ``loop``),
            ``batched`` or ``loop``; the method used is recorded. Both give the same numbers
            within float32 rounding (tested to 1e-5).
        max_stack_bytes: bound on the stacked interior weights held at once (batched method).
        state_b: a state dict to use as B (e.g. B aligned to A); overrides ``model_b``'s weights.
        fast: in the batched method, evaluate models that are plain chains of Linear layers and
            activations (:func:`chain_plan`, e.g. every norm-free or LayerNorm MLP) layer by
            layer with one ``addmm`` per model into reused buffers and in-place activations
            instead of ``torch.vmap`` (same numbers within float32 rounding, and faster: see
            benchmarks/path_eval.py). ``False``: always vmap.

    Returns a :class:`PathResult`.
    """
    if method not in METHODS:
        raise LmcError(f"unknown path evaluation method {method!r}: use {', '.join(METHODS)}")
    if len(x) != len(y):
        raise LmcError(f"{len(x)} inputs but {len(y)} labels: give one label per example")
    if len(x) == 0:
        raise LmcError("cannot evaluate a path on an empty split")
    if model_b is None and state_b is None:
        raise LmcError("evaluate_path needs model_b or state_b")
    grid, added = lambda_grid(lambdas)
    device = _device_of(model_a)
    bn_mode = resolve_bn_mode(model_a, bn)
    if bn_mode != "none" and bn_inputs is None:
        raise LmcError(
            f"BatchNorm mode {bn_mode!r} needs training inputs (bn_inputs) to recompute the "
            "statistics of each interpolated model; pass them or use bn='none'"
        )
    auto = method == "auto"
    if auto:
        method = "batched" if bn_mode == "none" else "loop"
    if method == "batched" and bn_mode != "none":
        raise LmcError(
            f"the batched method cannot recompute BatchNorm statistics per lambda (bn={bn_mode!r});"
            " use method='loop'"
        )

    state_a = {k: v.detach() for k, v in model_a.state_dict().items()}
    if state_b is None:
        state_b = {k: v.detach() for k, v in model_b.state_dict().items()}
    check_compatible(state_a, state_b)
    state_b = {k: v.detach().to(state_a[k].device) for k, v in state_b.items()}

    modes = {m: m.training for m in model_a.modules()}
    modes_b = {} if model_b is None else {m: m.training for m in model_b.modules()}
    y = y.to(device)
    metrics = _Metrics(y, calibrate, calibration_seed, calibration_fraction)
    try:
        model_a.eval()
        work = copy.deepcopy(model_a).eval()
        work.load_state_dict(state_b)
        model_b_eval = work  # B's weights in a copy of A's module: same function as model_b
        kw = dict(batch_size=bn_batch_size, num_batches=bn_num_batches, seed=seed, quiet=True)
        stats = {}
        if bn_mode == "repair":
            stats["a"] = batchnorm_output_stats(model_a, bn_inputs, **kw)
            stats["b"] = batchnorm_output_stats(model_b_eval, bn_inputs, **kw)

        def prepare(lam: float) -> nn.Module:
            """Load theta(lam) into ``work`` and fix its BatchNorm statistics."""
            lerp_into(work, state_a, state_b, lam)
            if bn_mode == "reset":
                reset_batchnorm(work, bn_inputs, **kw)
            elif bn_mode == "repair":
                repair(
                    work,
                    model_a,
                    model_b_eval,
                    lam,
                    bn_inputs,
                    stats_a=stats["a"],
                    stats_b=stats["b"],
                    **kw,
                )
            return work

        loop_bs = batch_size or _auto_batch_size(model_a, x, 1, device)
        if reset_endpoints and bn_mode != "none":
            z_a = _logits(prepare(0.0), x, loop_bs, device)
            z_b = _logits(prepare(1.0), x, loop_bs, device)
        else:
            z_a = _logits(model_a, x, loop_bs, device)
            z_b = _logits(model_b_eval, x, loop_bs, device)

        interior = [lam for lam in grid if 0.0 < lam < 1.0]
        rows: dict[float, dict[str, float]] = {}

        def record(lams: list[float], z: torch.Tensor) -> None:
            for lam, row in zip(lams, metrics(lams, z, z_a, z_b)):
                rows[lam] = row

        record([0.0], z_a[None])
        record([1.0], z_b[None])
        if method == "batched" and interior:
            plan = chain_plan(model_a) if fast else None
            per_point = max(1, _state_bytes(state_a))
            chunk = max(1, min(len(interior), max_stack_bytes // per_point))
            chunks = [interior[i : i + chunk] for i in range(0, len(interior), chunk)]
            for lams in progress(chunks, quiet=quiet, desc="path (batched)"):
                bs = batch_size or _auto_batch_size(model_a, x, len(lams), device)
                stacked = lerp_stack(state_a, state_b, lams)
                try:
                    z = _batched_logits(work, stacked, x, bs, device, plan)
                except (RuntimeError, NotImplementedError) as exc:
                    if not auto:
                        raise LmcError(
                            f"batched path evaluation failed ({exc}); use method='loop'"
                        ) from exc
                    method = "loop"  # an operation torch.vmap cannot batch: fall back
                    break
                del stacked
                record(lams, z)
        if method == "loop":
            # Logits are buffered so that the metrics of many lambdas are computed together
            # (a few kernels per flush instead of per lambda), within LOGIT_BUFFER_BYTES.
            todo = [lam for lam in interior if lam not in rows]
            pending: list[tuple[float, torch.Tensor]] = []
            for lam in progress(todo, quiet=quiet, desc=f"path (bn {bn_mode})"):
                pending.append((lam, _logits(prepare(lam), x, loop_bs, device)))
                if len(pending) * pending[0][1].numel() * 4 >= LOGIT_BUFFER_BYTES:
                    record([p[0] for p in pending], torch.stack([p[1] for p in pending]))
                    pending = []
            if pending:
                record([p[0] for p in pending], torch.stack([p[1] for p in pending]))
    finally:
        for m, training in {**modes, **modes_b}.items():
            m.training = training

    cols: dict[str, list[float]] = {}
    for lam in grid:
        for key, value in rows[lam].items():
            cols.setdefault(key, []).append(value)
    n = len(y)
    return PathResult(
        lambdas=grid,
        loss=cols["loss"],
        accuracy=cols["accuracy"],
        logit_norm=cols["logit_norm"],
        ensemble_loss=cols["ensemble_loss"],
        ensemble_accuracy=cols["ensemble_accuracy"],
        inverse_temperature=cols.get("inverse_temperature"),
        calibrated_loss=cols.get("calibrated_loss"),
        heldout_loss=cols.get("heldout_loss"),
        ensemble_inverse_temperature=cols.get("ensemble_inverse_temperature"),
        ensemble_calibrated_loss=cols.get("ensemble_calibrated_loss"),
        bn=bn_mode,
        method=method,
        calibrate=calibrate,
        calibration_seed=calibration_seed if calibrate else None,
        calibration_fraction=calibration_fraction if calibrate else None,
        num_examples=n,
        num_calibration=len(metrics.cal) if calibrate else None,
        num_heldout=len(metrics.held) if calibrate else None,
        added_lambdas=added,
        calibration_at_bound=[
            lam for lam, b in zip(grid, cols.get("inverse_temperature", [])) if at_bound(b)
        ],
        ensemble_calibration_at_bound=[
            lam for lam, b in zip(grid, cols.get("ensemble_inverse_temperature", [])) if at_bound(b)
        ],
    )
