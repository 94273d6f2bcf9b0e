"""Probe points: zoo models, derived ones for user models, in-place activations, errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lmc.analysis import analyze, derive_probe_points, layerwise
from lmc.config import LmcError
from lmc.models import build


class _Reordered(nn.Module):
    """Registers its layers out of order; the forward pass defines the real order."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(6, 3)
        self.act2 = nn.Tanh()
        self.second = nn.Linear(8, 6)
        self.first = nn.Linear(4, 8)
        self.act1 = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.head(self.act2(self.second(self.act1(self.first(x)))))


def test_derived_points_follow_execution_order():
    model = _Reordered()
    points = derive_probe_points(model, torch.randn(2, 4))
    assert [(p.name, p.layer, p.kind, p.weight, p.preactivation) for p in points] == [
        ("layer1", 1, "hidden", "first", "act1"),
        ("layer2", 2, "hidden", "second", "act2"),
        ("logits", 3, "logits", "head", None),
    ]
    assert derive_probe_points(model)[0].weight == "head"  # registration order without input


def test_inplace_activation_keeps_the_preactivation():
    """An in-place ReLU overwrites its input; the recorder must keep the pre-activation."""
    model = _Reordered()
    x = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    result = analyze(model, model, x, 0.5)
    pre = model.first(x).detach()
    expected = pre.pow(2).mean(0).sqrt().numpy()
    assert result.moments["layer1"]["a"] == pytest.approx(expected, rel=1e-5)
    assert (pre < 0).any()  # so a captured ReLU output would have given other moments
    layer2 = result.records[1]
    assert layer2["activation"] == "tanh"
    assert layer2["weak_additivity_cosine"] == pytest.approx(1.0)  # A against itself
    assert model.act1.inplace  # the user's module is untouched


def test_resnet_blocks_report_no_weight_statistics():
    a = build("resnet20", seed=0, in_channels=1, width=0.25, norm="layer")
    b = build("resnet20", seed=1, in_channels=1, width=0.25, norm="layer")
    x = torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    a.train()
    records = layerwise(a, b, x, lam=0.5, batch_size=4)
    assert a.training  # modes restored
    names = [r["name"] for r in records]
    assert names[0] == "stem" and names[-1] == "logits" and len(records) == 11
    assert [r["units"] for r in records] == [4, 4, 4, 4, 8, 8, 8, 16, 16, 16, 10]
    for r in records:
        assert r["has_bias"] is True
        has_weight = r["kind"] != "block"
        for key in (
            "reciprocal_ratio",
            "reciprocal_cosine",
            "commutativity_relative",
            "effective_rank_a",
        ):
            assert (r[key] is not None) == has_weight, (r["name"], key)
        if r["kind"] == "block":
            assert r["activation"] == "relu" and 0 <= r["weak_additivity_cosine"] <= 1
        assert -1 <= r["lewc_cosine"] <= 1


def test_vgg_conv_layers_use_channels_as_units():
    a = build("vgg11", seed=0, in_channels=1, width=0.0625, norm="none", bias=False)
    b = build("vgg11", seed=1, in_channels=1, width=0.0625, norm="none", bias=False)
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    result = analyze(a, b, x, [0.5])
    first = result.records[0]
    assert first["units"] == 4  # 64 * 0.0625 channels
    assert first["has_bias"] is False
    assert result.spectra["layer1"]["a"].shape == (4,)  # a 4 x 9 matrix
    assert first["reciprocal_ratio"] == pytest.approx(1.0)  # both read the same images


def test_bad_inputs_are_clear_errors():
    a = build("mlp", seed=0, input_size=8, width=4, depth=1)
    other = build("mlp", seed=0, input_size=8, width=5, depth=1)
    x = torch.randn(3, 8)
    with pytest.raises(LmcError, match="differ"):
        layerwise(a, other, x)
    with pytest.raises(LmcError, match="no examples"):
        layerwise(a, a, torch.empty(0, 8))
    with pytest.raises(LmcError, match="lam"):
        layerwise(a, a, x, lam=[])
    with pytest.raises(LmcError, match="no Linear or Conv"):
        layerwise(
            nn.Sequential(nn.ReLU(), nn.BatchNorm1d(8)),
            nn.Sequential(nn.ReLU(), nn.BatchNorm1d(8)),
            x,
        )
