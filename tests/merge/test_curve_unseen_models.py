"""Curves on models lmc's curve code was not written against (issue 44: "checked on models you
have not seen"): BatchNorm with integer buffers, tied weights and a shared submodule, frozen
parameters, dropout and a non-persistent buffer, tuple / dict / ModelOutput outputs, LSTM and
GRU classifiers, float64 and bfloat16 parameters, sparse embeddings, extra state and state
dicts that do not match. Each model either fits and evaluates correctly (exact endpoints, the
exact gradient step, the same control point from the same seed or a resume) or is refused with
one ``LmcError``."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lmc.config import LmcError, LmcWarning
from lmc.merge import Curve, fit_curve
from lmc.merge.curve_fit import _T_SALT
from lmc.metrics.curve_path import evaluate_curve
from lmc.metrics.plane import PlaneBasis, evaluate_plane
from lmc.train.loop import epoch_generator

D, C, V, L = 8, 4, 11, 6


class BNInt(nn.Module):
    """BatchNorm (an int64 ``num_batches_tracked``) and an int64 index buffer read in forward;
    ``perm_seed`` draws the index (so A's and B's can differ)."""

    def __init__(self, perm_seed: int | None = None) -> None:
        super().__init__()
        self.inp, self.bn, self.out = nn.Linear(D, 16), nn.BatchNorm1d(16), nn.Linear(16, C)
        idx = torch.arange(15, -1, -1)
        if perm_seed is not None:
            idx = torch.randperm(16, generator=torch.Generator().manual_seed(perm_seed))
        self.register_buffer("idx", idx)

    def forward(self, x):
        return self.out(F.relu(self.bn(self.inp(x)))[:, self.idx])


class Tied(nn.Module):
    """Two attributes holding one Parameter (``q.weight`` is ``p.weight``, as GPT-2's head is
    its embedding) and one submodule registered under two names and called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.p, self.q = nn.Linear(D, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.q.weight = self.p.weight
        self.shared = nn.Linear(16, 16)
        self.alias = self.shared
        self.out = nn.Linear(16, C)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        h = torch.tanh(self.p(h)) + torch.tanh(self.q(h))
        return self.out(torch.tanh(self.alias(torch.tanh(self.shared(h)))))


class Frozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(D, 16), nn.Linear(16, C)
        self.inp.requires_grad_(False)

    def forward(self, x):
        return self.out(torch.tanh(self.inp(x)))


class DropoutNP(nn.Module):
    """Dropout and a non-persistent floating buffer (not in the state dict)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.drop, self.out = nn.Linear(D, 32), nn.Dropout(0.5), nn.Linear(32, C)
        self.register_buffer("scale", torch.tensor(2.0), persistent=False)

    def forward(self, x):
        return self.out(self.drop(torch.relu(self.inp(x)))) * self.scale


class TupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(D, 16), nn.Linear(16, C)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        return self.out(h), h


class DictOut(TupleOut):
    def forward(self, x):
        return {"logits": super().forward(x)[0]}


class RNN(nn.Module):
    def __init__(self, cell: type[nn.Module] = nn.LSTM) -> None:
        super().__init__()
        self.emb, self.rnn = nn.Embedding(V, 8), cell(8, 16, batch_first=True, num_layers=2)
        self.out = nn.Linear(16, C)

    def forward(self, x):
        return self.out(self.rnn(self.emb(x))[0][:, -1])


class F64(nn.Module):
    """A float64 parameter beside float32 ones."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(D, 16), nn.Linear(16, C)
        self.gain = nn.Parameter(torch.ones(16, dtype=torch.float64))

    def forward(self, x):
        return self.out((torch.tanh(self.inp(x)).double() * self.gain).float())


class Half(nn.Module):
    """An MLP whose weights are ``dtype`` (bfloat16: both endpoints in half precision)."""

    def __init__(self, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D, 16), nn.Tanh(), nn.Linear(16, C)).to(dtype)

    def forward(self, x):
        return self.net(x.to(self.net[0].weight.dtype)).float()


class Bag(nn.Module):
    """A mean of token embeddings, ``sparse`` or dense gradients."""

    def __init__(self, sparse: bool = True) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(V, 8, sparse=sparse), nn.Linear(8, C)

    def forward(self, x):
        return self.out(self.emb(x).mean(1))


