"""Hugging Face GPT-2, BERT and ViT (small configs, random init, no hub access) get derived
permutation specs through ``torch.export`` (``torch.fx`` cannot trace them): exactly the groups
of their symmetry (the residual stream, each block's MLP hidden units, its heads and the dims
within heads: q/k and v/o; BERT's pooler units), the function kept under a random permutation
of every group, and a known permutation (heads shuffled) recovered exactly by weight matching.
Also: the ``tracer`` option, the fallback to ``torch.export`` for a plain model fx cannot
trace, and an op not understood in an exported graph left unpermuted with a warning."""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from lmc.config import LmcError
from lmc.perm import (
    PermutationSpec,
    activation_matching,
    apply_permutation,
    invert_permutation,
    moved_fraction,
    random_permutation,
    spec_from_model,
    weight_matching,
)
from lmc.perm.heads import split_heads

transformers = pytest.importorskip("transformers")

WIDTH, DEPTH, HEADS, HIDDEN = 32, 2, 4, 64


def _gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=DEPTH,
        n_embd=WIDTH,
        n_head=HEADS,
        n_inner=HIDDEN,
        vocab_size=40,
        n_positions=16,
        attn_pdrop=0.0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def _bert() -> nn.Module:
    config = transformers.BertConfig(
        num_hidden_layers=DEPTH,
        hidden_size=WIDTH,
        num_attention_heads=HEADS,
        intermediate_size=HIDDEN,
        vocab_size=40,
        max_position_embeddings=16,
        type_vocab_size=2,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertForSequenceClassification(config)


def _vit() -> nn.Module:
    config = transformers.ViTConfig(
        num_hidden_layers=DEPTH,
        hidden_size=WIDTH,
        num_attention_heads=HEADS,
        intermediate_size=HIDDEN,
        image_size=8,
        patch_size=4,
        num_channels=1,
        num_labels=5,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.ViTForImageClassification(config)


BUILDERS = {"gpt2": _gpt2, "bert": _bert, "vit": _vit}


def _inputs(name: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    if name == "vit":
        return torch.randn(16, 1, 8, 8, generator=gen)
    return torch.randint(0, 40, (16, 10), generator=gen)


def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x).logits


@dataclass
class Case:
    name: str
    model: nn.Module
    x: torch.Tensor
    spec: PermutationSpec
    perm: dict[str, torch.Tensor]
    state_a: dict[str, torch.Tensor]
    state_b: dict[str, torch.Tensor]


def _case(name: str) -> Case:
    torch.manual_seed(0)
    model = BUILDERS[name]().eval()
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():  # LayerNorms start at (1, 0): make every tensor's order matter
        for param in model.parameters():  # a tied weight is listed once
            param.add_(0.2 * torch.randn(param.shape, generator=gen))
    x = _inputs(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # everything in these models is understood
        spec = spec_from_model(model, x[:2])
    seed = 7  # the first seed from here whose permutation moves every group
    while not all(f > 0 for f in moved_fraction(random_permutation(spec, seed)).values()):
        seed += 1
    perm = random_permutation(spec, seed)
    state_a = {k: v.clone() for k, v in model.state_dict().items()}
    return Case(name, model, x, spec, perm, state_a, apply_permutation(spec, perm, state_a))


@pytest.fixture(scope="module", params=list(BUILDERS))
def case(request) -> Case:
    return _case(request.param)


def _groups(spec: PermutationSpec, name: str, axis: int) -> list[str | None]:
    entry = spec[name][axis]
    return [] if entry is None else [s.perm for s in entry]


def _layout(name: str) -> dict:
    """Per model: residual (tensor, axis) pairs and, per block, the names of its q, k, v, output
    projection, MLP in/out layers (``conv1d``: weights stored ``(in, out)``)."""
    if name == "gpt2":
        resid = [("transformer.wte.weight", 1), ("transformer.wpe.weight", 1)]
        resid += [("lm_head.weight", 1), ("transformer.ln_f.weight", 0)]
        resid += [("transformer.ln_f.bias", 0)]
        blocks = []
        for b in range(DEPTH):
            p = f"transformer.h.{b}"
            resid += [(f"{p}.{n}", 0) for n in ("ln_1.weight", "ln_1.bias", "ln_2.weight")]
            resid += [(f"{p}.attn.c_attn.weight", 0), (f"{p}.attn.c_proj.weight", 1)]
            resid += [(f"{p}.attn.c_proj.bias", 0), (f"{p}.mlp.c_fc.weight", 0)]
            resid += [(f"{p}.mlp.c_proj.weight", 1), (f"{p}.mlp.c_proj.bias", 0)]
            blocks.append(
                dict(
                    fused=f"{p}.attn.c_attn",
                    out=f"{p}.attn.c_proj",
                    fc1=f"{p}.mlp.c_fc",
                    fc2=f"{p}.mlp.c_proj",
                )
            )
        return dict(resid=resid, blocks=blocks, conv1d=True)
    if name == "bert":
        e = "bert.embeddings"
        resid = [(f"{e}.{n}_embeddings.weight", 1) for n in ("word", "position", "token_type")]
        resid += [(f"{e}.LayerNorm.weight", 0), (f"{e}.LayerNorm.bias", 0)]
        resid += [("bert.pooler.dense.weight", 1)]
        blocks = []
        for b in range(DEPTH):
            p = f"bert.encoder.layer.{b}"
            a = f"{p}.attention"
            resid += [(f"{a}.self.{n}.weight", 1) for n in ("query", "key", "value")]
            resid += [(f"{a}.output.dense.weight", 0), (f"{a}.output.dense.bias", 0)]
            resid += [(f"{a}.output.LayerNorm.weight", 0), (f"{p}.output.LayerNorm.bias", 0)]
            resid += [(f"{p}.intermediate.dense.weight", 1), (f"{p}.output.dense.weight", 0)]
            blocks.append(
                dict(
                    q=f"{a}.self.query",
                    k=f"{a}.self.key",
                    v=f"{a}.self.value",
                    out=f"{a}.output.dense",
                    fc1=f"{p}.intermediate.dense",
                    fc2=f"{p}.output.dense",
                )
            )
        return dict(resid=resid, blocks=blocks, conv1d=False)
    v = "vit.embeddings"
    resid = [(f"{v}.cls_token", 2), (f"{v}.position_embeddings", 2)]
    resid += [(f"{v}.patch_embeddings.projection.weight", 0)]
    resid += [(f"{v}.patch_embeddings.projection.bias", 0), ("classifier.weight", 1)]
    resid += [("vit.layernorm.weight", 0), ("vit.layernorm.bias", 0)]
    blocks = []
    for b in range(DEPTH):
        p = f"vit.layers.{b}"
        resid += [(f"{p}.attention.{n}_proj.weight", 1) for n in "qkv"]
        resid += [(f"{p}.attention.o_proj.weight", 0), (f"{p}.attention.o_proj.bias", 0)]
        resid += [(f"{p}.layernorm_before.weight", 0), (f"{p}.layernorm_after.bias", 0)]
        resid += [(f"{p}.mlp.fc1.weight", 1), (f"{p}.mlp.fc2.weight", 0)]
        blocks.append(
            dict(
                q=f"{p}.attention.q_proj",
                k=f"{p}.attention.k_proj",
                v=f"{p}.attention.v_proj",
                out=f"{p}.attention.o_proj",
                fc1=f"{p}.mlp.fc1",
                fc2=f"{p}.mlp.fc2",
            )
        )
    return dict(resid=resid, blocks=blocks, conv1d=False)


def test_spec_has_exactly_the_residual_mlp_head_and_within_head_groups(case):
    spec, lay = case.spec, _layout(case.name)
    (resid,) = _groups(spec, *lay["resid"][0])
    for name, axis in lay["resid"]:
        assert _groups(spec, name, axis) == [resid], (name, axis)
    out_axis, in_axis = (1, 0) if lay["conv1d"] else (0, 1)  # Conv1D: weight (in, out)
    expected = {resid}
    for block in lay["blocks"]:
        if "fused" in block:  # GPT-2: one c_attn producing q, k, v side by side
            qk, qk2, vo = _groups(spec, f"{block['fused']}.weight", out_axis)
            assert qk == qk2 != vo
            assert _groups(spec, f"{block['fused']}.bias", 0) == [qk, qk, vo]
        else:
            (qk,) = _groups(spec, f"{block['q']}.weight", out_axis)
            (vo,) = _groups(spec, f"{block['v']}.weight", out_axis)
            assert _groups(spec, f"{block['k']}.weight", out_axis) == [qk] != [vo]
            for n in "qkv":
                assert _groups(spec, f"{block[n]}.bias", 0) == _groups(
                    spec, f"{block[n]}.weight", out_axis
                )
        assert _groups(spec, f"{block['out']}.weight", in_axis) == [vo]
        (hidden,) = _groups(spec, f"{block['fc1']}.weight", out_axis)
        assert _groups(spec, f"{block['fc1']}.bias", 0) == [hidden]
        assert _groups(spec, f"{block['fc2']}.weight", in_axis) == [hidden]
        assert spec.group_sizes[hidden] == HIDDEN
        head, n_heads = spec.heads[qk]
        assert spec.heads[vo] == (head, HEADS) and n_heads == HEADS
        assert spec.group_sizes[qk] == spec.group_sizes[vo] == WIDTH
        assert spec.group_sizes[head] == HEADS
        expected |= {qk, vo, hidden, head}
    if case.name == "bert":  # the pooler's units feed the classifier only
        (pooler,) = _groups(spec, "bert.pooler.dense.weight", 0)
        assert _groups(spec, "classifier.weight", 1) == [pooler]
        expected.add(pooler)
    assert set(spec.group_sizes) == expected
    assert len(expected) == 1 + 4 * DEPTH + (case.name == "bert")
    unpermuted = set(case.state_a) - set(spec.permuted_names)
    floating = {k for k, v in case.state_a.items() if v.is_floating_point()}
    assert unpermuted & floating == (set() if case.name == "gpt2" else {"classifier.bias"})


def test_every_group_moves_heads_whole_and_every_permuted_tensor_changes(case):
    moved = moved_fraction(case.perm)
    assert all(f > 0 for f in moved.values()), moved
    assert len(case.spec.heads) == 2 * DEPTH
    for nested, (head, n) in case.spec.heads.items():
        split = split_heads(case.perm[nested], n)
        assert split is not None and torch.equal(split[0], case.perm[head])
        assert not torch.equal(split[0], torch.arange(n))  # heads shuffled
    for name in case.spec.permuted_names:
        assert not torch.equal(case.state_b[name], case.state_a[name]), name


def test_the_permuted_model_computes_the_same_function(case):
    model_b = copy.deepcopy(case.model)
    model_b.load_state_dict(case.state_b)
    ya, yb = _logits(case.model, case.x), _logits(model_b, case.x)
    assert float((ya - yb).norm() / ya.norm()) < 1e-5
    # control: one tensor left in A's order breaks the function
    broken = dict(case.state_b)
    out = _layout(case.name)["blocks"][1]["out"]
    broken[f"{out}.weight"] = case.state_a[f"{out}.weight"]
    model_b.load_state_dict(broken)
    assert float((ya - _logits(model_b, case.x)).norm() / ya.norm()) > 1e-3


def test_weight_matching_recovers_the_permutation_exactly(case):
    """Cold start (identity), two visiting orders; the aligned-back weights equal A's."""
    inverse = invert_permutation(case.perm)
    for seed in (0, 1):
        result = weight_matching(case.spec, case.state_a, case.state_b, seed=seed)
        assert set(result.perm) == set(inverse)
        for group, p in result.perm.items():
            assert torch.equal(p, inverse[group]), (seed, group)
        back = apply_permutation(case.spec, result.perm, case.state_b)
        for name, value in case.state_a.items():
            assert torch.equal(back[name], value), name


def test_activation_matching_recovers_the_permutation_exactly(case):
    """Through the same torch.export graph the spec came from; 16 examples in batches of 10,
    so the shorter last batch runs through an export of its own shape."""
    model_b = copy.deepcopy(case.model)
    model_b.load_state_dict(case.state_b)
    result = activation_matching(case.spec, case.model, model_b, case.x, batch_size=10)
    assert result.examples == len(case.x)
    inverse = invert_permutation(case.perm)
    assert set(result.perm) == set(inverse)
    for group, p in result.perm.items():
        assert torch.equal(p, inverse[group]), group
    head_groups = {head for head, _ in case.spec.heads.values()}  # read through their dims
    assert all(result.points[g] for g in case.spec.group_sizes if g not in head_groups)


def test_tied_lm_head_stays_tied_and_flags_are_restored():
    model = _gpt2().train()
    model.config.use_cache = True
    x = _inputs("gpt2")[:2]
    spec = spec_from_model(model, x)
    assert model.training and model.config.use_cache is True  # both restored after export
    assert spec["lm_head.weight"] == spec["transformer.wte.weight"]
    state_b = apply_permutation(spec, random_permutation(spec, 0), model.state_dict())
    assert torch.equal(state_b["lm_head.weight"], state_b["transformer.wte.weight"])


def test_tracer_option():
    model, x = _vit().eval(), _inputs("vit")[:2]
    with pytest.raises(LmcError, match="torch.fx could not trace ViTForImageClassification"):
        spec_from_model(model, x, tracer="fx")
    with pytest.raises(LmcError, match="tracer must be one of"):
        spec_from_model(model, x, tracer="jit")
    assert spec_from_model(model, x, tracer="export") == spec_from_model(model, x)
    with pytest.raises(LmcError, match="torch.export could not trace"):
        spec_from_model(model, torch.zeros(2, 3, 5, 5))  # wrong channels and size


class ShapeBranch(nn.Module):
    """An MLP whose forward branches on the input's shape, which torch.fx cannot trace
    (``bool`` of a proxy); ``torch.export`` resolves the branch. ``roll`` optionally spoils the
    second hidden layer's unit order (an op not understood)."""

    def __init__(self, roll: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 8)
        self.fc3 = nn.Linear(8, 3)
        self.roll = roll

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] > 4:
            x = x * 2.0
        h = torch.relu(self.fc2(torch.relu(self.fc1(x))))
        if self.roll:
            h = torch.roll(h, 1, dims=-1)
        return self.fc3(h)


def test_a_plain_model_fx_cannot_trace_falls_back_to_export():
    torch.manual_seed(0)
    model, x = ShapeBranch(), torch.randn(5, 6)
    with pytest.raises(LmcError, match="torch.fx could not trace"):
        spec_from_model(model, x[:2], tracer="fx")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = spec_from_model(model, x[:2])
    shapes = model.state_dict()
    by_hand = PermutationSpec.from_dict(
        {
            "fc1.weight": ("fc1", None),
            "fc1.bias": ("fc1",),
            "fc2.weight": ("fc2", "fc1"),
            "fc2.bias": ("fc2",),
            "fc3.weight": (None, "fc2"),
            "fc3.bias": (None,),
        },
        shapes,
    )
    assert spec == by_hand


def test_an_op_not_understood_in_an_exported_graph_is_left_unpermuted_with_a_warning():
    torch.manual_seed(0)
    model, x = ShapeBranch(roll=True).eval(), torch.randn(5, 6)
    with pytest.warns(Warning, match=r"node 'roll'.*left unpermuted"):
        spec = spec_from_model(model, x[:2])
    assert set(spec.group_sizes) == {"fc1"}
    assert spec["fc2.weight"] == (None, spec["fc1.weight"][0])
    model_b = copy.deepcopy(model)
    model_b.load_state_dict(
        apply_permutation(spec, random_permutation(spec, 1), model.state_dict())
    )
    with torch.no_grad():
        assert torch.allclose(model(x), model_b(x), atol=1e-6)


def test_align_finds_the_permutation_of_a_wrapped_hugging_face_model():
    """The path of ``lmc align --hf-model``: models wrapped in ``HFLogits`` (state under
    ``hf.``), the spec derived inside :func:`lmc.perm.align`."""
    from lmc.models.factory import HFLogits
    from lmc.perm import align

    case = _case("gpt2")
    model_b = copy.deepcopy(case.model)
    model_b.load_state_dict(case.state_b)
    result = align("weight", HFLogits(case.model).eval(), HFLogits(model_b).eval(), inputs=case.x)
    inverse = invert_permutation(case.perm)
    assert set(result.perm) == {f"hf.{g}" for g in inverse}
    for group, p in inverse.items():
        assert torch.equal(result.perm[f"hf.{group}"], p), group
    for name, value in case.state_a.items():
        assert torch.equal(result.state_dict[f"hf.{name}"], value), name
