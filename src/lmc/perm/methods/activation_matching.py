"""Activation matching (Git Re-Basin §3.1): one assignment per group from feature statistics.

Where the features are read (documented choice): for each permutation group, the values that
*weight layers read* through that group's units, i.e. the inputs of the Linear / Conv layers
whose input axis the group indexes. For a plain layer that is the post-activation output of
the layer that opened the group (after norm, activation and pooling); for a residual stream it
is every block output that a later block (or the classifier) reads, pooled together as
samples of the same units; a segment of a concatenated input contributes its own slice; a
flattened ``(C, H, W)`` input contributes its ``H * W`` positions as further samples, as
spatial positions of a conv input do. A group no weight layer reads falls back to the output
of the layers that produce it (pre-activation). The locations come from the same graph that
derives specs (``torch.fx``'s, or ``torch.export``'s for models fx cannot trace, such as
Hugging Face GPT-2, BERT and ViT; an export graph is specialised to its input's shape, so a
batch of another shape gets an export of its own), so hand-written specs work too as long as
the model traces.

Statistics are streamed over batches through the traced graph (the captured values of one
batch of A are kept until B's are ready) and accumulated in float64: counts, sums, sums of
squares and the cross-moment matrix Σ z_A z_Bᵀ. ``method="covariance"`` assigns on the
cross-covariance, ``"correlation"`` (default) on the cross-correlation; units with zero
variance (dead ReLUs) get correlation 0 with everything instead of NaN.

Attention heads (``spec.heads``): a nested group's features are its ``H * d`` flat units (for
the q/k dims, the outputs of the q and k projections, pooled; for the v/o dims, the input of
the output projection); the head group and its nested groups are assigned together by
:func:`lmc.perm.symmetries.head_permutations.nested_assignment` on the blocks of their correlation
matrices. Heads inside a module the tracer does not enter (``nn.MultiheadAttention``) have no
features and stay the identity, with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from lmc.config import LmcError, progress
from lmc.models import eval_mode, module_device

from ..solvers.assignment import linear_assignment
from ..symmetries.head_permutations import nested_assignment, nested_of
from ..symmetries.permutation_spec import PermutationSpec
from ..symmetries.permutations import MatchResult, identity_permutation
from ..symmetries.trace import trace_model
from ..symmetries.trace.walk import graph_for
from .registry import (
    AlignJob,
    AlignmentMethod,
    MethodOutput,
    MethodSetting,
    MethodStyle,
    register_method,
)

#: What activation matching matches; ``METHODS`` is its older name.
STATISTICS = ("correlation", "covariance")
METHODS = STATISTICS


@dataclass(frozen=True, eq=False)
class ActivationMatchingResult(MatchResult):
    """What :func:`activation_matching` returns.

    ``perm``: group -> int64 index tensor for B; ``examples``: how many examples the
    statistics were computed on; ``points``: per group, the names of the traced graph nodes
    whose values were read as its features (empty for a group left as the identity).
    """

    examples: int
    points: dict[str, tuple[str, ...]]


class CrossStats:
    """Streaming float64 statistics of paired features ``(samples, n)`` of A and B."""

    def __init__(self, n: int, device: torch.device) -> None:
        z = dict(dtype=torch.float64, device=device)
        self.count = 0
        self.sum_a = torch.zeros(n, **z)
        self.sum_b = torch.zeros(n, **z)
        self.sq_a = torch.zeros(n, **z)
        self.sq_b = torch.zeros(n, **z)
        self.cross = torch.zeros(n, n, **z)

    def update(self, fa: torch.Tensor, fb: torch.Tensor) -> None:
        fa, fb = fa.double(), fb.double()
        self.count += fa.shape[0]
        self.sum_a += fa.sum(0)
        self.sum_b += fb.sum(0)
        self.sq_a += (fa * fa).sum(0)
        self.sq_b += (fb * fb).sum(0)
        self.cross += fa.T @ fb

    def finalize(self, method: str) -> torch.Tensor:
        """The ``(n, n)`` cross-covariance or cross-correlation (rows: A's units)."""
        if self.count == 0:
            raise LmcError("activation matching saw no examples; pass a non-empty input tensor")
        mean_a, mean_b = self.sum_a / self.count, self.sum_b / self.count
        cov = self.cross / self.count - mean_a[:, None] * mean_b[None, :]
        if method == "covariance":
            return cov
        std_a = (self.sq_a / self.count - mean_a**2).clamp_min(0).sqrt()
        std_b = (self.sq_b / self.count - mean_b**2).clamp_min(0).sqrt()
        denom = std_a[:, None] * std_b[None, :]
        tiny = torch.finfo(torch.float64).tiny
        return torch.where(denom > tiny, cov / denom.clamp_min(tiny), torch.zeros_like(cov))


class _Capture:
    """Runs ``model``'s traced graph (the one its spec was derived from: ``torch.fx``'s, or
    ``torch.export``'s for models fx cannot trace, such as Hugging Face's) and returns the
    named nodes' values. The graph shares the model's modules and tensors. An export graph is
    specialised to its input's shape, so an input of another shape (the last, shorter batch)
    gets an export of its own."""

    def __init__(self, model: nn.Module, nodes: list[str], example: torch.Tensor) -> None:
        self.model, self.nodes = model, nodes
        self.any_shape: fx.GraphModule | None = None
        self.by_shape: dict[tuple[int, ...], fx.GraphModule] = {}
        self._build(example)

    def _build(self, x: torch.Tensor) -> None:
        gm, kind = graph_for(self.model, (x,))
        by_name = {n.name: n for n in gm.graph.nodes}
        missing = [n for n in self.nodes if n not in by_name]
        if missing:
            raise LmcError(
                f"model B does not trace like model A (no node {missing[0]!r}); activation "
                "matching needs two models of one architecture"
            )
        output = next(n for n in gm.graph.nodes if n.op == "output")
        output.args = ({name: by_name[name] for name in self.nodes},)
        gm.recompile()
        if kind == "fx":
            self.any_shape = gm
        else:
            self.by_shape[tuple(x.shape)] = gm

    def __call__(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.any_shape is not None:
            return self.any_shape(x)
        if tuple(x.shape) not in self.by_shape:
            self._build(x)
        return self.by_shape[tuple(x.shape)](x)


def _features(value: torch.Tensor, dim: int, offset: int, size: int, repeat: int) -> torch.Tensor:
    """Rows = samples (batch, spatial positions, repeats), columns = the segment's units."""
    v = value.narrow(dim, offset, size * repeat).movedim(dim, -1)
    v = v.reshape(-1, size, repeat).transpose(1, 2)
    return v.reshape(-1, size)


def _batches(inputs: Any, batch_size: int, device: torch.device) -> Iterator[torch.Tensor]:
    if isinstance(inputs, torch.Tensor):
        for start in range(0, inputs.shape[0], batch_size):
            yield inputs[start : start + batch_size].to(device)
        return
    for batch in inputs:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        yield x.to(device)


def hook_points(
    spec: PermutationSpec, model: nn.Module, example_input: Any
) -> dict[str, list[tuple[str, int, int, int, int]]]:
    """Per group, where its features are read: ``(node, dim, offset, size, repeat)`` records."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the spec's own derivation already warned
        trace = trace_model(model, example_input)
    points: dict[str, list[tuple[str, int, int, int, int]]] = {g: [] for g in spec.group_sizes}

    def add(records, groups) -> None:
        for rec in records:
            if rec.weight not in spec:
                continue
            offset = 0
            for seg in spec[rec.weight][rec.axis] or ():
                if seg.perm in groups:
                    point = (rec.node, rec.dim, offset, seg.size, seg.repeat)
                    if point not in points[seg.perm]:
                        points[seg.perm].append(point)
                offset += seg.extent

    add(trace.consumers, set(points))
    add(trace.producers, {g for g, pts in points.items() if not pts})
    return points


def check_statistic(statistic: str) -> None:
    """``LmcError`` unless ``statistic`` is one of :data:`STATISTICS`."""
    if statistic not in STATISTICS:
        raise LmcError(
            f"unknown activation statistic {statistic!r}: choose one of {', '.join(STATISTICS)}"
        )


@dataclass
class FeatureStatistics:
    """What one pass over the inputs collected: per group with features, its
    :class:`CrossStats` (``stats``); per group, where its features were read (``points``:
    :func:`hook_points` records, empty for a group without features); ``examples`` seen."""

    stats: dict[str, CrossStats]
    points: dict[str, list[tuple[str, int, int, int, int]]]
    examples: int


def feature_statistics(
    spec: PermutationSpec,
    model_a: nn.Module,
    model_b: nn.Module,
    inputs: torch.Tensor | Iterable[Any],
    *,
    batch_size: int = 256,
    quiet: bool = True,
) -> FeatureStatistics:
    """Stream both models over ``inputs`` (eval mode, restored afterwards; on the device of
    ``model_a``) and accumulate, for every group of ``spec`` that has features, the float64
    statistics of A's and B's features (module docstring: where features are read). Warns
    for a plain group that no traced layer reads or writes (it has no statistics)."""
    if batch_size < 1:
        raise LmcError(f"batch size must be positive, got {batch_size}")
    device = module_device(model_a)
    example = next(_batches(inputs, batch_size, device), None)
    if example is None or example.shape[0] == 0:
        raise LmcError("activation matching got no input examples")
    points = hook_points(spec, model_a, example)
    nodes = sorted({p[0] for pts in points.values() for p in pts})
    nested = nested_of(spec.heads)
    unmatched = [
        g for g, pts in points.items() if not pts and g not in spec.heads and g not in nested
    ]
    for g in unmatched:
        warnings.warn(
            f"lmc.perm: no layer reads or writes group {g!r} in the traced graph; "
            "activation matching leaves it as the identity",
            stacklevel=3,
        )
    sizes = spec.group_sizes
    stats = {g: CrossStats(sizes[g], device) for g, pts in points.items() if pts}
    examples = 0
    cap_a, cap_b = _Capture(model_a, nodes, example), _Capture(model_b, nodes, example)
    with eval_mode(model_a, model_b), torch.no_grad():
        for x in progress(
            _batches(inputs, batch_size, device), quiet=quiet, desc="activation statistics"
        ):
            examples += x.shape[0]
            values_a = cap_a(x)
            values_b = cap_b(x)
            for g, acc in stats.items():
                for node, dim, offset, size, repeat in points[g]:
                    acc.update(
                        _features(values_a[node], dim, offset, size, repeat),
                        _features(values_b[node], dim, offset, size, repeat),
                    )
            del values_a, values_b
    return FeatureStatistics(stats, points, examples)


def assign_groups(
    spec: PermutationSpec, matrices: dict[str, torch.Tensor], skip: Iterable[str] = ()
) -> dict[str, torch.Tensor]:
    """Permutations from per-group similarity ``matrices`` (rows: A's units): one assignment
    per plain group, :func:`lmc.perm.symmetries.head_permutations.nested_assignment` for a head
    group with the groups nested in it; the identity where a group has no matrix (heads: with a
    warning), and for the groups in ``skip`` (solved otherwise by the caller)."""
    skip = set(skip)
    sizes = spec.group_sizes
    nested = nested_of(spec.heads)
    perm = identity_permutation(spec)
    for g, m in matrices.items():
        if g not in spec.heads and g not in nested and g not in skip:
            perm[g] = linear_assignment(m)
    for head, members in nested.items():
        if head not in matrices and not any(m in matrices for m in members):
            warnings.warn(
                f"lmc.perm: no traced layer reads or writes the heads {head!r} (or the dims "
                "nested in them); activation matching leaves them as the identity",
                stacklevel=3,
            )
            continue
        inner = [m for m in members if m in matrices]
        head_perm, flats, _ = nested_assignment(
            matrices.get(head), [matrices[m] for m in inner], sizes[head]
        )
        perm[head] = head_perm
        for m, p in zip(inner, flats):
            perm[m] = p
        for m in members:
            if m not in matrices:  # no features: identity within heads, heads as chosen
                d = sizes[m] // sizes[head]
                perm[m] = (head_perm[:, None] * d + torch.arange(d)[None, :]).reshape(-1)
    return perm


def activation_matching(
    spec: PermutationSpec,
    model_a: nn.Module,
    model_b: nn.Module,
    inputs: torch.Tensor | Iterable[Any],
    *,
    batch_size: int = 256,
    method: str = "correlation",
    quiet: bool = True,
) -> ActivationMatchingResult:
    """Match B's units to A's by the statistics of their features on ``inputs``.

    ``inputs``: a tensor of examples (batched here by ``batch_size``) or an iterable of
    batches (tensors or ``(x, y)`` pairs). Both models run in eval mode (restored afterwards)
    on the device of ``model_a``'s parameters. For every group one assignment maximises
    ``Σ_i M[i, p[i]]`` with ``M`` the cross-correlation (or cross-covariance) of A's and B's
    units, so ``apply_permutation(spec, result.perm, state_b)`` puts B's units in A's order.
    Returns an :class:`ActivationMatchingResult` (also the number of ``examples`` and the
    hook ``points`` per group).
    """
    check_statistic(method)
    features = feature_statistics(
        spec, model_a, model_b, inputs, batch_size=batch_size, quiet=quiet
    )
    matrices = {g: acc.finalize(method) for g, acc in features.stats.items()}
    return ActivationMatchingResult(
        perm=assign_groups(spec, matrices),
        examples=features.examples,
        points={g: tuple(p[0] for p in pts) for g, pts in features.points.items()},
    )


# ---------------------------------------------------------------------------------------------
# the method's record: ``activation``


def feature_settings(
    statistic: str = "what is matched: the cross-correlation or the cross-covariance of units",
) -> tuple[MethodSetting, ...]:
    """The settings of the methods that read features (activation matching, orthogonal
    activation matching); ``statistic``: the meaning of the ``statistic`` setting."""
    return (
        MethodSetting(
            "batch_size",
            256,
            "batch size of the statistics pass",
            minimum=1,
            affects_result=False,
        ),  # fmt: skip
        MethodSetting(
            "statistic",
            "correlation",
            statistic,
            type=str,
            choices=STATISTICS,
        ),
        MethodSetting(
            "max_examples",
            None,
            "at most this many of the training examples it is given (none: all)",
            minimum=1,
            optional=True,
        ),
    )


def _align(
    job: AlignJob, *, batch_size: int, statistic: str, max_examples: int | None
) -> MethodOutput:
    data = job.inputs if max_examples is None else job.inputs[:max_examples]
    am = activation_matching(
        job.spec,
        job.model_a,
        job.model_b,
        data,
        batch_size=batch_size,
        method=statistic,
        quiet=job.quiet,
    )
    return MethodOutput(am.perm, {"examples": am.examples})


METHOD = register_method(
    AlignmentMethod(
        "activation",
        _align,
        "activation matching: one assignment per layer on the correlation of A's and B's "
        "features over training examples",
        settings=feature_settings(),
        needs_data=True,
        label="activation matching",
        order=40,
        style=MethodStyle("#009E73", "^"),
    )
)
