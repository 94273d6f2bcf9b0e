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
re-exported here under its old home. ``weight_matching_reference`` is the whole algorithm on
one screen (dense similarities, SciPy's assignment: :mod:`.weight_match_reference`), the
documented reference the fast path is tested against.

Beyond permutations (docs/science.md, "Symmetries beyond permutations"): ``canonicalize`` folds
the norms of any pre-norm transformer (LayerNorm or RMSNorm, with or without gain and bias)
into their readers so its residual stream admits orthogonal maps (:mod:`.canonical`; the layout
is read off the traced graph, :func:`traced_layout`, :mod:`.stream`; post-LN models are
refused); ``symmetry_spec`` adds axis roles and each group's admissible kind to the spec
(:mod:`.symmetry`); ``Permutation`` / ``Orthogonal`` / ``Invertible`` / ``RopePlanes`` (a
rotation and scaling per rotary frequency plane) are the transform kinds of one group
(:mod:`.transforms`); an ``Alignment`` maps every group to its transform
(:mod:`.alignment_map`; ``Alignment.from_permutation(result.perm)`` converts today's
permutations); ``orthogonal_weight_matching`` solves the stream by Procrustes
(:mod:`.orthogonal_match`), ``orthogonal_activation_matching`` the same from features
(:mod:`.orthogonal_activation`), ``learned_alignment`` trains rotations on the path's loss from
there (:mod:`.learned`).
"""

from lmc.models.compare import check_same_architecture

from .activation_match import ActivationMatchingResult, activation_matching
from .alignment import METHODS, AlignResult, align
from .alignment_map import Alignment, random_alignment
from .canonical import canonical_skeleton, canonical_state, canonicalize, stream_layout
from .examples import example_input
from .lap import linear_assignment
from .learned import LearnedAlignmentResult, learned_alignment
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
from .orthogonal_activation import OrthogonalActivationResult, orthogonal_activation_matching
from .orthogonal_match import OrthogonalMatchResult, orthogonal_weight_matching
from .spec import PermutationSpec, Segment, axis_index
from .ste import SteMatchingResult, ste_matching
from .stream import StreamLayout, traced_layout
from .symmetry import SymmetrySpec, symmetry_spec
from .trace import TraceResult, spec_from_model, trace_model
from .transforms import Invertible, Orthogonal, Permutation, RopePlanes, Transform
from .weight_match import (
    SimilarityMatrices,
    WeightMatchingResult,
    one_pass_matching,
    weight_matching,
)
from .weight_match_reference import weight_matching_reference

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
    "weight_matching_reference",
    "one_pass_matching",
    # symmetries beyond permutations (canonical form, transform kinds, alignments)
    "Alignment",
    "Invertible",
    "Orthogonal",
    "LearnedAlignmentResult",
    "OrthogonalActivationResult",
    "OrthogonalMatchResult",
    "Permutation",
    "SymmetrySpec",
    "RopePlanes",
    "StreamLayout",
    "Transform",
    "canonical_skeleton",
    "canonical_state",
    "canonicalize",
    "example_input",
    "traced_layout",
    "learned_alignment",
    "orthogonal_activation_matching",
    "orthogonal_weight_matching",
    "random_alignment",
    "stream_layout",
    "symmetry_spec",
]
