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
        ({"model": {"name": "mlp", "depth": -2}}, "depth must be at least 1"),
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


def _with(section: str, **values):
    study = {**BASE, "sweep": dict(BASE["sweep"])}
    study[section] = {**study.get(section, {}), **values}
    return study


@pytest.mark.parametrize(
    "section, values, fragment",
    [
        ("train", {"epochs": "2"}, r"\[train\].*epochs must be an integer, got '2'"),
        ("train", {"epochs": 2.5}, "epochs must be an integer"),
        ("train", {"lr": float("nan")}, "lr must be finite"),
        ("train", {"lr": float("inf")}, "lr must be finite"),
        ("train", {"momentum": -1}, "momentum must be at least 0"),
        ("train", {"momentum": 1.0}, "momentum must be below 1"),
        ("train", {"label_smoothing": 2}, "label_smoothing must be below 1"),
        ("train", {"warmup_epochs": -5}, "warmup_epochs must be at least 0"),
        ("train", {"epochs": 2, "warmup_epochs": 3}, "exceeds the 2 training epochs"),
        ("train", {"augment": "yes"}, "augment must be"),
        ("sweep", {"weight_decays": [float("inf")]}, "weight_decays.*finite"),
        ("sweep", {"weight_decays": [-1e-3]}, "weight_decays.*at least 0"),
        ("sweep", {"pairs": 0}, r"'sweep.pairs'.* at least 1"),
        ("sweep", {"pairs": 100_000_000}, "200,000,000 training runs.*limit is 20,000"),
        ("sweep", {"seed": -1}, r"'sweep.seed'.*at least 0"),
        ("merge", {"lambdas": [0.0, 2.0]}, r"\[merge\].*outside \[0, 1\]"),
        ("merge", {"align_examples": 0}, r"'merge.align_examples'.*at least 1"),
        ("merge", {"ste_steps": -1}, r"'merge.ste_steps'.*at least 0"),
        ("merge", {"align_seed": -2}, r"'merge.align_seed'.*at least 0"),
        ("analysis", {"max_examples": 0}, r"'analysis.max_examples'.*at least 1"),
        ("analysis", {"lambdas": []}, r"'analysis.lambdas'.*non-empty"),
        ("analysis", {"lambdas": [True]}, r"'analysis.lambdas'"),
    ],
)
def test_every_setting_is_checked_when_the_study_is_read(section, values, fragment):
    """Values that used to fail only inside a job (after run folders were made), or never."""
    with pytest.raises(LmcError, match=fragment):
        resolve(_with(section, **values), source="s.toml")


def test_onepass_is_a_study_method():
    assert resolve(_with("merge", methods=["none", "onepass"]))["merge"]["methods"][1] == "onepass"


def test_a_study_too_large_for_memory_fails_before_its_folder_exists(tmp_path):
    from lmc.experiments import run_study

    study = resolve({**BASE, "sweep": {"widths": [30_000_000]}, "model": {"name": "mlp",
                     "depth": 3}})  # fmt: skip
    with pytest.raises(LmcError, match="parameters: training it needs about .* more than"):
        run_study(study, tmp_path / "out", runs_dir=tmp_path / "runs", quiet=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_model_options_are_checked_against_the_datasets_images():
    study = {**BASE, "data": {"dataset": "fashion-mnist"}, "model": {"name": "vit", "patch": 7}}
    study["sweep"] = {"widths": [32]}
    assert resolve(study)["model"]["patch"] == 7  # 7 divides 28
    study["model"] = {"name": "vit", "patch": 3}
    with pytest.raises(LmcError, match="patch 3 does not divide the 28x28 image"):
        resolve(study)
    with pytest.raises(LmcError, match="patch 3 does not divide the 8x8 image"):
        resolve({**study, "data": {"dataset": "digits"}})
