"""The loss landscape on the plane through three models (Garipov et al. 2018, Fig. 1).

Three state dicts A, B, C of one architecture (A, B and a curve's control point θ_C, or three
endpoints) span a plane. Its basis is Garipov et al.'s orthonormalised one, u = θ_B − θ_A and
v = (θ_C − θ_A) minus its projection on u, and a point of the plane is named by coordinates
(x, y) in units of ‖θ_B − θ_A‖ (docs/science.md, "Curves between two models"):

    θ(x, y) = θ_A + x·u + y·‖u‖·v/‖v‖,

so A is (0, 0), B is (1, 0) and C is (⟨θ_C − θ_A, u⟩/‖u‖², ‖v‖/‖u‖). Every floating entry of
the state dict (parameters and floating buffers) lies in the plane; integer entries are A's,
except at B's point (1, 0), which has B's (warned about when they differ, as on a curve:
:func:`lmc.merge.curves.warn_integer_entries`); entries that are not tensors are refused;
norms and inner products are over the floating entries, in float64. The model's
``forward(x)`` must return its logits as one tensor
(:func:`lmc.merge.curves.check_model_output`). A quadratic Bézier curve or a chain through θ_C
lies in this plane (θ(t) = w_A θ_A + w_C θ_C + w_B θ_B), at
(w_B + w_C·x_C, w_C·y_C) (:meth:`PlaneResult.curve_xy`).

:func:`evaluate_plane` gives the loss (mean task loss, nats) and accuracy (fraction) of the
model at each point of a grid, each point's BatchNorm statistics recomputed on ``bn_inputs``
for a BatchNorm model (``bn`` ``auto``/``reset``; so A, B and C themselves are reset too, unlike
the path's endpoints). Each point is built in float64 from A, u and v and cast to A's dtypes,
so the points at A's, B's and C's coordinates are those models to float rounding.
:func:`plane_figure` draws it (matplotlib, object API, imported on first use).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError
from lmc.data.tasks import Task, get_task
from lmc.merge import reset_batchnorm, resolve_bn_mode
from lmc.merge.curves import (
    check_model_output,
    check_tensor_entries,
    get_path_kind,
    warn_integer_entries,
)
from lmc.models import check_same_architecture, eval_mode, module_device

from .engine import auto_batch_size, model_logits
from .result import LambdaMetrics

#: Grid points per side when none are given.
DEFAULT_PLANE_POINTS = 9
#: The grid's margin around the three points, as a fraction of its extent on each axis.
DEFAULT_MARGIN = 0.2


class PlaneBasis:
    """The plane through ``state_a``, ``state_b``, ``state_c`` (module doc): ``point(x, y)``
    is θ(x, y); ``coordinates`` holds A's, B's and C's (x, y). ``LmcError`` when B equals A
    or C lies on the line through A and B (no plane)."""

    def __init__(
        self,
        state_a: Mapping[str, torch.Tensor],
        state_b: Mapping[str, torch.Tensor],
        state_c: Mapping[str, torch.Tensor],
    ) -> None:
        for state, name in ((state_a, "A"), (state_b, "B"), (state_c, "C")):
            check_tensor_entries(state, name)
        check_same_architecture(state_a, state_b, purpose="a plane")
        check_same_architecture(state_a, state_c, names=("A", "C"), purpose="a plane")
        self.state_a = {k: v.detach() for k, v in state_a.items()}
        self.keys = [k for k, v in self.state_a.items() if v.is_floating_point()]
        # B's integer entries, for B's own point (1, 0)
        self.integers_b = {
            k: state_b[k].detach().to(device=a.device, dtype=a.dtype)
            for k, a in self.state_a.items()
            if not a.is_floating_point()
        }
        warn_integer_entries(self.state_a, self.integers_b, "the plane")
        u = {k: state_b[k].detach().double().to(self.state_a[k].device) - self.state_a[k].double()
             for k in self.keys}  # fmt: skip
        w = {k: state_c[k].detach().double().to(self.state_a[k].device) - self.state_a[k].double()
             for k in self.keys}  # fmt: skip
        uu = sum(float(t.square().sum()) for t in u.values())
        if not uu > 0:
            raise LmcError("A and B are the same point: they span no plane")
        cx = sum(float((w[k] * u[k]).sum()) for k in self.keys) / uu
        v = {k: w[k] - cx * u[k] for k in self.keys}
        vv = sum(float(t.square().sum()) for t in v.values())
        self.norm_u = math.sqrt(uu)
        cy = math.sqrt(vv) / self.norm_u
        if not cy > 1e-12:
            raise LmcError(
                "C lies on the line through A and B (e.g. an untrained control point, the "
                "midpoint): the three models span no plane"
            )
        # kept in A's dtypes (float64 differences, rounded once); points rebuilt in float64
        self.u = {k: u[k].to(self.state_a[k].dtype) for k in self.keys}
        self.v = {k: v[k].to(self.state_a[k].dtype) for k in self.keys}
        self.c_y = cy
        self.coordinates = {"A": (0.0, 0.0), "B": (1.0, 0.0), "C": (cx, cy)}

    @torch.no_grad()
    def point(self, x: float, y: float) -> dict[str, torch.Tensor]:
        """θ(x, y) = θ_A + x·u + (y / y_C)·v (= θ_A + x·u + y·‖u‖·v̂), computed in float64 per
        entry and cast to A's dtype; integer entries A's (B's at (1, 0)). (0, 0) is A
        exactly."""
        out = {}
        a_y = y / self.c_y
        at_b = x == 1.0 and y == 0.0
        for key, a in self.state_a.items():
            if key not in self.u:
                out[key] = self.integers_b[key].clone() if at_b else a.clone()
            elif x == 0.0 and y == 0.0:
                out[key] = a.clone()
            else:
                t = a.double() + x * self.u[key].double() + a_y * self.v[key].double()
                out[key] = t.to(a.dtype)
        return out


@dataclass
class PlaneResult:
    """The loss landscape on a plane's grid: ``xs``, ``ys`` (coordinates, units of
    ‖θ_B − θ_A‖; module doc), ``loss`` and ``accuracy`` as ``[len(ys)][len(xs)]`` lists (row i
    is y = ``ys[i]``), ``points`` (name -> (x, y): A, B, C), ``labels`` (name -> what it is,
    e.g. ``C`` -> ``control point (bezier)``), ``norm_ab`` (‖θ_B − θ_A‖ over the floating
    entries), ``num_examples``, ``bn`` (the resolved mode) and ``curve`` (the kind of the curve
    through C, or ``None``)."""

    xs: list[float]
    ys: list[float]
    loss: list[list[float]]
    accuracy: list[list[float]]
    points: dict[str, tuple[float, float]]
    labels: dict[str, str] = field(default_factory=dict)
    norm_ab: float = math.nan
    num_examples: int = 0
    bn: str = "none"
    curve: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain lists and numbers (JSON-ready but for NaN)."""
        out = asdict(self)
        out["points"] = {k: list(v) for k, v in self.points.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlaneResult:
        """A result from :meth:`to_dict`'s record (e.g. read back from JSON)."""
        data = dict(data)
        data["points"] = {k: (float(v[0]), float(v[1])) for k, v in data["points"].items()}
        return cls(**data)

    def curve_xy(self, kind: str | None = None, num: int = 101) -> tuple[list[float], list[float]]:
        """The coordinates of the curve of ``kind`` (default :attr:`curve`; ``line`` for the
        straight line) through C at ``num`` evenly spaced t: (w_B + w_C·x_C, w_C·y_C)."""
        path = get_path_kind(kind or self.curve or "line")
        cx, cy = self.points["C"]
        xs, ys = [], []
        for i in range(num):
            _, wc, wb = path.weights(i / (num - 1))
            xs.append(wb + wc * cx)
            ys.append(wc * cy)
        return xs, ys


def plane_grid(
    points: Mapping[str, tuple[float, float]],
    num: int | tuple[int, int] = DEFAULT_PLANE_POINTS,
    margin: float = DEFAULT_MARGIN,
) -> tuple[list[float], list[float]]:
    """``(xs, ys)``: ``num`` evenly spaced values per axis (or ``(nx, ny)``) covering the
    points with a margin of ``margin`` times the larger of the two axes' extents on every
    side (so a control point near the line still gets a plane around it)."""
    nx, ny = (num, num) if isinstance(num, int) else num
    if nx < 2 or ny < 2:
        raise LmcError(f"a plane's grid needs at least 2 points per side, got {num}")
    if not (margin >= 0 and math.isfinite(margin)):
        raise LmcError(f"margin must be a number >= 0, got {margin}")
    spans = [
        (min(p[a] for p in points.values()), max(p[a] for p in points.values())) for a in (0, 1)
    ]
    pad = margin * max(hi - lo for lo, hi in spans)  # one margin on both axes
    out = []
    for (lo, hi), n in zip(spans, (nx, ny)):
        lo, hi = lo - pad, hi + pad
        out.append([lo + (hi - lo) * i / (n - 1) for i in range(n)])
    return out[0], out[1]


def evaluate_plane(
    model: nn.Module,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    state_c: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    num: int | tuple[int, int] = DEFAULT_PLANE_POINTS,
    margin: float = DEFAULT_MARGIN,
    xs: Sequence[float] | None = None,
    ys: Sequence[float] | None = None,
    task: Task | str = "classification",
    bn: str = "auto",
    bn_inputs: torch.Tensor | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    labels: Mapping[str, str] | None = None,
    curve: str | None = None,
) -> PlaneResult:
    """The loss and accuracy of the model at every point of a grid on the plane through A, B
    and C (module doc).

    Args:
        model: a module of the states' architecture (its weights are not used; it is not
            changed); the points are evaluated on its device.
        state_a, state_b, state_c: the three models' state dicts.
        x, y: the evaluation examples and their targets (as ``task`` lays them out).
        num, margin: the grid (:func:`plane_grid`), unless ``xs`` and ``ys`` are given.
        bn: ``auto``/``reset`` recompute a BatchNorm model's statistics at every point on
            ``bn_inputs`` (seeded by ``seed``), ``none`` keeps the plane's buffers.
        labels: names of A, B, C for the figure; ``curve``: the kind of the curve through C.

    Cost: one forward over ``x`` (and a reset) per grid point.
    """
    task = get_task(task)
    basis = PlaneBasis(state_a, state_b, state_c)
    if len(x):  # a tuple, dict or ModelOutput is refused in one line
        check_model_output(model, x, source="the model")
    if (xs is None) != (ys is None):
        raise LmcError("give both xs and ys, or neither")
    if xs is None:
        xs, ys = plane_grid(basis.coordinates, num, margin)
    xs, ys = [float(v) for v in xs], [float(v) for v in ys]
    if not xs or not ys or not all(math.isfinite(v) for v in xs + ys):
        raise LmcError("a plane's grid needs finite coordinates on both axes")
    mode = resolve_bn_mode(model, bn)
    if mode == "repair":
        raise LmcError("REPAIR is defined for the line only; use bn='reset' on a plane")
    if mode == "reset" and bn_inputs is None:
        raise LmcError("this model has BatchNorm: give bn_inputs (training inputs) to reset it")
    device = module_device(model)
    metrics = LambdaMetrics(y.to(device), False, 0, 0.2, task=task)
    loss = [[math.nan] * len(xs) for _ in ys]
    accuracy = [[math.nan] * len(xs) for _ in ys]
    with eval_mode(model), torch.no_grad():
        work = copy.deepcopy(model).eval()
        bs = batch_size or auto_batch_size(model, x, 1, device)
        for i, yv in enumerate(ys):
            for j, xv in enumerate(xs):
                work.load_state_dict(basis.point(xv, yv))
                if mode == "reset":
                    reset_batchnorm(work, bn_inputs, seed=seed, quiet=True)
                z = model_logits(work, x, bs, device)
                row = metrics([0.0], z[None], z, z)[0]
                loss[i][j], accuracy[i][j] = row["loss"], row["accuracy"]
    return PlaneResult(
        xs=xs,
        ys=ys,
        loss=loss,
        accuracy=accuracy,
        points=dict(basis.coordinates),
        labels=dict(labels or {}),
        norm_ab=basis.norm_u,
        num_examples=len(x),
        bn=mode,
        curve=curve,
    )


# ---- the figure -----------------------------------------------------------------------------
def draw_plane(ax: Any, plane: PlaneResult, *, metric: str = "loss") -> Any:
    """Draw ``plane``'s ``metric`` (``loss``, nats, or ``accuracy``, a fraction) as filled
    contours on ``ax``, with A, B and C marked, the straight line A–B dashed and the curve
    through C (``plane.curve``) solid; returns the contour set (for a colour bar)."""
    import numpy as np

    from .figures import finish_axes

    if metric not in ("loss", "accuracy"):
        raise LmcError(f"metric must be loss or accuracy, got {metric!r}")
    values = np.array(getattr(plane, metric), dtype=float)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        raise LmcError("the plane has no finite value to draw")
    lo, hi = float(finite.min()), float(finite.max())
    levels = np.linspace(lo, hi if hi > lo else lo + 1e-9, 15)
    cmap = "viridis" if metric == "loss" else "viridis_r"
    filled = ax.contourf(plane.xs, plane.ys, values, levels=levels, cmap=cmap, extend="both")
    ax.contour(plane.xs, plane.ys, values, levels=levels, colors="k", linewidths=0.3, alpha=0.5)
    lx, ly = plane.curve_xy("line", 2)
    ax.plot(lx, ly, "--", color="white", lw=1.2, label="line")
    if plane.curve and plane.curve != "line":
        cx, cy = plane.curve_xy(plane.curve)
        ax.plot(cx, cy, "-", color="#D55E00", lw=1.6, label=plane.curve)
    for name, (px, py) in plane.points.items():
        ax.scatter([px], [py], s=36, color="k", edgecolors="white", zorder=4)
        label = plane.labels.get(name, name)
        ax.annotate(label, (px, py), textcoords="offset points", xytext=(5, 5), fontsize=8,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                          "alpha": 0.8})  # fmt: skip
    ax.set_xlabel("x (units of ‖θ_B − θ_A‖ along B − A)")
    ax.set_ylabel("y (units of ‖θ_B − θ_A‖, towards C)")
    finish_axes(ax)
    ax.grid(False)
    ax.legend(fontsize=7, loc="lower right")
    return filled


def plane_figure(plane: PlaneResult, title: str = "") -> Any:
    """A two-panel figure of the plane: loss (nats) and accuracy (fraction) contours
    (:func:`draw_plane`) with colour bars."""
    from .figures import new_figure

    fig, axes = new_figure(1, 2, panel=(4.6, 3.8))
    for ax, metric, label in (
        (axes[0, 0], "loss", "loss (nats)"),
        (axes[0, 1], "accuracy", "accuracy (fraction)"),
    ):
        filled = draw_plane(ax, plane, metric=metric)
        fig.colorbar(filled, ax=ax, label=label, shrink=0.85)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_PLANE_POINTS",
    "PlaneBasis",
    "PlaneResult",
    "draw_plane",
    "evaluate_plane",
    "plane_figure",
    "plane_grid",
]
