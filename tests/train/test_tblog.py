"""lmc.train.tblog: TensorBoard scalars from fit's per-epoch hook and from sweeps."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from lmc.config import LmcError
from lmc.models import build
from lmc.train import TrainSettings, fit
from lmc.train.checkpoint import load_checkpoint, save_checkpoint
from lmc.train.tblog import EPOCH_TAGS, TensorBoardLogger, chain_hooks

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def test_logger_chained_with_checkpoints_logs_the_returned_history(tmp_path, digits):
    model = build("mlp", input_size=64, width=16, seed=0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    calls = []

    def save(epoch, model, optimizer, history):
        save_checkpoint(run_dir, epoch, model, optimizer, history)
        calls.append(("save", epoch))

    with TensorBoardLogger(tmp_path / "tb") as logger:

        def log(*args):
            logger(*args)
            calls.append(("log", args[0]))

        history = fit(model, digits, TrainSettings(epochs=2), on_epoch_end=chain_hooks(save, log))

    assert calls == [("save", 1), ("log", 1), ("save", 2), ("log", 2)]
    assert load_checkpoint(run_dir)["epoch"] == 2
    scalars = _scalars(tmp_path / "tb")
    assert set(scalars) == set(EPOCH_TAGS.values())
    assert {"train/loss", "train/accuracy", "test/loss", "test/accuracy"} <= set(scalars)
    for key, tag in EPOCH_TAGS.items():
        # TensorBoard stores float32: the logged values are the history's, rounded to float32
        expected = [(h["epoch"], float(np.float32(h[key]))) for h in history]
        assert scalars[tag] == expected, tag


def test_log_sweep_result_numbers_and_mappings(tmp_path):
    with TensorBoardLogger(tmp_path) as logger:
        logger.log_sweep_result("loss_barrier", 16, {"weight": 0.25, "none": 1.5, "ste": None})
        logger.log_sweep_result("loss_barrier", 64, {"weight": 0.125, "none": 0.75})
        logger.log_sweep_result("/test_accuracy/", 3, 0.5)
    scalars = _scalars(tmp_path)
    assert scalars == {
        "loss_barrier/weight": [(16, 0.25), (64, 0.125)],
        "loss_barrier/none": [(16, 1.5), (64, 0.75)],
        "test_accuracy": [(3, 0.5)],
    }


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("", 0, 1.0), "tag"),
        (("barrier", -1, 1.0), "step"),
        (("barrier", 1.5, 1.0), "step"),
        (("barrier", 1, {"weight": "low"}), r"values\['weight'\]"),
        (("barrier", 1, True), "values"),
    ],
)
def test_bad_sweep_results_are_one_line_errors(tmp_path, args, fragment):
    with TensorBoardLogger(tmp_path) as logger:
        with pytest.raises(LmcError, match=fragment):
            logger.log_sweep_result(*args)


def test_bad_hooks_records_and_log_dir(tmp_path):
    with pytest.raises(LmcError, match=r"hooks\[1\]"):
        chain_hooks(None, "not a hook")
    (tmp_path / "file").write_text("x")
    with pytest.raises(LmcError, match="log_dir"):
        TensorBoardLogger(tmp_path / "file")
    with TensorBoardLogger(tmp_path / "tb") as logger:
        with pytest.raises(LmcError, match="epoch"):
            logger.log_epoch({"train_loss": 1.0})
        with pytest.raises(LmcError, match="train_loss"):
            logger.log_epoch({"epoch": 1, "train_loss": "nan?"})


def test_missing_tensorboard_is_a_one_line_error_naming_the_extra(tmp_path, monkeypatch):
    # a None entry in sys.modules makes `import torch.utils.tensorboard` raise ImportError
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(LmcError, match=r"pip install 'lmc\[tensorboard\]'") as caught:
        TensorBoardLogger(tmp_path / "tb")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "tb").exists()
