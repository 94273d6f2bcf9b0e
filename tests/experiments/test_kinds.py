"""Experiment kinds as one record each: the registry, a plug-in kind from study file to
report, the one options object, and no import circle in lmc.experiments or lmc.report."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import lmc
from lmc.config import LmcError
from lmc.experiments import RunOptions, kinds, resolve, run_study
from lmc.experiments.kind_run import StudyRecord, reuse_or_run, write_tables
from lmc.experiments.kind_settings import header
from lmc.report import write_report
from lmc.report.document import Para
from lmc.report.kinds import register_report, report_for
from lmc.report.page import Page, read_record

SRC = Path(lmc.__file__).resolve().parent


@pytest.fixture
def registry(monkeypatch):
    """A copy of the kinds registry, so a kind registered in a test is gone after it."""
    monkeypatch.setattr(kinds, "_KINDS", dict(kinds._KINDS))
    return kinds


def _resolve_echo(raw, source=None):
    name, description = header(raw, "echo", ("name", "description", "experiment", "echo"), source)
    return {"name": name, "description": description, "experiment": "echo", "echo": raw["echo"]}


def _run_echo(study, options: RunOptions):
    record = StudyRecord(study, options, "cpu")
    record.running()
    job = {"type": "echo", **study["echo"]}

    def compute():
        return {"rows": [{"value": v, "square": v * v} for v in study["echo"]["values"]]}

    result, reused = reuse_or_run(options.out, "echo-1", job, compute)
    files = write_tables(options.out, ECHO_OUTPUTS, {"rows": result["rows"]})
    return record.finished({"total": 1, "reused": int(reused), "run": int(not reused)}, files)


def _echo_page(folder, title, quiet):
    record, toml = read_record(folder, ("echo.csv",))
    rows = (folder / "echo.csv").read_text().splitlines()
    return Page(title or "Echo", lambda figures: [Para(f"{len(rows) - 1} rows")], record, folder)


ECHO_OUTPUTS = {"rows": ("echo.csv", ["value", "square"])}
ECHO = kinds.ExperimentKind(
    name="echo",
    summary="a plug-in kind of the tests",
    resolve=_resolve_echo,
    run=_run_echo,
    report=_echo_page,
    outputs=ECHO_OUTPUTS,
)


def test_a_plugin_kind_runs_reuses_and_reports_without_a_change_to_lmc(registry, tmp_path):
    registry.register_kind(ECHO)
    assert registry.kind_names()[0] == "width" and registry.kind_names()[-1] == "echo"
    study = resolve({"name": "e", "experiment": "echo", "echo": {"values": [1, 2, 3]}})
    out = tmp_path / "out"
    first = run_study(study, out, RunOptions(toml_text="# echo\n"), quiet=True)
    assert first["experiment"] == "echo" and first["jobs"]["run"] == 1
    assert first["files"] == {"rows": "echo.csv"}
    assert (out / "echo.csv").read_text().splitlines() == ["value,square", "1,1", "2,4", "3,9"]
    assert (out / "study.toml").read_text() == "# echo\n"
    again = run_study(study, out, quiet=True)
    assert again["jobs"] == {"total": 1, "reused": 1, "run": 0}
    written = write_report(out)
    text = Path(written["report_md"]).read_text()
    assert text.startswith("# Echo") and "3 rows" in text and "## Reproducibility" in text
    assert written["figures"] == [] and json.loads((out / "study.json").read_text())["jobs"]


def test_every_own_kind_is_one_record_with_a_report_and_its_tables():
    names = [kind.name for kind in kinds.BUILTIN_KINDS]
    assert names[0] == kinds.DEFAULT_KIND == "width"
    assert kinds.kind_names()[: len(names)] == names
    for kind in kinds.BUILTIN_KINDS:
        assert kinds.get_kind(kind.name) is kind
        assert re.fullmatch(r"lmc\.report\.\w+:\w+_page", kind.report), kind.name
        assert kind.outputs and all(name.endswith(".csv") for name, _ in kind.outputs.values())
    assert [k.name for k in kinds.BUILTIN_KINDS if k.variants] == ["width", "merge-many"]


def test_a_folder_without_study_json_gets_the_width_report(tmp_path):
    from lmc.report.build import width_page

    assert report_for(tmp_path) is width_page


def test_register_report_still_works_with_a_warning(registry, tmp_path):
    registry.register_kind(ECHO)
    (tmp_path / "study.json").write_text(json.dumps({"experiment": "echo", "name": "x"}))
    calls = []

    def old_style(results_dir, *, out_dir=None, title=None, quiet=True):
        calls.append((Path(results_dir), out_dir, title))
        return {"report_md": "m", "report_html": "h", "figures": []}

    with pytest.warns(DeprecationWarning, match="register_report is deprecated"):
        register_report("echo", old_style)
    assert write_report(tmp_path, title="T")["report_html"] == "h"
    assert calls == [(tmp_path, None, "T")]
    with (
        pytest.raises(LmcError, match="unknown experiment 'nope'"),
        pytest.warns(DeprecationWarning),
    ):
        register_report("nope", old_style)


def test_run_options_derive_the_jobs_context(tmp_path, monkeypatch):
    from lmc.experiments import Context, LocalExecutor

    monkeypatch.setenv("LMC_RUNS", str(tmp_path / "store"))
    one = RunOptions(executor=LocalExecutor(1), out_dir=tmp_path, log_dir="tb")
    ctx = one.job_context()
    assert type(ctx) is Context and ctx.out_dir == str(tmp_path) and ctx.quiet is False
    assert ctx.log_dir == str(Path("tb").absolute()) and one.threads == 1
    assert RunOptions(executor=LocalExecutor(2), runs_dir=tmp_path).job_context().quiet
    assert RunOptions(executor=LocalExecutor(1), runs_dir=tmp_path).job_context().runs_dir == str(
        tmp_path
    )
    with pytest.raises(LmcError, match="out_dir is not set"):
        _ = RunOptions().out


def _imports(path: Path, module: str) -> tuple[set[str], set[str]]:
    """``(imported, named)``: the modules ``module`` imports anywhere in its text (inside
    functions too), and those it names as ``"module:function"`` strings (imported later)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    imported, named = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - max(node.level - 1, 0)]
            name = (".".join([*base, node.module or ""]) if node.level else node.module).rstrip(".")
            imported |= {name, *(f"{name}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named |= set(re.findall(r"^(lmc(?:\.\w+)+):\w+$", node.value))
    return imported, named


def test_no_import_circle_in_experiments_or_report():
    modules = {}
    for package in ("experiments", "report"):
        for path in (SRC / package).glob("*.py"):
            name = f"lmc.{package}" + ("" if path.stem == "__init__" else f".{path.stem}")
            modules[name] = path
    graph = {}
    for name, path in modules.items():
        imported, named = _imports(path, name)
        if name.startswith("lmc.experiments"):  # data flows one way: experiments -> report
            assert not {m for m in imported if m.startswith("lmc.report")}, name
        # a package's own names (lmc.experiments.read_csv, ...) are read from its modules
        edges = (imported | named) - {name, "lmc.experiments", "lmc.report"}
        graph[name] = {m for m in edges if m in modules}
    assert graph["lmc.experiments.kinds"] >= {"lmc.report.build", "lmc.report.onset"}  # seen

    def circle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return trail
                if nxt not in trail:
                    stack.append((nxt, [*trail, nxt]))
        return None

    circles = [c for c in map(circle_from, sorted(graph)) if c]
    assert not circles, circles[0]
