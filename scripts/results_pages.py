"""The results pages and the generated blocks of the README and the site's pages, filled in
from the committed files.

Every study folder ``docs/results/<study>/`` holds a page source ``page.md.in`` beside its
results; this script renders it into ``docs/results/<study>/README.md``. In each Markdown file
of :data:`BLOCK_FILES` (the top-level README and the site's pages under docs/), the blocks
between ``<!-- BEGIN generated: NAME -->`` and ``<!-- END generated: NAME -->`` are rendered
from ``docs/results/readme-NAME.md.in``, whichever file the block is in; nothing else in those
files is touched, and every source has its block in exactly one of them. ``docs/studies.md``'s
``method-settings`` block is the alignment methods' ``[merge]`` keys, and the ``methods`` rows of
its ``[merge]`` and onset tables list the methods; all are made from the methods' records
(``lmc.perm.methods``: :data:`METHOD_ROWS`).

    python scripts/results_pages.py            # write every page and block
    python scripts/results_pages.py --check    # exit 1, naming each file, if any would change

A source is Markdown written by hand; every number in it is a placeholder, so no typed number
can drift from the files it quotes. Paths in a placeholder are relative to the folder of the
rendered file for a page (the study folder), and to the repository root for a block, whichever
file holds it; so are a block source's links, which are rewritten to be relative to the file
the block is in (``docs/results/x/README.md`` becomes ``results/x/README.md`` in a page under
docs/).

``{{FILE: FILTERS | COLUMN | SPEC}}``
    A CSV lookup. FILTERS are ``key=value``, ``key!=value`` or ``key>=value`` (also ``>``,
    ``<``, ``<=``), comma-separated (numbers compare as numbers: ``weight_decay=3e-3`` matches
    ``0.003``); COLUMN is a column of the file. SPEC is an optional aggregation followed by
    an optional format. Without an aggregation exactly one row must match. COLUMN may also be
    arithmetic over columns, computed per row (``logit_norm / logit_norm_lewc``).
``{{FILE: key.path | SPEC}}``
    A value of a ``.json`` or ``.toml`` file (dotted path; list items by index).
``{{FILE: `REGEX` | SPEC}}``
    Any other file (a log, a text output): the first group of REGEX's first match (multiline).
``{{? [FILE: FILTERS | COLUMN] vs [FILE: FILTERS | COLUMN] | OPTIONS}}``
    The verdict on the second cell minus the first, in lmc.stats' words (docs/science.md,
    "Statistics and verdicts"): ``higher in every pair: +0.068 ± 0.014 (3 pairs, p = 0.0023)``,
    ``no difference detected: ...; the interval admits ±X``, ``too few pairs (n = 2 < 3): no
    verdict``; the option ``%`` reads values × 100 (accuracies as percentages and percentage
    points, as ``%.1f`` prints them). Each lookup gives one value per pair, keyed by the
    ``pair`` column (``by=COL,COL`` names other key columns, e.g. ``by=set`` or
    ``by=width,pair``); a value repeated on every λ row of a pair counts once, and ``| min``,
    ``| max`` or ``| mean`` after COLUMN aggregate each pair's rows. The comparison is paired
    over the pairs both cells hold when both have the key columns and their studies seed pairs
    alike (one ``[sweep] seed``, both spawned or both not: pair p trains with seed + 2p and seed
    + 2p + 1, so pair p is the same seeds at every width, weight decay, method and variant),
    else Welch's (``unpaired`` forces it). A summary row (``table1.csv``, ``variants.csv``) is
    read from its per-pair ``results.csv`` (beside it, or in the variant's folder) at λ = ½,
    checked to average to the row's mean; without one, only a cell of fewer than 3 pairs can be
    compared (too few pairs).
``{{ratio [NUM] / [DEN] | THRESHOLD | OPTIONS}}``
    Ratios per pair, NUM_p / DEN_p (lookups and options as for ``?``, always paired):
    ``at most 0.1 in every pair: 0.061 ± 0.020 (9 pairs)``, ``above 0.1 in 4 of 9 pairs: ...``;
    without THRESHOLD the ratios' mean with its interval (``0.061 ± 0.020 (n = 9)``).
``{{n? [FILE: FILTERS | COLUMN] | TEXT}}``
    TEXT (plain, no placeholders) where the cell holds at least 3 pairs, else ``too few pairs
    (n = 2 < 3): no verdict``: a reading that rests on one cell.
``{{runtime FOLDER}}``
    How long a study ran, from its ``study.json`` (``wall_seconds_all`` where its folder
    recorded several invocations, else ``wall_seconds``; summed over variant folders) with its
    job counts: ``8.9 min recorded on 2 cores (all 3 jobs run)``; ``run time not recorded``
    without one. Never type a run time.
``{{= EXPR | FORMAT}}``
    Arithmetic (``+ - * / **``, parentheses, ``abs min max log2 sqrt``) over numbers and
    lookups in brackets, ``[FILE: FILTERS | COLUMN | AGG]`` (the AGG a single value: not
    ``ci``, ``range`` or ``list``).

Aggregations, over the matching rows' finite values of COLUMN:
``mean min max sum std n`` (``n``: how many), ``range`` (``a–b``), ``list`` (``a, b``) and
``ci``: the mean and the half-width of its 95 % t-interval over pairs, ``m ± t·s/√n`` with
t = t₀.₉₇₅,ₙ₋₁ and s the sample std (``m (n = 1)`` when there is one value: no interval). On a
summary file (``table1.csv``, ``variants.csv``: ``COLUMN_mean``, ``COLUMN_std`` and ``pairs``
instead of COLUMN) ``ci`` and ``n`` read one row's mean, std and n (n = ``pairs``, less
``undefined_calibration_pairs`` for a ``calibrated_*`` column).

Formats are Python format specs (``.3f``, ``.2g``, ``d``); a leading ``%`` multiplies by 100
first (``%.1f`` prints 0.7242 as 72.4); ``s`` prints the cell as written (the default for text).
Negative numbers print with a minus sign (−), a number that rounds to zero without one, an
undefined (NaN) value as a dash.

Line directives:
``{{#each FILE: FILTERS | by=COL,COL | sort=COL,-COL}}`` ... ``{{/each}}``
    The lines between repeat once per group of the matching rows (one group per distinct value
    of the ``by`` columns, or per row without ``by``; in file order unless ``sort`` is given,
    ``-`` descending). Inside, ``{{COLUMN | SPEC}}`` and ``{{: FILTERS | COLUMN | SPEC}}``
    look in the group's rows, and ``$COL`` anywhere in a placeholder is the group's value of COL.
``{{@run}}``
    The page's "What was run" section: the recipe, its command, the settings (study.toml),
    what study.json recorded, the committed files and how numbers are reported.

``{{COLUMN}}`` inside a loop, for a ``by`` column, is the group's value as written. Prose is
rewrapped to 100 columns after filling in (tables, code, headings and HTML are left as they
are), and every relative link or image in a rendered file must name a file that exists.

This is documentation tooling: it reads committed files only; its statistics are lmc.stats'
(the ``ci`` cell's half-width included), and the ``method-settings`` block and the ``methods``
rows read ``lmc.perm.methods``.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import math
import posixpath
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmc import stats as lstats

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path("docs") / "results"
SOURCE = "page.md.in"
PAGE = "README.md"
#: The Markdown files whose ``generated`` blocks are rendered from ``docs/results/readme-*.md.in``
#: (paths from the repository root): the README and the site's pages that quote results.
BLOCK_FILES = (
    "README.md",
    "docs/experiments.md",
    "docs/findings.md",
    "docs/performance.md",
)
BLOCK_SOURCE = "readme-{name}.md.in"
GENERATED_NOTE = (
    "<!-- generated by scripts/results_pages.py from {source}: edit that file, then run "
    "`python scripts/results_pages.py` -->"
)
BLOCK = re.compile(
    r"^(?P<indent> *)<!-- BEGIN generated: (?P<name>[\w-]+) -->\n(?P<body>.*?)"
    r"^(?P=indent)<!-- END generated: (?P=name) -->",
    re.DOTALL | re.MULTILINE,
)
PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
AGGREGATIONS = ("mean", "min", "max", "sum", "std", "n", "range", "list", "ci")
SCALAR_AGGREGATIONS = ("mean", "min", "max", "sum", "std", "n")
DASH = "—"
MINUS = "−"


class PageError(Exception):
    """A source that cannot be rendered: names the source and the placeholder."""


class Group:
    """The rows a loop iteration looks in, and the values ``$COL`` stands for."""

    def __init__(self, file: str, rows: list, columns: list[str], keys: dict[str, str]) -> None:
        self.file, self.rows, self.columns, self.keys = file, rows, columns, keys


class Context:
    """Where a source renders: ``base`` is the folder of the rendered file (paths resolve from
    it), ``root`` the repository (no path may leave it), ``source`` the name in messages."""

    def __init__(self, base: Path, root: Path, source: str) -> None:
        self.base, self.root, self.source = base, root, source
        self.cache: dict = {}
        self.group: Group | None = None


# ---------------------------------------------------------------------------------------------
# numbers


def t_halfwidth(std: float, n: int) -> float:
    """Half-width of the 95 % t-interval of a mean of ``n`` values with sample std ``std``
    (:func:`lmc.stats.half_width`)."""
    return lstats.half_width(std, n)


def _number(cell: Any) -> float:
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        return float(cell)
    try:
        return float(str(cell).strip())
    except ValueError:
        return math.nan


def fmt(value: Any, spec: str = "") -> str:
    """``value`` formatted by ``spec`` (see the module docstring)."""
    if spec == "s" or (isinstance(value, str) and not spec):
        return str(value)
    if isinstance(value, bool):
        return str(value)
    x = _number(value)
    if not math.isfinite(x):
        return DASH
    if spec.startswith("%"):
        x, spec = 100.0 * x, spec[1:]
    if not spec:
        text = str(int(x)) if float(x).is_integer() else f"{x:g}"
    elif spec.endswith("d"):
        text = format(int(round(x)), spec)
    else:
        text = format(x, spec)
    if text.startswith("-"):
        text = text[1:] if not re.search(r"[1-9]", text) else MINUS + text[1:]
    return text


# ---------------------------------------------------------------------------------------------
# files


def _path(ctx: Context, name: str) -> Path:
    path = (ctx.base / name.strip()).resolve()
    if not path.is_relative_to(ctx.root.resolve()):
        raise PageError(f"{name!r} is outside the repository")
    if not path.is_file():
        raise PageError(f"no file {path.relative_to(ctx.root.resolve())}")
    return path


def _csv(ctx: Context, name: str) -> tuple[list[str], list[dict[str, str]]]:
    path = _path(ctx, name)
    if path not in ctx.cache:
        reader = csv.DictReader(io.StringIO(path.read_text(), newline=""))
        ctx.cache[path] = (list(reader.fieldnames or []), list(reader))
    return ctx.cache[path]


def _structured(ctx: Context, name: str) -> Any:
    path = _path(ctx, name)
    if path not in ctx.cache:
        text = path.read_text()
        ctx.cache[path] = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    return ctx.cache[path]


def _same(cell: str, wanted: str) -> bool:
    a, b = _number(cell), _number(wanted)
    if math.isfinite(a) and math.isfinite(b):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return cell.strip() == wanted.strip()


def _matches(cell: str, op: str, wanted: str) -> bool:
    if op in ("=", "!="):
        return _same(cell, wanted) == (op == "=")
    a, b = _number(cell), _number(wanted)
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _filters(text: str) -> list[tuple[str, str, str]]:
    """``a=1, b!=x, c>=2`` as ``[(a, "=", 1), (b, "!=", x), (c, ">=", 2)]``."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"([\w.]+)\s*(!=|>=|<=|=|>|<)\s*(.*)", part)
        if not m:
            raise PageError(f"bad filter {part!r} (key=value, !=, <, <=, >, >=)")
        out.append((m.group(1), m.group(2), m.group(3).strip()))
    return out


