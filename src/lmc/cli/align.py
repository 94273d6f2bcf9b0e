"""Align model B's units to model A's, and store the result as a new run.

--method takes any registered alignment method (its help lists them all). Permutations:
weight (weight matching: data-free coordinate descent on Σ<W_A, P W_B P_prevᵀ>), onepass (Git
Re-Basin's greedy one-pass matching), activation (one assignment per layer on the correlation
of the two models' features over training examples), ste (straight-through estimator: learns
the permutation that lowers the midpoint's training loss; the best one seen is kept, weight
matching's included) and random (a uniformly random valid permutation: the control). Beyond
permutations (pre-LN transformers, in the canonical form): orthogonal, orthogonal-activation,
learned, and canonical (their control: no alignment). The symmetry spec is derived from the
architecture with torch.fx.

The aligned B is written as a new run (kind "aligned") whose config names both source runs
and every setting that changes the result; the permutation is saved beside it as
perm.safetensors (index tensors: new unit i = old unit p[i]) with a perm.json summary. An
identical aligned run is reused. The new run folder is the last line on stdout.

Your own model: with --model-factory module:callable (or path/file.py:callable, or
--hf-model FOLDER) and --data, RUN_A and RUN_B are weight files; the aligned B is written to
--out FILE.safetensors (the last line on stdout) with FILE.perm.safetensors and FILE.perm.json
beside it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lmc.config import LmcError
from lmc.perm.methods import get_method, method_names

from .common import (
    add_model_options,
    add_run_options,
    device_from,
    emit_json,
    load_inputs,
    uses_own_model,
)
from .method_flags import add_method_options, method_settings

#: The older flags of ``lmc align``: flag -> (setting, the methods it sets, help). Each is the
#: same as ``--<method>-<setting>`` (which wins when both are given).
SHORT_FLAGS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "--max-iter": ("max_iter", ("weight", "ste"), "most weight-matching passes"),
    "--tol": ("tol", ("weight", "ste"), "weight matching's stopping fraction"),
    "--init": ("init", ("weight",), "weight matching's start: onepass or identity"),
    "--solver": ("solver", ("weight",), "weight matching's assignment solver"),
    "--restarts": ("restarts", ("weight",), "weight matching from K visiting orders"),
    "--statistic": ("statistic", ("activation",), "what activation matching matches"),
    "--batch-size": ("batch_size", ("activation",), "batch size of the statistics pass"),
    "--max-examples": (
        "max_examples",
        ("activation",),
        "training examples activation matching reads (default 5000; 0 = all)",
    ),
}
#: how many training examples ``lmc align --method activation`` reads unless told
ACTIVATION_EXAMPLES = 5000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_a",
        metavar="RUN_A",
        help="run folder of model A (the reference); with --model-factory/--hf-model: A's "
        "weight file",
    )
    parser.add_argument(
        "run_b",
        metavar="RUN_B",
        help="run folder of model B (gets permuted); with --model-factory/--hf-model: B's "
        "weight file",
    )
    methods = [m for m in method_names() if m != "none"]
    parser.add_argument(
        "--method",
        default="weight",
        help=f"alignment method: {', '.join(methods)} (default weight); its settings are the "
        "--METHOD-SETTING flags below",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the method (weight matching's visiting order, STE's batches, the random "
        "permutation)",
    )
    short = parser.add_argument_group(
        "short flags (older names of the method settings below; --METHOD-SETTING wins)"
    )
    for flag, (name, methods, help_text) in SHORT_FLAGS.items():
        short.add_argument(
            flag,
            dest=f"short_{name}",
            default=None,
            metavar="VALUE",
            help=f"{help_text} (--{'/--'.join(f'{m}-{name}'.replace('_', '-') for m in methods)})",
        )
    add_method_options(parser)
    add_model_options(parser)
    parser.add_argument(
        "--out",
        default=None,
        metavar="FILE.safetensors",
        help="with --model-factory/--hf-model (required there): where the aligned B's weights "
        "go; the permutation goes beside it as FILE.perm.safetensors and FILE.perm.json",
    )
    add_run_options(parser)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Every setting of ``args.method`` (its record's defaults, the short flags, then the
    ``--METHOD-SETTING`` flags), checked."""
    method = get_method(args.method)
    short: dict[str, Any] = {}
    for flag, (name, methods, _) in SHORT_FLAGS.items():
        raw = getattr(args, f"short_{name}")
        if raw is None:
            if args.method == "activation" and name == "max_examples":
                short[name] = ACTIVATION_EXAMPLES  # lmc align's own default
            continue
        if args.method not in methods:
            raise LmcError(
                f"{flag} is a setting of method {' and '.join(methods)}, but --method is "
                f"{args.method!r}: drop it"
            )
        if name == "max_examples" and raw.strip() == "0":
            short[name] = None  # 0 = all
            continue
        short[name] = method.setting(name).parse(raw, flag)
    return method_settings(args, args.method, short=short)


