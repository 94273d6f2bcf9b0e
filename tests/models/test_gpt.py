"""The zoo's causal GPT, and the analysis of token models (the ``tokens`` probe layout)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lmc.analysis import analyze, apply_weight, derive_probe_points
from lmc.config import LmcError
from lmc.models import GPT, build, count_parameters, initialize, resolve_options

GEN = torch.Generator().manual_seed(0)
VOCAB, CONTEXT = 11, 7


def _tiny(seed=0, **options):
    options = {"vocab": VOCAB, "context": CONTEXT, "width": 16, "heads": 2, **options}
    return build("gpt", seed=seed, **options)


def _tokens(n, length, vocab=VOCAB, gen=GEN):
    return torch.randint(0, vocab, (n, length), generator=gen)


def test_logits_per_position_and_shorter_sequences():
    model = _tiny(depth=3)
    assert isinstance(model, GPT) and len(model.blocks) == 3
    assert model(_tokens(4, CONTEXT)).shape == (4, CONTEXT, VOCAB)
    assert model(_tokens(2, 3)).shape == (2, 3, VOCAB)


def test_bad_input_is_a_one_line_error(assert_refuses_bad_tokens):
    assert_refuses_bad_tokens(_tiny(), _tokens(1, CONTEXT + 1), CONTEXT)


@pytest.mark.parametrize("tied", [True, False])
def test_causal_a_later_token_never_changes_earlier_logits(tied, assert_causal):
    assert_causal(_tiny(tied=tied, depth=2), _tokens(3, CONTEXT), VOCAB)


def test_tied_head_shares_the_embedding_storage():
    tied, untied = _tiny(tied=True), _tiny(tied=False)
    assert tied.head.weight is tied.tok.weight
    assert tied.head.weight.data_ptr() == tied.tok.weight.data_ptr()
    assert untied.head.weight.data_ptr() != untied.tok.weight.data_ptr()
    assert count_parameters(untied) - count_parameters(tied) == VOCAB * 16
    state = tied.state_dict()
    assert torch.equal(state["head.weight"], state["tok.weight"])
    # one step of training moves both names together; initialize keeps them tied
    tied(_tokens(2, 4)).square().mean().backward()
    with torch.no_grad():
        tied.tok.weight -= tied.tok.weight.grad
    assert torch.equal(tied.head.weight, tied.tok.weight)
    initialize(tied, seed=5)
    assert tied.head.weight is tied.tok.weight
    # the tied logits are ⟨LN(x_T), embedding of each token⟩
    x = _tokens(2, 5)
    seen = {}
    tied.norm.register_forward_hook(lambda m, i, o: seen.__setitem__("h", o))
    torch.testing.assert_close(tied(x), seen["h"] @ tied.tok.weight.T)


def test_seeded_initialisation_draws_the_embeddings():
    a, b, c = _tiny(seed=2, vocab=64, width=32), _tiny(seed=2, vocab=64, width=32), _tiny(seed=3)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    assert not torch.equal(_tiny(seed=2).pos.weight, c.pos.weight)
    # GPT-2's N(0, 0.02²) for both embeddings, not nn.Embedding's N(0, 1)
    assert 0.017 < a.tok.weight.std().item() < 0.023
    assert abs(a.pos.weight.std().item() - 0.02) < 0.01


@pytest.mark.parametrize(
    "options,match",
    [
        ({"width": 18, "heads": 4}, "divisible by heads"),
        ({"vocab": 1}, "vocab must be at least 2"),
        ({"context": 0}, "context must be at least 1"),
        ({"tied": "yes"}, "tied must be true or false"),
        ({"mlp_ratio": -1.0}, "mlp_ratio must be a positive number"),
        ({"depth": 0}, "depth must be at least 1"),
        ({"pool": "cls"}, "no option 'pool'"),
    ],
)
def test_bad_options_are_clear_errors(options, match):
    with pytest.raises(LmcError, match=match):
        _tiny(**options)


def test_registry_builds_without_data_and_refuses_datasets():
    options = resolve_options("gpt", {"vocab": 5, "context": 4, "width": 8, "heads": 2})
    assert options["tied"] is True and options["depth"] == 2 and options["mlp_ratio"] == 4.0
    assert build("gpt", **options)(_tokens(1, 4, vocab=5)).shape == (1, 4, 5)
    with pytest.raises(LmcError, match="gpt: this model predicts at every position"):
        resolve_options("gpt", {"width": 8}, input_shape=(1, 8, 8), num_classes=10)


def _successor_sequences(n, length, vocab, seed):
    """A tiny synthetic sequence task: a random start, then each token is its predecessor
    + 1 (mod vocab), so the next token is a function of the current one."""
    start = torch.randint(0, vocab, (n, 1), generator=torch.Generator().manual_seed(seed))
    return (start + torch.arange(length)) % vocab


def test_learns_a_synthetic_next_token_task():
    model = _tiny(seed=0, width=16, depth=1)
    seqs = _successor_sequences(64, CONTEXT, VOCAB, seed=1)
    inputs, targets = seqs[:, :-1], seqs[:, 1:]

    def loss():
        return F.cross_entropy(model(inputs).reshape(-1, VOCAB), targets.reshape(-1))

    first = loss().item()
    assert abs(first - math.log(VOCAB)) < 0.5  # near uniform at initialisation
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()
    assert loss().item() < 0.3 * first


def test_probes_record_every_block_of_a_gpt():
    a, b = _tiny(seed=0), _tiny(seed=1)
    x = _tokens(10, 6)
    result = analyze(a, b, x, [0.25, 0.5], batch_size=4)
    names = ["attn1", "mlp1", "block1", "attn2", "mlp2", "block2", "logits"]
    assert [r["name"] for r in result.records] == names * 2
    assert [r["units"] for r in result.records[:7]] == [16, 64, 16, 16, 64, 16, VOCAB]
    assert [r["layer"] for r in result.records[:7]] == [2, 4, 5, 6, 8, 9, 10]
    for r in result.records:
        assert -1 <= r["lewc_cosine"] <= 1 and r["n_examples"] == 10
    assert result.records[6]["logit_norm"] is not None  # the logits (n, T, vocab)
    same = analyze(a, copy.deepcopy(a), x, [0.5]).records
    assert all(r["lewc_cosine"] == pytest.approx(1.0, abs=1e-6) for r in same)


class _TokenMLP(nn.Module):
    """A user's token model without probe_points(): Linear maps on (n, T, d)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 9)
        self.act = nn.ReLU()
        self.out = nn.Linear(9, 3)

    def forward(self, x):
        return self.out(self.act(self.fc(x)))


