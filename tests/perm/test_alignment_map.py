"""The alignment result object (lmc.perm.alignment_map.Alignment): one transform per group of any
kind. An alignment of permutations applies exactly as apply_permutation (bit for bit, also on
axes cut into segments and flattened channels); composition and inversion act on the weights
as they should whatever the kinds; save/load round-trips bit for bit and reads lmc align's plain
permutation files; an alignment that does not fit its spec is refused."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build
from lmc.perm import (
    apply_permutation,
    compose_permutations,
    invert_permutation,
    random_permutation,
    spec_from_model,
    weight_matching,
)
from lmc.perm.alignment_map import Alignment, random_alignment
from lmc.perm.canonical import canonicalize
from lmc.perm.symmetry import symmetry_spec
from lmc.perm.transforms import Invertible, Orthogonal, Permutation

WIDTH, HEADS = 16, 4


@pytest.fixture(scope="module")
def gpt():
    model = canonicalize(
        build("gpt", vocab=11, context=6, width=WIDTH, depth=1, heads=HEADS, tied=False).double()
    )
    x = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(0))
    return model, symmetry_spec(model, x)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_permutations_apply_exactly_as_apply_permutation(gpt, extra_models) -> None:
    model, spec = gpt
    state = model.state_dict()
    perm = random_permutation(spec.spec, 0)
    want = apply_permutation(spec.spec, perm, state)
    alignment = Alignment.from_permutation(perm)
    assert _equal(alignment.apply(spec.spec, state), want)  # a bare PermutationSpec suffices
    assert _equal(alignment.apply(spec, state), want)
    # a CNN with a channel concatenation and a Linear reading flattened (C, 4, 4) maps
    cnn = extra_models.ResidualCNN()
    cnn_spec = spec_from_model(cnn, torch.randn(2, 1, 8, 8))
    assert any(
        len(e) > 1 or e[0].repeat > 1 for es in cnn_spec.axes.values() for e in es if e is not None
    )
    cnn_perm = random_permutation(cnn_spec, 1)
    cnn_state = cnn.state_dict()
    assert _equal(
        Alignment.from_permutation(cnn_perm).apply(cnn_spec, cnn_state),
        apply_permutation(cnn_spec, cnn_perm, cnn_state),
    )


def test_weight_matching_result_migrates(gpt) -> None:
    model, spec = gpt
    state_a = model.state_dict()
    state_b = apply_permutation(spec.spec, random_permutation(spec.spec, 2), state_a)
    result = weight_matching(spec.spec, state_a, state_b, seed=0)
    alignment = Alignment.from_permutation(result.perm)
    assert _equal(alignment.to_permutation(), result.perm)
    assert _equal(
        alignment.apply(spec.spec, state_b), apply_permutation(spec.spec, result.perm, state_b)
    )
    with pytest.raises(LmcError, match="pass its .perm"):
        Alignment.from_permutation(result)


def test_composition_and_inverse_act_on_weights(gpt) -> None:
    model, spec = gpt
    state = model.state_dict()
    first, second = random_alignment(spec, 0), random_alignment(spec, 1, "orthogonal")
    assert set(first.kinds.values()) == {"permutation", "orthogonal", "invertible"}
    both = first.then(second).apply(spec, state)
    step = second.apply(spec, first.apply(spec, state))
    assert all(torch.allclose(both[k], step[k], rtol=0, atol=1e-12) for k in state)
    back = first.then(second).inverse().apply(spec, both)
    assert all(torch.allclose(back[k], state[k], rtol=0, atol=1e-12) for k in state)
    # on permutations this is compose_permutations / invert_permutation
    p, q = random_permutation(spec.spec, 3), random_permutation(spec.spec, 4)
    a, b = Alignment.from_permutation(p), Alignment.from_permutation(q)
    assert _equal(a.then(b).to_permutation(), compose_permutations(p, q))
    assert _equal(a.inverse().to_permutation(), invert_permutation(p))


def test_save_load_round_trip(gpt, tmp_path) -> None:
    _, spec = gpt
    alignment = random_alignment(spec, 5)
    path = tmp_path / "alignment.safetensors"
    alignment.save(path)
    back = Alignment.load(path)
    assert back.kinds == alignment.kinds
    assert all(torch.equal(back[g].matrix(), alignment[g].matrix()) for g in alignment)
    assert all(type(back[g]) is type(alignment[g]) for g in alignment)
    # a plain permutation file, as `lmc align` writes, loads as permutations
    from lmc.store import save_tensors

    perm = random_permutation(spec.spec, 6)
    save_tensors(tmp_path / "perm.safetensors", perm)
    assert _equal(Alignment.load(tmp_path / "perm.safetensors").to_permutation(), perm)


def test_misfits_are_refused(gpt) -> None:
    model, spec = gpt
    state = model.state_dict()
    good = dict(random_alignment(spec, 0))
    with pytest.raises(LmcError, match="lacks group"):
        Alignment({g: t for g, t in good.items() if g != "tok"}).apply(spec, state)
    with pytest.raises(LmcError, match="needs a SymmetrySpec"):
        Alignment(good).apply(spec.spec, state)
    with pytest.raises(LmcError, match="not a permutation"):
        Alignment(good).to_permutation()
    mlp = next(g for g in spec.kinds if g.endswith("mlp.fc1"))
    bad = {**good, mlp: Orthogonal.random(spec.group_sizes[mlp], 0)}
    with pytest.raises(LmcError, match="admits permutation maps at most"):
        Alignment(bad).apply(spec, state)
    nested, (head, n_heads) = next(iter(spec.heads.items()))
    wrong_heads = Invertible.random(spec.group_sizes[nested], 0, heads=n_heads,
                                    head=torch.roll(good[head].perm, 1))  # fmt: skip
    with pytest.raises(LmcError, match="move them as its permutation does"):
        Alignment({**good, nested: wrong_heads}).apply(spec, state)
    dense = Orthogonal.random(spec.group_sizes[nested], 0)
    with pytest.raises(LmcError, match="within the"):
        Alignment({**good, nested: dense}).apply(spec, state)
    with pytest.raises(LmcError, match="expected a Transform"):
        Alignment({"tok": torch.arange(WIDTH)})
    assert isinstance(Alignment.identity(spec)["tok"], Permutation)
