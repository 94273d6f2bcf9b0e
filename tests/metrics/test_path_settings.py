"""PathSettings (every option of evaluate_path, validated), the per-lambda keys defined once,
and the warning when calibration hits its bound."""

import dataclasses
import math
import re
import warnings

import numpy as np
import pytest

from lmc.config import LmcError, LmcWarning
from lmc.metrics import PER_LAMBDA_KEYS, PathResult, PathSettings, evaluate_path


def test_defaults_and_normalisation():
    s = PathSettings()
    assert s.lambdas == 11 and s.bn == "auto" and s.method == "auto" and s.batch_size is None
    assert s.calibration_fraction == 0.2 and not s.calibrate and s.quiet and s.fast
    assert s.calibration == "auto" and s.calibration_folds == 5
    listed = PathSettings(lambdas=np.array([0.75, 0.25]), batch_size=np.int64(7))
    assert listed.lambdas == (0.75, 0.25) and type(listed.batch_size) is int
    assert listed.grid() == ([0, 0.25, 0.5, 0.75, 1], [0, 0.5, 1])
    assert hash(listed) == hash(PathSettings(lambdas=(0.75, 0.25), batch_size=7))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.batch_size = 3
    assert dataclasses.replace(s, calibrate=True).calibrate


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"batch_size": True}, "batch_size must be an integer"),
        ({"batch_size": 2.5}, "batch_size must be an integer"),
        ({"lambdas": [0.5, 1.5]}, "lambda 1.5 is outside"),
        ({"lambdas": 1}, "at least 2 lambdas"),
        ({"lambdas": "0.5"}, "lambdas must be"),
        ({"lambdas": 0.5}, "lambdas must be"),
        ({"calibration_fraction": 1.0}, r"calibration_fraction must be in \(0, 1\)"),
        ({"calibration_fraction": 0}, "calibration_fraction"),
        ({"calibration_fraction": float("nan")}, "calibration_fraction"),
        ({"method": "fastest"}, "method='fastest'.*auto, batched, loop"),
        ({"bn": "fix"}, "bn='fix'.*auto, reset, repair, none"),
        ({"bn_batch_size": 1}, "bn_batch_size must be at least 2"),
        ({"bn_num_batches": 0}, "bn_num_batches must be at least 1"),
        ({"max_stack_bytes": 0}, "max_stack_bytes must be at least 1"),
        ({"seed": "0"}, "seed must be an integer"),
        ({"calibration_seed": 1.5}, "calibration_seed must be an integer"),
        ({"calibrate": "yes"}, "calibrate must be True or False"),
        ({"calibration": "kfold"}, "calibration='kfold'.*auto, split, crossfit"),
        ({"calibration_folds": 1}, "calibration_folds must be at least 2"),
        ({"calibration_folds": 2.0}, "calibration_folds must be an integer"),
        ({"reset_endpoints": 2}, "reset_endpoints must be True or False"),
        ({"quiet": None}, "quiet must be True or False"),
        ({"fast": "no"}, "fast must be True or False"),
    ],
)
def test_invalid_options_are_errors_naming_the_option(options, message):
    with pytest.raises(LmcError, match=message):
        PathSettings(**options)


