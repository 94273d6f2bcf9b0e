"""The stored-run workflows of ``lmc align`` and ``lmc merge``, called as library functions."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.pair import align_runs, merge_runs
from lmc.store import RunStore, load_run, load_tensors, read_json

OPTIONS = dict(input_size=64, width=16, depth=2)


@pytest.fixture(scope="module")
def permuted(tmp_path_factory, digits, save_permuted_runs):
    """A trained MLP stored as a run, and two copies of it under random permutations."""
    store = RunStore(tmp_path_factory.mktemp("runs"))
    model, runs = save_permuted_runs(store, digits, OPTIONS, (31, 32))
    return store, model, runs


def test_align_runs_undoes_a_permutation_and_is_reused(permuted):
    store, model, runs = permuted
    aligned = align_runs(runs[0], runs[1].path, "weight", seed=0, runs_dir=store.root)
    assert not aligned.reused and aligned.path.parent == store.root
    run = load_run(aligned.path)
    assert run.config["kind"] == "aligned" and run.config["align"]["source"] == runs[1].name
    for key, value in model.state_dict().items():
        torch.testing.assert_close(run.state_dict()[key], value)
    record = aligned.record
    assert record["objective_after"] >= record["objective_before"]
    assert record["objective_after"] > record["objective_before"]  # B was moved
    assert set(aligned.group_sizes) == set(load_tensors(aligned.path / "perm.safetensors"))
    assert read_json(aligned.path / "perm.json")["method"] == "weight"
    again = align_runs(runs[0], runs[1], "weight", seed=0, runs_dir=store.root)
    assert again.reused and again.path == aligned.path and again.record == record


def test_align_runs_refuses_a_canonical_method(permuted):
    store, _, runs = permuted
    with pytest.raises(LmcError, match="interpolate/analyze --align orthogonal"):
        align_runs(runs[0], runs[1], "orthogonal", runs_dir=store.root)


@pytest.mark.parametrize("method", ["weight", "activation"])
def test_merge_runs_of_permuted_copies_is_the_model(permuted, digits, method):
    """weight: merge-many; activation: every copy aligned onto RUN 1 (anchored), as the
    method registry offers it to lmc merge."""
    store, model, runs = permuted
    merged = merge_runs(runs, method, runs_dir=store.root, align_examples=0)
    run = load_run(merged.path)
    assert run.config["merge"]["align"] == method and not merged.reused
    with torch.no_grad():
        x = digits.x_test
        torch.testing.assert_close(run.build_model()(x), model(x), atol=1e-5, rtol=0)
    record = merged.record
    assert record["merged"]["test_loss"] == pytest.approx(record["inputs"][0]["test_loss"])
    assert {"0.fc1", "2.fc2"} <= set(load_tensors(merged.path / "perms.safetensors"))
    if method == "activation":
        assert record["anchored"] and record["alignments"][0] is None
        assert run.config["merge"]["align_examples"] is None  # 0: the whole training split
    assert merge_runs(runs, method, runs_dir=store.root, align_examples=0).reused


def test_merge_runs_without_alignment_averages(permuted, tmp_path):
    store, model, runs = permuted
    merged = merge_runs(runs[:2], "none", runs_dir=store.root, summary_dir=tmp_path / "out")
    state = load_run(merged.path).state_dict()
    a, b = runs[0].state_dict(), runs[1].state_dict()
    for key in a:
        torch.testing.assert_close(state[key], (a[key] + b[key]) / 2)
    assert read_json(tmp_path / "out" / "merge.json")["run_dir"] == str(merged.path)


def test_merge_runs_refuses_rounds_for_an_anchored_method(permuted):
    store, _, runs = permuted
    with pytest.raises(LmcError, match="--rounds"):
        merge_runs(runs, "activation", rounds=2, runs_dir=store.root)
