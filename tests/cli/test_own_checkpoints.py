"""The user's own model and checkpoints in ``lmc align/interpolate/analyze``.

The guide's shell block marked ``<!-- test: own-checkpoints -->`` (docs/guide.md: the one block
so marked in the README or a page under docs/) is run command by command, as written, in a
temporary folder (two TinyNets trained on digits by examples/own_model/train_two.py); its weight
files are then reused by the other tests: factories, weight files (.safetensors, .pt through
weights_only), data files, and the one-line errors.
"""

from __future__ import annotations

import io
import json
import math
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from lmc.cli.main import main
from lmc.config import LmcError, LmcWarning
from lmc.data.user_file import load_user_data
from lmc.models.factory import load_factory, load_weights, read_weights

ROOT = Path(__file__).resolve().parents[2]
MANUAL = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # where the block may be
EXAMPLE = ROOT / "examples" / "own_model"
MARKER = "<!-- test: own-checkpoints -->"
BIN = Path(sys.executable).parent


def guide_block() -> str:
    pattern = re.compile(re.escape(MARKER) + r"\s*\n```bash\n(.*?)\n```", re.DOTALL)
    blocks = pattern.findall("\n".join(path.read_text() for path in MANUAL))
    assert len(blocks) == 1, "exactly one marked shell block"
    return blocks[0]


def block_commands(block: str) -> list[list[str]]:
    """The block's commands as argument lists, as bash would split them: continuation lines
    joined, comments dropped."""
    lines = block.replace("\\\n", " ").splitlines()
    return [argv for argv in (shlex.split(line, comments=True) for line in lines) if argv]


def run_in_process(commands: list[list[str]], folder: Path) -> str:
    """Run the commands in this process with ``folder`` as the working directory: ``lmc ...``
    through ``lmc.cli.main.main`` (each must return 0), ``python script.py ...`` through
    ``runpy`` as ``__main__`` with the script's folder first on ``sys.path`` (what ``python``
    gives it); any other command fails the test. Returns their stdout. In-process, the block
    costs no interpreter start-ups (about 2 s each, mostly importing torch), and
    ``test_the_lmc_command_runs_in_a_shell`` checks the installed command itself."""
    out, err = io.StringIO(), io.StringIO()
    modules = set(sys.modules)
    try:
        with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
            patch.chdir(folder)
            patch.setenv("LMC_RUNS", str(folder / "runs"))
            patch.setenv("MPLBACKEND", "Agg")
            for argv in commands:
                if argv[0] == "lmc":
                    code = main(argv[1:])
                    assert code == 0, (argv, err.getvalue()[-2000:])
                elif argv[0] == "python" and argv[1].endswith(".py"):
                    script = folder / argv[1]
                    patch.setattr(sys, "argv", argv[1:])
                    patch.syspath_prepend(str(script.parent))
                    runpy.run_path(str(script), run_name="__main__")
                else:
                    raise AssertionError(f"the block runs more than lmc and python: {argv}")
    finally:
        if "model" not in modules:  # examples/own_model/model.py, imported by train_two.py
            sys.modules.pop("model", None)
    return out.getvalue()


@pytest.fixture(scope="module")
def guide_run(tmp_path_factory):
    """The guide's block run in a fresh folder holding a copy of examples/own_model (in this
    process: see ``run_in_process``)."""
    folder = tmp_path_factory.mktemp("own")
    shutil.copytree(EXAMPLE, folder / "examples" / "own_model")
    stdout = run_in_process(block_commands(guide_block()), folder)
    return folder, SimpleNamespace(stdout=stdout)


def test_the_lmc_command_runs_in_a_shell(tmp_path):
    """The installed ``lmc`` command (the guide block's program) starts from a shell."""
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f"{BIN / 'lmc'} align --help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--model-factory" in proc.stdout


def factory_spec(folder: Path) -> str:
    return f"{folder / 'examples' / 'own_model' / 'model.py'}:make"


