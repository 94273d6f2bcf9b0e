"""Reading a results folder written by ``lmc.experiments`` (read-only; nothing is computed on
models here).

Files (see the package docstring for columns): ``results.csv`` (required), ``study.json``,
``study.toml``, ``layers.csv``, ``moments.json``, ``spectra.json``, ``table1.csv``,
``stitch.csv`` (all optional). Numbers are parsed to ``float`` (``pair`` and ``layer`` to
``int``); an empty cell, ``nan`` or ``None`` becomes NaN; a missing column reads as NaN
everywhere (every barrier of :data:`lmc.metrics.BARRIER_KEYS` is in every row, NaN in results
written before it was a column). The model's name comes from results.csv or ``study.json``,
and what its widths count from its registry entry (:attr:`Results.width_label`).
Path convention: θ(λ) = (1 − λ)θ_A + λθ_B, so ``lam`` = 0 is model A and 1 is
model B. Accuracies are fractions.

Undefined values: where a row's calibration hit the bound of its β search
(:func:`lmc.experiments.table.calibration_undefined`: the ``calibration_at_bound`` flags, or a
recorded β on the bound in results written before the flags), its inverse temperature and
calibrated loss are set to NaN as the rows are loaded, so no figure, table or mean of the report
can include them; :attr:`Results.undefined` lists those cells for the report to name.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmc.config import LmcError, read_regular_text
from lmc.experiments.cells import (  # noqa: F401  (re-exported for the figures)
    INT_COLUMNS,
    REQUIRED_RESULT_COLUMNS,
    TEXT_COLUMNS,
    coerce_row,
    is_close,
    mean_std,
    method_order,
    method_sort_key,
    number,
    read_csv,
)
from lmc.experiments.table import calibration_undefined, drop_undefined
from lmc.metrics import BARRIER_KEYS


def __getattr__(name: str) -> Any:
    # ``METHOD_ORDER``: as ``lmc.experiments.cells.METHOD_ORDER``, generated from the alignment
    # methods' records at each access
    if name == "METHOD_ORDER":
        return method_order()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Results:
    """A parsed results folder. Optional inputs that are absent are ``None``; ``notes`` lists
    optional files that were absent or unreadable (the report shows them). ``rows`` have their
    undefined calibrations dropped (module doc); ``undefined`` lists them, one dict per cell
    with ``width``, ``weight_decay``, ``method``, ``pair``, ``lam`` and ``model`` (``merged``
    for θ(λ) itself, ``ensemble`` for the ensemble (1 − λ)f_A + λf_B), in the rows' order."""

    path: Path
    rows: list[dict[str, Any]]
    study: dict[str, Any] = field(default_factory=dict)
    toml: str | None = None
    layers: list[dict[str, Any]] | None = None
    moments: list[dict[str, Any]] | None = None
    spectra: list[dict[str, Any]] | None = None
    table1_rows: list[dict[str, Any]] | None = None
    stitch: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)
    undefined: list[dict[str, Any]] = field(default_factory=list)

    # ---- the grid -------------------------------------------------------------------------
    def _distinct(self, key: str) -> list:
        return list(dict.fromkeys(r[key] for r in self.rows))

    @property
    def widths(self) -> list[float]:
        return sorted(w for w in self._distinct("width") if math.isfinite(w))

    @property
    def weight_decays(self) -> list[float]:
        """Weight decays, strongest first (the width paper's default 3e-3 before 1e-4)."""
        return sorted((w for w in self._distinct("weight_decay") if math.isfinite(w)), reverse=True)

    @property
    def methods(self) -> list[str]:
        return sorted(self._distinct("method"), key=method_sort_key)

    @property
    def pairs(self) -> list[int]:
        return sorted(self._distinct("pair"))

    @property
    def lams(self) -> list[float]:
        return sorted(v for v in self._distinct("lam") if math.isfinite(v))

    def _text(self, key: str) -> str:
        values = [v for v in self._distinct(key) if v] if self.rows and key in self.rows[0] else []
        return ", ".join(values) if values else "?"

    @property
    def dataset(self) -> str:
        return self._text("dataset")

    @property
    def model(self) -> str:
        """The model's name: the ``model`` column of results.csv, else the study's
        ``[model] name`` in ``study.json`` (results written without the column), else ``?``."""
        name = self._text("model")
        if name != "?":
            return name
        model = (self.study.get("config") or {}).get("model") if self.study else None
        given = model.get("name") if isinstance(model, dict) else None
        return given if isinstance(given, str) and given else "?"

    @property
    def split(self) -> str:
        return self._text("split")

    @property
    def bn(self) -> str:
        return self._text("bn")

    @property
    def model_entry(self) -> Any:
        """The :class:`lmc.models.ModelEntry` of :attr:`model`, or ``None`` for a name the
        registry does not know (or several models, or none recorded)."""
        from lmc.models import MODELS

        return MODELS.get(self.model)

    @property
    def width_label(self) -> str | None:
        """What a width counts, as the model's registry entry says (``hidden units per
        layer``, ``channel multiplier``, ``embedding dimension``); ``None`` when the model is
        unknown (:attr:`model_entry`), so the report says just "width"."""
        entry = self.model_entry
        return None if entry is None else entry.width_label

    @property
    def calibrated(self) -> bool:
        """Whether calibration was on: a calibrated loss was recorded or a calibration was
        undefined (every calibrated loss may be undefined on a tiny split)."""
        return bool(self.undefined) or any(
            math.isfinite(r.get("calibrated_loss", math.nan)) for r in self.rows
        )

    @property
    def calibrations(self) -> list[tuple[str, float | None]]:
        """The calibrations the rows used, in order of appearance: ``("crossfit", K)`` or
        ``("split", fraction)``; ``("split", None)`` for calibrated rows written before
        results.csv recorded the calibration (those used the 20/80 split). Empty when
        calibration was off."""
        if not self.calibrated:
            return []
        seen: dict[tuple[str, float | None], None] = {}
        for r in self.rows:
            if not any(
                math.isfinite(r.get(k, math.nan))
                for k in ("calibrated_loss", "calibration_at_bound")
            ):
                continue  # not calibrated
            folds = r.get("calibration_folds", math.nan)
            fraction = r.get("calibration_fraction", math.nan)
            if math.isfinite(folds):
                seen[("crossfit", int(folds))] = None
            elif math.isfinite(fraction):
                seen[("split", fraction)] = None
            else:
                seen[("split", None)] = None
        return list(seen)

    @property
    def num_layers(self) -> int | None:
        """L, the number of weight layers (the logits' layer index), from ``layers.csv``."""
        if not self.layers:
            return None
        layers = [r.get("layer", -1) for r in self.layers]
        top = max(layers, default=-1)
        return top if top > 0 else None

    # ---- selections -----------------------------------------------------------------------
    def select(
        self,
        *,
        weight_decay: float | None = None,
        method: str | None = None,
        width: float | None = None,
        pair: int | None = None,
        lam: float | None = None,
    ) -> list[dict[str, Any]]:
        """Rows of ``results.csv`` matching every given key (λ compared with tolerance)."""
        keys = {"weight_decay": weight_decay, "method": method, "width": width, "pair": pair}
        return _matching(self.rows, keys, lam)

    def stat(
        self, column: str, *, weight_decay: float, method: str, width: float, lam: float = 0.5
    ) -> tuple[float, float, int]:
        """(mean, sample std (ddof=1; 0 with one value), count) of ``column`` over pairs at λ,
        NaN cells skipped; (NaN, NaN, 0) when nothing is finite."""
        values = [
            r.get(column, math.nan)
            for r in self.select(weight_decay=weight_decay, method=method, width=width, lam=lam)
        ]
        return mean_std(values)

    def layer_rows(
        self,
        *,
        weight_decay: float | None = None,
        method: str | None = None,
        width: float | None = None,
        lam: float | None = None,
    ) -> list[dict[str, Any]]:
        """Rows of ``layers.csv`` matching every given key (λ compared with tolerance)."""
        keys = {"weight_decay": weight_decay, "method": method, "width": width}
        return _matching(self.layers or [], keys, lam)


