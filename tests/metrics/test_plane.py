"""The loss plane through three models (Garipov et al.'s orthonormalised basis): the points at
A's, B's and C's coordinates are those models, curves through C lie in the plane, and the
grid's values are the models' own losses there."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import lmc.models
from lmc.config import LmcError
from lmc.merge.curves import Curve, midpoint_control
from lmc.metrics.plane import PlaneBasis, PlaneResult, evaluate_plane, plane_figure, plane_grid


def _state(seed: int) -> dict[str, torch.Tensor]:
    return lmc.models.build("mlp", seed=seed, input_size=64, width=16).state_dict()


def _loss(model, state, x, y) -> tuple[float, float]:
    model.load_state_dict(state)
    with torch.no_grad():
        z = model(x)
    return float(F.cross_entropy(z.double(), y)), float((z.argmax(1) == y).double().mean())


def _inner(a: dict, b: dict) -> float:
    return sum(float((a[k].double() * b[k].double()).sum()) for k in a)


def test_the_basis_is_orthogonal_and_names_a_b_c_at_their_coordinates():
    a, b, c = _state(0), _state(1), _state(2)
    basis = PlaneBasis(a, b, c)
    assert abs(_inner(basis.u, basis.v)) < 1e-6 * math.sqrt(
        _inner(basis.u, basis.u) * _inner(basis.v, basis.v)
    )
    cx, cy = basis.coordinates["C"]
    diff_c = {k: c[k] - a[k] for k in a}
    u = {k: b[k] - a[k] for k in a}
    assert cx == pytest.approx(_inner(diff_c, u) / _inner(u, u), rel=1e-6)
    assert cy > 0
    for (x, y), target in (((0.0, 0.0), a), ((1.0, 0.0), b), ((cx, cy), c)):
        point = basis.point(x, y)
        for k in a:
            assert torch.allclose(point[k], target[k], atol=1e-6, rtol=0), (x, y, k)
    assert all(torch.equal(basis.point(0.0, 0.0)[k], a[k]) for k in a)  # A exactly


def test_a_curve_through_the_control_point_lies_in_the_plane():
    a, b, c = _state(0), _state(1), _state(2)
    basis = PlaneBasis(a, b, c)
    plane = PlaneResult([0.0], [0.0], [[0.0]], [[0.0]], dict(basis.coordinates), curve="bezier")
    xs, ys = plane.curve_xy("bezier", 5)
    curve = Curve("bezier", a, b, c)
    for i, t in enumerate([0.0, 0.25, 0.5, 0.75, 1.0]):
        on_plane, on_curve = basis.point(xs[i], ys[i]), curve.point(t)
        for k in a:
            assert torch.allclose(on_plane[k], on_curve[k], atol=1e-5, rtol=0), (t, k)
    assert plane.curve_xy("line", 3) == ([0.0, 0.5, 1.0], [0.0, 0.0, 0.0])


def test_no_plane_through_points_on_one_line():
    a, b = _state(0), _state(1)
    with pytest.raises(LmcError, match="span no plane"):
        PlaneBasis(a, b, midpoint_control(a, b))
    with pytest.raises(LmcError, match="same point"):
        PlaneBasis(a, a, b)


def test_the_plane_grid_at_a_b_c_gives_their_losses(digits):
    _, _, x, y = digits
    a, b, c = _state(0), _state(1), _state(2)
    model = lmc.models.build("mlp", seed=9, input_size=64, width=16).eval()
    cx, cy = PlaneBasis(a, b, c).coordinates["C"]
    plane = evaluate_plane(model, a, b, c, x, y, xs=[0.0, 1.0, cx], ys=[0.0, cy],
                           labels={"C": "C"})  # fmt: skip
    probe = lmc.models.build("mlp", seed=9, input_size=64, width=16).eval()
    loss_a, acc_a = _loss(probe, a, x, y)
    loss_b, acc_b = _loss(probe, b, x, y)
    loss_c, acc_c = _loss(probe, c, x, y)
    assert len({round(v, 4) for v in (loss_a, loss_b, loss_c)}) == 3  # three distinct models
    assert plane.loss[0][0] == pytest.approx(loss_a, abs=1e-6)
    assert plane.loss[0][1] == pytest.approx(loss_b, abs=1e-5)
    assert plane.loss[1][2] == pytest.approx(loss_c, abs=1e-5)
    assert (plane.accuracy[0][0], plane.accuracy[0][1], plane.accuracy[1][2]) == (
        pytest.approx(acc_a),
        pytest.approx(acc_b),
        pytest.approx(acc_c),
    )
    assert plane.points == {"A": (0.0, 0.0), "B": (1.0, 0.0), "C": (cx, cy)}
    # the record round-trips and draws
    again = PlaneResult.from_dict(plane.to_dict())
    assert again == plane
    fig = plane_figure(again, "test")
    assert len(fig.axes) == 4  # two panels and their colour bars


def test_the_default_grid_covers_the_three_points_with_a_margin():
    xs, ys = plane_grid({"A": (0.0, 0.0), "B": (1.0, 0.0), "C": (0.5, 0.1)}, 5, 0.2)
    assert xs[0] == pytest.approx(-0.2) and xs[-1] == pytest.approx(1.2) and len(xs) == 5
    assert ys[0] == pytest.approx(-0.2) and ys[-1] == pytest.approx(0.3)
    with pytest.raises(LmcError, match="at least 2"):
        plane_grid({"A": (0.0, 0.0)}, 1)
