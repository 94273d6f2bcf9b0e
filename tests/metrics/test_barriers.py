"""Barrier formulas on hand-made curves (values computed by hand in the comments), and the one
barrier schema (``BARRIERS``) against ``barriers()`` and docs/science.md."""

import math
import re
from pathlib import Path

import pytest

from lmc.config import LmcError
from lmc.metrics import (
    BARRIER_BY_KEY,
    BARRIER_KEYS,
    BARRIERS,
    accuracy_barrier,
    barriers,
    calibrated_loss_barrier,
    calibrated_max_minus_mean_loss,
    calibrated_midpoint_loss_barrier,
    loss_barrier,
    max_minus_mean_loss,
    mean_minus_min_accuracy,
    midpoint_accuracy_barrier,
    midpoint_loss_barrier,
)

LAM = [0.0, 0.25, 0.5, 0.75, 1.0]


def test_loss_barriers_with_peak_off_the_midpoint():
    # chord (1 - lam) * 1.0 + lam * 0.6 = 1.0 - 0.4 lam -> 0.9, 0.8, 0.7 at 0.25, 0.5, 0.75
    loss = [1.0, 2.5, 2.0, 1.4, 0.6]
    assert loss_barrier(LAM, loss) == pytest.approx(2.5 - 0.9)  # 1.6 at lam = 0.25
    assert midpoint_loss_barrier(LAM, loss) == pytest.approx(2.0 - 0.8)  # 1.2
    assert max_minus_mean_loss(LAM, loss) == pytest.approx(2.5 - 0.8)  # 1.7


def test_convex_path_gives_negative_midpoint_and_zero_barrier():
    loss = [1.0, 0.8, 0.5, 0.9, 1.2]  # mean of endpoints 1.1
    assert midpoint_loss_barrier(LAM, loss) == pytest.approx(0.5 - 1.1)  # -0.6
    assert loss_barrier(LAM, loss) == 0.0  # the endpoints give exactly 0, everything else < 0
    assert max_minus_mean_loss(LAM, loss) == pytest.approx(1.2 - 1.1)  # 0.1


def test_accuracy_barriers_have_reversed_sign():
    acc = [0.9, 0.7, 0.5, 0.8, 0.95]  # chord 0.9 + 0.05 lam -> 0.9125, 0.925, 0.9375
    assert accuracy_barrier(LAM, acc) == pytest.approx(0.925 - 0.5)
    assert midpoint_accuracy_barrier(LAM, acc) == pytest.approx(0.425)
    assert mean_minus_min_accuracy(LAM, acc) == pytest.approx(0.925 - 0.5)
    acc = [0.9, 0.6, 0.85, 0.8, 0.95]  # worst drop at 0.25: 0.9125 - 0.6
    assert accuracy_barrier(LAM, acc) == pytest.approx(0.3125)
    assert midpoint_accuracy_barrier(LAM, acc) == pytest.approx(0.925 - 0.85)
    assert mean_minus_min_accuracy(LAM, acc) == pytest.approx(0.925 - 0.6)
    better = [0.8, 0.85, 0.9, 0.85, 0.8]
    assert midpoint_accuracy_barrier(LAM, better) == pytest.approx(-0.1)
    assert accuracy_barrier(LAM, better) == 0.0


def test_order_of_the_grid_does_not_matter():
    order = [3, 0, 4, 2, 1]
    loss = [1.0, 2.5, 2.0, 1.4, 0.6]
    lam = [LAM[i] for i in order]
    vals = [loss[i] for i in order]
    assert loss_barrier(lam, vals) == pytest.approx(1.6)
    assert midpoint_loss_barrier(lam, vals) == pytest.approx(1.2)


def test_calibrated_versions_are_the_loss_formulas():
    cal = [0.3, 0.5, 0.35, 0.3, 0.2]  # chord 0.3 - 0.1 lam
    assert calibrated_loss_barrier(LAM, cal) == pytest.approx(0.5 - 0.275)
    assert calibrated_midpoint_loss_barrier(LAM, cal) == pytest.approx(0.35 - 0.25)
    assert calibrated_max_minus_mean_loss(LAM, cal) == pytest.approx(0.5 - 0.25)


