"""Each handler of the tracer, reached by a tiny hand-built model.

For every model: a random permutation from the derived spec leaves the outputs unchanged
(eval and train mode), and the spec permutes what the handler should (groups shared across
the op) or leaves unpermuted, with a warning, what it cannot understand.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lmc.config import LmcError
from lmc.perm import (
    PermutationSpec,
    Segment,
    apply_permutation,
    random_permutation,
    spec_from_model,
    trace_model,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed))


def derive(model: nn.Module, x: torch.Tensor, warns: str | None = None) -> PermutationSpec:
    """The derived spec; no warning unless ``warns`` (a regex one of them must match)."""
    if warns is None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return spec_from_model(model, x[:2])
    with pytest.warns(UserWarning, match=warns):
        return spec_from_model(model, x[:2])


def assert_preserved(model: nn.Module, spec: PermutationSpec, x: torch.Tensor, seed: int = 0):
    """A random permutation of ``spec`` leaves ``model``'s outputs equal (float64, 1e-5)."""
    a = copy.deepcopy(model).double()
    x = x.double() if x.is_floating_point() else x
    state = a.state_dict()
    permuted = apply_permutation(spec, random_permutation(spec, seed), state)
    b = copy.deepcopy(a)
    b.load_state_dict(permuted)
    for train in (False, True):
        a.train(train)
        b.train(train)
        with torch.no_grad():
            ya, yb = a(x), b(x)
        assert float((ya - yb).norm() / ya.norm().clamp_min(1e-30)) < 1e-5, f"train={train}"
    if spec.group_sizes:
        assert any(not torch.equal(state[k], permuted[k]) for k in state), "nothing moved"


def perm(spec: PermutationSpec, name: str, axis: int) -> str | None:
    """The permutation of a one-segment axis entry (``None``: unpermuted)."""
    entry = spec[name][axis]
    if entry is None:
        return None
    assert len(entry) == 1, entry
    return entry[0].perm


# ---- weight layers ---------------------------------------------------------------------------
class EmbeddingNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc = nn.Linear(8, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.fc(self.emb(ids)))).mean(1)


def test_embedding_features_and_next_linear_share_a_group():
    model, ids = EmbeddingNet(), torch.randint(0, 10, (4, 5), generator=_gen(0))
    spec = derive(model, ids)
    assert perm(spec, "emb.weight", 0) is None  # the vocabulary is never permuted
    assert perm(spec, "emb.weight", 1) == perm(spec, "fc.weight", 1) == "emb"
    assert perm(spec, "fc.weight", 0) == perm(spec, "out.weight", 1) == "fc"
    assert_preserved(model, spec, ids)


