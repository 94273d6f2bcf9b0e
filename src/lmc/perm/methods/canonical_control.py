"""``canonical``: the control of the methods that align the pair's canonical forms.

Both models are put in the canonical form (:mod:`lmc.perm.symmetries.canonical_form`: pre-LN
transformers with their norms folded into their readers) and B is left as it is there (the
identity), so the path is measured where ``orthogonal``, ``orthogonal-activation`` and
``learned`` measure theirs: beside them, it tells their alignment's effect from the
reparametrisation's (:func:`lmc.perm.methods.canonical_control_note`).
"""

from __future__ import annotations

from ..symmetries.alignment_map import Alignment
from .registry import (
    CANONICAL_CONTROL,
    AlignJob,
    AlignmentMethod,
    MethodOutput,
    MethodStyle,
    register_method,
)


def _align(job: AlignJob) -> MethodOutput:
    """The canonical control: the identity, in the canonical coordinates the job holds."""
    return MethodOutput(Alignment.identity(job.spec))


METHOD = register_method(
    AlignmentMethod(
        CANONICAL_CONTROL,
        _align,
        "the control of orthogonal, orthogonal-activation and learned: both models in the "
        "canonical form (pre-LN transformers: LayerNorms folded), B as it is there (the "
        "identity), so the path is measured where theirs is",
        canonical=True,
        label="canonical form, no alignment",
        order=10,
        style=MethodStyle("#332288", "o"),
        summary="pre-LN transformers: both models in the canonical form and not aligned, where "
        "the pair is then measured: the control of `orthogonal`, `orthogonal-activation` and "
        "`learned`, to list beside them",
    )
)
