"""Faults a reliability probe found (F1-F10): canonical-form curve control points and merges
that load, pairs of a canonical-form run with a plain one, merge flags of another path refused,
``--spawn-from`` by name, refusals that say what to do, study paths beside the study file, and
warnings shown as one clean line. Tiny zoo GPTs on a small text file."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest
import torch

from lmc.cli.main import _clean_warnings, main
from lmc.config import LmcError, LmcWarning
from lmc.merge.many import build_run_model
from lmc.store import RunStore, load_run
from lmc.store.verify import verify_run

GPT = ["--model", "gpt", "--width", "16", "--depth", "1", "--heads", "2", "--context", "16"]
FAST_CURVE = ["--epochs", "1", "--steps-per-epoch", "3", "--plane", "0", "--lambdas", "3"]


def _lmc(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _ok(capsys, *argv) -> str:
    code, out, err = _lmc(capsys, *argv)
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A corpus, a run store, runs A and B (width 16) and two canonical-form merges of them."""
    root = tmp_path_factory.mktemp("probe")
    rng = random.Random(0)
    words = "the quick brown fox jumps over lazy dog and cat sat on mat".split()
    corpus = root / "corpus.txt"
    corpus.write_text(" ".join(rng.choice(words) for _ in range(3000)))
    runs = root / "runs"

    def train(seed: int, width: int = 16) -> Path:
        argv = ["train", *GPT, "--data", str(corpus), "--epochs", "1", "--quiet",
                "--seed", str(seed), "--runs-dir", str(runs), "--json"]  # fmt: skip
        argv[argv.index("--width") + 1] = str(width)
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(argv) == 0
        return Path(json.loads(buf.getvalue())["run_dir"])

    def merge(*argv) -> Path:
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert (
                main(["merge", *map(str, argv), "--runs-dir", str(runs), "--quiet", "--json"]) == 0
            )
        return Path(json.loads(buf.getvalue())["run_dir"])

    a, b = train(0), train(1)
    m1 = merge(a, b, "--align", "canonical")
    m2 = merge(a, b, "--align", "orthogonal")
    return {"root": root, "corpus": corpus, "runs": runs, "a": a, "b": b, "m1": m1, "m2": m2,
            "train": train}  # fmt: skip


def _curve_run(capsys, world, *argv) -> Path:
    out_dir = world["root"] / f"curve{len(list(world['root'].iterdir()))}"
    out = _ok(capsys, "curve", *argv, *FAST_CURVE, "--runs-dir", world["runs"], "--quiet",
              "--json", "--out", out_dir)  # fmt: skip
    return Path(json.loads(out)["control_run"])


# ---- F1 --------------------------------------------------------------------------------------
def test_f1_a_curve_fitted_in_the_canonical_form_is_a_loadable_canonical_form_run(capsys, world):
    control = _curve_run(capsys, world, world["a"], world["b"], "--align", "orthogonal")
    assert control.name.startswith("gpt-text-curve-"), control.name
    config = load_run(control).config
    assert config["form"] == "canonical" and config["model"] == "gpt"
    model = build_run_model(load_run(control))
    state = load_run(control).state_dict()
    assert set(model.state_dict()) == set(state)
    # the control point pairs with a plain run (put in its canonical form)
    _ok(capsys, "interpolate", control, world["a"], "--runs-dir", world["runs"], "--lambdas", "3",
        "--quiet", "--out", world["root"] / "f1")  # fmt: skip


def test_f1_a_run_without_a_model_is_refused_in_one_line_and_not_verified_ok(tmp_path):
    store = RunStore(tmp_path)
    config = {"kind": "curve", "model": None, "model_options": None, "dataset": "text",
              "dataset_options": {}, "curve": {"kind": "bezier"}}  # fmt: skip
    run = store.save(config, {"w": torch.zeros(2)}, {"final_test_loss": 0.0})
    assert run.name.startswith("None-")
    with pytest.raises(LmcError, match="names no zoo model"):
        run.build_model()
    check = verify_run(run.path)
    assert check.status == "damaged" and "names no model" in check.problems[0]


