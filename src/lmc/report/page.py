"""What every report shares: a report page (:class:`Page`) and how it is written
(:func:`write_document`), its opening (the title and the study's description), its last
section (:func:`reproducibility_blocks`) and the reading of a results folder's record
(:func:`read_record`).

A report (the width study's in :mod:`lmc.report.build`, each other kind's in its own module)
is a function ``(folder, title, quiet) -> Page`` named by its kind's record
(:mod:`lmc.experiments.kinds`); :func:`lmc.report.write_report` writes the page. Those modules
import this one at top level; it imports none of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmc.config import LmcError
from lmc.store import atomic_path, check_output_place, output_files, read_json, write_text

from .document import Block, Code, Heading, Image, Note, Para, Table, opening, to_html, to_markdown
from .figures import Plot, Skip
from .style import SCREEN_DPI

__all__ = [
    "DASH",
    "FIGURE_DIR",
    "Figures",
    "Page",
    "fmt_seconds",
    "opening",
    "read_record",
    "reproducibility_blocks",
    "write_document",
]

DASH = "—"
FIGURE_DIR = "figures"


def fmt_seconds(seconds: Any) -> str:
    """A duration: ``12.3 s``, ``4 min 05 s`` or ``1 h 02 min 03 s``; a dash when unknown."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return DASH
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min {sec:02d} s" if hours else f"{minutes} min {sec:02d} s"


def _readable(path: Path) -> None:
    """Atomic writes create 0600 files; a report is for sharing, so make it world-readable
    (0644; best effort)."""
    try:
        path.chmod(0o644)
    except OSError:
        pass


class Figures:
    """A report's figure writer: :meth:`block` writes a plot's PNG and SVG into
    ``figure_dir`` and returns its image block (a skipped figure becomes a note)."""

    def __init__(self, figure_dir: Path) -> None:
        self.figure_dir = figure_dir
        self.paths: list[str] = []
        self.svg_paths: list[str] = []
        self.count = 0

    def block(self, result: Plot | Skip) -> Block:
        if isinstance(result, Skip):
            return Note(f"{result.title}: skipped ({result.reason}).")
        self.count += 1
        path = self.figure_dir / f"{result.name}.png"
        svg = path.with_suffix(".svg")
        for target, data in ((path, result.png), (svg, result.svg)):
            with atomic_path(target) as tmp:
                tmp.write_bytes(data)
            _readable(target)
        self.paths.append(str(path))
        self.svg_paths.append(str(svg))
        return Image(
            number=self.count,
            file=f"{self.figure_dir.name}/{path.name}",
            title=result.title,
            caption=result.caption,
            png=result.png,
            full=f"{self.figure_dir.name}/{svg.name}",
            width=round(result.rendered.size[0] * SCREEN_DPI),
        )


@dataclass(frozen=True)
class Page:
    """A report to write. Its blocks: the opening (``title``, then the description of
    ``record``, ``study.json``'s or ``variants.json``'s contents), the body that
    ``body(figures)`` builds (turning each figure into an image block with
    ``figures.block(plot)``), and, when ``folder`` (the results folder) is given, the
    reproducibility section (:func:`reproducibility_blocks` of ``record``, ``folder`` and the
    study file's text ``toml``). ``figures=False``: the page has no figures (no ``figures/``
    folder is written, an earlier one is left)."""

    title: str
    body: Callable[[Figures], list[Block]]
    record: Mapping[str, Any] = field(default_factory=dict)
    folder: Path | None = None
    toml: str | None = None
    figures: bool = True

    def blocks(self, figures: Figures) -> list[Block]:
        """Every block of the page, in order (the class docstring)."""
        blocks = [*opening(self.title, dict(self.record)), *self.body(figures)]
        if self.folder is not None:
            blocks += reproducibility_blocks(dict(self.record), self.folder, self.toml)
        return blocks


def write_document(out: Path, page: Page) -> dict[str, Any]:
    """Write ``report.md``, ``report.html`` and ``figures/`` of ``page`` into ``out`` as one
    unit (an earlier report's are replaced; a failure leaves the folder as it was). Returns
    ``{"report_md", "report_html", "figures"}`` (PNG paths; each SVG beside its PNG)."""
    out = Path(out)
    check_output_place(out, "report folder")
    names = ("report.md", "report.html", *((FIGURE_DIR,) if page.figures else ()))
    with output_files(out, names) as stage:
        figures = Figures(stage / FIGURE_DIR)
        if page.figures:
            figures.figure_dir.mkdir()
        blocks = page.blocks(figures)
        write_text(stage / "report.md", to_markdown(blocks))
        write_text(stage / "report.html", to_html(blocks, page.title))
        for name in ("report.md", "report.html"):
            _readable(stage / name)
    return {
        "report_md": str(out / "report.md"),
        "report_html": str(out / "report.html"),
        "figures": [str(out / FIGURE_DIR / Path(p).name) for p in figures.paths],
    }


def reproducibility_blocks(study: dict, path: Path, toml: str | None) -> list[Block]:
    """A report's last section: when and where the study ran, the environment, the resolved
    configuration (``study`` is ``study.json``'s contents) and the study file."""
    blocks: list[Block] = [Heading(2, "Reproducibility")]
    jobs = study.get("jobs") if isinstance(study.get("jobs"), dict) else {}
    run_rows = [
        ["started", str(study.get("started", DASH))],
        ["finished", str(study.get("finished", DASH))],
        ["wall time", fmt_seconds(study.get("wall_seconds"))],
        *(
            [["wall time, all invocations", fmt_seconds(study.get("wall_seconds_all"))]]
            if study.get("history")
            else []
        ),
        [
            "jobs",
            f"{jobs.get('total', DASH)} total, {jobs.get('reused', DASH)} reused (finished "
            f"earlier), {jobs.get('run', DASH)} run"
            if jobs
            else DASH,
        ],
        ["results folder", f"`{path}`"],
    ]
    blocks.append(Heading(3, "Run"))
    blocks.append(Table(["item", "value"], run_rows))
    env = study.get("environment")
    blocks.append(Heading(3, "Environment"))
    if isinstance(env, dict) and env:
        blocks.append(Table(["item", "value"], [[str(k), str(v)] for k, v in env.items()]))
    else:
        blocks.append(Note("No environment recorded (study.json absent or without it)."))
    blocks.append(Heading(3, "Configuration"))
    config = study.get("config")
    if config is not None:
        blocks.append(Para("The resolved study configuration, exactly as recorded:"))
        blocks.append(Code(json.dumps(config, indent=2, default=str), "json"))
    else:
        blocks.append(Note("No configuration recorded (study.json absent or without it)."))
    if toml:
        blocks.append(Heading(3, "Study file"))
        blocks.append(Para("`study.toml` as given:"))
        blocks.append(Code(toml, "toml"))
    return blocks


def read_record(folder: Path, files: tuple[str, ...]) -> tuple[dict[str, Any], str | None]:
    """``(study.json's contents, study.toml's text or None)`` of a kind's results folder, after
    checking that ``study.json`` and each of ``files`` are there (an ``LmcError`` naming the
    first missing one)."""
    for name in ("study.json", *files):
        if not (folder / name).is_file():
            raise LmcError(f"{folder} has no {name}: run `lmc sweep` on its study first")
    record = read_json(folder / "study.json", "study record")
    toml = folder / "study.toml"
    return record, toml.read_text(encoding="utf-8") if toml.is_file() else None
