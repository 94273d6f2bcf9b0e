"""Softmax temperature calibration: the beta search, and the split / cross-fitted subsets."""

import math

import pytest
import torch
import torch.nn.functional as F

from lmc.config import LmcError
from lmc.metrics import (
    AUTO_MIN_CALIBRATION,
    BETA_MAX,
    at_bound,
    calibration_split,
    cross_entropy_at,
    crossfit_folds,
    fit_inverse_temperature,
    fit_inverse_temperatures,
    resolve_calibration,
)
from lmc.metrics.result import LambdaMetrics


def sampled_problem(n: int, classes: int, scale: float, seed: int):
    """True logits z, labels drawn from softmax(z) (so beta = 1 is the true temperature of z)."""
    gen = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(n, classes, generator=gen, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(z, dim=1), 1, generator=gen).squeeze(1)
    return z, labels


@pytest.mark.parametrize("seed", [0, 1])
def test_recovers_a_known_inverse_temperature(seed):
    z, labels = sampled_problem(40000, 10, 2.0, seed)
    logits = (z / 7.0).float()  # true beta = 7
    beta = fit_inverse_temperature(logits, labels)
    assert beta == pytest.approx(7.0, rel=0.02)


def test_fit_is_the_minimum_of_the_mean_cross_entropy():
    z, labels = sampled_problem(5000, 5, 3.0, 2)
    logits = 0.3 * z + 0.5 * torch.randn(
        z.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64
    )
    beta = fit_inverse_temperature(logits, labels)
    best = cross_entropy_at(logits, labels, beta)
    for factor in (0.98, 1.02, 0.5, 2.0):
        assert cross_entropy_at(logits, labels, beta * factor) > best


def test_cross_entropy_at_matches_torch():
    z, labels = sampled_problem(300, 4, 1.0, 4)
    want = F.cross_entropy(2.5 * z, labels).item()
    assert cross_entropy_at(z.float(), labels, 2.5) == pytest.approx(want, rel=1e-6)
    assert cross_entropy_at(z, labels) == pytest.approx(F.cross_entropy(z, labels).item())


def test_separable_logits_hit_the_upper_bound():
    labels = torch.arange(10) % 3
    logits = F.one_hot(labels, 3).float()  # always right: loss falls forever as beta grows
    assert fit_inverse_temperature(logits, labels) == pytest.approx(BETA_MAX, rel=1e-3)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(LmcError, match="non-finite"):
        fit_inverse_temperature(torch.tensor([[0.0, float("nan")]]), torch.tensor([0]))
    with pytest.raises(LmcError, match="shape"):
        fit_inverse_temperature(torch.zeros(3, 2), torch.zeros(4, dtype=torch.int64))


def test_nearly_separable_logits_are_still_resolved():
    # one wrong example among many confident right ones: the optimum is finite but the loss
    # near it is far below float64's epsilon relative to 1; the log1p form still finds it.
    labels = torch.arange(200) % 3
    logits = 3.0 * F.one_hot(labels, 3).double()
    logits[0] = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)  # label 0, predicted 1
    beta = fit_inverse_temperature(logits, labels)
    best = cross_entropy_at(logits, labels, beta)
    for factor in (0.9, 1.1):
        assert cross_entropy_at(logits, labels, beta * factor) > best
    assert 1.0 < beta < 100.0


def test_constant_logits_give_beta_one():
    assert fit_inverse_temperature(torch.ones(5, 3), torch.zeros(5, dtype=torch.int64)) == 1.0


def test_crossfit_folds_score_every_example_exactly_once():
    folds = crossfit_folds(103, seed=4, folds=5)
    assert len(folds) == 5
    every = torch.cat(folds)
    assert sorted(every.tolist()) == list(range(103))  # each example in exactly one fold
    assert {len(f) for f in folds} <= {20, 21}  # sizes differ by at most one
    assert all(torch.equal(f, f.sort().values) for f in folds)
    again = crossfit_folds(103, seed=4, folds=5)
    assert all(torch.equal(f, g) for f, g in zip(folds, again))  # seeded
    assert any(not torch.equal(f, g) for f, g in zip(folds, crossfit_folds(103, 5, 5)))
    with pytest.raises(LmcError, match="at least 2 folds"):
        crossfit_folds(10, 0, 1)
    with pytest.raises(LmcError, match="needs at least 5 examples"):
        crossfit_folds(4, 0, 5)