def test_f3_a_misfit_message_is_one_whole_line(tmp_path, world):
    run = load_run(world["a"])
    state = run.state_dict()
    state.pop("head.bias", None) or state.pop(next(iter(state)))
    config = {**run.config, "train": {**run.config["train"], "note": "misfit"}}
    bad = RunStore(tmp_path).save(config, state, {"final_test_loss": 0.0})
    with pytest.raises(LmcError) as info:
        bad.build_model()
    message = str(info.value)
    assert "does not fit its config" in message and "Missing key" in message
    assert not message.rstrip().endswith(":") and "\n" not in message


# ---- F2, F3, F4 -----------------------------------------------------------------------------
def test_f2_a_curve_between_canonical_form_runs_stores_a_canonical_form_control(capsys, world):
    control = _curve_run(capsys, world, world["m1"], world["m2"])
    assert load_run(control).config.get("form") == "canonical"
    build_run_model(load_run(control))  # loads: the weights fit the config's form
    _ok(capsys, "interpolate", control, world["m1"], "--runs-dir", world["runs"], "--lambdas",
        "3", "--quiet", "--out", world["root"] / "f2")  # fmt: skip


def test_f3_merge_takes_canonical_form_runs(capsys, world):
    out = _ok(capsys, "merge", world["m1"], world["a"], "--runs-dir", world["runs"], "--quiet",
              "--json")  # fmt: skip
    merged = load_run(json.loads(out)["run_dir"])
    assert merged.config["form"] == "canonical"
    build_run_model(merged)
    _ok(capsys, "merge", world["m1"], world["m2"], "--align", "orthogonal", "--runs-dir",
        world["runs"], "--quiet")  # fmt: skip


def test_f4_a_canonical_form_run_pairs_with_a_plain_run(capsys, world):
    for extra in (["--align", "canonical"], []):
        _ok(capsys, "interpolate", world["m1"], world["a"], *extra, "--runs-dir", world["runs"],
            "--lambdas", "3", "--quiet", "--out", world["root"] / f"f4{len(extra)}")  # fmt: skip


# ---- F5 --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("align", "flag", "value"),
    [("weight", "--rounds", "7"), ("none", "--rounds", "0"), ("orthogonal", "--max-rounds", "5"),
     ("orthogonal", "--max-iter", "3"), ("canonical", "--tol", "0.5")],
)  # fmt: skip
def test_f5_merge_refuses_a_setting_its_path_does_not_read(capsys, world, align, flag, value):
    code, _, err = _lmc(capsys, "merge", world["a"], world["b"], "--align", align, flag, value,
                        "--runs-dir", world["runs"], "--quiet")  # fmt: skip
    assert code == 2 and flag in err and "drop it" in err, err


# ---- F6 --------------------------------------------------------------------------------------
def test_f6_the_bf16_warning_names_the_setting_of_its_context():
    from lmc.config.precision import Bf16Support, slow_bf16_message

    support = Bf16Support("cpu", "a CPU", "AVX2", (), False, None)
    learned = ("--learned-precision fp32", "runs the learned alignment's steps in float32")
    message = slow_bf16_message(support, learned)
    assert "--learned-precision fp32" in message and "lmc train" not in message
    assert "lmc train --precision fp32" in slow_bf16_message(support)


# ---- F7 --------------------------------------------------------------------------------------
def test_f7_spawn_from_takes_a_run_name_in_the_store(capsys, world):
    name = world["a"].name
    out = _ok(capsys, "train", "--spawn-from", name, "--spawn-epoch", "1", "--data-seed", "3",
              "--runs-dir", world["runs"], "--quiet", "--json")  # fmt: skip
    assert Path(json.loads(out)["run_dir"]).is_dir()


# ---- F8 --------------------------------------------------------------------------------------
def test_f8a_different_widths_mention_widen(capsys, world):
    wide = world["train"](2, width=32)
    code, _, err = _lmc(capsys, "interpolate", world["a"], wide, "--align", "orthogonal",
                        "--runs-dir", world["runs"], "--quiet")  # fmt: skip
    assert code == 2 and "--widen" in err, err


