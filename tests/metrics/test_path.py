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


def test_perfectly_classified_calibration_subset_gives_undefined_calibrated_loss(
    mlp_pair, perfect_subset
):
    a, b = mlp_pair
    x, y = perfect_subset  # A classifies every example correctly
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


# -- tasks: next-token prediction on a tiny causal GPT (lmc.data.tasks) ----------------------
VOCAB, CONTEXT = 11, 7
#: torch.vmap has no batching rule for CPU attention yet and says so (the numbers are right)
_VMAP_ATTENTION = pytest.mark.filterwarnings("ignore:There is a performance drop")


class _OnePosition(torch.nn.Module):
    """A classifier seen as a one-position token model: (N, C) logits -> (N, 1, C)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x).unsqueeze(1)


@pytest.fixture(scope="module")
def gpt_windows():
    """Two tiny GPTs (seeds 0, 1), 40 random windows and targets drawn from softmax(s·(f_A +
    f_B)): the targets carry signal, so every fitted beta is finite."""
    models = [
        lmc.models.build("gpt", seed=s, vocab=VOCAB, context=CONTEXT, width=16, heads=2, depth=1)
        for s in (0, 1)
    ]
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (40, CONTEXT), generator=gen)
    with torch.no_grad():
        z = models[0](x) + models[1](x)
    probs = torch.softmax(z.reshape(-1, VOCAB) * (2.0 / z.std()), dim=1)
    y = torch.multinomial(probs, 1, generator=gen).view(40, CONTEXT)
    return models[0].eval(), models[1].eval(), x, y


def _per_token(z, y):
    """Mean cross-entropy over every position (nats per token) and the fraction of positions
    predicted, written out by hand."""
    ce = torch.nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]).double(), y.reshape(-1))
    return ce.item(), (z.argmax(-1) == y).double().mean().item()


@_VMAP_ATTENTION
def test_next_token_endpoints_and_ensemble_are_per_token(gpt_windows):
    a, b, x, y = gpt_windows
    res = evaluate_path(a, b, x, y, 3, task="next-token")
    with torch.no_grad():
        za, zb = a(x), b(x)
    for i, z in ((0, za), (-1, zb)):
        loss, acc = _per_token(z, y)
        assert res.loss[i] == pytest.approx(loss, abs=1e-6)
        assert res.accuracy[i] == acc
    loss, acc = _per_token(0.5 * za + 0.5 * zb, y)  # the logit ensemble at every position
    assert res.ensemble_loss[1] == pytest.approx(loss, abs=1e-6)
    assert res.ensemble_accuracy[1] == acc
    norms = torch.linalg.vector_norm(za.double(), dim=-1).mean().item()
    assert res.logit_norm[0] == pytest.approx(norms, rel=1e-9)
    assert res.num_examples == 40 and res.method == "loop"  # auto: attention on the CPU
    with torch.no_grad():  # the interior point is theta(1/2) itself
        mid = copy.deepcopy(a)
        mid.load_state_dict(lerp(a.state_dict(), b.state_dict(), 0.5))
        assert res.loss[1] == pytest.approx(_per_token(mid(x), y)[0], abs=1e-6)
    batched = evaluate_path(a, b, x, y, 3, task="next-token", method="batched")
    assert batched.loss == pytest.approx(res.loss, abs=1e-6)


@_VMAP_ATTENTION
@pytest.mark.parametrize("calibration", ["split", "crossfit"])
def test_next_token_calibration_subsets_are_whole_windows(gpt_windows, calibration):
    a, b, x, y = gpt_windows
    kw = dict(calibrate=True, calibration=calibration, calibration_seed=4, calibration_folds=3)
    res = evaluate_path(a, b, x, y, 3, task="next-token", **kw)
    with torch.no_grad():
        za = a(x)
    task = "next-token"
    if calibration == "split":  # beta fitted on the calibration windows, scored on the rest
        cal, held = calibration_split(len(x), 4, 0.2)
        beta = fit_inverse_temperature(za[cal], y[cal], task=task)
        loss = cross_entropy_at(za[held], y[held], beta, task=task)
        assert res.num_calibration == len(cal) and res.num_heldout == len(held)
        heldout = cross_entropy_at(za[held], y[held], task=task)
        assert res.heldout_loss[0] == pytest.approx(heldout, rel=1e-9)
    else:  # each window scored by the beta fitted on the other folds' windows
        total = 0.0
        for fold in crossfit_folds(len(x), 4, 3):
            keep = torch.ones(len(x), dtype=torch.bool)
            keep[fold] = False
            fold_beta = fit_inverse_temperature(za[keep], y[keep], task=task)
            total += cross_entropy_at(za[fold], y[fold], fold_beta, task=task) * len(fold)
        beta, loss = fit_inverse_temperature(za, y, task=task), total / len(x)
        assert res.num_heldout == len(x)
    assert res.inverse_temperature[0] == pytest.approx(beta, rel=1e-6)
    assert res.calibrated_loss[0] == pytest.approx(loss, rel=1e-6)
    assert all(math.isfinite(v) for v in res.inverse_temperature + res.calibrated_loss)


@pytest.mark.parametrize("calibration", ["split", "crossfit"])
def test_classification_is_bit_identical_through_a_one_position_token_task(
    digits, mlp_pair, calibration
):
    """The next-token machinery (flattening, window subsets and folds) with T = 1 reproduces
    the classification path bit for bit, and naming the classification task changes nothing."""
    _, _, x, y = digits
    a, b = mlp_pair
    kw = dict(calibrate=True, calibration=calibration, calibration_seed=1, fast=False)
    plain = evaluate_path(a, b, x, y, 3, **kw)
    named = evaluate_path(a, b, x, y, 3, task="classification", **kw)
    tokens = evaluate_path(_OnePosition(a), _OnePosition(b), x, y[:, None], 3,
                           task="next-token", **kw)  # fmt: skip
    assert named.to_dict() == plain.to_dict()
    for key in FIELDS:
        got, want = getattr(tokens, key), getattr(plain, key)
        assert got == want or all(math.isnan(u) and math.isnan(v) for u, v in zip(got, want)), key
    assert tokens.num_calibration == plain.num_calibration


@_VMAP_ATTENTION
def test_next_token_layout_errors_are_one_line(gpt_windows):
    a, b, x, y = gpt_windows
    with pytest.raises(LmcError, match=r"output has shape \(1, 7, 11\).*\(N, C\)"):
        evaluate_path(a, b, x, y[:, 0], 3)  # a token model under the classification task
    with pytest.raises(LmcError, match=r"y must have shape \(N, T\)"):
        evaluate_path(a, b, x, y[:, 0], 3, task="next-token")
    with pytest.raises(LmcError, match="holds class 11 but the model has 11"):
        evaluate_path(a, b, x, torch.full_like(y, VOCAB), 3, task="next-token")
