"""Permute model B's units to line up with model A's, and store the result as a new run.

Methods: weight (weight matching: data-free coordinate descent on Σ<W_A, P W_B P_prevᵀ>),
activation (one assignment per layer on the correlation of the two models' features over
training examples), ste (straight-through estimator: learns the permutation that lowers the
midpoint's training loss; the best one seen is kept, weight matching's included) and random
(a uniformly random valid permutation: the control). The permutation spec is derived from
the architecture with torch.fx.

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
import time
from pathlib import Path
from typing import Any

import torch

from lmc.config import LmcError, environment_info
from lmc.perm.methods import get_method, method_names
from lmc.store import RunStore, check_output_place, load_run, output_files, write_json

from .common import (
    add_data_options,
    add_device_option,
    add_model_options,
    add_output_options,
    add_runs_dir_option,
    check_same_data,
    dataset_for_config,
    device_from,
    emit_json,
    jsonable,
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
PERM_FILE = "perm.safetensors"
SUMMARY_FILE = "perm.json"


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
    add_runs_dir_option(parser)
    add_data_options(parser)
    add_device_option(parser)
    add_output_options(parser)


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


def _example_input(config: dict[str, Any]) -> torch.Tensor:
    """Two zero rows of the model's input (token id 0 for text), from the dataset's shape
    alone (no file read)."""
    from lmc.data import TEXT_DATASETS, canonical_name, input_shape

    shape = input_shape(config["dataset"], **config.get("dataset_options", {}))
    tokens = canonical_name(config["dataset"]) in TEXT_DATASETS  # token ids, not features
    return torch.zeros(2, *shape, dtype=torch.long if tokens else torch.float32)


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
    from lmc.models import check_same_architecture

    methods = [m for m in method_names() if m != "none"]
    if args.method not in methods:
        raise LmcError(f"unknown --method {args.method!r}: choose one of {', '.join(methods)}")
    if get_method(args.method).canonical:
        raise LmcError(
            f"method {args.method!r} aligns the canonical forms (LayerNorms folded into "
            "RMSNorms), whose weights do not load into the models' own architecture, so lmc "
            f"align has no aligned B to write: use lmc interpolate/analyze --align "
            f"{args.method}, or a study's [merge] methods"
        )
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
    run_a, run_b = load_run(args.run_a), load_run(args.run_b)
    check_same_data(run_a, run_b, "alignment")
    config = {
        "kind": "aligned",
        "dataset": run_a.config.get("dataset"),
        "dataset_options": run_a.config.get("dataset_options", {}),
        "model": run_a.config["model"],
        "model_options": run_a.config["model_options"],
        "align": {
            "method": args.method,
            "seed": args.seed,
            "reference": run_a.name,
            "source": run_b.name,
            **get_method(args.method).identity(settings),
        },
    }
    store = RunStore(args.runs_dir)
    existing = store.find_or_reopen(config, "aligning")
    if existing is None:
        store.check_writable()
    if existing is not None and "align" in existing.metrics:
        record = existing.metrics["align"]
        if args.json:
            emit_json({**_json_record(record, existing.path), "reused": True})
        else:
            print(f"reusing the identical aligned run (delete {existing.path} to redo it)")
            _print_table(record, existing.metrics.get("group_sizes", {}))
            print(existing.path)
        return 0

    device = device_from(args)
    model_a, model_b = run_a.build_model(device), run_b.build_model(device)
    check_same_architecture(model_a, model_b, names=("RUN_A", "RUN_B"))
    if get_method(args.method).needs_data:
        data = dataset_for_config(run_a, args, device)
        x_train, y_train = data.x_train, data.y_train
    else:
        x_train, y_train = _example_input(run_a.config), None
    start = time.perf_counter()
    result, info, record = _align_pair(
        args, model_a, model_b, x_train.to(device), y_train, settings, run_a.name, run_b.name
    )
    metrics = {
        "align": record,
        "info": info,
        "group_sizes": result.spec.group_sizes,
        "environment": environment_info(device),
        "wall_seconds": time.perf_counter() - start,
    }
    if run_a.metrics.get("data_paths"):  # where the runs' data were (lmc.train.runs)
        metrics["data_paths"] = run_a.metrics["data_paths"]
    saved = store.save(
        config,
        result.state_dict,
        metrics,
        extra_tensors={PERM_FILE: _alignment_tensors(result)},
        extra_json={SUMMARY_FILE: _summary(record, result)},
    )
    if args.json:
        emit_json({**_json_record(record, saved.path), "reused": False})
        return 0
    _print_table(record, result.spec.group_sizes)
    print(saved.path)
    return 0


def _align_pair(
    args: argparse.Namespace,
    model_a,
    model_b,
    x_train: torch.Tensor,
    y_train: torch.Tensor | None,
    settings: dict[str, Any],
    reference: str,
    source: str,
):
    """Align B to A with ``args.method`` and return ``(result, info, record)``.

    The methods that read data (their record's ``needs_data``) get the training examples (and
    the labels, where they need them); the others only two examples to trace the model with."""
    from lmc.perm import align

    method = get_method(args.method)
    labels = y_train if method.needs_labels else None
    inputs = x_train if method.needs_data else x_train[:2]
    result = align(
        args.method,
        model_a,
        model_b,
        inputs=inputs,
        labels=labels,
        seed=args.seed,
        quiet=args.quiet or args.json,
        **settings,
    )
    info = jsonable(result.info)
    record = {
        "method": args.method,
        "seed": args.seed,
        "reference": reference,
        "source": source,
        "objective_before": info["objective_before"],
        "objective_after": info["objective_after"],
        "moved_fraction": info["moved_fraction"],
        "seconds": info["seconds"],
    }
    return result, info, record


def _perm_paths(out: Path) -> tuple[Path, Path]:
    """Where the permutation of an aligned weight file goes: beside it, FILE.perm.*."""
    stem = out.with_suffix("")
    return Path(f"{stem}.perm.safetensors"), Path(f"{stem}.perm.json")


def _alignment_tensors(result) -> dict[str, torch.Tensor]:
    """What the alignment file holds: group -> index tensor when every transform is a
    permutation (the format ``lmc align`` has always written), else the
    :class:`lmc.perm.Alignment`'s tensors (``<group>/<field>``; described in the summary's
    ``alignment``, :meth:`lmc.perm.Alignment.from_tensors` reads both back)."""
    if _is_permutation(result):
        return dict(result.perm)
    return result.alignment.to_tensors()[0]


def _is_permutation(result) -> bool:
    return all(kind == "permutation" for kind in result.alignment.kinds.values())


def _summary(record: dict[str, Any], result) -> dict[str, Any]:
    spec, kinds = result.spec, result.alignment.kinds
    summary = {
        **record,
        "groups": {
            g: {
                "size": n,
                "kind": kinds[g],
                "moved_fraction": record["moved_fraction"].get(g),
                "members": [f"{name}[{axis}]" for name, axis in spec.groups.get(g, [])],
            }
            for g, n in spec.group_sizes.items()
        },
        "convention": "new unit i of B is old unit perm[group][i]",
    }
    if not _is_permutation(result):
        summary["alignment"] = result.alignment.to_tensors()[1]
        summary["convention"] = "the new unit coordinates of B are M @ old, per group"
    return summary


def _run_own_model(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """Align two weight files of the user's model; write the aligned B as a weight file."""
    from lmc.models.factory import export_state
    from lmc.store import save_tensors

    if args.out is None or Path(args.out).suffix.lower() != ".safetensors":
        raise LmcError(
            "--out FILE.safetensors is needed with --model-factory/--hf-model: the aligned B "
            f"is written as a weight file (got {args.out!r})"
        )
    out = Path(args.out)
    if out.resolve() in (Path(args.run_a).resolve(), Path(args.run_b).resolve()):
        raise LmcError(f"--out {out} would overwrite an input weight file; choose another name")
    check_output_place(out.parent)
    if out.is_dir():
        raise LmcError(f"--out {out} is a folder; give a file name ending in .safetensors")
    pair = load_inputs(args, "alignment")
    start = time.perf_counter()
    result, info, record = _align_pair(
        args,
        pair.model_a,
        pair.model_b,
        pair.data.x_train,
        pair.data.y_train,
        settings,
        str(args.run_a),
        str(args.run_b),
    )
    perm_file, summary_file = _perm_paths(out)
    summary = {
        **_summary(record, result),
        "settings": get_method(args.method).identity(settings),
        **{k: v for k, v in pair.meta.items() if k not in ("weights_a", "weights_b")},
        "environment": environment_info(device_from(args)),
        "wall_seconds": time.perf_counter() - start,
    }
    with output_files(out.parent, [out.name, perm_file.name, summary_file.name]) as stage:
        save_tensors(stage / out.name, export_state(pair.model_b, result.state_dict))
        save_tensors(stage / perm_file.name, _alignment_tensors(result))
        write_json(stage / summary_file.name, summary)
    if args.json:
        keys = [k for k in _JSON_KEYS if k != "run_dir"]
        emit_json({"out": str(out), "perm": str(perm_file), **{k: record[k] for k in keys}})
        return 0
    _print_table(record, result.spec.group_sizes)
    print(f"wrote {perm_file} and {summary_file}", file=sys.stderr)
    print(out)
    return 0


_JSON_KEYS = (
    "method",
    "seed",
    "objective_before",
    "objective_after",
    "moved_fraction",
    "seconds",
    "reference",
    "source",
)


def _json_record(record: dict[str, Any], path) -> dict[str, Any]:
    return {"run_dir": str(path), **{k: record[k] for k in _JSON_KEYS}}