class Extra(TupleOut):
    """Extra state (``get_extra_state``), as Transformer Engine's layers have."""

    def get_extra_state(self):
        return {"version": 1}

    def set_extra_state(self, state):
        pass

    def forward(self, x):
        return super().forward(x)[0]


def pair(make, seed_a: int = 0, seed_b: int = 1):
    torch.manual_seed(seed_a)
    a = make()
    torch.manual_seed(seed_b)
    return a, make()


def float_data(n: int = 48, seed: int = 0):
    x = torch.randn(n, D, generator=torch.Generator().manual_seed(seed))
    return x, x[:, :C].argmax(1)


def token_data(n: int = 48, seed: int = 0):
    x = torch.randint(V, (n, L), generator=torch.Generator().manual_seed(seed))
    return x, x[:, 0] % C


FIT = dict(epochs=1, steps_per_epoch=2, batch_size=16, lr=1e-2)
MODELS = {
    "batchnorm+int": (BNInt, float_data),
    "tied+shared": (Tied, float_data),
    "frozen": (Frozen, float_data),
    "dropout+nonpersistent": (DropoutNP, float_data),
    "lstm": (RNN, token_data),
    "gru": (lambda: RNN(nn.GRU), token_data),
    "float64": (F64, float_data),
    "bfloat16": (Half, float_data),
    "sparse-embedding": (Bag, token_data),
}


def close(x: torch.Tensor, y: torch.Tensor, atol: float = 1e-6) -> bool:
    return torch.allclose(x.double(), y.double(), atol=atol, rtol=0)


def sgd_step_control(a, b, x, y, t: float, lr: float) -> dict[str, torch.Tensor]:
    """The Bézier control point after one full-batch SGD step from the midpoint, computed
    by hand: θ(t) loaded into a copy of A, autograd on its own parameters (a tied parameter
    sums its uses), θ_C − lr·w_C(t)·∂L/∂θ(t) on the parameters that require a gradient."""
    start = Curve("bezier", a.state_dict(), b.state_dict())
    model = copy.deepcopy(a)
    model.load_state_dict(start.point(t))
    model.train()
    F.cross_entropy(model(x).float(), y).backward()
    wc = start.weights(t)[1]
    out = dict(start.control)
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            out[name] = start.control[name] - lr * wc * p.grad
    return out


# -- every model: the exact construction ---------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_an_unseen_model_fits_with_exact_ends_and_shapes(name):
    """The curve trains, its ends are A and B (1e-6; integer entries equal), a chain through
    the midpoint is the line and the Bézier curve at ½ is ¼A + ½θ_C + ¼B; the curve's
    evaluation gives A's and B's own losses at t = 0 and 1."""
    make, data = MODELS[name]
    a, b = pair(make)
    x, y = data()
    fit = fit_curve(a, b, x, y, seed=3, **FIT)
    curve, start = fit.curve, Curve("bezier", a.state_dict(), b.state_dict())
    moved = [k for k, v in curve.control.items() if not torch.equal(v, start.control[k])]
    assert moved, "no entry of the control point was trained"
    sa, sb = a.state_dict(), b.state_dict()
    p0, p1 = curve.point(0.0), curve.point(1.0)
    for k in sa:
        assert p0[k].dtype == sa[k].dtype and p1[k].dtype == sa[k].dtype
        assert close(p0[k], sa[k]) and close(p1[k], sb[k]), k
    tol = 1e-2 if name == "bfloat16" else 1e-6  # one rounding to bfloat16 of a mean
    half = curve.point(0.5)
    chain, line = Curve("chain", sa, sb), Curve("line", sa, sb)
    for k, v in half.items():
        if v.is_floating_point():
            want = 0.25 * sa[k].double() + 0.5 * curve.control[k].double() + 0.25 * sb[k].double()
            assert close(v, want, tol), k
            for t in (0.25, 0.7):
                assert close(chain.point(t)[k], line.point(t)[k], tol), (k, t)
    result = evaluate_curve(curve, a, x, y, [0.0, 0.5, 1.0], bn_inputs=x)
    with torch.no_grad():
        own = [F.cross_entropy(m.eval()(x).float(), y).item() for m in (a, b)]
    assert result.loss[0] == pytest.approx(own[0], abs=1e-6)
    assert result.loss[-1] == pytest.approx(own[1], abs=1e-6)


