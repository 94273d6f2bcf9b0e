"""What every experiment kind's runner shares (:mod:`lmc.experiments.kinds`): the study's
record ``study.json`` from start to finish, and its result tables written as one unit.

A runner (``run(study, options)``, options a :class:`lmc.experiments.executors.RunOptions`)
opens a :class:`StudyRecord` when it starts, calls :meth:`StudyRecord.running` once it knows
its jobs (``study.toml`` and a ``"running"`` record are written), and ends with
:meth:`StudyRecord.finished` (or :meth:`StudyRecord.failed`). ``study.json`` holds, in this
order: ``name``, ``description``, ``experiment`` (the kind), ``config`` (the resolved study),
``environment``, what the kind adds (executor, run store, ...), ``started``, then ``status``,
``finished``, ``wall_seconds``, ``jobs`` (``total``, ``reused``, ``run``) and ``files`` (key ->
file name in the study's folder), and whatever else the kind records (``job_ids``, ...).

A study run again into the same folder (resumed after an interruption, or grown) reuses the
finished jobs, so its own ``wall_seconds`` and ``jobs`` describe only that invocation. The
earlier invocations are kept: ``history`` lists, oldest first, each earlier record's
``started``, ``finished``, ``status``, ``wall_seconds``, ``jobs`` and how it ran (``executor``,
``workers``, ``threads_per_job``), and ``wall_seconds_all`` adds up every invocation's
``wall_seconds`` (this one's included): the study's cost from scratch, when the folder's
history starts from scratch. A width study rewrites its ``"running"`` record after every job
(:meth:`StudyRecord.progress`), so an entry of ``history`` with status ``running`` is an
invocation that was stopped, with the time and jobs it had done by its last finished job.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lmc.config import environment_info
from lmc.data import Dataset, load
from lmc.store import output_files, read_json, write_json, write_text

from .executors import RunOptions
from .results import write_csv

#: A kind's result tables: key (as in ``study.json``'s ``files``) -> (file name, the columns
#: its rows lead with; other keys follow, sorted).
Outputs = Mapping[str, tuple[str, Sequence[str]]]


def now_utc() -> str:
    """The time now, UTC, ISO 8601 to the second (what ``study.json`` records)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def holds_finished_jobs(out: Path) -> bool:
    """Whether ``out/jobs`` holds a finished job's record (a failed run keeps the folder)."""
    jobs = out / "jobs"
    return jobs.is_dir() and any(p.suffix == ".json" for p in jobs.iterdir())


class StudyRecord:
    """``study.json`` of one run of ``study`` into ``options.out`` (module docstring).
    ``device``: the device whose description the environment records; ``extra``: what the
    kind records before ``started`` (executor, workers, run store, ...)."""

    def __init__(
        self, study: dict[str, Any], options: RunOptions, device: Any, **extra: Any
    ) -> None:
        self.out = options.out
        self.toml_text = options.toml_text
        self._wall = time.perf_counter()
        self.record: dict[str, Any] = {
            "name": study["name"],
            "description": study["description"],
            "experiment": study["experiment"],
            "config": study,
            "environment": environment_info(device),
            **extra,
            "started": now_utc(),
        }
        #: the record an earlier invocation left in the folder (``{}`` when none is readable)
        self.earlier = _earlier_record(self.out / "study.json")
        self.history = _history(self.earlier)

    def _timed(self) -> dict[str, Any]:
        """The timing fields of this invocation so far, with the earlier ones (``history``)."""
        wall = time.perf_counter() - self._wall
        earlier = sum(float(h.get("wall_seconds") or 0.0) for h in self.history)
        timing: dict[str, Any] = {"wall_seconds": wall}
        if self.history:
            timing.update(history=self.history, wall_seconds_all=earlier + wall)
        return timing

    def running(self) -> None:
        """Write ``study.toml`` (the study file as given, when known) and a ``"running"``
        record."""
        if self.toml_text is not None:
            write_text(self.out / "study.toml", self.toml_text)
        self._write("running")

    def progress(self, jobs: dict[str, int]) -> None:
        """Rewrite the ``"running"`` record with the job counts and time so far (after each
        finished job), so an invocation killed midway is recorded with the work it did."""
        self._write("running", jobs=dict(jobs))

    def failed(self, failures: list[str]) -> None:
        """Write a ``"failed"`` record listing ``failures`` (one line each)."""
        self._write("failed", failures=failures)

    def _write(self, status: str, **fields: Any) -> None:
        write_json(
            self.out / "study.json", {**self.record, "status": status, **fields, **self._timed()}
        )

    def finished(self, jobs: dict[str, int], files: Mapping[str, str], **extra: Any) -> dict:
        """Write and return the ``"finished"`` record: the job counts, the files (key -> name)
        and ``extra`` (``job_ids``, ...)."""
        timed = self._timed()
        self.record.update(
            status="finished",
            finished=now_utc(),
            wall_seconds=timed.pop("wall_seconds"),
            jobs=jobs,
            files=dict(files),
            **extra,
            **timed,
        )
        write_json(self.out / "study.json", self.record)
        return self.record


#: What ``history`` keeps of an earlier invocation's record.
HISTORY_KEYS = (
    "started",
    "finished",
    "status",
    "wall_seconds",
    "jobs",
    "executor",
    "workers",
    "threads_per_job",
)


def _earlier_record(path: Path) -> dict[str, Any]:
    """The ``study.json`` an earlier invocation left at ``path``; ``{}`` when there is none
    this version can read."""
    try:
        earlier = read_json(path)
    except Exception:  # no record, or one this version cannot read
        return {}
    return earlier if isinstance(earlier, dict) and "started" in earlier else {}


def _history(earlier: dict[str, Any]) -> list[dict[str, Any]]:
    """The invocations an earlier record holds, oldest first (its own ``history``, then
    itself); none without a record."""
    if not earlier:
        return []
    past = [h for h in earlier.get("history") or [] if isinstance(h, dict)]
    return [*past, {k: earlier[k] for k in HISTORY_KEYS if k in earlier}]


def write_tables(out: Path, outputs: Outputs, rows: Mapping[str, list[dict]]) -> dict[str, str]:
    """Write each of ``outputs`` (key -> (file name, leading columns)) with ``rows[key]`` into
    ``out``, all replacing earlier ones as one unit (a failure leaves the folder as it was);
    returns ``study.json``'s ``files`` (key -> file name)."""
    files = {key: name for key, (name, _) in outputs.items()}
    with output_files(out, list(files.values())) as stage:
        for key, (name, columns) in outputs.items():
            write_csv(stage / name, rows[key], list(columns))
    return files


def reuse_or_run(
    out: Path, job_id: str, job: dict[str, Any], compute: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """``(result, reused)`` of the job ``job_id``: read from ``out/jobs/<job_id>.json`` when a
    run finished it, else ``compute()`` timed (``seconds``) and kept there, with its id and
    its job, for the next run."""
    path = out / "jobs" / f"{job_id}.json"
    if path.is_file():
        return read_json(path, "finished job"), True
    begun = time.perf_counter()
    result = compute()
    result["seconds"] = time.perf_counter() - begun
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"id": job_id, "job": job, **result})
    return result, False


def load_data(study: dict[str, Any], options: RunOptions, **where: Any) -> Dataset:
    """The dataset of the study's ``[data]`` table, read from ``options.data_dir`` (downloaded
    when ``options.download``); ``where``: e.g. ``device=``."""
    data = study["data"]
    return load(
        data["dataset"],
        data_dir=options.data_dir,
        download=options.download,
        **where,
        **data["options"],
    )
