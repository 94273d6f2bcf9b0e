"""Learned orthogonal alignment (issue 30 item 3, learned): the differentiable application of
rotations agrees with the Alignment's, zero steps give the closed form, the learned map is a
symmetry (B's function kept), and training lowers the held-out midpoint loss."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.perm import Alignment, Orthogonal, align
from lmc.perm.canonical import canonicalize
from lmc.perm.learned import _apply_rotations, learnable_groups, learned_alignment
from lmc.perm.transforms import Invertible, Permutation

HEADS = 2  # the heads of canonical_gpt_pair (tests/perm/conftest.py)


@pytest.fixture(scope="module")
def pair(canonical_gpt_pair):
    return canonical_gpt_pair


def test_the_learnable_groups_are_the_stream_and_the_within_head_dims(pair):
    _, _, spec, _ = pair
    groups = learnable_groups(spec)
    assert groups["tok"] == 1
    assert {g for g, h in groups.items() if h == HEADS} == set(spec.spec.heads)
    assert learnable_groups(spec, heads=False) == {"tok": 1}


@pytest.mark.parametrize("head_maps", ["orthogonal", "invertible"])
def test_differentiable_rotations_agree_with_the_alignment(pair, head_maps):
    """The maps applied by role (R on out axes, R^-T on in axes) are the Alignment's."""
    a, _, spec, _ = pair
    gen = torch.Generator().manual_seed(3)
    rotations, transforms = {}, {}
    for g, size in spec.group_sizes.items():
        heads = learnable_groups(spec).get(g)
        if heads is None:
            transforms[g] = Permutation.identity(size)
            continue
        kind = Invertible if head_maps == "invertible" and g in spec.heads else Orthogonal
        q = kind.random(size, gen, heads=heads, head=torch.arange(heads))
        rotations[g], transforms[g] = (q.blocks, torch.linalg.inv(q.blocks).transpose(1, 2)), q
    state = {k: v.double() for k, v in a.state_dict().items()}
    mine = _apply_rotations(spec, state, rotations)
    theirs = Alignment(transforms).apply(spec, state)
    for name, want in theirs.items():
        assert torch.allclose(mine[name], want, atol=1e-12), name


def test_zero_steps_give_the_orthogonal_closed_form(pair):
    a, b, spec, data = pair
    result = learned_alignment(spec, a, b, data.x_train, data.y_train, steps=0)
    closed = align("orthogonal", a, b, inputs=data.x_train[:2])
    for g, t in closed.alignment.items():
        assert torch.allclose(result.alignment[g].matrix(), t.matrix(), atol=1e-9), g
    assert result.best_step == 0 and result.best_loss == result.initial_loss


def test_training_lowers_the_held_out_midpoint_loss_and_keeps_b_s_function(pair):
    a, b, spec, data = pair
    result = learned_alignment(spec, a, b, data.x_train, data.y_train, steps=40, lr=0.05,
                               batch_size=16, lambdas="midpoint", holdout=40)  # fmt: skip
    assert result.best_loss < result.initial_loss
    assert result.best_step > 0 and len(result.train_losses) == 40
    assert all(d > 0 for d in result.distance_from_closed_form.values())
    moved = canonicalize(b)  # a copy with B's function
    moved.load_state_dict(result.alignment.apply(spec, b.state_dict()))
    x = data.x_test[:4]
    with torch.no_grad():
        assert torch.allclose(moved(x), b(x), atol=1e-4)  # a symmetry: B's function kept


def test_invertible_head_maps_are_learned_and_keep_b_s_function(pair):
    a, b, spec, data = pair
    result = learned_alignment(spec, a, b, data.x_train, data.y_train, steps=20, lr=0.05,
                               batch_size=16, lambdas="midpoint", holdout=40,
                               head_maps="invertible")  # fmt: skip
    assert result.best_loss < result.initial_loss and result.best_step > 0
    moved = canonicalize(b)
    moved.load_state_dict(result.alignment.apply(spec, b.state_dict()))
    x = data.x_test[:4]
    with torch.no_grad():
        assert torch.allclose(moved(x), b(x), atol=1e-4)  # q^T k and v/out products kept
    for g in spec.spec.heads:  # the kept maps within heads are invertible, not orthogonal
        blocks = result.alignment[g].blocks
        assert result.alignment[g].kind == "invertible", g
        gram = blocks.transpose(1, 2) @ blocks
        assert not torch.allclose(gram, torch.eye(gram.shape[-1], dtype=gram.dtype), atol=1e-6)
    with pytest.raises(LmcError, match="head_maps"):
        learned_alignment(spec, a, b, data.x_train, data.y_train, steps=0, head_maps="affine")
    with pytest.raises(LmcError, match="none to learn"):  # invertible maps, but not in heads
        learned_alignment(spec, a, b, data.x_train, data.y_train, steps=0, heads=False,
                          head_maps="invertible")  # fmt: skip


def test_the_method_runs_through_align_with_its_settings(pair):
    a, b, _, data = pair
    result = align("learned", a, b, inputs=data.x_train, labels=data.y_train,
                   task=data.task, steps=3, heads=False)  # fmt: skip
    assert result.info["canonical"] and result.info["learned_groups"] == ["tok"]
    assert len(result.info["learned_train_losses"]) == 3
    with pytest.raises(LmcError, match="needs labels"):
        align("learned", a, b, inputs=data.x_train)
    with pytest.raises(LmcError, match="lambdas"):
        align("learned", a, b, inputs=data.x_train, labels=data.y_train, task=data.task,
              lambdas="edges")  # fmt: skip
