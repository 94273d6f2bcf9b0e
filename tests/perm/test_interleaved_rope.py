"""Rotary planes in the interleaved layout (lmc.perm.symmetries.transforms.InterleavedRopePlanes,
kind ``rope_interleaved``): GPT-J's ``rotate_every_two`` rotates dims ``2p`` and ``2p + 1`` of
each head together, where Llama's ``rotate_half`` rotates dims ``p`` and ``p + d/2``. A map of
per-plane complex scalars in one layout commutes with every rotation of that layout and not with
those of the other; the kinds save, load, invert and compose within themselves; the ``rope``
kind's maps are the ones they were (same draws, same blocks, same file description)."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.perm import Alignment, Permutation
from lmc.perm.heads import compose_heads
from lmc.perm.symmetries.transforms import (
    PLANE_CLASSES,
    STRUCTURED_KINDS,
    InterleavedRopePlanes,
    RopePlanes,
    Transform,
    is_plane_structured,
    kind_rank,
    plane_blocks,
    random_transform,
)

D, H = 8, 3


def _rotations(d: int, interleaved: bool, seed: int) -> torch.Tensor:
    """RoPE's rotation of one head at a random angle per plane, in one layout, written out
    dim by dim (not through plane_blocks): (d, d), float64."""
    angle = torch.rand(d // 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    r = torch.zeros(d, d, dtype=torch.float64)
    for p, a in enumerate(angle * 6.0):
        i, j = (2 * p, 2 * p + 1) if interleaved else (p, p + d // 2)
        c, s = torch.cos(a), torch.sin(a)
        r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


def test_interleaved_plane_blocks_pair_neighbouring_dims():
    alpha = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    beta = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    want = torch.tensor(
        [[1.0, -3.0, 0.0, 0.0], [3.0, 1.0, 0.0, 0.0], [0.0, 0.0, 2.0, -4.0], [0.0, 0.0, 4.0, 2.0]],
        dtype=torch.float64,
    )
    assert torch.equal(plane_blocks(alpha, beta, interleaved=True)[0], want)
    half = torch.tensor(
        [[1.0, 0.0, -3.0, 0.0], [0.0, 2.0, 0.0, -4.0], [3.0, 0.0, 1.0, 0.0], [0.0, 4.0, 0.0, 2.0]],
        dtype=torch.float64,
    )
    assert torch.equal(plane_blocks(alpha, beta)[0], half)


@pytest.mark.parametrize("cls", [RopePlanes, InterleavedRopePlanes])
def test_a_plane_map_commutes_with_the_rotations_of_its_layout_only(cls):
    t = cls.random(H * D, 1, heads=H, head=torch.arange(H))
    for seed in range(3):
        own = _rotations(D, cls.interleaved, seed)
        other = _rotations(D, not cls.interleaved, seed)
        for block, dual in zip(t.blocks, t.dual_blocks()):
            # q·k under RoPE: (R_i M q)ᵀ (R_j M⁻ᵀ k) = (R_i q)ᵀ (R_j k) for all positions i, j
            assert torch.allclose(own @ block, block @ own, atol=1e-12)
            assert torch.allclose(own @ dual, dual @ own, atol=1e-12)
            assert not torch.allclose(other @ block, block @ other, atol=1e-3)


def test_the_layouts_are_different_kinds():
    assert STRUCTURED_KINDS == ("rope", "rope_interleaved")
    assert {k: c.kind for k, c in PLANE_CLASSES.items()} == {k: k for k in STRUCTURED_KINDS}
    assert kind_rank("rope_interleaved") == kind_rank("rope") == kind_rank("invertible")
    pairs = InterleavedRopePlanes.random(H * D, 2, heads=H)
    halves = RopePlanes.random(H * D, 2, heads=H)
    assert is_plane_structured(pairs.blocks, interleaved=True)
    assert not is_plane_structured(pairs.blocks)
    assert is_plane_structured(halves.blocks) and not is_plane_structured(
        halves.blocks, interleaved=True
    )
    with pytest.raises(LmcError, match=r"dims 2p and 2p \+ 1"):
        InterleavedRopePlanes(halves.head, halves.blocks)
    with pytest.raises(LmcError, match=r"dims p and p \+ d/2"):
        RopePlanes(pairs.head, pairs.blocks)
    assert isinstance(
        random_transform("rope_interleaved", H * D, 3, heads=H), InterleavedRopePlanes
    )


def test_interleaved_maps_invert_compose_and_round_trip(tmp_path):
    a = InterleavedRopePlanes.random(H * D, 4, heads=H)
    b = InterleavedRopePlanes.random(H * D, 5, heads=H, spread=1.0)
    heads = Permutation(compose_heads(torch.tensor([2, 0, 1]), torch.arange(D).expand(H, D)))
    for t in (a.inverse(), a.then(b), a.then(heads), heads.then(a)):
        assert t.kind == "rope_interleaved", t
    assert torch.allclose(a.then(a.inverse()).matrix(), torch.eye(H * D, dtype=torch.float64))
    assert torch.allclose(a.then(b).matrix(), b.matrix() @ a.matrix())
    a.save(tmp_path / "t.safetensors")
    back = Transform.load(tmp_path / "t.safetensors")
    assert type(back) is InterleavedRopePlanes and torch.equal(back.blocks, a.blocks)
    alignment = Alignment({"g": a, "h": RopePlanes.random(H * D, 6, heads=H)})
    alignment.save(tmp_path / "a.safetensors")
    loaded = Alignment.load(tmp_path / "a.safetensors")
    assert loaded.kinds == {"g": "rope_interleaved", "h": "rope"}
    assert all(torch.equal(loaded[g].blocks, alignment[g].blocks) for g in alignment)


def test_the_rope_kind_is_unchanged():
    """``RopePlanes.random`` draws angles then log-scales and lays planes half-split, as before
    the interleaved kind; its file description is ``{"kind": "rope", ...}``."""
    gen = torch.Generator().manual_seed(7)
    head = torch.randperm(H, generator=gen)
    angle = torch.rand(H, D // 2, generator=gen, dtype=torch.float64) * 2 * torch.pi
    log_s = (torch.rand(H, D // 2, generator=gen, dtype=torch.float64) * 2 - 1) * torch.log(
        torch.tensor(2.0, dtype=torch.float64)
    )
    s = log_s.exp()
    a, b = torch.diag_embed(s * angle.cos()), torch.diag_embed(s * angle.sin())
    want = torch.cat((torch.cat((a, -b), -1), torch.cat((b, a), -1)), -2)
    t = RopePlanes.random(H * D, 7, heads=H)
    assert torch.equal(t.head, head) and torch.equal(t.blocks, want)
    assert t.to_json() == {"kind": "rope", "size": H * D, "heads": H}
