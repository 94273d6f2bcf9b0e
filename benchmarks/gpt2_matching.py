"""Weight matching of two GPT-2-small models (issue 17 item 5): time and peak memory on this CPU.

Models: two ``transformers.GPT2LMHeadModel(GPT2Config())`` (the default config: 12 blocks, a
768-wide residual stream, 3072 MLP units, 12 heads of 64, vocabulary 50257, 1024 positions;
124M parameters, the LM head tied to the token embedding), random weights from seeds 0 and 1.
The spec is derived from model A by :func:`lmc.perm.spec_from_model` (through ``torch.export``),
then :func:`lmc.perm.weight_matching` aligns B to A from lmc's defaults (``--init onepass
--solver auto``: Git Re-Basin's one-pass answer, then coordinate descent, with lapx's solver
where installed; ``--init identity --solver scipy`` is what the 2026-12-04 logs ran), with
``tol=1e-4`` and ``seed=0``. ``--known``
instead makes B a random permutation of A (heads shuffled) and checks that it is recovered
exactly.

Printed: the spec's groups; the models' size (bytes of the distinct parameters of both); the
time of deriving the spec and of matching (wall and CPU seconds), split into the similarity
products (``SimilarityMatrices.update``), the linear assignments of plain groups, the head
coordinates (``nested_assignment``: per-pair assignments plus one over heads) and the rest
(building the flattened slices, the objective); passes and the objective; and memory as
resident set size (RSS, sampled from ``/proc/self/statm`` every 5 ms in a thread):
the RSS before matching (the two models, their state dicts share storage, plus the
interpreter and libraries), its peak during matching and the difference, each also as a
multiple of the models' size. Targets: matching under 15 s (issue 32; issue 17's was 2 minutes),
peak under 3x the models' size.

The split is measured by wrapping those functions in this process (``weight_match`` is not
changed); the wrappers add a few microseconds per call.

    .venv/bin/python benchmarks/gpt2_matching.py [--n-layer 12] [--known] [--threads N]
        [--init onepass] [--solver auto] [--n-embd 768] [--n-head 12] [--vocab 50257]

``--n-layer 2`` is a quick smoke run of the same code (seconds); ``--n-layer 1 --n-embd 64
--n-head 4 --vocab 512`` a GPT-2-shaped model small enough for a test.
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time
import warnings
from collections import defaultdict

import torch


class RssSampler:
    """The peak resident set size of this process while running (bytes), sampled in a thread."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


