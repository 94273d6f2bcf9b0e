"""Merge N runs of one architecture into one model, and store it as a new run.

--align weight (the default) is Git Re-Basin's merge-many (App. A.10): round after round,
every model in a seeded random order is permuted by weight matching onto the mean of the
others, until a round changes no permutation (or --max-rounds); the merge is the mean of the
permuted models. --align none averages the weights as they are. For a model with BatchNorm the
merge's running statistics are recomputed on the training split (--bn auto/reset; none keeps
the averaged statistics), as the pair path does after interpolating.

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
The merged model is then a canonical-form run: its config adds "form": "canonical", its
weights load into the canonical form of the config's architecture
(lmc.merge.many.build_run_model), and the alignment of each input is saved beside it as
alignments.safetensors (tensors "<i>.<group>/<field>") with alignments.json (input i's
description, for lmc.perm.Alignment.from_tensors).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import torch

from lmc.config import LmcError, environment_info
from lmc.store import RunStore, check_output_place, output_dir, write_json

from .common import (
    add_data_options,
    add_device_option,
    add_output_options,
    add_runs_dir_option,
    dataset_for_config,
    device_from,
    emit_json,
    resolve_run,
)

PERMUTATION_ALIGN = ("none", "weight")
BN = ("auto", "reset", "none")
PERMS_FILE = "perms.safetensors"
ALIGNMENTS_FILE = "alignments.safetensors"
ALIGNMENTS_JSON = "alignments.json"
SUMMARY_FILE = "merge.json"


def align_choices() -> tuple[str, ...]:
    """``none``, ``weight`` and every registered method that aligns canonical forms."""
    from lmc.merge.many import canonical_methods

    return (*PERMUTATION_ALIGN, *canonical_methods())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lmc.merge.many import canonical_methods
    from lmc.perm.methods import method_names

    from .method_flags import add_method_options

    parser.add_argument(
        "runs", metavar="RUN", nargs="+", help="run folders (or names in --runs-dir), two or more"
    )
    parser.add_argument(
        "--align",
        default="weight",
        metavar="METHOD",
        help="weight: Git Re-Basin's iterative merge-many (App. A.10); none: plain average; "
        "beyond permutations (pre-LN transformers), "
        + ", ".join(canonical_methods())
        + ": every model in its canonical form (LayerNorms folded) aligned onto RUN 1's by "
        "that method (canonical: not aligned, the control), then averaged; the merge is then "
        'written as a canonical-form run (config "form": "canonical")',
    )
    parser.add_argument(
        "--align-examples",
        type=int,
        default=2000,
        metavar="N",
        help="training examples (drawn at random with --seed) that learned and "
        "orthogonal-activation read; 0 = the whole training split (default 2000)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="beyond permutations: after aligning onto RUN 1, this many rounds re-aligning "
        "each model onto the mean of the others (default 0)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the model order and of weight matching"
    )
    parser.add_argument(
        "--max-rounds", type=int, default=100, help="most rounds of the iterative alignment"
    )
    parser.add_argument(
        "--max-iter", type=int, default=100, help="most coordinate-descent passes per matching"
    )
    parser.add_argument(
        "--tol",
        type=float,
        default=1e-4,
        help="weight matching stops after a pass gaining at most this fraction (0: no step)",
    )
    parser.add_argument(
        "--bn",
        default="auto",
        help="BatchNorm statistics of the merge: auto/reset (recompute on the training "
        "split) or none (keep the averages)",
    )
    parser.add_argument("--out", default=None, help="folder for a merge.json summary")
    add_runs_dir_option(parser)
    add_data_options(parser)
    add_device_option(parser)
    add_output_options(parser)
    canonical = canonical_methods()
    add_method_options(parser, skip=tuple(m for m in method_names() if m not in canonical))


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    from lmc.perm.methods import CANONICAL_CONTROL, get_method

    from .method_flags import given_settings

    choices = align_choices()
    if args.align not in choices:
        raise LmcError(f"unknown --align {args.align!r}: choose one of {', '.join(choices)}")
    given = given_settings(args, args.align)  # a flag of another method is an error
    if args.bn not in BN:
        raise LmcError(f"unknown --bn {args.bn!r}: choose one of {', '.join(BN)}")
    for flag, value in (("--max-rounds", args.max_rounds), ("--max-iter", args.max_iter)):
        if value < 1:
            raise LmcError(f"{flag} must be at least 1, got {value}")
    if not (args.tol >= 0 and math.isfinite(args.tol)):
        raise LmcError(f"--tol must be a non-negative number, got {args.tol}")
    if len(args.runs) < 2:
        raise LmcError(f"merge needs at least two runs, got {len(args.runs)}")
    if args.align_examples < 0:
        raise LmcError(f"--align-examples must be 0 (all) or more, got {args.align_examples}")
    if args.rounds < 0:
        raise LmcError(f"--rounds must be at least 0, got {args.rounds}")
    settings: dict[str, Any] = {"align": args.align, "bn": args.bn}
    if args.align == "weight":
        settings.update(
            seed=args.seed, max_rounds=args.max_rounds, max_iter=args.max_iter, tol=args.tol
        )
    elif args.align not in PERMUTATION_ALIGN:  # a canonical method: what changes its result
        record = get_method(args.align)
        if args.align != CANONICAL_CONTROL:  # the control aligns nothing: no seed enters it
            settings["seed"] = args.seed
        settings["rounds"] = args.rounds
        settings["settings"] = record.identity(record.resolve(given))
        if record.needs_data:
            settings["align_examples"] = args.align_examples or None
    return settings


def _check_runs(runs: list) -> None:
    """One-line ``LmcError`` naming the first run whose data or architecture differs from
    the first run's."""
    first = runs[0]
    for i, run in enumerate(runs[1:], start=2):
        for key in ("dataset", "dataset_options", "model", "model_options"):
            a, b = first.config.get(key), run.config.get(key)
            if a != b:
                what = "architecture" if key.startswith("model") else "dataset"
                raise LmcError(
                    f"the runs do not match: {key} is {a!r} in RUN 1 ({first.name}) but {b!r} "
                    f"in RUN {i} ({run.name}); merge needs runs of one {what}"
                )