class TiedHead(nn.Module):
    """A language-model head tied to the embedding: ``F.linear(h, self.emb.weight)``."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc = nn.Linear(8, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.linear(torch.tanh(self.fc(self.emb(ids))), self.emb.weight)


def test_tied_embedding_and_functional_linear_unite_the_feature_groups():
    model, ids = TiedHead(), torch.randint(0, 10, (4, 5), generator=_gen(1))
    spec = derive(model, ids)
    # fc reads and writes the embedding's features: one permutation on both of its axes
    assert perm(spec, "emb.weight", 1) == perm(spec, "fc.weight", 1) == perm(spec, "fc.weight", 0)
    assert perm(spec, "emb.weight", 0) is None  # the logits (vocabulary) reach the output
    assert_preserved(model, spec, ids)


class FunctionalMLP(nn.Module):
    """``F.linear`` / ``F.layer_norm`` with parameters read through ``get_attr``."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Parameter(_randn(8, 4, seed=1))
        self.b1 = nn.Parameter(_randn(8, seed=2))
        self.ln_w = nn.Parameter(1 + _randn(8, seed=3) * 0.1)
        self.ln_b = nn.Parameter(_randn(8, seed=4) * 0.1)
        self.w2 = nn.Parameter(_randn(3, 8, seed=5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.layer_norm(F.linear(x, self.w1, self.b1), (8,), self.ln_w, self.ln_b)
        return F.linear(torch.relu(h), self.w2)


def test_functional_linear_and_layer_norm_bind_their_parameters():
    model, x = FunctionalMLP(), _randn(6, 4)
    spec = derive(model, x)
    group = perm(spec, "w1", 0)
    assert group == "w1"
    assert perm(spec, "b1", 0) == perm(spec, "ln_w", 0) == perm(spec, "ln_b", 0) == group
    assert perm(spec, "w2", 1) == group and perm(spec, "w2", 0) is None
    assert_preserved(model, spec, x)


class ComputedWeight(nn.Module):
    """A functional layer whose weight is computed from a parameter, not read from it."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.w = nn.Parameter(_randn(8, 8, 1, 1) * 0.3)
        self.g = nn.Parameter(1 + _randn(8) * 0.1)
        self.g4 = nn.Parameter(1 + _randn(4) * 0.1)
        self.conv2 = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv1(x))  # (N, 8, 4, 4)
        if self.op == "linear":
            h = F.linear(h.transpose(1, 3), self.w.flatten(1)).transpose(1, 3)
        elif self.op == "conv":
            h = F.conv2d(h, self.w - self.w.mean())  # weight standardisation
        elif self.op == "batch_norm":
            h = F.batch_norm(h, None, None, self.g * 2.0, training=True)
        elif self.op == "layer_norm":
            h = F.layer_norm(h, (4,), self.g4 * 2.0)
        return self.fc(torch.relu(self.conv2(h)).mean(dim=(2, 3)))


@pytest.mark.parametrize(
    "op,message",
    [
        ("linear", "uses a computed weight"),
        ("conv", "uses a computed weight"),
        ("batch_norm", "normalises with computed statistics"),
        ("layer_norm", "normalises with a computed affine"),
    ],
)
def test_functional_layer_with_a_computed_weight_is_left_unpermuted(op, message):
    model, x = ComputedWeight(op), _randn(4, 1, 4, 4)
    spec = derive(model, x, warns=message)
    assert perm(spec, "conv1.weight", 0) is None
    assert spec["w"] == (None,) * 4 and spec["g"] == (None,) and spec["g4"] == (None,)
    assert perm(spec, "conv2.weight", 0) == perm(spec, "fc.weight", 1) == "conv2"
    assert_preserved(model, spec, x)


class MatmulNet(nn.Module):
    """``h @ W`` with ``W`` a parameter: a dense layer whose input axis is dim 0."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.w = nn.Parameter(_randn(8, 6) * 0.3)
        self.out = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(x)).type_as(x)
        return self.out(torch.relu(h @ self.w).to(x.dtype))


def test_matmul_with_a_parameter_reads_and_writes_groups():
    model, x = MatmulNet(), _randn(5, 4)
    spec = derive(model, x)
    assert perm(spec, "w", 0) == perm(spec, "fc.weight", 0) == "fc"
    assert perm(spec, "w", 1) == perm(spec, "out.weight", 1) == "w"
    assert_preserved(model, spec, x)


class Attention(nn.Module):
    """Single-head attention: ``q @ kᵀ`` and ``attn @ v`` multiply two computed tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        scores = self.q(h) @ self.k(h).transpose(-2, -1)
        return self.out(torch.softmax(scores, dim=-1) @ self.v(h))


def test_product_of_two_computed_tensors_is_solved_like_attention():
    """q @ kᵀ shares q's and k's output units; (scores) @ v keeps v's units (single head)."""
    model, x = Attention(), _randn(3, 5, 4)
    spec = derive(model, x)
    assert perm(spec, "q.weight", 0) == perm(spec, "k.weight", 0) == "q"
    assert perm(spec, "v.weight", 0) == perm(spec, "out.weight", 1) == "v"
    for name in ("q", "k", "v"):
        assert perm(spec, f"{name}.weight", 1) == perm(spec, "inp.weight", 0) == "inp"
    assert spec.group_sizes == {"inp": 8, "q": 8, "v": 8}
    assert_preserved(model, spec, x)


class DepthwiseNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.bn = nn.BatchNorm2d(8)
        self.pw = nn.Conv2d(8, 6, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.bn(self.dw(torch.relu(self.conv(x))))
        return self.fc(self.pool(torch.relu(self.pw(torch.relu(h)))).flatten(1))


def test_depthwise_conv_carries_the_group_of_its_input():
    model, x = DepthwiseNet(), _randn(4, 1, 6, 6)
    spec = derive(model, x)
    group = perm(spec, "conv.weight", 0)
    assert perm(spec, "dw.weight", 0) == perm(spec, "dw.bias", 0) == group
    assert perm(spec, "dw.weight", 1) is None  # one input channel per filter
    assert perm(spec, "bn.running_var", 0) == perm(spec, "pw.weight", 1) == group
    assert spec.group_sizes == {"conv": 8, "pw": 6}
    assert_preserved(model, spec, x)


class GroupedConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def test_grouped_conv_is_left_unpermuted_with_a_warning():
    model, x = GroupedConv(), _randn(4, 1, 6, 6)
    spec = derive(model, x, warns=r"grouped convolution \(groups=2\)")
    assert perm(spec, "conv1.weight", 0) is None and spec["conv2.weight"][1] is None
    assert perm(spec, "conv2.weight", 0) is None and spec.group_sizes == {}
    assert_preserved(model, spec, x)


class FunctionalConvNet(nn.Module):
    """``F.conv2d`` and ``F.batch_norm`` with parameters and buffers of the model."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_randn(8, 1, 3, 3, seed=1) * 0.3)
        self.b = nn.Parameter(_randn(8, seed=2) * 0.1)
        self.g = nn.Parameter(1 + _randn(8, seed=3) * 0.1)
        self.beta = nn.Parameter(_randn(8, seed=4) * 0.1)
        self.register_buffer("mean", _randn(8, seed=5) * 0.1)
        self.register_buffer("var", 1 + torch.rand(8, generator=_gen(6)))
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.conv2d(x, self.w, self.b, padding=1)
        h = F.batch_norm(h, self.mean, self.var, self.g, self.beta, training=False)
        return self.fc(F.max_pool2d(torch.relu(h), 2).amax(dim=(2, 3)))


def test_functional_conv_and_batch_norm_bind_parameters_and_buffers():
    model, x = FunctionalConvNet(), _randn(4, 1, 6, 6)
    spec = derive(model, x)
    group = perm(spec, "w", 0)
    assert group == "w" and perm(spec, "w", 1) is None
    for name in ("b", "g", "beta", "mean", "var"):
        assert perm(spec, name, 0) == group, name
    assert perm(spec, "fc.weight", 1) == group
    assert_preserved(model, spec, x)


class ConvTransposeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.up(torch.relu(self.conv(x)))))


def test_conv_transpose_reads_axis_0_and_writes_axis_1():
    model, x = ConvTransposeNet(), _randn(3, 1, 4, 4)
    spec = derive(model, x)
    assert perm(spec, "up.weight", 0) == perm(spec, "conv.weight", 0) == "conv"
    assert perm(spec, "up.weight", 1) == perm(spec, "up.bias", 0) == "up"
    assert perm(spec, "head.weight", 1) == "up" and perm(spec, "head.weight", 0) is None
    assert_preserved(model, spec, x)


# ---- norms -----------------------------------------------------------------------------------
class NormsNet(nn.Module):
    """BatchNorm on the input, InstanceNorm, PReLU per channel and shared, LayerNorm over the
    spatial dims, GroupNorm(C, C), LayerNorm and RMSNorm over features."""

    def __init__(self) -> None:
        super().__init__()
        self.bn_in = nn.BatchNorm2d(1)
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.inorm = nn.InstanceNorm2d(8, affine=True)
        self.act1 = nn.PReLU(8)
        self.ln_hw = nn.LayerNorm([6, 6])
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.gn = nn.GroupNorm(8, 8)
        self.act2 = nn.PReLU()
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)
        self.rms = nn.RMSNorm(8)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln_hw(self.act1(self.inorm(self.conv1(self.bn_in(x)))))
        h = self.act2(self.gn(self.conv2(h)))
        h = self.ln(h.mean(dim=(2, 3)))
        return self.out(torch.relu(self.rms(self.fc(h))))


@pytest.mark.skipif(not hasattr(nn, "RMSNorm"), reason="nn.RMSNorm needs torch >= 2.4")
def test_norms_bind_per_channel_parameters():
    model, x = NormsNet(), _randn(4, 1, 6, 6)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm2d, nn.RMSNorm)):
                m.weight.add_(_randn(*m.weight.shape) * 0.2)
    spec = derive(model, x)
    assert all(e is None for n in ("bn_in.weight", "bn_in.running_mean") for e in spec[n])
    c1, c2, fc = (perm(spec, f"{n}.weight", 0) for n in ("conv1", "conv2", "fc"))
    assert perm(spec, "inorm.weight", 0) == perm(spec, "act1.weight", 0) == c1
    assert spec["ln_hw.weight"] == (None, None)  # normalises (H, W): the units are free
    assert perm(spec, "gn.weight", 0) == perm(spec, "ln.bias", 0) == c2
    assert spec["act2.weight"] == (None,)  # one slope for every channel
    assert perm(spec, "rms.weight", 0) == perm(spec, "out.weight", 1) == fc
    assert_preserved(model, spec, x)


# ---- elementwise, pooling --------------------------------------------------------------------
class SharedScale(nn.Module):
    """A parameter used per channel and, through ``self.scale[0]``, as one number."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 6))
        self.fc2 = nn.Linear(6, 6)
        self.fc3 = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x)) * self.scale
        return self.fc3(nn.functional.gelu(self.fc2(h)) * self.scale[0])


