"""Curves between two models (Garipov et al. 2018): the kinds' formulas, exact endpoints, the
control point's training for any model, its checkpoints and its storage as a run."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import lmc.models
from lmc.config import LmcError
from lmc.data.tasks import get_task
from lmc.merge import (
    PATH_KINDS,
    Curve,
    CurveSettings,
    curve_config,
    curve_config_for_runs,
    endpoint_record,
    fit_curve,
    get_path_kind,
    lerp,
    load_curve,
    reset_batchnorm,
    save_curve,
)
from lmc.merge.curve_fit import CURVE_CHECKPOINT
from lmc.merge.curves import midpoint_control, state_digest
from lmc.metrics import evaluate_path
from lmc.metrics.curve_path import evaluate_curve
from lmc.store import RunStore, load_run

GRID = [i / 10 for i in range(11)]


def expected_loss(curve, model, x, y, **kw) -> float:
    """The mean loss over the fixed grid of 11 t values (the trapezoid-free estimate of
    E_t L(θ(t)) every before/after comparison here uses)."""
    result = evaluate_curve(curve, model, x, y, GRID, **kw)
    return sum(result.loss) / len(result.loss)


# -- the kinds ---------------------------------------------------------------------------


def test_path_kinds_are_line_bezier_chain_with_weights_summing_to_one():
    assert list(PATH_KINDS) == ["line", "bezier", "chain"]
    assert get_path_kind("line").control_points == 0
    assert get_path_kind("bezier").control_points == get_path_kind("chain").control_points == 1
    for kind in PATH_KINDS.values():
        assert kind.weights(0.0) == (1.0, 0.0, 0.0) and kind.weights(1.0) == (0.0, 0.0, 1.0)
        for t in GRID:
            assert sum(kind.weights(t)) == pytest.approx(1.0, abs=1e-15)
    assert get_path_kind("line").weights(0.3) == pytest.approx((0.7, 0.0, 0.3))
    assert get_path_kind("bezier").weights(0.3) == pytest.approx((0.49, 0.42, 0.09))
    assert get_path_kind("chain").weights(0.25) == pytest.approx((0.5, 0.5, 0.0))
    assert get_path_kind("chain").weights(0.75) == pytest.approx((0.0, 0.5, 0.5))
    with pytest.raises(LmcError, match="unknown path kind"):
        get_path_kind("spline")
    with pytest.raises(LmcError, match="t must be at most 1"):
        get_path_kind("bezier").weights(1.5)


@pytest.mark.parametrize("kind", ["bezier", "chain"])
def test_a_curve_at_t_0_and_1_gives_the_endpoints(kind, random_state):
    a, b, c = random_state(0), random_state(1), random_state(2)
    curve = Curve(kind, a, b, c)
    start, end = curve.point(0.0), curve.point(1.0)
    for k in ("w", "b", "bn.running_mean"):
        assert torch.allclose(start[k], a[k], atol=1e-6, rtol=0)
        assert torch.allclose(end[k], b[k], atol=1e-6, rtol=0)
        assert start[k].data_ptr() != a[k].data_ptr()  # a copy, not a view
    # integer buffers are not interpolated: A's before t = 1, B's at t = 1
    assert all(curve.point(t)["bn.num_batches_tracked"] == 10 for t in (0.0, 0.4, 0.999))
    assert curve.point(1.0)["bn.num_batches_tracked"] == 11


def test_a_chain_whose_bend_is_the_midpoint_is_the_line(random_state):
    a, b = random_state(0), random_state(1)
    chain = Curve("chain", a, b, midpoint_control(a, b))
    for t in GRID + [0.123, 0.5001, 0.987]:
        line = lerp(a, b, t)
        point = chain.point(t)
        for k in a:
            if not a[k].is_floating_point():  # integer entries: A's, B's at t = 1
                continue
            assert torch.allclose(point[k], line[k], atol=1e-6, rtol=0), (t, k)


def test_a_chain_passes_through_its_bend_at_one_half(random_state):
    a, b, c = random_state(0), random_state(1), random_state(2)
    point = Curve("chain", a, b, c).point(0.5)
    for k in ("w", "b", "bn.running_mean"):
        assert torch.equal(point[k], c[k])


def test_the_bezier_curve_at_one_half_is_a_quarter_a_half_control_a_quarter_b(random_state):
    a, b, c = random_state(0), random_state(1), random_state(2)
    point = Curve("bezier", a, b, c).point(0.5)
    for k in ("w", "b", "bn.running_mean"):
        assert torch.allclose(point[k], 0.25 * a[k] + 0.5 * c[k] + 0.25 * b[k], atol=1e-6)
    # and with the untrained control point (the midpoint) the Bézier curve is the line
    mid = Curve("bezier", a, b).point(0.3)
    assert torch.allclose(mid["w"], lerp(a, b, 0.3)["w"], atol=1e-6)


def test_curve_checks_its_states_and_measures_the_bend(random_state):
    a, b, c = random_state(0), random_state(1), random_state(2)
    with pytest.raises(LmcError, match="no control point"):
        Curve("line", a, b, c)
    with pytest.raises(LmcError):
        Curve("bezier", a, {k: v for k, v in b.items() if k != "w"})
    assert Curve("bezier", a, b).bend_distance() == pytest.approx(0.0, abs=1e-6)
    moved = {k: v.clone() for k, v in midpoint_control(a, b).items()}
    moved["w"] += 1.0  # ‖θ_C − mid‖ = sqrt(12)
    diff = sum(float((a[k] - b[k]).square().sum()) for k in ("w", "b", "bn.running_mean"))
    assert Curve("chain", a, b, moved).bend_distance() == pytest.approx((12 / diff) ** 0.5)


# -- evaluation ----------------------------------------------------------------------------


def test_the_line_as_a_curve_evaluates_like_evaluate_path(mlp_pair, digits):
    a, b = mlp_pair
    x, y = digits[2], digits[3]
    line = Curve("line", a.state_dict(), b.state_dict())
    curve = evaluate_curve(line, a, x, y, 5)
    path = evaluate_path(a, b, x, y, 5, method="loop")
    assert curve.lambdas == path.lambdas
    assert curve.loss[0] == path.loss[0] and curve.loss[-1] == path.loss[-1]  # same endpoints
    assert curve.loss == pytest.approx(path.loss, abs=1e-6)
    assert curve.ensemble_loss == pytest.approx(path.ensemble_loss, abs=1e-12)
    assert curve.barriers()["loss_barrier"] == pytest.approx(path.barriers()["loss_barrier"])
    with pytest.raises(LmcError, match="REPAIR"):
        evaluate_curve(line, a, x, y, 5, bn="repair")


# -- training --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bezier", "chain"])
def test_training_lowers_the_expected_loss_along_the_curve(mlp_pair, digits, kind):
    a, b = mlp_pair
    x_tr, y_tr = digits[0], digits[1]
    a_before = {k: v.clone() for k, v in a.state_dict().items()}
    start = Curve(kind, a.state_dict(), b.state_dict())
    before = expected_loss(start, a, x_tr, y_tr)
    fit = fit_curve(a, b, x_tr, y_tr, kind=kind, epochs=2, batch_size=64, steps_per_epoch=15,
                    lr=1e-2, seed=0)  # fmt: skip
    after = expected_loss(fit.curve, a, x_tr, y_tr)
    assert len(fit.history) == 2 and fit.steps_per_epoch == 15 and fit.epochs_done == 2
    assert after < 0.8 * before, (before, after)
    assert fit.curve.bend_distance() > 0.01
    # the endpoints are not trained, and model A is left as it was
    point0 = fit.curve.point(0.0)
    assert all(torch.equal(point0[k], a_before[k]) for k in a_before)
    assert all(torch.equal(a.state_dict()[k], a_before[k]) for k in a_before)
    # the same seed gives the same control point
    again = fit_curve(a, b, x_tr, y_tr, kind=kind, epochs=2, batch_size=64, steps_per_epoch=15,
                      lr=1e-2, seed=0)  # fmt: skip
    assert all(torch.equal(again.curve.control[k], fit.curve.control[k]) for k in a_before)


def test_a_curve_between_a_model_and_itself_stays_at_its_loss(mlp_pair, digits):
    a = mlp_pair[0]
    x_tr, y_tr = digits[0], digits[1]
    own = evaluate_path(a, a, x_tr, y_tr, 3).loss[0]
    for kind in ("bezier", "chain"):
        untrained = evaluate_curve(Curve(kind, a.state_dict(), a.state_dict()), a, x_tr, y_tr,
                                   GRID).loss  # fmt: skip
        assert max(abs(v - own) for v in untrained) < 1e-6
        # trained (10 SGD steps at the zoo's learning rate): within 5% of A's loss
        fit = fit_curve(
            a, a, x_tr, y_tr, kind=kind, epochs=1, steps_per_epoch=10, optimizer="sgd", lr=0.05
        )
        assert not torch.equal(fit.curve.control["fc1.weight"], a.state_dict()["fc1.weight"])
        trained = evaluate_curve(fit.curve, a, x_tr, y_tr, GRID).loss
        assert trained[0] == own and trained[-1] == own
        assert max(abs(v - own) for v in trained) < 0.05 * own, (own, trained)


def test_resuming_from_a_checkpoint_gives_the_uninterrupted_control_point(
    mlp_pair, digits, tmp_path
):
    a, b = mlp_pair
    x_tr, y_tr = digits[0], digits[1]
    kw = dict(kind="bezier", epochs=3, batch_size=32, steps_per_epoch=6, lr=5e-3, seed=3)
    whole = fit_curve(a, b, x_tr, y_tr, **kw)
    folder = tmp_path / "ckpt"
    first = fit_curve(a, b, x_tr, y_tr, checkpoint_dir=folder, stop_epoch=1, **kw)
    assert first.epochs_done == 1 and (folder / CURVE_CHECKPOINT).is_file()
    assert not all(
        torch.equal(first.curve.control[k], whole.curve.control[k]) for k in a.state_dict()
    )
    resumed = fit_curve(a, b, x_tr, y_tr, checkpoint_dir=folder, **kw)
    assert resumed.resumed_from_epoch == 1 and resumed.epochs_done == 3
    for k in a.state_dict():
        assert torch.equal(resumed.curve.control[k], whole.curve.control[k]), k
    assert [h["train_loss"] for h in resumed.history] == [h["train_loss"] for h in whole.history]
    # a finished checkpoint returns at once with the same control point
    done = fit_curve(a, b, x_tr, y_tr, checkpoint_dir=folder, **kw)
    assert done.resumed_from_epoch == 3
    assert all(torch.equal(done.curve.control[k], whole.curve.control[k]) for k in a.state_dict())
    # a checkpoint of another curve (another seed) is refused, not silently resumed
    with pytest.raises(LmcError, match="belongs to another curve"):
        fit_curve(a, b, x_tr, y_tr, checkpoint_dir=folder, **{**kw, "seed": 4})


def test_curve_settings_are_checked(mlp_pair, digits):
    with pytest.raises(LmcError, match="no control point to train"):
        CurveSettings(kind="line")
    with pytest.raises(LmcError, match="optimizer"):
        CurveSettings(optimizer="lbfgs")
    with pytest.raises(LmcError, match="lr must be positive"):
        CurveSettings(lr=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'steps'"):
        fit_curve(*mlp_pair, digits[0], digits[1], steps=3)
    with pytest.raises(LmcError, match="steps_per_epoch=99"):
        fit_curve(*mlp_pair, digits[0][:100], digits[1][:100], batch_size=10, steps_per_epoch=99)
    assert CurveSettings.from_dict(CurveSettings(lr=1).to_dict()) == CurveSettings(lr=1.0)


# -- any model ---------------------------------------------------------------------------------


def test_batchnorm_mlp_curve_trains_and_resets_statistics_at_every_point(bn_pair, digits):
    a, b = bn_pair
    x_tr, y_tr, x, y = digits
    start = Curve("bezier", a.state_dict(), b.state_dict())
    with pytest.raises(LmcError, match="needs training inputs"):
        evaluate_curve(start, a, x, y, 3)
    before = expected_loss(start, a, x_tr, y_tr, bn_inputs=x_tr)
    fit = fit_curve(a, b, x_tr, y_tr, epochs=2, batch_size=64, steps_per_epoch=10, lr=1e-2)
    result = evaluate_curve(fit.curve, a, x_tr, y_tr, GRID, bn_inputs=x_tr)
    assert result.bn == "reset"
    assert sum(result.loss) / len(result.loss) < before
    # the point at t = 0.3, with its statistics reset by hand, gives the reported loss
    model = copy.deepcopy(a)
    model.load_state_dict(fit.curve.point(0.3))
    reset_batchnorm(model, x_tr)
    with torch.no_grad():
        loss = get_task("classification").loss(model.eval()(x_tr), y_tr).item()
    assert result.loss[3] == pytest.approx(loss, abs=1e-6)
    # the endpoints keep their own statistics (A's and B's losses, as on the line)
    line = evaluate_path(a, b, x_tr, y_tr, 3, bn_inputs=x_tr)
    assert result.loss[0] == line.loss[0] and result.loss[-1] == line.loss[-1]


def test_zoo_vit_curve_trains(digits_dataset):
    data = digits_dataset
    opts = dict(width=16, depth=1, heads=2, in_channels=1, image_size=8, num_classes=10)
    a = lmc.models.build("vit", seed=0, **opts)
    b = lmc.models.build("vit", seed=1, **opts)
    x, y = data.x_train[:256], data.y_train[:256]
    before = expected_loss(Curve("bezier", a.state_dict(), b.state_dict()), a, x, y)
    fit = fit_curve(a, b, x, y, epochs=3, batch_size=64, lr=1e-2)
    assert expected_loss(fit.curve, a, x, y) < before


def token_windows(n: int, context: int, vocab: int, seed: int = 0):
    """Windows of consecutive tokens mod ``vocab`` (a next-token rule a GPT learns at once)."""
    start = torch.randint(vocab, (n, 1), generator=torch.Generator().manual_seed(seed))
    x = (start + torch.arange(context)) % vocab
    return x, (x + 1) % vocab


def test_zoo_gpt_curve_trains_with_the_next_token_loss_and_tied_weights():
    opts = dict(vocab=11, context=8, width=16, depth=1, heads=2)
    a = lmc.models.build("gpt", seed=0, **opts)
    b = lmc.models.build("gpt", seed=1, **opts)
    x, y = token_windows(128, 8, 11)
    start = Curve("chain", a.state_dict(), b.state_dict())
    before = expected_loss(start, a, x, y, task="next-token")
    fit = fit_curve(a, b, x, y, kind="chain", task="next-token", epochs=4, batch_size=32,
                    lr=2e-2)  # fmt: skip
    assert expected_loss(fit.curve, a, x, y, task="next-token") < before
    control = fit.curve.control
    assert "head.weight" in control  # the tied head: one trained tensor under both names
    assert torch.equal(control["head.weight"], control["tok.weight"])
    assert not torch.equal(control["tok.weight"], start.control["tok.weight"])


def test_hugging_face_gpt2_curve_trains_with_dropout_seeded():
    """A Hugging Face GPT-2 (tied head, dropout 0.1 active while the curve trains) through
    lmc's wrapper: the curve lowers the expected loss, and the same seed gives the same
    control point (the dropout masks are drawn from the seed)."""
    transformers = pytest.importorskip("transformers")
    from lmc.models.factory import HFLogits

    config = transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, n_inner=32, vocab_size=11, n_positions=8,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip

    def gpt2(seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return HFLogits(transformers.GPT2LMHeadModel(config)).eval()

    a, b = gpt2(0), gpt2(1)
    x, y = token_windows(96, 8, 11)
    before = expected_loss(Curve("bezier", a.state_dict(), b.state_dict()), a, x, y,
                           task="next-token")  # fmt: skip
    kw = dict(task="next-token", epochs=3, batch_size=32, lr=2e-2, seed=5)
    fit = fit_curve(a, b, x, y, **kw)
    assert expected_loss(fit.curve, a, x, y, task="next-token") < before
    again = fit_curve(a, b, x, y, **kw)
    assert all(torch.equal(again.curve.control[k], fit.curve.control[k]) for k in fit.curve.control)
    other = fit_curve(a, b, x, y, **{**kw, "seed": 6})
    assert not torch.equal(other.curve.control["hf.transformer.wte.weight"],
                           fit.curve.control["hf.transformer.wte.weight"])  # fmt: skip


class TinyNet(nn.Module):
    """A user's own model: not in the zoo, with a floating buffer and an integer one."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 12), nn.Tanh())
        self.head = nn.Linear(12, 10)
        self.register_buffer("scale", torch.tensor(1.0 + seed))
        self.register_buffer("calls", torch.tensor(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)) * self.scale


