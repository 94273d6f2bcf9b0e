"""Derived specs are proven by function preservation: permute randomly, outputs must match."""

from __future__ import annotations

import copy
import itertools
import warnings

import pytest
import torch
from torch import nn

from lmc.config import LmcError
from lmc.models import build
from lmc.perm import (
    PermutationSpec,
    Segment,
    apply_permutation,
    moved_fraction,
    random_permutation,
    spec_from_model,
)

ACTS = ("relu", "gelu", "tanh", "sigmoid", "leaky_relu")
NORMS = ("none", "batch", "layer")


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / a.norm().clamp_min(1e-30))


def _outputs(model: nn.Module, state: dict, x: torch.Tensor, train: bool) -> torch.Tensor:
    m = copy.deepcopy(model).double()  # float64: batch statistics of tiny maps amplify rounding
    m.load_state_dict(state)
    m.train(train)
    for module in m.modules():
        if isinstance(module, nn.Dropout):
            module.eval()  # random masks differ between any two calls
    with torch.no_grad():
        out = m(x.double())
    return torch.cat([o.flatten() for o in out]) if isinstance(out, tuple) else out


def _randomise_norm_stats(model: nn.Module, seed: int) -> None:
    """Give norms non-trivial affine parameters and running stats, so a wrong spec shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)):
                if m.weight is not None:
                    m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=gen))
                    m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
                if getattr(m, "running_mean", None) is not None:
                    m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                    m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))


def check_preserved(model: nn.Module, x: torch.Tensor, seed: int = 0, expect_groups=None):
    """Derive the spec, apply a random permutation; outputs equal (eval and train mode)."""
    _randomise_norm_stats(model, seed)
    spec = spec_from_model(model, x[:2])
    perm = random_permutation(spec, seed)
    state = model.state_dict()
    permuted = apply_permutation(spec, perm, state)
    for train in (False, True):
        a = _outputs(model, state, x, train)
        b = _outputs(model, permuted, x, train)
        assert _relative(a, b) < 1e-5, f"function changed (train={train})"
    moved = moved_fraction(perm)
    assert all(f > 0 for f in moved.values()), moved
    assert any(not torch.equal(state[k], permuted[k]) for k in state)
    if expect_groups is not None:
        assert len(spec.group_sizes) == expect_groups, spec
    return spec, perm


@pytest.mark.parametrize(
    "norm,activation,bias", list(itertools.product(NORMS, ACTS, (True, False)))
)
def test_mlp_every_norm_activation_bias(norm, activation, bias):
    model = build(
        "mlp",
        seed=3,
        input_size=64,
        width=16,
        depth=3,
        norm=norm,
        activation=activation,
        bias=bias,
    )
    x = torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    spec, _ = check_preserved(model, x, expect_groups=3)
    # the logits' units are the output: never permuted
    assert spec["out.weight"][0] is None
    if bias:
        assert spec["out.bias"] == (None,)


@pytest.mark.parametrize("name", ["vgg11", "vgg16", "resnet20"])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("bias", [True, False])
def test_cnns_every_norm_and_bias(name, norm, bias):
    # every activation at least once per model: cycle through them over the grid
    index = NORMS.index(norm) * 2 + int(bias)
    activation = ACTS[index % len(ACTS)]
    width = 0.125 if name.startswith("vgg") else 0.5
    model = build(
        name, seed=1, in_channels=1, width=width, norm=norm, activation=activation, bias=bias
    )
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    groups = {"vgg11": 8, "vgg16": 13, "resnet20": 12}[name]
    check_preserved(model, x, seed=index, expect_groups=groups)


def test_resnet_residual_groups_shared():
    model = build("resnet20", seed=0, in_channels=1, width=0.5)
    spec = spec_from_model(model, torch.zeros(2, 1, 8, 8))
    stem_group = spec["stem.weight"][0][0].perm
    # every block of stage 1 writes into the stem's stream; the shortcut conv reads it
    for b in range(3):
        assert spec[f"stage1.{b}.conv2.weight"][0][0].perm == stem_group
        assert spec[f"stage1.{b}.conv1.weight"][1][0].perm == stem_group
    assert spec["stage2.0.shortcut.0.weight"][1][0].perm == stem_group
    assert spec["stage2.0.shortcut.0.weight"][0] == spec["stage2.0.conv2.weight"][0]
    assert spec["stage2.0.shortcut.1.running_var"][0] == spec["stage2.0.conv2.weight"][0]


def test_user_residual_cnn_with_cat_flatten_and_parameter(extra_models):
    model = extra_models.ResidualCNN()
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    spec, _ = check_preserved(model, x, seed=4, expect_groups=5)
    head_in = spec["head.weight"][1]
    # (16 + 4) channels of a 4x4 map, flattened: two segments, 16 columns per unit
    assert [(s.size, s.repeat) for s in head_in] == [(16, 16), (4, 16)]
    assert head_in[0].perm == spec["proj.weight"][0][0].perm == spec["scale"][1][0].perm
    assert spec["scale"][0] is None and spec["scale"][2] is None
    assert spec["b1c2.weight"][0] == spec["stem.weight"][0]  # identity-shortcut residual
    assert spec["b1n2.weight"][0] == spec["stem.weight"][0]  # GroupNorm(1, C) follows


def test_unknown_module_and_function_leave_groups_unpermuted_with_warning(extra_models):
    model = extra_models.WithUnknownModule()
    x = torch.randn(4, 1, 6, 6, generator=torch.Generator().manual_seed(3))
    with pytest.warns(UserWarning) as record:
        spec = spec_from_model(model, x[:2])
    messages = " ".join(str(w.message) for w in record)
    assert "shuffle" in messages and "roll" in messages
    assert spec["conv1.weight"][0] is None  # feeds the unknown module
    assert spec["conv2.weight"][1] is None
    assert spec["conv4.weight"][0] is None  # feeds torch.roll
    assert spec["conv2.weight"][0] is not None  # conv2 -> conv3 is untouched
    assert spec["conv3.weight"][0] is not None  # conv3 -> conv4 is untouched
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_preserved(model, x, expect_groups=2)


def test_grouped_groupnorm_is_left_unpermuted(extra_models):
    model = extra_models.GroupedNorm()
    x = torch.randn(4, 1, 6, 6, generator=torch.Generator().manual_seed(4))
    with pytest.warns(UserWarning, match="GroupNorm with 2 groups"):
        spec = spec_from_model(model, x[:2])
    assert spec["conv1.weight"][0] is None and spec["gn.weight"] == (None,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_preserved(model, x, expect_groups=1)


def test_group_reaching_the_output_is_frozen(extra_models):
    model = extra_models.TwoOutputs()
    x = torch.randn(7, 6, generator=torch.Generator().manual_seed(5))
    spec, _ = check_preserved(model, x, expect_groups=1)
    assert spec["fc1.weight"][0] is None  # h is returned
    assert spec["fc2.weight"][0] is not None
    assert spec["out.weight"][0] is None


def test_model_is_left_untouched_by_tracing():
    model = build("mlp", seed=0, input_size=64, width=8, depth=2, norm="batch").train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    spec_from_model(model, torch.randn(2, 64))
    assert model.training
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_untraceable_model_is_a_clear_error():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow
                return self.fc(x)
            return x

    with pytest.raises(LmcError, match="by hand"):
        spec_from_model(Branchy(), torch.ones(2, 4))


def test_hand_written_spec_and_summary():
    model = build("mlp", seed=0, input_size=4, width=3, depth=1, num_classes=2)
    state = model.state_dict()
    spec = PermutationSpec.from_dict(
        {
            "fc1.weight": ("P", None),
            "fc1.bias": ("P",),
            "out.weight": (None, "P"),
            "out.bias": (None,),
        },
        state,
    )
    derived = spec_from_model(model, torch.zeros(2, 4))
    renamed = {
        name: [None if e is None else [("P", s.size, s.repeat) for s in e] for e in entries]
        for name, entries in derived.axes.items()
    }
    assert PermutationSpec(renamed, state) == spec
    assert spec.groups == {"P": [("fc1.weight", 0), ("fc1.bias", 0), ("out.weight", 1)]}
    assert spec.group_sizes == {"P": 3}
    text = str(spec)
    assert "P (3): fc1.weight[0], fc1.bias[0], out.weight[1]" in text
    assert "unpermuted: out.bias" in text
    # shorthand forms: (name, repeat) and explicit segments
    spec2 = PermutationSpec.from_dict({"w": [("Q", 2), [("R", 2, 1), (None, 1, 1)]]}, {"w": (6, 3)})
    assert spec2["w"][0] == (Segment("Q", 3, 2),)
    assert spec2["w"][1] == (Segment("R", 2, 1), Segment(None, 1, 1))
    assert spec2.group_sizes == {"Q": 3, "R": 2}
    assert PermutationSpec.from_dict(spec2.to_dict(), {"w": (6, 3)}) == spec2


@pytest.mark.parametrize(
    "axes,shapes,match",
    [
        ({"w": ("P",)}, {"w": (3, 2)}, "has 1 axes"),
        ({"w": ("P", "P")}, {"w": (3, 2)}, "one size"),
        ({"w": (("P", 4), None)}, {"w": (6, 2)}, "does not divide"),
        ({"w": ([("P", 2, 1)], None)}, {"w": (3, 2)}, "cover 2 indices"),
        ({"v": ("P",)}, {"w": (3,)}, "no shape"),
    ],
)
def test_bad_hand_written_specs(axes, shapes, match):
    with pytest.raises(LmcError, match=match):
        PermutationSpec.from_dict(axes, shapes)


def test_fixing_a_group_fixes_its_segments_merges_them_and_drops_its_heads():
    spec = PermutationSpec(
        {"w": [[("a", 2, 1), (None, 1, 1), ("b", 3, 1)], "c"], "q": ["h", None]},
        {"w": (6, 2), "q": (4, 2)},
        heads={"h": ("c", 2)},
    )
    fixed = spec.fixing(["b", "c"])
    assert fixed["w"][0] == (Segment("a", 2, 1), Segment(None, 4, 1))
    assert fixed["w"][1] is None
    assert fixed.heads == {} and set(fixed.group_sizes) == {"a", "h"}
    assert spec.fixing([]) == spec
