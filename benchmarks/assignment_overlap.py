"""What overlapping an assignment with similarity products could save on this machine.

Weight matching alternates two kinds of work: similarity products (torch matrix products, which
use every core torch is given) and linear assignments (SciPy's or lapx's solver, one core each;
both release the GIL). Overlapping them (solving group g's assignment in a thread while the
products of a group that does not depend on g run) can save at most the smaller of the two, and
only where the cores are not already busy. This script measures that ceiling: one assignment of an
n × n similarity near a permutation (B's units a permutation of A's plus noise, as in weight
matching), ``--products`` float32 products of (k, n)ᵀ (k, n) like the group's, each timed alone,
then both at once, best of ``--repeats``. A ratio (sum / overlapped) near 1 says overlap does not
pay here; the products' share says how much of weight matching it could touch at all.

    python benchmarks/assignment_overlap.py                  # n = 3072 (GPT-2 small's MLP units)
    python benchmarks/assignment_overlap.py --threads 1      # torch on one core, the LAP on another
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable

import torch
from _common import best_time

from lmc.perm.lap import lapx_problem, solve_assignment


def near_permutation_similarity(n: int, k: int, noise: float, seed: int) -> torch.Tensor:
    """``A.T @ B`` (n, n, float64) for B = A with its n columns permuted, plus Gaussian noise of
    standard deviation ``noise`` relative to A's: the shape of a weight-matching similarity."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(k, n, generator=gen)
    b = a[:, torch.randperm(n, generator=gen)] + noise * torch.randn(k, n, generator=gen)
    return (a.T @ b).double()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3072, help="units (the similarity is n × n)")
    parser.add_argument("--k", type=int, default=768, help="rows of each product's operands")
    parser.add_argument("--products", type=int, default=4, help="products per assignment")
    parser.add_argument("--noise", type=float, default=3.0, help="B's noise relative to A's")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    s = near_permutation_similarity(args.n, args.k, args.noise, seed=0)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(args.k, args.n, generator=gen), torch.randn(args.k, args.n, generator=gen)
    out = torch.empty(args.n, args.n)

    def products() -> None:
        for _ in range(args.products):
            torch.mm(x.T, y, out=out)

    solvers = ["scipy", *(["lapx"] if lapx_problem() is None else [])]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; n={args.n}, k={args.k}, "
        f"{args.products} products per assignment; best of {args.repeats}"
    )
    header = ("solver", "LAP s", "products s", "sum s", "overlapped s", "saved")
    print(f"{header[0]:8} " + " ".join(f"{h:>{len(h) + 2}}" for h in header[1:]))
    for solver in solvers:
        work = torch.empty(args.n * args.n, dtype=torch.float64)

        def solve(solver: str = solver, work: torch.Tensor = work) -> None:
            solve_assignment(s, solver=solver, work=work)

        def both(solve: Callable[[], None] = solve) -> None:
            thread = threading.Thread(target=solve)
            thread.start()
            products()
            thread.join()

        lap_s = best_time(solve, args.repeats, warmup=0)
        prod_s = best_time(products, args.repeats, warmup=0)
        both_s = best_time(both, args.repeats, warmup=0)
        total = lap_s + prod_s
        print(
            f"{solver:8} {lap_s:7.3f} {prod_s:12.3f} {total:7.3f} {both_s:14.3f} "
            f"{(total - both_s) / total:7.1%}"
        )
    print(
        "saved = (sum - overlapped) / sum: the most that running this assignment beside these "
        "products could take off their time, if weight matching always had independent products "
        "to run (it does only between groups that do not depend on each other)."
    )


if __name__ == "__main__":
    main()
