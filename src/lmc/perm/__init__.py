"""Permutations (Git Re-Basin) and the other symmetries of a model: specs derived from any
model, applying maps, and the alignment methods that choose them.

Convention: a permutation is an int64 index tensor ``p`` per group; applying it makes new
unit ``i`` = old unit ``p[i]`` (``W -> W[p][:, p_prev]``, i.e. ``P W P_prevᵀ``). Matching
functions return the permutation to apply to model B so that its units line up with A's.

>>> spec = spec_from_model(model, x[:2])            # torch.fx trace + union-find of channels
>>> result = weight_matching(spec, model_a.state_dict(), model_b.state_dict(), seed=0)
>>> aligned_b = apply_permutation(spec, result.perm, model_b.state_dict())
>>> result = align("weight", model_a, model_b, inputs=x)   # all of the above, with info

The package has three parts, each importing only from those before it (the public names are
imported from here):

- :mod:`.solvers`: the exact linear-assignment solvers every matching calls;
- :mod:`.symmetries`: what a model's symmetries are and how maps act on them: the tracer and the
  permutation spec, permutations, and beyond permutations the residual stream's layout read off
  the traced graph (``traced_layout``), the canonical form (``canonicalize`` folds the norms of
  any pre-norm transformer, LayerNorm or RMSNorm, into their readers so its residual stream
  admits orthogonal maps; post-LN models are refused), axis roles and each group's admissible
  kind (``symmetry_spec``), the transform kinds of one group (``Permutation`` / ``Orthogonal``
  / ``Invertible`` / ``RopePlanes``, a rotation and scaling per rotary frequency plane, and
  ``InterleavedRopePlanes``, the same in the interleaved layout of GPT-J's planes), the
  ``Alignment`` that maps every group to its transform (``Alignment.from_permutation(result.
  perm)`` converts a permutation), widening;
- :mod:`.methods`: the alignment methods, one module each holding its algorithm and its record
  (:class:`lmc.perm.methods.AlignmentMethod`), and ``align``, which runs a registered one:
  ``weight_matching`` (and ``one_pass_matching``, its greedy start), ``activation_matching``,
  ``ste_matching``, ``orthogonal_weight_matching`` (the stream by Procrustes),
  ``orthogonal_activation_matching`` (the same from features), ``learned_alignment`` (rotations
  trained on the path's loss from there); ``weight_matching_reference`` is the whole of weight
  matching on one screen (dense similarities, SciPy's assignment), the documented reference the
  fast path is tested against.

Every matching function (``weight_matching``, ``activation_matching``, ``ste_matching``)
returns one result type, a frozen dataclass derived from :class:`MatchResult`: the
permutation is its ``perm`` field, next to the method's own typed fields (objectives, passes,
losses). ``check_same_architecture`` is :func:`lmc.models.compare.check_same_architecture`,
re-exported here under its old home. The modules of the flat layout before issue 45 still
import under their old names (:data:`MOVED_MODULES`: ``lmc.perm.spec`` is
``lmc.perm.symmetries.permutation_spec``); docs/science.md, "Symmetries beyond permutations",
defines the maps.
"""

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

from lmc.models.compare import check_same_architecture

from .methods.activation_matching import ActivationMatchingResult, activation_matching
from .methods.align import METHODS, AlignResult, align
from .methods.learned_alignment import LearnedAlignmentResult, learned_alignment
from .methods.orthogonal_activation_matching import (
    OrthogonalActivationResult,
    orthogonal_activation_matching,
)
from .methods.orthogonal_weight_matching import OrthogonalMatchResult, orthogonal_weight_matching
from .methods.straight_through import SteMatchingResult, ste_matching
from .methods.weight_matching import (
    SimilarityMatrices,
    WeightMatchingResult,
    one_pass_matching,
    weight_matching,
)
from .methods.weight_matching_reference import weight_matching_reference
from .solvers.assignment import linear_assignment
from .symmetries.alignment_map import Alignment, random_alignment
from .symmetries.canonical_form import (
    canonical_skeleton,
    canonical_state,
    canonicalize,
    stream_layout,
)
from .symmetries.example_inputs import example_input
from .symmetries.permutation_spec import PermutationSpec, Segment, axis_index
from .symmetries.permutations import (
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
from .symmetries.residual_stream import StreamLayout, traced_layout
from .symmetries.symmetry_spec import SymmetrySpec, symmetry_spec
from .symmetries.trace import TraceResult, spec_from_model, trace_model
from .symmetries.transforms import (
    InterleavedRopePlanes,
    Invertible,
    Orthogonal,
    Permutation,
    RopePlanes,
    Transform,
)

#: Where each module of the flat ``lmc.perm`` of before issue 45 lives now (old name -> new
#: name, both under ``lmc.perm``). The old dotted names still import and give the same module
#: objects (a patch or an ``isinstance`` through one name is one through the other), and so do
#: the old names of their submodules (``lmc.perm.symmetries.trace.state`` is
#: ``lmc.perm.symmetries.trace.state``); ``lmc.perm.<old>`` is also an attribute of the package.
#: ``lmc.perm.methods`` kept its name: it became the package of the methods.
MOVED_MODULES: dict[str, str] = {
    "activation_match": "methods.activation_matching",
    "alignment": "methods.align",
    "alignment_map": "symmetries.alignment_map",
    "canonical": "symmetries.canonical_form",
    "examples": "symmetries.example_inputs",
    "files": "methods.weight_matching_files",
    "heads": "symmetries.head_permutations",
    "lap": "solvers.assignment",
    "learned": "methods.learned_alignment",
    "ops": "symmetries.permutations",
    "orthogonal_activation": "methods.orthogonal_activation_matching",
    "orthogonal_match": "methods.orthogonal_weight_matching",
    "roles": "symmetries.axis_roles",
    "spec": "symmetries.permutation_spec",
    "ste": "methods.straight_through",
    "stream": "symmetries.residual_stream",
    "symmetry": "symmetries.symmetry_spec",
    "trace": "symmetries.trace",
    "transforms": "symmetries.transforms",
    "weight_match": "methods.weight_matching",
    "weight_match_reference": "methods.weight_matching_reference",
    "widen": "symmetries.widening",
    "within_heads": "symmetries.within_heads",
}


def moved_name(name: str) -> str | None:
    """The module a dotted name of the old flat layout now is (``lmc.perm.spec`` ->
    ``lmc.perm.symmetries.permutation_spec``); ``None`` for a name that did not move."""
    prefix = f"{__name__}."
    if not name.startswith(prefix):
        return None
    head, dot, rest = name[len(prefix) :].partition(".")
    if head not in MOVED_MODULES:
        return None
    return f"{prefix}{MOVED_MODULES[head]}{dot}{rest}"


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old dotted name of :data:`MOVED_MODULES` as the module it names now: the
    import system is handed that module itself, not a copy."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if moved_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec) -> ModuleType:
        module = importlib.import_module(moved_name(spec.name))
        spec.loader_state = module.__spec__  # the import system overwrites it: restored below
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state


def __getattr__(name: str) -> ModuleType:
    """``lmc.perm.<old module name>`` (:data:`MOVED_MODULES`) as an attribute, imported."""
    if name in MOVED_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# one finder, before the file system's (so an old package's submodules are never loaded twice)
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__qualname__ != "_MovedModules"]
sys.meta_path.insert(0, _MovedModules())

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
    "InterleavedRopePlanes",
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