def test_a_state_tensor_indexed_into_is_fixed():
    model, x = SharedScale(), _randn(5, 4)
    spec = derive(model, x)
    assert spec["scale"] == (None,) and perm(spec, "fc1.weight", 0) is None
    assert perm(spec, "fc2.weight", 0) == perm(spec, "fc3.weight", 1) == "fc2"
    assert_preserved(model, spec, x)


class PoolWithIndices(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.pool(torch.relu(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))


def test_pooling_that_returns_indices_is_left_unpermuted():
    model, x = PoolWithIndices(), _randn(3, 1, 4, 4)
    spec = derive(model, x, warns="returns pooling indices")
    assert perm(spec, "conv.weight", 0) is None and perm(spec, "fc.weight", 1) is None
    assert_preserved(model, spec, x)


class KeywordCall(nn.Module):
    """A module called with its input as a keyword argument."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(input=self.act(input=self.fc1(x)))


def test_module_called_with_a_keyword_input():
    model, x = KeywordCall(), _randn(5, 4)
    spec = derive(model, x)
    assert perm(spec, "fc1.weight", 0) == perm(spec, "fc2.weight", 1) == "fc1"
    assert_preserved(model, spec, x)


# ---- shape ops -------------------------------------------------------------------------------
class ReshapeNet(nn.Module):
    """view / flatten / nn.Flatten / nn.Unflatten / reshape, with sizes read from the value."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.flat = nn.Flatten()
        self.unflat = nn.Unflatten(1, (4, 36))
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        h = self.unflat(self.flat(h)).unsqueeze(-1)  # (N, 4, 36, 1)
        h = h.view(h.size(0), 4, 6, 6).reshape(h.shape[0], -1)
        return self.fc(h.view(h.size(0), 1, -1).flatten(1))  # through (N, 1, 144)


def test_reshapes_keep_channels_whole_and_repeat_positions():
    model, x = ReshapeNet(), _randn(3, 1, 6, 6)
    spec = derive(model, x)
    assert spec["fc.weight"][1] == (Segment("conv", 4, 36),)
    assert_preserved(model, spec, x)


class TransposeNet(nn.Module):
    """Channels of a 1-D conv moved last by ``torch.transpose`` and ``permute``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 8, 3, padding=1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        h = torch.transpose(h, 1, 2) + torch.permute(h, (0, 2, 1)).swapaxes(0, 1).transpose(1, 0)
        return self.fc(h).mean(1)


def test_transpose_and_permute_move_the_unit_dim():
    model, x = TransposeNet(), _randn(3, 2, 5)
    spec = derive(model, x)
    assert perm(spec, "conv.weight", 0) == perm(spec, "fc.weight", 1) == "conv"
    assert_preserved(model, spec, x)


class ExpandNet(nn.Module):
    """Reductions over another dim (with and without keepdim) and expand / expand_as."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))  # (N, T, 8)
        pooled = h.mean(1, keepdim=True).expand_as(h)
        peak = h.amax(1).expand(h.size(1), -1, -1).transpose(0, 1)  # (T, N, 8) -> (N, T, 8)
        h = h + pooled * peak
        h = h / (h.abs().sum(-1, keepdim=True) + 1)  # over the units: order-free
        return self.fc2(h).mean(1) + h.mean()


def test_expand_and_reductions_carry_or_drop_the_group():
    model, x = ExpandNet(), _randn(3, 5, 4)
    spec = derive(model, x)
    assert perm(spec, "fc1.weight", 0) == perm(spec, "fc2.weight", 1) == "fc1"
    assert_preserved(model, spec, x)


class CatNet(nn.Module):
    """cat along another dim unites the pieces' groups; along the units, a fixed piece (the
    input) becomes a fixed block of the next layer's input axis."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(4, 8)
        self.fc = nn.Linear(8 + 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.concatenate([torch.relu(self.a(x)), torch.tanh(self.b(x))], axis=1)  # (N, 2T, 8)
        return self.fc(torch.cat([h, torch.cat([x, x], dim=1)], dim=-1)).mean(1)


def test_cat_along_units_and_along_another_dim():
    model, x = CatNet(), _randn(3, 5, 4)
    spec = derive(model, x)
    assert perm(spec, "a.weight", 0) == perm(spec, "b.weight", 0) == "a"
    assert spec["fc.weight"][1] == (Segment("a", 8, 1), Segment(None, 4, 1))
    assert_preserved(model, spec, x)


class GetitemNet(nn.Module):
    """Indexing that keeps the unit dim whole: an int on the token dim, ``...`` and ``None``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))  # (N, T, 8)
        first = h[:, 0]  # (N, 8)
        last = h[:, -1, :][..., None].squeeze(-1)
        return self.fc2(first * last + h[None, :, 1:, :].sum(dim=(0, 2)))


