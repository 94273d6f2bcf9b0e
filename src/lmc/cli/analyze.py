"""Layerwise analysis of the merge of two runs: why it works or fails, layer by layer.

For every probe point (hidden layer, ResNet block, logits) and every λ on the path
θ(λ) = (1 − λ)θ_A + λθ_B: LEWC (cosine, relative error, least-squares coefficients against
(1 − λ)^ℓ and λ^ℓ), LLFC (cosine and scale), the endpoint cosine, weak additivity and sign
agreement of the activation, reciprocal orthogonality, commutativity, second-moment and
spectral low-rank summaries, and the logits' norms against LEWC's prediction. Statistics are
streamed over the split; definitions in SCIENCE.md ("Layerwise connectivity"). With --out,
writes layers.csv, summary.json, units.safetensors and figures (cosines.png, moments.png,
spectra.png).
"""

from __future__ import annotations

import argparse
import sys

from lmc.config import environment_info
from lmc.merge import BN_MODES, bn_aware_merge, resolve_bn_mode

from .common import (
    add_data_options,
    add_device_option,
    add_output_options,
    add_runs_dir_option,
    align_to_a,
    check_same_setup,
    dataset_for_config,
    device_from,
    emit_json,
    jsonable,
    parse_float_list,
    resolve_run,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_a", metavar="RUN_A", help="run folder (or its name in --runs-dir) of model A, λ = 0"
    )
    parser.add_argument(
        "run_b", metavar="RUN_B", help="run folder (or its name in --runs-dir) of model B, λ = 1"
    )
    parser.add_argument(
        "--align",
        default="none",
        metavar="METHOD",
        help="permute B to match A first with lmc.perm.align on the training split: weight, "
        "activation, ste or random; none = analyse B as it is",
    )
    parser.add_argument(
        "--lam", default="0.5", help="λ or comma-separated list (θ(λ) = (1 − λ)θ_A + λθ_B)"
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
    parser.add_argument("--batch-size", type=int, default=256, help="examples per batch")
    parser.add_argument(
        "--out", default=None, help="folder for layers.csv, summary.json and figures"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the alignment and of the Monte-Carlo check"
    )
    add_runs_dir_option(parser)
    add_data_options(parser)
    add_device_option(parser)
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    from lmc.analysis import analyze
    from lmc.analysis.output import format_table, write_results

    lams = parse_float_list(args.lam, "--lam")
    run_a, run_b = resolve_run(args.run_a, args.runs_dir), resolve_run(args.run_b, args.runs_dir)
    check_same_setup(run_a, run_b, "the analysis")
    device = device_from(args)
    data = dataset_for_config(run_a.config, args, device)
    x, _ = data.split(args.split)
    model_a, model_b = run_a.build_model(device), run_b.build_model(device)
    state_b = None
    if args.align != "none":
        state_b = align_to_a(args.align, model_a, model_b, data, args.seed, args.quiet).state_dict
    result = analyze(
        model_a,
        model_b,
        x,
        lams,
        batch_size=args.batch_size,
        max_examples=args.max_examples,
        state_b=state_b,
        merge_fn=bn_aware_merge(model_a, model_b, args.bn, data.x_train, state_b=state_b),
        quiet=args.quiet,
    )
    result.settings.update(
        bn=resolve_bn_mode(model_a, args.bn),
        run_a=str(run_a.path),
        run_b=str(run_b.path),
        model=run_a.config["model"],
        model_options=run_a.config["model_options"],
        dataset=run_a.config["dataset"],
        split=args.split,
        align=args.align,
        seed=args.seed,
        environment=environment_info(device),
    )
    summary = jsonable(
        {
            "layers": result.records,
            "settings": result.settings,
            "theory": result.theory(seed=args.seed),
        }
    )
    written = write_results(result, args.out, summary) if args.out else []
    if args.json:
        emit_json(summary)
        return 0
    aligned = f" (aligned by {args.align})" if state_b is not None else ""
    print(
        f"A = {run_a.name}\nB = {run_b.name}{aligned}"
        f"\n{result.settings['n_examples']} {args.split} examples of {run_a.config['dataset']}; "
        f"biases: {'yes' if result.settings['has_bias'] else 'no'}; "
        f"Thm 5.4 Gaussian limit {summary['theory']['gaussian_relu_limit']:.4f}"
    )
    print(format_table(result.records))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0
