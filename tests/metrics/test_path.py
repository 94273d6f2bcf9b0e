"""Path evaluation: endpoints, batching, calibration subsets, ensembles, BatchNorm modes."""

import copy
import math

import pytest
import torch

import lmc.models
from lmc.config import LmcError, LmcWarning
from lmc.merge import lerp
from lmc.metrics import (
    barriers,
    calibration_split,
    chain_plan,
    cross_entropy_at,
    crossfit_folds,
    evaluate_path,
    fit_inverse_temperature,
    lambda_grid,
)

FIELDS = [
    "loss", "accuracy", "logit_norm", "ensemble_loss", "ensemble_accuracy", "calibrated_loss",
    "inverse_temperature", "heldout_loss", "ensemble_calibrated_loss",
    "ensemble_inverse_temperature",
]  # fmt: skip


def test_lambda_grid():
    grid, added = lambda_grid(11)
    assert grid == [i / 10 for i in range(11)] and added == [] and grid[5] == 0.5
    grid, added = lambda_grid(4)  # 0, 1/3, 2/3, 1 and the midpoint
    assert grid == [0.0, 1 / 3, 0.5, 2 / 3, 1.0] and added == [0.5]
    grid, added = lambda_grid([0.75, 0.25, 0.25])
    assert grid == [0.0, 0.25, 0.5, 0.75, 1.0] and added == [0.0, 0.5, 1.0]
    with pytest.raises(LmcError, match="outside"):
        lambda_grid([0.5, 1.5])
    with pytest.raises(LmcError, match="at least 2"):
        lambda_grid(1)


