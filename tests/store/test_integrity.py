"""Runs that verify themselves: the manifest, damage found on load and reuse, old runs,
configs that no longer match their folder, and checkpoints as one atomic unit."""

import hashlib
import json
import os
import time
import warnings

import pytest
import torch

import lmc.store.atomic as atomic
import lmc.store.manifest as manifest_mod
from lmc.config import LmcError, LmcWarning
from lmc.models import build
from lmc.store import DamagedRunError, RunStore, load_run, read_manifest, verify_run
from lmc.train import make_config, train_run
from lmc.train.checkpoint import load_checkpoint, save_checkpoint


def _flip_bit(path, offset=-5, keep_mtime=False):
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _make_legacy(run):
    """Turn a run into one written before manifests existed."""
    (run.path / "manifest.json").unlink()
    metrics = json.loads((run.path / "metrics.json").read_text())
    del metrics["manifest"]
    (run.path / "metrics.json").write_text(json.dumps(metrics))


def test_manifest_records_every_file_written(tmp_path, save_untrained):
    run = save_untrained(tmp_path)
    files = read_manifest(run.path)
    assert sorted(files) == ["config.json", "metrics.json", "model.safetensors"]
    for name, record in files.items():
        data = (run.path / name).read_bytes()
        assert record == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert run.verified and verify_run(run.path).status == "ok"


def test_truncated_model_is_found_on_every_load(tmp_path, save_untrained, run_config):
    run = save_untrained(tmp_path)
    path = run.path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(DamagedRunError) as err:
        load_run(run.path)
    message = str(err.value)
    assert str(path) in message and "bytes where" in message and "\n" not in message
    with pytest.raises(DamagedRunError):
        RunStore(tmp_path).find(run_config)
    assert not RunStore(tmp_path).is_finished(run_config)
    check = verify_run(run.path)
    assert check.status == "damaged" and "model.safetensors" in check.problems[0]


def test_bit_flipped_model_is_found_by_its_hash(tmp_path, save_untrained, run_config):
    run = save_untrained(tmp_path)
    _flip_bit(run.path / "model.safetensors")
    loaded = load_run(run.path)  # sizes agree: a plain load cannot tell
    with pytest.raises(DamagedRunError, match="model.safetensors is damaged: its SHA-256"):
        loaded.state_dict()
    with pytest.raises(DamagedRunError, match="SHA-256"):
        load_run(run.path, verify=True)
    with pytest.raises(DamagedRunError, match="SHA-256"):
        RunStore(tmp_path).find(run_config)
    assert verify_run(run.path).status == "damaged"


def test_stat_cache_skips_rehash_but_not_after_a_write(tmp_path, monkeypatch, save_untrained):
    monkeypatch.setattr(manifest_mod, "CACHED_BYTES", 0)
    monkeypatch.setattr(manifest_mod, "RACY_SECONDS", 0.05)
    hashed = []
    real = manifest_mod.check_data
    monkeypatch.setattr(
        manifest_mod, "check_data", lambda p, d, r: (hashed.append(p.name), real(p, d, r))
    )
    run = save_untrained(tmp_path)
    reference = run.state_dict()
    run.state_dict()  # written just now: racily clean, hashed again
    assert hashed.count("model.safetensors") == 2
    time.sleep(0.1)
    run.state_dict()  # hashed, and now old enough for the cache to vouch for it
    hashed.clear()
    state = load_run(run.path).state_dict()
    assert "model.safetensors" not in hashed
    assert all(torch.equal(state[k], reference[k]) for k in reference)
    time.sleep(0.02)
    _flip_bit(run.path / "model.safetensors", keep_mtime=True)  # ctime moves all the same
    with pytest.raises(DamagedRunError, match="SHA-256"):
        load_run(run.path).state_dict()
    assert verify_run(run.path).status == "damaged"  # lmc verify never trusts the cache


def test_run_without_manifest_is_unverified_not_damaged(tmp_path, save_untrained, run_config):
    run = save_untrained(tmp_path)
    _make_legacy(run)
    with pytest.warns(LmcWarning, match="no manifest.json"):
        loaded = RunStore(tmp_path).find(run_config)
    assert loaded is not None and not loaded.verified
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per run, not one per load
        load_run(run.path).build_model()
    assert verify_run(run.path).status == "unverified"
    path = run.path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-7])  # what can be checked without one still is
    with pytest.raises(DamagedRunError, match="not a whole safetensors file"):
        RunStore(tmp_path).find(run_config)
    assert verify_run(run.path).status == "damaged"