def test_derived_points_of_a_token_model_take_features_as_units():
    model = _TokenMLP()
    x = torch.randn(6, 5, 4, generator=GEN)  # 5 tokens of 4 features
    points = derive_probe_points(model, x[:2])
    assert [p.layout for p in points] == ["tokens", "tokens"]
    assert derive_probe_points(model, torch.randn(2, 4))[0].layout == "channels"
    result = analyze(model, copy.deepcopy(model), x, 0.5)
    pre = model.fc(x).detach().double()
    want = pre.reshape(-1, 9).pow(2).mean(0).sqrt().numpy()
    assert result.moments["layer1"]["a"] == pytest.approx(want, rel=1e-6)  # 9 units, not 5
    assert result.records[0]["units"] == 9 and result.records[1]["units"] == 3


def test_apply_weight_keeps_the_features_first_layout():
    layer = nn.Linear(4, 6)
    z = torch.randn(3, 5, 4, generator=GEN)  # (n, T, d)
    got = apply_weight(layer, layer.weight, z.movedim(-1, 1))  # the analysis's (n, d, T)
    torch.testing.assert_close(got, F.linear(z, layer.weight).movedim(-1, 1))
    flat = torch.randn(3, 4, generator=GEN)
    torch.testing.assert_close(apply_weight(layer, layer.weight, flat), flat @ layer.weight.T)


@pytest.mark.parametrize("tied", [True, False])
def test_a_permuted_gpt_computes_the_same_function(tied, assert_permutation_keeps_function):
    model = _tiny(tied=tied)
    assert_permutation_keeps_function(model, _tokens(4, 6), 7, "blocks.0.attn.qkv.weight")
