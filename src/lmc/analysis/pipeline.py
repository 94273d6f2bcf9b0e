"""The layerwise analysis: why a merge works or fails, layer by layer.

``analyze(model_a, model_b, inputs, lam)`` runs A, B and every merged model θ(λ) =
(1 − λ)θ_A + λθ_B on the same batches, with forward hooks at each probe point, and streams the
statistics of docs/science.md's "Layerwise connectivity" section into float64 accumulators
(``lmc.analysis.accumulators``). Only the current batch's activations are ever held, so memory
depends on the batch size and the width, not on the number of examples. ``layerwise`` returns
just the records; ``analyze`` also returns the per-unit second moments and the weight spectra.

Views of a layer's tensors (see the accumulators' docstring):
- LEWC, LLFC, endpoint cosines and logit norms: one vector per example (a conv feature map is
  flattened over (C, H, W)), as the width paper and LLFC compare whole feature maps.
- Weak additivity, sign agreement, second moments and the reciprocal terms: one vector per
  example and spatial position, channels as units (for an MLP, simply per example).
- W-based statistics (reciprocal, commutativity, spectra) need the probe point's ``weight``
  module: they are ``None`` where it has none (ResNet block outputs). The products W z are
  bias-free (the weight alone, applied with the module's own stride/padding).
- Weak additivity needs a ``preactivation`` module; it is measured with that module's own σ
  (``activation`` in the record says which). A transformer's ``attention`` point measures it
  for the heads, σ(q, k, v) = softmax(q kᵀ/√d_h) v (``activation`` = ``attention``). Second
  moments are of the pre-activation, or of the output where there is none (the logits) or
  where it is attention's (q, k, v).

With ``init_states`` (the endpoints' initial weights), each point with a weight also gets the
retention columns of :mod:`lmc.analysis.retention` (docs/science.md, "Initialisation
retention").

The merge is a plain interpolation of the whole state (BatchNorm running statistics are
interpolated, not reset); ``merge_fn`` replaces it (e.g. with a BatchNorm reset).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from lmc.config import LmcError, check_finite, check_lambda, progress
from lmc.merge import lerp_into
from lmc.models import ProbePoint, eval_mode

from .accumulators import SecondMomentStats, unit_rows
from .layer_metrics import (
    LAYER_METRICS,
    EndpointBatch,
    MergedBatch,
    ProbeFinal,
    ProbeSite,
    record_keys,
)
from .layers import has_bias, has_norm
from .probes import Capture, Recorder, activation_name, resolve_probe_points
from .retention import SHARED_RANK_RULE
from .spectra import singular_values
from .theory import GAUSSIAN_RELU_LIMIT, gaussian_relu_cosine
from .units import LARGE_ENERGY, NEAR_ZERO

StateDict = dict[str, torch.Tensor]

#: The keys of every layerwise record of the built-in metrics, in order: the columns of
#: ``layers.csv`` (docs/science.md defines each). Generated from the metric records
#: (:mod:`lmc.analysis.layer_metrics`); :func:`lmc.analysis.layer_metrics.record_keys` also
#: holds the columns of metrics registered later.
RECORD_KEYS = record_keys()


class _ProbeStats:
    """The accumulators of one probe point: each registered metric's (λ-free ones once, the
    ``per_lam`` ones once per λ), and the per-unit second moments of A and B."""

    def __init__(
        self, point: ProbePoint, modules_a: dict, modules_b: dict, lams: Sequence[float]
    ) -> None:
        weight_module = modules_a[point.weight] if point.weight else None
        act = modules_a[point.preactivation] if point.preactivation else None
        self.site = ProbeSite(
            point=point,
            weight_module=weight_module,
            weight_a=weight_module.weight if weight_module is not None else None,
            weight_b=modules_b[point.weight].weight if point.weight else None,
            activation_module=act,
            activation=activation_name(act),
        )
        self.point = point
        self.moments_a = SecondMomentStats()
        self.moments_b = SecondMomentStats()
        self.endpoint = {}
        self.merged: dict[float, dict] = {lam: {} for lam in lams}
        for name, metric in LAYER_METRICS.items():
            if metric.per_lam:
                for lam in lams:
                    acc = metric.accumulator(self.site, lam)
                    if acc is not None:
                        self.merged[lam][name] = acc
            else:
                acc = metric.accumulator(self.site)
                if acc is not None:
                    self.endpoint[name] = acc

    @property
    def weight_module(self):
        return self.site.weight_module

    def update_endpoints(self, cap_a: Capture, cap_b: Capture) -> EndpointBatch:
        """λ-free statistics of one batch; returns what the merged models' updates reuse."""
        batch = EndpointBatch(self.site, cap_a, cap_b)
        for acc in self.endpoint.values():
            acc.update(batch)
        # second moments of the pre-activation; of the output where there is none, or where it
        # is attention's (q, k, v)
        source_a = cap_a.pre if isinstance(cap_a.pre, torch.Tensor) else cap_a.output
        source_b = cap_b.pre if isinstance(cap_b.pre, torch.Tensor) else cap_b.output
        self.moments_a.update(unit_rows(source_a))
        self.moments_b.update(unit_rows(source_b))
        return batch

    def update_merged(self, lam: float, batch: EndpointBatch, cap_c: Capture) -> None:
        merged = MergedBatch(lam, batch, cap_c)
        for acc in self.merged[lam].values():
            acc.update(merged)