def _select(rows: list[dict[str, str]], columns: list[str], filters, name: str) -> list[dict]:
    for key, _, _ in filters:
        if key not in columns:
            raise PageError(f"{name} has no column {key!r}")
    return [r for r in rows if all(_matches(r[k], op, v) for k, op, v in filters)]


# ---------------------------------------------------------------------------------------------
# placeholders


def _split(text: str, sep: str = "|") -> list[str]:
    """``text`` split at ``sep`` outside backticks and brackets."""
    parts, depth, tick, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "`":
            tick = not tick
        elif not tick and ch == "[":
            depth += 1
        elif not tick and ch == "]":
            depth -= 1
        elif not tick and depth == 0 and ch == sep:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _spec(text: str) -> tuple[str | None, str]:
    """``"ci .3f"`` as ``("ci", ".3f")``; ``".3f"`` as ``(None, ".3f")``."""
    words = text.split(None, 1)
    if words and words[0] in AGGREGATIONS:
        return words[0], words[1].strip() if len(words) > 1 else ""
    return None, text.strip()


class Found:
    """What a lookup found: values (aggregated later), or one row of a summary file
    (``summary``: mean, std, n)."""

    def __init__(self, values: list, summary: tuple | None = None, label: str = "") -> None:
        self.values, self.summary, self.label = values, summary, label


