"""Every verb writes its outputs one way: a bad output place is exit 2, one line, nothing left.

For each verb that writes (train, align, interpolate, analyze, merge, sweep, report) the output
place (``--out``, or ``--runs-dir`` for the verbs whose product is a stored run) is put at an
existing file, at a dangling symbolic link, inside a read-only folder (a read-only tmpfs, since
the tests may run as root, where permissions do not stop writes) and on a full disk (a tiny
tmpfs). Each must exit 2 with one line on stderr naming the problem, and leave nothing new
behind. The tmpfs cases need ``mount`` (root); they are skipped elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
import warnings
from pathlib import Path

import pytest

from lmc.cli.main import main

TINY = ["--dataset", "digits", "--model", "mlp", "--width", "8", "--epochs", "1"]


@pytest.fixture(scope="module")
def made(tmp_path_factory, tiny_study, study_toml):
    """Two tiny finished runs, a tiny sweep's results folder, in a store of their own."""
    root = tmp_path_factory.mktemp("made")
    runs = root / "runs"
    paths = []
    for seed in ("0", "1"):
        assert main(["train", *TINY, "--seed", seed, "--runs-dir", str(runs), "--quiet"]) == 0
    paths = sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    study = root / "tiny.toml"
    study.write_text(study_toml(tiny_study(model={"depth": None}, merge={"calibrate": None})))
    results = root / "results"
    code = main(["sweep", str(study), "--out", str(results), "--runs-dir", str(runs), "--quiet"])
    assert code == 0
    return {"runs": runs, "a": paths[0], "b": paths[1], "study": study, "results": results}


def _argv(verb: str, made: dict, out: Path) -> list[str]:
    """The verb's command line with its output place at ``out`` (test paths have no spaces)."""
    a, b, runs, o = made["a"], made["b"], made["runs"], out
    line = {
        "train": f"train {' '.join(TINY)} --seed 7 --runs-dir {o}",
        "align": f"align {a} {b} --runs-dir {o}",
        "interpolate": f"interpolate {a} {b} --lambdas 3 --out {o} --runs-dir {runs}",
        "analyze": f"analyze {a} {b} --out {o} --runs-dir {runs} --max-examples 64",
        "merge": f"merge {a} {b} --align none --runs-dir {o}",
        # merge's summary folder: checked before the merge, so no merged run is stored either
        "merge-out": f"merge {a} {b} --align none --out {o} --runs-dir {o.parent / 'merge-runs'}",
        "sweep": f"sweep {made['study']} --out {o} --runs-dir {runs}",
        "report": f"report {made['results']} --out {o}",
    }[verb]
    return [*line.split(), "--quiet"]


VERBS = ["train", "align", "interpolate", "analyze", "merge", "merge-out", "sweep", "report"]


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def _one_line_exit_2(argv, capsys) -> str:
    with warnings.catch_warnings():  # a tiny run's calibration warnings are not the error
        warnings.simplefilter("ignore")
        code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("verb", VERBS)
