"""``onepass``: Git Re-Basin's greedy one-pass baseline (App. A.7).

Each layer is matched once, from the input towards the output, on its incoming weights under
the layers already decided. The algorithm is :func:`lmc.perm.methods.weight_matching.
one_pass_matching`, beside weight matching, which starts from its answer by default and reuses
its similarity products; this module is the method's record.
"""

from __future__ import annotations

from .registry import AlignJob, AlignmentMethod, MethodOutput, MethodStyle, register_method
from .weight_matching import one_pass_matching


def _align(job: AlignJob) -> MethodOutput:
    return MethodOutput(one_pass_matching(job.spec, job.state_a, job.state_b).perm)


METHOD = register_method(
    AlignmentMethod(
        "onepass",
        _align,
        "Git Re-Basin's greedy one-pass matching (App. A.7): each layer once, input to output",
        label="one-pass matching",
        order=30,
        style=MethodStyle("#56B4E9", "P"),
        summary="Git Re-Basin's one-pass greedy baseline: each layer matched once, in order",
    )
)
