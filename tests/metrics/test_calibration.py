"""Softmax temperature calibration."""

import pytest
import torch
import torch.nn.functional as F

from lmc.config import LmcError
from lmc.metrics import BETA_MAX, cross_entropy_at, fit_inverse_temperature


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
