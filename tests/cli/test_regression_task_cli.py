"""A task registered by the user runs through the CLI: a toy regression (mean squared error,
no accuracy, no calibration) registered here, a data file declaring it (float targets), two
MLPs trained on it (the registry's task gate lets the MLP serve per-example targets), then
``lmc interpolate`` (calibration refused in one line; without it the path and its loss
barriers) and ``lmc analyze`` on the two weight files (``--model-factory``, ``--data``).

``lmc train`` itself cannot take the file: its ``--data`` reads a text file, and a run's config
names a zoo dataset, so the two models are trained here
with :func:`lmc.train.fit`, as a user's own training script would."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from lmc.cli.main import main
from lmc.data.user_file import load_user_data
from lmc.metrics.barriers import loss_barrier
from lmc.models import build, resolve_options
from lmc.train import TrainSettings, fit

OPTIONS = {"width": 16, "depth": 2}


@pytest.fixture
def project(tmp_path, monkeypatch, regression_task):
    """A data file declaring the registered task, a factory of its MLP, two trained weight
    files; the working folder is ``tmp_path``."""
    task = regression_task
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(160, 4, generator=gen)
    y = torch.tanh(x @ torch.randn(4, 2, generator=gen))
    np.savez("toy.npz", x=x.numpy(), y=y.numpy(), task=np.array(task.name))
    data = load_user_data("toy.npz")
    assert data.task == task.name
    options = resolve_options("mlp", OPTIONS, input_shape=data.input_shape,
                              num_classes=data.num_classes, task=data.task)  # fmt: skip
    (tmp_path / "factory.py").write_text(
        f"from lmc.models import build\n\n\ndef make():\n    return build('mlp', **{options!r})\n"
    )
    settings = TrainSettings(epochs=4, batch_size=30, lr=0.05, weight_decay=0.0)
    for seed in (0, 1):
        model = build("mlp", seed=seed, **options)
        history = fit(model, data, settings)
        assert history[-1]["train_loss"] < history[0]["train_loss"]
        assert history[-1]["test_accuracy"] is None
        save_file(model.state_dict(), f"m{seed}.safetensors")
    yield data, ["m0.safetensors", "m1.safetensors", "--model-factory", "factory.py:make",
                 "--data", "toy.npz", "--device", "cpu", "--quiet"]  # fmt: skip


def test_interpolate_refuses_calibration_in_one_line(project, capsys):
    _, base = project
    assert main(["interpolate", *base, "--lambdas", "3", "--calibrate"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "calibrating the path has no meaning for the toy-regression task" in captured.err
    assert "--no-calibrate" in captured.err


def test_interpolate_without_calibration(project, capsys):
    data, base = project
    assert main(["interpolate", *base, "--lambdas", "3", "--no-calibrate", "--out", "ip"]) == 0
    summary = json.loads(open("ip/summary.json").read())
    assert summary["accuracy"] is None and summary["accuracy_barrier"] is None
    assert summary["calibrated_loss_barrier"] is None
    assert summary["loss_barrier"] == loss_barrier(summary["lambdas"], summary["loss"])
    assert math.isfinite(summary["loss_barrier"]) and summary["num_examples"] == len(data.y_test)


def test_analyze_runs_on_the_regression_models(project, capsys):
    data, base = project
    assert main(["analyze", *base, "--json"]) == 0
    layers = json.loads(capsys.readouterr().out)["layers"]
    assert [r["kind"] for r in layers][-1] == "logits"
    assert {r["lam"] for r in layers} == {0.5}
    assert all(math.isfinite(r["llfc_cosine"]) for r in layers)
