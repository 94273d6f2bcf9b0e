"""Learned alignment at a fraction of its cost (issue 42 item 5): the settings that cut it (a
cosine schedule, several lambdas per step, fewer held-out judgements, early stopping, bf16
forward passes) keep B's function, do what they say, and at their legacy values leave earlier
merges' identities as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lmc.config import LmcError
from lmc.experiments.jobs import merge_identity
from lmc.perm.canonical import canonicalize
from lmc.perm.learned import learned_alignment
from lmc.perm.methods import NO_LEGACY, get_method

ROOT = Path(__file__).resolve().parents[2]
#: the settings learned alignment had before issue 42 item 5, as merges and aligned runs hold them
EARLIER = {"steps": 200, "lr": 1e-2, "batch_size": 64, "lambdas": "uniform", "heads": True,
           "head_maps": "orthogonal", "holdout": None, "max_iter": 20}  # fmt: skip


@pytest.fixture(scope="module")
def pair(canonical_gpt_pair):
    return canonical_gpt_pair


#: The defaults since the fast settings replaced the earlier ones (issue 42 item 5).
FAST_DEFAULTS = {"steps": 100, "batch_size": 16, "schedule": "cosine", "lambda_batch": 4,
                 "evals": 2}  # fmt: skip
#: Their earlier values, which committed results used.
EARLIER_VALUES = {"steps": 200, "batch_size": 64, "schedule": "constant", "lambda_batch": 1,
                  "evals": 10}  # fmt: skip


def _keeps_b(result, spec, b, data) -> bool:
    moved = canonicalize(b)  # a copy with B's function
    moved.load_state_dict(result.alignment.apply(spec, b.state_dict()))
    x = data.x_test[:4]
    with torch.no_grad():
        return torch.allclose(moved(x), b(x), atol=1e-4)


def test_every_new_setting_has_its_earlier_value_as_legacy():
    """Results made before a setting existed ran at its legacy value: the record's baselines
    are the earlier settings, and at them an aligned run's identity holds only the earlier
    keys (none of the new ones)."""
    record = get_method("learned")
    baselines = {s.name: s.baseline for s in record.settings}
    assert {k: baselines[k] for k in EARLIER} == EARLIER
    new = {s.name for s in record.settings} - set(EARLIER)
    assert new and all(record.setting(k).legacy is not NO_LEGACY for k in new)
    assert set(record.identity(baselines)) <= set(EARLIER)


def test_committed_learned_merges_keep_their_ids():
    """The committed widen-text-gpt merge table (its learned settings at the earlier values)
    gives the learned merges the identity it gave before: no learned key enters it."""
    study = json.loads((ROOT / "docs/results/widen-text-gpt/same/study.json").read_text())
    merge = study["config"]["merge"]
    assert merge["learned_steps"] == 200 and merge["learned_lr"] == 0.01
    assert not [k for k in merge_identity(merge, "learned") if k.startswith("learned_")]
    changed = {**merge, "learned_steps": 100, "learned_lambda_batch": 4}
    assert {"learned_steps", "learned_lambda_batch"} <= set(merge_identity(changed, "learned"))


def test_the_fast_settings_lower_the_held_out_loss_and_keep_b_s_function(pair):
    """Benchmarks' fast settings (a cosine schedule, four λ per step, two judgements)."""
    a, b, spec, data = pair
    result = learned_alignment(spec, a, b, data.x_train, data.y_train, steps=40, lr=0.05,
                               batch_size=16, schedule="cosine", lambda_batch=4, evals=2,
                               holdout=40)  # fmt: skip
    assert result.steps_taken == result.steps == 40 and result.precision == "fp32"
    assert result.best_loss < result.initial_loss and result.best_step > 0
    assert _keeps_b(result, spec, b, data)


def test_the_defaults_are_the_fast_settings_and_the_earlier_ones_their_legacy():
    """The fast settings kept the barrier within noise on three GPT pairs (docs/performance.md),
    so they are the defaults; each setting they changed keeps its earlier value as legacy."""
    record = get_method("learned")
    defaults = {s.name: s.default for s in record.settings}
    assert {k: defaults[k] for k in FAST_DEFAULTS} == FAST_DEFAULTS
    assert {k: record.setting(k).baseline for k in FAST_DEFAULTS} == {
        k: EARLIER_VALUES[k] for k in FAST_DEFAULTS
    }


def test_recipes_with_learned_alignment_pin_the_earlier_settings():
    """Every packaged recipe that merges with ``learned`` ran its committed results at the
    earlier settings: it pins them, so its learned merges keep their ids (none of them in the
    identity) and run as before."""
    import tomllib

    from lmc.experiments.study import recipes_dir, resolve
    from lmc.experiments.variants import split_variants

    found = 0
    for path in sorted(recipes_dir().glob("*.toml")):
        raw = tomllib.loads(path.read_text())
        variants = [v[1] for v in split_variants(raw)] if raw.get("variants") else [raw]
        for variant in variants:
            study = resolve(variant, str(path))
            table = study.get("merge") or study.get("merge_many") or {}
            if "learned" not in table.get("methods", []):
                continue
            found += 1
            for key, value in EARLIER_VALUES.items():
                assert table[f"learned_{key}"] == value, (path.name, key)
            if "merge" in study:
                identity = merge_identity(study["merge"], "learned")
                pinned = {f"learned_{key}" for key in EARLIER_VALUES}
                assert not pinned & set(identity), path.name
    assert found >= 6


