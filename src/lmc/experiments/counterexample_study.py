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
from functools import partial
from typing import Any

from lmc.config import LmcError, check_int, check_number, config_hash
from lmc.metrics import lambda_grid

from .counterexample import SCALE, counterexample_paths
from .executors import RunOptions
from .kind_run import StudyRecord, reuse_or_run, write_tables
from .kind_settings import header, table, where

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


#: The result tables (:mod:`lmc.experiments.kind_run`): key -> (file, leading columns).
OUTPUTS = {"paths": ("paths.csv", PATH_COLUMNS), "barriers": ("barriers.csv", BARRIER_COLUMNS)}


def run_counterexample(study: dict[str, Any], options: RunOptions) -> dict[str, Any]:
    """Run a resolved counterexample study into ``options.out`` (module docstring); returns
    the contents of ``study.json``. The computation (seconds on a CPU) always runs on the
    CPU; the other execution options (executor, device, run store) do not apply."""
    settings = study[KIND]
    job = {"type": KIND, **settings}
    job_id = f"{KIND}-{config_hash(job)}"
    record = StudyRecord(study, options, "cpu")
    record.running()
    result, reused = reuse_or_run(options.out, job_id, job, partial(_compute, settings))
    files = write_tables(
        options.out, OUTPUTS, {"paths": result["paths"], "barriers": result["barriers"]}
    )
    finished = record.finished(
        {"total": 1, "reused": int(reused), "run": int(not reused)}, files, job_ids=[job_id]
    )
    if not options.quiet:
        worst = min(row["max_minus_mean_loss"] for row in result["barriers"])
        print(
            f"{KIND}: {len(result['barriers'])} permutations, smallest barrier "
            f"{worst:.4f} nats{' (reused)' if reused else ''}",
            file=sys.stderr,
        )
    return finished
