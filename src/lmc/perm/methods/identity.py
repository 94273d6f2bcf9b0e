"""``none``: no alignment, B as it is (the identity map of every group).

The baseline every other method is measured against: interpolating the pair without aligning
it is plain weight averaging.
"""

from __future__ import annotations

from ..symmetries.alignment_map import Alignment
from .registry import AlignJob, AlignmentMethod, MethodOutput, MethodStyle, register_method


def _align(job: AlignJob) -> MethodOutput:
    return MethodOutput(Alignment.identity(job.spec))


METHOD = register_method(
    AlignmentMethod(
        "none",
        _align,
        "no alignment: B as it is (the identity)",
        label="no permutation",
        order=0,
        style=MethodStyle("#0072B2", "o"),
        summary="identity: plain averaging",
    )
)
