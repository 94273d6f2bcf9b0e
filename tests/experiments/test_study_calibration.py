"""The [merge] calibration keys: defaults, validation, and what a merge job evaluates with."""

import pytest

from lmc.config import LmcError
from lmc.experiments import resolve
from lmc.experiments.jobs import pair_settings

BASE = {
    "data": {"dataset": "digits"},
    "model": {"name": "mlp", "depth": 2},
    "sweep": {"widths": [8]},
}


def _job(merge: dict) -> dict:
    study = resolve({**BASE, "merge": merge})
    return {
        "method": "none",
        "split": study["data"]["split"],
        "merge": study["merge"],
        "analysis": study["analysis"],
    }


def test_calibration_defaults_to_auto_with_five_folds():
    study = resolve(BASE)
    assert study["merge"]["calibration"] == "auto" and study["merge"]["calibration_folds"] == 5
    path = pair_settings(_job({})).path
    assert path.calibrate and path.calibration == "auto" and path.calibration_folds == 5


@pytest.mark.parametrize("calibration", ["split", "crossfit"])
def test_the_merge_job_evaluates_with_the_study_calibration(calibration):
    path = pair_settings(_job({"calibration": calibration, "calibration_folds": 3})).path
    assert path.calibration == calibration and path.calibration_folds == 3


@pytest.mark.parametrize(
    ("merge", "fragment"),
    [
        ({"calibration": "kfold"}, "'merge.calibration'.*auto, split, crossfit.*'kfold'"),
        ({"calibration": 5}, "'merge.calibration' in study.toml must be str"),
        ({"calibration_folds": 1}, "'merge.calibration_folds' in study.toml must be at least 2"),
        ({"calibration_folds": 2.5}, "'merge.calibration_folds' in study.toml must be int"),
        ({"calibration_fold": 3}, "unknown key 'merge.calibration_fold'"),
    ],
)
def test_bad_calibration_keys_are_clear_errors(merge, fragment):
    with pytest.raises(LmcError, match=fragment):
        resolve({**BASE, "merge": merge}, source="study.toml")