def test_endpoints_are_the_models_bit_for_bit(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    res = evaluate_path(a, b, x, y, 5, batch_size=len(x))
    with torch.no_grad():
        za, zb = a(x), b(x)
    assert res.loss[0] == cross_entropy_at(za, y)
    assert res.loss[-1] == cross_entropy_at(zb, y)
    assert res.accuracy[0] == (za.argmax(1) == y).double().mean().item()
    assert res.accuracy[-1] == (zb.argmax(1) == y).double().mean().item()
    assert res.ensemble_loss[0] == res.loss[0] and res.ensemble_loss[-1] == res.loss[-1]
    assert res.method == "batched" and res.bn == "none"


def test_self_interpolation_has_zero_barriers(digits, mlp_pair):
    _, _, x, y = digits
    a, _ = mlp_pair
    res = evaluate_path(a, a, x, y, 7, calibrate=True)
    for key, value in barriers(res).items():
        assert abs(value) < 1e-6, key
    assert max(res.loss) - min(res.loss) < 1e-6


@pytest.mark.parametrize("lambdas", [11, [0.1, 0.3, 0.5, 0.9]])
def test_batched_equals_loop(digits, mlp_pair, lambdas):
    _, _, x, y = digits
    a, b = mlp_pair
    kw = dict(calibrate=True, calibration_seed=3)
    batched = evaluate_path(a, b, x, y, lambdas, method="batched", batch_size=100, **kw)
    loop = evaluate_path(a, b, x, y, lambdas, method="loop", **kw)
    assert batched.method == "batched" and loop.method == "loop"
    assert batched.lambdas == loop.lambdas
    for key in FIELDS:
        got, want = getattr(batched, key), getattr(loop, key)
        assert got == pytest.approx(want, abs=1e-5, rel=1e-5), key
    # and the path really moves: the interior differs from both endpoints
    assert abs(batched.loss[len(batched.loss) // 2] - batched.loss[0]) > 1e-3


def test_batched_chunks_of_lambdas_give_the_same_numbers(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    one = evaluate_path(a, b, x, y, 6, method="batched")
    small = sum(t.numel() * 4 for t in a.state_dict().values())
    chunked = evaluate_path(a, b, x, y, 6, method="batched", max_stack_bytes=2 * small)
    assert chunked.loss == pytest.approx(one.loss, abs=1e-6)


def test_calibrated_numbers_use_the_documented_subsets(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    res = evaluate_path(a, b, x, y, 3, calibrate=True, calibration_seed=5, calibration="split")
    assert res.calibration_method == "split" and res.calibration_folds is None
    cal, held = calibration_split(len(y), 5, 0.2)
    assert res.num_calibration == len(cal) == round(0.2 * len(y))
    assert res.num_heldout == len(held) == len(y) - len(cal)
    assert set(cal.tolist()).isdisjoint(held.tolist())
    with torch.no_grad():
        merged = copy.deepcopy(a)
        merged.load_state_dict(lerp(a.state_dict(), b.state_dict(), 0.5))
        z = merged(x)
        za, zb = a(x), b(x)
    beta = fit_inverse_temperature(z[cal], y[cal])
    assert res.inverse_temperature[1] == pytest.approx(beta, rel=1e-5)
    assert res.calibrated_loss[1] == pytest.approx(
        cross_entropy_at(z[held], y[held], beta), rel=1e-5
    )
    assert res.heldout_loss[1] == pytest.approx(cross_entropy_at(z[held], y[held]), rel=1e-6)
    assert res.loss[1] == pytest.approx(cross_entropy_at(z, y), rel=1e-6)
    ens = 0.5 * za + 0.5 * zb
    assert res.ensemble_loss[1] == pytest.approx(cross_entropy_at(ens, y), rel=1e-6)
    assert res.ensemble_accuracy[1] == pytest.approx((ens.argmax(1) == y).double().mean().item())
    norm = z.double().norm(dim=1).mean().item()
    assert res.logit_norm[1] == pytest.approx(norm, rel=1e-6)
    # a different seed draws a different subset
    other = evaluate_path(a, b, x, y, 3, calibrate=True, calibration_seed=6, calibration="split")
    assert other.calibrated_loss[1] != res.calibrated_loss[1]
    assert res.calibration_seed == 5 and res.calibration_fraction == 0.2


def test_state_b_overrides_model_b(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    via_model = evaluate_path(a, b, x, y, 3)
    via_state = evaluate_path(a, None, x, y, 3, state_b=b.state_dict())
    assert via_state.loss == via_model.loss


def test_midpoint_is_added_and_recorded(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    res = evaluate_path(a, b, x, y, [0.2, 0.8])
    assert res.lambdas == [0.0, 0.2, 0.5, 0.8, 1.0]
    assert res.added_lambdas == [0.0, 0.5, 1.0]
    assert barriers(res)["midpoint_loss_barrier"] is not None


def test_mismatched_models_are_a_clear_error(digits, mlp_pair):
    _, _, x, y = digits
    a, _ = mlp_pair
    wide = lmc.models.build("mlp", seed=0, input_size=64, width=48)
    with pytest.raises(LmcError, match="fc1.weight"):
        evaluate_path(a, wide, x, y, 3)


def test_models_are_left_as_they_were(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    before = {k: v.clone() for k, v in a.state_dict().items()}
    a.train()
    evaluate_path(a, b, x, y, 3)
    assert a.training
    a.eval()
    for k, v in a.state_dict().items():
        assert torch.equal(v, before[k])


def test_batchnorm_models_reset_per_lambda(digits, bn_pair):
    x_tr, _, x, y = digits
    a, b = bn_pair
    with pytest.raises(LmcError, match="bn_inputs"):
        evaluate_path(a, b, x, y, 3)
    reset = evaluate_path(a, b, x, y, 3, bn_inputs=x_tr)
    assert reset.bn == "reset" and reset.method == "loop"
    plain = evaluate_path(a, b, x, y, 3, bn="none")
    assert plain.bn == "none" and plain.method == "batched"
    assert reset.loss[0] == plain.loss[0]  # endpoints keep their own statistics
    assert reset.loss[1] != plain.loss[1]
    rep = evaluate_path(a, b, x, y, 3, bn="repair", bn_inputs=x_tr)
    assert rep.bn == "repair"
    assert rep.accuracy[1] > 0.5
    with pytest.raises(LmcError, match="batched"):
        evaluate_path(a, b, x, y, 3, bn="reset", bn_inputs=x_tr, method="batched")


def test_perfectly_classified_calibration_subset_gives_undefined_calibrated_loss(digits, mlp_pair):
    x_tr, y_tr, _, _ = digits
    a, b = mlp_pair
    with torch.no_grad():
        right = a(x_tr).argmax(1) == y_tr
    x, y = x_tr[right][:400], y_tr[right][:400]  # A classifies every example correctly
    for calibration in ("split", "crossfit"):
        with pytest.warns(LmcWarning):
            res = evaluate_path(a, b, x, y, 3, calibrate=True, calibration=calibration)
        # the bound's beta (1e4) is not an estimate: it is undefined, never reported
        assert math.isnan(res.inverse_temperature[0])
        assert math.isnan(res.calibrated_loss[0])
        assert res.calibration_at_bound[0] == 0.0
        assert math.isnan(barriers(res)["calibrated_midpoint_loss_barrier"])
        assert not math.isnan(barriers(res)["midpoint_loss_barrier"])


class _ItemNet(torch.nn.Module):
    """A model whose forward calls .item(), which torch.vmap cannot batch."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        scale = 1.0 if self.fc.weight.abs().max().item() < 1e9 else 0.0
        return self.fc(x) * scale


def test_auto_falls_back_to_the_loop_when_vmap_cannot_batch(digits):
    _, _, x, y = digits
    torch.manual_seed(0)
    a, b = _ItemNet(), _ItemNet()
    res = evaluate_path(a, b, x, y, 5)
    assert res.method == "loop"
    loop = evaluate_path(a, b, x, y, 5, method="loop")
    assert res.loss == loop.loss
    with pytest.raises(LmcError, match="method='loop'"):
        evaluate_path(a, b, x, y, 5, method="batched")


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"norm": "layer"},
        {"activation": "gelu"},
        {"activation": "tanh", "bias": False},
        {"activation": "leaky_relu"},
        {"activation": "sigmoid", "norm": "layer"},
    ],
)
def test_chain_fast_path_equals_vmap(digits, train_fn, options):
    x_tr, y_tr, x, y = digits
    a = train_fn(0, x_tr, y_tr, width=24, steps=40, **options)
    b = train_fn(1, x_tr, y_tr, width=24, steps=40, **options)
    assert chain_plan(a) is not None
    fast = evaluate_path(a, b, x, y, 6, calibrate=True, batch_size=150)
    vmapped = evaluate_path(a, b, x, y, 6, calibrate=True, fast=False)
    loop = evaluate_path(a, b, x, y, 6, calibrate=True, method="loop")
    for key in FIELDS:
        assert getattr(fast, key) == pytest.approx(getattr(vmapped, key), abs=1e-5, rel=1e-5), key
        assert getattr(fast, key) == pytest.approx(getattr(loop, key), abs=1e-5, rel=1e-5), key


def test_chain_plan_refuses_what_it_cannot_stack():
    assert chain_plan(lmc.models.build("mlp", input_size=64, width=8, norm="batch")) is None
    assert chain_plan(lmc.models.build("resnet20", width=0.25)) is None
    assert chain_plan(_ItemNet()) is None  # .item() cannot be traced


def test_crossfit_path_matches_a_hand_computation(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    kw = dict(calibrate=True, calibration="crossfit", calibration_folds=4, calibration_seed=2)
    res = evaluate_path(a, b, x, y, 3, **kw)
    assert res.calibration_method == "crossfit" and res.calibration_folds == 4
    assert res.num_heldout == len(y) and res.calibration_fraction is None
    with torch.no_grad():
        merged = copy.deepcopy(a)
        merged.load_state_dict(lerp(a.state_dict(), b.state_dict(), 0.5))
        z = merged(x)
    total = 0.0
    for fold in crossfit_folds(len(y), 2, 4):
        fit = torch.ones(len(y), dtype=torch.bool)
        fit[fold] = False
        beta = fit_inverse_temperature(z[fit], y[fit])
        total += cross_entropy_at(z[fold], y[fold], beta) * len(fold)
    assert res.calibrated_loss[1] == pytest.approx(total / len(y), rel=1e-5)
    assert res.inverse_temperature[1] == pytest.approx(fit_inverse_temperature(z, y), rel=1e-5)
    assert res.heldout_loss == pytest.approx(res.loss, rel=1e-9)  # the same (all) examples
    loop = evaluate_path(a, b, x, y, 3, method="loop", **kw)
    for key in FIELDS:
        assert getattr(loop, key) == pytest.approx(getattr(res, key), abs=1e-5, rel=1e-5), key


def test_auto_calibration_follows_the_split_size(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    small = evaluate_path(a, b, x, y, 3, calibrate=True)  # digits' test split
    assert small.calibration_method == "crossfit" and small.calibration_folds == 5
    big_x, big_y = torch.cat([x] * 11), torch.cat([y] * 11)  # over 5000 examples
    big = evaluate_path(a, b, big_x, big_y, 3, calibrate=True)
    assert len(big_y) >= 5000 and big.calibration_method == "split"
    assert big.num_calibration == round(0.2 * len(big_y)) and big.calibration_fraction == 0.2
    assert big.calibration_folds is None
    plain = evaluate_path(a, b, x, y, 3)
    assert plain.calibration_method is None and plain.calibration_folds is None
