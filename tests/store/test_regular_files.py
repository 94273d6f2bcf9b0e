"""A FIFO (or a folder, or a device) in place of any file lmc reads is refused at once.

Each reader runs in a daemon thread that must finish within a second: a reader that opened
the FIFO would block until a writer came, so a hang fails the test instead of blocking it
(the FIFO is then opened for writing to let the stuck thread go)."""

import os
import threading

import pytest
import torch

from lmc.config import LmcError, check_regular_file, open_regular, read_regular_text
from lmc.data.cifar import LAYOUTS, extract_archive, read_cifar
from lmc.data.idx import read_idx
from lmc.experiments import load_study
from lmc.models import build
from lmc.store import load_run, load_tensors, read_json, verify_run
from lmc.train.checkpoint import load_checkpoint, save_checkpoint


def _refused_within_a_second(fifo, call):
    """``call()`` must raise an LmcError naming ``fifo`` within a second."""
    outcome = {}

    def target():
        try:
            call()
            outcome["result"] = "returned"
        except BaseException as exc:  # noqa: BLE001 - the thread reports whatever it met
            outcome["result"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=1.0)
    if thread.is_alive():
        try:  # a writer unblocks the reader stuck in open()
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        pytest.fail(f"reading {fifo} did not return within a second (it waits on the FIFO)")
    error = outcome["result"]
    assert isinstance(error, LmcError), error
    assert str(fifo) in str(error) and "\n" not in str(error)
    return str(error)


def _fifo_at(path):
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def test_helper_refuses_fifo_folder_and_device(tmp_path):
    fifo = _fifo_at(tmp_path / "pipe")
    assert "FIFO" in _refused_within_a_second(fifo, lambda: open_regular(fifo, "config"))
    with pytest.raises(LmcError, match="is a folder"):
        check_regular_file(tmp_path, "study file")
    if os.path.exists("/dev/null"):
        with pytest.raises(LmcError, match="character device"):
            read_regular_text("/dev/null", "config")
    with pytest.raises(LmcError, match="no such file"):
        check_regular_file(tmp_path / "absent", "config")
    regular = tmp_path / "x.txt"
    regular.write_text("ok")
    link = tmp_path / "link"
    link.symlink_to(regular)
    assert read_regular_text(link) == "ok"  # a link to a regular file is fine


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "metrics.json"])
def test_run_files_as_fifos_are_refused(tmp_path, name, save_untrained):
    run = save_untrained(tmp_path / "runs", metrics={"x": 1})
    fifo = _fifo_at(run.path / name)

    def load_everything():
        load_run(run.path).state_dict()

    assert "FIFO" in _refused_within_a_second(fifo, load_everything)
    check = verify_run(run.path)
    assert check.status == "damaged" or name == "metrics.json"  # no metrics: unfinished


def test_manifest_and_store_readers_refuse_fifos(tmp_path, save_untrained):
    run = save_untrained(tmp_path / "runs", metrics={"x": 1})
    fifo = _fifo_at(run.path / "manifest.json")
    _refused_within_a_second(fifo, lambda: load_run(run.path))
    fifo = _fifo_at(tmp_path / "t.safetensors")
    _refused_within_a_second(fifo, lambda: load_tensors(fifo))
    fifo = _fifo_at(tmp_path / "r.json")
    _refused_within_a_second(fifo, lambda: read_json(fifo))


def test_stat_cache_as_fifo_is_ignored(tmp_path, save_untrained):
    run = save_untrained(tmp_path / "runs", metrics={"x": 1})
    _fifo_at(run.path / ".verified.json")
    state = load_run(run.path, verify=True).state_dict()  # the cache is only a cache
    assert "fc1.weight" in state


def test_checkpoint_fifos_are_refused(tmp_path, run_config):
    model = build("mlp", seed=0, **run_config["model_options"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fifo = _fifo_at(tmp_path / "checkpoint.safetensors")
    _refused_within_a_second(fifo, lambda: load_checkpoint(tmp_path))
    fifo.unlink()
    save_checkpoint(tmp_path, 1, model, optimizer, [])
    old = tmp_path / "checkpoint.safetensors"
    # an older version's checkpoint: tensors without the JSON in their metadata
    from safetensors.torch import save_file

    save_file({"model.w": torch.zeros(2)}, str(old), metadata={"epoch": "1"})
    fifo = _fifo_at(tmp_path / "checkpoint.json")
    _refused_within_a_second(fifo, lambda: load_checkpoint(tmp_path))


def test_study_idx_and_cifar_readers_refuse_fifos(tmp_path):
    fifo = _fifo_at(tmp_path / "study.toml")
    _refused_within_a_second(fifo, lambda: load_study(fifo))
    fifo = _fifo_at(tmp_path / "train-images-idx3-ubyte")
    _refused_within_a_second(fifo, lambda: read_idx(fifo))
    layout = LAYOUTS["cifar10"]
    fifo = _fifo_at(tmp_path / layout.archive)
    _refused_within_a_second(fifo, lambda: read_cifar(fifo, layout))
    _refused_within_a_second(fifo, lambda: extract_archive(fifo, tmp_path / "out"))
    folder = tmp_path / layout.folder
    folder.mkdir()
    for name in layout.files:
        (folder / name).write_bytes(b"")
    fifo = _fifo_at(folder / layout.files[0])
    _refused_within_a_second(fifo, lambda: read_cifar(folder, layout))


def _results_folder(tmp_path):
    (tmp_path / "results.csv").write_text(
        "width,weight_decay,pair,method,lam,loss\n8,0.003,0,none,0.5,1.0\n"
    )
    return tmp_path


@pytest.mark.parametrize("name", ["results.csv", "study.toml"])
def test_report_readers_refuse_fifos(tmp_path, name):
    from lmc.report.results import load_results

    fifo = _fifo_at(_results_folder(tmp_path) / name)
    _refused_within_a_second(fifo, lambda: load_results(tmp_path))


def test_report_notes_a_fifo_study_json_and_goes_on(tmp_path):
    from lmc.report.results import load_results

    fifo = _fifo_at(_results_folder(tmp_path) / "study.json")
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(r=load_results(tmp_path)), daemon=True)
    thread.start()
    thread.join(timeout=1.0)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_results waited on a FIFO study.json")
    assert any("study.json" in note and "FIFO" in note for note in outcome["r"].notes)


def test_user_data_file_as_fifo_is_refused(tmp_path):
    from lmc.data.user_file import load_user_data

    fifo = _fifo_at(tmp_path / "data.npz")
    _refused_within_a_second(fifo, lambda: load_user_data(fifo))