@pytest.mark.parametrize("name", ["batchnorm+int", "tied+shared", "frozen", "lstm", "float64"])
def test_one_step_of_the_fit_is_the_exact_gradient_step(name):
    """functional_call on parameter dictionaries gives the gradient autograd gives on the
    model itself: tied weights sum their uses, a shared submodule its two calls, BatchNorm
    uses the batch's statistics, an LSTM's flattened weights, a float64 parameter."""
    make, data = MODELS[name]
    a, b = pair(make)
    x, y = data(32)
    lr = 0.1
    fit = fit_curve(a, b, x, y, epochs=1, batch_size=32, optimizer="sgd", momentum=0.0, lr=lr,
                    seed=2)  # fmt: skip
    t = float(torch.rand((), generator=epoch_generator(2, 0, _T_SALT), dtype=torch.float64))
    want = sgd_step_control(a, b, x, y, t, lr)
    for k, v in fit.curve.control.items():
        assert v.dtype == a.state_dict()[k].dtype
        assert close(v, want[k], 1e-6), k


# -- conventions ---------------------------------------------------------------------------


def test_tied_weights_and_a_shared_submodule_are_one_tensor_of_the_control_point():
    a, b = pair(Tied)
    x, y = float_data()
    control = fit_curve(a, b, x, y, **FIT).curve.control
    assert torch.equal(control["p.weight"], control["q.weight"])
    assert torch.equal(control["shared.weight"], control["alias.weight"])
    assert not torch.equal(control["p.bias"], control["q.bias"])  # only the weight is tied


def test_frozen_parameters_lie_on_the_curve_but_stay_at_the_midpoint():
    """Convention: frozen parameters are part of θ (their control entry is a point of the
    curve), but fitting does not train them: it stays at (θ_A + θ_B)/2, so on them every
    curve is the line; the trainable ones move."""
    a, b = pair(Frozen)
    x, y = float_data()
    curve = fit_curve(a, b, x, y, **FIT).curve
    start = Curve("bezier", a.state_dict(), b.state_dict())
    line = Curve("line", a.state_dict(), b.state_dict())
    for k in ("inp.weight", "inp.bias"):
        assert torch.equal(curve.control[k], start.control[k])
        assert close(curve.point(0.3)[k], line.point(0.3)[k])
    assert not torch.equal(curve.control["out.weight"], start.control["out.weight"])


def test_dropout_is_seeded_and_the_callers_random_stream_is_left_alone():
    a, b = pair(DropoutNP)
    x, y = float_data()
    torch.manual_seed(123)
    first = fit_curve(a, b, x, y, seed=5, **FIT).curve.control
    after_fit = torch.rand(3)
    torch.manual_seed(123)
    assert torch.equal(torch.rand(3), after_fit)  # the global RNG was restored
    again = fit_curve(a, b, x, y, seed=5, **FIT).curve.control
    other = fit_curve(a, b, x, y, seed=6, **FIT).curve.control
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["inp.weight"], other["inp.weight"])
    assert "scale" not in first  # a non-persistent buffer stays the model's own


@pytest.mark.parametrize("make", [DropoutNP, Half, BNInt], ids=["dropout", "bf16", "bn"])
def test_resuming_gives_the_uninterrupted_control_point(make, tmp_path):
    a, b = pair(make)
    x, y = float_data()
    kw = dict(FIT, epochs=2, seed=4)
    full = fit_curve(a, b, x, y, **kw).curve.control
    fit_curve(a, b, x, y, checkpoint_dir=tmp_path, stop_epoch=1, **kw)
    back = fit_curve(a, b, x, y, checkpoint_dir=tmp_path, **kw)
    assert back.resumed_from_epoch == 1
    assert all(torch.equal(full[k], back.curve.control[k]) for k in full)


# -- fixes: each of these failed before ----------------------------------------------------