def test_crossfit_matches_a_hand_computation():
    """Per model: fit beta on K - 1 folds with fit_inverse_temperature, score the held-out fold,
    average over every example; the reported beta is the one fitted on all examples."""
    n, classes, k = 61, 3, 4
    truth, y = sampled_problem(n, classes, 2.0, 7)
    gen = torch.Generator().manual_seed(8)
    noise = torch.randn(truth.shape, generator=gen, dtype=torch.float64)
    z = torch.stack([0.5 * truth, 3.0 * truth + noise])  # too cold and too hot
    metrics = LambdaMetrics(y, True, seed=9, fraction=0.2, method="crossfit", folds=k)
    rows = metrics([0.0, 1.0], z, z[0], z[1])
    folds = crossfit_folds(n, 9, k)
    for m in range(2):
        assert not at_bound(rows[m]["inverse_temperature"])
        total, scored = 0.0, 0
        for fold in folds:
            fit = torch.ones(n, dtype=torch.bool)
            fit[fold] = False
            beta = fit_inverse_temperature(z[m, fit], y[fit])
            total += cross_entropy_at(z[m, fold], y[fold], beta) * len(fold)
            scored += len(fold)
        assert scored == n
        assert rows[m]["calibrated_loss"] == pytest.approx(total / n, rel=1e-9)
        assert rows[m]["inverse_temperature"] == pytest.approx(
            fit_inverse_temperature(z[m], y), rel=1e-9
        )
        # the uncalibrated loss on the same (all) examples
        assert rows[m]["heldout_loss"] == pytest.approx(cross_entropy_at(z[m], y), rel=1e-9)
    info = metrics.description()
    assert info["calibration_method"] == "crossfit" and info["calibration_folds"] == k
    assert info["num_heldout"] == n and info["num_calibration"] == n - max(map(len, folds))
    assert info["calibration_fraction"] is None


def test_crossfit_is_undefined_when_any_fold_hits_the_bound():
    # every example right but one: the fold holding the wrong one fits beta on a perfectly
    # classified set (beta at the bound), the others find a finite beta
    labels = torch.arange(40) % 2
    logits = 2.0 * F.one_hot(labels, 2).double()
    logits[0] = torch.tensor([0.0, 1.0], dtype=torch.float64)  # label 0, predicted 1
    metrics = LambdaMetrics(labels, True, seed=0, fraction=0.2, method="crossfit", folds=4)
    folds = crossfit_folds(40, 0, 4)
    fits = []
    for fold in folds:
        fit = torch.ones(40, dtype=torch.bool)
        fit[fold] = False
        fits.append(fit_inverse_temperature(logits[fit], labels[fit]))
    assert sum(at_bound(b) for b in fits) == 1  # only the fold of example 0 is at the bound
    assert not at_bound(fit_inverse_temperature(logits, labels))
    (row,) = metrics([0.0], logits[None], logits, logits)
    assert math.isnan(row["calibrated_loss"]) and math.isnan(row["inverse_temperature"])


@pytest.mark.parametrize(
    ("n", "fraction", "want"),
    [
        (451, 0.2, "crossfit"),  # digits' test split: a 90-example calibration subset
        (1797, 0.2, "crossfit"),
        (4997, 0.2, "crossfit"),  # 999 calibration examples
        (5000, 0.2, "split"),  # 1000
        (10000, 0.2, "split"),  # MNIST / CIFAR test splits
        (2000, 0.5, "split"),  # the threshold is on the calibration subset's size
    ],
)
def test_auto_cross_fits_small_splits_only(n, fraction, want):
    assert AUTO_MIN_CALIBRATION == 1000
    assert resolve_calibration("auto", n, fraction) == want
    assert resolve_calibration("split", n, fraction) == "split"
    assert resolve_calibration("crossfit", n, fraction) == "crossfit"
    with pytest.raises(LmcError, match="unknown calibration"):
        resolve_calibration("kfold", n)


