"""Learned alignment's barrier at its legacy and current settings on trained pairs (issue 42).

Takes the trained pairs of a width study (default: the packaged recipe ``widen-text-gpt`` at
``--width 256``, variant ``--variant same``: its run configs, pairs 0 … ``--pairs`` − 1), which
must be in ``--runs-dir``
(train them first, e.g. ``lmc sweep`` of the study cut to that width), and aligns each pair
with method ``learned`` twice: at its settings' ``legacy`` values (the earlier defaults: 200
steps at a constant 0.01, one lambda per step, 10 held-out judgements; still the defaults)
and at the fast settings of ``benchmarks/learned_alignment.py`` (``FAST``), optionally
overridden with ``--learned key=value`` (JSON values). The alignment
reads the study's ``align_examples`` training examples (seed ``align_seed``), as a study's
merge does; the path is evaluated at λ = 0, ½, 1 on the study's split, all of it, without
calibration. Prints per pair the endpoint losses, each setting's alignment time and midpoint
loss barrier (nats per token), and ``--committed`` (a study's results.csv) barrier of the
learned merge of that width and pair where given; then the paired comparison of the barriers,
fast − legacy (:func:`lmc.stats.compare`: mean difference, 95 % t-interval, verdict).

With ``--cache FILE`` each (pair, setting) result is kept in a JSON file under the run names
and the settings, and reused by a later invocation (its time is the one measured then): the
pairs can be aligned as their runs finish training.

    python benchmarks/learned_alignment_barriers.py --runs-dir RUNS [--study widen-text-gpt]
        [--width 256] [--pairs 3] [--only 0,1|none] [--committed docs/results/.../results.csv]
        [--cache FILE] [--threads N] [--learned steps=60 ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import learned_alignment as bench
import torch

from lmc.data import load
from lmc.experiments.jobs import expand
from lmc.experiments.study import load_study
from lmc.metrics import evaluate_path
from lmc.pair.pipeline import align_pair, evaluation_examples
from lmc.pair.settings import PairSettings, PathSettings
from lmc.stats import compare
from lmc.store import RunStore


def committed_barriers(path: str | None, width: int) -> dict[int, float]:
    """Pair -> the learned merge's midpoint loss barrier in a study's results.csv."""
    if path is None:
        return {}
    out = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["method"] == "learned" and float(row["width"]) == width:
                out[int(row["pair"])] = float(row["midpoint_loss_barrier"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", required=True)
    parser.add_argument("--study", default="widen-text-gpt")
    parser.add_argument("--variant", default="same")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--only", default=None, help="align only these pairs (e.g. 0,1; none: print the cache)"
    )
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--committed", default=None)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--learned", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    settings = bench.settings_pair(args.learned)
    study, _ = load_study(args.study)
    if "variants" in study:  # a study file with [[variants]]: the one named by --variant
        found = [v["study"] for v in study["variants"] if v["name"] == args.variant]
        if not found:
            names = ", ".join(v["name"] for v in study["variants"])
            raise SystemExit(f"--variant {args.variant!r} is not one of {names}")
        study = found[0]
    study["sweep"] = {**study["sweep"], "widths": [args.width], "pairs": args.pairs}
    data = load(study["data"]["dataset"], data_dir=args.data_dir, **study["data"]["options"])
    _, merges = expand(study, data)
    merge = study["merge"]
    store = RunStore(args.runs_dir)
    cache_path = Path(args.cache) if args.cache else None
    cache = json.loads(cache_path.read_text()) if cache_path and cache_path.exists() else {}
    committed = committed_barriers(args.committed, args.width)
    only = None if args.only is None else {int(p) for p in args.only.split(",") if p != "none"}
    print(
        f"study {study['name']}, width {args.width}, pairs 0-{args.pairs - 1}; runs "
        f"{args.runs_dir}; align_examples {merge['align_examples']}, align_seed "
        f"{merge['align_seed']}; path at lambda 0, 1/2, 1 on the {study['data']['split']} split "
        f"(all of it); torch threads {torch.get_num_threads()}"
    )
    for name, values in settings.items():
        print(f"learned {name}: {bench.describe(values)}")
    print(
        f"{'pair':>4} {'loss A':>8} {'loss B':>8} {'legacy s':>9} {'legacy barrier':>15} "
        f"{'fast s':>10} {'fast barrier':>16} {'committed':>10}"
    )
    barriers: dict[str, dict[int, float]] = {name: {} for name in settings}
    seen_pairs = set()
    for job in merges:
        pair = job["labels"]["pair"]
        if pair in seen_pairs:
            continue
        seen_pairs.add(pair)
        run_a, run_b = store.find(job["run_a"]), store.find(job["run_b"])
        if run_a is None or run_b is None:
            print(f"{pair:>4} not trained in {args.runs_dir}")
            continue
        models = None
        row = {}
        for name, values in settings.items():
            key = json.dumps([run_a.name, run_b.name, values], sort_keys=True)
            if key not in cache:
                if only is not None and pair not in only:
                    continue
                if models is None:
                    models = run_a.build_model("cpu"), run_b.build_model("cpu")
                pair_settings = PairSettings(
                    align="learned", align_examples=merge["align_examples"],
                    align_options=values, seed=merge["align_seed"], split=job["split"],
                    path=PathSettings(lambdas=3, calibrate=False), analysis=None,
                )  # fmt: skip
                start = time.perf_counter()
                aligned = align_pair(*models, data, pair_settings)
                seconds = time.perf_counter() - start
                x, y = evaluation_examples(data, pair_settings)
                path = evaluate_path(  # as lmc.pair.run_pair: between the canonical models
                    *aligned.models, x, y, pair_settings.path, state_b=aligned.state_dict,
                    bn_inputs=data.x_train, task=data.task,
                )  # fmt: skip
                losses = [float(v) for v in path.to_dict()["loss"]]
                cache[key] = {
                    "seconds": seconds,
                    "losses": losses,
                    "barrier": float(path.barriers()["midpoint_loss_barrier"]),
                    "held_out": [
                        aligned.info["learned_initial_loss"],
                        aligned.info["learned_best_loss"],
                    ],
                    "best_step": aligned.info["learned_best_step"],
                    "steps_taken": aligned.info.get("learned_steps_taken"),
                }
                if cache_path:
                    cache_path.write_text(json.dumps(cache, indent=1))
            row[name] = cache[key]
            barriers[name][pair] = cache[key]["barrier"]
        if len(row) < len(settings):
            print(f"{pair:>4} not aligned yet (--only)")
            continue
        losses = row["legacy"]["losses"]
        print(
            f"{pair:>4} {losses[0]:>8.4f} {losses[-1]:>8.4f} {row['legacy']['seconds']:>9.1f} "
            f"{row['legacy']['barrier']:>15.4f} {row['fast']['seconds']:>10.1f} "
            f"{row['fast']['barrier']:>16.4f} "
            f"{committed.get(pair, float('nan')):>10.4f}",
            flush=True,
        )
    result = compare(barriers["legacy"], barriers["fast"])
    print(f"fast - legacy, paired: {result}")


if __name__ == "__main__":
    main()