def test_f8b_widening_llama_says_which_models_widen():
    from lmc.models import build
    from lmc.perm.widen import widen_pair

    opts = dict(vocab=20, context=8, depth=1, heads=2)
    narrow, wide = build("llama", width=16, **opts), build("llama", width=32, **opts)
    x = torch.randint(0, 20, (2, 8))
    with pytest.raises(LmcError, match="widening supports zoo gpt and vit"):
        widen_pair(narrow, wide, x)


def test_f8c_a_missing_manifest_says_what_to_do(tmp_path, world):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(world["a"], copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(LmcError, match="re-run the command that made the run"):
        load_run(copy)


def test_f8d_a_checkpoint_dir_that_is_a_file_is_refused_before_training(capsys, world):
    afile = world["root"] / "afile"
    afile.write_text("x")
    code, _, err = _lmc(capsys, "curve", world["a"], world["b"], *FAST_CURVE, "--checkpoint-dir",
                        afile, "--runs-dir", world["runs"], "--quiet", "--out",
                        world["root"] / "f8d")  # fmt: skip
    assert code == 2 and "is a file; give a folder" in err, err
    assert not (world["root"] / "f8d").exists()


def test_f8e_align_examples_says_at_least_0(capsys, world):
    code, _, err = _lmc(capsys, "interpolate", world["a"], world["b"], "--align",
                        "orthogonal-activation", "--align-examples", "-1", "--quiet")  # fmt: skip
    assert code == 2 and "--align-examples must be at least 0" in err, err


def test_f8f_tokens_beyond_the_vocabulary_get_the_vocabulary_message():
    from types import SimpleNamespace

    from lmc.cli.common import check_data_fits
    from lmc.data.tasks import get_task

    model = torch.nn.Sequential(torch.nn.Embedding(64, 4), torch.nn.Linear(4, 64))
    task = get_task("next-token")
    data = SimpleNamespace(
        task_spec=task,
        x_test=torch.full((3, 8), 100),
        y_test=torch.zeros(3, 8, dtype=torch.long),
        input_shape=(8,),
        name="wide.txt",
        num_classes=120,
    )
    with pytest.raises(LmcError, match="predicts 64 token ids but the text's tokenizer has 120"):
        check_data_fits(model, data, "the model from g2a")


def test_f8g_hf_model_without_data_mentions_text_files(capsys, tmp_path):
    code, _, err = _lmc(capsys, "interpolate", tmp_path / "a", tmp_path / "b", "--hf-model",
                        tmp_path)  # fmt: skip
    assert code == 2 and "text file" in err, err


# ---- F9 --------------------------------------------------------------------------------------
def test_f9_a_study_reads_relative_paths_beside_itself(tmp_path, monkeypatch):
    from lmc.experiments.study import load_study

    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "corpus.txt").write_text("the cat sat on the mat " * 50)
    (sub / "s.toml").write_text(
        'name = "t"\n[data]\ndataset = "text"\noptions = { path = "corpus.txt", context = 16 }\n'
        '[model]\nname = "gpt"\ndepth = 1\nheads = 2\n[sweep]\nwidths = [16]\npairs = 1\n'
        '[train]\nepochs = 1\n[merge]\nmethods = ["none"]\nlambdas = 3\n'
        "[analysis]\nenabled = false\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    study, _ = load_study("../sub/s.toml")
    path = study["data"]["options"]["path"]
    assert (elsewhere / path).resolve() == (sub / "corpus.txt").resolve()
    monkeypatch.chdir(sub)  # from the study's own folder: the path as written (same configs)
    study, _ = load_study("s.toml")
    assert study["data"]["options"]["path"] == "corpus.txt"


# ---- F10 -------------------------------------------------------------------------------------
def test_f10_warnings_are_one_clean_line_once_and_tracer_notes_quiet(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        _clean_warnings("interpolate", quiet=True)
        for _ in range(3):
            warnings.warn("precision bf16 is slow\nhere", LmcWarning, stacklevel=1)
            warnings.warn("lmc.perm: node 'mul_1' applies a position-dependent map", UserWarning,
                          stacklevel=1)  # fmt: skip
    err = capsys.readouterr().err
    assert err == "lmc interpolate: warning: precision bf16 is slow here\n", err