def test_missing_manifest_of_a_new_run_is_damage(tmp_path, save_untrained):
    run = save_untrained(tmp_path)
    (run.path / "manifest.json").unlink()
    with pytest.raises(DamagedRunError, match="manifest.json is damaged: missing"):
        load_run(run.path)
    assert verify_run(run.path).status == "damaged"


def test_malformed_manifest_is_damage(tmp_path, save_untrained):
    run = save_untrained(tmp_path)
    (run.path / "manifest.json").write_text('{"files": 3}')
    with pytest.raises(DamagedRunError, match="manifest.json is damaged"):
        load_run(run.path)


@pytest.mark.parametrize("with_manifest", [True, False])
def test_config_that_does_not_hash_to_its_folder_is_refused(
    tmp_path, with_manifest, save_untrained
):
    run = save_untrained(tmp_path)
    edited = json.loads((run.path / "config.json").read_text())
    edited["model_options"]["width"] = 9
    record = atomic.write_json(run.path / "config.json", edited)
    files = read_manifest(run.path)
    files["config.json"] = record  # a consistent manifest: only the name can tell
    manifest_mod.write_manifest(run.path, files)
    if not with_manifest:
        _make_legacy(run)
    with pytest.raises(DamagedRunError, match="config.json is damaged: it hashes to") as err:
        load_run(run.path)
    assert run.path.name.rsplit("-", 1)[1] in str(err.value)
    assert verify_run(run.path).status == "damaged"


def test_renamed_run_folder_still_loads(tmp_path, save_untrained, run_config):
    run = save_untrained(tmp_path)
    moved = run.path.rename(tmp_path / "my-favourite-run")
    assert load_run(moved, verify=True).config == run_config


def test_damage_is_an_lmc_error_naming_the_file(tmp_path, save_untrained):
    run = save_untrained(tmp_path)
    (run.path / "metrics.json").write_text("{}")
    with pytest.raises(LmcError, match="metrics.json is damaged"):
        load_run(run.path)


# --- lmc train never reuses a damaged run ----------------------------------------------


def _train_config():
    return make_config("digits", "mlp", {"width": 8, "depth": 1}, epochs=2)


@pytest.mark.parametrize("damage", ["truncate", "flip", "config"])
def test_train_retrains_a_damaged_run_in_place(tmp_path, digits, capsys, damage):
    config = _train_config()
    store = RunStore(tmp_path)
    first, reused = train_run(config, store=store, data=digits)
    original = first.state_dict()
    path = first.path / ("config.json" if damage == "config" else "model.safetensors")
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:-3])
    elif damage == "flip":
        _flip_bit(path)
    else:
        path.write_text(path.read_text().replace('"epochs": 2', '"epochs": 3'))
    capsys.readouterr()
    again, reused = train_run(config, store=store, data=digits)
    err = capsys.readouterr().err.strip().splitlines()
    assert not reused and again.path == first.path
    assert len(err) == 1 and str(path) in err[0] and "training the run again" in err[0]
    assert all(torch.equal(again.state_dict()[k], original[k]) for k in original)
    assert verify_run(again.path).status == "ok"
    _, reused = train_run(config, store=store, data=digits)
    assert reused and capsys.readouterr().err == ""


# --- checkpoints: one atomic unit -----------------------------------------------------


class Killed(BaseException):
    """Stands for a kill: nothing in lmc catches it."""


