"""The table helpers the analysis's files and ``lmc analyze``'s printout share
(:mod:`lmc.analysis.output`)."""

from __future__ import annotations

import math

from lmc.analysis.output import aligned_lines, format_cell, logit_norm_lines


def test_format_cell_marks_undefined_flags_and_nan_and_writes_floats_its_way():
    def number(v):
        return f"<{v}>"

    cells = [format_cell(v, number) for v in (None, True, False, math.nan, 0.5, 3, "x")]
    assert cells == ["-", "yes", "no", "nan", "<0.5>", "3", "x"]


def test_aligned_lines_right_align_each_column_to_its_widest_cell():
    assert aligned_lines(["a", "bbb"], [["10", "1"], ["1", "22"]]) == [
        " a  bbb",
        "10    1",
        " 1   22",
    ]
    assert aligned_lines(["a", "bb"], []) == ["a  bb"]  # no rows: the header alone


def test_logit_norm_lines_only_for_logits_records_that_have_them():
    records = [
        {"kind": "hidden", "lam": 0.5, "logit_norm": 1.0},
        {"kind": "logits", "lam": 0.5, "logit_norm": None},
        {"kind": "logits", "lam": 0.25, "logit_norm": 1.0, "logit_norm_a": 2.0,
         "logit_norm_b": None, "logit_norm_lewc": 3.0},
    ]  # fmt: skip
    assert logit_norm_lines(records, lambda v: "-" if v is None else f"{v:g}") == [
        "lam=0.25: mean logit norm: merged 1, A 2, B -, LEWC prediction 3"
    ]
