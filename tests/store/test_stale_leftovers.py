"""What a killed writer leaves, and how the next run tidies it.

lmc writes a folder or file under a temporary name beside its place and renames it in
(``.<name>.lmc-<host>-<pid>.<random>.tmp``; an earlier output is set aside as
``.<name>.lmc-<host>-<pid>.old`` meanwhile). A ``kill -9`` can leave either behind. The states
a kill leaves are made here by hand (a real kill hits the window rarely): each must be tidied
by the next run when its writer is provably gone (this machine, no such process), and left
alone otherwise (a live concurrent worker, another machine, a name without lmc's tag).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from lmc.cli.main import main
from lmc.store import load_run, output_dir, output_files
from lmc.store.atomic import is_stale, owner_tag, remove_stale

TINY = ["--dataset", "digits", "--model", "mlp", "--width", "8", "--epochs", "1", "--quiet"]


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has exited (skips if the pid was handed out again)."""
    done = subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert done.returncode == 0
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    try:
        os.kill(proc.pid, 0)
    except ProcessLookupError:
        return proc.pid
    pytest.skip("the exited process's pid is in use again")


def _host() -> str:
    return owner_tag().split("-")[1]


def _tag(pid: int, host: str | None = None) -> str:
    return f"lmc-{host or _host()}-{pid}"


def _other_host() -> str:
    return "00000000" if _host() != "00000000" else "11111111"


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _train(runs: Path, *extra: str) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return main(["train", *TINY, "--runs-dir", str(runs), *extra])


def test_is_stale_only_for_a_dead_writer_on_this_machine(dead_pid):
    dead, live = _tag(dead_pid), _tag(os.getpid())
    assert is_stale(f".mlp-digits-0123456789ab.{dead}.k2x_9q.tmp")
    assert is_stale(f".mlp-digits-0123456789ab.{dead}.old")
    assert is_stale(f".{dead}.a1b2c3.tmp")  # a staging folder of lmc.store.output_files
    assert is_stale(f".summary.json.{dead}.a1b2c3.tmp")  # an atomic file write
    assert not is_stale(f".mlp-digits-0123456789ab.{live}.k2x_9q.tmp")  # a live worker
    assert not is_stale(f".mlp-digits-0123456789ab.{_tag(dead_pid, _other_host())}.k2.tmp")
    assert not is_stale(".mlp-digits-0123456789ab.k2x_9q.tmp")  # no tag (an older lmc)
    assert not is_stale(f"mlp-digits.{dead}.k2x_9q.tmp")  # not hidden: not lmc's
    assert not is_stale(f".mlp-digits.{dead}.k2x_9q.tmp.keep")


def test_remove_stale_removes_only_what_is_provably_stale(tmp_path, dead_pid):
    dead, live, other = _tag(dead_pid), _tag(os.getpid()), _tag(dead_pid, _other_host())
    stale = [f".run-a.{dead}.abc123.tmp", f".{dead}.x_y.tmp"]
    kept = [f".run-b.{live}.abc123.tmp", f".run-c.{other}.abc123.tmp", ".run-d.abc123.tmp",
            "run-e", f".run-e.{dead}.old.bak"]  # fmt: skip
    for name in stale + kept:
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"half")
    (tmp_path / f".notes.txt.{dead}.q1w2e3.tmp").write_text("half")  # a file, not a folder
    removed = remove_stale(tmp_path)
    assert sorted(p.name for p in removed) == sorted([*stale, f".notes.txt.{dead}.q1w2e3.tmp"])
    assert {p.name for p in tmp_path.iterdir()} == set(kept)


def test_a_set_aside_folder_whose_place_is_empty_is_put_back(tmp_path, dead_pid):
    """Killed between moving the earlier output aside and renaming the new one in: the
    earlier output comes back (the half-made new one goes), so nothing is lost."""
    dead = _tag(dead_pid)
    earlier = tmp_path / f".out.{dead}.old"
    earlier.mkdir()
    (earlier / "summary.json").write_text("{}")
    newer = tmp_path / f".out.{dead}.k2x_9q.tmp"
    newer.mkdir()
    (newer / "summary.json").write_text("{")
    remove_stale(tmp_path)
    assert _listing(tmp_path) == {"out", "out/summary.json"}
    assert (tmp_path / "out" / "summary.json").read_text() == "{}"
    # with its place taken (killed after the rename, before the cleanup) it is removed
    earlier.mkdir()
    remove_stale(tmp_path)
    assert _listing(tmp_path) == {"out", "out/summary.json"}


