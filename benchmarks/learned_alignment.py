"""The cost of learned alignment against its closed form, measured in one run (issue 30).

For zoo GPTs of each embedding width in ``--widths`` (``--depth`` blocks, ``--heads`` heads,
vocabulary ``--vocab``, ``--context`` tokens) it times ``lmc.perm.align`` with method
``orthogonal`` (the closed form: canonical form, Procrustes on the stream, weight matching
elsewhere) and with method ``learned`` (the same closed form, then ``--steps`` Adam steps of
stream and within-head rotations on the path's loss, batch ``--batch-size``) on the same pair,
alternating the order over ``--repeats`` rounds and keeping each method's best time, and prints
both and their ratio. The two models are independently initialised (the cost of a step does not
depend on training; the closed form's rounds may), the examples ``--examples`` random token
windows. Also prints the held-out midpoint loss at the closed form and after learning.

    python benchmarks/learned_alignment.py [--widths 64,128,256] [--steps 200] [--repeats 2]
        [--examples 2000] [--threads N] [--device cpu]
"""

from __future__ import annotations

import argparse
import time

import torch

from lmc.models import build
from lmc.perm import align


def timed(fn):
    start = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="64,128,256")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=105)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, args.vocab, (args.examples, args.context), generator=gen)
    y = torch.randint(0, args.vocab, (args.examples, args.context), generator=gen)
    x, y = x.to(args.device), y.to(args.device)
    print(
        f"zoo GPT depth {args.depth}, heads {args.heads}, context {args.context}, vocab "
        f"{args.vocab}; {args.examples} random windows; learned: {args.steps} steps of batch "
        f"{args.batch_size}; best of {args.repeats} alternating repeats; device {args.device}; "
        f"torch threads {torch.get_num_threads()}"
    )
    print(
        f"{'width':>6} {'closed form s':>14} {'learned s':>10} {'learned/closed':>15} "
        f"{'midpoint loss closed':>21} {'learned':>8}"
    )
    for width in (int(w) for w in args.widths.split(",")):
        options = dict(vocab=args.vocab, context=args.context, width=width, depth=args.depth,
                       heads=args.heads)  # fmt: skip
        a = build("gpt", seed=0, **options).to(args.device)
        b = build("gpt", seed=1, **options).to(args.device)
        runs = {
            "orthogonal": lambda a=a, b=b: align("orthogonal", a, b, inputs=x),
            "learned": lambda a=a, b=b: align("learned", a, b, inputs=x, labels=y,
                task="next-token", steps=args.steps, batch_size=args.batch_size),
        }  # fmt: skip
        best = {m: float("inf") for m in runs}
        last = {}
        for r in range(args.repeats):
            for m in runs if r % 2 == 0 else list(runs)[::-1]:
                seconds, last[m] = timed(runs[m])
                best[m] = min(best[m], seconds)
        info = last["learned"].info
        print(
            f"{width:>6} {best['orthogonal']:>14.2f} {best['learned']:>10.2f} "
            f"{best['learned'] / best['orthogonal']:>14.1f}x "
            f"{info['learned_initial_loss']:>21.4f} {info['learned_best_loss']:>8.4f}"
        )


if __name__ == "__main__":
    main()