def _csv_lookup(ctx: Context, file: str, selector: str, column: str, agg: str | None) -> Found:
    if file:
        columns, rows = _csv(ctx, file)
        label = file
    elif ctx.group is not None:
        columns, rows, label = ctx.group.columns, ctx.group.rows, ctx.group.file
    else:
        raise PageError("a lookup without a file outside {{#each}}")
    rows = _select(rows, columns, _filters(selector), label)
    if not rows:
        raise PageError(f"no row of {label} matches {selector!r}")
    if column in columns:
        cells = [r[column] for r in rows]
        if agg is None:
            if len(cells) != 1:
                raise PageError(f"{len(cells)} rows of {label} match {selector!r}; name one")
            return Found(cells, label=label)
        return Found(cells, label=label)
    if column not in columns and re.search(r"[-+*/()]", column):
        try:
            tree = ast.parse(column, mode="eval")
        except SyntaxError as exc:
            raise PageError(f"bad column expression {column!r}") from exc
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id not in columns and node.id not in FUNCTIONS:
                raise PageError(f"{label} has no column {node.id!r}")
        values = [_evaluate(tree, {c: _number(r[c]) for c in columns}) for r in rows]
        if agg is None and len(values) != 1:
            raise PageError(f"{len(values)} rows of {label} match {selector!r}; name one")
        return Found(values, label=label)
    if agg in ("ci", "n") and f"{column}_mean" in columns and f"{column}_std" in columns:
        if len(rows) != 1:
            raise PageError(f"{len(rows)} rows of {label} match {selector!r}; name one")
        row = rows[0]
        mean, std = _number(row[f"{column}_mean"]), _number(row[f"{column}_std"])
        if "pairs" not in columns:
            raise PageError(f"{label} has no 'pairs' column for an interval")
        pairs = int(_number(row["pairs"]))
        n = pairs
        if column.startswith("calibrated") and "undefined_calibration_pairs" in columns:
            n -= int(_number(row["undefined_calibration_pairs"]) or 0)
        # table1.csv's std is NaN with one finite value among several pairs, 0 with one pair
        if not math.isfinite(mean):
            n = 0
        elif not math.isfinite(std) and n != 1 or math.isfinite(std) and n < 2 and pairs > 1:
            raise PageError(
                f"cannot tell n for {column} in {label} ({selector}); use per-pair rows"
            )
        return Found([], summary=(mean, std, n), label=label)
    raise PageError(f"{label} has no column {column!r}")


def _path_value(data: Any, dotted: str, label: str) -> Any:
    for key in dotted.split("."):
        if isinstance(data, list) and key.isdigit() and int(key) < len(data):
            data = data[int(key)]
        elif isinstance(data, dict) and key in data:
            data = data[key]
        else:
            raise PageError(f"{label} has no {dotted!r}")
    return data


def _lookup(ctx: Context, parts: list[str]) -> tuple[Found, str | None, str]:
    """A lookup's parts (``FILE: SELECTOR``, then COLUMN for a CSV, then SPEC) as what it
    found, its aggregation and its format."""
    head, rest = parts[0], parts[1:]
    if ":" in head:
        file, selector = (s.strip() for s in head.split(":", 1))
    else:  # {{COLUMN | SPEC}} inside a loop
        file, selector, rest = "", "", parts
    suffix = Path(file).suffix if file else ".csv"
    if suffix == ".csv":
        if not rest:
            raise PageError("a CSV lookup names a column: FILE: FILTERS | COLUMN")
        column, spec = rest[0], rest[1] if len(rest) > 1 else ""
        if len(rest) > 2:
            raise PageError("too many '|'")
        agg, form = _spec(spec)
        return _csv_lookup(ctx, file, selector, column, agg), agg, form
    if len(rest) > 1:
        raise PageError("too many '|'")
    agg, form = _spec(rest[0] if rest else "")
    if suffix in (".json", ".toml"):
        value = _path_value(_structured(ctx, file), selector, file)
        return Found(value if isinstance(value, list) else [value], label=file), agg, form
    m = re.fullmatch(r"`(.*)`", selector, re.DOTALL)
    if not m:
        raise PageError(f"a lookup in {file} is a regex in backticks")
    found = re.search(m.group(1), _path(ctx, file).read_text(), re.MULTILINE)
    if not found or found.lastindex is None:
        raise PageError(f"`{m.group(1)}` has no match with a group in {file}")
    return Found([found.group(1)], label=file), agg, form


def _finite(found: Found) -> list[float]:
    values = [_number(v) for v in found.values]
    return [v for v in values if math.isfinite(v)]


def _scalar(found: Found, agg: str | None) -> Any:
    """One value: the single cell, or a scalar aggregation."""
    if found.summary is not None:
        if agg == "n":
            return found.summary[2]
        raise PageError("a summary row gives 'ci' or 'n'")
    if agg is None:
        if len(found.values) != 1:
            raise PageError(f"{len(found.values)} values; aggregate them")
        return found.values[0]
    values = _finite(found)
    if agg == "n":
        return len(values)
    if not values:
        return math.nan
    if agg == "mean":
        return sum(values) / len(values)
    if agg == "min":
        return min(values)
    if agg == "max":
        return max(values)
    if agg == "sum":
        return sum(values)
    if agg == "std":
        return lstats.summarize(values).std
    raise PageError(f"{agg!r} is not a single value")


def _interval(found: Found) -> tuple[float, float, int]:
    """Mean, half-width of its 95 % t-interval (NaN with n < 2) and n."""
    if found.summary is not None:
        mean, std, n = found.summary
    else:
        values = _finite(found)
        n = len(values)
        mean = sum(values) / n if n else math.nan
        std = lstats.summarize(values).std
    return mean, t_halfwidth(std, n), n


def _render_found(found: Found, agg: str | None, form: str) -> str:
    if agg == "ci":
        mean, half, n = _interval(found)
        if n == 0:
            return DASH
        if n == 1:
            return f"{fmt(mean, form)} (n = 1)"
        return f"{fmt(mean, form)} ± {fmt(half, form)}"
    if agg in ("range", "list"):
        values = _finite(found)
        if not values:
            return DASH
        if agg == "list":
            return ", ".join(fmt(v, form) for v in values)
        low, high = fmt(min(values), form), fmt(max(values), form)
        return low if low == high else f"{low}–{high}"
    return fmt(_scalar(found, agg), form)


FUNCTIONS: dict[str, Callable[..., float]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "log2": math.log2,
    "sqrt": math.sqrt,
}