@torch.no_grad()
def _logits(model, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    from lmc.metrics import model_logits
    from lmc.models import eval_mode

    with eval_mode(model):
        return model_logits(model, x, 1024, device)


def _metrics(logits: torch.Tensor, y: torch.Tensor, task: Any) -> dict[str, float]:
    from lmc.metrics import classification_metrics

    return {f"test_{k}": v for k, v in classification_metrics(logits, y, task=task).items()}


def _canonical_merge(settings: dict[str, Any], args, models, data) -> tuple[Any, dict, dict]:
    """Merge beyond permutations: ``(merged model, info, extra files)``."""
    from lmc.merge.many import merge_many_canonical
    from lmc.pair.pipeline import alignment_examples
    from lmc.perm.methods import get_method

    from .method_flags import given_settings

    method = settings["align"]
    record = get_method(method)
    examples = settings.get("align_examples")
    x, y = alignment_examples(data, examples if record.needs_data else 2, args.seed)
    result = merge_many_canonical(
        models, method, inputs=x, labels=y if record.needs_labels else None, task=data.task,
        seed=args.seed, rounds=settings["rounds"], quiet=args.quiet or args.json,
        **record.resolve(given_settings(args, method)),
    )  # fmt: skip
    skip = ("kinds", "group_sizes", "method", "settings")
    info = {
        "canonical": True,
        "alignments": [
            None if i is None else {k: v for k, v in i.items() if k not in skip}
            for i in result.infos
        ],
    }
    if settings["rounds"]:
        info["shifts"] = result.shifts
    tensors: dict[str, torch.Tensor] = {}
    described = []
    for i, alignment in enumerate(result.alignments):
        parts, meta = alignment.to_tensors()
        tensors.update({f"{i}.{key}": value for key, value in parts.items()})
        described.append(meta)
    files = {"tensors": {ALIGNMENTS_FILE: tensors}, "json": {ALIGNMENTS_JSON: described}}
    return result.model, info, files


def run(args: argparse.Namespace) -> int:
    from lmc.merge import average, merge_many_iterative, reset_batchnorm, resolve_bn_mode
    from lmc.merge.many import CANONICAL_FORM, FORM_KEY
    from lmc.models import check_same_architecture

    settings = _settings(args)
    runs = [resolve_run(text, args.runs_dir) for text in args.runs]
    _check_runs(runs)
    canonical = settings["align"] not in PERMUTATION_ALIGN
    config = {
        **runs[0].config,
        "kind": "merged",
        **({FORM_KEY: CANONICAL_FORM} if canonical else {}),
        "merge": {**settings, "runs": [r.name for r in runs]},
    }
    store = RunStore(args.runs_dir)
    if args.out is not None:
        check_output_place(args.out)
    existing = store.find_or_reopen(config, "merging")
    device = device_from(args)
    if existing is None:
        store.check_writable()
    if existing is not None and "merge" in existing.metrics:
        record = existing.metrics["merge"]
        _report(args, record, existing.path, reused=True)
        return 0

    models = [r.build_model(device) for r in runs]
    for i, m in enumerate(models[1:], start=2):
        check_same_architecture(models[0], m, names=("RUN 1", f"RUN {i}"), purpose="merging")
    data = dataset_for_config(runs[0], args, device)
    start = time.perf_counter()
    info: dict[str, Any] = {}
    extra: dict[str, dict[str, torch.Tensor]] = {}
    extra_json: dict[str, Any] = {}
    merged = None
    if canonical:
        merged, info, files = _canonical_merge(settings, args, models, data)
        extra, extra_json = files["tensors"], files["json"]
    elif settings["align"] == "weight":
        result = merge_many_iterative(
            models,
            example_input=data.x_train[:2],
            seed=settings["seed"],
            max_rounds=settings["max_rounds"],
            max_iter=settings["max_iter"],
            tol=settings["tol"],
        )
        state = result.state
        info = {"rounds": result.rounds, "changes": result.changes, "converged": result.converged}
        extra[PERMS_FILE] = {
            f"{i}.{g}": p for i, perm in enumerate(result.perms) for g, p in perm.items()
        }
    else:
        state = average([m.state_dict() for m in models])
    if merged is None:
        merged = runs[0].build_model(device)
        merged.load_state_dict(state)
    bn = resolve_bn_mode(merged, settings["bn"])
    if bn == "reset":
        reset_batchnorm(merged, data.x_train)
    seconds = time.perf_counter() - start
    x, y = data.x_test, data.y_test
    inputs, total = [], None
    for r, m in zip(runs, models):
        logits = _logits(m, x, device)
        inputs.append({"run": r.name, **_metrics(logits, y, data.task)})
        total = logits.clone() if total is None else total.add_(logits)
    ensemble = _metrics(total / len(models), y, data.task)
    del total
    record = {
        **settings,
        "bn_resolved": bn,
        "runs": [r.name for r in runs],
        **info,
        "merged": _metrics(_logits(merged, x, device), y, data.task),
        "ensemble": ensemble,
        "inputs": inputs,
        "seconds": seconds,
    }
    metrics = {
        "merge": record,
        "final_test_loss": record["merged"]["test_loss"],
        "final_test_accuracy": record["merged"]["test_accuracy"],
        "environment": environment_info(device),
        "wall_seconds": seconds,
    }
    if runs[0].metrics.get("data_paths"):  # where the runs' data were (lmc.train.runs)
        metrics["data_paths"] = runs[0].metrics["data_paths"]
    state_out = {k: v.detach().cpu() for k, v in merged.state_dict().items()}
    saved = store.save(config, state_out, metrics, extra_tensors=extra, extra_json=extra_json)
    _report(args, record, saved.path, reused=False)
    return 0


def _report(args: argparse.Namespace, record: dict[str, Any], path: Path, reused: bool) -> None:
    if args.out is not None:
        with output_dir(args.out, replaces=(SUMMARY_FILE,)) as tmp:
            write_json(tmp / SUMMARY_FILE, {**record, "run_dir": str(path)})
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
