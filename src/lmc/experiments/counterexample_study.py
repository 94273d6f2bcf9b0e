"""The counterexample as a study: ``experiment = "counterexample"`` (Git Re-Basin App. A.6).

Runs :func:`lmc.experiments.counterexample.counterexample_paths` (the two hand-built perfect
solutions, the path from A to pi(B) for every permutation pi of B's hidden units) and writes

- ``paths.csv``: one row per permutation and lambda: ``permutation`` (its label, e.g.
  ``fc1=(1,0), fc2=(0,1)``; ``fc1=(0,1), fc2=(0,1)`` is the identity), ``lambda``, ``loss``
  (mean cross-entropy, nats) and ``accuracy`` (fraction) of
  theta(lam) = (1 - lam) theta_A + lam pi(theta_B);
- ``barriers.csv``: one row per permutation: ``max_minus_mean_loss`` (Git Re-Basin's barrier,
  nats), ``loss_barrier`` (Frankle et al.'s, nats), ``accuracy_barrier`` (fraction), the
  endpoints' loss and accuracy, and ``midpoint_loss`` / ``midpoint_accuracy``;
- ``study.json``: the resolved study, the environment, the timings, the job counts and the
  files; ``jobs/counterexample-<hash>.json``: the finished computation, reused on a re-run
  with the same settings.

The study file::

    name = "rebasin-counterexample"
    experiment = "counterexample"
    [counterexample]
    n = 4096          # points sampled from U([-1, 1]^2)
    seed = 0          # the points' seed
    lambdas = 21      # evenly spaced points on [0, 1], or a list (0, 1/2 and 1 always added)
    scale = 8.0       # the solutions' logit scale k (a power of two keeps the ties exact)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from lmc.config import LmcError, check_int, check_number, config_hash, environment_info
from lmc.metrics import lambda_grid
from lmc.store import made_folder, output_files, read_json, write_json, write_text

from .counterexample import SCALE, counterexample_paths
from .kind_settings import header, table, where
from .kinds import ExperimentKind, register_kind
from .results import write_csv
from .runner import holds_finished_jobs, now_utc

KIND = "counterexample"
#: key -> (allowed types, default) of the ``[counterexample]`` table.
SETTINGS: dict[str, tuple[tuple[type, ...], Any]] = {
    "n": ((int,), 4096),
    "seed": ((int,), 0),
    "lambdas": ((int, list), 21),
    "scale": ((float, int), SCALE),
}
TOP_LEVEL = ("name", "description", "experiment", KIND)
PATH_COLUMNS = ["permutation", "lambda", "loss", "accuracy"]
BARRIER_COLUMNS = [
    "permutation",
    "identity",
    "max_minus_mean_loss",
    "loss_barrier",
    "accuracy_barrier",
    "midpoint_loss",
    "midpoint_accuracy",
    "loss_a",
    "loss_b",
    "accuracy_a",
    "accuracy_b",
]


def resolve_counterexample(raw: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Check a parsed counterexample study and fill in its defaults (module docstring)."""
    name, description = header(raw, KIND, TOP_LEVEL, source)
    settings = table(raw.get(KIND, {}), SETTINGS, KIND, source)
    at = f"'{KIND}.%s'{where(source)}"
    check_int(at % "n", settings["n"], minimum=2)
    check_int(at % "seed", settings["seed"], minimum=0)
    settings["scale"] = float(check_number(at % "scale", settings["scale"], positive=True))
    try:
        lambda_grid(settings["lambdas"])
    except LmcError as exc:
        raise LmcError(f"{at % 'lambdas'}: {exc}") from None
    return {"name": name, "description": description, "experiment": KIND, KIND: settings}


def _compute(settings: dict[str, Any]) -> dict[str, Any]:
    paths = counterexample_paths(**settings)
    identity = paths[0].label  # hidden_permutations lists the identity first
    path_rows, barrier_rows = [], []
    for path in paths:
        mid = path.lambdas.index(0.5)
        for lam, loss, acc in zip(path.lambdas, path.loss, path.accuracy):
            path_rows.append(
                {"permutation": path.label, "lambda": lam, "loss": loss, "accuracy": acc}
            )
        barrier_rows.append(
            {
                "permutation": path.label,
                "identity": path.label == identity,
                "max_minus_mean_loss": path.max_minus_mean_loss,
                "loss_barrier": path.loss_barrier,
                "accuracy_barrier": path.accuracy_barrier,
                "midpoint_loss": path.loss[mid],
                "midpoint_accuracy": path.accuracy[mid],
                "loss_a": path.loss[0],
                "loss_b": path.loss[-1],
                "accuracy_a": path.accuracy[0],
                "accuracy_b": path.accuracy[-1],
            }
        )
    return {"paths": path_rows, "barriers": barrier_rows}


def run_counterexample(
    study: dict[str, Any],
    out: str | Path,
    *,
    toml_text: str | None = None,
    quiet: bool = False,
    **_unused: Any,
) -> dict[str, Any]:
    """Run a resolved counterexample study into ``out`` (module docstring); returns the
    contents of ``study.json``. The computation (seconds on a CPU) always runs on the CPU;
    the execution options of a width study (executor, device, run store) do not apply."""
    out = Path(out)
    settings = study[KIND]
    job = {"type": KIND, **settings}
    job_id = f"{KIND}-{config_hash(job)}"
    with made_folder(out, keep=holds_finished_jobs):
        started, wall = now_utc(), time.perf_counter()
        job_file = out / "jobs" / f"{job_id}.json"
        if job_file.is_file():
            result, reused = read_json(job_file, "counterexample job"), True
        else:
            begun = time.perf_counter()
            result = _compute(settings)
            result["seconds"] = time.perf_counter() - begun
            (out / "jobs").mkdir(parents=True, exist_ok=True)
            write_json(job_file, {"id": job_id, "job": job, **result})
            reused = False
        if toml_text is not None:
            write_text(out / "study.toml", toml_text)
        files = {"paths": "paths.csv", "barriers": "barriers.csv"}
        with output_files(out, list(files.values())) as stage:
            write_csv(stage / files["paths"], result["paths"], PATH_COLUMNS)
            write_csv(stage / files["barriers"], result["barriers"], BARRIER_COLUMNS)
        record = {
            "name": study["name"],
            "description": study["description"],
            "experiment": KIND,
            "config": study,
            "environment": environment_info("cpu"),
            "started": started,
            "finished": now_utc(),
            "wall_seconds": time.perf_counter() - wall,
            "jobs": {"total": 1, "reused": int(reused), "run": int(not reused)},
            "job_ids": [job_id],
            "files": files,
            "status": "finished",
        }
        write_json(out / "study.json", record)
    if not quiet:
        worst = min(row["max_minus_mean_loss"] for row in result["barriers"])
        print(
            f"{KIND}: {len(result['barriers'])} permutations, smallest barrier "
            f"{worst:.4f} nats{' (reused)' if reused else ''}",
            file=sys.stderr,
        )
    return record


COUNTEREXAMPLE = register_kind(
    ExperimentKind(
        name=KIND,
        summary="Git Re-Basin App. A.6: two perfect solutions no permutation connects",
        resolve=resolve_counterexample,
        run=run_counterexample,
    )
)