def _evaluate(node: ast.AST, names: dict[str, float]) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, names)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, names)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left, names), _evaluate(node.right, names)
        ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
        if type(node.op) in ops:
            return ops[type(node.op)]
        if isinstance(node.op, ast.Div):
            return a / b if b != 0 else math.nan
        if isinstance(node.op, ast.Pow):
            return a**b
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in FUNCTIONS
        and not node.keywords
    ):
        return float(FUNCTIONS[node.func.id](*(_evaluate(a, names) for a in node.args)))
    raise PageError(f"not allowed in an expression: {ast.dump(node)[:60]}")


def _expression(ctx: Context, body: str) -> str:
    parts = _split(body)
    if len(parts) > 2:
        raise PageError("an expression is {{= EXPR | FORMAT}}")
    text, form = parts[0], parts[1] if len(parts) > 1 else ""
    names: dict[str, float] = {}
    out, i = [], 0
    while i < len(text):
        if text[i] != "[":
            out.append(text[i])
            i += 1
            continue
        depth, tick, j = 0, False, i
        while j < len(text):
            ch = text[j]
            tick = not tick if ch == "`" else tick
            depth += (ch == "[") - (ch == "]") if not tick else 0
            if depth == 0:
                break
            j += 1
        if j == len(text):
            raise PageError("unclosed '[' in an expression")
        found, agg, _ = _lookup(ctx, _split(text[i + 1 : j]))
        name = f"_v{len(names)}"
        names[name] = _number(_scalar(found, agg))
        out.append(name)
        i = j + 1
    try:
        tree = ast.parse("".join(out).strip(), mode="eval")
    except SyntaxError as exc:
        raise PageError(f"bad expression {text!r}") from exc
    return fmt(_evaluate(tree, names), form)


def _brackets(text: str) -> list[str]:
    """The top-level ``[...]`` contents of ``text``."""
    out, depth, tick, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "`":
            tick = not tick
        elif not tick and ch == "[":
            depth += 1
            start = i + 1 if depth == 1 else start
        elif not tick and ch == "]":
            depth -= 1
            if depth == 0:
                out.append(text[start:i])
    return out


class PairCell:
    """One cell for a verdict: ``values`` pair key -> value (``None`` where only a summary row
    is committed, which gives ``n`` alone), ``keyed`` whether the keys name pairs (else the
    values are compared unpaired), ``seed`` the study seed the pair keys count from."""

    def __init__(self, values: dict | None, n: int, keyed: bool, seed: Any, label: str) -> None:
        self.values, self.n, self.keyed, self.seed, self.label = values, n, keyed, seed, label


def _seed(ctx: Context, file: str) -> Any:
    """How the file's pairs are seeded: ``(seed, spawned)``, the ``[sweep] seed`` of the
    study.toml in the file's folder or the one above it (a variant's own ``sweep`` keys where the
    file is in a variant's folder) and whether pairs are spawned (``spawn_epoch`` > 0: the parent
    of pair p uses seed + p, else A and B train with seed + 2p and seed + 2p + 1); ``None``
    without a study.toml. Cells seeded alike hold the same seeds in pair p."""
    path = _path(ctx, file)
    for folder in (path.parent, path.parent.parent):
        toml = folder / "study.toml"
        if not toml.is_file():
            continue
        if toml not in ctx.cache:
            ctx.cache[toml] = tomllib.loads(toml.read_text())
        study = ctx.cache[toml]
        sweep = dict(study.get("sweep") or {})
        if folder != path.parent:
            for variant in study.get("variants") or []:
                if variant.get("name") == path.parent.name:
                    sweep.update(variant.get("sweep") or {})
        return (sweep.get("seed", 0), bool(sweep.get("spawn_epoch", 0)))
    return None


def _row_value(row: dict, column: str, columns: list[str], label: str) -> float:
    if column in columns:
        return _number(row[column])
    try:
        tree = ast.parse(column, mode="eval")
    except SyntaxError as exc:
        raise PageError(f"{label} has no column {column!r}") from exc
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in columns and node.id not in FUNCTIONS:
            raise PageError(f"{label} has no column {node.id!r}")
    return _evaluate(tree, {c: _number(row[c]) for c in columns})


def _per_key(
    rows: list[dict], columns: list[str], column: str, by: list[str], agg: str | None, label: str
) -> dict:
    """Pair key -> value over ``rows``: one value per key (a value repeated on every λ row of a
    pair counts once), or ``agg`` (``mean``, ``min``, ``max``) of each key's values."""
    for key in by:
        if key not in columns:
            raise PageError(f"{label} has no pair column {key!r} (by=...; or 'unpaired')")

    def part(cell: str) -> Any:  # "0" and "0.0" name one pair
        x = _number(cell)
        return (int(x) if x.is_integer() else x) if math.isfinite(x) else cell.strip()

    groups: dict = {}
    for row in rows:
        key = tuple(part(row[k]) for k in by)
        groups.setdefault(key[0] if len(key) == 1 else key, []).append(
            _row_value(row, column, columns, label)
        )
    out = {}
    for key, values in groups.items():
        finite = [v for v in values if math.isfinite(v)]
        if agg is not None:
            out[key] = _scalar(Found(finite), agg) if finite else math.nan
        elif len(set(finite)) > 1:
            raise PageError(
                f"{len(set(finite))} different values of {column} in {label} for pair {key}: "
                "narrow the filters (e.g. lam=0.5) or aggregate per pair (| min, | mean)"
            )
        else:
            out[key] = finite[0] if finite else math.nan
    return out


def _per_pair_source(file: str, filters: list, columns: list[str], row: dict) -> tuple:
    """The per-pair file behind a summary row and its filters: ``table1.csv`` -> the
    ``results.csv`` beside it at λ = ½; ``variants.csv`` -> ``VARIANT/results.csv``."""
    path = Path(file)
    rest = [f for f in filters if f[0] != "variant" and "." not in f[0]]
    if path.name == "table1.csv":
        folder = path.parent
    elif path.name == "variants.csv" and "variant" in columns:
        folder = path.parent / row["variant"]
    else:
        return None, []
    return str(folder / "results.csv"), [*rest, ("lam", "=", "0.5")]