def test_the_guide_block_aligns_and_interpolates_two_checkpoints(guide_run):
    folder, proc = guide_run
    assert not (folder / "runs").exists()  # nothing went into a run store
    make = load_factory(factory_spec(folder))
    model_b = load_weights(make(), folder / "b.safetensors")
    aligned = load_weights(make(), folder / "b_aligned.safetensors")
    # the stdout of align ends with the file it wrote
    assert "b_aligned.safetensors" in proc.stdout
    # a permutation: same function, different weights
    x = torch.randn(64, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(aligned(x), model_b(x), atol=1e-5)
    assert not torch.equal(aligned.fc1.weight, model_b.fc1.weight)
    perm = load_file(str(folder / "b_aligned.perm.safetensors"))
    assert torch.equal(aligned.fc1.weight, model_b.fc1.weight[perm["fc1"]])
    assert json.loads((folder / "b_aligned.perm.json").read_text())["method"] == "weight"

    plain = json.loads((folder / "out" / "own-plain" / "summary.json").read_text())
    same = json.loads((folder / "out" / "own-aligned" / "summary.json").read_text())
    for summary in (plain, same):
        assert summary["weights_a"] == "a.safetensors" and summary["dataset"] == "digits"
        assert summary["model"] == "TinyNet" and summary["calibrate"]
        assert summary["accuracy"][0] > 0.9 and summary["accuracy"][-1] > 0.9
        assert all(math.isfinite(v) for v in summary["loss"])
        assert (folder / "out" / "own-plain" / "path.png").stat().st_size > 0
    # the endpoints are the same models; the aligned midpoint is far lower (as the guide says)
    assert same["loss"][0] == pytest.approx(plain["loss"][0], abs=1e-6)
    assert same["loss"][-1] == pytest.approx(plain["loss"][-1], abs=1e-5)
    assert plain["loss_barrier"] > 0.1
    assert same["loss_barrier"] < plain["loss_barrier"] / 5
    layers = json.loads((folder / "out" / "own-layers" / "summary.json").read_text())
    assert layers["settings"]["align"] == "weight" and layers["settings"]["derived_probe_points"]
    assert [r["name"] for r in layers["layers"]] == ["layer1", "layer2", "logits"]
    assert (folder / "out" / "own-layers" / "cosines.png").stat().st_size > 0


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_analyze_json_on_user_checkpoints(guide_run, capsys):
    folder, _ = guide_run
    a, b = str(folder / "a.safetensors"), str(folder / "b.safetensors")
    summary = _json(capsys, [
        "analyze", a, b, "--model-factory", factory_spec(folder), "--data", "digits",
        "--lambdas", "0.25,0.5", "--max-examples", "100", "--json", "--quiet", "--device", "cpu",
    ])  # fmt: skip
    assert summary["settings"]["weights_b"] == b
    assert summary["settings"]["model_factory"] == factory_spec(folder)
    assert [r["lam"] for r in summary["layers"]] == [0.25] * 3 + [0.5] * 3
    assert summary["layers"][0]["n_examples"] == 100
    assert all(-1.0 <= r["lewc_cosine"] <= 1.0 + 1e-6 for r in summary["layers"])


def test_pt_files_load_with_weights_only_and_match_safetensors(guide_run, tmp_path, capsys):
    folder, _ = guide_run
    state_a = load_file(str(folder / "a.safetensors"))
    state_b = load_file(str(folder / "b.safetensors"))
    torch.save(state_a, tmp_path / "a.pt")
    torch.save({"state_dict": state_b, "epoch": 3}, tmp_path / "b.pth")  # a training checkpoint
    base = ["interpolate", "--model-factory", factory_spec(folder), "--data", "digits",
            "--lambdas", "3", "--json", "--quiet", "--device", "cpu"]  # fmt: skip
    from_pt = _json(capsys, [*base, str(tmp_path / "a.pt"), str(tmp_path / "b.pth"),
                             "--out", str(tmp_path / "pt")])  # fmt: skip
    from_st = _json(capsys, [*base, str(folder / "a.safetensors"), str(folder / "b.safetensors"),
                             "--out", str(tmp_path / "st")])  # fmt: skip
    assert from_pt["loss"] == from_st["loss"]


class Planted:
    """Unpickling this runs ``open(marker, "w")``: a pickle that executes code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickle_with_code_is_refused_unexecuted(guide_run, tmp_path, capsys, cli_error):
    folder, _ = guide_run
    marker = tmp_path / "executed"
    state = load_file(str(folder / "a.safetensors"))
    torch.save({"state_dict": state, "extra": Planted(marker)}, tmp_path / "evil.pt")
    with pytest.raises(LmcError, match="weights_only=True"):
        read_weights(tmp_path / "evil.pt")
    assert not marker.exists()
    message = cli_error([
        "interpolate", str(tmp_path / "evil.pt"), str(folder / "b.safetensors"),
        "--model-factory", factory_spec(folder), "--data", "digits", "--device", "cpu",
    ])  # fmt: skip
    assert "evil.pt" in message and "weights_only" in message and not marker.exists()


def test_weights_that_do_not_fit_name_the_tensor(guide_run, tmp_path, capsys, cli_error):
    folder, _ = guide_run
    source = (EXAMPLE / "model.py").read_text()
    (tmp_path / "narrow.py").write_text(source + "\n\ndef make():\n    return TinyNet(hidden=32)\n")
    message = cli_error([
        "interpolate", str(folder / "a.safetensors"), str(folder / "b.safetensors"),
        "--model-factory", f"{tmp_path / 'narrow.py'}:make", "--data", "digits",
    ])  # fmt: skip
    assert "'fc1.weight'" in message and "(128, 64)" in message and "(32, 64)" in message
    state = load_file(str(folder / "a.safetensors"))
    make = load_factory(factory_spec(folder))
    missing = {k: v for k, v in state.items() if k != "out.bias"}
    save_file(missing, str(tmp_path / "missing.safetensors"))
    with pytest.raises(LmcError, match=r"lacks tensor 'out.bias' of shape \(10\)"):
        load_weights(make(), tmp_path / "missing.safetensors")
    save_file({**state, "extra.weight": torch.zeros(2)}, str(tmp_path / "extra.safetensors"))
    with pytest.raises(LmcError, match="'extra.weight'.*does not have"):
        load_weights(make(), tmp_path / "extra.safetensors")
    bad = {**state, "fc2.bias": torch.full((128,), float("nan"))}
    save_file(bad, str(tmp_path / "nan.safetensors"))
    with pytest.raises(LmcError, match="non-finite"):
        load_weights(make(), tmp_path / "nan.safetensors")
    (tmp_path / "w.npy").write_bytes(b"")
    with pytest.raises(LmcError, match="unknown weight file type"):
        load_weights(make(), tmp_path / "w.npy")


def test_factory_errors_are_one_line(tmp_path, monkeypatch, capsys, cli_error):
    with pytest.raises(LmcError, match="does not exist"):
        load_factory(f"{tmp_path / 'nope.py'}:make")
    (tmp_path / "broken.py").write_text("import no_such_package_xyz\n")
    with pytest.raises(LmcError, match="importing .*broken.py failed: .*no_such_package_xyz"):
        load_factory(f"{tmp_path / 'broken.py'}:make")
    with pytest.raises(LmcError, match="cannot import module 'no_such_module_xyz'"):
        load_factory("no_such_module_xyz:make")
    (tmp_path / "zoo.py").write_text(
        "import torch\nNOT_CALLABLE = 3\n"
        "def fails():\n    raise RuntimeError('bad width')\n"
        "def not_a_module():\n    return 7\n"
        "class Nets:\n    @staticmethod\n    def small():\n        return torch.nn.Linear(2, 2)\n"
    )
    spec = f"{tmp_path / 'zoo.py'}"
    with pytest.raises(LmcError, match="has no attribute 'missing'"):
        load_factory(f"{spec}:missing")
    with pytest.raises(LmcError, match="is a int, not a callable"):
        load_factory(f"{spec}:NOT_CALLABLE")
    with pytest.raises(LmcError, match=r"calling fails\(\) failed: RuntimeError: bad width"):
        load_factory(f"{spec}:fails")()
    with pytest.raises(LmcError, match="returned a int, not an nn.Module"):
        load_factory(f"{spec}:not_a_module")()
    assert isinstance(load_factory(f"{spec}:Nets.small")(), torch.nn.Linear)
    with pytest.raises(LmcError, match="module:callable"):
        load_factory("just_a_name")
    # an importable module, named as module:callable
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isinstance(load_factory("zoo:Nets.small")(), torch.nn.Linear)
    # through the CLI: one line, exit status 2
    (tmp_path / "a.safetensors").write_bytes(b"")
    message = cli_error([
        "align", str(tmp_path / "a.safetensors"), str(tmp_path / "a.safetensors"),
        "--model-factory", f"{tmp_path / 'broken.py'}:make", "--data", "digits",
        "--out", str(tmp_path / "x.safetensors"),
    ])  # fmt: skip
    assert "no_such_package_xyz" in message


def test_option_misuse_is_a_one_line_error(guide_run, tmp_path, capsys, cli_error):
    folder, _ = guide_run
    a, b = str(folder / "a.safetensors"), str(folder / "b.safetensors")
    spec = factory_spec(folder)
    message = cli_error(["interpolate", a, b, "--model-factory", spec])
    assert "--data is needed" in message
    message = cli_error(["align", a, b, "--model-factory", spec, "--data", "digits"])
    assert "--out FILE.safetensors" in message
    message = cli_error(["align", a, b, "--model-factory", spec, "--data", "digits",
                              "--out", b])  # fmt: skip
    assert "overwrite" in message
    message = cli_error(["analyze", "run_x", "run_y", "--data", "digits"])
    assert "--data is for --model-factory" in message
    message = cli_error(["interpolate", a, b, "--model-factory", spec, "--hf-model",
                              str(tmp_path), "--data", "digits"])  # fmt: skip
    assert "not both" in message


def test_align_json_and_activation_matching_on_user_checkpoints(guide_run, tmp_path, capsys):
    folder, _ = guide_run
    a, b = str(folder / "a.safetensors"), str(folder / "b.safetensors")
    out = tmp_path / "sub" / "b_act.safetensors"
    record = _json(capsys, [
        "align", a, b, "--model-factory", factory_spec(folder), "--data", "digits",
        "--method", "activation", "--max-examples", "500", "--out", str(out), "--json",
        "--device", "cpu",
    ])  # fmt: skip
    assert record["out"] == str(out) and record["method"] == "activation"
    assert record["reference"] == a and record["source"] == b
    assert set(record["moved_fraction"]) == {"fc1", "fc2"}
    assert record["objective_after"] > record["objective_before"]
    assert Path(record["perm"]).is_file() and out.is_file()


def test_data_file_of_the_wrong_shape_is_a_one_line_error(guide_run, tmp_path, capsys, cli_error):
    folder, _ = guide_run
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "flat5.npz", x=rng.normal(size=(40, 5)), y=np.repeat(np.arange(10), 4))
    message = cli_error([
        "interpolate", str(folder / "a.safetensors"), str(folder / "b.safetensors"),
        "--model-factory", factory_spec(folder), "--data", str(tmp_path / "flat5.npz"),
    ])  # fmt: skip
    assert message.startswith("lmc interpolate: error: data of shape (10, 5)")
    assert f"does not fit the model from {factory_spec(folder)}" in message


def test_user_data_file_interpolates_like_the_zoo_dataset(guide_run, tmp_path, capsys, digits):
    """The digits test split saved as x_test/y_test gives the same numbers as --data digits."""
    folder, _ = guide_run
    arrays = {"x": digits.x_train, "y": digits.y_train}
    save_file({**arrays, "x_test": digits.x_test, "y_test": digits.y_test},
              str(tmp_path / "mine.safetensors"))  # fmt: skip
    base = ["interpolate", str(folder / "a.safetensors"), str(folder / "b.safetensors"),
            "--model-factory", factory_spec(folder), "--lambdas", "3", "--json", "--quiet",
            "--device", "cpu"]  # fmt: skip
    zoo = _json(capsys, [*base, "--data", "digits", "--out", str(tmp_path / "z")])
    mine = _json(capsys, [*base, "--data", str(tmp_path / "mine.safetensors"),
                          "--out", str(tmp_path / "m")])  # fmt: skip
    assert mine["loss"] == pytest.approx(zoo["loss"], rel=1e-6)
    assert mine["dataset"] == "mine.safetensors" and mine["num_examples"] == len(digits.y_test)


def test_load_user_data_splits_and_validates(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(80, 3)).astype(np.float64)
    y = np.repeat(np.arange(4), 20)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    ds = load_user_data(tmp_path / "d.npz")
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert len(ds.y_test) == 20 and len(ds.y_train) == 60 and ds.num_classes == 4
    assert torch.bincount(ds.y_test).tolist() == [5, 5, 5, 5]  # stratified 25%
    again = load_user_data(tmp_path / "d.npz")  # seeded: the same split every time
    assert torch.equal(again.x_test, ds.x_test)
    # the union of the two splits is the file, unnormalised
    both = torch.cat([ds.x_train, ds.x_test]).double()
    assert torch.allclose(both.sort(0).values, torch.from_numpy(x).sort(0).values, atol=1e-6)
    assert ds.input_shape == (3,) and ds.mean == (0.0, 0.0, 0.0)
    # token ids stay integers
    np.savez(tmp_path / "tok.npz", x=rng.integers(0, 50, (40, 6)), y=y[:40])
    assert load_user_data(tmp_path / "tok.npz").x_train.dtype == torch.int64

    def fails(match, **arrays):
        np.savez(tmp_path / "bad.npz", **arrays)
        with pytest.raises(LmcError, match=match):
            load_user_data(tmp_path / "bad.npz")

    fails(r"bad.npz has no 'y'", x=x)
    fails(r"bad.npz\['y'\] must hold integer class labels", x=x, y=y.astype(np.float32))
    fails(r"'y' holds 79 labels but 'x' 80", x=x, y=y[:-1])
    fails(r"bad.npz\['y'\] holds a negative label", x=x, y=y - 1)
    fails(r"bad.npz\['x'\] holds 3 non-finite", x=np.where(np.arange(80)[:, None] == 3, np.nan, x),
          y=y)  # fmt: skip
    fails(r"bad.npz\['x'\] must have shape \(N, ...\)", x=x[:, 0], y=y)
    fails(r"has 'x_test' but no 'y_test'", x=x, y=y, x_test=x)
    fails(r"'x_test' has examples of shape \(2,\)", x=x, y=y, x_test=x[:, :2], y_test=y)
    fails(r"cannot read without unpickling", x=np.array([object()] * 80), y=y)
    np.savez(tmp_path / "extra.npz", x=x, y=y, names=np.arange(3))
    with pytest.warns(LmcWarning, match="ignoring key"):
        load_user_data(tmp_path / "extra.npz")
    with pytest.raises(LmcError, match="none.npz: no such file"):
        load_user_data(tmp_path / "none.npz")


def test_a_local_hugging_face_folder_loads_and_interpolates(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, num_labels=3,
    )  # fmt: skip
    models = {}
    for name, seed in (("hf_a", 0), ("hf_b", 1)):
        torch.manual_seed(seed)
        models[name] = transformers.BertForSequenceClassification(config).eval()
        models[name].save_pretrained(tmp_path / name)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 40, (24, 8)), rng.integers(0, 3, 24)
    np.savez(tmp_path / "tokens.npz", x=x, y=y, x_test=x[:12], y_test=y[:12])
    summary = _json(capsys, [
        "interpolate", str(tmp_path / "hf_a"), str(tmp_path / "hf_b" / "model.safetensors"),
        "--hf-model", str(tmp_path / "hf_a"), "--data", str(tmp_path / "tokens.npz"),
        "--lambdas", "3", "--json", "--quiet", "--device", "cpu", "--out", str(tmp_path / "o"),
    ])  # fmt: skip
    assert summary["hf_model"] == str(tmp_path / "hf_a") and summary["num_examples"] == 12
    # the endpoints are the saved models themselves
    ids, labels = torch.from_numpy(x[:12]), torch.from_numpy(y[:12])
    with torch.no_grad():
        for name, index in (("hf_a", 0), ("hf_b", -1)):
            logits = models[name](input_ids=ids).logits
            loss = torch.nn.functional.cross_entropy(logits, labels).item()
            assert summary["loss"][index] == pytest.approx(loss, rel=1e-4, abs=1e-6)
    assert summary["loss"][0] != pytest.approx(summary["loss"][-1])
