"""The canonical form of pre-LayerNorm transformers (lmc.perm.canonical): every LayerNorm folded
into the layers that read it, the mean subtracted from every writer of the residual stream, the
norms replaced by parameter-free RMSNorms. Checked on every transformer lmc builds (zoo gpt tied
and untied, with and without biases; zoo vit with cls and mean pooling) and on Hugging Face
GPT-2 and ViT (tiny random configs): the outputs are unchanged, the stream is centred, the
LayerNorm parameters are gone, and the orthogonal symmetry the LayerNorm hid now holds."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from lmc.config import LmcError
from lmc.models import build
from lmc.perm.canonical import (
    canonical_skeleton,
    canonical_state,
    canonicalize,
    is_canonical,
    stream_layout,
)

WIDTH, HEADS = 16, 4


def _randomise(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter redrawn, LayerNorm gains around 1 and biases around 0 (so the fold is
    not trivial), in float64."""
    gen = torch.Generator().manual_seed(seed)
    model = model.double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if isinstance(_owner(model, name), nn.LayerNorm) and name.endswith("weight"):
                p.copy_(1 + 0.3 * noise)
            else:
                p.copy_(0.3 * noise)
    return model


def _owner(model: nn.Module, name: str) -> nn.Module:
    return model.get_submodule(name.rpartition(".")[0])


