"""One pair end to end along a curve as well as the line: align, evaluate the line, fit the
curve's control point on the training split, evaluate the curve on the same grid with the same
calibration, and the loss landscape on the plane through A, B and θ_C.

``lmc curve`` and a study's merge job with ``[merge] paths`` call these, so a curve's numbers
are the same wherever it is fitted from.

>>> result = curve_pair(model_a, model_b, data, "bezier", PairSettings(align="weight"))
>>> result.line.path.barriers(), result.curve.path.barriers()   # side by side, t in λ's place
>>> write_curve_pair(result, "out/")   # curve.csv, summary.json, path.png, plane.png, control/

Conventions (docs/science.md, "Curves between two models"): t = 0 is A, t = 1 is B (aligned
to A first when asked), t plays λ's role in every per-point number and barrier; the curve's
rows carry its kind (``bezier``, ``chain``) where the line's carry ``line`` (``interpolation``
in ``curve.csv``, as ``lmc interpolate`` writes it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from lmc.config import LmcError
from lmc.data import Dataset
from lmc.merge import CurveFit, CurveSettings, endpoint_record, fit_curve, load_curve, save_curve
from lmc.merge.curves import Curve, curve_merge_fn, get_path_kind
from lmc.metrics import PathResult
from lmc.metrics.curve_path import evaluate_curve
from lmc.metrics.plane import DEFAULT_PLANE_POINTS, PlaneResult, evaluate_plane
from lmc.store import CONFIG_FILE, Run, RunStore, jsonable, write_json

from .pipeline import PairResult, evaluation_examples, run_pair
from .settings import PairSettings


@dataclass
class CurveResult:
    """One curve of a pair: its ``kind``, the ``curve`` (endpoints as measured: B aligned to
    A when asked; control point θ_C), its ``path`` (a :class:`lmc.metrics.PathResult` along t,
    ``path.path`` the kind), ``fit`` (the :class:`lmc.merge.CurveFit`; ``None`` when the
    control point was reused from ``run``), ``run`` (the stored control point, or ``None``
    until written), ``reused``, ``plane`` (the landscape through A, B, θ_C, or ``None``;
    ``plane_error`` says why when it could not be drawn), ``analysis`` (the layerwise
    analysis at points of the curve, when asked) and ``config`` (the control point's run
    config, :func:`pair_curve_config`)."""

    kind: str
    curve: Curve
    path: PathResult
    settings: CurveSettings
    config: dict[str, Any] = field(default_factory=dict)
    fit: CurveFit | None = None
    run: Run | None = None
    reused: bool = False
    plane: PlaneResult | None = None
    plane_error: str | None = None
    analysis: Any = None

    @property
    def bend_distance(self) -> float:
        """‖θ_C − (θ_A + θ_B)/2‖ / ‖θ_A − θ_B‖ (:meth:`lmc.merge.Curve.bend_distance`)."""
        return self.curve.bend_distance()

    def record(self) -> dict[str, Any]:
        """What a study's merge job keeps of the curve (JSON-ready but for NaN): ``path``
        (the path's :meth:`PathResult.to_dict`), ``barriers``, ``bend_distance``, the
        ``settings``, the fit's ``history``, ``control_run`` and ``reused``."""
        return {
            "kind": self.kind,
            "path": self.path.to_dict(),
            "barriers": self.path.barriers(),
            "bend_distance": self.bend_distance,
            "settings": self.settings.to_dict(),
            "history": self.fit.history if self.fit is not None else _history(self.run),
            "control_run": str(self.run.path) if self.run is not None else None,
            "reused": self.reused,
        }


@dataclass
class CurvePairResult:
    """:func:`curve_pair`'s answer: ``line`` (the :class:`PairResult` of
    :func:`lmc.pair.run_pair`: the line's path, the alignment) and ``curve`` (its
    :class:`CurveResult`)."""

    line: PairResult
    curve: CurveResult


def _history(run: Run | None) -> list[dict[str, Any]]:
    return list((run.metrics or {}).get("history") or []) if run is not None else []


def _measured(pair: PairResult) -> tuple[Any, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(model A, A's state, B's state) between which ``pair``'s line was measured."""
    if pair.models is None:
        raise LmcError("this PairResult does not hold its models: make it with lmc.pair.run_pair")
    model_a, model_b = pair.models
    state_b = pair.state_b if pair.state_b is not None else model_b.state_dict()
    return model_a, model_a.state_dict(), state_b


def pair_curve_config(
    pair: PairResult,
    settings: CurveSettings,
    task: Any = "classification",
    *,
    a: Mapping[str, Any] | None = None,
    b: Mapping[str, Any] | None = None,
    model: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    dataset: str | None = None,
    dataset_options: Mapping[str, Any] | None = None,
    form: str | None = None,
) -> dict[str, Any]:
    """The config of the control point of a curve between ``pair``'s endpoints
    (:func:`lmc.merge.curve_config`): the endpoints' records ``a`` and ``b`` (e.g.
    :func:`lmc.merge.endpoint_record` of two runs; default ``{"name": "A"}``/``"B"``) with
    the digest of each state as measured (``state_sha256``: B as aligned to A, so
    :func:`lmc.merge.load_curve` refuses other weights) and B's alignment (``align``, its
    settings and seed, ``widen``). ``model``/``model_options``: the zoo architecture of the
    measured models (``None`` when they are not zoo models); ``form``: ``"canonical"`` when
    the measured models are the canonical form of that architecture (the config gets
    ``"form"``, as a canonical-form merge's has; :func:`same_architecture`)."""
    from lmc.merge import curve_config
    from lmc.merge.curves import state_digest

    _, state_a, state_b = _measured(pair)
    ps = pair.settings
    record_a = {**(a or {"name": "A"}), "state_sha256": state_digest(state_a)}
    record_b = {
        **(b or {"name": "B"}),
        "align": ps.align,
        "align_options": dict(ps.align_options),
        "align_examples": ps.align_examples,
        "align_seed": ps.seed,
        "widen": ps.widen,
        "state_sha256": state_digest(state_b),
    }
    config = curve_config(
        settings, a=record_a, b=record_b, task=task, model=model, model_options=model_options,
        dataset=dataset, dataset_options=dataset_options,
    )  # fmt: skip
    if form is not None:
        from lmc.merge.many import FORM_KEY

        config[FORM_KEY] = form
    return config


def fit_pair_curve(
    pair: PairResult,
    data: Dataset,
    settings: CurveSettings,
    *,
    plane: int | None = DEFAULT_PLANE_POINTS,
    store: RunStore | None = None,
    describe: Mapping[str, Any] | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    analysis_lambdas: Sequence[float] | None = None,
    quiet: bool = True,
) -> CurveResult:
    """Fit and evaluate a curve between the endpoints ``pair``'s line was measured between.

    The control point is trained on ``data``'s training split (:func:`lmc.merge.fit_curve`,
    ``settings``). Its config is :func:`pair_curve_config` with ``describe`` (the endpoints'
    records, the architecture and data); with ``store`` a control point stored for that config
    is reused (:func:`lmc.merge.load_curve`), else the fitted one is stored there
    (checkpoints in its run folder, so an interrupted fit resumes). The curve is evaluated
    with the line's :class:`lmc.metrics.PathSettings` (the same grid, read as t, and
    calibration; REPAIR, defined for the line only, becomes a reset) on the same examples.
    ``plane``: grid points per side of the landscape through A, B, θ_C (``None`` or 0: none).
    ``analysis_lambdas``: also the layerwise analysis at these t of the curve
    (:func:`lmc.merge.curves.curve_merge_fn` as :func:`lmc.analysis.analyze`'s ``merge_fn``).
    """
    kind = get_path_kind(settings.kind).name
    ps = pair.settings
    if ps.path is None:
        raise LmcError("a curve is evaluated like the line: the pair's settings need a path")
    model_a, state_a, state_b = _measured(pair)
    x, y = evaluation_examples(data, ps)
    config = pair_curve_config(pair, settings, data.task, **(describe or {}))
    run, fit, reused = None, None, False
    if store is not None:  # a damaged stored control point is said so and fitted again
        run = store.find_or_reopen(config, "fitting")
    if run is not None:
        curve = load_curve(run, state_a, state_b)
        reused = True
    else:
        if store is not None and checkpoint_dir is None:
            # the run's folder keeps the checkpoints, its config written first (as training
            # does), so the stored run replaces it as an earlier lmc output
            checkpoint_dir = store.path_for(config)
            Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
            write_json(Path(checkpoint_dir) / CONFIG_FILE, config)
        fit = fit_curve(
            model_a, None, data.x_train, data.y_train, settings, state_b=state_b,
            task=data.task, quiet=quiet, checkpoint_dir=checkpoint_dir,
        )  # fmt: skip
        curve = fit.curve
        if store is not None:
            run = save_curve(fit, config, store=store)
    path_settings = ps.path if ps.path.bn != "repair" else replace(ps.path, bn="reset")
    path = evaluate_curve(
        curve, model_a, x, y, path_settings, bn_inputs=data.x_train, task=data.task
    )
    result = CurveResult(kind, curve, path, settings, config, fit=fit, run=run, reused=reused)
    if plane:
        try:
            result.plane = evaluate_plane(
                model_a, curve.state_a, curve.state_b, curve.control, x, y, num=plane,
                task=data.task, bn=path_settings.bn, bn_inputs=data.x_train, seed=ps.seed,
                labels={"A": "A", "B": "B", "C": f"θ_C ({kind})"}, curve=kind,
            )  # fmt: skip
        except LmcError as exc:  # e.g. a control point on the line: no plane
            result.plane_error = str(exc)
    if analysis_lambdas:
        from lmc.analysis import analyze

        result.analysis = analyze(
            model_a, pair.models[1], x, list(analysis_lambdas), state_b=state_b,
            merge_fn=curve_merge_fn(kind, curve.control, model_a, bn=path_settings.bn,
                                    train_inputs=data.x_train),
            quiet=quiet,
        )  # fmt: skip
    return result


def curve_pair(
    model_a: Any,
    model_b: Any,
    data: Dataset,
    kind: str = "bezier",
    settings: PairSettings | None = None,
    curve: CurveSettings | None = None,
    *,
    plane: int | None = DEFAULT_PLANE_POINTS,
    store: RunStore | None = None,
    describe: Mapping[str, Any] | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    quiet: bool = True,
) -> CurvePairResult:
    """The line and a curve of ``kind`` (``bezier`` or ``chain``) between two models, side by
    side: :func:`lmc.pair.run_pair` (``settings``: the alignment of B to A, the path's grid
    and calibration, ...) then :func:`fit_pair_curve` (``curve``: how θ_C is trained, its
    ``kind`` set to ``kind``; ``store``, ``describe``, ``plane`` as there). When the pair is
    measured in another form than the given models' (canonical forms of ``orthogonal``, a
    widened pair), the config names that form (:func:`same_architecture`). Neither model is
    changed."""
    kind = get_path_kind(kind).name
    settings = settings or PairSettings()
    if settings.baseline_only:
        raise LmcError("a curve is fitted between A and B: baseline_only has no curve")
    curve = replace(curve, kind=kind) if curve is not None else CurveSettings(kind=kind)
    line = run_pair(model_a, model_b, data, settings, quiet=quiet)
    describe = same_architecture(line, model_a, describe)
    result = fit_pair_curve(
        line, data, curve, plane=plane, store=store, describe=describe,
        checkpoint_dir=checkpoint_dir, quiet=quiet,
    )  # fmt: skip
    return CurvePairResult(line, result)


def runs_description(run_a: Run, run_b: Run) -> dict[str, Any]:
    """What a curve's control point records of two stored runs: each endpoint
    (:func:`lmc.merge.endpoint_record`), and A's model and dataset with their options."""
    config = run_a.config
    return {
        "a": endpoint_record(run_a),
        "b": endpoint_record(run_b),
        **{
            key: config.get(key) for key in ("model", "model_options", "dataset", "dataset_options")
        },
    }


def same_architecture(
    pair: PairResult, model_a: Any, describe: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``describe`` naming the architecture ``pair`` was measured in, so that the stored
    control point loads (:func:`lmc.merge.many.build_run_model`): when the pair was measured
    between other models than ``model_a`` (a canonical alignment's canonical forms, a widened
    pair), a zoo model's ``model``/``model_options`` become the measured model's (the wider
    run's for a widened pair) with ``"form": "canonical"``; a model outside the zoo leaves
    ``model``/``model_options`` unset. An endpoint already in the canonical form keeps the
    ``form`` its describe gives (``lmc curve`` passes a canonical-form run's)."""
    out = dict(describe or {})
    if pair.models is None or pair.models[0] is model_a:
        return out
    from lmc.merge.many import CANONICAL_FORM
    from lmc.perm.symmetries.canonical_form import is_canonical, unwrap

    measured = pair.models[0]
    spec = getattr(unwrap(measured)[0], "lmc_spec", None) or getattr(measured, "lmc_spec", None)
    if out.get("model") is None or not spec:
        out.update(model=None, model_options=None)
        return out
    out.update(model=spec["name"], model_options=dict(spec["options"]))
    try:
        canonical = is_canonical(measured)
    except LmcError:  # no stream layout to read: the measured model as it is
        canonical = False
    if canonical:
        out["form"] = CANONICAL_FORM
    return out


# ---- files ---------------------------------------------------------------------------------
CONTROL_FOLDER = "control"
CURVE_FIGURE, PLANE_FIGURE = "path.png", "plane.png"


def curve_summary(result: CurvePairResult, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON object ``lmc curve --json`` prints and ``summary.json`` holds: the line's keys
    exactly as ``lmc interpolate --json`` has them (:func:`lmc.pair.summary`: the per-λ
    curve, barriers, calibration, alignment ``align``/``align_info``, ``split``, ``seed``,
    ``baseline``, ``stitch_errors``), then ``path`` (``"line"``: the kind those keys
    describe), ``kind`` (the curve's), ``curve`` (the curve's per-t numbers, barriers and
    calibration, :func:`lmc.pair.path_summary`, with its ``path`` kind; ``lambdas`` are its
    t), ``bend_distance`` (‖θ_C − (θ_A + θ_B)/2‖ / ‖θ_A − θ_B‖), ``curve_settings``, ``fit``
    (``history``: per epoch ``train_loss``, the mean training loss along the curve in nats,
    ``lr``, ``seconds``; ``epochs_done``, ``steps_per_epoch``, ``wall_seconds``,
    ``resumed_from_epoch``; ``null`` when the control point was reused), ``control_run`` (the
    stored control point's run folder), ``reused``, ``plane`` (the landscape through A, B,
    θ_C: ``xs``, ``ys``, ``loss``, ``accuracy``, ``points``, ``norm_ab``, ...; ``null`` when
    not evaluated, ``plane_error`` saying why), and ``meta`` (runs, model, dataset,
    environment, out) at the top level."""
    from .output import path_summary, summary

    line, curve = result.line, result.curve
    fit = curve.fit
    out = summary(line)
    out.update(
        path=line.path.path,
        kind=curve.kind,
        curve={"path": curve.path.path, **path_summary(curve.path)},
        bend_distance=curve.bend_distance,
        curve_settings=curve.settings.to_dict(),
        fit=None
        if fit is None
        else {
            "history": fit.history,
            "epochs_done": fit.epochs_done,
            "steps_per_epoch": fit.steps_per_epoch,
            "wall_seconds": fit.seconds,
            "resumed_from_epoch": fit.resumed_from_epoch,
        },
        control_run=str(curve.run.path) if curve.run is not None else None,
        reused=curve.reused,
        plane=curve.plane.to_dict() if curve.plane is not None else None,
        plane_error=curve.plane_error,
    )
    out.update(meta or {})
    return jsonable(out)


def curve_pair_csv(result: CurvePairResult) -> str:
    """``curve.csv``: :func:`lmc.pair.curve_csv`'s rows of the line (``interpolation``) and
    any baseline, then one row per t of the curve (``path`` its kind)."""
    from .output import curve_csv

    return curve_csv(result.line, [(result.curve.kind, result.curve.path)])


def curve_path_figure(line: PathResult, curve: PathResult, title: str = "") -> Any:
    """Loss (nats) and accuracy (fraction) against t of the line (dashed) and the curve
    (solid), two panels, A at the left."""
    from lmc.metrics.figures import draw_path_curves, new_figure

    fig, axes = new_figure(1, 2, panel=(5.0, 4.0))
    for ax, metric in ((axes[0, 0], "loss"), (axes[0, 1], "accuracy")):
        draw_path_curves(ax, curve, metric, suffix=f" ({curve.path})")
        draw_path_curves(ax, line, metric, linestyle="--", suffix=" (line)", endpoints=False)
        ax.set_xlabel("λ for the line, t for the curve (0: A, 1: B)")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def write_curve_pair(
    result: CurvePairResult,
    out: str | os.PathLike,
    summary_data: dict[str, Any] | None = None,
    *,
    figures: bool = True,
    title: str = "",
) -> list[Path]:
    """Write the pair's files into folder ``out`` (replaced whole; nothing left on failure):
    ``curve.csv`` (:func:`curve_pair_csv`), ``summary.json`` (``summary_data``, default
    :func:`curve_summary`), ``path.png``/``.svg`` (line and curve), ``plane.png``/``.svg``
    (when the plane was evaluated) and, when the control point was not stored in a run store,
    ``control/`` (a run folder: :func:`lmc.merge.save_curve` with the curve's config).
    Returns the paths written."""
    from lmc.metrics.figures import save_figure
    from lmc.metrics.plane import plane_figure
    from lmc.store import output_dir, write_text

    from .output import FIGURE_FORMATS, OUTPUT_MARKS, SUMMARY_FILE

    out = Path(out)
    data = curve_summary(result, {"out": str(out)}) if summary_data is None else summary_data
    curve = result.curve
    names: list[str] = []
    with output_dir(out, replaces=OUTPUT_MARKS) as tmp:
        write_text(tmp / "curve.csv", curve_pair_csv(result))
        names.append("curve.csv")
        if figures:
            fig = curve_path_figure(result.line.path, curve.path, title)
            names += [p.name for p in save_figure(fig, tmp / CURVE_FIGURE, FIGURE_FORMATS)]
            if curve.plane is not None:
                fig = plane_figure(curve.plane, title)
                names += [p.name for p in save_figure(fig, tmp / PLANE_FIGURE, FIGURE_FORMATS)]
        if curve.run is None:
            if curve.fit is None:
                raise LmcError("write_curve_pair needs the curve's fit to store θ_C")
            save_curve(curve.fit, curve.config, folder=tmp / CONTROL_FOLDER)
            names.append(CONTROL_FOLDER)
        write_json(tmp / SUMMARY_FILE, data)
        names.append(SUMMARY_FILE)
    return [out / name for name in names]


__all__ = [
    "CONTROL_FOLDER",
    "CurvePairResult",
    "CurveResult",
    "curve_pair",
    "curve_pair_csv",
    "curve_path_figure",
    "curve_summary",
    "fit_pair_curve",
    "pair_curve_config",
    "same_architecture",
    "write_curve_pair",
]