# -- the next-token task: one beta over every position, subsets of whole windows -------------
def _windows(n=30, t=5, c=6, seed=0):
    """Float64 logits (n, t, c) and targets (n, t) drawn from softmax(2 * logits)."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(n, t, c, generator=gen, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(2 * z.reshape(-1, c), 1), 1, generator=gen).view(n, t)
    return z, y


def test_one_beta_over_every_position():
    z, y = _windows()
    beta = fit_inverse_temperature(z, y, task="next-token")
    assert beta == fit_inverse_temperature(z.reshape(-1, 6), y.reshape(-1))
    assert cross_entropy_at(z, y, beta, task="next-token") == cross_entropy_at(
        z.reshape(-1, 6), y.reshape(-1), beta
    )
    with pytest.raises(LmcError, match=r"labels must have shape \(N, T\)"):
        fit_inverse_temperature(z, y[:, 0], task="next-token")
    with pytest.raises(LmcError, match=r"logits must have shape \(N, T, C\)"):
        cross_entropy_at(z[:, :4], y, task="next-token")


@pytest.mark.parametrize("scale", [3.0, 0.25])
def test_logits_scaled_down_recover_the_scale(scale):
    """Logits at their optimal temperature (beta = 1) divided by ``scale``: the fit is
    ``scale`` (beta changes the logits only through beta * logits)."""
    z, y = _windows(seed=1)
    calibrated = z * fit_inverse_temperature(z, y, task="next-token")  # optimum now at beta = 1
    assert fit_inverse_temperature(calibrated, y, task="next-token") == pytest.approx(1, rel=1e-6)
    beta = fit_inverse_temperature(calibrated / scale, y, task="next-token")
    assert beta == pytest.approx(scale, rel=1e-6)


def test_path_calibration_subsets_and_folds_are_whole_windows():
    z, y = _windows(n=23, t=4)
    n, t = y.shape
    split = LambdaMetrics(y, True, seed=5, fraction=0.2, method="split", task="next-token")
    cal, held = calibration_split(n, 5, 0.2)
    offsets = torch.arange(t)
    assert torch.equal(split.cal.view(-1, t), cal.view(-1, 1) * t + offsets)
    assert torch.equal(split.held.view(-1, t), held.view(-1, 1) * t + offsets)
    assert split.description()["num_calibration"] == len(cal)
    assert split.description()["num_heldout"] == len(held) == n - len(cal)
    cross = LambdaMetrics(y, True, seed=5, fraction=0.2, method="crossfit", folds=3,
                          task="next-token")  # fmt: skip
    fold_of = cross.fold_of.view(n, t)
    assert torch.equal(fold_of, fold_of[:, :1].expand(n, t))  # one fold per window
    for k, fold in enumerate(crossfit_folds(n, 5, 3)):
        assert (fold_of[fold] == k).all()
    # the numbers: one beta over the calibration windows' positions, scored on the rest
    (row,) = split([0.0], z[None], z, z)
    beta = fit_inverse_temperature(z[cal], y[cal], task="next-token")
    assert row["inverse_temperature"] == pytest.approx(beta, rel=1e-12)
    want = cross_entropy_at(z[held], y[held], beta, task="next-token")
    assert row["calibrated_loss"] == pytest.approx(want, rel=1e-12)


def _brent_beta(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """An independent search: SciPy's bounded Brent on log beta of the plain cross-entropy."""
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda u: cross_entropy_at(logits, labels, math.exp(u)),
        bounds=(math.log(1e-3), math.log(1e4)),
        method="bounded",
        options={"xatol": 1e-10},
    )
    return math.exp(res.x)


@pytest.mark.parametrize(("scale", "temper", "seed"), [(2.0, 7.0, 0), (0.5, 0.2, 1), (4.0, 1.0, 2)])
def test_newton_search_agrees_with_a_brent_search(scale, temper, seed):
    z, labels = sampled_problem(3000, 7, scale, seed)
    noise = torch.randn(z.shape, generator=torch.Generator().manual_seed(seed + 10))
    logits = (z / temper + 0.3 * noise.double()).float()
    assert fit_inverse_temperature(logits, labels) == pytest.approx(
        _brent_beta(logits, labels), rel=1e-6
    )


def test_subsets_warm_started_equal_their_own_fits():
    z, labels = sampled_problem(2000, 5, 3.0, 3)
    logits = 0.4 * z
    folds = crossfit_folds(2000, seed=1, folds=4)
    fits = [torch.cat([f for j, f in enumerate(folds) if j != i]) for i in range(4)]
    betas = fit_inverse_temperatures(logits, labels, [None, *fits])
    assert betas[0] == pytest.approx(fit_inverse_temperature(logits, labels), rel=1e-9)
    for beta, fit in zip(betas[1:], fits):
        assert beta == pytest.approx(fit_inverse_temperature(logits[fit], labels[fit]), rel=1e-9)
    assert len(set(betas)) == 5  # the folds do give different betas


def test_an_optimum_beyond_a_bound_gives_the_bound():
    z, labels = sampled_problem(2000, 5, 3.0, 4)
    assert fit_inverse_temperature(z * 1e-6, labels) == BETA_MAX  # wants beta ~ 1e6
    assert fit_inverse_temperature(z * 1e6, labels) == pytest.approx(1e-3)  # wants ~ 1e-6
