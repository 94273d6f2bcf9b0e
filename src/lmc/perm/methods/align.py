"""``lmc.perm.align``: the one entry point other verbs call to permute B onto A."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, check_finite
from lmc.data.tasks import get_task
from lmc.models import module_device
from lmc.models.compare import check_same_architecture

from ..symmetries.alignment_map import Alignment
from ..symmetries.canonical_form import canonicalize, is_canonical
from ..symmetries.permutation_spec import PermutationSpec
from ..symmetries.permutations import Perm, matching_objective, moved_fraction
from ..symmetries.symmetry_spec import SymmetrySpec, symmetry_spec
from ..symmetries.trace import spec_from_model
from .registry import AlignJob, all_methods, get_method, method_names

#: The built-in methods (:func:`lmc.perm.methods.method_names` lists every registered one).
METHODS = tuple(m for m in method_names() if m != "none") + ("none",)

#: Each built-in method's settings and their defaults (the records in :mod:`lmc.perm.methods`).
SETTINGS: dict[str, dict[str, Any]] = {
    m.name: {s.name: s.default for s in m.settings} for m in all_methods()
}


@dataclass
class AlignResult:
    """What :func:`align` returns.

    ``alignment``: group -> transform (:class:`~lmc.perm.symmetries.alignment_map.Alignment`), to
    apply to B; ``perm``: the same as a permutation dict (group -> int64 index tensor, new unit i =
    old unit p[i]) when every transform is a permutation (``LmcError`` otherwise);
    ``state_dict``: B's full state (parameters and buffers) with the alignment applied;
    ``spec``: the permutation spec used; ``info``: ``method``, ``seed``, ``objective_before``
    and ``objective_after`` (Σ⟨θ_A, T(θ_B)⟩ at the identity and after the alignment),
    ``moved_fraction`` (permutation groups -> fraction of units moved), ``kinds`` (group ->
    transform kind), ``seconds``, ``settings`` and method-specific extras; ``symmetry``: the
    axis roles (a :class:`~lmc.perm.symmetries.symmetry_spec.SymmetrySpec`) when some transform is
    not a permutation, ``None`` otherwise; ``models``: for a method that aligns canonical forms
    (``AlignmentMethod.canonical``), the canonical ``(A, B)`` it aligned (:mod:`lmc.perm.
    canonical`: the same functions as the given models, other parameters): ``state_dict``,
    ``spec`` and :meth:`apply` are then in the canonical architecture; ``None`` otherwise.
    """

    alignment: Alignment
    state_dict: dict[str, torch.Tensor]
    spec: PermutationSpec
    info: dict[str, Any] = field(default_factory=dict)
    symmetry: SymmetrySpec | None = None
    models: tuple[nn.Module, nn.Module] | None = None

    @property
    def perm(self) -> Perm:
        return self.alignment.to_permutation()

    def apply(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``state`` (a state dict of B's architecture, e.g. B's initialisation) with the same
        alignment applied."""
        return self.alignment.apply(self.symmetry or self.spec, state)


