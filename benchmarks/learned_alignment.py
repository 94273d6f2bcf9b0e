"""The cost of learned alignment against its closed form, measured in one run (issues 30, 42).

For zoo GPTs of each embedding width in ``--widths`` (``--depth`` blocks, ``--heads`` heads,
vocabulary ``--vocab``, ``--context`` tokens) it times ``lmc.perm.align`` with method
``orthogonal`` (the closed form: canonical form, Procrustes on the stream, weight matching
elsewhere) and with method ``learned`` (the same closed form, then Adam steps of stream and
within-head rotations on the path's loss) twice on the same pair: at the settings' ``legacy``
values (the earlier defaults: 200 steps of batch 64 at a constant 0.01,
one lambda per step, 10 held-out judgements) and at the fast settings (:data:`FAST`: 100 steps
of batch 16 on a cosine schedule from 0.01, four lambdas per step, 2 judgements), these
optionally overridden with ``--learned key=value`` (JSON values). The runs alternate their
order over ``--repeats`` rounds and each keeps its best time; it prints the times, the ratios
to the closed form and the held-out midpoint loss at the closed form and after each. The two
models are independently initialised (the cost of a step does not depend on training; the
closed form's rounds may), the examples ``--examples`` random token windows.

With ``--profile`` it then profiles one learned alignment of each setting at the largest
width (``torch.profiler``; ``--profile-steps`` overrides the steps of both) and prints the time
of each labelled phase (``learned.*`` in ``lmc.perm.learned``: the closed form, the maps'
matrix exponentials, applying them to B, the forward and backward passes of the path loss,
the Adam updates, the held-out judgements) and its share of the run.

    python benchmarks/learned_alignment.py [--widths 64,128,256] [--repeats 2]
        [--examples 2000] [--threads N] [--device cpu] [--learned steps=60 ...]
        [--profile [--profile-steps 20]]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from lmc.models import build
from lmc.perm import align
from lmc.perm.methods import get_method

PHASES = (
    ("learned.closed_form", "closed form (orthogonal matching)"),
    ("learned.maps", "maps: matrix exponentials"),
    ("learned.apply_maps", "maps applied to B's weights"),
    ("learned.forward", "path loss: forward"),
    ("learned.backward", "path loss: backward"),
    ("learned.adam", "Adam updates"),
    ("learned.holdout", "held-out judgements"),
)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


#: The fast settings measured against the defaults (issue 42 item 5): 100 steps of batch 16 on a
#: cosine schedule from 0.01, four stratified values of lambda per step, 2 held-out judgements.
FAST = {"steps": 100, "batch_size": 16, "lr": 0.01, "schedule": "cosine", "lambda_batch": 4,
        "evals": 2}  # fmt: skip


def settings_pair(overrides: list[str]) -> dict[str, dict]:
    """``legacy``: the learned method's settings at their legacy values (the earlier defaults,
    before the fast settings became the defaults); ``fast``: :data:`FAST` over them, then
    ``overrides`` (``key=value``, JSON values)."""
    record = get_method("learned")
    legacy = {s.name: s.baseline for s in record.settings}
    fast = {**legacy, **FAST}
    for item in overrides:
        key, _, value = item.partition("=")
        record.setting(key)
        fast[key] = json.loads(value)
    return {"legacy": legacy, "fast": fast}


def describe(settings: dict) -> str:
    keys = ("steps", "lr", "schedule", "lambda_batch", "batch_size", "evals", "precision")
    return ", ".join(f"{k} {settings[k]}" for k in keys if k in settings)


def profile(run) -> tuple[float, dict[str, tuple[int, float]]]:
    """Wall seconds of ``run()`` under the profiler and, per phase label, (calls, seconds)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        wall, _ = timed(run)
    phases = {label: [0, 0.0] for label, _ in PHASES}
    for event in prof.events():
        if event.name in phases:
            phases[event.name][0] += 1
            phases[event.name][1] += event.cpu_time_total / 1e6
    return wall, {k: (int(n), float(s)) for k, (n, s) in phases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="64,128,256")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=105)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--learned", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-steps", type=int, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    settings = settings_pair(args.learned)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, args.vocab, (args.examples, args.context), generator=gen)
    y = torch.randint(0, args.vocab, (args.examples, args.context), generator=gen)
    x, y = x.to(args.device), y.to(args.device)
    print(
        f"zoo GPT depth {args.depth}, heads {args.heads}, context {args.context}, vocab "
        f"{args.vocab}; {args.examples} random windows; best of {args.repeats} alternating "
        f"repeats; device {args.device}; torch threads {torch.get_num_threads()}"
    )
    for name, values in settings.items():
        print(f"learned {name}: {describe(values)}")
    print(
        f"{'width':>6} {'closed form s':>14} {'legacy s':>9} {'legacy/closed':>14} "
        f"{'fast s':>10} {'fast/closed':>15} {'fast/legacy':>15} "
        f"{'held-out midpoint loss: closed':>31} {'legacy':>7} {'fast':>8}"
    )
    widths = [int(w) for w in args.widths.split(",")]
    models = {}
    for width in widths:
        options = dict(vocab=args.vocab, context=args.context, width=width, depth=args.depth,
                       heads=args.heads)  # fmt: skip
        a = build("gpt", seed=0, **options).to(args.device)
        b = build("gpt", seed=1, **options).to(args.device)
        models[width] = a, b

        def learned(which, a=a, b=b, **extra):
            return align("learned", a, b, inputs=x, labels=y, task="next-token",
                         **{**settings[which], **extra})  # fmt: skip

        runs = {
            "orthogonal": lambda a=a, b=b: align("orthogonal", a, b, inputs=x),
            "legacy": lambda learned=learned: learned("legacy"),
            "fast": lambda learned=learned: learned("fast"),
        }
        best = {m: float("inf") for m in runs}
        last = {}
        for r in range(args.repeats):
            for m in runs if r % 2 == 0 else list(runs)[::-1]:
                seconds, last[m] = timed(runs[m])
                best[m] = min(best[m], seconds)
        old, new = last["legacy"].info, last["fast"].info
        print(
            f"{width:>6} {best['orthogonal']:>14.2f} {best['legacy']:>9.2f} "
            f"{best['legacy'] / best['orthogonal']:>13.1f}x {best['fast']:>10.2f} "
            f"{best['fast'] / best['orthogonal']:>14.1f}x "
            f"{best['fast'] / best['legacy']:>14.3f}x "
            f"{old['learned_initial_loss']:>31.4f} {old['learned_best_loss']:>7.4f} "
            f"{new['learned_best_loss']:>8.4f}",
            flush=True,
        )
    if not args.profile:
        return
    width = max(widths)
    a, b = models[width]
    extra = {} if args.profile_steps is None else {"steps": args.profile_steps}
    for which, values in settings.items():
        values = {**values, **extra}
        wall, phases = profile(
            lambda values=values: align(
                "learned", a, b, inputs=x, labels=y, task="next-token", **values
            )  # fmt: skip
        )
        print(f"profile, width {width}, learned {which} ({describe(values)}): {wall:.2f} s")
        print(f"  {'phase':<36} {'calls':>6} {'s':>8} {'ms/call':>9} {'share':>7}")
        counted = 0.0
        for label, text in PHASES:
            calls, seconds = phases[label]
            counted += seconds
            per = 1e3 * seconds / calls if calls else 0.0
            print(f"  {text:<36} {calls:>6} {seconds:>8.2f} {per:>9.1f} {seconds / wall:>6.1%}")
        rest = wall - counted
        print(f"  {'rest (canonical forms, tracing, λ mixing)':<36} {'':>6} {rest:>8.2f} "
              f"{'':>9} {rest / wall:>6.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
