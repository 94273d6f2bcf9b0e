"""The tidy results of a study, and its Table-1-style summary.

Files written into the study's output folder:
- ``results.csv`` (and ``results.parquet`` when pyarrow is installed): one row per
  (width, weight_decay, pair, method, path, lam) with the path metrics and, repeated on each row
  of a path, every barrier of :data:`lmc.metrics.BARRIER_KEYS` (docs/science.md names;
  accuracy as a fraction; the calibrated and held-out ones empty when calibration is off; a
  barrier missing from a job record written before it existed is computed from the recorded
  path). ``path`` is the path's kind (:data:`lmc.metrics.barriers.PATH_KEY`): ``line``, or
  a curve of ``[merge] paths`` (``bezier``, ``chain``; its rows' ``lam`` is t, and they add
  ``bend_distance``); a results file without the column holds lines only. Calibration:
  ``calibration`` is the one used (``split`` or ``crossfit``; empty when off),
  ``calibration_folds`` its K (crossfit) and ``calibration_fraction`` its subset share (split);
  ``calibration_at_bound`` / ``ensemble_calibration_at_bound`` are 1 where that λ's
  calibration is undefined (a β on the bound of its search), 0 where it is defined: there the
  inverse temperature and calibrated loss are empty, never the bound's value
  (:mod:`lmc.metrics.result`);
- ``layers.csv``: one row per (width, weight_decay, pair, method, lam, layer) with the
  layerwise analysis (``lmc.analysis`` record keys);
- ``moments.json`` / ``spectra.json``: per-unit root second moments and singular values of
  each layer of A and B (method ``none`` only: permutations do not change them);
- ``stitch.csv`` (``[stitch] enabled``): one row per (width, weight_decay, pair, method,
  layer) with the test error (a fraction) of the model that runs A's first ``layer`` layers
  and B's (aligned by ``method``) others, ``layers`` = L of the model, and the endpoints'
  errors ``error_a`` (layer = L) and ``error_b`` (layer = 0) repeated on each row
  (:func:`lmc.analysis.stitching_errors`, LLFC App. B.4);
- ``planes.json`` (``[merge] paths`` with a curve, ``curve_plane`` > 0): per merge job and
  curve, the loss landscape on the plane through A, B and the control point
  (:func:`plane_records`);
- ``table1.csv``: midpoint (lam = 1/2) summary per (width, weight_decay, method), mean and
  sample standard deviation over pairs, in the shape of the width paper's Table 1; undefined
  calibrations are left out of its means and counted (:func:`lmc.experiments.table.table1`).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from lmc.metrics import BARRIER_KEYS, barriers
from lmc.metrics.barriers import PATH_KEY, path_kind_of
from lmc.store import atomic_path, write_json

from .table import TABLE1_COLUMNS, UNDEFINED_WITH, table1

KEY_COLUMNS = ["width", "weight_decay", "pair", "method"]
PATH_COLUMNS = [
    "loss", "accuracy", "calibrated_loss", "inverse_temperature", "ensemble_loss",
    "ensemble_accuracy", "ensemble_calibrated_loss", "ensemble_inverse_temperature",
    "logit_norm", "heldout_loss",
]  # fmt: skip
CALIBRATION_COLUMNS = ["calibration", "calibration_folds", "calibration_fraction"]
BOUND_COLUMNS = ["calibration_at_bound", "ensemble_calibration_at_bound"]
RESULT_COLUMNS = [
    "dataset",
    "model",
    *KEY_COLUMNS,
    PATH_KEY,
    "lam",
    "split",
    "bn",
    *CALIBRATION_COLUMNS,
    "endpoint_train_loss",
    *PATH_COLUMNS,
    *BOUND_COLUMNS,
    *BARRIER_KEYS,
]
LAYER_ID_COLUMNS = [*KEY_COLUMNS, "lam", "layer", "name", "kind"]


def _keys(labels: dict[str, Any]) -> dict[str, Any]:
    """A merge job's key columns, and ``width_b`` (B's width) where the pair's widths differ
    (``sweep.width_ratio``; ``width`` is then A's)."""
    keys = {k: labels[k] for k in KEY_COLUMNS}
    if "width_b" in labels:
        keys["width_b"] = labels["width_b"]
    return keys


def _number(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else str(value)
    return value


def write_csv(path: str | Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Write rows with the given columns first (then any other keys, sorted), atomically."""
    extra = sorted({k for row in rows for k in row} - set(columns))
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*columns, *extra], extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _number(v) for k, v in row.items()})


def _calibration(path: dict[str, Any]) -> dict[str, Any]:
    """The calibration columns of a path (``PathResult.to_dict()``); a path recorded before
    ``calibration_method`` existed used the 20/80 split."""
    if not path.get("calibrate"):
        return {"calibration": None, "calibration_folds": None, "calibration_fraction": None}
    method = path.get("calibration_method") or "split"
    return {
        "calibration": method,
        "calibration_folds": path.get("calibration_folds") if method == "crossfit" else None,
        "calibration_fraction": path.get("calibration_fraction") if method == "split" else None,
    }


def _barriers(result: dict[str, Any]) -> dict[str, Any]:
    """Every barrier of :data:`lmc.metrics.BARRIER_KEYS` of one merge job: as its record has
    them; a key the record lacks (written before that barrier existed) is computed from the
    recorded path with :func:`lmc.metrics.barriers`."""
    recorded = result["barriers"]
    if all(k in recorded for k in BARRIER_KEYS):
        return {k: recorded[k] for k in BARRIER_KEYS}
    computed = barriers(result["path"])
    return {k: recorded[k] if k in recorded else computed[k] for k in BARRIER_KEYS}


def path_rows(study: dict[str, Any], result: dict[str, Any]) -> list[dict[str, Any]]:
    """One results.csv row per lam of one merge job's path, then per t of each of its curves
    (``[merge] paths``; :func:`curve_rows`).

    ``path`` is the path's kind: ``line`` for the line θ(λ) (also for a job recorded before
    curves existed), ``bezier`` or ``chain`` for a curve (``lam`` is then its t).
    ``endpoint_train_loss`` is the mean of the two endpoints' final training loss (empty for
    results written before it was recorded). Every row carries its path's barriers
    (:func:`_barriers`).

    Where a λ's calibration is undefined (listed in the path's ``calibration_at_bound`` /
    ``ensemble_calibration_at_bound``) its flag is 1 and its inverse temperature and
    calibrated loss are empty, even if the path recorded the bound's value (results written
    before undefined values became NaN)."""
    rows = _rows(study, result, result["path"], _barriers(result))
    for curve in result.get("curves") or []:
        rows += curve_rows(study, result, curve)
    return rows


def curve_rows(
    study: dict[str, Any], result: dict[str, Any], curve: dict[str, Any]
) -> list[dict[str, Any]]:
    """results.csv rows of one curve of a merge job (its record in the job's ``curves``): as
    the line's rows, with ``path`` the curve's kind, ``lam`` its t, its own barriers, and
    ``bend_distance`` (‖θ_C − (θ_A + θ_B)/2‖ / ‖θ_A − θ_B‖) on each row."""
    path = {**curve["path"], PATH_KEY: path_kind_of(curve["path"])}
    computed = barriers(path)
    recorded = curve.get("barriers") or {}
    values = {k: recorded[k] if k in recorded else computed[k] for k in BARRIER_KEYS}
    rows = _rows(study, result, path, values)
    for row in rows:
        row["bend_distance"] = curve.get("bend_distance")
    return rows


def _rows(
    study: dict[str, Any],
    result: dict[str, Any],
    path: dict[str, Any],
    path_barriers: dict[str, Any],
) -> list[dict[str, Any]]:
    """The rows of one path (``path``: a ``PathResult.to_dict()``) of a merge job."""
    labels = result["labels"]
    calibration = _calibration(path)
    kind = path_kind_of(path)
    train_losses = result.get("endpoint_train_loss") or []
    endpoint_train_loss = (
        sum(train_losses) / len(train_losses)
        if train_losses and all(isinstance(v, (int, float)) for v in train_losses)
        else None
    )
    rows = []
    for i, lam in enumerate(path["lambdas"]):
        row = {
            "dataset": study["data"]["dataset"],
            "model": study["model"]["name"],
            **_keys(labels),
            PATH_KEY: kind,
            "lam": lam,
            "split": study["data"]["split"],
            "bn": path["bn"],
            **calibration,
            "endpoint_train_loss": endpoint_train_loss,
        }
        for column in PATH_COLUMNS:
            values = path.get(column)
            row[column] = None if values is None else values[i]
        for flag, columns in UNDEFINED_WITH.items():
            if not path.get("calibrate"):
                row[flag] = None
                continue
            undefined = any(abs(lam - v) <= 1e-9 for v in path.get(flag) or [])
            row[flag] = int(undefined)
            if undefined:
                row.update(dict.fromkeys(columns))
        row.update(path_barriers)
        rows.append(row)
    return rows


def layer_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    labels = result["labels"]
    return [{**_keys(labels), **record} for record in result.get("layers", [])]


#: Results files a study writes only when its settings ask for them (a re-run that does not
#: removes an earlier run's, so a folder never mixes two runs' files).
OPTIONAL_RESULTS = (
    "layers.csv",
    "moments.json",
    "spectra.json",
    "stitch.csv",
    "planes.json",
    "results.parquet",
)
STITCH_COLUMNS = [*KEY_COLUMNS, "layer", "layers", "error", "error_a", "error_b"]


def stitch_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """stitch.csv rows of one merge job (none unless it measured stitching)."""
    errors = result.get("stitch_errors")
    if not errors:
        return []
    labels, total = result["labels"], len(errors) - 1
    return [
        {
            **_keys(labels),
            "layer": layer,
            "layers": total,
            "error": error,
            "error_a": errors[-1],
            "error_b": errors[0],
        }  # fmt: skip
        for layer, error in enumerate(errors)
    ]


def unit_records(result: dict[str, Any], field: str, key: str) -> list[dict[str, Any]]:
    """moments.json / spectra.json entries of one merge job (empty unless method none)."""
    labels = result["labels"]
    layer_of = {r["name"]: r["layer"] for r in result.get("layers", [])}
    out = []
    for name, sides in (result.get(field) or {}).items():
        for side, values in sides.items():
            out.append(
                {
                    "width": labels["width"],
                    "weight_decay": labels["weight_decay"],
                    "pair": labels["pair"],
                    "layer": layer_of.get(name),
                    "name": name,
                    "model": side,
                    key: values,
                }
            )
    return out


def plane_records(result: dict[str, Any]) -> list[dict[str, Any]]:
    """planes.json entries of one merge job: per curve with a plane, the job's key columns,
    ``path`` (the curve's kind) and ``plane`` (a :class:`lmc.metrics.plane.PlaneResult`'s
    record: the loss and accuracy on the plane through A, B and the control point)."""
    labels = result["labels"]
    return [
        {**_keys(labels), PATH_KEY: curve.get("kind"), "plane": curve["plane"]}
        for curve in result.get("curves") or []
        if curve.get("plane")
    ]


def write_results(
    out_dir: str | Path, study: dict[str, Any], results: list[dict[str, Any]]
) -> dict[str, Path]:
    """Write every results file of a study from its merge-job results; return their paths."""
    out = Path(out_dir)
    rows = [row for result in results for row in path_rows(study, result)]
    layers = [row for result in results for row in layer_rows(result)]
    paths = {"results": out / "results.csv", "table1": out / "table1.csv"}
    write_csv(paths["results"], rows, RESULT_COLUMNS)
    write_csv(paths["table1"], table1(rows), list(TABLE1_COLUMNS))
    if layers:
        paths["layers"] = out / "layers.csv"
        write_csv(paths["layers"], layers, LAYER_ID_COLUMNS)
    stitched = [row for result in results for row in stitch_rows(result)]
    if stitched:
        paths["stitch"] = out / "stitch.csv"
        write_csv(paths["stitch"], stitched, STITCH_COLUMNS)
    planes = [e for result in results for e in plane_records(result)]
    if planes:
        paths["planes"] = out / "planes.json"
        write_json(paths["planes"], planes)
    for field, key in (("moments", "values"), ("spectra", "singular_values")):
        entries = [e for result in results for e in unit_records(result, field, key)]
        if entries:
            paths[field] = out / f"{field}.json"
            write_json(paths[field], entries)
    try:
        import pyarrow
        import pyarrow.parquet as pq

        table = pyarrow.Table.from_pylist([{k: row.get(k) for k in RESULT_COLUMNS} for row in rows])
        with atomic_path(out / "results.parquet") as tmp:
            pq.write_table(table, tmp)
        paths["parquet"] = out / "results.parquet"
    except ImportError:
        pass
    return paths
