"""Git Re-Basin's one-pass baseline (App. A.7): greedy, layer by layer, incoming weights only."""

import pytest
import torch

from lmc.models import build
from lmc.perm import (
    align,
    apply_permutation,
    one_pass_matching,
    random_permutation,
    spec_from_model,
    weight_matching,
)
from lmc.perm.lap import linear_assignment


def _close(a, b):
    return all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.parametrize(
    "name, options, example",
    [
        ("mlp", dict(input_size=20, width=32, depth=3, num_classes=10), torch.randn(2, 20)),
        ("vgg11", dict(width=0.125, in_channels=1, num_classes=10, norm="batch"),
         torch.randn(2, 1, 28, 28)),
    ],
)  # fmt: skip
def test_a_known_permutation_is_recovered_exactly(name, options, example):
    model = build(name, seed=0, **options)
    spec = spec_from_model(model, example)
    permuted = apply_permutation(spec, random_permutation(spec, 5), model.state_dict())
    result = one_pass_matching(spec, model.state_dict(), permuted)
    assert _close(apply_permutation(spec, result.perm, permuted), model.state_dict())
    assert result.passes == 1 and result.assignments == len(spec.group_sizes)


def test_each_layer_is_matched_on_its_incoming_weights_only():
    a = build("mlp", seed=0, input_size=12, width=16, depth=2, num_classes=5)
    b = build("mlp", seed=1, input_size=12, width=16, depth=2, num_classes=5)
    spec = spec_from_model(a, torch.randn(2, 12))
    sa, sb = a.state_dict(), b.state_dict()
    first, second = list(spec.group_sizes)  # the tracer's order: input to output
    result = one_pass_matching(spec, sa, sb)
    w1 = sa["fc1.weight"].double() @ sb["fc1.weight"].double().T
    s1 = w1 + sa["fc1.bias"].double()[:, None] * sb["fc1.bias"].double()[None, :]
    assert torch.equal(result.perm[first], linear_assignment(s1))
    p1 = result.perm[first]
    w2 = sa["fc2.weight"].double() @ sb["fc2.weight"].double()[:, p1].T
    s2 = w2 + sa["fc2.bias"].double()[:, None] * sb["fc2.bias"].double()[None, :]
    # the classifier's outputs never move, so its weights are known when layer 2 is matched
    s2 = s2 + sa["out.weight"].double().T @ sb["out.weight"].double()
    assert torch.equal(result.perm[second], linear_assignment(s2))
    # but layer 1 was matched without fc2 (its outgoing weights, into a layer not yet matched)
    with_outgoing = s1 + sa["fc2.weight"].double().T @ sb["fc2.weight"].double()
    assert not torch.equal(linear_assignment(with_outgoing), result.perm[first])
    # the full objective is reported, comparable with weight matching's
    full = weight_matching(spec, sa, sb, init_perm=result.perm)
    assert full.objective_init == pytest.approx(result.objective_after)
    assert full.objective_after >= result.objective_after - 1e-9


def test_align_offers_onepass():
    a = build("mlp", seed=0, input_size=12, width=16, depth=2, num_classes=5)
    b = build("mlp", seed=1, input_size=12, width=16, depth=2, num_classes=5)
    out = align("onepass", a, b, inputs=torch.randn(4, 12))
    assert out.info["method"] == "onepass"
    assert out.info["objective_after"] >= out.info["objective_before"]
