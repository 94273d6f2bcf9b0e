import itertools

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build, count_parameters, initialize
from lmc.models.layers import ACTIVATIONS, NORMS

CNN_INPUT = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
MLP_INPUT = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))


def _small(name, **options):
    if name == "mlp":
        return build(name, input_size=64, width=16, seed=0, **options), MLP_INPUT
    return build(name, width=0.125, seed=0, **options), CNN_INPUT


@pytest.mark.parametrize("name", ["mlp", "vgg11", "vgg16", "resnet20"])
@pytest.mark.parametrize("norm,activation", list(itertools.product(NORMS, ACTIVATIONS)))
def test_every_model_norm_activation_runs_forward_backward(name, norm, activation):
    model, x = _small(name, norm=norm, activation=activation)
    model.train()
    out = model(x)
    assert out.shape == (len(x), 10)
    out.square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("name", ["mlp", "vgg11", "resnet20"])
def test_bias_flag_removes_linear_and_conv_biases(name):
    model, x = _small(name, norm="none", bias=False)
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
            assert module.bias is None
    assert model(x).shape == (len(x), 10)


def test_mlp_width_sets_hidden_units_and_parameter_count():
    for width in (8, 32, 128):
        model = build("mlp", input_size=64, width=width, depth=3, num_classes=10)
        assert model.fc1.out_features == width and model.fc3.out_features == width
        expected = (64 * width + width) + 2 * (width * width + width) + (width * 10 + 10)
        assert count_parameters(model) == expected


def test_depth_counts_hidden_layers():
    model = build("mlp", input_size=64, width=8, depth=5)
    assert [p.layer for p in model.probe_points()] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    "name,base", [("vgg11", [64, 128, 256, 256, 512, 512, 512, 512]), ("resnet20", None)]
)
def test_cnn_width_multiplier_scales_channels(name, base):
    one = build(name, width=1)
    two = build(name, width=2)
    convs_one = [m.out_channels for m in one.modules() if isinstance(m, torch.nn.Conv2d)]
    convs_two = [m.out_channels for m in two.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs_two == [2 * c for c in convs_one]
    if base is not None:
        assert convs_one == base
    else:
        assert sorted(set(convs_one)) == [16, 32, 64]
    # conv weights dominate: parameters grow about 4x when channels double
    ratio = count_parameters(two) / count_parameters(one)
    assert 3.5 < ratio < 4.1


def test_resnet20_has_twenty_weight_layers_on_main_path():
    model = build("resnet20")
    points = model.probe_points()
    assert points[-1].layer == 20 and points[-1].kind == "logits"
    assert sum(p.kind == "block" for p in points) == 9


def test_probe_points_name_real_modules():
    for name in ("mlp", "vgg11", "vgg16", "resnet20"):
        model, _ = _small(name)
        modules = dict(model.named_modules())
        for point in model.probe_points():
            assert point.output in modules
            assert point.weight is None or point.weight in modules
            assert point.preactivation is None or point.preactivation in modules


def test_same_seed_same_bits_different_seed_different_weights():
    a = build("resnet20", width=0.5, seed=3)
    b = build("resnet20", width=0.5, seed=3)
    c = build("resnet20", width=0.5, seed=4)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    assert not torch.equal(a.stem.weight, c.stem.weight)


def test_initialize_ignores_global_rng():
    torch.manual_seed(0)
    a = initialize(build("mlp", input_size=64, width=8), seed=1)
    torch.manual_seed(123)
    b = initialize(build("mlp", input_size=64, width=8), seed=1)
    assert torch.equal(a.fc1.weight, b.fc1.weight)


def test_unknown_model_and_option_are_clear_errors():
    with pytest.raises(LmcError, match="unknown model 'vgg99'.*mlp"):
        build("vgg99")
    with pytest.raises(LmcError, match="no option 'depth'"):
        build("vgg11", depth=3)
    with pytest.raises(LmcError, match="unknown norm"):
        build("mlp", norm="group")
