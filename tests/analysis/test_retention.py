"""Initialisation retention: coefficients and shares of W_0 in W_T, the shared subspace, the
rebuilt initial weights and the decay budget (docs/science.md, "Initialisation retention")."""

from __future__ import annotations

import json
import math

import pytest
import torch

import lmc.perm as perm
import lmc.train.runs as train_runs
from lmc.analysis import RECORD_KEYS, RETENTION_KEYS
from lmc.analysis.retention import (
    decay_budget,
    decay_factor,
    init_retention,
    initial_state,
    pair_retention,
    run_retention,
    shared_energy,
    state_retention,
    step_learning_rates,
)
from lmc.cli.main import main
from lmc.config import LmcError
from lmc.models import build
from lmc.pair import AnalysisOptions, PairSettings, run_pair
from lmc.store import RunStore
from lmc.train import make_config, make_optimizer, settings_of, spawn_config, train_run

MLP = {"width": 16, "depth": 2}


def _config(digits, **train):
    return make_config("digits", "mlp", dict(MLP), data=digits, **train)


# --- one matrix / state dicts: exact constructions ------------------------------------------


def test_final_weights_equal_to_the_init_give_coefficient_one_and_share_one():
    state = build("vgg11", width=0.125, in_channels=3, num_classes=10, seed=3).state_dict()
    init = {name: value.clone() for name, value in state.items()}
    found = state_retention(state, init)
    assert found and set(found) == {n for n, v in state.items() if v.dim() >= 2}
    assert any(state[name].dim() == 4 for name in found)  # conv kernels are measured too
    for name, values in found.items():
        assert values["init_coef"] == 1.0 and values["init_share"] == 1.0, name
        assert values["init_norm"] == values["final_norm"] > 0


@pytest.mark.parametrize("c", [0.75, -0.5, 0.0])
def test_scaled_init_plus_an_orthogonal_part_gives_exactly_its_coefficient(c):
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randint(-3, 4, (8, 6), generator=gen, dtype=torch.float64)
    x = torch.randint(-3, 4, (8, 6), generator=gen, dtype=torch.float64)
    # integer arithmetic: <R, W_0> = |W_0|^2 <X, W_0> - <X, W_0> |W_0|^2 = 0 exactly
    r = (w0 * w0).sum() * x - (x * w0).sum() * w0
    assert (r * w0).sum() == 0 and (r * r).sum() > 0
    found = init_retention(c * w0 + r, w0)
    assert found["init_coef"] == c
    expected_share = abs(c) * w0.norm() / (c * w0 + r).norm()
    assert found["init_share"] == pytest.approx(float(expected_share), rel=1e-12)
    # the same through a state dict, with the weight as a conv kernel
    kernels = state_retention({"conv.weight": (c * w0 + r).reshape(8, 6, 1, 1)},
                        {"conv.weight": w0.reshape(8, 6, 1, 1)})  # fmt: skip
    assert kernels["conv.weight"]["init_coef"] == c


def test_degenerate_and_mismatched_weights():
    zero = torch.zeros(3, 4)
    found = init_retention(torch.ones(3, 4), zero)
    assert math.isnan(found["init_coef"]) and math.isnan(found["init_share"])
    with pytest.raises(LmcError, match="shape"):
        init_retention(torch.ones(3, 4), torch.ones(4, 3))
    with pytest.raises(LmcError, match="no 'fc.weight'"):
        state_retention({"fc.weight": torch.ones(2, 2)}, {})


