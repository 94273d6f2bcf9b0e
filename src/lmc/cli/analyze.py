"""Layerwise analysis of the merge of two runs: why it works or fails, layer by layer.

For every probe point (hidden layer, ResNet block, logits) and every λ on the path
θ(λ) = (1 − λ)θ_A + λθ_B: LEWC (cosine, relative error, least-squares coefficients against
(1 − λ)^ℓ and λ^ℓ), LLFC (cosine and scale), the endpoint cosine, weak additivity and sign
agreement of the activation, reciprocal orthogonality, commutativity, second-moment and
spectral low-rank summaries, and the logits' norms against LEWC's prediction. Statistics are
streamed over the split; definitions in docs/science.md ("Layerwise connectivity"). The work
is done by lmc.pair (the same code as a sweep's merge job). With --out, writes layers.csv,
summary.json, units.safetensors and figures (cosines.png, moments.png, spectra.png).
With --model-factory (or --hf-model) and --data, RUN_A and RUN_B are weight files of your own
model.
"""

from __future__ import annotations

import argparse
import sys

from lmc.config import environment_info
from lmc.merge import BN_MODES
from lmc.store import jsonable

from .common import (
    add_data_options,
    add_device_option,
    add_lambdas_option,
    add_output_options,
    add_pair_arguments,
    add_runs_dir_option,
    emit_json,
    load_inputs,
    parse_float_list,
)


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
    add_runs_dir_option(parser)
    add_data_options(parser)
    add_device_option(parser)
    add_output_options(parser)


def settings_from_args(args: argparse.Namespace):
    """The :class:`lmc.pair.PairSettings` of the flags: the analysis only, no path."""
    from lmc.pair import AnalysisOptions, PairSettings

    analysis = AnalysisOptions(
        lambdas=parse_float_list(args.lambdas, "--lambdas"),
        max_examples=args.max_examples,
        batch_size=args.batch_size,
        bn=args.bn,
    )
    return PairSettings(
        align=args.align,
        align_examples=args.align_examples or None,
        seed=args.seed,
        split=args.split,
        path=None,
        analysis=analysis,
    )


def run(args: argparse.Namespace) -> int:
    from lmc.analysis.output import format_table
    from lmc.models import module_device
    from lmc.pair import run_pair, summary, write_pair
    from lmc.pair.output import OUTPUT_MARKS
    from lmc.store import check_output_place

    settings = settings_from_args(args)
    if args.out:
        check_output_place(args.out, replaces=OUTPUT_MARKS)  # before the work, not after it
    pair = load_inputs(args, "the analysis")
    model_a, model_b, data = pair.model_a, pair.model_b, pair.data
    result = run_pair(model_a, model_b, data, settings, quiet=args.quiet)
    meta = {**pair.meta, "environment": environment_info(module_device(model_a))}
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
    print(format_table(analysis.records))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0