def test_several_lambdas_per_step_split_the_batch_and_weigh_the_slices(pair):
    """At λ = ½ for every value, k values on k slices of the batch are the batch's loss at ½:
    the first step's loss is the same for any k, uneven slices included (batch 15, k = 2)."""
    a, b, spec, data = pair
    first = {
        k: learned_alignment(spec, a, b, data.x_train, data.y_train, steps=1, batch_size=15,
                             lambdas="midpoint", lambda_batch=k, holdout=40).train_losses[0]
        for k in (1, 2, 3)
    }  # fmt: skip
    assert first[2] == pytest.approx(first[1], rel=1e-6)
    assert first[3] == pytest.approx(first[1], rel=1e-6)


def test_stratified_lambdas_cover_the_path(pair, monkeypatch):
    """With ``lambda_batch = k`` and uniform λ, each step runs k forward passes, its values of
    λ one in each [j/k, (j+1)/k)."""
    a, b, spec, data = pair
    import lmc.perm.learned as learned

    steps: list[bool] = []
    draws: list[torch.Tensor] = []
    real_call, real_rand = learned.functional_call, torch.rand

    def call(model, state, args):
        steps.append(torch.is_grad_enabled())  # a training step, not a held-out judgement
        return real_call(model, state, args)

    def rand(*args, **kwargs):
        out = real_rand(*args, **kwargs)
        if kwargs.get("dtype") == torch.float64:  # the stratified draw
            draws.append(out.clone())
        return out

    monkeypatch.setattr(learned, "functional_call", call)
    monkeypatch.setattr(torch, "rand", rand)
    learned_alignment(spec, a, b, data.x_train, data.y_train, steps=3, batch_size=16,
                      lambda_batch=4, holdout=40)  # fmt: skip
    assert steps.count(True) == 3 * 4
    assert len(draws) == 3 and all(u.shape == (4,) for u in draws)
    values = [[(j + float(u[j])) / 4 for j in range(4)] for u in draws]
    assert all(j / 4 <= lam < (j + 1) / 4 for row in values for j, lam in enumerate(row))


def test_patience_stops_when_the_held_out_loss_stops_improving(pair):
    """A learning rate too small to move any weight leaves the held-out loss where it was: with
    patience 2 and a judgement every step the steps stop after 2, the closed form kept."""
    a, b, spec, data = pair
    result = learned_alignment(spec, a, b, data.x_train, data.y_train, steps=30, lr=1e-30,
                               batch_size=16, holdout=40, eval_every=1, patience=2)  # fmt: skip
    assert result.steps_taken == 2 and len(result.train_losses) == 2
    assert result.best_step == 0 and result.best_loss == result.initial_loss
    full = learned_alignment(spec, a, b, data.x_train, data.y_train, steps=30, lr=1e-30,
                             batch_size=16, holdout=40, eval_every=1)  # fmt: skip
    assert full.steps_taken == 30


def test_evals_sets_how_often_the_map_is_judged(pair, monkeypatch):
    a, b, spec, data = pair
    import lmc.perm.learned as learned

    calls: list[bool] = []
    real = learned.functional_call

    def spy(model, state, args):
        calls.append(torch.is_grad_enabled())
        return real(model, state, args)

    monkeypatch.setattr(learned, "functional_call", spy)
    learned_alignment(spec, a, b, data.x_train, data.y_train, steps=12, batch_size=16,
                      lambda_batch=1, holdout=40, evals=3)  # fmt: skip
    assert calls.count(False) == 1 + 3  # the closed form's judgement, then every 4 steps
    assert calls.count(True) == 12


def test_bf16_steps_keep_b_s_function_exactly(pair):
    """The maps are applied in float64 whatever the steps ran in: B's function is kept."""
    a, b, spec, data = pair
    result = learned_alignment(spec, a, b, data.x_train, data.y_train, steps=10, lr=0.05,
                               batch_size=16, holdout=40, precision="bf16")  # fmt: skip
    assert result.precision == "bf16" and result.steps_taken == 10
    assert _keeps_b(result, spec, b, data)


def test_auto_precision_resolves_on_this_machine(pair, monkeypatch):
    a, b, spec, data = pair
    monkeypatch.setenv("LMC_AUTO_PRECISION", "fp32")
    result = learned_alignment(spec, a, b, data.x_train, data.y_train, steps=1, batch_size=16,
                               holdout=40, precision="auto")  # fmt: skip
    assert result.precision == "fp32"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"schedule": "linear"}, "schedule"),
        ({"lambda_batch": 0}, "lambda_batch"),
        ({"patience": -1}, "patience"),
        ({"evals": 0}, "evals"),
        ({"precision": "fp16"}, "precision"),
    ],
)
def test_bad_settings_are_refused(pair, settings, message):
    a, b, spec, data = pair
    with pytest.raises(LmcError, match=message):
        learned_alignment(spec, a, b, data.x_train, data.y_train, steps=1, batch_size=16,
                          **settings)  # fmt: skip


def test_more_lambdas_than_the_batch_holds_are_cut_to_the_batch(pair):
    """The default four values of λ per step on a batch of 3: three slices of one example (the
    same first step as ``lambda_batch = 3``), not an error."""
    a, b, spec, data = pair
    run = {k: learned_alignment(spec, a, b, data.x_train, data.y_train, steps=1, batch_size=3,
                                lambda_batch=k, holdout=40)  # fmt: skip
           for k in (3, 4)}  # fmt: skip
    assert run[4].train_losses == run[3].train_losses