def test_shared_subspace_energy_of_exact_constructions():
    final = torch.zeros(6, 5, dtype=torch.float64)
    final[0, 0], final[1, 1] = 3.0, 2.0  # A_T = B_T: A_T + B_T = diag(6, 4), stable rank 1.44
    inside = final.clone()  # all of W_0 in the shared top-2 subspaces
    outside = torch.zeros(6, 5, dtype=torch.float64)
    outside[2:, 2:] = 1.0  # none of it
    found = shared_energy(final, final.clone(), inside, outside)
    assert found["init_shared_rank"] == 2  # ceil(1.44)
    assert found["init_shared_energy_a"] == pytest.approx(1.0, abs=1e-12)
    assert found["init_shared_energy_b"] == pytest.approx(0.0, abs=1e-12)
    assert found["init_shared_chance"] == 2 * 2 / (6 * 5)
    # top-1 only: W_0 = diag(3, 2) keeps 9 of its 13 units of energy there
    one = shared_energy(final, final, inside, inside, rank=1)
    assert one["init_shared_energy_a"] == pytest.approx(9 / 13, abs=1e-12)
    assert one["init_shared_rank"] == 1
    both = pair_retention({"w": final}, {"w": final}, {"w": inside}, {"w": outside})
    assert set(both["w"]) == set(RETENTION_KEYS)
    assert both["w"]["init_coef_a"] == 1.0 and both["w"]["init_coef_b"] == 0.0
    zero = shared_energy(torch.zeros(2, 2), torch.zeros(2, 2), inside[:2, :2], inside[:2, :2])
    assert zero["init_shared_rank"] is None and math.isnan(zero["init_shared_energy_a"])


# --- the decay budget ------------------------------------------------------------------------