def test_missing_points_are_clear_errors():
    with pytest.raises(LmcError, match="endpoints"):
        loss_barrier([0.0, 0.5], [1.0, 2.0])
    with pytest.raises(LmcError, match="0.5"):
        midpoint_loss_barrier([0.0, 0.4, 1.0], [1.0, 2.0, 1.0])
    with pytest.raises(LmcError, match="one value per lambda"):
        loss_barrier([0.0, 1.0], [1.0])


def test_barriers_of_a_result_dict():
    res = {"lambdas": LAM, "loss": [1.0, 2.5, 2.0, 1.4, 0.6], "accuracy": [0.9] * 5}
    out = barriers(res)
    assert set(out) == set(BARRIER_KEYS) | {"heldout_loss_barrier", "heldout_midpoint_loss_barrier"}
    assert out["loss_barrier"] == pytest.approx(1.6)
    assert out["accuracy_barrier"] == 0.0
    assert out["calibrated_loss_barrier"] is None
    res["calibrated_loss"] = [0.3, 0.5, 0.35, 0.3, 0.2]
    res["heldout_loss"] = [1.0, 2.5, 2.0, 1.4, 0.6]
    out = barriers(res)
    assert out["calibrated_midpoint_loss_barrier"] == pytest.approx(0.1)
    assert out["heldout_midpoint_loss_barrier"] == pytest.approx(1.2)
    assert not any(isinstance(v, float) and math.isnan(v) for v in out.values())


# --------------------------------------------------------------------------- the schema
CURVES = {
    "lambdas": LAM,
    "loss": [1.0, 2.5, 2.0, 1.4, 0.6],
    "accuracy": [0.9, 0.6, 0.7, 0.8, 0.8],
    "calibrated_loss": [0.3, 0.5, 0.35, 0.3, 0.2],
    "heldout_loss": [1.1, 2.4, 2.2, 1.5, 0.7],
}


def test_barriers_returns_exactly_the_schema_in_order():
    out = barriers(CURVES)
    assert list(out) == list(BARRIER_KEYS) == [b.key for b in BARRIERS]
    assert len(set(BARRIER_KEYS)) == len(BARRIER_KEYS) == 11
    assert set(BARRIER_BY_KEY) == set(BARRIER_KEYS)
    for b in BARRIERS:
        assert b.curve in ("loss", "accuracy", "calibrated_loss", "heldout_loss")
        assert b.meaning  # every key says what it is
        assert out[b.key] == b.function(LAM, CURVES[b.curve])


def test_schema_entries_compute_what_the_functions_compute():
    # mean_minus_min_accuracy: 0.5 * (0.9 + 0.8) - 0.6 = 0.25; heldout midpoint: 2.2 - 0.9 = 1.3
    out = barriers(CURVES)
    assert out["mean_minus_min_accuracy"] == pytest.approx(0.25)
    assert out["heldout_midpoint_loss_barrier"] == pytest.approx(1.3)
    assert out["heldout_loss_barrier"] == loss_barrier(LAM, CURVES["heldout_loss"])
    assert out["calibrated_loss_barrier"] == loss_barrier(LAM, CURVES["calibrated_loss"])


def test_uncalibrated_path_leaves_calibrated_and_heldout_barriers_none():
    out = barriers({k: CURVES[k] for k in ("lambdas", "loss", "accuracy")})
    for b in BARRIERS:
        assert (out[b.key] is None) == (b.curve in ("calibrated_loss", "heldout_loss"))


def test_a_path_without_its_losses_is_a_clear_error():
    with pytest.raises(LmcError, match="'loss'"):
        barriers({"lambdas": LAM, "accuracy": CURVES["accuracy"]})


def test_docs_barrier_table_lists_the_schema_in_order():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "science.md").read_text()
    section = doc[doc.index("## Barriers") :]
    section = section[: section.index("\n#")]
    keys = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)
    assert keys == list(BARRIER_KEYS)
