import pytest

from lmc.config import LmcError
from lmc.experiments import list_recipes, load_study, resolve

BASE = {
    "data": {"dataset": "digits"},
    "model": {"name": "mlp", "depth": 2},
    "sweep": {"widths": [8, 16]},
}


def test_defaults_are_filled_in():
    study = resolve(BASE)
    assert study["sweep"]["weight_decays"] == [3e-3]
    assert study["merge"]["methods"] == ["none", "weight"]
    assert study["model"] == {
        "name": "mlp",
        "depth": 2,
        "norm": "none",
        "activation": "relu",
        "bias": True,
    }
    assert study["analysis"]["lambdas"] == [0.5]


@pytest.mark.parametrize(
    "raw,key",
    [
        ({**BASE, "sweep": {"widht": [8]}}, "sweep.widht"),
        ({**BASE, "trian": {}}, "trian"),
        ({**BASE, "train": {"epoch": 3}}, "train.epoch"),
        ({**BASE, "model": {"name": "mlp", "dept": 3}}, "model.dept"),
        ({**BASE, "merge": {"methods": ["none"], "calibrated": True}}, "merge.calibrated"),
    ],
)
def test_unknown_key_is_named(raw, key):
    with pytest.raises(LmcError, match=f"unknown key '{key}'"):
        resolve(raw, source="study.toml")


@pytest.mark.parametrize(
    "raw,fragment",
    [
        ({**BASE, "sweep": {"widths": "16"}}, "'sweep.widths' in x must be list"),
        ({**BASE, "merge": {"methods": ["rebasin"]}}, "unknown merge method 'rebasin'"),
        ({**BASE, "data": {"dataset": "imagenet"}}, "unknown dataset 'imagenet'"),
        ({**BASE, "sweep": {"widths": [8.5]}}, "an integer"),
        ({**BASE, "model": {"name": "mlp", "width": 3}}, "model.width"),
        (
            {"model": {"name": "mlp"}, "sweep": {"widths": [8]}, "data": {}},
            "missing key 'data.dataset'",
        ),
    ],
)
def test_bad_values_are_clear_errors(raw, fragment):
    with pytest.raises(LmcError, match=fragment.replace("(", r"\(")):
        resolve(raw, source="x")


def test_invalid_toml_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[sweep\nwidths = [1, 2]\n")
    with pytest.raises(LmcError, match="bad.toml is not valid TOML"):
        load_study(path)


def test_missing_file_lists_recipes(tmp_path):
    with pytest.raises(LmcError, match="lewc-digits-mlp"):
        load_study(tmp_path / "nope.toml")


def test_every_packaged_recipe_resolves():
    names = list_recipes()
    assert "lewc-digits-mlp" in names and len(names) >= 6
    for name in names:
        study, text = load_study(name)
        assert study["name"] == name and text


def test_table1_spread_is_unknown_when_a_pair_is_undefined():
    from lmc.experiments import table1

    def rows(pair, calibrated):
        return [
            {
                "width": 8,
                "weight_decay": 3e-3,
                "method": "none",
                "pair": pair,
                "lam": lam,
                "accuracy": acc,
                "calibrated_midpoint_loss_barrier": calibrated,
                "midpoint_accuracy_barrier": 0.1 * (pair + 1),
            }
            for lam, acc in ((0.0, 0.9), (0.5, 0.8), (1.0, 0.9))
        ]

    (row,) = table1(rows(0, float("nan")) + rows(1, 0.25))
    assert row["calibrated_midpoint_loss_barrier_mean"] == 0.25
    assert (
        row["calibrated_midpoint_loss_barrier_std"] != row["calibrated_midpoint_loss_barrier_std"]
    )
    assert row["midpoint_accuracy_barrier_std"] == pytest.approx(0.1 / 2**0.5)
    (single,) = table1(rows(0, 0.25))
    assert single["calibrated_midpoint_loss_barrier_std"] == 0.0
