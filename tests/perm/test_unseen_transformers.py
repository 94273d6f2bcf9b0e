"""Symmetries beyond permutations on transformers lmc was not written for (issue 42, acceptance:
"checked on transformers you have not seen"), each built from a tiny config, float32, eval.

Each model either works -- the canonical form keeps the function (1e-5 relative), a random
element of every admissible group keeps it, and ``orthogonal`` alignment against a copy moved
by a known stream rotation with permutations elsewhere recovers the copy (B aligned equals A) --
or is refused with one ``LmcError`` naming the module and why, while plain permutations keep its
function and weight matching undoes them.

The ones that work exercise: Gemma's RMSNorm gain stored as ``w`` and applied as ``1 + w`` and
its embeddings scaled by a number (the tracer binds ``1 + w`` as ``w``; the stream may be scaled
by numbers); Falcon's layers computing ``x @ W.T`` (a transposed weight is a dense layer). The
refused ones: norms after a branch's output (OLMo 2), a model that returns its stream (no head),
a mixture-of-experts router the tracer does not follow, a layer scale, and
``nn.TransformerEncoderLayer``, whose fused inference path reads its norms' parameters itself
(traced through its layers now, so its permutations are found).
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch import nn

from lmc.config import LmcError
from lmc.perm import (
    Alignment,
    Orthogonal,
    align,
    apply_permutation,
    canonicalize,
    random_alignment,
    random_permutation,
    spec_from_model,
    symmetry_spec,
    weight_matching,
)

transformers = pytest.importorskip("transformers")

VOCAB, T, WIDTH, HEADS = 40, 6, 32, 4
TOL = 1e-5


def _tokens(n: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, T), generator=torch.Generator().manual_seed(1))


def _decoder(config: str, model: str, **options):
    base = dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2,
                num_attention_heads=HEADS, max_position_embeddings=T)  # fmt: skip
    return getattr(transformers, model)(getattr(transformers, config)(**base, **options))


class EncoderLayerLM(nn.Module):
    """Pre-LN blocks of ``nn.TransformerEncoderLayer(norm_first=True)``, a final LayerNorm and a
    head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(1, T, WIDTH) * 0.1)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                WIDTH, HEADS, 48, dropout=0.0, batch_first=True, norm_first=True
            )
            for _ in range(2)
        )
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, 5)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(1))


WORKS = {
    "gemma": lambda: _decoder("GemmaConfig", "GemmaForCausalLM", intermediate_size=48,
                              num_key_value_heads=2, head_dim=WIDTH // HEADS),
    "falcon": lambda: _decoder("FalconConfig", "FalconForCausalLM"),
}  # fmt: skip

REFUSED = {
    "olmo2": (
        lambda: _decoder("Olmo2Config", "Olmo2ForCausalLM", intermediate_size=48, pad_token_id=0),
        r"'model\.layers\.0\.post_attention_layernorm' normalises a layer's output on its way "
        "into the residual stream",
    ),
    "t5_encoder": (
        lambda: transformers.T5EncoderModel(transformers.T5Config(
            vocab_size=VOCAB, d_model=WIDTH, d_kv=8, d_ff=48, num_layers=2, num_heads=HEADS,
            dropout_rate=0.0)),
        "T5EncoderModel returns its residual stream's features",
    ),
    "mixtral": (
        lambda: _decoder("MixtralConfig", "MixtralForCausalLM", intermediate_size=48,
                         num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
        r"cannot be followed: .*'topk'.* \(in module 'model\.layers\.0\.mlp\.gate'\)",
    ),
    "dinov2_layer_scale": (
        lambda: transformers.Dinov2ForImageClassification(transformers.Dinov2Config(
            hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS, mlp_ratio=2,
            image_size=8, patch_size=4, num_channels=3, num_labels=5)),
        r"in module 'dinov2\.encoder\.layer\.0\.layer_scale1' scales the residual stream "
        "feature by feature",
    ),
    "encoder_layer": (
        EncoderLayerLM,
        r"does not run with its norms \('layers\.0\.norm1'",
    ),
}  # fmt: skip


def _input(name: str) -> torch.Tensor:
    if name.startswith("dinov2"):
        return torch.randn(3, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    return _tokens()


def _perturbed(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter moved by seeded noise (gains away from their init, biases from 0)."""
    gen = torch.Generator().manual_seed(seed)
    model = model.float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen) / math.sqrt(max(p.shape[-1], 1)))
            if p.dim() == 1:
                p.add_(0.2 * torch.randn(p.shape, generator=gen))
    return model


def _out(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        y = model(x)
    if isinstance(y, torch.Tensor):
        return y
    logits = getattr(y, "logits", None)
    return logits if logits is not None else y.last_hidden_state


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _loaded(model: nn.Module, state) -> nn.Module:
    out = copy.deepcopy(model)
    out.load_state_dict(state)
    return out


@pytest.mark.parametrize("name", sorted(WORKS))
def test_canonical_form_symmetries_and_orthogonal_recovery(name):
    model, x = _perturbed(WORKS[name]()), _tokens()
    y = _out(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heads the tracer leaves whole
        canon = canonicalize(model, x[:2])
        sym = symmetry_spec(canon, x[:2])
    assert _rel(_out(canon, x), y) < TOL
    (stream,) = [g for g, k in sym.kinds.items() if k == "orthogonal"]
    assert sym.group_sizes[stream] == WIDTH
    assert not any("norm" in k for k in canon.state_dict())  # every gain folded
    for kind in ("orthogonal", "invertible"):
        moved = _loaded(canon, random_alignment(sym, 7, kind).apply(sym, canon.state_dict()))
        assert _rel(_out(moved, x), y) < TOL, kind
    known = Alignment(
        {**random_alignment(sym, 11, "permutation"), stream: Orthogonal.random(WIDTH, 12)}
    )
    moved = _loaded(canon, known.apply(sym, canon.state_dict()))
    assert _rel(_out(moved, x), y) < TOL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = align("orthogonal", canon, moved, inputs=x)
    for k, v in canon.state_dict().items():
        if v.is_floating_point():
            err = float((result.state_dict[k] - v).abs().max())
            assert err <= TOL * max(1.0, float(v.abs().max())), k


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_with_one_error_naming_the_module_and_permutations_still_work(name):
    build, message = REFUSED[name]
    model, x = _perturbed(build()), _input(name)
    other = _perturbed(copy.deepcopy(model), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(LmcError, match=message):
            canonicalize(model, x[:2])
        with pytest.raises(LmcError, match=message):
            align("orthogonal", model, other, inputs=x)
        spec = spec_from_model(model, x[:2])
    assert spec.group_sizes  # the permutations lmc finds
    state = model.state_dict()
    moved = apply_permutation(spec, random_permutation(spec, 3), state)
    assert _rel(_out(_loaded(model, moved), x), _out(model, x)) < TOL
    back = apply_permutation(spec, weight_matching(spec, state, moved, seed=0).perm, moved)
    for k, v in state.items():
        assert torch.equal(back[k], v), k
