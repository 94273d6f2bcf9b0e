"""Merging N models, optionally after aligning them by weight matching.

Two alignments (``merge_many(align=...)``):

- ``"weight"`` (anchored): every model other than a reference is permuted onto the reference
  once, then all are averaged;
- ``"weight-iterative"`` (Git Re-Basin App. A.10, :func:`merge_many_iterative`): round after
  round, every model in a seeded random order is aligned to the mean of the others (as they
  are permuted at that moment), until a whole round changes no permutation or
  ``max_rounds`` rounds have run; the merge is the mean of the permuted models.

Beyond permutations (:func:`merge_many_canonical`): pre-LN transformers merged in their
canonical form (:func:`lmc.perm.canonicalize`: LayerNorms folded) after an alignment method that
works there (``orthogonal``, ``orthogonal-activation``, ``learned``, or ``canonical``, the
control: no alignment), every model aligned to a reference by :func:`lmc.perm.align`; the merge
is a canonical-form model (:func:`canonical_model` rebuilds one from its architecture).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError
from lmc.models.compare import check_same_architecture
from lmc.store import register_run_form

from .interpolate import StateDict, average

ALIGN_CHOICES = (None, "none", "weight", "weight-iterative")


def _state_of(obj: Any) -> StateDict:
    if isinstance(obj, nn.Module):
        return {k: v.detach() for k, v in obj.state_dict().items()}
    if isinstance(obj, Mapping):
        return dict(obj)
    raise LmcError(f"merge_many takes nn.Module objects or state dicts, got {type(obj).__name__}")


def _resolve_spec(
    spec: Any,
    items: Sequence[Any],
    model: nn.Module | None,
    example_input: torch.Tensor | None,
    reference: int,
    align: str,
) -> Any:
    """The permutation spec: ``spec`` itself, or traced from a module on ``example_input``."""
    if spec is not None:
        return spec
    from lmc import perm as lmc_perm

    module = model
    if module is None and isinstance(items[reference], nn.Module):
        module = items[reference]
    if module is None:
        module = next((obj for obj in items if isinstance(obj, nn.Module)), None)
    if module is None or example_input is None:
        raise LmcError(
            f"merge_many(align={align!r}) needs a permutation spec: pass spec=, or "
            "example_input= with model= (or nn.Module objects)"
        )
    return lmc_perm.spec_from_model(module, example_input)


def merge_many(
    models_or_states: Sequence[nn.Module | Mapping[str, torch.Tensor]],
    *,
    align: str | None = None,
    reference: int = 0,
    weights: Sequence[float] | None = None,
    model: nn.Module | None = None,
    example_input: torch.Tensor | None = None,
    spec: Any = None,
    seed: int = 0,
    max_rounds: int = 100,
    max_iter: int = 100,
    tol: float = 1e-4,
) -> StateDict:
    """Average N models of one architecture, optionally aligned first.

    Args:
        models_or_states: ``nn.Module`` objects or state dicts (mixed is fine).
        align: ``None``/``"none"``: plain (weighted) averaging. ``"weight"``: every model other
            than the reference is permuted onto the reference by
            ``lmc.perm.weight_matching(spec, state_ref, state_i, seed).perm`` and
            ``lmc.perm.apply_permutation`` before averaging (anchored on one model).
            ``"weight-iterative"``: Git Re-Basin's App. A.10, :func:`merge_many_iterative`
            (the reference then only decides whose integer buffers and dtypes the result has).
        reference: index of the reference model (kept as it is; the others move to it).
        weights: averaging weights (default equal), see :func:`lmc.merge.average`.
        model, example_input, spec: how to get the permutation spec when aligning: pass
            ``spec`` directly, or ``example_input`` (one batch) and either ``model`` or module
            objects in ``models_or_states`` (the reference's module is then traced with
            ``lmc.perm.spec_from_model``).
        seed: seed of weight matching's random layer order (and of the iterative variant's
            model order).
        max_rounds: most rounds of ``"weight-iterative"``.
        max_iter, tol: weight matching's own settings (:func:`lmc.perm.weight_matching`) in
            ``"weight-iterative"``; ``"weight"`` keeps weight matching's defaults (the same
            values).

    Returns the merged state dict. BatchNorm running statistics of the result are averages and
    generally wrong: reset them with :func:`lmc.merge.reset_batchnorm` before evaluating.
    """
    items = list(models_or_states)
    if not items:
        raise LmcError("merge_many needs at least one model")
    if not 0 <= reference < len(items):
        raise LmcError(f"reference index {reference} is out of range for {len(items)} models")
    if align not in ALIGN_CHOICES:
        hint = ""
        if isinstance(align, str) and align in canonical_methods():
            hint = f" ({align!r} merges canonical forms: use merge_many_canonical)"
        raise LmcError(
            f"unknown alignment {align!r} for merge_many: use None, 'weight' or "
            f"'weight-iterative'{hint}"
        )
    states = [_state_of(obj) for obj in items]
    if weights is not None and len(weights) != len(states):
        raise LmcError(f"merge_many got {len(states)} models but {len(weights)} weights")
    if align == "weight-iterative":
        result = merge_many_iterative(
            items,
            weights=weights,
            model=model,
            example_input=example_input,
            spec=spec,
            seed=seed,
            max_rounds=max_rounds,
            max_iter=max_iter,
            tol=tol,
            first=reference,
        )
        return result.state
    if align == "weight" and len(states) > 1:
        from lmc import perm as lmc_perm  # imported lazily: lmc.perm sits before lmc.merge

        spec = _resolve_spec(spec, items, model, example_input, reference, align)
        ref_state = states[reference]
        for i, state in enumerate(states):
            if i == reference:
                continue
            result = lmc_perm.weight_matching(spec, ref_state, state, seed=seed)
            states[i] = lmc_perm.apply_permutation(spec, result.perm, state)
    # Average with the reference first so that integer buffers and dtypes come from it.
    order = [reference] + [i for i in range(len(states)) if i != reference]
    w = None if weights is None else [float(weights[i]) for i in order]
    return average([states[i] for i in order], w)


@dataclass(frozen=True)
class IterativeMerge:
    """What :func:`merge_many_iterative` returns.

    ``state``: the merged state dict (the weighted mean of the permuted models);
    ``perms[i]``: the permutation applied to model ``i`` (group -> int64 CPU index tensor,
    new unit j = old unit p[j]); ``rounds``: rounds run; ``changes[r]``: how many models'
    permutations round ``r`` changed; ``converged``: whether the last round changed none.
    """

    state: StateDict
    perms: list[dict[str, torch.Tensor]]
    rounds: int
    changes: list[int]
    converged: bool


def _same_perm(p: Mapping[str, torch.Tensor], q: Mapping[str, torch.Tensor]) -> bool:
    return all(torch.equal(p[g], q[g]) for g in p)


def merge_many_iterative(
    models_or_states: Sequence[nn.Module | Mapping[str, torch.Tensor]],
    *,
    weights: Sequence[float] | None = None,
    model: nn.Module | None = None,
    example_input: torch.Tensor | None = None,
    spec: Any = None,
    seed: int = 0,
    max_rounds: int = 100,
    max_iter: int = 100,
    tol: float = 1e-4,
    first: int = 0,
) -> IterativeMerge:
    """Git Re-Basin's merge-many (App. A.10): align each model to the mean of the others.

    Every model starts unpermuted. A round visits the models in an order drawn with
    ``torch.randperm`` from one ``torch.Generator().manual_seed(seed)`` (a new order each
    round); model ``i`` is re-matched, from its original weights and warm-started at its
    current permutation, to the (``weights``-weighted) mean of the others as they are
    permuted at that moment, by ``lmc.perm.weight_matching(spec, mean, state_i, seed=seed,
    max_iter=max_iter, tol=tol)``, and the others see its new permutation at once. The loop
    stops after the first round in which no permutation changed (``converged``) or after
    ``max_rounds`` rounds. The merge is the weighted mean of the permuted models, with model
    ``first``'s integer buffers and dtypes.

    The spec comes from ``spec``, or from tracing ``model`` (or the first ``nn.Module`` among
    the inputs) on ``example_input`` (:func:`lmc.perm.spec_from_model`). BatchNorm running
    statistics of the result are averages: reset them (:func:`lmc.merge.reset_batchnorm`).
    """
    from lmc import perm as lmc_perm  # imported lazily: lmc.perm sits before lmc.merge
    from lmc.config import check_int

    items = list(models_or_states)
    if not items:
        raise LmcError("merge_many_iterative needs at least one model")
    max_rounds = check_int("max_rounds", max_rounds, minimum=1)
    if not 0 <= first < len(items):
        raise LmcError(f"first index {first} is out of range for {len(items)} models")
    states = [_state_of(obj) for obj in items]
    n = len(states)
    w = [1.0] * n if weights is None else [float(v) for v in weights]
    if len(w) != n:
        raise LmcError(f"merge_many_iterative got {n} models but {len(w)} weights")
    for i in range(1, n):
        check_same_architecture(
            states[0], states[i], names=("model 0", f"model {i}"), purpose="merging"
        )
    spec = _resolve_spec(spec, items, model, example_input, first, "weight-iterative")
    perms = [lmc_perm.identity_permutation(spec) for _ in range(n)]
    current = [dict(s) for s in states]
    changes: list[int] = []
    converged = n == 1
    gen = torch.Generator().manual_seed(int(seed))
    rounds = 0
    while not converged and rounds < max_rounds:
        rounds += 1
        changed = 0
        for i in torch.randperm(n, generator=gen).tolist():
            others = [j for j in range(n) if j != i]
            if sum(w[j] for j in others) <= 0:
                continue  # nothing to align to: the others all have weight 0
            mean = average([current[j] for j in others], [w[j] for j in others])
            # SciPy's solver, as the committed merge-many results ran with (weight matching's
            # default "auto" may pick lapx, which can break exact ties differently)
            result = lmc_perm.weight_matching(
                spec, mean, states[i], seed=seed, max_iter=max_iter, init_perm=perms[i], tol=tol,
                solver="scipy",
            )  # fmt: skip
            if not _same_perm(result.perm, perms[i]):
                changed += 1
                perms[i] = result.perm
                current[i] = lmc_perm.apply_permutation(spec, perms[i], states[i])
        changes.append(changed)
        converged = changed == 0
    order = [first] + [i for i in range(n) if i != first]
    merged = average([current[i] for i in order], [w[i] for i in order])
    return IterativeMerge(merged, perms, rounds, changes, converged)


# ---------------------------------------------------------------------------------------------
# beyond permutations: merging canonical forms


def canonical_methods() -> tuple[str, ...]:
    """The registered alignment methods that align canonical forms
    (``AlignmentMethod.canonical``: ``canonical``, ``orthogonal``, ``learned``,
    ``orthogonal-activation`` and any plug-in marked so), in registry order."""
    from lmc.perm.methods import all_methods

    return tuple(m.name for m in all_methods() if m.canonical)


@dataclass(frozen=True)
class CanonicalMerge:
    """What :func:`merge_many_canonical` returns.

    ``state``: the merged state dict, in the canonical architecture; ``model``: the merged
    model (a copy of the reference's canonical form holding ``state``, in eval mode);
    ``alignments[i]``: the :class:`~lmc.perm.Alignment` applied to model ``i``'s canonical form
    (the identity for the reference of an anchored merge); ``infos[i]``: the ``info`` of
    :func:`lmc.perm.align` for model ``i``'s last alignment (``None`` for the unaligned
    reference); ``rounds``: re-alignment rounds run after the anchored one; ``shifts[r]``: after
    round ``r``, the largest relative change ‖θ_i,new − θ_i,old‖ / ‖θ_i,old‖ of a model's
    aligned weights (how far the round moved them).
    """

    state: StateDict
    model: nn.Module
    alignments: list[Any]
    infos: list[dict[str, Any] | None]
    rounds: int
    shifts: list[float]


def _norm(state: Mapping[str, torch.Tensor]) -> float:
    return math.sqrt(
        sum(float(v.double().pow(2).sum()) for v in state.values() if v.is_floating_point())
    )


def _distance(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    return math.sqrt(
        sum(
            float((a[k].double() - b[k].double()).pow(2).sum())
            for k in a
            if a[k].is_floating_point()
        )
    )


def merge_many_canonical(
    models: Sequence[nn.Module],
    method: str = "orthogonal",
    *,
    inputs: torch.Tensor,
    labels: torch.Tensor | None = None,
    task: Any = "classification",
    reference: int = 0,
    weights: Sequence[float] | None = None,
    seed: int = 0,
    rounds: int = 0,
    quiet: bool = True,
    **settings: Any,
) -> CanonicalMerge:
    """Merge N pre-LN transformers of one architecture beyond permutations.

    Every model is put in its canonical form (:func:`lmc.perm.canonicalize`: the same
    function, LayerNorms folded into their readers, the stream centred), then each model other
    than ``reference`` is aligned onto the reference's canonical form by
    ``lmc.perm.align(method, reference, model_i, ...)`` (anchored, as ``merge_many(align=
    "weight")`` is for permutations); with ``rounds`` > 0, that many rounds follow in which
    every model, in an order drawn with ``torch.randperm`` from
    ``torch.Generator().manual_seed(seed)`` (a new order each round), is aligned afresh from
    its own canonical form onto the (``weights``-weighted) mean of the others as they are
    aligned at that moment (merge-many's scheme, Git Re-Basin App. A.10, with a fixed number of
    rounds: the maps are continuous, so no round repeats the last exactly). The merge is the
    weighted mean of the aligned canonical models, with the reference's integer buffers and
    dtypes: **a canonical-form model** (parameter-free RMSNorms on the stream, untied head),
    the architecture of :func:`canonical_model`.

    Args:
        models: ``nn.Module`` objects (pre-LN transformers :func:`lmc.perm.canonicalize`
            supports; already canonical ones are used as they are). None is modified.
        method: a registered method marked ``canonical`` (:func:`canonical_methods`):
            ``orthogonal`` (data-free), ``orthogonal-activation`` (reads ``inputs``),
            ``learned`` (reads ``inputs`` and ``labels``), or ``canonical`` (no alignment: the
            control, the plain average of the canonical forms).
        inputs, labels, task: training examples for the methods that read data (their first
            two rows are the example input for tracing in every case), their targets and task
            (:mod:`lmc.data.tasks`), as :func:`lmc.perm.align` takes them.
        reference: index of the model the others are aligned to (its canonical form is kept).
        weights: averaging weights (default equal), see :func:`lmc.merge.average`.
        seed: the alignments' seed, and the rounds' order.
        rounds: re-alignment rounds after the anchored one (0: anchored only).
        settings: the method's settings (:mod:`lmc.perm.methods`), e.g. ``max_iter``,
            ``steps``.
    """
    from lmc.config import check_int
    from lmc.perm import Alignment, align, canonicalize, spec_from_model
    from lmc.perm.methods import get_method
    from lmc.perm.symmetries.canonical_form import is_canonical

    record = get_method(method)
    if not record.canonical:
        raise LmcError(
            f"merge_many_canonical merges canonical forms: method {method!r} does not align "
            f"them; choose one of {', '.join(canonical_methods())} (or merge_many for "
            "permutations)"
        )
    record.resolve(settings)  # the settings checked before any work
    items = list(models)
    if not items:
        raise LmcError("merge_many_canonical needs at least one model")
    if not all(isinstance(m, nn.Module) for m in items):
        raise LmcError("merge_many_canonical takes nn.Module objects (it rewrites their layers)")
    n = len(items)
    if not 0 <= reference < n:
        raise LmcError(f"reference index {reference} is out of range for {n} models")
    rounds = check_int("rounds", rounds, minimum=0)
    w = [1.0] * n if weights is None else [float(v) for v in weights]
    if len(w) != n:
        raise LmcError(f"merge_many_canonical got {n} models but {len(w)} weights")
    for i in range(n):
        if i != reference:
            check_same_architecture(
                items[reference], items[i], names=(f"model {reference}", f"model {i}"),
                purpose="merging",
            )  # fmt: skip
    if not isinstance(inputs, torch.Tensor) or inputs.shape[0] < 1:
        raise LmcError("merge_many_canonical needs a non-empty tensor of inputs")
    example = inputs[:2].to(next(items[reference].parameters()).device)
    canonical = [m if is_canonical(m) else canonicalize(m, example) for m in items]
    ref = canonical[reference]
    device = next(ref.parameters()).device
    spec = spec_from_model(ref, inputs[:2].to(device))  # one trace for every alignment

    def aligned_onto(target: nn.Module, i: int):
        return align(
            method, target, canonical[i], inputs=inputs, labels=labels, seed=seed, quiet=quiet,
            spec=spec, task=task, **settings,
        )  # fmt: skip

    states: list[StateDict] = [dict(m.state_dict()) for m in canonical]
    alignments: list[Any] = [Alignment.identity(spec) for _ in range(n)]
    infos: list[dict[str, Any] | None] = [None] * n
    for i in range(n):
        if i != reference:
            result = aligned_onto(ref, i)
            states[i], alignments[i], infos[i] = result.state_dict, result.alignment, result.info
    shifts: list[float] = []
    gen = torch.Generator().manual_seed(int(seed))
    target = copy.deepcopy(ref)
    for _ in range(rounds if n > 1 else 0):
        shift = 0.0
        for i in torch.randperm(n, generator=gen).tolist():
            others = [j for j in range(n) if j != i]
            if sum(w[j] for j in others) <= 0:
                continue  # nothing to align to: the others all have weight 0
            target.load_state_dict(average([states[j] for j in others], [w[j] for j in others]))
            result = aligned_onto(target, i)
            shift = max(
                shift, _distance(result.state_dict, states[i]) / max(_norm(states[i]), 1e-30)
            )
            states[i], alignments[i], infos[i] = result.state_dict, result.alignment, result.info
        shifts.append(shift)
    order = [reference] + [i for i in range(n) if i != reference]
    merged = average([states[i] for i in order], [w[i] for i in order])
    model = copy.deepcopy(ref).eval()
    model.load_state_dict(merged)
    return CanonicalMerge(merged, model, alignments, infos, len(shifts), shifts)


def canonical_model(
    architecture: nn.Module, state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """A model of ``architecture``'s canonical form (:func:`lmc.perm.canonical_skeleton`: a
    copy whose stream norms are parameter-free RMSNorms, head untied), holding ``state`` when
    given (a merge of :func:`merge_many_canonical`, a canonical-form run's weights), in eval
    mode. ``architecture`` itself (any weights) is not changed."""
    from lmc.perm import canonical_skeleton

    model = canonical_skeleton(architecture)
    if state is not None:
        try:
            model.load_state_dict(dict(state), strict=True)
        except RuntimeError as exc:
            first = str(exc).splitlines()[0]
            raise LmcError(f"the weights do not fit the canonical form: {first}") from exc
    return model.eval()


#: The config key (and value) that marks a stored run whose weights are in the canonical form
#: (``lmc merge --align orthogonal|learned|...``): its architecture is
#: :func:`canonical_model` of the config's model.
FORM_KEY, CANONICAL_FORM = "form", "canonical"
register_run_form(CANONICAL_FORM, canonical_model)  # lmc.store.Run.build_model loads them


def build_run_model(run: Any, device: str | torch.device = "cpu") -> nn.Module:
    """The model of a stored run (a :class:`lmc.store.Run`) with its weights, in eval mode on
    ``device``: ``run.build_model`` for an ordinary run; for a canonical-form run (config
    ``"form": "canonical"``, as ``lmc merge`` writes beyond permutations) the canonical form of
    the config's architecture (:func:`canonical_model`) holding the stored weights."""
    if run.config.get(FORM_KEY) != CANONICAL_FORM:
        return run.build_model(device)
    from lmc.models import build

    architecture = build(run.config["model"], **run.config["model_options"])
    return canonical_model(architecture, run.state_dict(device="cpu")).to(device)