def test_getitem_keeping_units_whole_carries_the_group():
    model, x = GetitemNet(), _randn(3, 5, 4)
    spec = derive(model, x)
    assert perm(spec, "fc1.weight", 0) == perm(spec, "fc2.weight", 1) == "fc1"
    assert_preserved(model, spec, x)


# ---- ops not understood ----------------------------------------------------------------------
def channel_roll(x: torch.Tensor) -> torch.Tensor:
    """A user function kept whole in the graph (``torch.fx.wrap``): unknown to the tracer."""
    return torch.roll(x, 1, dims=-1)


torch.fx.wrap("channel_roll")


class NotUnderstood(nn.Module):
    """One op on ``fc1``'s units that no handler can prove safe; ``fc2 -> fc3`` is fine."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(4 if op in ("slice", "pool1d") else 8, 8)
        self.fc3 = nn.Linear(8, 3)
        self.register_buffer("index", torch.tensor([1, 0, 3, 2, 5, 4, 7, 6]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))  # (N, T, 8)
        if self.op == "slice":
            h = h[:, :, :4]
        elif self.op == "select":
            h = h[..., 0].unsqueeze(-1).expand(-1, -1, 8)
        elif self.op == "tensor_index":
            h = h[:, :, self.index]
        elif self.op == "mT":
            h = h.mT.mT
        elif self.op == "pool1d":
            h = F.avg_pool1d(h, 2)
        elif self.op == "split_units":
            h = h.reshape(h.shape[0], h.shape[1], 2, 4).transpose(2, 3).flatten(2)
        elif self.op == "fixed_tensor":
            h = h + torch.arange(8.0)
        elif self.op == "dynamic_permute":
            h = h.permute(0, 1, h.dim() - 1)
        elif self.op == "dynamic_transpose":
            h = h.transpose(1, h.dim() - 1).transpose(1, 2)
        elif self.op == "dynamic_reduce":
            h = h.sum(h.dim() - 2, keepdim=True).expand_as(h)
        elif self.op == "flatten_batch":
            h = h.flatten().view(x.shape[0], x.shape[1], 8)
        elif self.op == "wrapped_function":
            h = channel_roll(h)
        return self.fc3(torch.relu(self.fc2(h))).mean(1)


@pytest.mark.parametrize(
    "op,message",
    [
        ("slice", "slices the channel dimension"),
        ("select", "selects single channels"),
        ("tensor_index", "indexes with a tensor"),
        ("mT", r"getattr\) is not understood"),
        ("pool1d", "pools over the channel dimension"),
        ("split_units", "reshapes the channel dimension into pieces"),
        ("fixed_tensor", "combines permuted channels with a fixed tensor"),
        ("dynamic_permute", r"permute\) is not understood"),
        ("dynamic_transpose", r"transpose\) is not understood"),
        ("dynamic_reduce", r"sum\) is not understood"),
        ("flatten_batch", "reshapes the channel dimension into pieces"),
        ("wrapped_function", r"channel_roll\) is not understood"),
    ],
)
def test_op_not_understood_leaves_its_groups_unpermuted(op, message):
    model, x = NotUnderstood(op), _randn(3, 5, 4)
    spec = derive(model, x, warns=message)
    assert perm(spec, "fc1.weight", 0) is None and perm(spec, "fc1.bias", 0) is None
    assert perm(spec, "fc2.weight", 0) == perm(spec, "fc3.weight", 1) == "fc2"
    assert spec.group_sizes == {"fc2": 8}
    assert_preserved(model, spec, x)


def test_trace_records_where_layers_read_and_write():
    result = trace_model(MatmulNet(), _randn(2, 4))
    consumers = {(r.weight, r.axis, r.dim) for r in result.consumers}
    producers = {(r.weight, r.axis, r.dim) for r in result.producers}
    assert ("w", 0, 1) in consumers and ("w", 1, 1) in producers
    assert ("fc.weight", 1, 1) in consumers and ("out.weight", 0, 1) in producers
    assert result.warnings == []


class WithAttentionModule(nn.Module):
    """``nn.MultiheadAttention`` is a module without a handler: its parameters stay fixed."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
        self.fc2 = nn.Linear(8, 8)
        self.fc3 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        h, _ = self.mha(h, h, h, need_weights=False)
        return self.fc3(torch.relu(self.fc2(h))).mean(1)


