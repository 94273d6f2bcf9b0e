"""BatchNorm reset and REPAIR after interpolation."""

import copy

import pytest
import torch

import lmc.models
from lmc.config import LmcError
from lmc.merge import (
    batchnorm_output_stats,
    has_batchnorm,
    lerp,
    repair,
    reset_batchnorm,
    resolve_bn_mode,
)


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).double().mean().item()


def test_has_batchnorm_and_mode_resolution():
    plain = lmc.models.build("mlp", input_size=64, width=8)
    bn = lmc.models.build("mlp", input_size=64, width=8, norm="batch")
    ln = lmc.models.build("resnet20", width=1, norm="layer")
    assert not has_batchnorm(plain) and has_batchnorm(bn) and not has_batchnorm(ln)
    assert resolve_bn_mode(bn, "auto") == "reset"
    assert resolve_bn_mode(plain, "auto") == "none"
    assert resolve_bn_mode(plain, "reset") == "none"  # nothing to reset
    assert resolve_bn_mode(bn, "repair") == "repair"
    assert resolve_bn_mode(bn, "none") == "none"
    with pytest.raises(LmcError, match="BatchNorm"):
        resolve_bn_mode(plain, "repair")
    with pytest.raises(LmcError, match="choose one of"):
        resolve_bn_mode(bn, "fix")


def test_reset_restores_the_accuracy_of_garbled_statistics(digits, bn_pair):
    x_tr, y_tr, x, y = digits
    model = copy.deepcopy(bn_pair[0])
    good = accuracy(model, x, y)
    assert good > 0.85
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.copy_(5 * torch.randn(m.running_mean.shape, generator=g))
            m.running_var.zero_()
    bad = accuracy(model, x, y)
    assert bad < good - 0.3
    params = {k: v.clone() for k, v in model.named_parameters()}
    model.train()  # the mode must come back as it was
    momentum = model.norm1.momentum
    reset_batchnorm(model, x_tr, batch_size=100)
    assert model.training and model.norm1.momentum == momentum
    model.eval()
    assert accuracy(model, x, y) > good - 0.02
    for k, v in model.named_parameters():
        assert torch.equal(v, params[k])


def test_reset_computes_the_cumulative_mean_over_batches(digits, bn_pair):
    x_tr = digits[0]
    model = copy.deepcopy(bn_pair[0])
    reset_batchnorm(model, x_tr, batch_size=100)  # 1300 examples: 13 full batches
    with torch.no_grad():
        pre = model.fc1(x_tr).double()
    assert torch.allclose(model.norm1.running_mean.double(), pre.mean(0), atol=1e-5)
    batch_vars = torch.stack([pre[s : s + 100].var(0) for s in range(0, 1300, 100)])
    assert torch.allclose(model.norm1.running_var.double(), batch_vars.mean(0), rtol=1e-4)
    assert model.norm1.num_batches_tracked == 13
    # a seeded random subset of batches is reproducible and differs from the full pass
    m1, m2 = copy.deepcopy(model), copy.deepcopy(model)
    reset_batchnorm(m1, x_tr, batch_size=100, num_batches=3, seed=7)
    reset_batchnorm(m2, x_tr, batch_size=100, num_batches=3, seed=7)
    assert torch.equal(m1.norm1.running_mean, m2.norm1.running_mean)
    assert not torch.allclose(m1.norm1.running_mean, model.norm1.running_mean, atol=1e-6)


def test_repair_matches_the_interpolated_channel_statistics(digits, bn_pair):
    x_tr, _, x, y = digits
    a, b = bn_pair
    lam = 0.3
    merged = copy.deepcopy(a)
    merged.load_state_dict(lerp(a.state_dict(), b.state_dict(), lam))
    sa = batchnorm_output_stats(a, x_tr, batch_size=100)
    sb = batchnorm_output_stats(b, x_tr, batch_size=100)
    repair(merged, a, b, lam, x_tr, batch_size=100)
    got = batchnorm_output_stats(merged, x_tr, batch_size=100)
    assert set(got) == {"norm1", "norm2", "norm3"}
    for name in got:
        mean_t = (1 - lam) * sa[name][0] + lam * sb[name][0]
        sd_t = (1 - lam) * sa[name][1] + lam * sb[name][1]
        assert torch.allclose(got[name][0], mean_t, atol=0.02 + 0.02 * sd_t.max().item())
        assert torch.allclose(got[name][1], sd_t, rtol=0.03, atol=1e-3)
    assert accuracy(merged, x, y) > 0.5


def test_repair_needs_batchnorm(digits, mlp_pair):
    a, b = mlp_pair
    with pytest.raises(LmcError, match="BatchNorm"):
        repair(copy.deepcopy(a), a, b, 0.5, digits[0])
