"""``random``: a uniformly random valid permutation of every group, drawn from the seed.

The control of the permutation methods: a path after an alignment that knows nothing of the
two models. The draw is :func:`lmc.perm.random_permutation`
(:mod:`lmc.perm.symmetries.permutations`); this module is the method's record.
"""

from __future__ import annotations

from ..symmetries.permutations import random_permutation
from .registry import AlignJob, AlignmentMethod, MethodOutput, MethodStyle, register_method


def _align(job: AlignJob) -> MethodOutput:
    return MethodOutput(random_permutation(job.spec, job.seed))


METHOD = register_method(
    AlignmentMethod(
        "random",
        _align,
        "a uniformly random valid permutation from the seed (a control)",
        label="random permutation",
        order=90,
        style=MethodStyle("#E69F00", "v"),
        summary="a random permutation, the control",
    )
)
