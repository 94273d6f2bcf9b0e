"""Layerwise analysis of the merge of two runs: why it works or fails, layer by layer.

For every probe point (hidden layer, ResNet block, logits) and every λ on the path
θ(λ) = (1 − λ)θ_A + λθ_B: LEWC (cosine, relative error, least-squares coefficients against
(1 − λ)^ℓ and λ^ℓ), LLFC (cosine and scale), the endpoint cosine, weak additivity and sign
agreement of the activation, reciprocal orthogonality, commutativity, second-moment and
spectral low-rank summaries, and the logits' norms against LEWC's prediction. Statistics are
streamed over the split; definitions in docs/science.md ("Layerwise connectivity"). The work
is done by lmc.pair (the same code as a sweep's merge job). Prints a compact table (ten
columns, a legend naming each one's record key under it); every record in full is in --json,
and with --out in layers.csv, beside summary.json, units.safetensors and figures (cosines.png,
moments.png, spectra.png).
For two training runs, each run's initial weights are rebuilt from its init seed and the
retention columns (init_coef_a/_b, init_share_a/_b, init_shared_energy_a/_b, init_shared_rank,
init_shared_chance; docs/science.md, "Initialisation retention") are filled in, printed in a
second table with each run's decay budget (settings.retention in --json).
With --model-factory (or --hf-model) and --data, RUN_A and RUN_B are weight files of your own
model.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from lmc.analysis.layer_metrics import column_format, column_notes, compact_columns
from lmc.analysis.output import aligned_lines, format_cell, logit_norm_lines
from lmc.config import environment_info
from lmc.merge import BN_MODES
from lmc.store import jsonable

from .common import (
    add_lambdas_option,
    add_pair_arguments,
    add_run_options,
    emit_json,
    load_inputs,
    pair_alignment,
    parse_float_list,
)

#: The printed table's columns: (title, record key), generated from the layerwise metric
#: records (lmc.analysis.layer_metrics: a column's ``title``; a metric registered later is
#: printed too). The legend under the table names each title's record key, defined in
#: docs/science.md ("Layerwise connectivity"). Every column of the full records
#: (lmc.analysis.layer_metrics.record_keys()) is in layers.csv (--out) and in --json.
COMPACT_COLUMNS: tuple[tuple[str, str], ...] = compact_columns()
#: A few words after the record keys that need them.
COLUMN_NOTES = column_notes()
#: Longest layer name printed whole; longer ones keep their end ("..." + tail).
NAME_CHARS = 16
TABLE_WIDTH = 100


def _short_number(value: float) -> str:
    if (value != 0 and abs(value) < 5e-4) or abs(value) >= 1e5:
        return f"{value:.0e}"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.0f}"


def _short(value: Any) -> str:
    """A cell of at most 6 characters (full precision stays in layers.csv / --json)."""
    if value is not None and not isinstance(value, int):
        value = float(value)
    return format_cell(value, _short_number)


def _name(value: Any) -> str:
    text = str(value)
    return text if len(text) <= NAME_CHARS else "..." + text[-(NAME_CHARS - 3) :]


def compact_table(records: list[dict[str, Any]]) -> str:
    """The printed summary of an analysis: one row per record (λ outer, layer inner) with the
    :data:`COMPACT_COLUMNS`, a legend naming each column's record key (wrapped to
    :data:`TABLE_WIDTH` columns), and the logits' norms per λ. Fits in 100 columns."""
    columns = compact_columns()
    header = [title for title, _ in columns]
    cell = {key: column_format(key) or _short for _, key in columns}
    rows = [
        [
            _name(r[key]) if key == "name" else f"{r[key]:g}" if key == "lam" else cell[key](r[key])
            for _, key in columns
        ]
        for r in records
    ]
    lines = aligned_lines(header, rows) + logit_norm_lines(records, _short)
    lines += legend()
    return "\n".join(lines)


def legend() -> list[str]:
    """The lines under the table: each column's ``title = record key`` (the keys of
    layers.csv, defined in docs/science.md), then where the full records are; wrapped to
    :data:`TABLE_WIDTH`, continuation lines indented."""
    notes = column_notes()
    parts = [
        f"{title} = {key}" + (f" ({notes[key]})" if key in notes else "")
        for title, key in compact_columns()
    ]
    text = (
        "Columns = record keys (docs/science.md, Layerwise connectivity): "
        + "; ".join(parts)
        + "; - = undefined here. All columns at full precision: layers.csv (--out) or --json."
    )
    return textwrap.wrap(text, TABLE_WIDTH, subsequent_indent="  ", break_on_hyphens=False)


#: The retention table's columns: (title, record key); the legend under it names each key.
RETENTION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("coef A", "init_coef_a"),
    ("coef B", "init_coef_b"),
    ("share A", "init_share_a"),
    ("share B", "init_share_b"),
    ("shared A", "init_shared_energy_a"),
    ("shared B", "init_shared_energy_b"),
    ("k", "init_shared_rank"),
    ("chance", "init_shared_chance"),
)