@dataclass
class AnalysisResult:
    """What ``analyze`` found.

    ``records``: one dict per λ and probe point (keys :func:`record_keys`, ``RECORD_KEYS`` for
    the built-in metrics; ``None`` where a
    statistic does not apply, NaN where it is undefined, e.g. 0/0). ``moments[name]["a"|"b"]``:
    per-unit √E[z~_i²] (numpy, one value per unit). ``spectra[name]["a"|"b"]``: singular values
    of the layer's weight, descending (only for points with a weight, when computed).
    ``settings``: how it was computed (λs, examples, thresholds, probe points, conventions).
    """

    records: list[dict[str, Any]]
    moments: dict[str, dict[str, np.ndarray]]
    spectra: dict[str, dict[str, np.ndarray]]
    settings: dict[str, Any] = field(default_factory=dict)

    def theory(self, samples: int = 1000, seed: int = 0) -> dict[str, Any]:
        """Theorem 5.4's limit and its Monte-Carlo value at each ReLU layer's unit count."""
        dims = sorted({r["units"] for r in self.records if r["activation"] == "relu"})
        return {
            "gaussian_relu_limit": GAUSSIAN_RELU_LIMIT,
            "gaussian_relu_cosine": {
                str(d): gaussian_relu_cosine(d, samples=samples, seed=seed) for d in dims
            },
            "gaussian_relu_samples": samples,
            "gaussian_relu_seed": seed,
        }

    def to_dataframe(self) -> Any:
        """``records`` as a ``pandas.DataFrame``: one row per record (λ outer, probe point
        inner, as ``records``), the columns :func:`record_keys` in that order; ``None`` (a
        statistic that does not apply) becomes NaN in numeric columns. Needs pandas
        (``pip install 'lmc[pandas]'``); imported only when called."""
        from lmc.metrics.result import import_pandas

        pd = import_pandas()
        frame = pd.DataFrame(self.records, columns=list(record_keys())).infer_objects()
        empty = [c for c in frame.columns if frame[c].isna().all()]
        return frame.astype({c: "float64" for c in empty})

    def to_dict(self, theory_samples: int = 1000) -> dict[str, Any]:
        """``{"layers": records, "settings": ..., "theory": ...}`` (the ``--json`` object)."""
        return {
            "layers": self.records,
            "settings": self.settings,
            "theory": self.theory(samples=theory_samples),
        }


def _batches(
    inputs: torch.Tensor | Iterable, batch_size: int, max_examples: int | None
) -> Iterator[torch.Tensor]:
    """Input tensors batch by batch, at most ``max_examples`` in all."""
    limit = math.inf if max_examples is None else max_examples
    if isinstance(inputs, torch.Tensor):
        stop = int(min(inputs.shape[0], limit))
        check_finite("inputs", inputs[:stop])
        for start in range(0, stop, batch_size):
            yield inputs[start : min(start + batch_size, stop)]
        return
    seen = 0
    for batch in inputs:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        if not isinstance(x, torch.Tensor):
            raise LmcError(f"inputs must be a tensor or batches of tensors, got {type(x).__name__}")
        x = x[: int(min(x.shape[0], limit - seen))]
        check_finite(f"inputs (batch at example {seen})", x)
        if x.shape[0]:
            yield x
        seen += x.shape[0]
        if seen >= limit:
            return