def _crash_at(monkeypatch, n, after):
    """Make the ``n``-th atomic rename die (before it, or just after it)."""
    real = os.replace
    count = [0]

    def replace(src, dst):
        count[0] += 1
        if count[0] == n and not after:
            raise Killed(dst)
        real(src, dst)
        if count[0] == n:
            raise Killed(dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    return count


def test_a_kill_at_any_rename_resumes_to_the_same_run(tmp_path, digits, monkeypatch):
    config = _train_config()
    reference, _ = train_run(config, store=RunStore(tmp_path / "ref"), data=digits)
    expected = reference.state_dict()
    count = _crash_at(monkeypatch, 0, False)
    train_run(config, store=RunStore(tmp_path / "count"), data=digits)
    renames = count[0]  # config, 2 checkpoints, then config, model, metrics, manifest
    assert renames >= 7
    for n in range(1, renames + 1):
        for after in (False, True):
            store = RunStore(tmp_path / f"crash-{n}-{after}")
            _crash_at(monkeypatch, n, after)
            with pytest.raises(Killed):
                train_run(config, store=store, data=digits)
            monkeypatch.setattr(atomic.os, "replace", os.replace)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no checkpoint state is inconsistent
                run, reused = train_run(config, store=store, data=digits)
            assert all(torch.equal(run.state_dict()[k], expected[k]) for k in expected), n
            assert verify_run(run.path).status == "ok", (n, after)
            assert not (run.path / "checkpoint.safetensors").exists()


def _model_and_optimizer():
    model = build("mlp", seed=0, input_size=64, width=8, num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 64)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_checkpoint_round_trip_is_one_file(tmp_path):
    model, optimizer = _model_and_optimizer()
    save_checkpoint(tmp_path, 3, model, optimizer, [{"epoch": 1, "train_loss": float("nan")}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.safetensors"]
    loaded = load_checkpoint(tmp_path, epochs=5)
    assert loaded["epoch"] == 3 and loaded["history"][0]["epoch"] == 1
    state = model.state_dict()
    assert all(torch.equal(loaded["model_state"][k], state[k]) for k in state)
    assert loaded["optimizer_state"]["state"][0]["momentum_buffer"].shape == (8, 64)


@pytest.mark.parametrize("damage", ["truncate", "flip-data", "flip-header", "too-late"])
def test_damaged_checkpoint_is_ignored_with_a_warning(tmp_path, damage):
    model, optimizer = _model_and_optimizer()
    save_checkpoint(tmp_path, 3, model, optimizer, [])
    path = tmp_path / "checkpoint.safetensors"
    epochs = 2 if damage == "too-late" else 5
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:-9])
    elif damage == "flip-data":
        _flip_bit(path, offset=-9)
    elif damage == "flip-header":
        data = path.read_bytes()
        path.write_bytes(data.replace(b'\\"epoch\\": 3', b'\\"epoch\\": 2', 1))
        assert path.read_bytes() != data
    with pytest.warns(LmcWarning, match="ignoring the checkpoint .*from scratch"):
        assert load_checkpoint(tmp_path, epochs=epochs) is None


def _legacy_checkpoint(run_dir, tensor_epoch, json_epoch):
    """The two-file checkpoint of older versions (tensors renamed first, then the JSON)."""
    from lmc.store import save_tensors, write_json
    from lmc.train.checkpoint import flatten_optimizer

    model, optimizer = _model_and_optimizer()
    optim_tensors, optim_meta = flatten_optimizer(optimizer.state_dict())
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()} | optim_tensors
    save_tensors(run_dir / "checkpoint.safetensors", tensors, {"epoch": str(tensor_epoch)})
    write_json(
        run_dir / "checkpoint.json",
        {"epoch": json_epoch, "optimizer": optim_meta, "history": []},
    )


def test_old_two_file_checkpoint_killed_between_renames_is_ignored(tmp_path):
    _legacy_checkpoint(tmp_path, tensor_epoch=7, json_epoch=5)
    with pytest.warns(LmcWarning, match=r"epoch 7\) and checkpoint.json \(epoch 5\) disagree"):
        assert load_checkpoint(tmp_path, epochs=10) is None


def test_old_consistent_two_file_checkpoint_still_resumes(tmp_path):
    _legacy_checkpoint(tmp_path, tensor_epoch=4, json_epoch=4)
    loaded = load_checkpoint(tmp_path, epochs=10)
    assert loaded["epoch"] == 4 and "fc1.weight" in loaded["model_state"]


def test_train_resumes_from_scratch_past_an_inconsistent_checkpoint(tmp_path, digits):
    config = _train_config()
    reference, _ = train_run(config, store=RunStore(tmp_path / "ref"), data=digits)
    store = RunStore(tmp_path / "run")
    run_dir = store.path_for(config)
    run_dir.mkdir(parents=True)
    _legacy_checkpoint(run_dir, tensor_epoch=2, json_epoch=1)
    with pytest.warns(LmcWarning, match="ignoring the checkpoint"):
        run, _ = train_run(config, store=store, data=digits)
    assert run.metrics["resumed_from_epoch"] is None
    expected = reference.state_dict()
    assert all(torch.equal(run.state_dict()[k], expected[k]) for k in expected)
