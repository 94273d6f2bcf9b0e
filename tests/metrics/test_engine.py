"""Path engines: the batched engine (chain fast path and torch.vmap) and the loop agree with a
plain per-lambda forward; the automatic batch size respects its bound; the engine is chosen
once, up front."""

import copy

import pytest
import torch
from torch import nn

import lmc.models
from lmc.config import LmcError
from lmc.merge import lerp, lerp_stack
from lmc.metrics import (
    BatchedEngine,
    LoopEngine,
    auto_batch_size,
    chain_forward,
    chain_plan,
    model_logits,
    select_engine,
    stacked_logits,
)
from lmc.metrics.chain import ChainWorkspace
from lmc.metrics.engine import TARGET_ROWS, activation_bytes

CPU = torch.device("cpu")
LAMS = [0.1, 0.25, 0.5, 0.8]


def _cnn(seed: int) -> nn.Module:
    """A small conv net on digits' 8x8 images (not a chain: the vmap path)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Unflatten(1, (1, 8, 8)),
            nn.Conv2d(1, 6, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(6, 8, 3),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(8 * 6 * 6, 10),
        ).eval()


def _mlp(seed: int, **options) -> nn.Module:
    return lmc.models.build("mlp", seed=seed, input_size=64, width=16, **options).eval()


MODELS = {
    "mlp": lambda seed: _mlp(seed),
    "mlp-layernorm-gelu": lambda seed: _mlp(seed, norm="layer", activation="gelu"),
    "cnn": _cnn,
}


class _ItemNet(nn.Module):
    """A model whose forward calls .item(), which torch.vmap cannot batch."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(x) * (1.0 if self.fc.weight.abs().max().item() < 1e9 else 0.0)


def _states(a: nn.Module, b: nn.Module):
    return (
        {k: v.detach() for k, v in a.state_dict().items()},
        {k: v.detach() for k, v in b.state_dict().items()},
    )


def _reference(a: nn.Module, b: nn.Module, x: torch.Tensor, lams: list[float]) -> torch.Tensor:
    """The plain per-lambda loop: load theta(lam) into a copy of A, forward the whole split."""
    model = copy.deepcopy(a)
    out = []
    for lam in lams:
        model.load_state_dict(lerp(a.state_dict(), b.state_dict(), lam))
        with torch.no_grad():
            out.append(model(x).float())
    return torch.stack(out)


def _collect(chunks) -> tuple[list[float], torch.Tensor, list[int]]:
    chunks = list(chunks)
    lams = [lam for chunk, _ in chunks for lam in chunk]
    return lams, torch.cat([z for _, z in chunks]), [len(chunk) for chunk, _ in chunks]


@pytest.mark.parametrize(
    ("kind", "engine_kind"),
    [(kind, engine) for kind in sorted(MODELS) for engine in ("chain", "vmap", "loop")
     if (kind, engine) != ("cnn", "chain")],  # convolutions are no chain of Linear layers
)  # fmt: skip
def test_engines_agree_with_the_plain_per_lambda_loop(digits, kind, engine_kind):
    _, _, x, _ = digits
    a, b = MODELS[kind](0), MODELS[kind](1)
    state_a, state_b = _states(a, b)
    want = _reference(a, b, x, LAMS)
    work = copy.deepcopy(a)
    if engine_kind == "loop":

        def prepare(lam):
            work.load_state_dict(lerp(state_a, state_b, lam))
            return work

        engine = LoopEngine(prepare, x, CPU, batch_size=100, buffer_bytes=1)
        expected_chunks = [1, 1, 1, 1]  # a 1-byte buffer hands on every lambda alone
    else:
        plan = chain_plan(a) if engine_kind == "chain" else None
        assert (plan is not None) == (engine_kind == "chain")
        per_point = sum(t.numel() * t.element_size() for t in state_a.values())
        engine = BatchedEngine(
            work, state_a, state_b, x, CPU, batch_size=120, max_stack_bytes=3 * per_point, plan=plan
        )
        assert engine.probe() is None
        expected_chunks = [3, 1]
    lams, got, sizes = _collect(engine.run(LAMS))
    assert lams == LAMS and sizes == expected_chunks
    assert got.shape == (len(LAMS), len(x), 10) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the engines do not change the working model's weights in the batched case
    if engine_kind != "loop":
        for key, value in work.state_dict().items():
            assert torch.equal(value, a.state_dict()[key])


