"""Every study setting is validated before anything is created, with one-line errors."""

import pytest

from lmc.config import LmcError
from lmc.experiments.study import resolve

BASE = {"data": {"dataset": "digits"}, "model": {"name": "mlp"}, "sweep": {"widths": [8]}}


@pytest.mark.parametrize("name", ["../../X", "/tmp/abs", "a/b", "..", "", ".hidden", "x" * 101])
def test_a_study_name_never_leaves_the_output_folder(name):
    with pytest.raises(LmcError, match="plain name"):
        resolve({**BASE, "name": name})


@pytest.mark.parametrize(
    "patch, fragment",
    [
        ({"model": {"name": "mlp", "depth": "three"}}, "depth must be an integer"),
        ({"model": {"name": "mlp", "depth": -2}}, "depth must be an integer >= 1"),
        ({"sweep": {"widths": [True]}}, "width must be a number"),
        ({"sweep": {"widths": [float("nan")]}}, "positive"),
        ({"model": {"name": "mlp", "activation": "swish"}}, "activation"),
    ],
)
def test_bad_model_settings_are_refused(patch, fragment):
    with pytest.raises(LmcError, match=fragment):
        resolve({**BASE, **patch})


def test_a_plain_name_is_kept():
    assert resolve({**BASE, "name": "my-study_1.2"})["name"] == "my-study_1.2"
