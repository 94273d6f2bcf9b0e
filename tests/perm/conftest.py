"""Models defined only for the permutation tests, handed out by the ``extra_models`` and
``attention_models`` fixtures, and ``canonical_gpt_pair``: two tiny GPTs in canonical form."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lmc.data.text import build_text_dataset
from lmc.models import build
from lmc.perm.canonical import canonicalize
from lmc.perm.symmetry import symmetry_spec


class ResidualCNN(nn.Module):
    """A user-style residual CNN: conv-bn-relu stem, two residual blocks (identity and
    projection shortcut), a per-channel parameter used through ``get_attr``, a channel
    ``cat`` with a side branch, functional ops, and a Linear after flattening (C, 4, 4)."""

    def __init__(self, in_channels: int = 1, bias: bool = True) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 8, 3, padding=1, bias=bias)
        self.stem_bn = nn.BatchNorm2d(8)
        self.b1c1 = nn.Conv2d(8, 8, 3, padding=1, bias=bias)
        self.b1n1 = nn.BatchNorm2d(8)
        self.b1c2 = nn.Conv2d(8, 8, 3, padding=1, bias=bias)
        self.b1n2 = nn.GroupNorm(1, 8)
        self.b2c1 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=bias)
        self.b2n1 = nn.BatchNorm2d(16)
        self.b2c2 = nn.Conv2d(16, 16, 3, padding=1, bias=bias)
        self.proj = nn.Conv2d(8, 16, 1, stride=2, bias=bias)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 16).reshape(1, 16, 1, 1))
        self.branch = nn.Conv2d(16, 4, 1, bias=bias)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(20 * 4 * 4, 10, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem_bn(self.stem(x)))
        h = F.gelu(self.b1n1(self.b1c1(x)))
        x = torch.relu(x + self.b1n2(self.b1c2(h)))
        h = self.b2n1(self.b2c1(x)).relu()
        x = F.leaky_relu(self.b2c2(h) + self.proj(x)) * self.scale
        y = torch.cat([x, torch.sigmoid(self.branch(x))], dim=1)
        y = F.avg_pool2d(y, 1)
        return self.head(self.drop(torch.flatten(y, 1)))


class WithUnknownModule(nn.Module):
    """An MLP-like model with a module the tracer does not know (ChannelShuffle) in the middle
    and a function that breaks channel order (``torch.roll``)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.shuffle = nn.ChannelShuffle(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv4 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.conv1(x))
        x = torch.tanh(self.conv2(self.shuffle(x)))  # conv1's and conv2's input must stay fixed
        x = torch.tanh(self.conv3(x))  # conv2 -> conv3 is an ordinary group
        x = torch.roll(torch.tanh(self.conv4(x)), 1, dims=1)  # conv4's output must stay fixed
        return self.fc(x.mean(dim=(2, 3)))


class TwoOutputs(nn.Module):
    """Returns the logits and a hidden feature: the hidden group reaches the output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 12)
        self.fc2 = nn.Linear(12, 12)
        self.out = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.fc1(x))
        z = torch.relu(self.fc2(h))
        return self.out(z), h


class GroupedNorm(nn.Module):
    """GroupNorm with 2 groups of 4 channels: permutations would mix groups."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.gn(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


# ---- attention models (for tests/perm/test_attention_spec.py and test_head_matching.py) -------
def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class HandAttention(nn.Module):
    """Attention written by hand. ``qkv``: ``separate`` (q, k, v Linear), ``split`` (one fused
    Linear cut with ``split``, GPT-2 style), ``chunk`` (``chunk(3, -1)``) or ``view`` (the fused
    output viewed as ``(B, T, 3, H, d)`` and indexed); ``kind``: ``sdpa`` or ``softmax`` (explicit
    ``softmax(q kᵀ / √d) v`` with a causal mask buffer); ``rope``: rotary embedding on q, k."""

    def __init__(
        self, dim: int, heads: int, qkv: str = "separate", kind: str = "sdpa", rope: bool = False
    ) -> None:
        super().__init__()
        self.dim, self.heads, self.d = dim, heads, dim // heads
        self.qkv_mode, self.kind, self.rope = qkv, kind, rope
        if qkv == "separate":
            self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))
        else:
            self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        pos = torch.arange(16.0)[:, None] * torch.linspace(0.1, 1.0, self.d // 2)[None, :]
        angles = torch.cat([pos, pos], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.d).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        if self.qkv_mode == "separate":
            q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        elif self.qkv_mode in ("split", "chunk"):
            fused = self.qkv(x)
            parts = fused.split(self.dim, dim=2) if self.qkv_mode == "split" else fused.chunk(3, -1)
            q, k, v = self._heads(parts[0]), self._heads(parts[1]), self._heads(parts[2])
        elif self.qkv_mode == "timm":  # timm's ViT: stack dim first, then unbind
            qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.d).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
        else:
            qkv = self.qkv(x).view(b, n, 3, self.heads, self.d)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        if self.rope:
            positions = torch.arange(n)
            cos, sin = self.cos[positions], self.sin[positions]
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        if self.kind == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / self.d**0.5)
            causal = torch.ones((n, n), dtype=torch.bool).tril()
            att = att.masked_fill(~causal, float("-inf"))
            y = torch.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, n, self.dim))


