"""A task is one record: a toy regression task (mean squared error, no accuracy, no
calibration) registered here runs through training, path evaluation and the layerwise
analysis without any change to lmc, and calibration is refused clearly."""

from __future__ import annotations

import math

import pytest
import torch

from lmc.analysis import layerwise, stitching_errors
from lmc.config import LmcError
from lmc.data import Dataset
from lmc.data.tasks import Task
from lmc.metrics import evaluate_path, fit_inverse_temperature
from lmc.metrics.ece import classification_metrics, expected_calibration_error
from lmc.models import build
from lmc.train import TrainSettings, fit
from lmc.train.evaluate import evaluate

IN, OUT = 4, 2


@pytest.fixture
def task(regression_task):
    return regression_task


def _data(task: Task) -> Dataset:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(IN, OUT, generator=gen)
    x = torch.randn(160, IN, generator=gen)
    y = torch.tanh(x @ weight)
    return Dataset(
        name="toy-regression",
        x_train=x[:128],
        y_train=y[:128],
        x_test=x[128:],
        y_test=y[128:],
        num_classes=OUT,
        input_shape=(IN,),
        mean=(0.0,) * IN,
        std=(1.0,) * IN,
        augment=False,
        task=task.name,
    )


def _trained(data: Dataset, seed: int):
    torch.manual_seed(seed)
    model = build("mlp", seed=seed, input_size=IN, num_classes=OUT, width=16, depth=2)
    settings = TrainSettings(epochs=4, batch_size=32, lr=0.05, weight_decay=0.0, precision="fp32")
    return model, fit(model, data, settings)


def _mse(model, x, y) -> float:
    with torch.no_grad():
        return float(((model(x).double() - y.double()) ** 2).mean())


def test_a_regression_task_trains_evaluates_and_is_analysed(task):
    data = _data(task)
    model_a, history = _trained(data, 0)
    model_b, _ = _trained(data, 1)
    # training asks the task: the loss is the MSE, there is no accuracy
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["train_accuracy"] is None and history[-1]["test_accuracy"] is None
    assert history[-1]["test_loss"] == pytest.approx(_mse(model_a, data.x_test, data.y_test))
    scores = evaluate(model_a, data.x_test, data.y_test, task=task)
    assert scores["accuracy"] is None
    assert scores["loss"] == pytest.approx(_mse(model_a, data.x_test, data.y_test), rel=1e-12)

    # the path: calibration has no meaning for a regression and is refused, in words
    x, y = data.x_test, data.y_test
    with pytest.raises(LmcError, match="calibrat.*no meaning for the toy-regression task"):
        evaluate_path(model_a, model_b, x, y, 3, calibrate=True, task=task)
    path = evaluate_path(model_a, model_b, x, y, 3, calibrate=False, task=task)
    assert path.lambdas == [0.0, 0.5, 1.0]
    assert path.accuracy is None and path.ensemble_accuracy is None
    assert path.loss[0] == pytest.approx(_mse(model_a, x, y), rel=1e-6)
    assert path.loss[-1] == pytest.approx(_mse(model_b, x, y), rel=1e-6)
    with torch.no_grad():
        mid = (model_a(x) + model_b(x)) / 2
    assert path.ensemble_loss[1] == pytest.approx(
        float(((mid.double() - y.double()) ** 2).mean()), rel=1e-6
    )
    assert all(math.isfinite(v) for v in path.loss)

    # calibration, the ECE and stitching (an error rate) are refused for it too
    with torch.no_grad():
        out = model_a(x)
    for call in (
        lambda: fit_inverse_temperature(out, y, task=task),
        lambda: expected_calibration_error(out, y, task=task),
        lambda: classification_metrics(out, y, task=task),
    ):
        with pytest.raises(LmcError, match="no meaning for the toy-regression task"):
            call()
    with pytest.raises(LmcError, match="toy-regression task has no accuracy"):
        stitching_errors(model_a, model_b, data)

    # the layerwise analysis does not depend on the task: it runs on the regression's models
    records = layerwise(model_a, model_b, x, [0.0, 0.5])
    at_a = [r for r in records if r["lam"] == 0.0]
    assert [r["kind"] for r in at_a][-1] == "logits"
    for r in at_a:  # θ(0) is A: LLFC's target is f_A itself
        assert r["llfc_cosine"] == pytest.approx(1.0, abs=1e-9)
