"""Tasks (lmc.data.tasks): layouts, flattening, the per-example reduction, the registry."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from lmc.config import LmcError
from lmc.data import CLASSIFICATION, NEXT_TOKEN, TASKS, Dataset, Task, get_task, register_task


def test_registry_finds_both_tasks_and_refuses_unknown_names():
    assert get_task("classification") is CLASSIFICATION and get_task(None) is CLASSIFICATION
    assert get_task("next-token") is NEXT_TOKEN and get_task(NEXT_TOKEN) is NEXT_TOKEN
    assert {"classification", "next-token"} <= set(TASKS)
    with pytest.raises(LmcError, match="unknown task 'tokens'.*next-token"):
        get_task("tokens")
    with pytest.raises(LmcError, match="already registered"):
        register_task(Task("next-token", 1))


def test_a_later_task_is_one_registration():
    task = Task("per-pixel", 3, "a label per pixel: output (N, H, W, C), target (N, H, W)")
    try:
        assert register_task(task) is task and get_task("per-pixel") is task
        out = torch.arange(2 * 2 * 3 * 4, dtype=torch.float32).reshape(2, 2, 3, 4)
        target = torch.zeros(2, 2, 3, dtype=torch.int64)
        logits, labels = task.flatten(out, target)
        assert logits.shape == (12, 4) and labels.shape == (12,)
        assert task.predictions_per_example(target) == 6
    finally:
        TASKS.pop("per-pixel", None)


def test_classification_flatten_is_the_identity():
    out, y = torch.randn(5, 3), torch.tensor([0, 2, 1, 1, 0])
    logits, labels = CLASSIFICATION.flatten(out, y)
    assert logits is out and labels is y
    assert CLASSIFICATION.flatten_stack(out[None]).shape == (1, 5, 3)
    idx = torch.tensor([3, 1])
    assert CLASSIFICATION.rows(idx, CLASSIFICATION.predictions_per_example(y)) is idx


def test_next_token_flatten_is_example_major_on_hand_made_tensors():
    # out[n, t, c] = 100 n + 10 t + c: every row says which window and position it came from
    n, t, c = 2, 3, 4
    out = (100 * torch.arange(n).view(n, 1, 1) + 10 * torch.arange(t).view(1, t, 1)
           + torch.arange(c).view(1, 1, c)).float()  # fmt: skip
    y = torch.tensor([[0, 1, 2], [3, 0, 1]])
    logits, labels = NEXT_TOKEN.flatten(out, y)
    assert logits.shape == (6, 4) and labels.tolist() == [0, 1, 2, 3, 0, 1]
    assert logits[:, 0].tolist() == [0, 10, 20, 100, 110, 120]
    stacked = NEXT_TOKEN.flatten_stack(torch.stack([out, -out]))
    assert stacked.shape == (2, 6, 4) and torch.equal(stacked[1], -logits)
    assert NEXT_TOKEN.predictions_per_example(y) == 3
    # window 1 then window 0: all three positions of each, in that order
    assert NEXT_TOKEN.rows(torch.tensor([1, 0]), 3).tolist() == [3, 4, 5, 0, 1, 2]


def test_losses_accuracy_and_per_example_reduction_exact():
    # two windows of two positions over three tokens; log-probabilities chosen by hand
    probs = [[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]], [[0.2, 0.2, 0.6], [0.25, 0.5, 0.25]]]
    logp = torch.log(torch.tensor(probs, dtype=torch.float64))
    y = torch.tensor([[0, 2], [2, 0]])
    per_token = -torch.log(torch.tensor([[0.5, 0.1], [0.6, 0.25]], dtype=torch.float64))
    torch.testing.assert_close(NEXT_TOKEN.prediction_losses(logp, y), per_token)
    per_window = NEXT_TOKEN.per_example_loss(logp, y)
    assert per_window.shape == (2,)
    torch.testing.assert_close(per_window, per_token.mean(dim=1))
    torch.testing.assert_close(NEXT_TOKEN.loss(logp, y), per_token.mean())
    torch.testing.assert_close(NEXT_TOKEN.loss(logp, y), per_window.mean())
    # argmax per position: 0, 1 | 2, 1 -> correct at (0, 0) and (1, 0)
    assert NEXT_TOKEN.correct(logp, y).tolist() == [[True, False], [True, False]]
    assert NEXT_TOKEN.accuracy(logp, y) == 0.5
    # label smoothing goes to F.cross_entropy on the flattened predictions
    smooth = NEXT_TOKEN.loss(logp, y, label_smoothing=0.1)
    assert torch.equal(smooth, F.cross_entropy(logp.reshape(4, 3), y.reshape(4),
                                               label_smoothing=0.1))  # fmt: skip


def test_classification_metrics_are_torch_s_own_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    out, y = torch.randn(7, 4, generator=gen), torch.randint(0, 4, (7,), generator=gen)
    assert torch.equal(CLASSIFICATION.loss(out, y), F.cross_entropy(out, y))
    assert torch.equal(
        CLASSIFICATION.per_example_loss(out, y), F.cross_entropy(out, y, reduction="none")
    )
    assert CLASSIFICATION.accuracy(out, y) == (out.argmax(1) == y).double().mean().item()


def test_check_refuses_layouts_that_do_not_match():
    NEXT_TOKEN.check(torch.zeros(1, 3, 5), torch.zeros(4, 3, dtype=torch.int64))
    with pytest.raises(LmcError, match=r"y must have shape \(N, T\)"):
        NEXT_TOKEN.check(torch.zeros(1, 3, 5), torch.zeros(4, dtype=torch.int64), name="y")
    with pytest.raises(LmcError, match=r"output has shape \(1, 5\).*\(N, T, C\)"):
        NEXT_TOKEN.check(torch.zeros(1, 5), torch.zeros(4, 3, dtype=torch.int64))
    with pytest.raises(LmcError, match=r"output has shape \(1, 2, 5\)"):
        NEXT_TOKEN.check(torch.zeros(1, 2, 5), torch.zeros(4, 3, dtype=torch.int64))
    with pytest.raises(LmcError, match="holds class 5 but the model has 5 classes"):
        NEXT_TOKEN.check(torch.zeros(1, 2, 5), torch.tensor([[0, 5]]))
    with pytest.raises(LmcError, match="1-D"):  # classification keeps its own messages
        CLASSIFICATION.check(torch.zeros(1, 5), torch.zeros(4, 3, dtype=torch.int64))
    with pytest.raises(LmcError, match=r"output has shape \(1, 2, 5\).*\(N, C\)"):
        CLASSIFICATION.check(torch.zeros(1, 2, 5), torch.zeros(4, dtype=torch.int64))


def test_dataset_names_its_task_and_keeps_it_when_moved():
    x, y = torch.zeros(4, 3, dtype=torch.int64), torch.zeros(4, 3, dtype=torch.int64)
    fields = dict(name="toy", x_train=x, y_train=y, x_test=x, y_test=y, num_classes=5,
                  input_shape=(3,), mean=(0.0,), std=(1.0,), augment=False)  # fmt: skip
    classification = Dataset(**{**fields, "y_train": y[:, 0], "y_test": y[:, 0]})
    assert classification.task == "classification"
    assert classification.task_spec is CLASSIFICATION
    assert "task" not in repr(classification)
    tokens = Dataset(**fields, task="next-token")
    assert tokens.task_spec is NEXT_TOKEN and tokens.to("cpu").task == "next-token"
    assert dataclasses.replace(tokens, name="other").task == "next-token"
    assert "task='next-token'" in repr(tokens)
