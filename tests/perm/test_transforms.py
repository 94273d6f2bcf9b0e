"""Transform kinds of one group (lmc.perm.transforms): permutation, orthogonal and invertible maps,
dense or within heads. Each acts on an axis as its matrix M says (``out`` axes by M, ``in`` axes
by M⁻ᵀ, a unit's ``repeat`` indices together); inverse and composition are the matrix inverse
and product, across kinds; random elements are seeded and of their kind; save/load round-trips
bit for bit through safetensors; bad input is refused."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.perm.heads import compose_heads
from lmc.perm.transforms import (
    KINDS,
    Invertible,
    Orthogonal,
    Permutation,
    Transform,
    compose,
    kind_rank,
    random_transform,
)

N, H = 12, 3


def _all(seed: int) -> list[Transform]:
    gen = torch.Generator().manual_seed(seed)
    return [
        Permutation.random(N, gen),
        Permutation.random(N, gen, heads=H),
        Orthogonal.random(N, gen),
        Orthogonal.random(N, gen, heads=H),
        Invertible.random(N, gen),
        Invertible.random(N, gen, heads=H),
    ]


@pytest.mark.parametrize("k", range(6))
def test_action_is_the_matrix(k: int) -> None:
    t = _all(0)[k]
    m = t.matrix()
    x = torch.randn(5, N, 2, dtype=torch.float64)
    assert torch.allclose(t.act(x, 1), torch.einsum("ij,bjc->bic", m, x))
    assert torch.allclose(t.act(x, 1, "in"), torch.einsum("ij,bjc->bic", torch.linalg.inv(m).T, x))
    # each unit owns `repeat` consecutive indices (a Linear reading a flattened (C, H, W) map)
    y = torch.randn(2, N * 3, dtype=torch.float64)
    want = torch.einsum("ij,bjr->bir", m, y.reshape(2, N, 3)).reshape(2, N * 3)
    assert torch.allclose(t.act(y, -1, repeat=3), want)
    # float32 in, float32 out
    assert t.act(x.float(), 1).dtype == torch.float32


@pytest.mark.parametrize("k", range(6))
def test_inverse_and_composition_are_matrix_algebra(k: int) -> None:
    t = _all(0)[k]
    m = t.matrix()
    assert torch.allclose(t.inverse().matrix(), torch.linalg.inv(m))
    assert torch.allclose(t.then(t.inverse()).matrix(), torch.eye(N, dtype=torch.float64))
    for s in _all(1):
        both = compose(t, s)
        assert torch.allclose(both.matrix(), s.matrix() @ m)
        assert both.kind == KINDS[max(kind_rank(t.kind), kind_rank(s.kind))]


def test_permutation_is_lmc_perm_index_convention() -> None:
    p = torch.tensor([2, 0, 3, 1])
    t = Permutation(p)
    x = torch.arange(4.0)
    assert torch.equal(t.act(x, 0), x[p])  # new unit i = old unit p[i]
    assert torch.equal(t.then(Permutation(p)).perm, p[p])  # as compose_permutations
    assert torch.equal(t.inverse().perm, torch.argsort(p))


def test_nested_permutation_as_orthogonal_within_heads() -> None:
    head = torch.tensor([2, 0, 1])
    within = torch.stack(
        [torch.randperm(4, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    )
    p = Permutation(compose_heads(head, within))
    o = p.as_orthogonal(H)
    assert o.heads == H and torch.equal(o.head, head) and torch.equal(o.matrix(), p.matrix())
    with pytest.raises(LmcError, match="whole heads"):
        Permutation(torch.tensor([2, 1, 0, 3, 4, 5])).as_orthogonal(3)


def test_random_elements_are_seeded_and_of_their_kind() -> None:
    for kind in ("permutation", "orthogonal", "invertible"):
        a, b = random_transform(kind, N, 5, heads=H), random_transform(kind, N, 5, heads=H)
        c = random_transform(kind, N, 6, heads=H)
        assert torch.equal(a.matrix(), b.matrix()) and not torch.equal(a.matrix(), c.matrix())
        assert not a.is_identity()
    q = Orthogonal.random(N, 0).matrix()
    assert torch.allclose(q.T @ q, torch.eye(N, dtype=torch.float64), atol=1e-12)
    inv = Invertible.random(N, 0, spread=2.0)
    assert float(torch.linalg.cond(inv.matrix())) <= 4.0 + 1e-9
    assert not torch.allclose(inv.matrix().T @ inv.matrix(), torch.eye(N, dtype=torch.float64))
    head = torch.tensor([1, 2, 0])
    assert torch.equal(Invertible.random(N, 0, heads=H, head=head).head, head)


@pytest.mark.parametrize("k", range(6))
def test_save_load_round_trip(tmp_path, k: int) -> None:
    t = _all(2)[k]
    path = tmp_path / "t.safetensors"
    t.save(path)
    back = Transform.load(path)
    assert type(back) is type(t) and back.heads == t.heads
    assert torch.equal(back.matrix(), t.matrix())


def test_load_refuses_other_files(tmp_path) -> None:
    from lmc.store import save_tensors

    path = tmp_path / "plain.safetensors"
    save_tensors(path, {"x": torch.zeros(2)})
    with pytest.raises(LmcError, match="no lmc transform"):
        Transform.load(path)
    with pytest.raises(LmcError, match="does not exist"):
        Transform.load(tmp_path / "missing.safetensors")


def test_bad_input_is_refused() -> None:
    with pytest.raises(LmcError, match="not a permutation"):
        Permutation(torch.tensor([0, 0, 1]))
    with pytest.raises(LmcError, match="not orthogonal"):
        Orthogonal(torch.tensor([0]), 2 * torch.eye(3)[None])
    with pytest.raises(LmcError, match="singular"):
        Invertible(torch.tensor([0]), torch.zeros(1, 3, 3))
    with pytest.raises(LmcError, match="cannot be cut"):
        Orthogonal.random(10, 0, heads=3)
    with pytest.raises(LmcError, match="compose transforms of"):
        Permutation.identity(3).then(Permutation.identity(4))
    with pytest.raises(LmcError, match="norm"):
        Orthogonal.random(N, 0).act(torch.zeros(N), 0, "norm")
    with pytest.raises(LmcError, match="must have 12 entries"):
        Orthogonal.random(N, 0).act(torch.zeros(5, 11), 1)
    # a permutation may act on a norm's gain
    gain = torch.arange(4.0)
    assert torch.equal(Permutation(torch.tensor([3, 2, 1, 0])).act(gain, 0, "norm"), gain.flip(0))
