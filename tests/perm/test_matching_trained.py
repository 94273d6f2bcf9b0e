"""Activation matching, STE and ``align`` on exact constructions and on trained MLPs."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build
from lmc.perm import (
    ActivationMatchingResult,
    SteMatchingResult,
    activation_matching,
    align,
    apply_permutation,
    invert_permutation,
    matching_objective,
    random_permutation,
    spec_from_model,
    ste_matching,
    weight_matching,
)
from lmc.perm.activation_match import CrossStats
from lmc.train import TrainSettings, evaluate, fit

MLP = dict(input_size=64, width=128, depth=3)
INFO_KEYS = {"method", "seed", "objective_before", "objective_after", "moved_fraction", "seconds"}


@pytest.fixture(scope="module")
def trained(digits):
    models = []
    for seed in (1, 2):
        model = build("mlp", seed=seed, **MLP)
        fit(model, digits, TrainSettings(epochs=8, init_seed=seed, data_seed=seed))
        models.append(model.eval())
    return models


def _midpoint_loss(state_a, state_b, digits) -> float:
    model = build("mlp", **MLP)
    model.load_state_dict({k: (state_a[k] + state_b[k]) / 2 for k in state_a})
    return evaluate(model.eval(), digits.x_test, digits.y_test)["loss"]


def test_matching_methods_on_two_trained_mlps(trained, digits):
    a, b = trained
    sa = a.state_dict()
    naive = _midpoint_loss(sa, b.state_dict(), digits)
    results = {}
    for method, settings in (("weight", {}), ("activation", {}), ("ste", {"steps": 20})):
        result = align(
            method, a, b, inputs=digits.x_train, labels=digits.y_train, seed=0, **settings
        )
        info = result.info
        results[method] = (_midpoint_loss(sa, result.state_dict, digits), info)
        assert info["objective_after"] > info["objective_before"]
        assert set(info) >= INFO_KEYS
        assert set(info["moved_fraction"]) == {"fc1", "fc2", "fc3"}
    wm_loss, wm_info = results["weight"]
    am_loss = results["activation"][0]
    ste_loss, ste_info = results["ste"]
    print(
        f"\nmidpoint test loss: naive {naive:.4f}, weight {wm_loss:.4f}, "
        f"activation {am_loss:.4f}, ste {ste_loss:.4f} (held-out: wm "
        f"{ste_info['ste_initial_loss']:.4f} -> ste {ste_info['ste_best_loss']:.4f})"
    )
    assert wm_loss < naive and am_loss < naive
    assert ste_loss <= wm_loss + 0.02
    assert ste_info["ste_best_loss"] <= ste_info["ste_initial_loss"]  # by construction


def test_ste_is_seeded(trained, digits):
    a, b = trained
    x, y = digits.x_train[:600], digits.y_train[:600]
    r1 = align("ste", a, b, inputs=x, labels=y, seed=3, steps=5)
    r2 = align("ste", a, b, inputs=x, labels=y, seed=3, steps=5)
    assert all(torch.equal(r1.perm[g], r2.perm[g]) for g in r1.perm)
    assert r1.info["ste_train_losses"] == r2.info["ste_train_losses"]


def test_ste_matching_returns_its_result_and_restores_modes(trained, digits):
    a, b = trained
    x, y = digits.x_train[:300], digits.y_train[:300]
    spec = spec_from_model(a, x[:2])
    a.train()
    try:
        result = ste_matching(spec, a, b, x, y, steps=3, seed=1, holdout=60)
        assert all(m.training for m in a.modules())  # restored (the MLP ran in eval mode)
    finally:
        a.eval()
    assert isinstance(result, SteMatchingResult)
    assert len(result.train_losses) == result.steps == 3
    assert result.holdout == 60 and not result.train_mode
    assert 1 <= result.candidates <= 5 and 0 <= result.best_step <= 4
    assert result.best_loss <= result.initial_loss
    if result.best_step == 0:  # step 0's candidate is weight matching's answer
        wm = weight_matching(spec, a.state_dict(), b.state_dict(), seed=1).perm
        assert all(torch.equal(result.perm[g], wm[g]) for g in wm)


@pytest.mark.parametrize(
    "name,options",
    [
        ("mlp", dict(input_size=64, width=32, depth=3, activation="tanh", norm="layer")),
        ("resnet20", dict(in_channels=1, width=0.5, activation="tanh", norm="batch")),
        ("vgg11", dict(in_channels=1, width=0.125, activation="gelu", norm="layer")),
    ],
)
def test_activation_matching_recovers_a_known_permutation(name, options, digits):
    a = build(name, seed=5, **options).eval()
    spec = spec_from_model(a, digits.x_train[:2])
    pi = random_permutation(spec, 2)
    b = build(name, **options).eval()
    b.load_state_dict(apply_permutation(spec, pi, a.state_dict()))
    b.train()  # matching runs both in eval mode and restores every flag
    result = activation_matching(spec, a, b, digits.x_train[:128], batch_size=64)
    assert isinstance(result, ActivationMatchingResult)
    assert b.training and all(m.training for m in b.modules())
    assert not any(m.training for m in a.modules())
    assert result.examples == 128
    assert set(result.points) == set(spec.group_sizes)
    assert all(result.points[g] for g in spec.group_sizes)
    expected = invert_permutation(pi)
    for g in spec.group_sizes:
        assert torch.equal(result.perm[g], expected[g]), g


def test_dead_units_give_no_nan():
    stats = CrossStats(3, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        fa = torch.randn(10, 3, generator=gen)
        fb = torch.randn(10, 3, generator=gen)
        fa[:, 1] = 0.0  # a dead ReLU in A
        fb[:, 2] = 0.0  # and one in B
        stats.update(fa, fb)
    corr = stats.finalize("correlation")
    assert torch.isfinite(corr).all()
    assert torch.all(corr[1] == 0) and torch.all(corr[:, 2] == 0)
    assert torch.isfinite(stats.finalize("covariance")).all()


def test_align_random_and_none(digits):
    a = build("mlp", seed=1, input_size=64, width=16, depth=2)
    b = build("mlp", seed=2, input_size=64, width=16, depth=2)
    none = align("none", a, b, inputs=digits.x_train[:4])
    assert none.info["objective_after"] == none.info["objective_before"]
    assert all(f == 0 for f in none.info["moved_fraction"].values())
    r = align("random", a, b, inputs=digits.x_train[:4], seed=4)
    assert all(f > 0 for f in r.info["moved_fraction"].values())
    assert r.info["objective_after"] == pytest.approx(
        matching_objective(r.spec, a.state_dict(), b.state_dict(), r.perm)
    )
    # the state dict is B's, permuted, with every entry
    assert set(r.state_dict) == set(b.state_dict())


def test_align_errors(digits):
    a = build("mlp", seed=1, input_size=64, width=16, depth=2)
    wider = build("mlp", seed=2, input_size=64, width=20, depth=2)
    deeper = build("mlp", seed=2, input_size=64, width=16, depth=3)
    x = digits.x_train[:4]
    with pytest.raises(
        LmcError, match=r"option 'width' is 16 in A but 20 in B \('fc1.weight' has shape"
    ):
        align("weight", a, wider, inputs=x)
    with pytest.raises(LmcError, match="'fc3.weight' is in B but not in A"):
        align("weight", a, deeper, inputs=x)
    with pytest.raises(LmcError, match="unknown alignment method"):
        align("magic", a, a, inputs=x)
    with pytest.raises(LmcError, match="no setting 'steps'"):
        align("weight", a, a, inputs=x, steps=3)
    with pytest.raises(LmcError, match="needs labels"):
        align("ste", a, a, inputs=x)
