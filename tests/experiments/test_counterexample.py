"""Git Re-Basin's counterexample (App. A.6): exact solutions, all four permuted paths."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.experiments.counterexample import (
    counterexample_data,
    counterexample_paths,
    counterexample_solutions,
    draw_counterexample_paths,
    hidden_permutations,
)
from lmc.perm import apply_permutation, spec_from_model


def test_data_is_seeded_uniform_and_labelled_by_the_quadrant():
    x, y = counterexample_data(2000, seed=3)
    x2, y2 = counterexample_data(2000, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, counterexample_data(2000, seed=4)[0])
    assert x.shape == (2000, 2) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert float(x.min()) >= -1 and float(x.max()) <= 1
    assert torch.equal(y, ((x[:, 0] < 0) & (x[:, 1] > 0)).long())
    assert 0.2 < float(y.double().mean()) < 0.3  # a quarter of the square
    with pytest.raises(LmcError, match="n"):
        counterexample_data(0)


def test_both_solutions_are_perfect_and_compute_the_min_construction():
    x, y = counterexample_data(8192, seed=0)
    model_a, model_b = counterexample_solutions()
    assert model_a.lmc_spec["name"] == "mlp"
    with torch.no_grad():
        out_a, out_b = model_a(x), model_b(x)
    assert (out_a.argmax(1) == y).all() and (out_b.argmax(1) == y).all()
    # logit_1 - logit_0 = 8 min(ReLU(-x1), x2) for A and 8 min(ReLU(x2), -x1) for B
    torch.testing.assert_close(
        out_a[:, 1] - out_a[:, 0], 8 * torch.minimum((-x[:, 0]).relu(), x[:, 1])
    )
    torch.testing.assert_close(
        out_b[:, 1] - out_b[:, 0], 8 * torch.minimum(x[:, 1].relu(), -x[:, 0])
    )
    # A's first layer ignores x2's sign, B's ignores x1's: they test in opposite layers
    assert model_a.fc1.weight[0].tolist() == [-1.0, 0.0]
    assert model_b.fc1.weight[0].tolist() == [0.0, 1.0]


def test_the_four_permutations_keep_b_and_all_leave_a_barrier():
    x, y = counterexample_data(4096, seed=0)
    model_a, model_b = counterexample_solutions()
    perms = hidden_permutations(model_b)
    assert len(perms) == 4
    assert len({tuple(tuple(p.tolist()) for p in perm.values()) for perm in perms}) == 4
    spec = spec_from_model(model_b, x[:2])
    for perm in perms:
        permuted = counterexample_solutions()[1]
        permuted.load_state_dict(apply_permutation(spec, perm, model_b.state_dict()))
        with torch.no_grad():
            torch.testing.assert_close(permuted(x), model_b(x))
    paths = counterexample_paths(n=4096, seed=0, lambdas=21)
    assert len(paths) == 4
    for path in paths:
        assert path.accuracy[0] == 1.0 and path.accuracy[-1] == 1.0
        assert path.lambdas[0] == 0.0 and path.lambdas[-1] == 1.0 and 0.5 in path.lambdas
        assert path.max_minus_mean_loss > 0.05, path.label
        assert path.loss_barrier > 0.05, path.label
        assert path.accuracy_barrier > 0.05, path.label


def test_path_to_itself_has_no_barrier_so_the_measure_can_fail():
    # control: interpolating A with A is constant, its barrier is exactly 0
    from lmc.experiments import counterexample as ce

    model_a, _ = counterexample_solutions()
    x, y = counterexample_data(1024, seed=1)
    loss, acc = ce._evaluate(model_a, x, y)
    path = ce.PermutedPath({}, [0.0, 0.5, 1.0], [loss] * 3, [acc] * 3)
    assert path.max_minus_mean_loss == 0.0 and path.accuracy_barrier == 0.0


def test_path_figure_draws_one_line_per_permutation():
    from matplotlib.figure import Figure

    paths = counterexample_paths(n=512, seed=0, lambdas=5)
    ax = Figure().add_subplot()
    assert draw_counterexample_paths(ax, paths, "loss") is ax
    assert len(ax.get_lines()) == 4
    ax2 = Figure().add_subplot()
    draw_counterexample_paths(ax2, paths, "accuracy")
    assert len(ax2.get_lines()) == 4
    with pytest.raises(LmcError, match="metric"):
        draw_counterexample_paths(ax, paths, "error")