def _pair_cell(ctx: Context, part: str, by: list[str]) -> PairCell:
    """A verdict's lookup ``FILE: FILTERS | COLUMN`` (``| ci`` allowed, ``| min``, ``| max`` or
    ``| mean`` aggregate each pair's values) as a :class:`PairCell`. A summary row
    (``table1.csv``, ``variants.csv``) is read from its per-pair ``results.csv`` (λ = ½), whose
    mean must be the row's; where none is committed, the row's n only."""
    parts = _split(part)
    agg = None
    if len(parts) == 3:
        if parts[2] not in ("ci", "mean", "min", "max"):
            raise PageError(f"a verdict's lookup ends in | ci, | mean, | min or | max: {part!r}")
        agg = None if parts[2] == "ci" else parts[2]
        parts = parts[:2]
    if len(parts) != 2 or ":" not in parts[0]:
        raise PageError(f"a verdict compares lookups [FILE: FILTERS | COLUMN]: {part!r}")
    file, selector = (s.strip() for s in parts[0].split(":", 1))
    column = parts[1]
    if not file:
        if ctx.group is None:
            raise PageError("a lookup without a file outside {{#each}}")
        file, columns, rows = ctx.group.file, ctx.group.columns, ctx.group.rows
    else:
        columns, rows = _csv(ctx, file)
    filters = _filters(selector)
    rows = _select(rows, columns, filters, file)
    if not rows:
        raise PageError(f"no row of {file} matches {selector!r}")
    if column not in columns and f"{column}_mean" in columns:
        summary = _csv_lookup(ctx, file, selector, column, "n").summary
        if len(rows) != 1 or summary is None:
            raise PageError(f"{len(rows)} rows of {file} match {selector!r}; name one")
        mean, _, n = summary
        source, source_filters = _per_pair_source(file, filters, columns, rows[0])
        if source is None or not (ctx.base / source).is_file():
            return PairCell(None, n, False, None, file)
        source_columns, source_rows = _csv(ctx, source)
        name = column
        if name not in source_columns and name.startswith("merged_"):
            name = name[len("merged_") :]  # table1's merged_accuracy is results' accuracy at ½
        selected = _select(source_rows, source_columns, source_filters, source)
        values = _per_key(selected, source_columns, name, by, None, source)
        finite = [v for v in values.values() if math.isfinite(v)]
        if (
            len(finite) != n
            or n
            and not math.isclose(sum(finite) / n, mean, rel_tol=1e-6, abs_tol=1e-9)
        ):
            raise PageError(
                f"{source} ({', '.join(f'{k}{o}{v}' for k, o, v in source_filters)}) gives "
                f"{len(finite)} values of {name} for {file}'s row of {n} pairs with mean {mean}"
            )
        return PairCell(values, n, True, _seed(ctx, source), source)
    if column not in columns and not re.search(r"[-+*/()]", column):
        raise PageError(f"{file} has no column {column!r}")
    keys = [k for k in by if k in columns]
    keyed = len(keys) == len(by)
    if keyed:
        values = _per_key(rows, columns, column, keys, agg, file)
    elif agg is None:  # no pair column: every row is a value of its own, compared unpaired
        values = {i: _row_value(r, column, columns, file) for i, r in enumerate(rows)}
    else:
        raise PageError(f"{file} has no pair column {', '.join(by)} to aggregate over (by=...)")
    n = sum(1 for v in values.values() if math.isfinite(v))
    return PairCell(values, n, keyed, _seed(ctx, file), file)


def _options(options: list[str], threshold: bool = False) -> tuple[list[str], bool, Any, float]:
    """A verdict's options: ``by=COL,COL`` (the pair key, default ``pair``), ``unpaired``,
    ``%`` (values × 100: fractions read as percentages or percentage points) and, for a ratio,
    a threshold."""
    by, unpaired, limit, scale = ["pair"], False, None, 1.0
    for option in options:
        key, eq, value = option.partition("=")
        if eq and key.strip() == "by":
            by = [v.strip() for v in value.split(",") if v.strip()]
        elif option == "unpaired":
            unpaired = True
        elif option == "%":
            scale = 100.0
        elif threshold and math.isfinite(_number(option)):
            limit = _number(option)
        else:
            raise PageError(f"unknown option {option!r} (by=COL,COL; unpaired; %; a threshold)")
    return by, unpaired, limit, scale


def _two(body: str, word: str) -> list[str]:
    parts = _brackets(body)
    pattern = rf"\s*\[.*\]\s*{re.escape(word)}\s*\[.*\]\s*"
    if len(parts) != 2 or not re.fullmatch(pattern, body, re.DOTALL):
        raise PageError(f"expected [LOOKUP] {word} [LOOKUP]: {body.strip()!r}")
    return parts


def _few(cells: list[PairCell]) -> str | None:
    """``too few pairs`` where a cell has under 3 pairs; an error where a cell known only from a
    summary row has enough pairs for a verdict but no per-pair values."""
    n = min(c.n for c in cells)
    if n < lstats.MIN_PAIRS:
        return lstats.too_few(n)
    for c in cells:
        if c.values is None:
            raise PageError(
                f"{c.label}: a verdict needs per-pair values (no results.csv beside it)"
            )
    return None


def _verdict(ctx: Context, body: str) -> str:
    """``[A] vs [B] | OPTIONS``: :func:`lmc.stats.verdict` on B − A, paired over the pairs the
    cells share (keys ``by=``, default ``pair``, from one seed), else Welch's."""
    head, *options = _split(body)
    by, unpaired, _, scale = _options(options)
    first, second = (_pair_cell(ctx, part, by) for part in _two(head, "vs"))
    few = _few([first, second])
    if few:
        return few
    paired = not unpaired and first.keyed and second.keyed and first.seed == second.seed
    a = {k: v * scale for k, v in first.values.items()}
    b = {k: v * scale for k, v in second.values.items()}
    if paired:
        return lstats.verdict(lstats.compare(a, b))
    return lstats.verdict(lstats.compare(list(a.values()), list(b.values())))


def _ratio(ctx: Context, body: str) -> str:
    """``[NUM] / [DEN] | THRESHOLD | OPTIONS``: per-pair ratios, :func:`lmc.stats.ratio_verdict`
    against THRESHOLD (the ratios' cell without one)."""
    head, *options = _split(body)
    by, _, limit, _ = _options(options, threshold=True)
    num, den = (_pair_cell(ctx, part, by) for part in _two(head, "/"))
    few = _few([num, den])
    if few:
        return few
    if not (num.keyed and den.keyed and num.seed == den.seed):
        raise PageError("a ratio is taken per pair: both lookups need the pair columns (by=...)")
    r = lstats.ratios(num.values, den.values, limit)
    if r.n < lstats.MIN_PAIRS:
        return lstats.too_few(r.n)
    return lstats.ratio_verdict(r) if limit is not None else lstats.cell_text(r.cell)


def _enough(ctx: Context, body: str) -> str:
    """``[LOOKUP] | TEXT | OPTIONS``: TEXT where the cell has at least 3 pairs, else
    ``too few pairs (n = 2 < 3): no verdict``."""
    head, *rest = _split(body)
    if not rest:
        raise PageError("{{n? [LOOKUP] | TEXT}}")
    text, options = rest[0], rest[1:]
    by, _, _, _ = _options(options)
    parts = _brackets(head)
    if len(parts) != 1:
        raise PageError("{{n? [LOOKUP] | TEXT}}")
    n = _pair_cell(ctx, parts[0], by).n
    return text if n >= lstats.MIN_PAIRS else lstats.too_few(n)