def retention_inputs(pair: Any) -> tuple[tuple[dict, dict] | None, dict[str, Any] | None]:
    """``(init_states, retention)`` of a pair of training runs: both initial states rebuilt
    from the runs' configs, and per run its decay budget (``lmc.analysis.retention.run_decay``;
    the training-set size read from the loaded data). ``(None, None)`` for weight files or a
    run that is not a training run (aligned, merged)."""
    from lmc.analysis.retention import SHARED_RANK_RULE, can_rebuild_init, initial_state, run_decay

    runs = getattr(pair, "runs", None)
    if not runs or not all(can_rebuild_init(run.config) for run in runs):
        return None, None
    size = len(pair.data.x_train)
    meta = {side: run_decay(run, size) for side, run in zip(("a", "b"), runs)}
    meta["shared_rank"] = SHARED_RANK_RULE
    return (initial_state(runs[0].config), initial_state(runs[1].config)), meta


def retention_table(records: list[dict[str, Any]], retention: dict[str, Any]) -> str:
    """The printed retention summary: each run's decay budget and decay-only factor, then one
    row per probe point with a weight (the first λ's records: retention does not depend on λ),
    rows indented, and a legend naming each column's record key; fits in 100 columns."""
    a, b = retention["a"], retention["b"]

    def factor(side: dict) -> str:
        return _short(side["decay_factor"]) if side["decay_factor"] is not None else "-"

    lines = [
        "Initial weights kept (W_0 rebuilt from init seeds; docs/science.md, Initialisation "
        "retention):",
        f"  decay budget sum_t lr_t*wd: A {_short(a['decay_budget'])}, "
        f"B {_short(b['decay_budget'])}; decay alone would leave A {factor(a)}, "
        f"B {factor(b)} of W_0",
    ]
    first = records[0]["lam"] if records else None
    shown = [r for r in records if r["lam"] == first and r.get("init_coef_a") is not None]
    header = ["layer", *(title for title, _ in RETENTION_COLUMNS)]
    rows = [[_name(r["name"]), *(_short(r[key]) for _, key in RETENTION_COLUMNS)] for r in shown]
    lines += ["  " + line for line in aligned_lines(header, rows)]
    parts = "; ".join(f"{title} = {key}" for title, key in RETENTION_COLUMNS)
    text = (
        f"Columns: {parts} (coef <W_T,W_0>/|W_0|^2, share |cos(W_T,W_0)|, shared: W_0's energy "
        "in the top-k singular subspaces of A_T + B_T, chance k^2/(rows*cols))."
    )
    lines += textwrap.wrap(text, TABLE_WIDTH, initial_indent="  ", subsequent_indent="  ")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_pair_arguments(parser)
    add_lambdas_option(
        parser, "0.5", "λ or comma-separated list (θ(λ) = (1 − λ)θ_A + λθ_B; default 0.5)"
    )
    parser.add_argument(
        "--split", default="test", choices=("test", "train"), help="split to analyse"
    )
    parser.add_argument(
        "--bn",
        default="auto",
        choices=BN_MODES,
        help="BatchNorm statistics of the merged model: reset or repair them on the training "
        "split (auto = reset when the model has BatchNorm), or none (interpolated as they are)",
    )
    parser.add_argument(
        "--max-examples", type=int, default=None, help="analyse at most this many examples"
    )
    parser.add_argument(
        "--batch-size", type=int, default=256, help="examples per batch (default 256)"
    )
    parser.add_argument(
        "--out", default=None, help="folder for layers.csv, summary.json and figures"
    )
    add_run_options(parser)


def settings_from_args(args: argparse.Namespace):
    """The :class:`lmc.pair.PairSettings` of the flags: the analysis only, no path."""
    from lmc.pair import AnalysisOptions, PairSettings

    analysis = AnalysisOptions(
        lambdas=parse_float_list(args.lambdas, "--lambdas"),
        max_examples=args.max_examples,
        batch_size=args.batch_size,
        bn=args.bn,
    )
    return PairSettings(**pair_alignment(args), path=None, analysis=analysis)


def run(args: argparse.Namespace) -> int:
    from lmc.models import module_device
    from lmc.pair import run_pair, summary, write_pair
    from lmc.pair.output import OUTPUT_MARKS
    from lmc.store import check_output_place

    settings = settings_from_args(args)
    if args.out:
        check_output_place(args.out, replaces=OUTPUT_MARKS)  # before the work, not after it
    pair = load_inputs(args, "the analysis")
    model_a, model_b, data = pair.model_a, pair.model_b, pair.data
    init_states, retention = retention_inputs(pair)
    result = run_pair(model_a, model_b, data, settings, quiet=args.quiet, init_states=init_states)
    meta = {**pair.meta, "environment": environment_info(module_device(model_a))}
    meta["retention"] = retention
    data_summary = summary(result)
    data_summary["settings"].update(jsonable(meta))
    written = write_pair(result, args.out, data_summary) if args.out else []
    if args.json:
        emit_json(data_summary)
        return 0
    analysis = result.analysis
    aligned = f" (aligned by {args.align})" if args.align != "none" else ""
    print(
        f"A = {pair.name_a}\nB = {pair.name_b}{aligned}"
        f"\n{analysis.settings['n_examples']} {args.split} examples of {pair.dataset}; "
        f"biases: {'yes' if analysis.settings['has_bias'] else 'no'}; "
        f"Thm 5.4 Gaussian limit {data_summary['theory']['gaussian_relu_limit']:.4f}"
    )
    print(compact_table(analysis.records))
    if retention is not None:
        print(retention_table(analysis.records, retention))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0