@pytest.mark.parametrize("make", [TupleOut, DictOut], ids=["tuple", "dict"])
def test_a_model_returning_a_tuple_or_dict_is_refused_in_one_line(make):
    a, b = pair(make)
    x, y = float_data()
    with pytest.raises(LmcError, match=f"returns a {'tuple' if make is TupleOut else 'dict'}"):
        fit_curve(a, b, x, y, **FIT)
    curve = Curve("bezier", a.state_dict(), b.state_dict())
    with pytest.raises(LmcError, match="not a tensor of logits"):
        evaluate_curve(curve, a, x, y, 3)
    shifted = {k: v + 0.1 * torch.ones_like(v) for k, v in curve.control.items()}
    with pytest.raises(LmcError, match="not a tensor of logits"):
        evaluate_plane(a, curve.state_a, curve.state_b, shifted, x, y, num=2)


def test_a_raw_hugging_face_model_returning_a_model_output_is_refused():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, n_inner=16, vocab_size=V,
                                     n_positions=L, bos_token_id=0, eos_token_id=0)  # fmt: skip
    a, b = pair(lambda: transformers.GPT2LMHeadModel(config))
    x = torch.randint(V, (8, L), generator=torch.Generator().manual_seed(0))
    with pytest.raises(LmcError, match="returns a CausalLM.*HFLogits"):
        fit_curve(a, b, x, (x + 1) % V, task="next-token", **dict(FIT, batch_size=4))


def test_targets_outside_the_models_classes_are_refused_before_fitting():
    a, b = pair(Frozen)
    x, y = float_data()
    y[3] = C + 2
    with pytest.raises(LmcError, match="y"):
        fit_curve(a, b, x, y, **FIT)


def test_a_sparse_embedding_trains_as_its_dense_twin():
    """Adam takes no sparse gradient: θ_C's is made dense, so the fit is the dense model's."""
    a, b = pair(Bag)
    dense_a, dense_b = Bag(sparse=False), Bag(sparse=False)
    dense_a.load_state_dict(a.state_dict())
    dense_b.load_state_dict(b.state_dict())
    x, y = token_data()
    sparse = fit_curve(a, b, x, y, seed=1, **FIT).curve.control
    dense = fit_curve(dense_a, dense_b, x, y, seed=1, **FIT).curve.control
    assert all(close(sparse[k], dense[k], 1e-6) for k in dense)


def test_integer_buffers_that_differ_give_each_end_its_own_and_are_warned_about():
    """An index buffer that differs between A and B: t = 1 is B's (so the curve's end is B
    and its loss B's), the interior carries A's with a warning; on the plane B's point is B.
    BatchNorm's step counter may differ without a warning."""
    torch.manual_seed(0)
    a = BNInt(perm_seed=0)
    torch.manual_seed(1)
    b = BNInt(perm_seed=1)
    assert not torch.equal(a.idx, b.idx)
    x, y = float_data()
    with pytest.warns(LmcWarning, match="'idx'"):
        curve = Curve("bezier", a.state_dict(), b.state_dict())
    assert torch.equal(curve.point(1.0)["idx"], b.idx)
    assert torch.equal(curve.point(0.99)["idx"], a.idx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LmcWarning)
        result = evaluate_curve(curve, a, x, y, [0.0, 0.5, 1.0], bn_inputs=x)
        with torch.no_grad():
            loss_b = F.cross_entropy(b.eval()(x), y).item()
        assert result.loss[-1] == pytest.approx(loss_b, abs=1e-6)
        shifted = {k: v + 0.1 if v.is_floating_point() else v for k, v in curve.control.items()}
        basis = PlaneBasis(curve.state_a, curve.state_b, shifted)
        assert torch.equal(basis.point(1.0, 0.0)["idx"], b.idx)
        assert torch.equal(basis.point(0.5, 0.0)["idx"], a.idx)
    same_idx = b.state_dict()
    same_idx["idx"] = a.idx.clone()
    same_idx["bn.num_batches_tracked"] = torch.tensor(7)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LmcWarning)
        Curve("bezier", a.state_dict(), same_idx)  # no warning