def _runtime(ctx: Context, body: str) -> str:
    """``FOLDER``: the wall time its ``study.json`` files recorded (summed over variants)."""
    folder = (ctx.base / body.strip()).resolve()
    if not folder.is_relative_to(ctx.root.resolve()) or not folder.is_dir():
        raise PageError(f"no study folder {body.strip()!r}")
    records = _records(folder)
    if not records:
        return "run time not recorded"
    total, run, jobs, cpus = 0.0, 0, 0, set()
    for _, record in records:
        wall = record.get("wall_seconds_all") or record.get("wall_seconds")
        if not isinstance(wall, (int, float)):
            return "run time not recorded"
        total += wall
        run += int((record.get("jobs") or {}).get("run", 0))
        if record.get("wall_seconds_all"):  # earlier invocations' jobs count as run too
            history = [h for h in record.get("history") or [] if isinstance(h, dict)]
            earlier = sum(int((h.get("jobs") or {}).get("run", 0)) for h in history)
            total_jobs = int((record.get("jobs") or {}).get("total", 0))
            run = min(run + earlier, jobs + total_jobs)  # a study that shrank: at most all
        jobs += int((record.get("jobs") or {}).get("total", 0))
        cpus.add((record.get("environment") or {}).get("cpu_count"))
    where = f" on {cpus.pop()} cores" if len(cpus) == 1 and None not in cpus else ""
    if jobs == 1 and run == 1:
        done = "its one job run"
    elif run == jobs:
        done = f"all {jobs} jobs run"
    elif run == 0:
        done = f"none of its {jobs} jobs run, all reused"
    else:
        done = f"{run} of {jobs} jobs run, the rest reused"
    return f"{_minutes(total)} recorded{where} ({done})"


def render_placeholder(ctx: Context, body: str) -> str:
    """The text one ``{{...}}`` stands for."""
    if ctx.group is not None:
        body = re.sub(r"\$(\w+)", lambda m: _key(ctx.group, m.group(1)), body)
    body = body.strip()
    if ctx.group is not None and body in ctx.group.keys:  # {{COL}}: the group's value, as written
        return ctx.group.keys[body]
    if body.startswith("="):
        return _expression(ctx, body[1:])
    if body.startswith("?"):
        return _verdict(ctx, body[1:])
    if body.startswith("ratio "):
        return _ratio(ctx, body[len("ratio ") :])
    if body.startswith("n? "):
        return _enough(ctx, body[len("n? ") :])
    if body.startswith("runtime "):
        return _runtime(ctx, body[len("runtime ") :])
    found, agg, form = _lookup(ctx, _split(body))
    return _render_found(found, agg, form)


def _key(group: Group, column: str) -> str:
    if column not in group.keys:
        raise PageError(f"${column} is not a key of this loop (by=...)")
    return group.keys[column]


# ---------------------------------------------------------------------------------------------
# lines, loops and directives


def _groups(ctx: Context, spec: str) -> list[Group]:
    parts = _split(spec)
    file, selector = (s.strip() for s in parts[0].split(":", 1))
    columns, rows = _csv(ctx, file)
    rows = _select(rows, columns, _filters(selector), file)
    by: list[str] = []
    order: list[str] = []
    for option in parts[1:]:
        key, _, value = option.partition("=")
        names = [v.strip() for v in value.split(",") if v.strip()]
        if key.strip() == "by":
            by = names
        elif key.strip() == "sort":
            order = names
        else:
            raise PageError(f"unknown loop option {option!r} (by=, sort=)")
    for name in by + [o.lstrip("-") for o in order]:
        if name not in columns:
            raise PageError(f"{file} has no column {name!r}")
    groups: dict[tuple, Group] = {}
    for i, row in enumerate(rows):
        key = tuple(row[c] for c in by) if by else (i,)
        keys = {c: row[c] for c in by} if by else dict(row)
        groups.setdefault(key, Group(file, [], columns, keys)).rows.append(row)
    out = list(groups.values())
    for name in reversed(order):
        column = name.lstrip("-")

        def sort_key(g: Group, column: str = column) -> tuple:
            x = _number(g.rows[0][column])
            return (0, x, "") if math.isfinite(x) else (1, 0.0, g.rows[0][column])

        out.sort(key=sort_key, reverse=name.startswith("-"))
    if not out:
        raise PageError(f"no row of {file} matches {selector!r}")
    return out


def _render_line(ctx: Context, line: str) -> str:
    return PLACEHOLDER.sub(lambda m: render_placeholder(ctx, m.group(1)), line)


