"""The width study's runner (``experiment = "width"``, the default kind): expand the resolved
study (:mod:`lmc.experiments.width_settings`) into train and merge jobs
(:func:`lmc.experiments.jobs.expand`), run on the executor what is not done yet, and write the
tidy results (:func:`lmc.experiments.results.write_results`).

Finished training runs (in the run store) and finished merge jobs (``OUT/jobs/<id>.json``) are
reused, so an interrupted study resumes where it stopped and a larger grid only runs what is
new. A failed job does not stop the others; the merge jobs of its pair are skipped, and the
study ends with an ``LmcError`` naming the first failure (finished jobs are kept).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from lmc.config import LmcError
from lmc.store import RunStore, output_files

from .executors import RunOptions
from .jobs import describe, expand, is_done, load_job_result
from .kind_run import StudyRecord, load_data
from .results import OPTIONAL_RESULTS, RESULT_COLUMNS, write_results
from .table import TABLE1_COLUMNS

#: The width study's main tables (key in ``study.json``'s ``files`` -> (file, leading
#: columns)); ``layers.csv``, ``moments.json``, ``spectra.json`` and ``stitch.csv`` are written
#: beside them when the study makes them (:mod:`lmc.experiments.results`).
OUTPUTS = {
    "results": ("results.csv", RESULT_COLUMNS),
    "table1": ("table1.csv", TABLE1_COLUMNS),
}


def run_width(study: dict[str, Any], options: RunOptions) -> dict[str, Any]:
    """Run the resolved width study ``study`` into ``options.out`` (module docstring); returns
    the contents of ``study.json``."""
    out = options.out
    ctx = options.job_context()
    executor = options.executor
    record = StudyRecord(
        study,
        options,
        options.device,
        executor=executor.name,
        workers=options.workers,
        threads_per_job=options.threads,
        runs_dir=ctx.runs_dir,
    )
    data = load_data(study, options)
    train_jobs, merge_jobs = expand(study, data, _earlier_methods(record.earlier))
    del data
    record.running()

    counts = {"total": len(train_jobs) + len(merge_jobs), "reused": 0, "run": 0}
    bar = tqdm(
        total=counts["total"],
        desc="sweep",
        unit="job",
        file=sys.stderr,
        disable=options.quiet,
        dynamic_ncols=True,
    )
    failures: list[str] = []
    for phase in (train_jobs, merge_jobs):
        pending = []
        for job in phase:
            if job["type"] == "merge" and any(f.startswith(_pair_key(job)) for f in failures):
                bar.update(1)
                continue
            if is_done(job, ctx):
                counts["reused"] += 1
                bar.update(1)
            else:
                pending.append(job)
        if any(job["type"] == "train" for job in pending):
            RunStore(ctx.runs_dir).check_writable()
        for job, summary, error in executor.map(pending, ctx):
            bar.update(1)
            if error is not None:
                failures.append(f"{_pair_key(job)} {describe(job)}: {error}")
                if not options.quiet:  # the error raised at the end names the first failure
                    bar.write(f"failed: {describe(job)}: {error}", file=sys.stderr)
                continue
            counts["reused" if summary.get("reused") else "run"] += 1
            record.progress(counts)
            if not options.quiet:
                bar.write(
                    f"done: {describe(job)} ({summary['seconds']:.1f} s"
                    f"{', reused' if summary.get('reused') else ''})",
                    file=sys.stderr,
                )
    bar.close()
    if failures:
        record.failed(failures)
        raise LmcError(
            f"{len(failures)} job(s) failed; the first: {failures[0]} "
            "(fix it and re-run: finished jobs are kept)"
        )
    results = [load_job_result(job, ctx) for job in merge_jobs]
    with output_files(out, None) as stage:  # the results files replace earlier ones together
        files = {k: out / Path(v).name for k, v in write_results(stage, study, results).items()}
    for name in set(OPTIONAL_RESULTS) - {p.name for p in files.values()}:
        (out / name).unlink(missing_ok=True)  # an earlier run's, which this one did not make
    return record.finished(counts, {k: str(v.name) for k, v in files.items()})


def _earlier_methods(earlier: dict[str, Any]) -> list[list[str]]:
    """The ``[merge] methods`` list the last invocation into the folder ran with (its
    ``study.json``, ``earlier``), so merges it finished under the older id rule are found
    again."""
    try:
        methods = earlier["config"]["merge"]["methods"]
    except (KeyError, TypeError):  # no earlier record, or not one of a width study
        return []
    return [list(methods)] if isinstance(methods, list) else []


def _pair_key(job: dict) -> str:
    labels = job["labels"]
    return f"[{labels['width']}|{labels['weight_decay']}|{labels['pair']}]"
