import json

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build
from lmc.store import (
    atomic_path,
    load_run,
    load_tensors,
    save_tensors,
    write_json,
)


def test_saved_run_loads_back_without_pickle(tmp_path, save_untrained, run_config):
    run = save_untrained(tmp_path)
    model = build("mlp", seed=0, **run_config["model_options"])  # the model saved
    loaded = load_run(run.path)
    assert loaded.config == run_config
    assert loaded.metrics["status"] == "finished"
    rebuilt = loaded.build_model()
    assert not rebuilt.training
    x = torch.randn(3, 64)
    assert torch.equal(rebuilt(x), model.eval()(x))
    assert json.loads((run.path / "config.json").read_text()) == run_config


def test_truncated_checkpoint_is_a_clear_error(tmp_path, save_untrained):
    run = save_untrained(tmp_path)
    path = run.path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(LmcError, match="model.safetensors is damaged: 100 bytes"):
        load_run(run.path).state_dict()
    (run.path / "manifest.json").unlink()  # a run from before manifests: safetensors says it
    metrics = json.loads((run.path / "metrics.json").read_text())
    del metrics["manifest"]
    (run.path / "metrics.json").write_text(json.dumps(metrics))
    with pytest.warns(UserWarning, match="no manifest.json"):
        loaded = load_run(run.path)
    with pytest.raises(LmcError, match="corrupt or truncated"):
        loaded.state_dict()


def test_garbage_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"\x80\x04not a safetensors file at all")
    with pytest.raises(LmcError, match="corrupt"):
        load_tensors(path)


def test_not_a_run_folder(tmp_path):
    with pytest.raises(LmcError, match="does not exist"):
        load_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LmcError, match="no config.json"):
        load_run(tmp_path / "empty")


def test_corrupt_config_json_is_a_clear_error(tmp_path, save_untrained):
    run = save_untrained(tmp_path)
    (run.path / "config.json").write_text("{broken")
    with pytest.raises(LmcError, match="config.json is damaged"):
        load_run(run.path)
    (run.path / "manifest.json").unlink()
    with pytest.raises(LmcError, match="not valid JSON"):
        load_run(run.path)


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert json.loads(target.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_tensor_round_trip(tmp_path):
    tensors = {"w": torch.randn(3, 4), "i": torch.arange(5)}
    save_tensors(tmp_path / "t.safetensors", tensors)
    back = load_tensors(tmp_path / "t.safetensors")
    assert all(torch.equal(tensors[k], back[k]) for k in tensors)


def test_written_files_get_the_usual_permissions(tmp_path):
    import os

    mask = os.umask(0o022)
    try:
        write_json(tmp_path / "x.json", {})
    finally:
        os.umask(mask)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o644