def render_text(ctx: Context, text: str, directives: dict[str, Callable[[], str]]) -> str:
    """A source's text with its loops, directives and placeholders rendered."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        try:
            loop = re.fullmatch(r"\s*\{\{#each (.*)\}\}\s*", line)
            directive = re.fullmatch(r"\s*\{\{@(\w+)\}\}\s*", line)
            if loop:
                end = next(
                    (j for j in range(i + 1, len(lines)) if lines[j].strip() == "{{/each}}"), None
                )
                if end is None:
                    raise PageError("{{#each}} without {{/each}}")
                for group in _groups(ctx, loop.group(1)):
                    ctx.group = group
                    try:
                        out.extend(_render_line(ctx, body) for body in lines[i + 1 : end])
                    finally:
                        ctx.group = None
                i = end + 1
                continue
            if directive:
                if directive.group(1) not in directives:
                    raise PageError(f"unknown directive {{{{@{directive.group(1)}}}}}")
                out.append(directives[directive.group(1)]())
            else:
                out.append(_render_line(ctx, line))
        except PageError as exc:
            raise PageError(f"{ctx.source}, line {i + 1}: {exc}\n    {line.strip()}") from None
        i += 1
    return "\n".join(out)


def _links_exist(ctx: Context, text: str) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (ctx.base / target.split("#")[0]).resolve()
        to_be_rendered = path.name == PAGE and (path.parent / SOURCE).is_file()
        if not path.exists() and not to_be_rendered:
            raise PageError(f"{ctx.source}: the link {target!r} names no file")


def _minutes(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def _records(folder: Path) -> list[tuple[str, dict]]:
    """The study.json records of a study folder: its own, or one per variant subfolder."""
    own = folder / "study.json"
    if own.is_file():
        return [("", json.loads(own.read_text()))]
    return [
        (sub.name, json.loads((sub / "study.json").read_text()))
        for sub in sorted(p for p in folder.iterdir() if p.is_dir())
        if (sub / "study.json").is_file()
    ]


def _record_line(name: str, record: dict) -> str:
    jobs = record.get("jobs") or {}
    env = record.get("environment") or {}
    bits = [f"started {record['started']}"] if record.get("started") else []
    wall = record.get("wall_seconds")
    if isinstance(wall, (int, float)):
        bits.append(f"wall time {_minutes(wall)}")
    history = record.get("history") or []
    total = record.get("wall_seconds_all")
    if history and isinstance(total, (int, float)):
        bits.append(
            f"{_minutes(total)} over the {len(history) + 1} invocations its folder recorded"
        )
    if jobs:
        bits.append(
            f"{jobs.get('total', '?')} jobs ({jobs.get('run', '?')} run, "
            f"{jobs.get('reused', '?')} reused from the run store)"
        )
    workers, per_job = record.get("workers"), record.get("threads_per_job")
    if isinstance(per_job, int) and per_job > 0:  # what each job ran with, not the parent's
        workers = workers if isinstance(workers, int) and workers > 0 else 1
        bits.append(
            f"{workers} worker{'s' if workers != 1 else ''} of {per_job} torch "
            f"thread{'s' if per_job != 1 else ''} each"
        )
    elif env.get("torch_threads"):
        bits.append(f"{env['torch_threads']} torch threads")
    if env.get("torch"):
        bits.append(f"torch {env['torch']}")
    where = f"[`{name}/study.json`]({name}/study.json)" if name else "[`study.json`](study.json)"
    return f"- {where}: " + ", ".join(bits) + "."


def run_section(folder: Path) -> str:
    """The "What was run" section of a study page."""
    toml_text = (folder / "study.toml").read_text()
    study = tomllib.loads(toml_text)
    name = study.get("name", folder.name)
    lines = [
        "## What was run",
        "",
        f"Recipe `{name}`: {study.get('description', '').strip()}",
        "",
        "```bash",
        f"lmc sweep {name}",
        "```",
        "",
        "The settings are the committed [`study.toml`](study.toml) (the recipe as it ran, "
        "every key in [docs/studies.md](../../studies.md)):",
        "",
        "<details><summary>study.toml</summary>",
        "",
        "```toml",
        toml_text.rstrip("\n"),
        "```",
        "",
        "</details>",
        "",
    ]
    records = _records(folder)
    if records:
        lines.append("What the sweep recorded (`study.json`; times on the 2-core CPU it ran on):")
        lines.append("")
        lines.extend(_record_line(n, r) for n, r in records)
    else:
        lines.append(
            "No `study.json` is committed for this study, so its run time is not recorded."
        )
    files = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name not in (SOURCE, PAGE, "study.toml", "study.json")
    )
    lines += [
        "",
        "Committed files: " + ", ".join(f"[`{f}`]({f})" for f in files) + ".",
        "",
        "**How numbers are reported.** A mean over pairs is written m ± h: h is the half-width "
        "of its 95 % t-interval over the n independent pairs, t₀.₉₇₅,ₙ₋₁ · s / √n with s the "
        "sample standard deviation (ddof = 1); with n = 1 there is no interval, written "
        "m (n = 1). Two cells are compared by the interval of their difference, paired over "
        "the pairs they share (the same seeds) and by Welch's interval otherwise, never by "
        "whether their own intervals overlap; a difference is named only where that interval "
        "excludes 0, and a cell of fewer than 3 pairs gets no verdict "
        "([docs/science.md](../../science.md#statistics-and-verdicts)). Accuracies are "
        "percentages, accuracy barriers percentage points, losses and loss barriers nats. "
        '"A against B" is the difference A − B. Every number on this page is filled in from '
        "the committed files by `scripts/results_pages.py` from [`page.md.in`](page.md.in).",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# reflowing: filled-in placeholders leave ragged lines; prose is rewrapped to WIDTH columns


WIDTH = 100
_SKIP = ("|", "<", "#", "!", ">")
_ITEM = re.compile(r"^( *)(- |\d+\. )?")
_BLOCK_START = re.compile(r"^\s*([-+*] |\d+\. |#|>|\|)")


def _wrap_item(lines: list[str]) -> list[str]:
    m = _ITEM.match(lines[0])
    indent, marker = m.group(1), m.group(2) or ""
    words = " ".join(x.strip() for x in lines)[len(marker) :]
    words = re.sub(r" (?=± |%)|(?<= ±) ", "\x00", words)  # keep "m ± h" and "5 %" on one line
    for width in range(WIDTH, WIDTH - 20, -1):
        out = textwrap.wrap(
            words,
            width,
            initial_indent=indent + marker,
            subsequent_indent=indent + " " * len(marker),
            break_long_words=False,
            break_on_hyphens=False,
        )
        if not any(_BLOCK_START.match(line) for line in out[1:]):
            return [line.replace("\x00", " ") for line in out]
    return lines  # pragma: no cover - no width avoids a line that reads as Markdown


def _wrap_block(block: list[str]) -> list[str]:
    if any(line.lstrip().startswith(_SKIP) for line in block):
        return block
    items: list[list[str]] = []
    for line in block:
        if re.match(r"^ *(- |\d+\. )", line) or not items:
            items.append([line])
        else:
            items[-1].append(line)
    return [out for item in items for out in _wrap_item(item)]


def reflow(text: str) -> str:
    """``text`` with each prose paragraph and list item rewrapped to :data:`WIDTH` columns;
    code fences, tables, headings, images and HTML lines are left as they are."""
    out: list[str] = []
    block: list[str] = []
    fence = False

    def flush() -> None:
        out.extend(_wrap_block(block))
        block.clear()

    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            flush()
            fence = not fence
            out.append(line)
        elif fence:
            out.append(line)
        elif not line.strip():
            flush()
            out.append(line)
        else:
            block.append(line)
    flush()
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# pages and generated blocks


def study_folders(root: Path = ROOT) -> list[Path]:
    """The study folders that have a page source."""
    return sorted(p.parent for p in (root / RESULTS).glob(f"*/{SOURCE}"))


def render_page(folder: Path, root: Path = ROOT) -> str:
    """A study page rendered from its source."""
    source = folder / SOURCE
    ctx = Context(base=folder, root=root, source=str(source.relative_to(root)))
    directives = {"run": lambda: run_section(folder)}
    body = reflow(render_text(ctx, source.read_text(), directives))
    if "## What was run" not in body:
        raise PageError(f"{ctx.source}: no {{{{@run}}}} section")
    _links_exist(ctx, body)
    return GENERATED_NOTE.format(source=SOURCE) + "\n" + body.rstrip("\n") + "\n"


_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def rebase_links(text: str, folder: str) -> str:
    """``text``'s relative links, written from the repository root, rewritten from ``folder``
    (a folder relative to the root, ``"."`` for the root itself)."""
    if folder in ("", "."):
        return text

    def rebase(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"[a-z]+:", target) or target.startswith(("#", "/")):
            return m.group(0)
        path, hash_, anchor = target.partition("#")
        return f"{m.group(1)}{posixpath.relpath(path, folder)}{hash_}{anchor}{m.group(3)}"

    return _LINK.sub(rebase, text)


def render_blocks(text: str, root: Path = ROOT, where: str = "README.md") -> str:
    """``text``, the Markdown file ``where`` (relative to ``root``), with every generated block
    rendered from its source: placeholders read from the repository root, links rebased."""
    folder = posixpath.dirname(where) or "."

    def block(m: re.Match) -> str:
        name = m.group("name")
        source = root / RESULTS / BLOCK_SOURCE.format(name=name)
        if not source.is_file():
            raise PageError(f"{where}: block {name!r} has no source {source.relative_to(root)}")
        ctx = Context(base=root, root=root, source=str(source.relative_to(root)))
        rendered = rebase_links(render_text(ctx, source.read_text(), {}), folder)
        body = reflow(rendered).rstrip("\n")
        _links_exist(Context(base=root / folder, root=root, source=ctx.source), body)
        indent = m.group("indent")
        return (
            f"{indent}<!-- BEGIN generated: {name} -->\n{body}\n"
            f"{indent}<!-- END generated: {name} -->"
        )

    return BLOCK.sub(block, text)


def _check_block_sources(texts: dict[str, str], root: Path) -> None:
    """Every ``readme-NAME.md.in`` source has its block in exactly one of the block files."""
    where: dict[str, list[str]] = {}
    for file, text in texts.items():
        for m in BLOCK.finditer(text):
            where.setdefault(m.group("name"), []).append(file)
    for source in sorted((root / RESULTS).glob(BLOCK_SOURCE.format(name="*"))):
        name = source.name.removeprefix("readme-").removesuffix(".md.in")
        files = where.get(name, [])
        if len(files) != 1:
            raise PageError(
                f"{source.relative_to(root)}: its block <!-- BEGIN generated: {name} --> is in "
                f"{len(files)} of {', '.join(BLOCK_FILES)} ({', '.join(files) or 'none'}); "
                "put it in exactly one (BLOCK_FILES lists the files searched)"
            )


def merge_methods_row() -> str:
    """The ``methods`` row of ``docs/studies.md``'s ``[merge]`` table: every registered alignment
    method, in registration order, with its record's ``summary``."""
    from lmc.perm.methods import all_methods

    methods = all_methods()
    names = ", ".join(f"`{m.name}`" for m in methods)
    summaries = ", ".join(f"`{m.name}` ({m.summary})" for m in methods)
    return (
        f'| `methods` | list of strings | `["none", "weight"]` | non-empty; each {names}, or the '
        f"control `random-direction` | grid | how B is aligned onto A before interpolating: "
        f"{summaries}; the control `random-direction` is not an alignment: its rows are the path "
        "from A to A + ‖B − A‖·u for a random unit direction u seeded by `align_seed` (the "
        "flatness control), without the layerwise analysis; see [science.md § Permutations]"
        "(science.md#permutations) and [§ Symmetries beyond permutations]"
        "(science.md#symmetries-beyond-permutations) |"
    )


