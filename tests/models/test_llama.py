"""The zoo's Llama-style causal LM (issue 46): RMSNorm, rotary embeddings, SwiGLU, grouped-query
attention, tied or untied embeddings. Its conventions match Hugging Face's ``LlamaForCausalLM``
(same logits from the same weights), its traced symmetry group keeps its function, weight
matching recovers a random element of it exactly, and it trains and interpolates from the CLI."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch

from lmc.analysis import analyze
from lmc.cli.main import main
from lmc.config import LmcError
from lmc.models import build, count_parameters, initialize, resolve_options
from lmc.models.llama import Llama, apply_rope, rope_angles, swiglu_hidden
from lmc.perm import (
    apply_permutation,
    invert_permutation,
    moved_fraction,
    random_permutation,
    spec_from_model,
    weight_matching,
)
from lmc.store import load_run

VOCAB, CONTEXT, WIDTH, HEADS, DEPTH = 13, 8, 32, 4, 2
HEAD_DIM = WIDTH // HEADS
# (kv_heads, tied): multi-head, grouped-query with a tied head, multi-query
CONFIGS = {"mha": (4, False), "gqa_tied": (2, True), "mqa": (1, False)}


def _model(seed: int = 0, perturb: bool = True, **options) -> Llama:
    options = {"vocab": VOCAB, "context": CONTEXT, "width": WIDTH, "heads": HEADS,
               "depth": DEPTH, **options}  # fmt: skip
    model = build("llama", seed=seed, **options).eval()
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():  # RMSNorm gains start at 1: make every tensor's order matter
        for param in model.parameters() if perturb else ():
            param.add_(0.2 * torch.randn(param.shape, generator=gen))
    return model


def _tokens(n: int, length: int = CONTEXT, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, length), generator=torch.Generator().manual_seed(seed))


def _spec(model: Llama, x: torch.Tensor):
    with warnings.catch_warnings():  # RoPE keeps q/k dims within heads in place: said aloud
        warnings.simplefilter("error")  # anything else left unpermuted would be a fault
        warnings.filterwarnings("ignore", message=".*dims within each attention head stay")
        return spec_from_model(model, x[:2])


# ---- the architecture ------------------------------------------------------------------------
@pytest.mark.parametrize("config", list(CONFIGS))
def test_builds_with_and_without_grouped_query_attention_and_tied_embeddings(config):
    kv_heads, tied = CONFIGS[config]
    model = _model(kv_heads=kv_heads, tied=tied)
    assert model(_tokens(3)).shape == (3, CONTEXT, VOCAB)
    assert model(_tokens(2, 5)).shape == (2, 5, VOCAB)
    attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
    assert attn.q.weight.shape == (HEADS * HEAD_DIM, WIDTH)
    assert attn.k.weight.shape == attn.v.weight.shape == (kv_heads * HEAD_DIM, WIDTH)
    assert attn.out.weight.shape == (WIDTH, HEADS * HEAD_DIM)
    assert mlp.gate.weight.shape == mlp.up.weight.shape == (swiglu_hidden(WIDTH), WIDTH)
    assert all(isinstance(m, torch.nn.RMSNorm) for m in (model.norm, model.blocks[0].norm1))
    assert not any(name.endswith("bias") for name in model.state_dict())  # no biases
    assert not any("pos" in name for name in model.state_dict())  # RoPE: no position table
    assert (model.head.weight is model.tok.weight) == tied
    per_block = 2 * WIDTH + WIDTH * HEAD_DIM * (2 * HEADS + 2 * kv_heads) + 3 * WIDTH * 88
    embeddings = VOCAB * WIDTH * (1 if tied else 2)
    assert count_parameters(model) == embeddings + DEPTH * per_block + WIDTH


def test_swiglu_hidden_units_follow_llamas_rule():
    # int(2 · 4 · width / 3) rounded up to a multiple of 8: as many MLP weights as 4 · width
    assert [swiglu_hidden(w) for w in (16, 32, 128, 256, 96)] == [48, 88, 344, 688, 256]
    assert swiglu_hidden(32, 4.0, 1) == 128 and swiglu_hidden(10, 2.0, 16) == 32


def test_registry_fills_the_defaults_and_refuses_bad_options():
    options = resolve_options("llama", {"vocab": 5, "context": 4, "width": 16, "heads": 4})
    assert options["kv_heads"] == 4 and options["tied"] is False and options["depth"] == 2
    assert options["rope_theta"] == 10000.0 and options["multiple_of"] == 8
    assert build("llama", **options)(torch.zeros(1, 4, dtype=torch.long)).shape == (1, 4, 5)
    assert resolve_options("llama", {"width": 16, "heads": 4, "kv_heads": 2})["kv_heads"] == 2
    with pytest.raises(LmcError, match="llama: this model predicts at every position"):
        resolve_options("llama", {"width": 8}, input_shape=(1, 8, 8), num_classes=10)
    for options, match in (
        ({"kv_heads": 3}, r"kv_heads \(3\) must divide heads \(4\)"),
        ({"width": 36, "heads": 12}, "head dimension width / heads = 3 must be even"),
        ({"width": 18}, "divisible by heads"),
        ({"rope_theta": 0.5}, "rope_theta must be a number above 1"),
        ({"tied": 1}, "tied must be true or false"),
        ({"bias": False}, "no option 'bias'"),
    ):
        with pytest.raises(LmcError, match=match):
            _model(**options)


def test_seeded_initialisation_draws_the_embedding_and_resets_the_gains():
    a, b = _model(seed=2, perturb=False), _model(seed=2, perturb=False)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    assert not torch.equal(a.tok.weight, _model(seed=3, perturb=False).tok.weight)
    assert 0.015 < a.tok.weight.std().item() < 0.025  # N(0, 0.02²), not nn.Embedding's N(0, 1)
    with torch.no_grad():
        a.blocks[0].norm1.weight.mul_(3.0)
    initialize(a, seed=2)  # RMSNorm gains back to 1, as initialize does for LayerNorm
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key


def test_bad_input_is_a_one_line_error(assert_refuses_bad_tokens):
    assert_refuses_bad_tokens(_model(), _tokens(1, CONTEXT + 1), CONTEXT)


@pytest.mark.parametrize("config", ["mha", "gqa_tied"])
def test_causal_a_later_token_never_changes_earlier_logits(config, assert_causal):
    kv_heads, tied = CONFIGS[config]
    assert_causal(_model(kv_heads=kv_heads, tied=tied), _tokens(3), VOCAB)


def test_rope_matches_a_complex_rotation_of_the_half_split_pairs():
    """Reference: dims (i, i + d/2) as one complex number, turned by t · 10000^(−2i/d)."""
    d, length = 8, 6
    x = torch.randn(2, 3, length, d, dtype=torch.float64)
    cos, sin = rope_angles(length, d, 10000.0)
    got = apply_rope(x, cos.double(), sin.double())
    z = torch.complex(x[..., : d // 2], x[..., d // 2 :])
    t = torch.arange(length, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    w = z * torch.exp(1j * t * freq)
    torch.testing.assert_close(got, torch.cat((w.real, w.imag), dim=-1), rtol=1e-6, atol=1e-6)


def test_rope_scores_depend_only_on_the_relative_position():
    """⟨rope(q)_m, rope(k)_n⟩ = ⟨rope(q)_{m+s}, rope(k)_{n+s}⟩ for every shift s."""
    d, length = 8, 12
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(d, generator=gen), torch.randn(d, generator=gen)
    cos, sin = rope_angles(length, d, 10000.0)
    rq = apply_rope(q.expand(length, d), cos, sin)  # q at every position
    rk = apply_rope(k.expand(length, d), cos, sin)
    scores = rq @ rk.T  # scores[m, n]
    for shift in (1, 3, 5):
        torch.testing.assert_close(scores[shift:, shift:], scores[:-shift, :-shift])
    assert not torch.allclose(scores[0, 1], scores[0, 2])  # yet the offset matters


@pytest.mark.parametrize("config", list(CONFIGS))
def test_logits_equal_hugging_face_llama_with_the_same_weights(config):
    """Same convention as ``transformers.LlamaForCausalLM`` (rotate_half RoPE, repeat_kv GQA,
    RMSNorm eps 1e-6, SwiGLU): the same weights give the same logits."""
    transformers = pytest.importorskip("transformers")
    kv_heads, tied = CONFIGS[config]
    model = _model(kv_heads=kv_heads, tied=tied)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=model.hidden,
        num_hidden_layers=DEPTH, num_attention_heads=HEADS, num_key_value_heads=kv_heads,
        max_position_embeddings=CONTEXT, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=tied, attention_bias=False, mlp_bias=False,
    )  # fmt: skip
    hf = transformers.LlamaForCausalLM(cfg).eval()
    names = {"tok": "model.embed_tokens", "norm": "model.norm", "head": "lm_head"}
    for i in range(DEPTH):
        for ours, theirs in (
            ("norm1", "input_layernorm"), ("norm2", "post_attention_layernorm"),
            ("attn.q", "self_attn.q_proj"), ("attn.k", "self_attn.k_proj"),
            ("attn.v", "self_attn.v_proj"), ("attn.out", "self_attn.o_proj"),
            ("mlp.gate", "mlp.gate_proj"), ("mlp.up", "mlp.up_proj"),
            ("mlp.down", "mlp.down_proj"),
        ):  # fmt: skip
            names[f"blocks.{i}.{ours}"] = f"model.layers.{i}.{theirs}"
    state = {names[k.removesuffix(".weight")] + ".weight": v for k, v in model.state_dict().items()}
    hf.load_state_dict(state, strict=True)
    x = _tokens(4, seed=1)
    with torch.no_grad():
        ours, theirs = model(x), hf(x).logits
    assert float((ours - theirs).norm() / ours.norm()) < 1e-5
    with torch.no_grad():  # control: one block's RoPE convention differs (interleaved pairs)
        hf.model.layers[0].self_attn.q_proj.weight.copy_(
            model.blocks[0].attn.q.weight.view(HEADS, 2, HEAD_DIM // 2, WIDTH)
            .transpose(1, 2).reshape(WIDTH, WIDTH)
        )  # fmt: skip
        assert float((model(x) - hf(x).logits).norm() / ours.norm()) > 1e-3


def test_probes_record_every_block():
    a, b = _model(seed=0, perturb=False, kv_heads=2), _model(seed=1, perturb=False, kv_heads=2)
    result = analyze(a, b, _tokens(10, 6), [0.5], batch_size=4)
    names = ["attn1", "mlp1", "block1", "attn2", "mlp2", "block2", "logits"]
    assert [r["name"] for r in result.records] == names
    assert [r["units"] for r in result.records] == [WIDTH, 88, WIDTH, WIDTH, 88, WIDTH, VOCAB]
    assert [r["layer"] for r in result.records] == [2, 4, 5, 6, 8, 9, 10]
    assert all(r["weak_additivity_cosine"] is not None for r in result.records[:2])


# ---- symmetries ------------------------------------------------------------------------------
def _groups(spec, name: str, axis: int) -> list[tuple[str | None, int]]:
    entry = spec[name][axis]
    return [] if entry is None else [(s.perm, s.repeat) for s in entry]


@pytest.mark.parametrize("config", list(CONFIGS))
def test_the_traced_group_is_the_stream_swiglu_units_and_key_value_heads(config):
    """The residual stream, each block's SwiGLU units (gate and up rows, down's columns), the
    key/value heads with the query heads that share them (q rows in blocks of heads/kv_heads
    heads), and v/o dims within heads only without grouping; q/k dims within heads never."""
    kv_heads, tied = CONFIGS[config]
    model = _model(kv_heads=kv_heads, tied=tied)
    spec = _spec(model, _tokens(2))
    ((stream, _),) = _groups(spec, "tok.weight", 1)
    expected = {stream}
    for b in range(DEPTH):
        p = f"blocks.{b}"
        for name, axis in ((f"{p}.norm1.weight", 0), (f"{p}.attn.out.weight", 0),
                           (f"{p}.mlp.down.weight", 0), (f"{p}.mlp.gate.weight", 1)):  # fmt: skip
            assert _groups(spec, name, axis) == [(stream, 1)]
        ((hidden, _),) = _groups(spec, f"{p}.mlp.gate.weight", 0)
        assert _groups(spec, f"{p}.mlp.up.weight", 0) == [(hidden, 1)]
        assert _groups(spec, f"{p}.mlp.down.weight", 1) == [(hidden, 1)]
        expected.add(hidden)
        rep = HEADS // kv_heads
        ((heads, _),) = _groups(spec, f"{p}.attn.k.weight", 0)
        assert spec.group_sizes[heads] == kv_heads  # one key/value head: a group of one unit
        assert _groups(spec, f"{p}.attn.k.weight", 0) == [(heads, HEAD_DIM)]  # RoPE: whole
        assert _groups(spec, f"{p}.attn.q.weight", 0) == [(heads, rep * HEAD_DIM)]
        expected.add(heads)
        if rep == 1:  # v/o dims within heads permute, nested in the heads
            ((vo, _),) = _groups(spec, f"{p}.attn.v.weight", 0)
            assert spec.heads[vo] == (heads, HEADS)
            assert _groups(spec, f"{p}.attn.out.weight", 1) == [(vo, 1)]
            expected.add(vo)
        else:  # o reads each key/value head's dims rep times: they stay in place
            assert _groups(spec, f"{p}.attn.v.weight", 0) == [(heads, HEAD_DIM)]
            assert _groups(spec, f"{p}.attn.out.weight", 1) == [(heads, rep * HEAD_DIM)]
    assert set(spec.group_sizes) == expected
    assert set(spec.permuted_names) == set(model.state_dict())


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_random_symmetry_keeps_the_function_and_weight_matching_recovers_it(config):
    kv_heads, tied = CONFIGS[config]
    model = _model(kv_heads=kv_heads, tied=tied)
    x = _tokens(16, seed=2)
    spec = _spec(model, x)
    seed = 7  # the first seed from here whose permutation moves every group
    movable = {g for g, n in spec.group_sizes.items() if n > 1}  # one key/value head: fixed
    while not all(
        f > 0 for g, f in moved_fraction(random_permutation(spec, seed)).items() if g in movable
    ):
        seed += 1
    perm = random_permutation(spec, seed)
    state_a = {k: v.clone() for k, v in model.state_dict().items()}
    state_b = apply_permutation(spec, perm, state_a)
    model_b = copy.deepcopy(model)
    model_b.load_state_dict(state_b)
    with torch.no_grad():
        ya, yb = model(x), model_b(x)
        assert float((ya - yb).norm() / ya.norm()) < 1e-5  # float32
        assert (model_b.head.weight is model_b.tok.weight) == tied
        for name in spec.permuted_names:
            assert not torch.equal(state_b[name], state_a[name]), name
        broken = dict(state_b)  # control: one tensor left in A's order breaks the function
        broken["blocks.1.mlp.down.weight"] = state_a["blocks.1.mlp.down.weight"]
        model_b.load_state_dict(broken)
        assert float((ya - model_b(x)).norm() / ya.norm()) > 1e-3
    found = weight_matching(spec, state_a, state_b, seed=0).perm
    inverse = invert_permutation(perm)
    assert set(found) == set(inverse)
    for group, p in found.items():
        assert torch.equal(p, inverse[group]), group
    back = apply_permutation(spec, found, state_b)
    for name, value in state_a.items():
        assert torch.equal(back[name], value), name


# ---- the CLI ---------------------------------------------------------------------------------
LLAMA = ["--model", "llama", "--width", "16", "--depth", "1", "--heads", "2", "--context", "16"]
FAST = ["--epochs", "1", "--optimizer", "adam", "--lr", "1e-3", "--quiet"]


def test_lmc_trains_a_llama_on_a_text_file_and_interpolates_two(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("It was the best of times, it was the worst of times. " * 120, "utf-8")
    runs, dirs = tmp_path / "runs", []
    for seed in ("1", "2"):
        argv = ["train", *LLAMA, "--data", str(corpus), *FAST, "--seed", seed]
        assert main([*argv, "--runs-dir", str(runs)]) == 0, capsys.readouterr().err
        dirs.append(capsys.readouterr().out.strip().splitlines()[-1])
    run = load_run(dirs[0])
    assert run.config["model"] == "llama" and run.config["dataset"] == "text"
    options = run.config["model_options"]
    assert options["context"] == 16 and options["kv_heads"] == 2 and options["tied"] is False
    assert 0 < run.metrics["final_test_loss"] < 10
    out = tmp_path / "path"
    argv = ["interpolate", *dirs, "--align", "weight", "--lambdas", "3", "--out", str(out)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*dims within each attention head stay")
        assert main([*argv, "--quiet"]) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["align"] == "weight" and len(summary["loss"]) == 3
    assert summary["align_info"]["objective_after"] >= summary["align_info"]["objective_before"]
    assert {"blocks.0.mlp.gate", "blocks.0.attn.v"} <= set(summary["align_info"]["group_sizes"])
