"""A run records its task in its metrics (never in the hashed config: run names unchanged),
:attr:`lmc.store.Run.task` reads it (runs made before fall back to their dataset's
declaration), and a stored run's data are evaluated with the run's recorded task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmc.config import LmcError
from lmc.data import TASKS, Task, register_task
from lmc.store import Run, RunStore, load_run, run_name
from lmc.train.runs import load_run_data, make_config, train_run

SETTINGS = {"epochs": 1, "batch_size": 256, "lr": 0.05, "init_seed": 0, "data_seed": 0}


def test_a_run_records_its_task_outside_its_config(tmp_path):
    config = make_config("digits", "mlp", {"width": 8, "depth": 1}, **SETTINGS)
    assert "task" not in json.dumps(config)  # the name hashes what it did before
    run, reused = train_run(config, store=RunStore(tmp_path))
    assert not reused and run.name == run_name(config)
    loaded = load_run(run.path, verify=True)  # the manifest vouches for the metrics
    assert loaded.metrics["task"] == "classification" == loaded.task
    assert load_run_data(loaded).task == "classification"


def test_a_run_made_before_reads_its_datasets_declaration():
    for dataset, task in (("digits", "classification"), ("fortunes", "next-token")):
        assert Run(Path("old"), {"kind": "train", "dataset": dataset}, {}).task == task
    curve = Run(Path("c"), {"kind": "curve", "dataset": None, "task": "next-token"}, {})
    assert curve.task == "next-token"
    assert Run(Path("x"), {"kind": "aligned", "dataset": None}, {}).task == "classification"


@pytest.fixture
def relabelled():
    task = register_task(Task("toy-relabelled", 1, "a class label per example"))
    yield task
    del TASKS[task.name]


def test_evaluation_asks_the_runs_recorded_task(relabelled):
    config = {"kind": "train", "dataset": "digits", "dataset_options": {}}
    data = load_run_data(Run(Path("r"), config, {"task": relabelled.name}))
    assert data.task == relabelled.name and data.task_spec is relabelled
    assert load_run_data(Run(Path("r"), config, {})).task == "classification"
    with pytest.raises(LmcError, match="run r was trained for the task 'gone'.*not registered"):
        load_run_data(Run(Path("r"), config, {"task": "gone"}))
