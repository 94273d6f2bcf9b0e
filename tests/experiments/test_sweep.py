"""Small real sweeps: resume after an interruption, and local vs Ray executors."""

import importlib.util

import pytest

from lmc.experiments import LocalExecutor, read_csv, resolve, run_study
from lmc.experiments.jobs import run_job
from lmc.store import read_json


@pytest.fixture
def tiny(tiny_study) -> dict:
    """The tiny study at depth 2, widths 8 and 16, two epochs, merged plain and by weight matching
    at five λ (calibrated), analysed on 128 examples."""
    return tiny_study(
        model={"depth": 2},
        sweep={"widths": [8, 16]},
        train={"epochs": 2},
        merge={"methods": ["none", "weight"], "lambdas": 5, "calibrate": None},
        analysis={"enabled": None, "max_examples": 128},
    )


class InterruptingExecutor(LocalExecutor):
    """Runs jobs in-process and raises KeyboardInterrupt after ``limit`` jobs."""

    def __init__(self, limit):
        super().__init__(workers=1)
        self.limit, self.done = limit, 0

    def map(self, jobs, ctx):
        for job in jobs:
            if self.done == self.limit:
                raise KeyboardInterrupt
            self.done += 1
            yield job, run_job(job, ctx), None


def test_interrupted_sweep_resumes_without_retraining(tmp_path, tiny):
    study = resolve(tiny)
    runs = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        run_study(
            study, tmp_path / "out", executor=InterruptingExecutor(3), runs_dir=runs, quiet=True
        )
    finished = {p: p.stat().st_mtime_ns for p in runs.glob("*/model.safetensors")}
    assert len(finished) == 3
    record = run_study(
        study, tmp_path / "out", executor=LocalExecutor(1), runs_dir=runs, quiet=True
    )
    assert record["jobs"] == {"total": 8, "reused": 3, "run": 5}
    for path, mtime in finished.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was retrained"
    rows = read_csv(tmp_path / "out" / "results.csv")
    assert len(rows) == 2 * 2 * 5  # widths x methods x lambdas
    assert {r["method"] for r in rows} == {"none", "weight"}
    again = run_study(study, tmp_path / "out", executor=LocalExecutor(1), runs_dir=runs, quiet=True)
    assert again["jobs"]["run"] == 0
    # each invocation's record keeps the earlier ones: their jobs and times add up (the
    # interrupted first one finished no merge, so its folder, record included, was removed)
    assert "history" not in record
    assert [h["status"] for h in again["history"]] == ["finished"]
    assert [h["jobs"]["run"] for h in again["history"]] == [5]
    assert again["history"][0]["wall_seconds"] == record["wall_seconds"]
    total = sum(h["wall_seconds"] for h in again["history"]) + again["wall_seconds"]
    assert again["wall_seconds_all"] == pytest.approx(total)
    assert read_json(tmp_path / "out" / "study.json")["history"] == again["history"]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_local_and_ray_executors_agree(tmp_path, tiny):
    from lmc.experiments import RayExecutor

    # one worker each: results do not depend on the number of workers (test_workers_identity),
    # and one Ray worker starts (and imports torch) once instead of twice
    study = resolve({**tiny, "merge": {"methods": ["none"], "lambdas": 5}})
    local = run_study(
        study,
        tmp_path / "local",
        executor=LocalExecutor(1),
        runs_dir=tmp_path / "runs-local",
        quiet=True,
    )
    ray = run_study(
        study,
        tmp_path / "ray",
        executor=RayExecutor(num_cpus=1),
        runs_dir=tmp_path / "runs-ray",
        quiet=True,
    )
    assert local["executor"] == "local" and ray["executor"] == "ray"
    for name in ("results.csv", "layers.csv", "table1.csv"):
        assert (tmp_path / "local" / name).read_text() == (tmp_path / "ray" / name).read_text()


def test_adding_a_method_runs_only_its_merges_and_old_job_ids_are_adopted(tmp_path, tiny):
    """Merges finished under the ids of older lmc versions (which hashed the study's methods
    list into every merge id) are reused, also when the list grows in the same invocation
    (the old list is read from the folder's study.json), and adding a method runs only its
    own merges."""
    from lmc.data import load
    from lmc.experiments import expand

    study, out, runs = resolve(tiny), tmp_path / "out", tmp_path / "runs"
    first = run_study(study, out, executor=LocalExecutor(1), runs_dir=runs, quiet=True)
    assert first["jobs"]["run"] == 8
    _, merges = expand(study, load("digits"))

    def as_an_older_version_left_it():
        for job in merges:  # every merge at its id under the old rule
            (legacy,) = job["legacy_ids"]
            assert legacy != job["id"]
            (out / "jobs" / f"{job['id']}.json").rename(out / "jobs" / f"{legacy}.json")
            (out / "pairs" / job["id"]).rename(out / "pairs" / legacy)

    as_an_older_version_left_it()
    before = (out / "results.csv").read_text()
    again = run_study(study, out, executor=LocalExecutor(1), runs_dir=runs, quiet=True)
    assert again["jobs"]["run"] == 0 and (out / "results.csv").read_text() == before
    assert all((out / "jobs" / f"{job['id']}.json").is_file() for job in merges)
    assert all((out / "pairs" / job["id"]).is_dir() for job in merges)
    as_an_older_version_left_it()
    grown = resolve({**tiny, "merge": {**tiny["merge"], "methods": ["none", "weight", "random"]}})
    more = run_study(grown, out, executor=LocalExecutor(1), runs_dir=runs, quiet=True)
    assert more["jobs"]["run"] == 2  # the two random merges; none and weight adopted
    again = run_study(grown, out, executor=LocalExecutor(1), runs_dir=runs, quiet=True)
    assert again["jobs"]["run"] == 0


def test_an_interrupted_invocation_is_kept_in_the_history_with_its_work(tmp_path, tiny):
    """Interrupted after its trainings and one merge (the folder is kept: a merge finished),
    the resumed sweep's history holds the stopped invocation, 'running', with its jobs."""
    study, runs = resolve(tiny), tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        run_study(study, tmp_path / "out", executor=InterruptingExecutor(5), runs_dir=runs,
                  quiet=True)  # fmt: skip
    stopped = read_json(tmp_path / "out" / "study.json")
    assert stopped["status"] == "running" and stopped["jobs"]["run"] == 5
    record = run_study(study, tmp_path / "out", executor=LocalExecutor(1), runs_dir=runs,
                       quiet=True)  # fmt: skip
    (earlier,) = record["history"]
    assert earlier["status"] == "running" and earlier["jobs"]["run"] == 5
    assert earlier["wall_seconds"] == stopped["wall_seconds"] > 0
    assert record["jobs"] == {"total": 8, "reused": 5, "run": 3}
    assert record["wall_seconds_all"] == pytest.approx(
        earlier["wall_seconds"] + record["wall_seconds"]
    )