def _print_table(record: dict[str, Any], sizes: dict[str, int]) -> None:
    print(
        f"aligned {record['source']} onto {record['reference']}: method {record['method']}, "
        f"seed {record['seed']}, {record['seconds']:.2f} s"
    )
    before, after = record["objective_before"], record["objective_after"]
    print(f"matching objective sum<theta_A, pi(theta_B)>: {before:.6g} -> {after:.6g}")
    moved = record["moved_fraction"]
    if moved:
        width = max(len("group"), *(len(g) for g in moved))
        print(f"{'group':<{width}}  {'units':>6}  {'moved':>6}")
        for group, fraction in moved.items():
            print(f"{group:<{width}}  {sizes.get(group, 0):>6}  {fraction:>6.3f}")
    else:
        print("no permutable groups")


def run(args: argparse.Namespace) -> int:
    from lmc.pair.aligned import align_runs, check_alignable

    methods = [m for m in method_names() if m != "none"]
    if args.method not in methods:
        raise LmcError(f"unknown --method {args.method!r}: choose one of {', '.join(methods)}")
    check_alignable(args.method)
    settings = _settings(args)
    if uses_own_model(args):
        return _run_own_model(args, settings)
    if args.out is not None:
        raise LmcError(
            "--out is for --model-factory/--hf-model; an aligned run goes into the run store"
        )
    if args.data is not None:
        raise LmcError(
            "--data is for --model-factory/--hf-model; runs use the dataset they were trained on"
        )
    aligned = align_runs(
        args.run_a, args.run_b, args.method, settings=settings, seed=args.seed,
        runs_dir=args.runs_dir, device=device_from(args), data_dir=args.data_dir,
        download=args.download, quiet=args.quiet or args.json,
    )  # fmt: skip
    if args.json:
        emit_json({"run_dir": str(aligned.path), **_json_record(aligned.record),
                   "reused": aligned.reused})  # fmt: skip
        return 0
    if aligned.reused:
        print(f"reusing the identical aligned run (delete {aligned.path} to redo it)")
    _print_table(aligned.record, aligned.group_sizes)
    print(aligned.path)
    return 0


def _run_own_model(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """Align two weight files of the user's model; write the aligned B as a weight file."""
    from lmc.pair.aligned import align_weight_files, check_weight_file_out, perm_paths

    out = check_weight_file_out(args.out, (args.run_a, args.run_b))  # before any work
    pair = load_inputs(args, "alignment")
    record, sizes = align_weight_files(
        pair.model_a, pair.model_b, pair.data, out, args.method, settings=settings,
        seed=args.seed, names=(str(args.run_a), str(args.run_b)), meta=pair.meta,
        device=device_from(args), quiet=args.quiet or args.json,
    )  # fmt: skip
    perm_file, summary_file = perm_paths(out)
    if args.json:
        keys = {k: v for k, v in _json_record(record).items() if k != "run_dir"}
        emit_json({"out": str(out), "perm": str(perm_file), **keys})
        return 0
    _print_table(record, sizes)
    print(f"wrote {perm_file} and {summary_file}", file=sys.stderr)
    print(out)
    return 0


def _json_record(record: dict[str, Any]) -> dict[str, Any]:
    from lmc.pair.aligned import RECORD_KEYS

    return {k: record[k] for k in RECORD_KEYS}