def test_settings_object_and_keywords_give_the_same_path(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    settings = PathSettings(lambdas=5, calibrate=True, calibration_seed=2, batch_size=120)
    via_settings = evaluate_path(a, b, x, y, settings)
    via_keywords = evaluate_path(a, b, x, y, 5, calibrate=True, calibration_seed=2, batch_size=120)
    via_lambdas_keyword = evaluate_path(
        a, b, x, y, lambdas=5, calibrate=True, calibration_seed=2, batch_size=120
    )
    assert via_settings.to_dict() == via_keywords.to_dict() == via_lambdas_keyword.to_dict()
    overridden = evaluate_path(a, b, x, y, settings, method="loop")  # keywords win
    assert overridden.method == "loop" and via_settings.method == "batched"
    assert overridden.calibrated_loss == pytest.approx(via_settings.calibrated_loss, abs=1e-5)
    with pytest.raises(TypeError, match="multiple values for 'lambdas'"):
        evaluate_path(a, b, x, y, 5, lambdas=3)
    with pytest.raises(TypeError, match="'calibrations'"):
        evaluate_path(a, b, x, y, 5, calibrations=True)
    with pytest.raises(LmcError, match="calibration=True.*auto, split, crossfit"):
        evaluate_path(a, b, x, y, 5, calibration=True)
    with pytest.raises(LmcError, match="batch_size"):
        evaluate_path(a, b, x, y, 5, batch_size=0)


def test_per_lambda_keys_are_the_one_list(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    names = {f.name for f in dataclasses.fields(PathResult)}
    assert set(PER_LAMBDA_KEYS) <= names and len(set(PER_LAMBDA_KEYS)) == len(PER_LAMBDA_KEYS)
    plain = evaluate_path(a, b, x, y, 3)
    calibrated = evaluate_path(a, b, x, y, 3, calibrate=True)
    for res in (plain, calibrated):
        assert list(res.curves()) == ["lambdas", *PER_LAMBDA_KEYS]
        rows = res.rows()
        assert [list(r) for r in rows] == [["lambda", *PER_LAMBDA_KEYS]] * 3
        for key in PER_LAMBDA_KEYS:
            column = res.to_dict()[key]
            assert column is None or [r[key] for r in rows] == column
    calibrated_only = {k for k in PER_LAMBDA_KEYS if getattr(plain, k) is None}
    assert calibrated_only == {
        "calibrated_loss", "inverse_temperature", "heldout_loss", "ensemble_calibrated_loss",
        "ensemble_inverse_temperature",
    }  # fmt: skip
    assert all(getattr(calibrated, k) is not None for k in PER_LAMBDA_KEYS)


def test_calibration_at_its_bound_warns(digits, mlp_pair, perfect_subset):
    _, _, x, y = digits
    a, b = mlp_pair
    xs, ys = perfect_subset  # A classifies every example correctly
    with pytest.warns(LmcWarning) as caught:
        res = evaluate_path(a, b, xs, ys, 3, calibrate=True, calibration="split")
    assert len(caught) == 1 and caught[0].filename == __file__  # points at the caller
    message = str(caught[0].message)
    assert res.calibration_at_bound[0] == 0.0 and math.isnan(res.calibrated_loss[0])
    listed = ", ".join(f"{v:g}" for v in res.calibration_at_bound)
    assert re.search(rf"at λ = {re.escape(listed)} \(ensemble: ", message)
    assert "80-example calibration subset" in message and res.num_calibration == 80
    assert "calibrated loss is undefined" in message
    assert message == res.calibration_warning()
    with warnings.catch_warnings():  # an identifiable calibration does not warn
        warnings.simplefilter("error", LmcWarning)
        ok = evaluate_path(a, b, x, y, 3, calibrate=True)
    assert ok.calibration_at_bound == [] and ok.calibration_warning() is None


def test_crossfit_calibration_at_its_bound_warns(mlp_pair, perfect_subset):
    a, b = mlp_pair
    xs, ys = perfect_subset  # A classifies every example correctly
    with pytest.warns(LmcWarning) as caught:
        res = evaluate_path(a, b, xs, ys, 3, calibrate=True)  # auto: 400 examples cross-fit
    assert res.calibration_method == "crossfit" and res.calibration_folds == 5
    message = str(caught[0].message)
    assert res.calibration_at_bound[0] == 0.0
    assert math.isnan(res.calibrated_loss[0]) and math.isnan(res.inverse_temperature[0])
    assert "5-fold cross-fitted calibration of the 400-example split" in message
    assert "at least 320 examples" in message and res.num_calibration == 320
    assert message == res.calibration_warning()
