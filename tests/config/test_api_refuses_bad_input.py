"""The Python API refuses bad input at the door with one LmcError naming the argument."""

from __future__ import annotations

import pytest
import torch

from lmc.analysis import layerwise
from lmc.config import LmcError, check_finite, check_int, check_labels, check_lambda
from lmc.merge import lerp
from lmc.metrics import evaluate_path
from lmc.models import build
from lmc.perm import align, spec_from_model, weight_matching


def _mlp(seed: int, **options):
    return build("mlp", seed=seed, input_size=8, width=6, num_classes=3, **options)


def _data(n: int = 12):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_lmc_error_is_a_value_error():
    assert issubclass(LmcError, ValueError)


def test_weight_matching_of_different_depths_names_the_difference():
    a, b = _mlp(0), _mlp(1, depth=2)
    spec = spec_from_model(a, _data()[0][:2])
    with pytest.raises(LmcError, match="models differ"):
        weight_matching(spec, a.state_dict(), b.state_dict())


def test_weight_matching_of_nan_weights_names_the_tensor():
    a, b = _mlp(0), _mlp(1)
    state_b = b.state_dict()
    state_b["fc2.weight"][0, 0] = float("nan")
    spec = spec_from_model(a, _data()[0][:2])
    with pytest.raises(LmcError, match=r"model B's weights\['fc2.weight'\] holds 1 non-finite"):
        weight_matching(spec, a.state_dict(), state_b)


def test_align_refuses_non_finite_inputs():
    x, _ = _data()
    x[3, 1] = float("inf")
    with pytest.raises(LmcError, match="inputs holds 1 non-finite"):
        align("weight", _mlp(0), _mlp(1), inputs=x)


def test_evaluate_path_refuses_labels_outside_the_classes():
    x, y = _data()
    y[0] = 7
    with pytest.raises(LmcError, match="y holds class 7 but the model has 3 classes"):
        evaluate_path(_mlp(0), _mlp(1), x, y, 3)


def test_evaluate_path_refuses_nan_inputs_and_lambdas_outside_the_path():
    x, y = _data()
    with pytest.raises(LmcError, match="outside"):
        evaluate_path(_mlp(0), _mlp(1), x, y, [0.5, 1.5])
    x[0, 0] = float("nan")
    with pytest.raises(LmcError, match="x holds 1 non-finite"):
        evaluate_path(_mlp(0), _mlp(1), x, y, 3)


def test_layerwise_refuses_nan_inputs_and_lambdas_outside_the_path():
    x, _ = _data()
    with pytest.raises(LmcError, match="lam must be at most 1"):
        layerwise(_mlp(0), _mlp(1), x, lam=1.5)
    x[5] = float("nan")
    with pytest.raises(LmcError, match="inputs holds 8 non-finite"):
        layerwise(_mlp(0), _mlp(1), x, lam=0.5)


def test_lerp_refuses_lambda_outside_the_path():
    a, b = _mlp(0).state_dict(), _mlp(1).state_dict()
    with pytest.raises(LmcError, match="lambda must be at least 0"):
        lerp(a, b, -0.5)


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"width": 0}, "width must be positive"),
        ({"width": float("nan")}, "width must be positive and finite"),
        ({"width": 2.5}, "integer"),
        ({"depth": 0}, "depth must be at least 1"),
        ({"depth": -1}, "depth"),
        ({"num_classes": 1}, "num_classes"),
        ({"activation": "swish"}, "activation"),
        ({"bias": "yes"}, "bias"),
    ],
)
def test_build_refuses_out_of_range_options(options, fragment):
    with pytest.raises(LmcError, match=fragment):
        build("mlp", **{"input_size": 8, **options})


def test_the_checks_name_their_argument():
    with pytest.raises(LmcError, match="^batch_size must be at least 1"):
        check_int("batch_size", 0)
    with pytest.raises(LmcError, match="^epochs must be an integer"):
        check_int("epochs", 2.5)
    with pytest.raises(LmcError, match="^lam must be finite"):
        check_lambda(float("nan"), "lam")
    with pytest.raises(LmcError, match="^labels must hold integer"):
        check_labels("labels", torch.zeros(3))
    with pytest.raises(LmcError, match="^labels holds a negative"):
        check_labels("labels", torch.tensor([0, -1]))
    check_finite("x", torch.tensor([1, 2]))  # integers are always finite
