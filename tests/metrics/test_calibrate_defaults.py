"""Whether a path is calibrated by default is stated once (``lmc.metrics.CALIBRATE_DEFAULTS``)
and every entry point reads it: PathSettings, ``lmc interpolate``, width and onset studies."""

from __future__ import annotations

import argparse

import pytest

from lmc.cli.interpolate import add_arguments
from lmc.experiments.onset_study import SETTINGS as ONSET_SETTINGS
from lmc.experiments.study import SCHEMA
from lmc.metrics import CALIBRATE_DEFAULTS, PathSettings


def test_the_defaults_are_the_documented_ones():
    # docs/science.md § Softmax temperature calibration, "When."
    assert dict(CALIBRATE_DEFAULTS) == {"path": False, "width": True, "onset": False}
    with pytest.raises(TypeError):
        CALIBRATE_DEFAULTS["path"] = True  # read-only


def test_every_entry_point_reads_its_default():
    assert PathSettings().calibrate is CALIBRATE_DEFAULTS["path"]
    assert SCHEMA["merge"]["calibrate"][1] is CALIBRATE_DEFAULTS["width"]
    assert ONSET_SETTINGS["calibrate"][1] is CALIBRATE_DEFAULTS["onset"]


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


@pytest.mark.parametrize(
    ("flags", "calibrate"),
    [([], CALIBRATE_DEFAULTS["path"]), (["--calibrate"], True), (["--no-calibrate"], False)],
)
def test_interpolate_calibrate_flag(parser, flags, calibrate):
    assert parser.parse_args(["a", "b", *flags]).calibrate is calibrate