def _batch_count(inputs: Any, batch_size: int, max_examples: int | None) -> int | None:
    if isinstance(inputs, torch.Tensor):
        n = inputs.shape[0] if max_examples is None else min(inputs.shape[0], max_examples)
        return -(-n // batch_size)
    return len(inputs) if hasattr(inputs, "__len__") and max_examples is None else None


def _check_lams(lam: float | Sequence[float]) -> list[float]:
    values = [lam] if isinstance(lam, (int, float)) else list(lam)
    if not values:
        raise LmcError("lam must be one or more numbers in [0, 1] (0 = A, 1 = B), got none")
    lams = [check_lambda(v, "lam") for v in values]
    return list(dict.fromkeys(lams))


@torch.no_grad()
def analyze(
    model_a: nn.Module,
    model_b: nn.Module,
    inputs: torch.Tensor | Iterable,
    lam: float | Sequence[float] = 0.5,
    *,
    batch_size: int = 256,
    max_examples: int | None = None,
    state_b: StateDict | None = None,
    near_zero: float = NEAR_ZERO,
    large_energy: float = LARGE_ENERGY,
    spectra: bool = True,
    merge_fn: Callable[[StateDict, StateDict, float], StateDict] | None = None,
    init_states: tuple[StateDict, StateDict] | None = None,
    quiet: bool = True,
) -> AnalysisResult:
    """Layerwise connectivity of A and B along θ(λ) = (1 − λ)θ_A + λθ_B, streamed over inputs.

    Args:
        model_a, model_b: two models of one architecture (zoo models, or any model whose probe
            points ``derive_probe_points`` can find). They are evaluated in eval mode (their
            modes are restored afterwards) on the device and dtype of ``model_a``.
        inputs: a tensor (n, ...) cut into ``batch_size`` batches, or an iterable of batches
            (tensors, or tuples whose first item is the input, e.g. a DataLoader).
        lam: one λ or a list; one record per λ and probe point, λ outer.
        max_examples: analyse at most this many examples.
        state_b: use this state for B instead of ``model_b``'s own (e.g. B aligned to A).
        near_zero, large_energy: thresholds of the unit summaries (``lmc.analysis.units``).
        spectra: compute singular values of each weight (stable and effective rank).
        merge_fn: ``(state_a, state_b, lam) -> state`` for θ(λ); default: the plain
            interpolation of every floating tensor (:func:`lmc.merge.lerp_into`).
        init_states: ``(A_0, B_0)``, the endpoints' initial states (B_0 in the frame of
            ``state_b``: permuted as B was), to fill the retention columns
            (:data:`lmc.analysis.retention.RETENTION_KEYS`; docs/science.md, "Initialisation
            retention") of every probe point with a weight; ``None`` leaves them ``None``.
        quiet: no progress bar.

    Memory: the models, (number of λs) merged copies and one batch of every probe point's
    activations; nothing grows with the number of examples.
    """
    lams = _check_lams(lam)
    if batch_size < 1:
        raise LmcError(f"batch_size must be at least 1, got {batch_size}")
    if max_examples is not None and max_examples < 1:
        raise LmcError(f"max_examples must be at least 1, got {max_examples}")
    param = next(iter(model_a.parameters()), None)
    if param is None:
        raise LmcError(f"{type(model_a).__name__} has no parameters to analyse")
    device, dtype = param.device, param.dtype

    if state_b is not None or next(model_b.parameters()).device != device:
        model_b = copy.deepcopy(model_b).to(device)
        if state_b is not None:
            _load(model_b, state_b, "state_b")
    merged_models = {}
    for value in lams:
        model_c = copy.deepcopy(model_a)
        if merge_fn is None:
            lerp_into(model_c, model_a.state_dict(), model_b.state_dict(), value)
        else:
            merged = merge_fn(model_a.state_dict(), model_b.state_dict(), value)
            _load(model_c, merged, f"the merged state at lam={value}")
        merged_models[value] = model_c.eval()

    batches = _batches(inputs, batch_size, max_examples)
    first = next(batches, None)
    if first is None:
        raise LmcError("no examples to analyse: inputs is empty")
    points = resolve_probe_points(model_a, _prepare(first[:2], device, dtype))
    modules_a = dict(model_a.named_modules())
    modules_b = dict(model_b.named_modules())
    probes = [_ProbeStats(p, modules_a, modules_b, lams) for p in points]

    n_examples = 0
    with ExitStack() as stack:
        stack.enter_context(eval_mode(model_a, model_b))
        rec_a = stack.enter_context(Recorder(model_a, points))
        rec_b = stack.enter_context(Recorder(model_b, points))
        rec_c = {v: stack.enter_context(Recorder(m, points)) for v, m in merged_models.items()}
        total = _batch_count(inputs, batch_size, max_examples)
        for x in progress(_chain(first, batches), quiet=quiet, desc="analyze", total=total):
            x = _prepare(x, device, dtype)
            caps_a, caps_b = rec_a.run(x), rec_b.run(x)
            cache = [p.update_endpoints(caps_a[p.point.name], caps_b[p.point.name]) for p in probes]
            for value, recorder in rec_c.items():
                caps_c = recorder.run(x)
                for probe, batch in zip(probes, cache):
                    probe.update_merged(value, batch, caps_c[probe.point.name])
            n_examples += x.shape[0]
            del caps_a, caps_b, cache

    moments = {
        p.point.name: {"a": p.moments_a.finalize(), "b": p.moments_b.finalize()} for p in probes
    }
    spectra_out: dict[str, dict[str, np.ndarray]] = {}
    if spectra:
        for p in probes:
            if p.weight_module is not None:
                spectra_out[p.point.name] = {
                    "a": singular_values(p.site.weight_a),
                    "b": singular_values(p.site.weight_b),
                }
    bias = has_bias(model_a)
    finals = {
        p.point.name: ProbeFinal(
            site=p.site,
            moments=moments[p.point.name],
            spectra=spectra_out.get(p.point.name),
            near_zero=near_zero,
            large_energy=large_energy,
            init_states=init_states,
            n_examples=n_examples,
        )
        for p in probes
    }
    endpoint_values = {p.point.name: _finalize(p.endpoint, finals[p.point.name]) for p in probes}
    records = []
    for value in lams:
        for p in probes:
            final = finals[p.point.name]
            records.append(_record(p, value, final, bias, endpoint_values[p.point.name]))
    settings = {
        "lams": lams,
        "n_examples": n_examples,
        "batch_size": batch_size,
        "max_examples": max_examples,
        "near_zero": near_zero,
        "large_energy": large_energy,
        "has_bias": bias,
        "has_norm": has_norm(model_a),
        "derived_probe_points": not hasattr(model_a, "probe_points"),
        "probe_points": [p.to_dict() for p in points],
        "merge": "custom merge_fn"
        if merge_fn
        else "lerp of the whole state (BatchNorm running statistics interpolated, not reset)",
        "aligned": state_b is not None,
        "init_retention": init_states is not None,
        "init_shared_rank": SHARED_RANK_RULE if init_states is not None else None,
        "device": str(device),
        "dtype": str(dtype).replace("torch.", ""),
        "path": "theta(lam) = (1 - lam) theta_A + lam theta_B",
    }
    return AnalysisResult(records, moments, spectra_out, settings)


def layerwise(
    model_a: nn.Module,
    model_b: nn.Module,
    inputs: torch.Tensor | Iterable,
    lam: float | Sequence[float] = 0.5,
    *,
    batch_size: int = 256,
    max_examples: int | None = None,
    state_b: StateDict | None = None,
    quiet: bool = True,
    **options: Any,
) -> list[dict[str, Any]]:
    """One record per probe point per λ (keys ``RECORD_KEYS``, as in docs/science.md).

    Same arguments as ``analyze`` (``options`` are its further keywords); use ``analyze`` for
    the per-unit moments and spectra as well.
    """
    return analyze(
        model_a,
        model_b,
        inputs,
        lam,
        batch_size=batch_size,
        max_examples=max_examples,
        state_b=state_b,
        quiet=quiet,
        **options,
    ).records


def _chain(first: torch.Tensor, rest: Iterator[torch.Tensor]) -> Iterator[torch.Tensor]:
    yield first
    yield from rest


def _prepare(x: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return x.to(device=device, dtype=dtype if x.is_floating_point() else None)


def _load(model: nn.Module, state: StateDict, what: str) -> None:
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise LmcError(f"{what} does not fit model A's architecture: {first}") from exc


def _finalize(accumulators: dict, final: ProbeFinal) -> dict[str, Any]:
    """The values of ``accumulators`` (metric name -> accumulator), in registry order."""
    values: dict[str, Any] = {}
    for acc in accumulators.values():
        values.update(acc.finalize(final))
    return values


def _record(
    probe: _ProbeStats,
    lam: float,
    final: ProbeFinal,
    bias: bool,
    endpoint_values: dict[str, Any],
) -> dict[str, Any]:
    """One record: the identity columns, then every metric's values (``None`` where it does
    not apply), keyed and ordered as :func:`record_keys`."""
    point = probe.point
    record: dict[str, Any] = dict.fromkeys(record_keys())
    record.update(
        layer=point.layer,
        name=point.name,
        kind=point.kind,
        lam=lam,
        units=int(final.moments["a"].size),
        activation=probe.site.activation,
        has_bias=bias,
        n_examples=final.n_examples,
    )
    record.update(endpoint_values)
    record.update(_finalize(probe.merged[lam], final))
    return record