def test_temporary_names_carry_the_writers_tag(tmp_path):
    with output_dir(tmp_path / "out") as tmp:
        assert tmp.name.startswith(f".out.{owner_tag()}.") and tmp.name.endswith(".tmp")
        (tmp / "a.txt").write_text("a")
    with output_files(tmp_path / "out", ["b.txt"]) as stage:
        assert stage.name.startswith(f".{owner_tag()}.")
        (stage / "b.txt").write_text("b")
    assert _listing(tmp_path) == {"out", "out/a.txt", "out/b.txt"}


def test_output_dir_through_a_link_replaces_the_links_target(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to("target")
    for text in ("first", "second"):
        with output_dir(tmp_path / "link", replaces=("summary.json",)) as tmp:
            (tmp / "summary.json").write_text(text)
        assert (tmp_path / "link").is_symlink()
        assert (tmp_path / "target" / "summary.json").read_text() == text
        assert {p.name for p in tmp_path.iterdir()} == {"link", "target"}


def _killed_mid_save(runs: Path, run: Path, tag: str) -> None:
    """The store as a kill inside RunStore.save leaves it: the run's folder still unfinished
    (its config only, as training made it) and the new folder half-written beside it."""
    half = runs / f".{run.name}.{tag}.k2x_9q.tmp"
    run.rename(half)
    for name in ("metrics.json", "manifest.json"):
        (half / name).unlink()
    run.mkdir()
    shutil.copy(half / "config.json", run / "config.json")


def test_a_rerun_of_lmc_train_tidies_a_killed_save(tmp_path, dead_pid):
    reference, runs = tmp_path / "reference", tmp_path / "runs"
    assert _train(reference) == 0
    assert _train(runs) == 0
    (run,) = list(runs.iterdir())
    _killed_mid_save(runs, run, _tag(dead_pid))
    live = runs / f".other-run.{_tag(os.getpid())}.abc123.tmp"  # a concurrent worker's
    live.mkdir()
    assert _train(runs) == 0  # trains the run again (it did not finish)
    live.rmdir()
    assert _listing(runs) == _listing(reference)
    a, b = load_run(run).state_dict(), load_run(reference / run.name).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_rerun_that_reuses_every_run_still_tidies(tmp_path, dead_pid):
    """Killed after the new folder was renamed in, before the earlier one was removed: the run
    is finished, so the rerun trains nothing, and still leaves no leftover."""
    runs = tmp_path / "runs"
    assert _train(runs) == 0
    before = _listing(runs)
    (run,) = list(runs.iterdir())
    old = runs / f".{run.name}.{_tag(dead_pid)}.old"
    old.mkdir()
    (old / "config.json").write_text("{}")
    assert _train(runs) == 0
    assert _listing(runs) == before


def test_a_rerun_of_a_killed_sweep_leaves_what_an_uninterrupted_one_does(
    tmp_path, dead_pid, tiny_study, study_toml
):
    study = tmp_path / "tidy.toml"
    study.write_text(study_toml(tiny_study("tidy", model={"depth": None})))

    def sweep(out: Path, runs: Path) -> int:
        argv = ["sweep", str(study), "--out", str(out), "--runs-dir", str(runs),
                "--workers", "1", "--no-report", "--quiet"]  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return main(argv)

    assert sweep(tmp_path / "out-ref", tmp_path / "runs-ref") == 0
    out, runs = tmp_path / "out", tmp_path / "runs"
    assert sweep(out, runs) == 0
    run = sorted(runs.iterdir())[0]
    _killed_mid_save(runs, run, _tag(dead_pid))  # the --workers 1 sweep killed in a save
    stage = out / f".{_tag(dead_pid)}.a1b2c3.tmp"  # and one killed writing its results
    stage.mkdir()
    (stage / "results.csv").write_text("half")
    assert sweep(out, runs) == 0
    assert _listing(runs) == _listing(tmp_path / "runs-ref")
    assert not stage.exists()
    assert (out / "results.csv").read_bytes() == (tmp_path / "out-ref" / "results.csv").read_bytes()