def _zoo(arch: str, **options) -> tuple[nn.Module, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    if arch == "gpt":
        model = build("gpt", vocab=11, context=6, width=WIDTH, depth=2, heads=HEADS, **options)
        return model, torch.randint(0, 11, (3, 6), generator=gen)
    model = build("vit", in_channels=1, image_size=4, num_classes=5, width=WIDTH, depth=2,
                  heads=HEADS, patch=2, **options)  # fmt: skip
    return model, torch.randn(3, 1, 4, 4, generator=gen, dtype=torch.float64)


def _hf(kind: str) -> tuple[nn.Module, torch.Tensor]:
    transformers = pytest.importorskip("transformers")
    gen = torch.Generator().manual_seed(1)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            n_layer=2, n_embd=WIDTH, n_head=HEADS, n_inner=32, vocab_size=11, n_positions=8,
            attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        return transformers.GPT2LMHeadModel(config), torch.randint(0, 11, (3, 6), generator=gen)
    config = transformers.ViTConfig(
        num_hidden_layers=2, hidden_size=WIDTH, num_attention_heads=HEADS, intermediate_size=32,
        image_size=4, patch_size=2, num_channels=1, num_labels=5, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    x = torch.randn(3, 1, 4, 4, generator=gen, dtype=torch.float64)
    return transformers.ViTForImageClassification(config), x


CASES = {
    "gpt_tied": lambda: _zoo("gpt", tied=True),
    "gpt_untied": lambda: _zoo("gpt", tied=False),
    "gpt_nobias": lambda: _zoo("gpt", tied=True, bias=False),
    "vit_cls": lambda: _zoo("vit", pool="cls"),
    "vit_mean": lambda: _zoo("vit", pool="mean"),
    "vit_nobias": lambda: _zoo("vit", pool="cls", bias=False),
    "hf_gpt2": lambda: _hf("gpt2"),
    "hf_vit": lambda: _hf("vit"),
}


def _out(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        y = model(x)
    return y if isinstance(y, torch.Tensor) else y.logits


@pytest.mark.parametrize("case", sorted(CASES))
def test_canonical_form_keeps_the_function(case: str) -> None:
    model, x = CASES[case]()
    model = _randomise(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    canon = canonicalize(model)
    y, z = _out(model, x), _out(canon, x)
    assert torch.allclose(z, y, rtol=0, atol=1e-10 * float(y.abs().max()))
    # the model is untouched; the copy's stream norms are parameter-free RMSNorms, same eps
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    layout = stream_layout(model)
    for site in layout.norms:
        old, new = model.get_submodule(site.norm), canon.get_submodule(site.norm)
        assert isinstance(new, nn.RMSNorm) and new.weight is None and new.eps == old.eps
        assert not any(k.startswith(site.norm + ".") for k in canon.state_dict())
    assert not any(isinstance(m, nn.LayerNorm) for m in canon.modules())
    assert is_canonical(canon) and not is_canonical(model)


@pytest.mark.parametrize("case", ["gpt_tied", "vit_mean", "hf_gpt2"])
def test_canonical_stream_is_centred(case: str) -> None:
    """Every writer's output has zero mean over the features, so the stream does: LayerNorm's
    mean subtraction had nothing left to do."""
    model, x = CASES[case]()
    canon = canonicalize(_randomise(model))
    layout = stream_layout(canon)
    state = canon.state_dict()
    for name, axis in layout.writers:
        mean = state[name].mean(dim=axis)
        assert float(mean.abs().max()) < 1e-12, name
    seen = []
    hooks = [
        canon.get_submodule(site.norm).register_forward_pre_hook(
            lambda _m, args: seen.append(args[0].mean(dim=-1).abs().max())
        )
        for site in layout.norms
    ]
    _out(canon, x)
    for h in hooks:
        h.remove()
    assert len(seen) == len(layout.norms) and max(float(s) for s in seen) < 1e-12


def test_float32_within_tolerance_and_large_eps() -> None:
    """float32 models agree to 1e-5; a large LayerNorm eps is kept as it is (same eps)."""
    model, x = CASES["gpt_untied"]()
    model = _randomise(model)
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            m.eps = 0.5
    canon = canonicalize(model)
    assert torch.allclose(_out(canon, x), _out(model, x), rtol=0, atol=1e-12)
    model32 = model.float()
    y = _out(model32, x)
    assert torch.allclose(
        _out(canonicalize(model32), x), y, rtol=0, atol=1e-5 * float(y.abs().max())
    )


def test_tied_head_is_untied_with_its_own_bias() -> None:
    model, x = CASES["gpt_tied"]()
    model = _randomise(model)
    assert model.head.weight is model.tok.weight
    canon = canonicalize(model)
    assert canon.head.weight is not canon.tok.weight and not canon.tied
    assert canon.head.bias is not None  # W b of the final LayerNorm's bias
    keys = set(canon.state_dict())
    norms = {k for k in model.state_dict() if "norm" in k}
    assert keys == (set(model.state_dict()) - norms) | {"head.bias"}


def test_skeleton_and_state_make_the_canonical_model() -> None:
    model, x = CASES["vit_cls"]()
    model = _randomise(model)
    skeleton = canonical_skeleton(model)
    skeleton.load_state_dict(canonical_state(model))
    assert torch.equal(_out(skeleton, x), _out(canonicalize(model), x))


def test_canonical_form_is_idempotent() -> None:
    model, x = CASES["gpt_untied"]()
    canon = canonicalize(_randomise(model))
    again = canonicalize(canon)
    for k, v in canon.state_dict().items():
        assert torch.allclose(again.state_dict()[k], v, rtol=0, atol=1e-15)


def test_orthogonal_stream_map_keeps_only_the_canonical_function() -> None:
    """Writers -> Q W, readers -> W Qᵀ with a random orthogonal Q: the canonical model computes
    the same function; the original (LayerNorm subtracts the mean, scales per feature) does
    not."""
    model, x = CASES["gpt_untied"]()
    model = _randomise(model)
    gen = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(WIDTH, WIDTH, generator=gen, dtype=torch.float64))

    def rotate(m: nn.Module) -> nn.Module:
        layout = stream_layout(m)
        state = m.state_dict()
        for name, axis in layout.writers:
            state[name] = torch.movedim(torch.movedim(state[name], axis, -1) @ q.T, -1, axis)
        for reader in layout.readers:
            key = f"{reader.module}.weight"
            state[key] = state[key] @ q.T
        out = canonical_skeleton(m) if is_canonical(m) else copy.deepcopy(m)
        out.load_state_dict(state)
        return out

    canon = canonicalize(model)
    y = _out(model, x)
    assert torch.allclose(_out(rotate(canon), x), y, rtol=0, atol=1e-10)
    assert not torch.allclose(_out(rotate(model), x), y, rtol=0, atol=1e-3)


def test_unsupported_models_are_refused() -> None:
    with pytest.raises(LmcError, match="not a supported pre-LayerNorm transformer"):
        canonicalize(build("mlp", input_size=4, num_classes=3))
    model, _ = CASES["gpt_untied"]()
    model.blocks[0].norm1 = nn.BatchNorm1d(WIDTH)
    with pytest.raises(LmcError, match="not a LayerNorm"):
        canonicalize(model)
