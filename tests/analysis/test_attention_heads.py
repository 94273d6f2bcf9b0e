"""Weak additivity of attention heads: the ``attention`` probe points of zoo transformers."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from lmc.analysis import analyze
from lmc.analysis.accumulators import WeakAdditivityStats
from lmc.analysis.probes import Recorder
from lmc.models import build
from lmc.models.transformer import Attention

GEN = torch.Generator().manual_seed(3)
VOCAB, CONTEXT, WIDTH, HEADS = 13, 6, 16, 4


def _gpt(seed: int):
    return build("gpt", seed=seed, vocab=VOCAB, context=CONTEXT, width=WIDTH, heads=HEADS)


def _tokens(n: int):
    return torch.randint(0, VOCAB, (n, CONTEXT), generator=GEN)


def _by_name(records):
    return {r["name"]: r for r in records}


def _explicit_attention(q, k, v, causal):
    """softmax(q kᵀ/√d_h) v written out (an independent check of the fused kernel)."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        length = q.shape[-2]
        mask = torch.ones(length, length, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_heads_weak_additivity_matches_its_definition(causal):
    n, heads, length, head_dim = 3, 2, 5, 4
    qkv_a = tuple(torch.randn(n, heads, length, head_dim, generator=GEN) for _ in range(3))
    qkv_b = tuple(torch.randn(n, heads, length, head_dim, generator=GEN) for _ in range(3))
    stats = WeakAdditivityStats(Attention(causal).forward)
    stats.update(qkv_a, qkv_b)
    out = stats.finalize()
    assert out["sign_agreement"] is None

    mid = tuple((a + b) / 2 for a, b in zip(qkv_a, qkv_b, strict=True))
    merged = _explicit_attention(*mid, causal)
    ensemble = (_explicit_attention(*qkv_a, causal) + _explicit_attention(*qkv_b, causal)) / 2
    # one row per example and token, the heads' features (head-major) as units
    rows_m = merged.permute(0, 2, 1, 3).reshape(n * length, heads * head_dim).double()
    rows_e = ensemble.permute(0, 2, 1, 3).reshape(n * length, heads * head_dim).double()
    expected = torch.nn.functional.cosine_similarity(rows_m, rows_e, dim=1).mean()
    assert out["weak_additivity_cosine"] == pytest.approx(float(expected), abs=1e-6)
    assert out["weak_additivity_cosine"] < 0.999  # random scores: the softmax is not additive


def test_heads_that_attend_alike_are_exactly_weakly_additive():
    """B is A with other v rows in block 1's fused qkv: q and k of block 1 agree, and
    attention is linear in v, so attn1's weak additivity is 1; other q rows break it."""
    a = _gpt(0)
    x = _tokens(8)
    b = copy.deepcopy(a)
    with torch.no_grad():
        b.blocks[0].attn.qkv.weight[2 * WIDTH :].normal_(generator=GEN)
    records = _by_name(analyze(a, b, x, 0.5).records)
    assert records["attn1"]["weak_additivity_cosine"] == pytest.approx(1.0, abs=1e-9)
    assert records["attn1"]["activation"] == "attention"
    assert records["attn1"]["endpoint_cosine"] < 0.99  # the heads' outputs do differ

    with torch.no_grad():
        b.blocks[0].attn.qkv.weight[:WIDTH].normal_(generator=GEN)
    records = _by_name(analyze(a, b, x, 0.5).records)
    assert records["attn1"]["weak_additivity_cosine"] < 0.999


def test_heads_output_is_what_the_output_projection_reads():
    """The attention point's features, head-major, are exactly the input of ``attn.out``."""
    model = _gpt(1)
    point = next(p for p in model.probe_points() if p.name == "attn1")
    seen = {}
    hook = model.blocks[0].attn.out.register_forward_pre_hook(
        lambda _m, inputs: seen.setdefault("x", inputs[0].detach())
    )
    try:
        with Recorder(model, [point]) as recorder:
            capture = recorder.run(_tokens(3))["attn1"]
    finally:
        hook.remove()
    assert capture.output.shape == (3, WIDTH, CONTEXT)
    torch.testing.assert_close(capture.output, seen["x"].movedim(-1, 1), rtol=0, atol=0)
    assert isinstance(capture.pre, tuple) and len(capture.pre) == 3
    assert capture.pre[0].shape == (3, HEADS, CONTEXT, WIDTH // HEADS)


def test_vit_reports_its_heads_too():
    options = dict(width=16, heads=2, depth=1, patch=4, num_classes=3, in_channels=1, image_size=8)
    a, b = build("vit", seed=0, **options), build("vit", seed=1, **options)
    x = torch.randn(4, 1, 8, 8, generator=GEN)
    records = _by_name(analyze(a, b, x, 0.5).records)
    assert 0 < records["attn1"]["weak_additivity_cosine"] < 1
    assert records["attn1"]["kind"] == "attention" and records["attn1"]["units"] == 16
