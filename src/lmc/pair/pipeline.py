"""One pair end to end: align B onto A, evaluate the path θ(λ) = (1 − λ)θ_A + λθ_B, analyse it.

``run_pair`` is what ``lmc interpolate``, ``lmc analyze`` and a sweep's merge job all call, so
the same :class:`PairSettings` give the same numbers wherever they come from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lmc.data import Dataset
from lmc.merge import bn_aware_merge, resolve_bn_mode
from lmc.metrics import PathResult, evaluate_path, random_direction_state
from lmc.models import check_same_architecture, module_device

from .settings import PairSettings


@dataclass
class PairResult:
    """What :func:`run_pair` measured.

    ``path``: the path metrics (``None`` if not asked); ``baseline``: the random-direction
    path (``None`` unless asked); ``alignment``: the alignment's info (method, objective before
    and after, moved fractions, ...; ``None`` for ``align = none``), ``transforms`` the
    alignment itself (an :class:`lmc.perm.Alignment`: group -> transform of B) and ``perm`` the
    same as a permutation of B (group -> index tensor, new unit i = old unit p[i]; ``None``
    when some transform is not a permutation); ``analysis``: the
    layerwise analysis (an :class:`lmc.analysis.AnalysisResult`, or ``None``);
    ``stitch_errors``: the error (fraction) of A's first l layers followed by (aligned) B's
    others for l = 0..L (entry 0 is B's, entry L A's; ``None`` unless asked).
    ``models``: the two models the path was measured between (the given ones, or their
    canonical or widened forms) and ``state_b``: B's state as measured (aligned to A;
    ``None``: ``models[1]``'s own), so a curve (:func:`lmc.pair.curve_pair`) is fitted
    between the very endpoints of the line.
    """

    settings: PairSettings
    path: PathResult | None = None
    baseline: PathResult | None = None
    alignment: dict[str, Any] | None = None
    perm: dict[str, torch.Tensor] | None = None
    transforms: Any = None
    analysis: Any = None
    stitch_errors: list[float] | None = None
    models: tuple[nn.Module, nn.Module] | None = None
    state_b: dict[str, torch.Tensor] | None = None


def alignment_examples(data: Dataset, count: int | None, seed: int) -> tuple[torch.Tensor, ...]:
    """``(x, y)``: ``count`` training examples drawn at random with ``seed`` (kept in their
    original order), or the whole training split for ``count`` = ``None``."""
    n = len(data.x_train)
    if count is None or count >= n:
        return data.x_train, data.y_train
    order = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    index = order[:count].sort().values.to(data.x_train.device)
    return data.x_train[index], data.y_train[index]


def evaluation_examples(data: Dataset, settings: PairSettings) -> tuple[torch.Tensor, ...]:
    """``(x, y)``: where the path and the analysis are measured: ``settings.split``, its first
    ``settings.max_examples`` examples (all when ``None``)."""
    x, y = data.split(settings.split)
    if settings.max_examples is not None:
        x, y = x[: settings.max_examples], y[: settings.max_examples]
    return x, y


def align_pair(
    model_a: nn.Module,
    model_b: nn.Module,
    data: Dataset,
    settings: PairSettings,
    *,
    quiet: bool = True,
):
    """B permuted onto A as ``settings`` ask (an :class:`lmc.perm.AlignResult`), or ``None``."""
    if settings.align == "none":
        return None
    from lmc.perm import align

    x, y = alignment_examples(data, settings.align_examples, settings.seed)
    return align(
        settings.align,
        model_a,
        model_b,
        inputs=x,
        labels=y,
        seed=settings.seed,
        quiet=quiet,
        task=data.task,
        **settings.align_options,
    )


def run_pair(
    model_a: nn.Module,
    model_b: nn.Module,
    data: Dataset,
    settings: PairSettings | None = None,
    *,
    quiet: bool = True,
    init_states: tuple[dict, dict] | None = None,
) -> PairResult:
    """Align (optionally), evaluate the path and analyse the pair (A at λ = 0, B at λ = 1).

    A method that aligns canonical forms (``orthogonal``) has the path, the analysis and the
    stitching measured between the canonical models (the same functions, other parameters).
    ``data``: the dataset both models were trained on; the path and analysis are measured on
    ``settings.split`` (its first ``settings.max_examples`` examples), BatchNorm is reset and
    alignment statistics are read on its training split. Neither model is changed.
    ``init_states``: ``(A_0, B_0)``, the runs' initial states (each in its own run's frame;
    B_0 is permuted as B is aligned), for the analysis' retention columns
    (:func:`lmc.analysis.retention.initial_state` rebuilds them from a run's config).
    """
    settings = settings or PairSettings()
    if settings.widen:
        from lmc.perm.symmetries.widening import widen_pair

        example = data.x_train[:2].to(module_device(model_a))
        if init_states is not None:
            init_states = _widened_init(init_states, model_a, model_b, example)
        model_a, model_b = widen_pair(model_a, model_b, example)
    check_same_architecture(model_a, model_b)
    x, y = evaluation_examples(data, settings)
    result = PairResult(settings)
    aligned = align_pair(model_a, model_b, data, settings, quiet=quiet)
    state_b = None
    if aligned is not None and aligned.models is not None and aligned.models[0] is not model_a:
        # the method aligned the canonical forms: the pair is measured between them (the same
        # functions; docs/science.md), the initial states canonicalised as the models were
        init_states = _canonical_init(init_states, model_a, model_b)
        model_a, model_b = aligned.models
    if aligned is not None:
        state_b, result.alignment = aligned.state_dict, aligned.info
        result.transforms = aligned.alignment
        if all(kind == "permutation" for kind in aligned.alignment.kinds.values()):
            result.perm = aligned.perm
    result.models, result.state_b = (model_a, model_b), state_b
    if settings.path is not None and not settings.baseline_only:
        result.path = evaluate_path(
            model_a, model_b, x, y, settings.path, state_b=state_b, bn_inputs=data.x_train,
            task=data.task,
        )  # fmt: skip
    if settings.baseline == "random-direction":
        result.baseline = _random_direction_path(model_a, model_b, x, y, data, settings, state_b)
    if settings.analysis is not None:
        from lmc.analysis import analyze

        options = settings.analysis
        result.analysis = analyze(
            model_a,
            model_b,
            x,
            list(options.lambdas),
            batch_size=options.batch_size,
            max_examples=options.max_examples,
            state_b=state_b,
            merge_fn=bn_aware_merge(model_a, model_b, options.bn, data.x_train, state_b=state_b),
            init_states=_aligned_init(init_states, aligned),
            quiet=quiet,
        )
        result.analysis.settings["bn"] = resolve_bn_mode(model_a, options.bn)
    if settings.stitch:
        result.stitch_errors = _stitching_errors(model_a, model_b, state_b, x, y, data.task)
    return result


def _with_states(models, states) -> list[nn.Module]:
    """Copies of ``models`` holding ``states`` (the runs' initial states, say)."""
    out = []
    for model, state in zip(models, states):
        model = copy.deepcopy(model)
        model.load_state_dict(state)
        out.append(model)
    return out


def _widened_init(init_states, model_a, model_b, example):
    """``(A_0, B_0)`` written into the widened pair's architecture, as the models are."""
    from lmc.perm.symmetries.widening import widen_pair

    widened = widen_pair(*_with_states((model_a, model_b), init_states), example)
    return tuple(m.state_dict() for m in widened)


def _canonical_init(init_states, model_a, model_b):
    """``(A_0, B_0)`` in the canonical form of their models' architecture (or ``None``)."""
    if init_states is None:
        return None
    from lmc.perm.symmetries.canonical_form import canonical_state

    return tuple(canonical_state(m) for m in _with_states((model_a, model_b), init_states))


def _aligned_init(init_states, aligned):
    """``(A_0, B_0)`` with B_0 transformed as B was aligned (``aligned``: the AlignResult)."""
    if init_states is None or aligned is None:
        return init_states
    init_a, init_b = init_states
    return init_a, aligned.apply(init_b)


def _stitching_errors(model_a, model_b, state_b, x, y, task="classification") -> list[float]:
    """Stitching errors of A and B permuted onto A (``state_b``; ``None``: B as it is)."""
    from lmc.analysis import stitching_errors

    if state_b is not None:
        model_b = copy.deepcopy(model_b)
        model_b.load_state_dict(state_b)
    return stitching_errors(model_a, model_b, (x, y), task=task)


def _random_direction_path(model_a, model_b, x, y, data, settings, state_b):
    """A → B' = A + ‖B − A‖u for a random unit direction u seeded by ``settings.seed``."""
    from dataclasses import replace

    sb = state_b if state_b is not None else model_b.state_dict()
    names = [n for n, _ in model_a.named_parameters()]
    direction = random_direction_state(
        model_a.state_dict(), sb, settings.seed, parameter_names=names
    )
    # B' carries A's BatchNorm statistics, which do not fit its weights: reset its end too
    path = replace(settings.path, reset_endpoints=True)
    return evaluate_path(
        model_a, None, x, y, path, state_b=direction, bn_inputs=data.x_train, task=data.task
    )