def align(
    method: str,
    model_a: nn.Module,
    model_b: nn.Module,
    *,
    inputs: torch.Tensor,
    labels: torch.Tensor | None = None,
    seed: int = 0,
    quiet: bool = True,
    spec: PermutationSpec | None = None,
    task: Any = "classification",
    **settings: Any,
) -> AlignResult:
    """Align ``model_b``'s units to ``model_a``'s with the registered ``method``
    (:mod:`lmc.perm.methods`: its record checks ``settings`` and says whether it reads data and
    labels; ``task`` is the labels' task, :mod:`lmc.data.tasks`).

    ``method``: ``weight`` (weight matching; settings ``max_iter``, ``tol``, ``init``
    (``onepass``, the default, or ``identity``), ``restarts`` and ``solver`` (``auto``, the
    default, ``scipy``, ``lapx`` or ``sparse``); ``info`` records the solver that ran),
    ``activation``
    (settings ``batch_size``, ``statistic`` = correlation|covariance, ``max_examples``),
    ``ste`` (settings ``steps``, ``lr``, ``batch_size``, ``holdout``, ``max_iter``, ``tol``; needs
    ``labels``), ``onepass`` (Git Re-Basin's greedy one-pass baseline, App. A.7:
    :func:`lmc.perm.one_pass_matching`), ``random`` (a uniformly random valid permutation
    from ``seed``) or ``none`` (the identity). ``inputs``: training inputs; their first two
    rows are the example input for deriving the spec from ``model_a`` (unless ``spec`` is
    given). Neither model is
    modified. Models of different architectures raise ``LmcError`` naming the first
    difference (:func:`lmc.models.compare.check_same_architecture`: a zoo option, a tensor's
    name or shape, a submodule's type).
    """
    record = get_method(method)
    options = record.resolve(settings)
    check_same_architecture(model_a, model_b, purpose="alignment")
    canonical_pair = None
    if record.canonical:  # the method works in the canonical form: align that
        example = (
            inputs[:2].to(module_device(model_a)) if isinstance(inputs, torch.Tensor) else None
        )
        if not (is_canonical(model_a, example) and is_canonical(model_b, example)):
            model_a, model_b = canonicalize(model_a, example), canonicalize(model_b, example)
            spec = None  # the given spec (if any) was traced from the original A
        canonical_pair = (model_a, model_b)
    state_a = model_a.state_dict()
    state_b = model_b.state_dict()
    if not isinstance(inputs, torch.Tensor) or inputs.shape[0] < 1:
        raise LmcError("align needs a non-empty tensor of inputs (the example input for tracing)")
    check_finite("inputs", inputs)
    check_finite("model A's weights", state_a)
    check_finite("model B's weights", state_b)
    if labels is not None:
        get_task(task).check(None, labels, name="labels")
    if record.needs_labels and labels is None:
        raise LmcError(
            f"method {method!r} needs labels: it minimises a loss on the training examples"
        )
    device = module_device(model_a)
    start = time.perf_counter()
    if spec is None:
        spec = spec_from_model(model_a, inputs[:2].to(device))
    symmetry = None  # a canonical method works with axis roles: traced once, used twice
    if record.canonical:
        symmetry = symmetry_spec(model_a, inputs[:2].to(device), spec=spec)
    job = AlignJob(
        spec=spec,
        model_a=model_a,
        model_b=model_b,
        state_a=state_a,
        state_b=state_b,
        inputs=inputs,
        labels=labels if record.needs_labels else None,
        seed=seed,
        quiet=quiet,
        task=task,
        symmetry=symmetry,
    )
    output = record.function(job, **options)
    alignment = output.alignment
    if not isinstance(alignment, Alignment):
        alignment = Alignment.from_permutation(alignment)
    kinds = alignment.kinds
    if symmetry is None and any(kind != "permutation" for kind in kinds.values()):
        symmetry = symmetry_spec(model_a, inputs[:2].to(device), spec=spec)  # axis roles
    seconds = time.perf_counter() - start
    state = alignment.apply(symmetry or spec, state_b)
    perms = {g: t.perm for g, t in alignment.items() if kinds[g] == "permutation"}
    info: dict[str, Any] = {
        "method": method,
        "seed": seed,
        "settings": dict(options),
        "objective_before": matching_objective(spec, state_a, state_b),
        "objective_after": matching_objective(spec, state_a, state),
        "moved_fraction": moved_fraction(perms),
        "kinds": kinds,
        "group_sizes": spec.group_sizes,
        "seconds": seconds,
        **output.extras,
    }
    if canonical_pair is not None:
        info["canonical"] = True
    return AlignResult(alignment, state, spec, info, symmetry, canonical_pair)


__all__ = ["METHODS", "SETTINGS", "AlignResult", "Perm", "align"]