def _matching(
    rows: list[dict[str, Any]], keys: dict[str, Any], lam: float | None
) -> list[dict[str, Any]]:
    """The ``rows`` equal to every value of ``keys`` that is not ``None`` and, when ``lam`` is
    given, at a λ close to it (:func:`is_close`); a row without a key does not match it."""
    wanted = {key: value for key, value in keys.items() if value is not None}
    return [
        r
        for r in rows
        if all(r.get(key) == value for key, value in wanted.items())
        and (lam is None or is_close(r.get("lam", math.nan), lam))
    ]


def _optional_json(path: Path, notes: list[str]) -> Any:
    if not path.exists():
        return None
    try:
        return json.loads(read_regular_text(path, path.name))
    except (OSError, LmcError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        notes.append(f"`{path.name}` could not be read ({exc}); it was ignored.")
        return None


def _optional_records(path: Path, notes: list[str], required: tuple[str, ...]) -> list | None:
    data = _optional_json(path, notes)
    if data is None:
        return None
    if not isinstance(data, list) or not all(
        isinstance(d, dict) and all(k in d for k in required) for d in data
    ):
        notes.append(f"`{path.name}` is not a list of records with {', '.join(required)}; ignored.")
        return None
    return data


def load_results(results_dir: str | os.PathLike) -> Results:
    """Parse a results folder. A folder without ``results.csv`` is an ``LmcError``."""
    path = Path(results_dir)
    if not path.is_dir():
        raise LmcError(f"{path} is not a folder; run `lmc sweep` first to write a results folder")
    results_csv = path / "results.csv"
    if not results_csv.exists():
        raise LmcError(f"{path} has no results.csv; run `lmc sweep` first to write one there")
    rows = read_csv(results_csv)
    undefined = _undefined_cells(rows)
    rows = [drop_undefined(r) for r in rows]
    for r in rows:  # results written before a barrier was a column: NaN there
        for key in BARRIER_KEYS:
            r.setdefault(key, math.nan)
    if not rows:
        raise LmcError(f"{results_csv} has no rows; run `lmc sweep` again to fill it")
    missing = [c for c in REQUIRED_RESULT_COLUMNS if c not in rows[0]]
    if missing:
        raise LmcError(
            f"{results_csv} lacks column(s) {', '.join(missing)}; it was not written by "
            "`lmc sweep` (re-run it)"
        )
    notes: list[str] = []
    study = _optional_json(path / "study.json", notes)
    if study is None:
        notes.append("`study.json` is absent: no config, versions or timing to show.")
        study = {}
    elif not isinstance(study, dict):
        notes.append("`study.json` is not a JSON object; ignored.")
        study = {}
    toml_path = path / "study.toml"
    toml = read_regular_text(toml_path, "study file") if toml_path.exists() else None
    layers = read_csv(path / "layers.csv") if (path / "layers.csv").exists() else None
    if layers is not None and (not layers or "layer" not in layers[0]):
        notes.append("`layers.csv` has no rows or no `layer` column; ignored.")
        layers = None
    if layers is None and not any("layers.csv" in n for n in notes):
        notes.append("`layers.csv` is absent (analysis off): layerwise figures are skipped.")
    unit_keys = ("width", "weight_decay", "pair", "layer", "name", "model")
    moments = _optional_records(path / "moments.json", notes, (*unit_keys, "values"))
    spectra = _optional_records(path / "spectra.json", notes, (*unit_keys, "singular_values"))
    stitch = read_csv(path / "stitch.csv") if (path / "stitch.csv").exists() else None
    if stitch is not None and (not stitch or "layer" not in stitch[0] or "error" not in stitch[0]):
        notes.append("`stitch.csv` has no rows or lacks `layer`/`error`; ignored.")
        stitch = None
    table1_rows = None
    if (path / "table1.csv").exists():
        table1_rows = read_csv(path / "table1.csv")
    return Results(
        path=path,
        rows=rows,
        study=study,
        toml=toml,
        layers=layers,
        moments=moments,
        spectra=spectra,
        table1_rows=table1_rows,
        stitch=stitch,
        notes=notes,
        undefined=undefined,
    )


def _undefined_cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells whose calibration is undefined (module doc), one dict per (row, model)."""
    out = []
    for r in rows:
        for flag, undefined in calibration_undefined(r).items():
            if undefined:
                out.append(
                    {
                        **{k: r.get(k) for k in ("width", "weight_decay", "method", "pair")},
                        "lam": r.get("lam"),
                        "model": "ensemble" if flag.startswith("ensemble") else "merged",
                    }
                )
    return out
