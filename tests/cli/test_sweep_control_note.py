"""lmc sweep notes a study that lists a canonical method without the canonical control."""

from __future__ import annotations

from lmc.cli.sweep import _control_notes


def test_a_canonical_method_without_its_control_gets_one_note():
    study = {"merge": {"methods": ["none", "orthogonal", "learned"]}}
    (note,) = _control_notes(study)
    assert "orthogonal, learned" in note and "'canonical'" in note
    assert _control_notes({"merge": {"methods": ["none", "canonical", "orthogonal"]}}) == []
    assert _control_notes({"merge": {"methods": ["none", "weight"]}}) == []


def test_widened_variants_need_no_control_and_variants_note_once():
    same = {"merge": {"methods": ["none", "orthogonal"]}, "sweep": {}}
    wide = {"merge": {"methods": ["none", "orthogonal"]}, "sweep": {"width_ratio": 2}}
    study = {"variants": [{"study": same}, {"study": same}, {"study": wide}]}
    assert len(_control_notes(study)) == 1
    assert _control_notes({"variants": [{"study": wide}]}) == []
