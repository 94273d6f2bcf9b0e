"""Merge N runs of one architecture into one model, and store it as a new run.

--align takes any registered alignment method. weight (the default) is Git Re-Basin's
merge-many (App. A.10): round after round, every model in a seeded random order is permuted by
weight matching onto the mean of the others, until a round changes no permutation (or
--max-rounds); the merge is the mean of the permuted models. --align none averages the weights
as they are. Another permutation method (activation, ste, onepass, random, ...; its settings
are the --METHOD-SETTING flags) aligns every model onto RUN 1's, then averages. For a model
with BatchNorm the merge's running statistics are recomputed on the training split (--bn
auto/reset; none keeps the averaged statistics), as the pair path does after interpolating.

The merged model is written as a new run (kind "merged"): the first run's config plus a
"merge" record (the source runs in order and every setting that changes the result); the
permutation of each input is saved beside it as perms.safetensors (key "<i>.<group>": new
unit j = old unit p[j] of input i). The merged model, every input and their ensemble (the mean
of the inputs' logits) are evaluated on the test split (loss in nats, per token for text;
accuracy; ECE with 15 bins). An identical merged run is reused. With --out DIR a merge.json
summary is written there too. The run folder is the last line on stdout.

Beyond permutations (pre-LN transformers: zoo gpt and vit), --align orthogonal, learned,
orthogonal-activation or canonical (the control: no alignment) puts every model in its
canonical form (LayerNorms folded: the same function), aligns each onto the first run's with
that method (its settings are the --METHOD-SETTING flags; learned and orthogonal-activation
read --align-examples training examples drawn with --seed), optionally re-aligns each onto the
mean of the others for --rounds rounds, and averages (lmc.merge.many.merge_many_canonical).
The workflow is lmc.pair.merged.merge_runs.
The merged model is then a canonical-form run: its config adds "form": "canonical", its
weights load into the canonical form of the config's architecture
(lmc.merge.many.build_run_model), and the alignment of each input is saved beside it as
alignments.safetensors (tensors "<i>.<group>/<field>") with alignments.json (input i's
description, for lmc.perm.Alignment.from_tensors).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import (
    add_run_options,
    device_from,
    emit_json,
    resolve_run,
)

#: the methods whose flags lmc merge does not take: none has no settings, and weight's
#: merge-many has its own (--max-rounds, --max-iter, --tol)
OWN_SETTINGS = ("none", "weight")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lmc.perm.methods import all_methods

    from .method_flags import add_method_options

    canonical = [m.name for m in all_methods() if m.canonical]
    others = [m.name for m in all_methods() if not m.canonical and m.name not in OWN_SETTINGS]
    parser.add_argument(
        "runs", metavar="RUN", nargs="+", help="run folders (or names in --runs-dir), two or more"
    )
    parser.add_argument(
        "--align",
        default="weight",
        metavar="METHOD",
        help="weight: Git Re-Basin's iterative merge-many (App. A.10); none: plain average; "
        + ", ".join(others)
        + ": every model aligned onto RUN 1's by that method, then averaged; beyond "
        "permutations (pre-LN transformers), "
        + ", ".join(canonical)
        + ": every model in its canonical form (LayerNorms folded) aligned onto RUN 1's by "
        "that method (canonical: not aligned, the control), then averaged; the merge is then "
        'written as a canonical-form run (config "form": "canonical")',
    )
    parser.add_argument(
        "--align-examples",
        type=int,
        default=2000,
        metavar="N",
        help="training examples (drawn at random with --seed) that the methods reading data "
        "(activation, ste, learned, orthogonal-activation, ...) read; 0 = the whole training "
        "split (default 2000)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="beyond permutations: after aligning onto RUN 1, this many rounds re-aligning "
        "each model onto the mean of the others (default 0)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the model order and of the alignment"
    )
    parser.add_argument(
        "--max-rounds",
        type=int,
        default=None,
        help="--align weight: most rounds of the iterative alignment (default 100)",
    )
    parser.add_argument(
        "--max-iter",
        type=int,
        default=None,
        help="--align weight: most coordinate-descent passes per matching (default 100)",
    )
    parser.add_argument(
        "--tol",
        type=float,
        default=None,
        help="--align weight: weight matching stops after a pass gaining at most this fraction "
        "(0: no step; default 1e-4)",
    )
    parser.add_argument(
        "--bn",
        default="auto",
        help="BatchNorm statistics of the merge: auto/reset (recompute on the training "
        "split) or none (keep the averages)",
    )
    parser.add_argument("--out", default=None, help="folder for a merge.json summary")
    add_run_options(parser)
    add_method_options(parser, skip=OWN_SETTINGS)


def run(args: argparse.Namespace) -> int:
    from lmc.pair.merged import merge_runs, merge_settings

    from .method_flags import given_settings

    given = given_settings(args, args.align)  # a flag of another method is an error
    _check_path_flags(args)
    # the settings are checked before any run is read
    merge_settings(
        args.align,
        given=given,
        bn=args.bn,
        max_rounds=args.max_rounds,
        max_iter=args.max_iter,
        tol=args.tol,
        rounds=args.rounds,
        align_examples=args.align_examples,
    )  # fmt: skip
    runs = [resolve_run(text, args.runs_dir) for text in args.runs]
    merged = merge_runs(
        runs, args.align, given=given, bn=args.bn, seed=args.seed,
        max_rounds=args.max_rounds, max_iter=args.max_iter, tol=args.tol, rounds=args.rounds,
        align_examples=args.align_examples, runs_dir=args.runs_dir, device=device_from(args),
        data_dir=args.data_dir, download=args.download, summary_dir=args.out,
        quiet=args.quiet or args.json,
    )  # fmt: skip
    _report(args, merged.record, merged.path, merged.reused)
    return 0


#: ``lmc merge``'s own flags that only one kind of merge reads, and their defaults
WEIGHT_FLAGS = {"max_rounds": 100, "max_iter": 100, "tol": 1e-4}
CANONICAL_FLAGS = {"rounds": 0}


def _check_path_flags(args: argparse.Namespace) -> None:
    """Refuse, in one line, a flag the asked-for merge does not read (``--max-rounds``,
    ``--max-iter``, ``--tol``: ``--align weight`` only; ``--rounds``: the canonical methods
    only), as ``lmc interpolate`` refuses another method's settings; then fill the defaults."""
    from lmc.config import LmcError
    from lmc.perm.methods import all_methods, get_method, method_names

    if args.align not in method_names():
        return  # merge_settings names the choices
    canonical = get_method(args.align).canonical
    for dest, default in (*WEIGHT_FLAGS.items(), *CANONICAL_FLAGS.items()):
        value = getattr(args, dest)
        flag = "--" + dest.replace("_", "-")
        if value is None:
            setattr(args, dest, default)
        elif dest in WEIGHT_FLAGS and args.align != "weight":
            raise LmcError(
                f"{flag} is a setting of --align weight (the iterative merge-many), but the "
                f"method asked for is {args.align!r}: drop it or ask for weight"
            )
        elif dest in CANONICAL_FLAGS and not canonical:
            names = ", ".join(m.name for m in all_methods() if m.canonical)
            raise LmcError(
                f"{flag} re-aligns canonical forms ({names}), but the method asked for is "
                f"{args.align!r}: drop it or ask for one of those"
            )


