"""Permutations (Git Re-Basin): specs derived from any model, applying, matching.

Convention: a permutation is an int64 index tensor ``p`` per group; applying it makes new
unit ``i`` = old unit ``p[i]`` (``W -> W[p][:, p_prev]``, i.e. ``P W P_prevᵀ``). Matching
functions return the permutation to apply to model B so that its units line up with A's.

>>> spec = spec_from_model(model, x[:2])            # torch.fx trace + union-find of channels
>>> result = weight_matching(spec, model_a.state_dict(), model_b.state_dict(), seed=0)
>>> aligned_b = apply_permutation(spec, result.perm, model_b.state_dict())
>>> result = align("weight", model_a, model_b, inputs=x)   # all of the above, with info

Every matching function (``weight_matching``, ``activation_matching``, ``ste_matching``)
returns one result type, a frozen dataclass derived from :class:`MatchResult`: the
permutation is its ``perm`` field, next to the method's own typed fields (objectives, passes,
losses). ``check_same_architecture`` is :func:`lmc.models.compare.check_same_architecture`,
re-exported here under its old home.
"""

from lmc.models.compare import check_same_architecture

from .activation_match import ActivationMatchingResult, activation_matching
from .alignment import METHODS, AlignResult, align
from .lap import linear_assignment
from .ops import (
    MatchResult,
    apply_permutation,
    check_permutation,
    compose_permutations,
    identity_permutation,
    invert_permutation,
    matching_objective,
    moved_fraction,
    random_permutation,
)
from .spec import PermutationSpec, Segment, axis_index
from .ste import SteMatchingResult, ste_matching
from .trace import TraceResult, spec_from_model, trace_model
from .weight_match import (
    SimilarityMatrices,
    WeightMatchingResult,
    one_pass_matching,
    weight_matching,
)

__all__ = [
    "METHODS",
    "ActivationMatchingResult",
    "AlignResult",
    "MatchResult",
    "PermutationSpec",
    "Segment",
    "SimilarityMatrices",
    "SteMatchingResult",
    "TraceResult",
    "WeightMatchingResult",
    "activation_matching",
    "align",
    "apply_permutation",
    "axis_index",
    "check_permutation",
    "check_same_architecture",
    "compose_permutations",
    "identity_permutation",
    "invert_permutation",
    "linear_assignment",
    "matching_objective",
    "moved_fraction",
    "random_permutation",
    "spec_from_model",
    "ste_matching",
    "trace_model",
    "weight_matching",
    "one_pass_matching",
]
