"""Expected calibration error: exact constructions, a hand computation, the binning rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lmc.config import LmcError
from lmc.metrics import (
    ReliabilityCurve,
    classification_metrics,
    draw_reliability_diagram,
    expected_calibration_error,
    reliability_curve,
)


def _calibrated() -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes; in each bin the confidence equals the fraction correct exactly."""
    rows, labels = [], []
    # (confidence, examples, correct): 3/4, 3/5, 9/10, 1
    for conf, n, right in ((0.75, 4, 3), (0.6, 5, 3), (0.9, 10, 9), (1.0, 2, 2)):
        for i in range(n):
            rows.append([conf, 1.0 - conf])
            labels.append(0 if i < right else 1)
    return torch.tensor(rows, dtype=torch.float64), torch.tensor(labels)


def test_perfectly_calibrated_predictor_has_zero_ece():
    probs, labels = _calibrated()
    assert expected_calibration_error(probs, labels, bins=10) == pytest.approx(0.0, abs=1e-12)
    # the same predictor given as logits: softmax(log p) = p (log 0 clamped: finite logits)
    assert expected_calibration_error(
        probs.clamp_min(1e-300).log(), labels, bins=10, kind="logits"
    ) == (pytest.approx(0.0, abs=1e-12))
    # one wrong label more in the 0.9 bin: the gap is 1/10 there, weighted by 10/21
    labels[12] = 1
    assert expected_calibration_error(probs, labels, bins=10) == pytest.approx(10 / 21 * 0.1)


def test_hand_computation_and_right_closed_bins():
    probs = torch.tensor(
        [
            [0.9, 0.05, 0.05],  # conf .9, correct -> bin 3
            [0.1, 0.8, 0.1],  # conf .8, wrong   -> bin 3
            [0.4, 0.3, 0.3],  # conf .4, correct -> bin 1
            [0.2, 0.2, 0.6],  # conf .6, wrong   -> bin 2
            [0.5, 0.25, 0.25],  # conf .5 exactly, correct -> bin 1 (right-closed)
        ]
    )
    labels = torch.tensor([0, 0, 0, 1, 0])
    curve = reliability_curve(probs, labels, bins=4)
    assert isinstance(curve, ReliabilityCurve)
    assert curve.counts.tolist() == [0, 2, 1, 2]
    assert np.isnan(curve.confidence[0]) and np.isnan(curve.accuracy[0])
    np.testing.assert_allclose(curve.confidence[1:], [0.45, 0.6, 0.85], rtol=1e-6)
    np.testing.assert_allclose(curve.accuracy[1:], [1.0, 0.0, 0.5])
    np.testing.assert_allclose(curve.edges, [0, 0.25, 0.5, 0.75, 1.0])
    # 2/5 * |1 - .45| + 1/5 * |0 - .6| + 2/5 * |.5 - .85|
    expected = 0.4 * 0.55 + 0.2 * 0.6 + 0.4 * 0.35
    assert expected_calibration_error(probs, labels, bins=4) == pytest.approx(expected, rel=1e-6)
    # the number of bins is a setting: one bin gives |mean accuracy - mean confidence|
    one = expected_calibration_error(probs, labels, bins=1)
    assert one == pytest.approx(abs(3 / 5 - (0.9 + 0.8 + 0.4 + 0.6 + 0.5) / 5), rel=1e-6)


def test_logits_are_softmaxed_and_auto_detects_probabilities():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 5, generator=gen) * 3
    labels = torch.randint(0, 5, (200,), generator=gen)
    from_logits = expected_calibration_error(logits, labels)
    from_probs = expected_calibration_error(torch.softmax(logits.double(), 1), labels)
    assert from_logits == pytest.approx(from_probs, abs=1e-12)
    assert 0.0 < from_logits < 1.0
    assert isinstance(from_logits, float)


def test_input_validation():
    probs, labels = _calibrated()
    with pytest.raises(LmcError, match="bins"):
        expected_calibration_error(probs, labels, bins=0)
    with pytest.raises(LmcError, match="shape"):
        expected_calibration_error(probs[0], labels)
    with pytest.raises(LmcError, match="labels"):
        expected_calibration_error(probs, labels[:-1])
    with pytest.raises(LmcError, match="labels"):
        expected_calibration_error(probs, labels.double())
    with pytest.raises(LmcError, match="class"):
        expected_calibration_error(probs, labels + 5)
    with pytest.raises(LmcError, match="non-finite"):
        expected_calibration_error(torch.full((3, 2), math.nan), torch.zeros(3, dtype=int))
    with pytest.raises(LmcError, match="not probabilities"):
        expected_calibration_error(probs * 2, labels, kind="probs")
    with pytest.raises(LmcError, match="kind"):
        expected_calibration_error(probs, labels, kind="scores")
    with pytest.raises(LmcError, match="no examples"):
        expected_calibration_error(torch.zeros(0, 3), torch.zeros(0, dtype=int))


def test_reliability_diagram_draws_into_given_axes():
    from matplotlib.figure import Figure

    probs, labels = _calibrated()
    fig = Figure()
    ax = fig.add_subplot()
    curve = reliability_curve(probs, labels, bins=10)
    assert draw_reliability_diagram(ax, curve) is ax
    assert len(ax.patches) == 2 * int((curve.counts > 0).sum())
    assert "ECE = 0.0000" in ax.get_title()
    with pytest.raises(LmcError, match="Axes"):
        draw_reliability_diagram(object(), curve)


def test_next_token_ece_is_over_every_position():
    """(N, T, C) logits of windows: every position is one prediction, in any input form."""
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(9, 4, 5, generator=gen) * 3
    y = torch.randint(0, 5, (9, 4), generator=gen)
    flat_z, flat_y = z.reshape(-1, 5), y.reshape(-1)
    want = reliability_curve(flat_z, flat_y, bins=7, kind="logits")
    got = reliability_curve(z, y, bins=7, kind="logits", task="next-token")
    assert got.n == 36 and np.array_equal(got.counts, want.counts)
    assert got.ece == want.ece > 0
    probs = torch.softmax(z.double(), dim=-1).numpy()  # a NumPy array of probabilities
    assert expected_calibration_error(probs, y, 7, task="next-token") == pytest.approx(
        want.ece, abs=1e-12
    )
    metrics = classification_metrics(z, y, 7, task="next-token")
    assert metrics == classification_metrics(flat_z, flat_y, 7)
    assert metrics["accuracy"] == (z.argmax(-1) == y).double().mean().item()
    with pytest.raises(LmcError, match=r"next-token task needs .*\(N, T, C\)"):
        expected_calibration_error(flat_z, flat_y, task="next-token")