def _timed(module, name: str, totals: dict[str, float], key: str) -> None:
    """Replace ``module.name`` by a wrapper adding its wall time to ``totals[key]``."""
    inner = getattr(module, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - start
            totals[f"{key} calls"] += 1

    setattr(module, name, wrapper)


def _models(n_layer: int, n_embd: int, n_head: int, vocab: int):
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(
        n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab
    )
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(transformers.GPT2LMHeadModel(config).eval())
    return config, models


def _size(model: torch.nn.Module) -> int:
    seen: dict[int, int] = {}
    for t in list(model.parameters()) + list(model.buffers()):
        seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-layer", type=int, default=12, help="GPT-2 blocks (default 12)")
    parser.add_argument("--n-embd", type=int, default=768, help="width (default 768)")
    parser.add_argument("--n-head", type=int, default=12, help="heads (default 12)")
    parser.add_argument("--vocab", type=int, default=50257, help="vocabulary (default 50257)")
    parser.add_argument("--known", action="store_true", help="B = a random permutation of A")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument(
        "--init", choices=("identity", "onepass"), default="onepass", help="the start"
    )
    parser.add_argument(
        "--solver", choices=("auto", "scipy", "lapx", "sparse"), default="auto", help="LAP"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import lmc.perm.weight_match as wm
    from lmc.perm import (
        apply_permutation,
        invert_permutation,
        random_permutation,
        spec_from_model,
        weight_matching,
    )

    config, (model_a, model_b) = _models(args.n_layer, args.n_embd, args.n_head, args.vocab)
    n_params = sum(p.numel() for p in model_a.parameters())
    size = _size(model_a) + _size(model_b)
    print(
        f"GPT-2: {config.n_layer} blocks, width {config.n_embd}, {config.n_head} heads, "
        f"vocabulary {config.vocab_size}, {n_params / 1e6:.1f}M parameters per model; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"models' size (both, distinct tensors): {size / 2**20:.0f} MiB")

    ids = torch.randint(0, config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # GPT-2 is fully understood: no group left out
        spec = spec_from_model(model_a, ids)
    spec_seconds = time.perf_counter() - start
    sizes = spec.group_sizes
    kinds = defaultdict(list)
    for g, n in sizes.items():
        kinds["heads" if g.endswith(".heads") else "nested" if g in spec.heads else "plain"].append(
            n
        )
    print(
        f"spec: {len(sizes)} groups ({len(kinds['plain'])} plain: sizes "
        f"{sorted(set(kinds['plain']))}; {len(kinds['heads'])} head groups of "
        f"{sorted(set(kinds['heads']))}; {len(kinds['nested'])} within-head groups of "
        f"{sorted(set(kinds['nested']))}) over {len(spec.permuted_names)} of {len(spec)} "
        f"tensors; derived in {spec_seconds:.1f} s"
    )

    state_a = model_a.state_dict()
    if args.known:
        truth = random_permutation(spec, 1)
        state_b = apply_permutation(spec, truth, state_a)
        del model_b
        print("model B: a random permutation of A (every group, heads shuffled)")
    else:
        state_b = model_b.state_dict()
        print("model B: independent random weights (seed 1)")

    totals: dict[str, float] = defaultdict(float)
    _timed(wm.SimilarityMatrices, "update", totals, "similarity products")
    _timed(wm, "solve_assignment", totals, "assignments (plain groups)")
    _timed(wm, "nested_assignment", totals, "head coordinates")
    _timed(wm, "_build_terms", totals, "building the slices")
    _timed(wm, "matching_objective", totals, "objectives")
    _timed(wm, "_one_pass", totals, "one-pass start")

    sampler = RssSampler()
    before = sampler.now()
    cpu0, start = time.process_time(), time.perf_counter()
    with sampler:
        result = weight_matching(spec, state_a, state_b, seed=0, init=args.init, solver=args.solver)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0

    print(
        f"weight matching: {seconds:.1f} s wall ({cpu:.1f} s CPU), {result.passes} passes, "
        f"{result.assignments} assignments, converged={result.converged}; start "
        f"{result.start}, solver {result.solver}"
    )
    accounted = 0.0
    for key in (
        "building the slices",
        "similarity products",
        "assignments (plain groups)",
        "head coordinates",
        "objectives",
    ):
        accounted += totals[key]
        print(
            f"  {key:28s} {totals[key]:7.1f} s  ({100 * totals[key] / seconds:4.1f}%, "
            f"{int(totals[f'{key} calls'])} calls)"
        )
    print(f"  {'rest':28s} {seconds - accounted:7.1f} s")
    if result.start == "onepass":
        print(f"  (the one-pass start: {totals['one-pass start']:.1f} s of the above)")
    gain = result.objective_after - result.objective_before
    print(
        f"objective Σ⟨θ_A, π(θ_B)⟩: identity {result.objective_before:.6g}, after "
        f"{result.objective_after:.6g} (gain {gain:.4g}); per pass "
        + ", ".join(f"{v:.6g}" for v in result.objective_per_pass)
    )
    if args.known:
        inverse = invert_permutation(truth)
        exact = all(torch.equal(result.perm[g], inverse[g]) for g in inverse)
        print(f"known permutation recovered exactly: {exact}")
    peak = sampler.peak
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    mib = 2**20
    print(
        f"memory (RSS): before matching {before / mib:.0f} MiB ({before / size:.2f}x the models), "
        f"peak during matching {peak / mib:.0f} MiB ({peak / size:.2f}x), added by matching "
        f"{(peak - before) / mib:.0f} MiB ({(peak - before) / size:.2f}x); process high-water "
        f"mark {maxrss / mib:.0f} MiB"
    )
    time_ok, memory_ok = seconds < 15, peak < 3 * size
    print(
        f"targets: time < 15 s: {'met' if time_ok else 'MISSED'} ({seconds:.1f} s); "
        f"peak < 3x models ({3 * size / mib:.0f} MiB): {'met' if memory_ok else 'MISSED'} "
        f"({peak / size:.2f}x)"
    )


if __name__ == "__main__":
    main()