def test_chain_forward_equals_each_model(digits):
    _, _, x, _ = digits
    a, b = _mlp(0, activation="leaky_relu"), _mlp(1, activation="leaky_relu")
    plan = chain_plan(a)
    assert plan is not None and [type(m) for _, m in plan][:2] == [nn.Flatten, nn.Linear]
    state_a, state_b = _states(a, b)
    stacked = lerp_stack(state_a, state_b, [0.0, 0.3, 1.0])
    workspace = ChainWorkspace()
    for batch in (x[:50], x[50:170]):  # the workspace is reused across batch sizes
        z = chain_forward(plan, stacked, batch, workspace).clone()
        assert z.shape == (3, len(batch), 10)
        want = _reference(a, b, batch, [0.0, 0.3, 1.0])
        torch.testing.assert_close(z, want, atol=1e-5, rtol=1e-5)


def test_model_and_stacked_logits_match_plain_forwards(digits):
    _, _, x, _ = digits
    a, b = _cnn(0), _cnn(1)
    with torch.no_grad():
        want = a(x)
    assert torch.equal(model_logits(a, x, len(x), CPU), want)
    torch.testing.assert_close(model_logits(a, x, 64, CPU), want, atol=1e-6, rtol=1e-6)
    state_a, state_b = _states(a, b)
    z = stacked_logits(a, lerp_stack(state_a, state_b, [0.0, 1.0]), x, 100, CPU)
    torch.testing.assert_close(z, _reference(a, b, x, [0.0, 1.0]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("k", [1, 3, 9])
@pytest.mark.parametrize("budget_rows", [0, 20, 300, 10**6])
def test_auto_batch_size_respects_its_bound(digits, k, budget_rows):
    _, _, x, _ = digits
    x = x.repeat(6, 1)  # 2982 examples: more than TARGET_ROWS
    model = _mlp(0)
    per_example = activation_bytes(model, x, CPU)
    assert per_example == 64 * 4  # the largest output per example: the 64 flattened inputs
    budget = budget_rows * k * per_example
    bs = auto_batch_size(model, x, k, CPU, budget_bytes=budget)
    assert 16 <= bs <= min(len(x), TARGET_ROWS)
    if budget >= 16 * k * per_example:  # above the floor of 16 rows the budget is honoured
        assert bs * k * per_example <= budget
        assert bs == min(TARGET_ROWS, budget_rows)
    else:
        assert bs == 16
    assert auto_batch_size(model, x[:40], k, CPU) == 40  # never more than the split
    assert auto_batch_size(model, x, k, CPU, target_rows=100) == 100


def test_the_engine_is_chosen_once_up_front(digits):
    _, _, x, _ = digits

    def choose(a, b, method="auto", bn_mode="none", **kw):
        state_a, state_b = _states(a, b)
        return select_engine(
            method, bn_mode=bn_mode, model=copy.deepcopy(a), state_a=state_a, state_b=state_b,
            x=x, device=CPU, **kw,
        )  # fmt: skip

    mlp = choose(_mlp(0), _mlp(1))
    assert isinstance(mlp, BatchedEngine) and mlp.name == "batched" and mlp.plan is not None
    assert choose(_mlp(0), _mlp(1), fast=False).plan is None
    cnn = choose(_cnn(0), _cnn(1))
    assert isinstance(cnn, BatchedEngine) and cnn.plan is None
    assert isinstance(choose(_mlp(0), _mlp(1), method="loop"), LoopEngine)
    assert isinstance(choose(_mlp(0), _mlp(1), bn_mode="reset"), LoopEngine)
    with pytest.raises(LmcError, match="batched"):
        choose(_mlp(0), _mlp(1), method="batched", bn_mode="reset")
    with pytest.raises(LmcError, match="unknown path evaluation method"):
        choose(_mlp(0), _mlp(1), method="fastest")
    # torch.vmap cannot batch .item(): auto falls back to the loop before evaluating anything
    with torch.random.fork_rng():
        torch.manual_seed(0)
        items = (_ItemNet(), _ItemNet())
    fallback = choose(*items)
    assert isinstance(fallback, LoopEngine) and fallback.name == "loop"
    with pytest.raises(LmcError, match="method='loop'"):
        choose(*items, method="batched")
    # the loop's default prepare loads theta(lam) into the working model
    lams, z, _ = _collect(fallback.run([0.5]))
    torch.testing.assert_close(z, _reference(*items, x, [0.5]), atol=1e-5, rtol=1e-5)