class MHAAttention(nn.Module):
    """``nn.MultiheadAttention`` as a block's attention; ``separate``: key and value come from a
    side stream of another width (``kdim = vdim != dim``: separate q/k/v weights)."""

    def __init__(
        self, dim: int, heads: int, batch_first: bool, bias: bool, separate: bool = False
    ) -> None:
        super().__init__()
        self.batch_first, self.separate = batch_first, separate
        kdim = dim + 2 if separate else None
        self.mha = nn.MultiheadAttention(
            dim, heads, bias=bias, batch_first=batch_first, kdim=kdim, vdim=kdim
        )
        if separate:
            self.side = nn.Linear(dim, dim + 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kv = torch.tanh(self.side(x)) if self.separate else x
        if not self.batch_first:
            x, kv = x.transpose(0, 1), kv.transpose(0, 1)
        y, _ = self.mha(x, kv, kv, need_weights=False)
        return y if self.batch_first else y.transpose(0, 1)


class TinyTransformer(nn.Module):
    """A pre-norm transformer on ``(B, T, in_dim)`` inputs: Linear embedding, positional
    embedding (sliced to ``T``), class token, ``depth`` blocks of ``attn`` + MLP, final
    LayerNorm and a head on the class token. ``attn(dim, heads)`` builds each attention."""

    def __init__(self, attn, in_dim: int = 5, dim: int = 16, heads: int = 4, depth: int = 2):
        super().__init__()
        self.embed = nn.Linear(in_dim, dim)
        self.pos = nn.Parameter(torch.randn(1, 17, dim) * 0.1)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.1)
        self.blocks = nn.ModuleList()
        for _ in range(depth):
            block = nn.Module()
            block.ln1, block.attn, block.ln2 = (
                nn.LayerNorm(dim),
                attn(dim, heads),
                nn.LayerNorm(dim),
            )
            block.fc1, block.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
            self.blocks.append(block)
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1)
        h = h + self.pos[:, : h.shape[1]]
        for block in self.blocks:
            h = h + block.attn(block.ln1(h))
            h = h + block.fc2(F.gelu(block.fc1(block.ln2(h))))
        return self.head(self.ln(h)[:, 0])


@pytest.fixture(scope="session")
def attention_models() -> SimpleNamespace:
    return SimpleNamespace(
        HandAttention=HandAttention, MHAAttention=MHAAttention, TinyTransformer=TinyTransformer
    )


@pytest.fixture(scope="session")
def extra_models() -> SimpleNamespace:
    return SimpleNamespace(
        ResidualCNN=ResidualCNN,
        WithUnknownModule=WithUnknownModule,
        TwoOutputs=TwoOutputs,
        GroupedNorm=GroupedNorm,
    )


@pytest.fixture(scope="module")
def canonical_gpt_pair():
    """``(a, b, spec, data)``: two GPTs (width 8, depth 1, 2 heads, context 6) from seeds 0 and
    1 in canonical form and eval mode, A's symmetry spec, and the text dataset they read (a
    pangram repeated 60 times)."""
    data = build_text_dataset("t", "the quick brown fox jumps over the lazy dog. " * 60, context=6)

    def gpt(seed):
        model = build("gpt", seed=seed, vocab=data.vocab_size, context=6, width=8, depth=1, heads=2)
        return canonicalize(model.eval())

    a, b = gpt(0), gpt(1)
    return a, b, symmetry_spec(a, data.x_train[:2]), data