def test_multihead_attention_module_gets_head_groups():
    """nn.MultiheadAttention is understood (perm.trace.attention): heads nest q/k and v/o."""
    model, x = WithAttentionModule(), _randn(3, 5, 4)
    spec = derive(model, x)
    assert {"mha.heads", "mha.qk", "mha.vo"} <= set(spec.group_sizes)
    assert_preserved(model, spec, x)


class OtherDim(nn.Module):
    """Layers applied along a dim that is not the one of the units (token mixing)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, padding=1)
        self.mix = nn.Linear(6, 6)  # mixes positions, applied to each channel
        self.fc = nn.Linear(4, 5)
        self.conv2 = nn.Conv1d(6, 3, 1)  # reads positions as channels
        self.out = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.mix(torch.relu(self.conv(x))))  # (N, 4, 6): mix's units on dim 2
        g = torch.relu(self.fc(h.transpose(1, 2)))  # (N, 6, 5): fc's units on dim 2
        return self.out(self.conv2(g)).mean(1)


def test_layers_along_another_dim_freeze_the_units_they_carry():
    model, x = OtherDim(), _randn(3, 2, 6)
    spec = derive(model, x)
    # a value has one unit dim: a layer reading another dim freezes the units it carries
    assert perm(spec, "conv.weight", 0) is None  # mix reads the positions of conv's output
    assert perm(spec, "mix.weight", 0) is None  # fc reads the channels of mix's output
    assert perm(spec, "fc.weight", 0) is None  # conv2 reads the positions of fc's output
    assert spec.group_sizes == {}
    assert_preserved(model, spec, x)


class TiledSum(nn.Module):
    """Sums of concatenations: tilings are united segment by segment."""

    def __init__(self, mismatched: bool) -> None:
        super().__init__()
        self.mismatched = mismatched
        self.a, self.b, self.c = nn.Linear(4, 8), nn.Linear(4, 8), nn.Linear(4, 4)
        self.d = nn.Linear(4, 12)
        self.fc = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = torch.cat([torch.relu(self.a(x)), x], dim=-1)  # a's 8 units, then 4 fixed
        if self.mismatched:
            return self.fc(u + torch.relu(self.d(x)))  # one group of 12: cannot match
        v = torch.cat([torch.relu(self.b(x)), torch.relu(self.c(x))], dim=-1)
        return self.fc(u + v) + self.fc(v * u)


def test_sum_of_concatenations_unites_segments_and_freezes_fixed_ones():
    model, x = TiledSum(mismatched=False), _randn(5, 4)
    spec = derive(model, x)
    assert perm(spec, "a.weight", 0) == perm(spec, "b.weight", 0) == "a"
    assert perm(spec, "c.weight", 0) is None  # added to the fixed block (the input)
    assert spec["fc.weight"][1] == (Segment("a", 8, 1), Segment(None, 4, 1))
    assert_preserved(model, spec, x)


def test_sum_of_differently_tiled_values_freezes_both():
    model, x = TiledSum(mismatched=True), _randn(5, 4)
    spec = derive(model, x)
    assert perm(spec, "a.weight", 0) is None and perm(spec, "d.weight", 0) is None
    assert spec.group_sizes == {}
    assert_preserved(model, spec, x)


class SharedLayer(nn.Module):
    """One Linear called on the input and on a hidden value: its input axis stays fixed."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.shared = nn.Linear(4, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.shared(x) + self.shared(torch.relu(self.pre(x)))
        return self.out(torch.relu(h))


def test_shared_layer_reuses_its_group_and_fixes_its_input_axis():
    model, x = SharedLayer(), _randn(5, 4)
    spec = derive(model, x)
    assert perm(spec, "pre.weight", 0) is None and perm(spec, "shared.weight", 1) is None
    assert perm(spec, "shared.weight", 0) == perm(spec, "out.weight", 1) == "shared"
    assert_preserved(model, spec, x)


class WeightNormed(nn.Module):
    """A Linear whose weight is a parametrization: no state tensor ``fc2.weight`` exists."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.utils.parametrizations.weight_norm(nn.Linear(8, 8))
        self.fc3 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def test_parametrized_weight_is_left_unpermuted():
    model, x = WeightNormed(), _randn(5, 4)
    spec = derive(model, x)
    assert perm(spec, "fc1.weight", 0) is None and perm(spec, "fc3.weight", 1) is None
    assert all(e is None for n in spec if n.startswith("fc2.") for e in spec[n])
    assert_preserved(model, spec, x)


def test_wrong_example_input_is_a_clear_error():
    with pytest.raises(LmcError, match="example input"):
        spec_from_model(MatmulNet(), torch.zeros(2, 5))