def test_a_users_plain_module_curve_trains_and_is_stored_as_a_run(digits, tmp_path):
    x_tr, y_tr = digits[0][:512], digits[1][:512]
    a, b = TinyNet(0), TinyNet(1)
    before = expected_loss(Curve("bezier", a.state_dict(), b.state_dict()), a, x_tr, y_tr)
    fit = fit_curve(a, b, x_tr, y_tr, epochs=3, batch_size=64, lr=1e-2)
    assert expected_loss(fit.curve, a, x_tr, y_tr) < before
    # floating buffers lie on the curve, with their control entry kept at the midpoint
    assert fit.curve.control["scale"].item() == 1.5
    assert fit.curve.point(1.0)["scale"].item() == 2.0
    config = curve_config(
        fit.settings,
        a=endpoint_record(a.state_dict(), "a.safetensors"),
        b=endpoint_record(b.state_dict(), "b.safetensors"),
    )
    run = save_curve(fit, config, folder=tmp_path / "curve")
    stored = load_run(tmp_path / "curve", verify=True)
    assert stored.config == config and stored.config["curve"]["kind"] == "bezier"
    assert stored.config["endpoints"]["a"]["state_sha256"] == state_digest(a.state_dict())
    assert stored.metrics["status"] == "finished" and len(stored.metrics["history"]) == 3
    back = load_curve(run, a.state_dict(), b.state_dict())
    assert all(torch.equal(back.control[k], fit.curve.control[k]) for k in fit.curve.control)
    with pytest.raises(LmcError, match="other weights for endpoint B"):
        load_curve(run, a.state_dict(), a.state_dict())


def test_a_curve_between_zoo_runs_is_a_run_of_the_store(tmp_path, digits_dataset):
    from lmc.train.runs import make_config, train_run

    store = RunStore(tmp_path / "runs")
    runs = [
        train_run(make_config("digits", "mlp", {"width": 8, "depth": 1}, data=digits_dataset,
                              epochs=1, init_seed=seed, data_seed=seed),
                  store=store, data=digits_dataset)[0]
        for seed in (0, 1)
    ]  # fmt: skip
    a, b = (r.build_model() for r in runs)
    x, y = digits_dataset.x_train, digits_dataset.y_train
    fit = fit_curve(a, b, x, y, epochs=1, batch_size=128)
    config = curve_config_for_runs(runs[0], runs[1], fit.settings)
    run = save_curve(fit, config, store=store)
    assert run.path.parent == store.root and "-curve-" in run.name
    assert config["endpoints"]["b"]["run"] == runs[1].name
    model_c = load_run(run.path, verify=True).build_model()  # the model at θ_C
    state = model_c.state_dict()
    assert all(torch.equal(state[k], fit.curve.control[k]) for k in state)
