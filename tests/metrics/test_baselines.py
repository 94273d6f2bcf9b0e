"""The random-direction baseline."""

import pytest
import torch

from lmc.config import LmcError
from lmc.metrics import evaluate_path, moved_entries, random_direction_state


def dist(sa, sb, names):
    return sum(float(((sa[k].double() - sb[k].double()) ** 2).sum()) for k in names) ** 0.5


def test_same_distance_random_direction(bn_pair):
    a, b = (m.state_dict() for m in bn_pair)
    names = moved_entries(a)
    assert "norm1.weight" in names and "fc1.weight" in names
    stats = ("running_mean", "running_var", "num_batches_tracked")
    assert not any(k.endswith(stats) for k in names)
    bp = random_direction_state(a, b, seed=0)
    assert dist(a, bp, names) == pytest.approx(dist(a, b, names), rel=1e-5)
    for k in ("norm1.running_mean", "norm1.running_var", "norm1.num_batches_tracked"):
        assert torch.equal(bp[k], a[k])  # statistics are not moved
    again = random_direction_state(a, b, seed=0)
    other = random_direction_state(a, b, seed=1)
    assert all(torch.equal(bp[k], again[k]) for k in a)
    assert not torch.equal(bp["fc1.weight"], other["fc1.weight"])
    # a random direction, not the direction to B
    da = torch.cat([(bp[k] - a[k]).flatten() for k in names]).double()
    db = torch.cat([(b[k] - a[k]).flatten() for k in names]).double()
    assert abs(torch.nn.functional.cosine_similarity(da, db, dim=0).item()) < 0.1


def test_filter_normalised_direction(mlp_pair):
    a, b = (m.state_dict() for m in mlp_pair)
    bp = random_direction_state(a, b, seed=2, filter_normalize=True)
    names = moved_entries(a)
    assert dist(a, bp, names) == pytest.approx(dist(a, b, names), rel=1e-5)
    step = (bp["fc2.weight"] - a["fc2.weight"]).double().norm(dim=1)
    ref = a["fc2.weight"].double().norm(dim=1)
    ratio = step / ref  # every filter moved in proportion to its own norm
    assert torch.allclose(ratio, ratio.mean().expand_as(ratio), rtol=1e-4)
    bias_step = (bp["fc2.bias"] - a["fc2.bias"]).double().norm()
    assert bias_step / a["fc2.bias"].double().norm() == pytest.approx(ratio.mean().item(), rel=1e-4)


def test_parameter_names_restrict_the_move(mlp_pair):
    a, b = (m.state_dict() for m in mlp_pair)
    bp = random_direction_state(a, b, seed=0, parameter_names=["fc1.weight"])
    assert torch.equal(bp["fc2.weight"], a["fc2.weight"])
    assert not torch.equal(bp["fc1.weight"], a["fc1.weight"])
    with pytest.raises(LmcError, match="nope"):
        random_direction_state(a, b, seed=0, parameter_names=["nope"])


def test_baseline_path_evaluates(digits, mlp_pair):
    _, _, x, y = digits
    a, b = mlp_pair
    bp = random_direction_state(a.state_dict(), b.state_dict(), seed=0)
    res = evaluate_path(a, None, x, y, 5, state_b=bp)
    assert res.loss[0] == evaluate_path(a, b, x, y, 5).loss[0]
    assert res.loss[-1] > res.loss[0]  # far from A in a random direction the loss rises
