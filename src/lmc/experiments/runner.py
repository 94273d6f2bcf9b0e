"""Run a study: the runner of its kind (:mod:`lmc.experiments.kinds`) into its output folder,
or each variant of a study with variants, then their index."""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from lmc.config.precision import training_device
from lmc.store import made_folder, write_json, write_text

from .cells import read_csv
from .executors import RunOptions
from .kind_run import holds_finished_jobs, now_utc
from .kinds import experiment_of, get_kind
from .results import write_csv
from .variants import variant_rows

#: The record of a study with variants, in its output folder (its variants in subfolders).
VARIANTS_FILE = "variants.json"

__all__ = ["VARIANTS_FILE", "RunOptions", "holds_finished_jobs", "now_utc", "run_study"]


def run_study(
    study: dict[str, Any],
    out_dir: str | Path,
    options: RunOptions | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Run ``study`` (a resolved study, see :mod:`lmc.experiments.study`) into ``out_dir`` by
    its kind's runner; returns the contents of ``study.json``.

    ``options`` (:class:`RunOptions`: executor, run store, device, data, progress output,
    TensorBoard logs, the study file's text), or its fields as keywords
    (``run_study(study, out, runs_dir=..., quiet=True)``); keywords beside ``options``
    replace its fields. Finished work is reused (for a width study: training runs in the run
    store, merge jobs in ``out_dir/jobs``), so an interrupted study resumes where it stopped
    and a larger grid only runs what is new. ``log_dir``: TensorBoard events of every model
    the study trains go to ``log_dir/<run folder name>`` (none for reused runs).

    Output places are checked before any work: ``out_dir`` (and the run store, when a run is
    to be trained) must be writable folders (:func:`lmc.store.check_output_place`). A failure
    leaves nothing behind in a folder this call made, unless jobs finished there (kept, so a
    re-run resumes); the result files replace earlier ones as one unit.
    """
    out = Path(out_dir)
    options = replace(options or RunOptions(), out_dir=str(out), **settings)
    session = getattr(options.executor, "session", None)  # workers start once per study
    # precision "auto" in the runs' configs is resolved for the study's device
    with training_device(options.device), session() if session is not None else nullcontext():
        if "variants" in study:
            return _run_variants(study, options)
        kind = get_kind(experiment_of(study))
        with made_folder(out, keep=holds_finished_jobs):
            return kind.run(study, options)


def variant_table(experiment: str) -> str:
    """The file whose rows ``variants.csv`` gathers for a study of kind ``experiment``: a
    width study's ``table1.csv``, else the kind's first output (merge-many: ``models.csv``)."""
    outputs = get_kind(experiment).outputs
    return outputs["table1"][0] if "table1" in outputs else next(iter(outputs.values()))[0]


def _run_variants(study: dict[str, Any], options: RunOptions) -> dict[str, Any]:
    """Run each variant of ``study`` (:mod:`lmc.experiments.variants`) into
    ``OUT/<variant>``, then write ``variants.json`` and ``variants.csv`` (every variant's
    rows of its kind's summary table: :func:`variant_table`)."""
    out, variants = options.out, study["variants"]
    table = variant_table(experiment_of(variants[0]["study"]))  # the index holds no kind

    def keep(path: Path) -> bool:
        return any(holds_finished_jobs(path / v["name"]) for v in variants)

    each = replace(options, toml_text=None)  # the study file is kept once, beside the index
    with made_folder(out, keep=keep):
        started, wall = now_utc(), time.perf_counter()
        records = []
        for i, variant in enumerate(variants, start=1):
            if not options.quiet:
                print(f"variant {i}/{len(variants)}: {variant['name']}", file=sys.stderr)
            records.append(run_study(variant["study"], out / variant["name"], each))
        tables = [read_csv(out / v["name"] / table) for v in variants]
        keys = sorted({k for v in variants for k in v["changed"]})
        write_csv(out / "variants.csv", variant_rows(variants, tables), ["variant", *keys])
        if options.toml_text is not None:
            write_text(out / "study.toml", options.toml_text)
        record = {
            "name": study["name"],
            "description": study["description"],
            "variants": [
                {"name": v["name"], "folder": v["name"], "changed": v["changed"]} for v in variants
            ],
            "started": started,
            "finished": now_utc(),
            "wall_seconds": time.perf_counter() - wall,
            "jobs": {
                key: sum(r["jobs"][key] for r in records) for key in ("total", "reused", "run")
            },
            "status": "finished",
        }
        write_json(out / VARIANTS_FILE, record)
        return record
