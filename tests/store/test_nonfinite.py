"""Weights that are not finite are refused wherever a stored run is loaded for evaluation
(issue 41): ``lmc interpolate``, ``lmc analyze`` and ``lmc merge`` exit 2 with one line naming
the tensor, and the library's load path (``Run.state_dict``, ``Run.build_model``) raises the
same, where before the verbs measured NaN losses and exited 0. B's run holds one NaN and a
consistent manifest (written by the store itself), so only the values can tell."""

from __future__ import annotations

import pytest
import torch

from lmc.cli.main import main
from lmc.config import LmcError
from lmc.models import build
from lmc.store import RunStore, load_run
from lmc.train.runs import make_config

OPTIONS = {"width": 16, "depth": 2}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, digits):
    """Two digits MLP runs (untrained weights are enough): A finite, B with one NaN at
    [3, 5] of its first weight matrix."""
    store = RunStore(tmp_path_factory.mktemp("runs"))
    out = []
    for seed in (1, 2):
        config = make_config("digits", "mlp", OPTIONS, data=digits, epochs=1, init_seed=seed,
                             data_seed=seed)  # fmt: skip
        state = build("mlp", seed=seed, **config["model_options"]).state_dict()
        out.append((store, config, state))
    store, config_b, state_b = out[1]
    name = next(k for k, v in state_b.items() if v.dim() == 2)
    state_b = {k: v.clone() for k, v in state_b.items()}
    state_b[name][3, 5] = float("nan")
    run_a = store.save(out[0][1], out[0][2], {})
    run_b = store.save(config_b, state_b, {})
    load_run(run_b.path, verify=True)  # whole: the manifest vouches for the NaN
    return store, run_a, run_b, name


def _refused(capsys, argv, name):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"tensor {name!r} holds 1 non-finite value (NaN or inf)" in err
    assert "model.safetensors" in err
    assert captured.out == ""


@pytest.mark.parametrize("verb", ["interpolate", "analyze"])
def test_a_pair_verb_refuses_a_run_with_a_nan(verb, runs, capsys, tmp_path):
    store, run_a, run_b, name = runs
    argv = [verb, str(run_a.path), str(run_b.path), "--device", "cpu", "--quiet", "--json",
            "--out", str(tmp_path / "out")]  # fmt: skip
    _refused(capsys, argv, name)
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_merge_refuses_a_run_with_a_nan(runs, capsys, tmp_path):
    store, run_a, run_b, name = runs
    argv = ["merge", str(run_a.path), str(run_b.path), "--runs-dir", str(store.root),
            "--device", "cpu", "--quiet"]  # fmt: skip
    before = set(store.root.iterdir())
    _refused(capsys, argv, name)
    assert set(store.root.iterdir()) == before  # no merged run


def test_the_library_load_path_refuses_it_too(runs):
    _, run_a, run_b, name = runs
    run = load_run(run_b.path)
    for load in (run.state_dict, run.build_model):
        with pytest.raises(LmcError, match=rf"tensor '{name}' holds 1 non-finite value") as err:
            load()
        assert str(run_b.path) in str(err.value)
    assert torch.isfinite(load_run(run_a.path).state_dict()[name]).all()  # A loads


def test_an_infinity_counts_as_well(tmp_path, digits):
    config = make_config("digits", "mlp", OPTIONS, data=digits, epochs=1)
    state = build("mlp", seed=0, **config["model_options"]).state_dict()
    bias = next(k for k, v in state.items() if v.dim() == 1)
    state[bias][:2] = torch.tensor([float("inf"), -float("inf")])
    run = RunStore(tmp_path).save(config, state, {})
    with pytest.raises(LmcError, match=rf"tensor '{bias}' holds 2 non-finite values"):
        load_run(run.path).build_model()
