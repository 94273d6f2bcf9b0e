"""Weight matching on CUDA tensors (marked ``gpu``; skipped without CUDA): a known permutation
is recovered exactly, as on the CPU, from both starts."""

from __future__ import annotations

import pytest
import torch

from lmc.models import build
from lmc.perm import (
    apply_permutation,
    invert_permutation,
    random_permutation,
    spec_from_model,
    weight_matching,
)

pytestmark = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)


@pytest.mark.parametrize("init", ["onepass", "identity"])
def test_weight_matching_on_cuda_recovers_a_known_permutation(init):
    model = build("mlp", input_size=12, width=32, depth=3, num_classes=4, seed=0)
    spec = spec_from_model(model, torch.zeros(2, 12))
    state_a = {k: v.cuda() for k, v in model.state_dict().items()}
    pi = random_permutation(spec, 2)
    state_b = apply_permutation(spec, pi, state_a)
    result = weight_matching(spec, state_a, state_b, init=init)
    expected = invert_permutation(pi)
    for g in spec.group_sizes:
        assert result.perm[g].device.type == "cpu"  # permutations are CPU index tensors
        assert torch.equal(result.perm[g], expected[g].cpu()), g