def _report(args: argparse.Namespace, record: dict[str, Any], path: Path, reused: bool) -> None:
    if args.json:
        emit_json({**record, "run_dir": str(path), "reused": reused})
        return
    if reused:
        print(f"reusing the identical merged run (delete {path} to redo it)")
    if record["align"] == "weight":
        done = "converged" if record["converged"] else "not converged"
        rounds = f", {record['rounds']} rounds ({done})"
    elif record.get("canonical"):
        rounds = f" in the canonical form, onto input 1, then {record['rounds']} rounds"
    elif record.get("anchored"):
        rounds = " onto input 1"
    else:
        rounds = ""
    print(f"merged {len(record['runs'])} runs: align {record['align']}{rounds}, "
          f"BatchNorm {record['bn_resolved']}")  # fmt: skip
    print(f"{'model':<8} {'test loss':>10} {'accuracy':>9} {'ECE':>7}")
    rows = [(f"input {i}", r) for i, r in enumerate(record["inputs"], start=1)]
    if "ensemble" in record:  # merges stored before the ensemble was reported lack it
        rows.append(("ensemble", record["ensemble"]))
    for name, r in [*rows, ("merged", record["merged"])]:
        print(f"{name:<8} {r['test_loss']:>10.4f} {r['test_accuracy']:>9.4f} {r['test_ece']:>7.4f}")
    print(path)
