"""The one-screen reference weight matching against the fast path (issue 45 item 6)."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build
from lmc.perm import (
    apply_permutation,
    matching_objective,
    random_permutation,
    spec_from_model,
    weight_matching,
)
from lmc.perm.weight_match_reference import weight_matching_reference

CASES = [
    ("mlp", dict(input_size=12, width=16, depth=3, num_classes=5), (12,)),
    ("vgg11", dict(in_channels=1, width=0.25, norm="layer"), (1, 8, 8)),
    ("resnet20", dict(in_channels=1, width=0.5, norm="layer"), (1, 8, 8)),
]


@pytest.mark.parametrize(("name", "options", "shape"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed", [0, 3])
def test_fast_path_takes_the_reference_steps(name, options, shape, seed):
    model = build(name, seed=0, **options)
    spec = spec_from_model(model, torch.zeros(2, *shape))
    state_a = model.state_dict()
    state_b = build(name, seed=1, **options).state_dict()
    ref = weight_matching_reference(spec, state_a, state_b, seed=seed)
    fast = weight_matching(
        spec, state_a, state_b, seed=seed, init="identity", tol=0, solver="scipy"
    )
    for group, p in ref.items():
        assert torch.equal(fast.perm[group], p), group
    objective = matching_objective(spec, state_a, state_b, ref)
    assert objective == pytest.approx(fast.objective_after, rel=1e-9)
    assert objective > matching_objective(spec, state_a, state_b)


def test_reference_recovers_a_known_permutation():
    name, options, shape = CASES[0]
    model = build(name, seed=0, **options)
    spec = spec_from_model(model, torch.zeros(2, *shape))
    state_a = model.state_dict()
    state_b = apply_permutation(spec, random_permutation(spec, 5), state_a)
    aligned = apply_permutation(spec, weight_matching_reference(spec, state_a, state_b), state_b)
    for key, value in state_a.items():
        assert torch.equal(aligned[key], value), key


def test_reference_leaves_head_specs_to_the_fast_path():
    model = build("gpt", seed=0, vocab=11, width=8, depth=1, heads=2, context=4)
    spec = spec_from_model(model, torch.zeros(1, 4, dtype=torch.long))
    assert spec.heads
    with pytest.raises(LmcError, match="use weight_matching"):
        weight_matching_reference(spec, model.state_dict(), model.state_dict())
