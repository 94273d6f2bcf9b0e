"""``lmc curve``: a Bézier curve or chain fitted between two runs (zoo MLPs on digits, zoo GPTs
on a text file) or two weight files of a user's model, with and without alignment, evaluated
beside the line on the same grid; its JSON keys are the ones docs/cli.md lists; the control point
is a run (reused from the store when its config matches)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from lmc.cli.main import main
from lmc.merge import load_curve
from lmc.merge.curves import state_digest
from lmc.metrics.barriers import barriers
from lmc.store import load_run

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--epochs", "1", "--steps-per-epoch", "4", "--lambdas", "3", "--plane", "3", "--quiet"]


def _curve(capsys, *argv) -> dict:
    code = main(["curve", *argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def documented_keys() -> set[str]:
    """The keys the ``lmc curve --json`` bullet of docs/cli.md names (backticked identifiers)."""
    text = (ROOT / "docs" / "cli.md").read_text()
    match = re.search(r"^- `lmc curve --json`:(.*?)(?=^- `)", text, flags=re.M | re.S)
    assert match, "docs/cli.md documents no `lmc curve --json` keys"
    return set(re.findall(r"`([a-z_]+)`", match.group(1))) - {"null"}  # a value, not a key


def _keys(summary: dict) -> set[str]:
    out = set(summary)
    for value in summary.values():
        if isinstance(value, dict):
            out |= set(value)
    return out


def test_lmc_curve_fits_beside_the_line_and_prints_the_documented_keys(
    digits_runs, tmp_path, capsys, digits
):
    root, a, b = digits_runs
    out = tmp_path / "plain"
    summary = _curve(capsys, str(a), str(b), "--runs-dir", str(root), *FAST, "--out", str(out))
    assert documented_keys() <= _keys(summary), documented_keys() - _keys(summary)
    assert {"lambdas", "loss", "midpoint_loss_barrier", "align"} <= set(summary)  # interpolate's
    assert summary["path"] == "line" and summary["kind"] == "bezier"
    curve = summary["curve"]
    assert curve["path"] == "bezier" and curve["lambdas"] == summary["lambdas"]
    assert curve["loss"][0] == summary["loss"][0] and curve["loss"][-1] == summary["loss"][-1]
    assert curve["midpoint_loss_barrier"] == pytest.approx(barriers(curve)["midpoint_loss_barrier"])
    assert summary["reused"] is False and summary["fit"]["epochs_done"] == 1
    assert {p.name for p in out.iterdir()} >= {"curve.csv", "summary.json", "path.png", "plane.png"}
    # the control point is a run of the store; the curve's point at t = ½ is ¼A + ½θ_C + ¼B,
    # and its loss there is the loss the summary reports
    control = load_run(summary["control_run"], verify=True)
    assert control.path.parent == Path(root) and control.config["kind"] == "curve"
    state_a, state_b = load_run(a).state_dict(), load_run(b).state_dict()
    stored = load_curve(control, state_a, state_b)
    mid = stored.point(0.5)
    model = load_run(a).build_model().eval()  # the architecture; its weights set next
    model.load_state_dict(mid)
    with torch.no_grad():
        loss = float(F.cross_entropy(model(digits.x_test).double(), digits.y_test))
    assert curve["loss"][curve["lambdas"].index(0.5)] == pytest.approx(loss, abs=1e-6)
    # a second call finds the stored control point: same numbers, nothing refitted
    again = _curve(capsys, str(a), str(b), "--runs-dir", str(root), *FAST, "--out", str(out))
    assert again["reused"] is True and again["fit"] is None
    assert (
        again["curve"]["loss"] == curve["loss"] and again["control_run"] == summary["control_run"]
    )


def test_lmc_curve_aligns_b_to_a_before_fitting(digits_runs, tmp_path, capsys):
    root, a, b = digits_runs
    common = [str(a), str(b), "--runs-dir", str(root), *FAST, "--kind", "chain"]
    plain = _curve(capsys, *common, "--out", str(tmp_path / "plain"))
    aligned = _curve(capsys, *common, "--align", "weight", "--out", str(tmp_path / "aligned"))
    assert aligned["align"] == "weight" and aligned["align_info"]["method"] == "weight"
    assert aligned["control_run"] != plain["control_run"]
    config = load_run(aligned["control_run"]).config
    assert config["curve"]["kind"] == "chain" and config["endpoints"]["b"]["align"] == "weight"
    # the curve ends at B as aligned (a permutation: B's function, other weights)
    b_state = load_run(b).state_dict()
    assert config["endpoints"]["b"]["state_sha256"] != state_digest(b_state)
    assert aligned["curve"]["loss"][-1] == aligned["loss"][-1]
    assert aligned["loss"][-1] == pytest.approx(plain["loss"][-1], abs=1e-5)


def test_lmc_curve_refuses_a_one_point_plane(digits_runs, tmp_path, capsys):
    root, a, b = digits_runs
    code = main(["curve", str(a), str(b), "--runs-dir", str(root), "--plane", "1", "--quiet",
                 "--out", str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--plane must be 0" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity. "
) * 20
GPT = ["--model", "gpt", "--width", "16", "--depth", "1", "--heads", "2", "--context", "16"]


@pytest.mark.parametrize("align", ["none", "weight"])
def test_lmc_curve_between_two_gpts_on_a_text_file(align, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text(TEXT, encoding="utf-8")
    made = []
    for seed in (1, 2):
        fast = ["--epochs", "1", "--optimizer", "adam", "--lr", "1e-3", "--quiet", "--json"]
        argv = ["train", *GPT, *fast, "--data", "corpus.txt", "--seed", str(seed)]
        argv += ["--runs-dir", "runs"]
        assert main(argv) == 0, capsys.readouterr().err
        made.append(json.loads(capsys.readouterr().out)["run_dir"])
    summary = _curve(capsys, *made, "--runs-dir", "runs", *FAST, "--align", align,
                     "--curve-batch-size", "8", "--out", "o")  # fmt: skip
    assert summary["kind"] == "bezier" and summary["align"] == align
    history = summary["fit"]["history"]
    assert len(history) == 1 and history[0]["train_loss"] > 0  # nats per token
    curve = summary["curve"]
    assert curve["loss"][0] == summary["loss"][0] and curve["loss"][-1] == summary["loss"][-1]
    assert load_run(summary["control_run"]).config["task"] == "next-token"
    assert summary["plane"] is not None and len(summary["plane"]["loss"]) == 3


def test_lmc_curve_between_two_weight_files_of_a_users_model(tmp_path, capsys):
    (tmp_path / "net.py").write_text(
        "from torch import nn\n\n"
        "def make():\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))\n"
    )
    spec = f"{tmp_path / 'net.py'}:make"
    states = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16),
                                     torch.nn.ReLU(), torch.nn.Linear(16, 10))  # fmt: skip
        states.append({k: v.contiguous() for k, v in module.state_dict().items()})
        save_file(states[-1], str(tmp_path / f"w{seed}.safetensors"))
    out = tmp_path / "own"
    weights = [str(tmp_path / "w1.safetensors"), str(tmp_path / "w2.safetensors")]
    own = ["--model-factory", spec, "--data", "digits"]
    summary = _curve(capsys, *weights, *own, *FAST, "--out", str(out))
    assert summary["control_run"] == str(out / "control")
    assert not (tmp_path / "runs").exists()  # nothing went into a run store
    control = load_run(out / "control", verify=True)
    assert control.config["model"] is None and control.config["curve"]["kind"] == "bezier"
    curve = load_curve(control, *states)  # the endpoints' digests are checked
    assert curve.bend_distance() == pytest.approx(summary["bend_distance"])
    swapped = {k: v + 1.0 for k, v in states[1].items()}
    with pytest.raises(Exception, match="other weights"):
        load_curve(control, states[0], swapped)
