"""The registry's task gate: each model entry declares the output layouts it serves, and a
dataset's task is matched by its layout (its targets' axes), never by its name, so a
registered task with per-example targets (a regression) can use the MLP."""

from __future__ import annotations

import pytest

from lmc.config import LmcError
from lmc.data import NEXT_TOKEN, TASKS, Task, register_task
from lmc.models import MODELS, resolve_options, vector_inputs
from lmc.models.registry import ModelEntry, register_model, task_layout


@pytest.fixture
def regression():
    task = register_task(Task("toy-values", 1, "values (N, D)", calibrates=False))
    yield task
    del TASKS[task.name]


@pytest.fixture
def token_mlp():
    """A test model with per-position outputs (declared on its entry)."""
    register_model("toy-lm", width="units", default_width=8, inputs=vector_inputs,
                   outputs=("per-position",))(lambda **options: None)  # fmt: skip
    yield MODELS["toy-lm"]
    del MODELS["toy-lm"]


def test_the_zoo_declares_its_output_layouts():
    for name in ("mlp", "vgg11", "resnet20"):
        assert MODELS[name].outputs == ("per-example",)
    assert task_layout("classification") == "per-example"
    assert task_layout(NEXT_TOKEN) == "per-position"


def test_a_registered_per_example_task_can_use_the_mlp(regression):
    options = resolve_options("mlp", {"width": 8}, input_shape=(4,), num_classes=2,
                              task=regression.name)  # fmt: skip
    assert (options["input_size"], options["num_classes"]) == (4, 2)
    assert MODELS["mlp"].data_options((1, 2, 2), 3, regression) == {
        "input_size": 4,
        "num_classes": 3,
    }


def test_the_layout_is_checked_not_the_name(regression, token_mlp):
    with pytest.raises(LmcError, match="mlp: this model classifies.*next-token data.*"
                       "needs per-position outputs: train .*toy-lm on it"):  # fmt: skip
        resolve_options("mlp", input_shape=(16,), num_classes=50, task="next-token")
    assert token_mlp.data_options((16,), 50, "next-token")["input_size"] == 16
    for task in ("classification", regression.name):
        with pytest.raises(LmcError, match=f"toy-lm: this model predicts at every position.*"
                           f"{task} data.*needs per-example outputs"):  # fmt: skip
            token_mlp.data_options((16,), 50, task)
    with pytest.raises(LmcError, match="unknown task 'no-such-task'"):
        MODELS["mlp"].check_task("no-such-task")


def test_an_unknown_output_layout_is_refused_at_registration():
    with pytest.raises(ValueError, match="unknown output layout 'per-pixel'"):
        ModelEntry("x", lambda **o: None, "units", 8, vector_inputs, outputs=("per-pixel",))