def onset_methods_row() -> str:
    """The ``methods`` row of ``docs/studies.md``'s onset table: every registered alignment
    method, in registration order."""
    from lmc.perm.methods import method_names

    names = ", ".join(f"`{name}`" for name in method_names())
    return (
        f'| `methods` | list | `["none", "weight"]` | {names} | alignment of B onto A before the '
        "path |"
    )


#: The rows of ``docs/studies.md`` made from the alignment methods' records: the heading of the
#: section that holds the row (its table's row whose first cell is ``key``) -> (key, the row).
METHOD_ROWS = {
    "## `[merge]`": ("methods", merge_methods_row),
    '### `experiment = "onset"`: Git Re-Basin Fig. 3': ("methods", onset_methods_row),
}


def _replace_row(text: str, heading: str, key: str, row: str) -> str:
    """``text`` with the first table row whose first cell is `` `key` `` after the line
    ``heading`` (and before the next heading) replaced by ``row``."""
    lines = text.split("\n")
    if heading not in lines:
        raise PageError(f"docs/studies.md has no heading {heading!r}: METHOD_ROWS names it")
    start = lines.index(heading) + 1
    for i in range(start, len(lines)):
        if lines[i].startswith("#"):
            break
        if lines[i].startswith(f"| `{key}` |"):
            lines[i] = row
            return "\n".join(lines)
    raise PageError(f"docs/studies.md: no `{key}` row under {heading!r} (METHOD_ROWS names it)")


def render_studies_doc(text: str) -> str:
    """``docs/studies.md`` with its ``method-settings`` block holding the ``[merge]`` keys of
    the alignment methods and its ``methods`` rows (:data:`METHOD_ROWS`) listing the methods,
    made from their records (``lmc.perm.methods``)."""
    from lmc.experiments.width_settings import method_key_rows

    header = "| key | type | default | allowed values | identity | meaning |"
    body = "\n".join([header, "|---|---|---|---|---|---|", *method_key_rows()])

    def block(m: re.Match) -> str:
        if m.group("name") != "method-settings":
            return m.group(0)
        indent = m.group("indent")
        return (
            f"{indent}<!-- BEGIN generated: method-settings -->\n{body}\n"
            f"{indent}<!-- END generated: method-settings -->"
        )

    text = BLOCK.sub(block, text)
    for heading, (key, make) in METHOD_ROWS.items():
        text = _replace_row(text, heading, key, make())
    return text


def outputs(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file and the text it should hold."""
    out = {folder / PAGE: render_page(folder, root) for folder in study_folders(root)}
    texts = {name: (root / name).read_text() for name in BLOCK_FILES}
    _check_block_sources(texts, root)
    for name, text in texts.items():
        out[root / name] = render_blocks(text, root, name)
    studies = root / "docs" / "studies.md"
    out[studies] = render_studies_doc(studies.read_text())
    return out


def stale(root: Path = ROOT) -> list[Path]:
    """The generated files whose committed text differs from what the sources give."""
    return [
        path
        for path, text in outputs(root).items()
        if not path.is_file() or path.read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            paths = stale()
            for path in paths:
                print(f"stale: {path.relative_to(ROOT)}", file=sys.stderr)
            return 1 if paths else 0
        for path, text in outputs().items():
            if not path.is_file() or path.read_text() != text:
                path.write_text(text)
                print(f"wrote {path.relative_to(ROOT)}")
    except PageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