def test_bfloat16_endpoints_train_their_control_point_in_float32():
    """Steps below bfloat16's spacing are kept (a float32 master copy): the bfloat16 fit moves
    the control point as far as its float32 twin (before: about half as far at lr 1e-4)."""
    a, b = pair(Half)
    a32, b32 = Half(torch.float32), Half(torch.float32)
    a32.load_state_dict(a.state_dict())
    b32.load_state_dict(b.state_dict())
    x, y = float_data(128)
    kw = dict(epochs=2, batch_size=32, lr=1e-4, seed=1)
    half = fit_curve(a, b, x, y, **kw).curve.control
    full = fit_curve(a32, b32, x, y, **kw).curve.control
    mid = Curve("bezier", a32.state_dict(), b32.state_dict()).control
    for k in full:
        assert half[k].dtype == torch.bfloat16
        moved_half = (half[k].float() - mid[k]).norm().item()
        moved_full = (full[k] - mid[k]).norm().item()
        assert moved_half == pytest.approx(moved_full, rel=0.15), k


def test_extra_state_is_refused_naming_the_entry():
    a, b = pair(Extra)
    x, y = float_data()
    with pytest.raises(LmcError, match="'_extra_state' of A is a dict"):
        fit_curve(a, b, x, y, **FIT)
    with pytest.raises(LmcError, match="'_extra_state' of A is a dict"):
        Curve("chain", a.state_dict(), b.state_dict())
    with pytest.raises(LmcError, match="'_extra_state' of A is a dict"):
        PlaneBasis(a.state_dict(), b.state_dict(), b.state_dict())


def test_a_weight_file_cannot_be_loaded_into_a_model_with_extra_state(tmp_path):
    from safetensors.torch import save_file

    from lmc.models.factory import load_weights

    a, _ = pair(Extra)
    tensors = {k: v for k, v in a.state_dict().items() if isinstance(v, torch.Tensor)}
    save_file(tensors, tmp_path / "a.safetensors")
    with pytest.raises(LmcError, match="'_extra_state' that is a dict, not a tensor"):
        load_weights(Extra(), tmp_path / "a.safetensors")


@pytest.mark.parametrize(
    "change, key",
    [
        (lambda s: s.pop("out.bias"), "'out.bias' is in A but not in B"),
        (lambda s: s.update({"out.bias": torch.zeros(C + 1)}), "'out.bias' has shape"),
        (lambda s: s.update({"extra": torch.zeros(2)}), "'extra' is in B but not in A"),
    ],
    ids=["missing", "shape", "extra"],
)
def test_endpoints_that_do_not_match_are_refused_naming_the_key(change, key):
    a, b = pair(Frozen)
    x, y = float_data()
    state_b = dict(b.state_dict())
    change(state_b)
    with pytest.raises(LmcError, match=key):
        fit_curve(a, None, x, y, state_b=state_b, **FIT)


# -- the command line ----------------------------------------------------------------------


FACTORY = """
import torch
from torch import nn


class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(11, 8, sparse=True), nn.Linear(8, 4)

    def forward(self, x):
        return self.out(self.emb(x).mean(1))


class Pair(Bag):
    def forward(self, x):
        return super().forward(x), x


def make():
    return Bag()


def make_pair():
    return Pair()
"""


def _cli(tmp_path, factory: str, capsys):
    import numpy as np
    from safetensors.torch import save_file

    from lmc.cli.main import main

    (tmp_path / "net.py").write_text(FACTORY)
    files = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        files.append(str(tmp_path / f"w{seed}.safetensors"))
        save_file(Bag().state_dict(), files[-1])
    x, y = token_data(96)
    np.savez(tmp_path / "data.npz", x=x.numpy(), y=y.numpy())
    code = main(["curve", *files, "--model-factory", f"{tmp_path / 'net.py'}:{factory}",
                 "--data", str(tmp_path / "data.npz"), "--epochs", "1", "--steps-per-epoch",
                 "2", "--curve-batch-size", "16", "--lambdas", "3", "--plane", "2", "--quiet",
                 "--out", str(tmp_path / "out"), "--json"])  # fmt: skip
    return code, capsys.readouterr()


def test_lmc_curve_fits_a_users_sparse_embedding_model(tmp_path, capsys):
    code, captured = _cli(tmp_path, "make", capsys)
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["fit"]["epochs_done"] == 1 and summary["bend_distance"] > 0


def test_lmc_curve_refuses_a_model_returning_a_tuple_in_one_line(tmp_path, capsys):
    code, captured = _cli(tmp_path, "make_pair", capsys)
    assert code == 2
    assert "Traceback" not in captured.err and "returns a tuple" in captured.err
