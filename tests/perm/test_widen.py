"""A narrow zoo GPT written exactly into a wider architecture (issue 30 item 4): the embedded
model computes the narrow model's function, for wider streams, heads, head dims and MLPs."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build
from lmc.perm import align
from lmc.perm.canonical import is_canonical
from lmc.perm.widen import embed_gpt


def _gpt(width, heads, seed=0, **options):
    options = {"vocab": 13, "context": 7, "depth": 2, **options}
    return build("gpt", seed=seed, width=width, heads=heads, **options).double().eval()


@pytest.mark.parametrize(
    ("narrow_heads", "width", "heads"),
    [(2, 16, 2), (2, 16, 4), (2, 32, 4), (2, 8, 2), (1, 16, 1), (1, 16, 2), (1, 32, 4)],
    ids=["dims", "heads", "both", "same", "one-head", "one-to-two-heads", "one-to-four-heads"],
)
def test_the_embedded_model_computes_the_narrow_function(narrow_heads, width, heads):
    narrow, wide = _gpt(8, narrow_heads), _gpt(width, heads, seed=1)
    x = torch.randint(0, 13, (3, 7), generator=torch.Generator().manual_seed(0))
    embedded = embed_gpt(narrow, wide)
    assert is_canonical(embedded)
    assert {k: v.shape for k, v in embedded.state_dict().items()} == {
        k: v.shape for k, v in embed_gpt(wide, wide).state_dict().items()
    }
    with torch.no_grad():
        assert torch.allclose(embedded(x), narrow(x), atol=1e-10)
        assert not torch.allclose(embedded(x), wide(x), atol=1e-3)


def test_an_untied_head_without_bias_and_relu_are_embedded_too():
    options = {"tied": False, "bias": False, "activation": "relu"}
    narrow, wide = _gpt(8, 2, **options), _gpt(16, 2, seed=1, **options)
    x = torch.randint(0, 13, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(embed_gpt(narrow, wide)(x), narrow(x), atol=1e-10)


def test_models_that_do_not_fit_are_refused():
    with pytest.raises(LmcError, match="give the narrower model first"):
        embed_gpt(_gpt(16, 2), _gpt(8, 2))
    with pytest.raises(LmcError, match="depth differ"):
        embed_gpt(_gpt(8, 2), _gpt(16, 2, depth=1))
    with pytest.raises(LmcError, match="more heads"):
        embed_gpt(_gpt(8, 2), _gpt(16, 1))  # more heads in the narrow one
    with pytest.raises(LmcError, match="not a zoo gpt"):
        embed_gpt(torch.nn.Linear(2, 2), _gpt(8, 2))


def test_a_rotated_embedded_model_is_recovered_by_orthogonal_matching():
    """A width-8 model embedded into width 16, then rotated at random: the orthogonal method
    maps it back onto the embedded copy (B matches A)."""
    from lmc.perm import Alignment, Orthogonal, random_alignment
    from lmc.perm.symmetry import symmetry_spec

    narrow, wide = _gpt(8, 2), _gpt(16, 2, seed=1)
    a = embed_gpt(narrow, wide)
    x = torch.randint(0, 13, (2, 7))
    spec = symmetry_spec(a, x)
    known = dict(random_alignment(spec, 5, "permutation"))
    known["tok"] = Orthogonal.random(16, 6)
    b = embed_gpt(narrow, wide)
    b.load_state_dict(Alignment(known).apply(spec, a.state_dict()))
    result = align("orthogonal", a, b, inputs=x)
    for name, want in a.state_dict().items():
        assert torch.allclose(result.state_dict[name], want, atol=1e-6), name


def test_run_pair_widens_and_measures_the_narrow_and_the_wide_model_at_the_ends():
    from lmc.data.text import build_text_dataset
    from lmc.pair import PairSettings, PathSettings, run_pair

    data = build_text_dataset("t", "a stitch in time saves nine. " * 50, context=7)
    narrow = build("gpt", seed=0, vocab=data.vocab_size, context=7, width=8, heads=2)
    wide = build("gpt", seed=1, vocab=data.vocab_size, context=7, width=16, heads=2)
    x, y = data.split("test")
    with torch.no_grad():
        losses = [float(torch.nn.functional.cross_entropy(m.eval()(x).flatten(0, 1), y.flatten()))
                  for m in (narrow, wide)]  # fmt: skip
    path = PathSettings(lambdas=3, calibrate=False)
    for a, b, want in ((narrow, wide, losses), (wide, narrow, losses[::-1])):
        result = run_pair(a, b, data, PairSettings(align="orthogonal", path=path, widen=True))
        assert result.path.loss[0] == pytest.approx(want[0], rel=1e-5)
        assert result.path.loss[-1] == pytest.approx(want[1], rel=1e-5)
    with pytest.raises(LmcError, match="architecture|width|differ"):
        run_pair(narrow, wide, data, PairSettings(path=path))  # without widen: refused


def _vit(width, heads, seed=0):
    return build("vit", seed=seed, in_channels=1, image_size=8, num_classes=5, width=width,
                 depth=2, heads=heads, patch=4).double().eval()  # fmt: skip


def _hf_gpt2(width, heads):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(
        n_layer=2, n_embd=width, n_head=heads, n_inner=4 * width, vocab_size=11, n_positions=8,
        attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config).double().eval()


def _hf_vit(width, heads):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.ViTConfig(
        hidden_size=width, num_hidden_layers=2, num_attention_heads=heads,
        intermediate_size=2 * width, image_size=8, patch_size=4, num_channels=1, num_labels=5,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return transformers.ViTForImageClassification(config).double().eval()


def _out(model, x):
    y = model(x)
    return getattr(y, "logits", y)


@pytest.mark.parametrize(
    ("builder", "shape"),
    [(_vit, "image"), (_hf_gpt2, "tokens"), (_hf_vit, "image")],
    ids=["vit", "hf_gpt2", "hf_vit"],
)
@pytest.mark.parametrize(
    ("narrow_heads", "width", "heads"),
    [(2, 16, 2), (2, 32, 4), (1, 16, 1), (1, 16, 2)],
    ids=["dims", "both", "one-head", "one-to-two-heads"],
)
def test_any_canonical_transformer_is_embedded_exactly(builder, shape, narrow_heads, width, heads):
    from lmc.perm.widen import embed_transformer

    gen = torch.Generator().manual_seed(2)
    if shape == "image":
        x = torch.randn(3, 1, 8, 8, generator=gen, dtype=torch.float64)
    else:
        x = torch.randint(0, 11, (3, 6), generator=gen)
    narrow, wide = builder(8, narrow_heads), builder(width, heads)
    embedded = embed_transformer(narrow, wide, x[:2])
    assert is_canonical(embedded)
    assert {k: v.shape for k, v in embedded.state_dict().items()} == {
        k: v.shape for k, v in embed_transformer(wide, wide, x[:2]).state_dict().items()
    }
    with torch.no_grad():
        assert torch.allclose(_out(embedded, x), _out(narrow, x), atol=1e-10)
    with pytest.raises(LmcError, match="give the narrower model first"):
        embed_transformer(wide, narrow, x[:2])


def test_the_generic_rule_scales_the_q_side_of_each_head():
    """Read off the symmetry spec: q rows of head j go to wide head j's first dims, scaled by
    sqrt(D_h / d_h) / c, k rows by 1 / c only, the extra dims stay zero."""
    from lmc.perm.canonical import canonicalize
    from lmc.perm.symmetry import symmetry_spec
    from lmc.perm.widen import _qk_groups, embed_transformer

    narrow, wide = _gpt(8, 2), _gpt(32, 4, seed=1)  # head dims 4 -> 8, stream 8 -> 32
    x = torch.randint(0, 13, (2, 7))
    generic = embed_transformer(narrow, wide, x).state_dict()["blocks.0.attn.qkv.weight"]
    w_n = canonicalize(narrow).state_dict()["blocks.0.attn.qkv.weight"]
    c, q_scale = (32 / 8) ** 0.5, (8 / 4) ** 0.5
    assert torch.allclose(generic[0:4, :8], q_scale * w_n[0:4] / c)  # q, head 0
    assert torch.allclose(generic[8:12, :8], q_scale * w_n[4:8] / c)  # q, head 1
    assert torch.allclose(generic[32:36, :8], w_n[8:12] / c)  # k, head 0
    assert torch.allclose(generic[64:68, :8], w_n[16:20] / c)  # v, head 0
    assert generic[4:8].abs().max() == 0 and generic[:, 8:].abs().max() == 0
    spec = symmetry_spec(embed_gpt(narrow, wide), x)
    assert len(_qk_groups(spec, "tok")) == 2  # one q/k group per block, not the v/o ones


def test_run_pair_widens_vits():
    from lmc.data import load
    from lmc.pair import PairSettings, PathSettings, run_pair

    data = load("digits")
    narrow = build("vit", seed=0, in_channels=1, image_size=8, num_classes=10, width=8,
                   depth=1, heads=2, patch=4)  # fmt: skip
    wide = build("vit", seed=1, in_channels=1, image_size=8, num_classes=10, width=16,
                 depth=1, heads=2, patch=4)  # fmt: skip
    x, y = data.split("test")
    with torch.no_grad():
        losses = [float(torch.nn.functional.cross_entropy(m.eval()(x), y)) for m in (narrow, wide)]
    path = PathSettings(lambdas=3, calibrate=False)
    result = run_pair(narrow, wide, data, PairSettings(align="orthogonal", path=path, widen=True))
    assert result.path.loss[0] == pytest.approx(losses[0], rel=1e-5)
    assert result.path.loss[-1] == pytest.approx(losses[1], rel=1e-5)