def test_constant_schedule_budget_is_steps_times_lr_times_wd(digits):
    lr, wd, epochs, size, batch = 2.0**-4, 2.0**-10, 3, 1000, 64
    config = _config(digits, epochs=epochs, batch_size=batch, lr=lr, weight_decay=wd,
                     schedule="constant")  # fmt: skip
    steps = epochs * (size // batch)
    assert decay_budget(config, size) == steps * lr * wd  # powers of two: exact
    usual = _config(digits, epochs=epochs, batch_size=batch, schedule="constant")
    assert decay_budget(usual, size) == pytest.approx(steps * 0.05 * 3e-3, rel=1e-12)


def test_decay_factor_per_optimiser(digits):
    size, batch, epochs = 6400, 64, 10
    steps = epochs * (size // batch)
    common = {"epochs": epochs, "batch_size": batch, "schedule": "constant", "lr": 0.05}
    plain = _config(digits, momentum=0.0, **common)
    budget = decay_budget(plain, size)
    assert decay_factor(plain, size) == pytest.approx((1 - 0.05 * 3e-3) ** steps, rel=1e-12)
    adamw = _config(digits, optimizer="adamw", **common)
    assert decay_factor(adamw, size) == pytest.approx((1 - 0.05 * 3e-3) ** steps, rel=1e-12)
    assert decay_factor(_config(digits, optimizer="adam", **common), size) is None
    # heavy-ball momentum 0.9 multiplies the decay by about 1 / (1 - 0.9)
    heavy = _config(digits, momentum=0.9, **common)
    assert decay_factor(heavy, size) == pytest.approx(math.exp(-budget / 0.1), rel=0.03)
    with pytest.raises(LmcError, match="kind 'train'"):
        decay_budget({**plain, "kind": "merged"}, size)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_decay_factor_is_what_the_optimizer_does_with_zero_gradients(digits, optimizer):
    config = _config(digits, epochs=2, batch_size=50, optimizer=optimizer, lr=0.5,
                     weight_decay=0.05, warmup_epochs=0.5)  # fmt: skip
    layer = torch.nn.Linear(1, 1, bias=False, dtype=torch.float64)
    torch.nn.init.ones_(layer.weight)
    opt = make_optimizer(layer, settings_of(config), torch.device("meta"))  # the plain kernels
    for rates in step_learning_rates(config, 500):
        for lr in rates:
            opt.param_groups[0]["lr"] = lr
            layer.weight.grad = torch.zeros_like(layer.weight)
            opt.step()
    assert float(layer.weight.detach()) == pytest.approx(decay_factor(config, 500), rel=1e-12)


# --- real runs: bit-identical initial weights, the recorded budget ---------------------------


def test_rebuilt_init_is_bit_identical_and_runs_record_their_budget(digits, tmp_path, monkeypatch):
    starts = []
    real_fit = train_runs.fit

    def spy(model, *args, **kwargs):
        starts.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return real_fit(model, *args, **kwargs)

    monkeypatch.setattr(train_runs, "fit", spy)
    store = RunStore(tmp_path / "runs")
    config = _config(digits, epochs=2, batch_size=256, init_seed=7, data_seed=3,
                     warmup_epochs=0.5)  # fmt: skip
    run, reused = train_run(config, store=store, data=digits)
    assert not reused and len(starts) == 1
    rebuilt = initial_state(run.config)
    assert list(rebuilt) == list(starts[0])
    for name, value in starts[0].items():
        assert rebuilt[name].dtype == value.dtype and torch.equal(rebuilt[name], value), name

    size = len(digits.x_train)
    recorded = json.loads((run.path / "metrics.json").read_text())["decay_budget"]
    assert recorded == decay_budget(run.config, size) > 0  # cosine with warm-up: bit for bit
    assert recorded == run.metrics["history"][-1]["decay_budget"]
    assert run.config == config  # the budget is in the metrics, not the config

    found = run_retention(run, size)
    assert found["decay_budget_source"] == "metrics" and found["decay_budget"] == recorded
    assert 0 < found["decay_factor"] < 1
    assert set(found["layers"]) == {"fc1.weight", "fc2.weight", "out.weight"}
    assert all(0 < v["init_share"] <= 1 for v in found["layers"].values())

    # a spawned run: the parent's trunk and its own epochs, from the parent's init
    child, _ = train_run(spawn_config(run, 1, data_seed=9), store=store, data=digits)
    assert len(starts) == 3  # the child's trunk, then its own epochs
    assert all(torch.equal(starts[1][k], v) for k, v in starts[0].items())
    assert child.metrics["decay_budget"] == decay_budget(child.config, size)


# --- the layerwise analysis, the pair pipeline and `lmc analyze` -----------------------------


def test_run_pair_permutes_b_init_as_it_aligns_b(digits):
    a = build("mlp", input_size=64, width=16, depth=2, seed=1).eval()
    init_a = build("mlp", input_size=64, width=16, depth=2, seed=5).state_dict()
    spec = perm.spec_from_model(a, digits.x_train[:2])
    p = perm.random_permutation(spec, seed=2)
    b = build("mlp", input_size=64, width=16, depth=2).eval()
    b.load_state_dict(perm.apply_permutation(spec, p, a.state_dict()))
    init_b = perm.apply_permutation(spec, p, init_a)  # B_0 in B's own frame
    settings = PairSettings(align="weight", path=None,
                            analysis=AnalysisOptions(lambdas=(0.5,), max_examples=64))  # fmt: skip
    result = run_pair(a, b, digits, settings, init_states=(init_a, init_b))
    records = result.analysis.records
    assert [r["name"] for r in records] == ["layer1", "layer2", "logits"]
    for r in records:  # B aligned is A exactly, so B_0 permuted alike is A_0
        assert r["init_coef_b"] == r["init_coef_a"] and r["init_share_b"] == r["init_share_a"]
        assert r["init_shared_energy_b"] == pytest.approx(r["init_shared_energy_a"], abs=1e-12)
        assert 1 <= r["init_shared_rank"] <= 10
    plain = run_pair(a, b, digits, settings)
    assert all(r[key] is None for r in plain.analysis.records for key in RETENTION_KEYS)


def test_lmc_analyze_prints_and_writes_the_retention_columns(digits, tmp_path, capsys):
    store = RunStore(tmp_path / "runs")
    runs = []
    for seed in (1, 2):  # stored final weights = the initial ones
        config = _config(digits, epochs=1, init_seed=seed, data_seed=seed)
        state = build(config["model"], seed=seed, **config["model_options"]).state_dict()
        runs.append(store.save(config, state, {"final_test_accuracy": 0.1}))
    argv = ["analyze", str(runs[0].path), str(runs[1].path), "--quiet", "--device", "cpu"]
    argv += ["--max-examples", "20"]
    assert main([*argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert all(set(r) == set(RECORD_KEYS) for r in payload["layers"])
    for r in payload["layers"]:
        assert r["init_coef_a"] == 1.0 and r["init_share_b"] == 1.0
    kept = payload["settings"]["retention"]
    assert kept["a"]["decay_budget_source"] == "config"  # stored without one
    assert kept["a"]["decay_budget"] == decay_budget(runs[0].config, len(digits.x_train))
    assert set(RETENTION_KEYS) <= set(RECORD_KEYS)  # the columns of layers.csv

    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Initial weights kept" in printed and "coef A = init_coef_a" in printed
    assert max(len(line) for line in printed.splitlines()) <= 100
