"""The alignment-method records (``lmc.perm.methods``) and ``lmc.perm.align`` reading them."""

from __future__ import annotations

import copy

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build
from lmc.pair import PairSettings
from lmc.perm import align, apply_permutation, matching_objective, random_alignment
from lmc.perm.alignment import METHODS, SETTINGS
from lmc.perm.canonical import canonicalize
from lmc.perm.methods import (
    AlignmentMethod,
    MethodOutput,
    MethodSetting,
    get_method,
    method_names,
    register_method,
    study_keys,
    unregister_method,
)
from lmc.perm.symmetry import symmetry_spec


def _pair():
    a = build("mlp", seed=1, input_size=6, width=8, depth=2, num_classes=3)
    b = build("mlp", seed=2, input_size=6, width=8, depth=2, num_classes=3)
    return a, b, torch.randn(10, 6)


def test_builtin_methods_are_records_in_their_old_order():
    assert method_names() == (
        "none", "canonical", "weight", "activation", "ste", "random", "onepass", "orthogonal",
        "learned", "orthogonal-activation",
    )  # fmt: skip
    assert METHODS == (
        "canonical", "weight", "activation", "ste", "random", "onepass", "orthogonal", "learned",
        "orthogonal-activation", "none",
    )  # fmt: skip
    assert SETTINGS["weight"] == {
        "max_iter": 100, "tol": 1e-4, "init": "onepass", "restarts": 1, "solver": "auto"
    }  # fmt: skip
    assert get_method("ste").needs_labels and get_method("ste").needs_data
    assert get_method("activation").needs_data and not get_method("activation").needs_labels
    oa = get_method("orthogonal-activation")
    assert oa.needs_data and not oa.needs_labels and oa.canonical
    assert not get_method("weight").needs_data
    assert study_keys()["weight_init"][1].legacy == "identity"


@pytest.mark.parametrize(
    "setting, value, message",
    [
        (MethodSetting("n", 1, "x", minimum=1), 0, "at least 1"),
        (MethodSetting("n", 1, "x"), 1.5, "must be integer"),
        (MethodSetting("n", 1, "x"), True, "must be integer"),
        (MethodSetting("r", 0.1, "x", type=float, positive=True), 0.0, "above 0"),
        (MethodSetting("r", 0.1, "x", type=float), float("nan"), "finite"),
        (MethodSetting("s", "a", "x", type=str, choices=("a", "b")), "c", "one of a, b"),
        (MethodSetting("n", 1, "x"), None, "needs a value"),
    ],
)
def test_a_setting_refuses_bad_values_in_one_line(setting, value, message):
    with pytest.raises(LmcError, match=message):
        setting.check(value, "setting")


def test_optional_settings_take_none_and_parse_it():
    setting = MethodSetting("holdout", None, "x", minimum=1, optional=True)
    assert setting.check(None, "s") is None and setting.parse("none", "--f") is None
    assert setting.parse("7", "--f") == 7
    with pytest.raises(LmcError, match="--f must be integer or none"):
        setting.parse("seven", "--f")


def test_a_bad_default_or_duplicate_is_refused_when_the_record_is_made():
    with pytest.raises(LmcError, match="default"):
        MethodSetting("n", 0, "x", minimum=1)
    with pytest.raises(LmcError, match="twice"):
        AlignmentMethod("m", lambda job: None, "d", settings=(MethodSetting("n", 1, "x"),) * 2)


def test_registering_a_taken_name_or_study_key_is_refused():
    with pytest.raises(LmcError, match="already registered"):
        register_method(AlignmentMethod("weight", lambda job: None, "d"))
    # "weight_x" + setting "tol" would be study key weight_x_tol: fine; but a method "weight"
    # plus a setting "max_iter" under another name collides only through the key
    clash = AlignmentMethod("weight_max", lambda job: None, "d",
                            settings=(MethodSetting("iter", 1, "x"),))  # fmt: skip
    with pytest.raises(LmcError, match="weight_max_iter"):
        register_method(clash)
    assert "weight_max" not in method_names()


def test_settings_are_checked_by_align_and_by_pair_settings():
    a, b, x = _pair()
    with pytest.raises(LmcError, match="has no setting 'steps'"):
        align("weight", a, b, inputs=x, steps=3)
    with pytest.raises(LmcError, match="setting 'init' of method 'weight' must be one of"):
        align("weight", a, b, inputs=x, init="middle")
    with pytest.raises(LmcError, match="needs labels"):
        align("ste", a, b, inputs=x)
    with pytest.raises(LmcError, match="unknown alignment method 'nope'"):
        PairSettings(align="nope")
    with pytest.raises(LmcError, match="has no setting 'max_iter'"):
        PairSettings(align="activation", align_options={"max_iter": 3})


def test_a_method_may_answer_with_any_kind_of_transform():
    """A method answering with orthogonal and invertible maps (a canonical GPT's stream and
    heads): ``align`` applies them with the model's axis roles, so the aligned B computes B's
    function; the result's ``perm`` is refused, ``info['kinds']`` says what each group got."""

    def make(seed):
        model = build("gpt", vocab=11, context=6, width=16, depth=1, heads=4, tied=False, seed=seed)
        return canonicalize(model.double())

    a, b = make(1), make(2)
    x = torch.randint(0, 11, (4, 6), generator=torch.Generator().manual_seed(0))

    def transform(job):
        symmetry = symmetry_spec(job.model_a, job.inputs[:2], spec=job.spec)
        return MethodOutput(random_alignment(symmetry, 3, "invertible"))

    register_method(AlignmentMethod("toytransform", transform, "a random symmetry element"))
    try:
        result = align("toytransform", a, b, inputs=x)
    finally:
        unregister_method("toytransform")
    kinds = set(result.info["kinds"].values())
    assert {"orthogonal", "invertible"} <= kinds
    moved = copy.deepcopy(b)
    moved.load_state_dict(result.state_dict)
    with torch.no_grad():
        assert torch.allclose(moved(x), b(x), atol=1e-8)
        assert not torch.allclose(result.state_dict["head.weight"], b.state_dict()["head.weight"])
    assert result.info["objective_after"] == pytest.approx(
        matching_objective(result.spec, a.state_dict(), result.state_dict)
    )
    assert torch.equal(
        result.apply(b.state_dict())["head.weight"], result.state_dict["head.weight"]
    )
    with pytest.raises(LmcError, match="not a permutation"):
        result.perm  # noqa: B018


def test_permutation_methods_give_the_same_state_as_apply_permutation():
    a, b, x = _pair()
    result = align("random", a, b, inputs=x, seed=4)
    expected = apply_permutation(result.spec, result.perm, b.state_dict())
    assert all(torch.equal(result.state_dict[k], v) for k, v in expected.items())
    assert set(result.info["kinds"].values()) == {"permutation"}
