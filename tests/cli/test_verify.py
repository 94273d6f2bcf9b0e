"""`lmc verify`: every run checked, damaged ones listed with the file, exit status 1 if any;
and `lmc train` retrains what it finds damaged."""

import json

import pytest

from lmc.cli.main import main


@pytest.fixture
def save(save_untrained, digits_run_config):
    """``save(root, width)``: an untrained digits MLP of ``width`` (built from seed ``width``)
    saved as a finished run of the store at ``root``."""

    def save(root, width):
        options = {"input_size": 64, "width": width, "num_classes": 10}
        return save_untrained(root, digits_run_config(options, epochs=1), seed=width)

    return save


@pytest.fixture
def store(tmp_path, save):
    """Four runs: whole, truncated, bit-flipped, and one from before manifests."""
    root = tmp_path / "runs"
    runs = {name: save(root, w) for name, w in [("ok", 4), ("cut", 5), ("flip", 6), ("old", 7)]}
    model = runs["cut"].path / "model.safetensors"
    model.write_bytes(model.read_bytes()[:-11])
    model = runs["flip"].path / "model.safetensors"
    data = bytearray(model.read_bytes())
    data[-3] ^= 1
    model.write_bytes(bytes(data))
    old = runs["old"].path
    (old / "manifest.json").unlink()
    metrics = json.loads((old / "metrics.json").read_text())
    del metrics["manifest"]
    (old / "metrics.json").write_text(json.dumps(metrics))
    (root / ".mlp-digits-x.tmp").mkdir()  # a temporary folder is not a run
    return root, {k: r.path for k, r in runs.items()}


def test_verify_lists_each_run_and_exits_1_on_damage(store, capsys):
    root, paths = store
    assert main(["verify", "--runs-dir", str(root), "--quiet"]) == 1
    out = capsys.readouterr().out.splitlines()
    status = {line.split()[1]: line.split()[0] for line in out[:-1] if not line.startswith(" ")}
    assert status == {
        str(paths["ok"]): "ok",
        str(paths["cut"]): "damaged",
        str(paths["flip"]): "damaged",
        str(paths["old"]): "unverified",
    }
    text = "\n".join(out)
    assert f"{paths['cut']}/model.safetensors is damaged: " in text and "bytes where" in text
    assert f"{paths['flip']}/model.safetensors is damaged: its SHA-256" in text
    assert out[-1] == "4 runs: 1 ok, 2 damaged, 1 unverified"


def test_verify_json_and_named_runs(store, capsys):
    root, paths = store
    assert main(["verify", "--runs-dir", str(root), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"ok": 1, "damaged": 2, "unverified": 1, "unfinished": 0}
    assert sorted(report["damaged"]) == sorted([str(paths["cut"]), str(paths["flip"])])
    # a run by its name in the store, another by its path: only those are checked
    argv = ["verify", paths["ok"].name, str(paths["old"]), "--runs-dir", str(root), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in report["runs"]] == ["ok", "unverified"]


def test_verify_unknown_run_is_a_one_line_error(store, capsys):
    root, _ = store
    assert main(["verify", "nope", "--runs-dir", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err


def test_verify_an_unfinished_run_is_not_damage(tmp_path, capsys, save):
    run = save(tmp_path, 4)
    (run.path / "metrics.json").unlink()  # as while training
    assert main(["verify", "--runs-dir", str(tmp_path), "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("unfinished")


def test_train_retrains_what_verify_calls_damaged(tmp_path, capsys):
    argv = ["train", "--width", "8", "--depth", "1", "--epochs", "1", "--quiet"]
    argv += ["--runs-dir", str(tmp_path), "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    model = tmp_path / first["run_dir"].split("/")[-1] / "model.safetensors"
    original = model.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 4
    model.write_bytes(bytes(data))
    assert main(["verify", "--runs-dir", str(tmp_path), "--quiet"]) == 1
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    again = json.loads(captured.out)
    assert not again["reused"] and again["run_dir"] == first["run_dir"]
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and str(model) in err[0] and "SHA-256" in err[0]
    assert model.read_bytes() == original  # retrained bit-identically, in place
    assert main(["verify", "--runs-dir", str(tmp_path), "--quiet"]) == 0
    capsys.readouterr()
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["reused"]