def test_out_at_a_file(verb, made, tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("not a folder")
    before = _listing(tmp_path)
    line = _one_line_exit_2(_argv(verb, made, target), capsys)
    assert str(target) in line
    assert target.read_text() == "not a folder"
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("verb", VERBS)
def test_out_at_a_dangling_link(verb, made, tmp_path, capsys):
    target = tmp_path / "link"
    target.symlink_to(tmp_path / "nowhere")
    before = _listing(tmp_path)
    line = _one_line_exit_2(_argv(verb, made, target), capsys)
    assert str(target) in line
    assert _listing(tmp_path) == before
    assert not (tmp_path / "nowhere").exists()


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.fixture
def tmpfs(tmp_path):
    """``mount(options)`` mounts a fresh tmpfs under tmp_path and returns its path."""
    if not _can_mount():
        pytest.skip("needs root to mount a tmpfs")
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        point = tmp_path / f"fs-{uuid.uuid4().hex[:6]}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                              capture_output=True)  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.mark.parametrize("verb", VERBS)
def test_out_in_a_read_only_folder(verb, made, tmpfs, capsys):
    point = tmpfs("size=1m,ro")
    target = point / "out"
    line = _one_line_exit_2(_argv(verb, made, target), capsys)
    assert str(point) in line and "read-only" in line.lower()
    assert _listing(point) == set()


def _fill(point: Path) -> None:
    """Fill the file system at ``point`` to the last byte."""
    fd = os.open(point / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for size in (4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    assert os.statvfs(point).f_bavail == 0


@pytest.mark.parametrize("verb", VERBS)
def test_out_on_a_full_disk(verb, made, tmpfs, capsys):
    point = tmpfs("size=64k")
    _fill(point)
    target = point / "out"
    line = _one_line_exit_2(_argv(verb, made, target), capsys)
    assert str(point) in line and "no space" in line.lower()
    assert _listing(point) == {"filler"}


@pytest.mark.parametrize("verb", VERBS)
def test_a_disk_that_fills_midway_leaves_nothing(verb, made, tmpfs, capsys):
    """Two pages free: the place passes the check before the work, and a write fails later."""
    point = tmpfs("size=64k")
    _fill(point)
    filler = point / "filler"
    os.truncate(filler, filler.stat().st_size - 2 * 4096)
    target = point / "out"
    line = _one_line_exit_2(_argv(verb, made, target), capsys)
    assert str(point) in line and "no space" in line.lower()
    assert _listing(point) == {"filler"}


# ---------------------------------------------------------------------------------------------
# --out given as a symbolic link to a folder, and --out at a folder of other files

# the verbs whose --out is a folder lmc writes (replaced whole, or written file by file)
FOLDER_VERBS = ["interpolate", "analyze", "merge-out", "sweep", "report"]


def _quiet_main(argv) -> int:
    with warnings.catch_warnings():  # a tiny run's calibration warnings are not the point
        warnings.simplefilter("ignore")
        return main(argv)


@pytest.mark.parametrize("verb", FOLDER_VERBS)
def test_out_at_a_link_to_a_folder_writes_into_its_target(verb, made, tmp_path, capsys):
    """The outputs land in the link's target; the link stays a link; nothing is left beside."""
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to("target")  # relative, as `ln -s target link` makes it
    for _ in range(2):  # a second run replaces the first's outputs, through the link again
        assert _quiet_main(_argv(verb, made, link)) == 0, capsys.readouterr().err
        assert link.is_symlink() and os.readlink(link) == "target"
        written = {p.name for p in target.iterdir()}
        assert written and not any(name.startswith(".") for name in written), written
        hidden = {p.name for p in tmp_path.iterdir() if p.name.startswith(".")}
        assert hidden == set(), hidden  # no temporary or set-aside folder
    marks = {"interpolate": "summary.json", "analyze": "summary.json", "merge-out": "merge.json",
             "sweep": "study.json", "report": "report.md"}  # fmt: skip
    assert marks[verb] in written


@pytest.mark.parametrize("verb", ["interpolate", "analyze", "merge-out"])
def test_out_at_a_folder_of_other_files_says_what_to_do(verb, made, tmp_path, capsys):
    """Refused (lmc replaces its output folder whole), with the way out in the one line."""
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    line = _one_line_exit_2(_argv(verb, made, busy), capsys)
    assert str(busy) in line and "holds other files" in line
    assert "give a new or empty folder" in line
    assert str(busy / "lmc-out") in line  # a concrete place to use instead
    assert "or the folder an earlier run of this command wrote" in line
    assert {p.name for p in busy.iterdir()} == {"notes.txt"}
    assert (busy / "notes.txt").read_text() == "mine"
    # the suggested place works, and so does running again into it (its outputs replaced)
    for _ in range(2):
        assert _quiet_main(_argv(verb, made, busy / "lmc-out")) == 0
    assert (busy / "notes.txt").read_text() == "mine" and (busy / "lmc-out").is_dir()
