"""train_run(..., log_dir=...): the TensorBoard logger is chained after the checkpoint hook and
closed at the end, also when training fails."""

from __future__ import annotations

import pytest

import lmc.train.runs as runs_module
from lmc.store import RunStore
from lmc.train import make_config, train_run
from lmc.train.tblog import TensorBoardLogger

pytest.importorskip("tensorboard")


class RecordingLogger(TensorBoardLogger):
    made: list[RecordingLogger] = []

    def __init__(self, log_dir) -> None:
        super().__init__(log_dir)
        self.epochs: list[int] = []
        self.closed = False
        RecordingLogger.made.append(self)

    def __call__(self, epoch, model, optimizer, history) -> None:
        super().__call__(epoch, model, optimizer, history)
        self.epochs.append(epoch)

    def close(self) -> None:
        super().close()
        self.closed = True


@pytest.fixture
def recording(monkeypatch):
    RecordingLogger.made = []
    monkeypatch.setattr(runs_module, "TensorBoardLogger", RecordingLogger)
    return RecordingLogger.made


def _config(digits, epochs=3):
    return make_config("digits", "mlp", {"width": 8, "depth": 1}, data=digits, epochs=epochs)


def test_logger_closed_after_training_and_checkpoint_saved_first(
    tmp_path, digits, recording, monkeypatch
):
    saved: list[int] = []
    real_save = runs_module.save_checkpoint

    def save(run_dir, epoch, *args):
        # the logger has not seen this epoch yet: the checkpoint comes first
        assert recording[0].epochs == list(range(1, epoch))
        saved.append(epoch)
        return real_save(run_dir, epoch, *args)

    monkeypatch.setattr(runs_module, "save_checkpoint", save)
    store = RunStore(tmp_path / "runs")
    config = _config(digits)
    run, reused = train_run(config, store=store, data=digits, log_dir=tmp_path / "tb")
    assert not reused and saved == [1, 2, 3]
    (logger,) = recording
    assert logger.epochs == [1, 2, 3] and logger.closed
    assert logger.log_dir == tmp_path / "tb" / run.path.name
    # reused: no logger is made
    _, reused = train_run(config, store=store, data=digits, log_dir=tmp_path / "tb")
    assert reused and len(recording) == 1


def test_logger_closed_when_training_fails(tmp_path, digits, recording, monkeypatch):
    real_save = runs_module.save_checkpoint

    def save(run_dir, epoch, *args):
        if epoch == 2:
            raise OSError(28, "No space left on device")
        return real_save(run_dir, epoch, *args)

    monkeypatch.setattr(runs_module, "save_checkpoint", save)
    with pytest.raises(OSError, match="No space"):
        train_run(_config(digits), store=RunStore(tmp_path / "runs"), data=digits, log_dir=tmp_path)
    (logger,) = recording
    assert logger.closed and logger.epochs == [1]
