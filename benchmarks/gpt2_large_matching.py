"""Weight matching of two GPT-2-large-shaped models read lazily from safetensors files (issue 32
item 3): time and peak memory on this CPU.

Models: ``transformers.GPT2LMHeadModel(GPT2Config(n_embd=1280, n_layer=36, n_head=20))`` (774M
parameters, 3.1 GB in float32 each; the LM head tied to the token embedding, stored once),
random weights from seeds 0 and 1 (``--known``: B is a random permutation of A, heads shuffled,
written by :func:`lmc.perm.files.permute_file`), each saved with ``save_pretrained`` into
``--folder`` (kept and reused by later runs; made one model at a time).

The models are made in one child process and the matching runs in another, so that its memory
is its own: the spec is derived
from the architecture on the ``meta`` device (no weights), then :func:`lmc.perm.files.match_files`
matches B to A with lmc's default settings (one-pass start, ``auto`` solver; ``--init`` /
``--solver`` change them), reading both files lazily (memory-mapped), and writes the aligned B
tensor by tensor. Printed: the files' size (both models), the time of deriving the spec, of
matching and of writing, passes and objective, and memory as resident set size (RSS, sampled
from ``/proc/self/statm`` every 5 ms: file pages the process touched count, as they would on a
busy machine): before matching, its peak, each also as a multiple of the two models' size.
Target: peak under twice the two models' size. ``--known`` also checks the aligned file equals A
exactly.

    .venv/bin/python benchmarks/gpt2_large_matching.py [--folder DIR] [--known] [--threads N]
        [--n-layer 36] [--width 1280] [--heads 20]

``--n-layer 2 --width 128 --heads 4`` is a quick smoke run of the same code (seconds).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

TIED = {"lm_head.weight": "transformer.wte.weight"}


def _config(args):
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.GPT2Config(n_embd=args.width, n_layer=args.n_layer, n_head=args.heads)


def _spec(config):
    import transformers

    from lmc.perm import spec_from_model

    with torch.device("meta"):
        skeleton = transformers.GPT2LMHeadModel(config).eval()
    return spec_from_model(skeleton, torch.zeros(1, 8, dtype=torch.long, device="meta"))


def _model_paths(args, folder: Path) -> tuple[Path, Path]:
    tag = f"gpt2-{args.n_layer}x{args.width}x{args.heads}"
    name_b = f"{tag}-seed0-permuted" if args.known else f"{tag}-seed1"
    return folder / f"{tag}-seed0" / "model.safetensors", folder / name_b / "model.safetensors"


def _write_models(args, folder: Path) -> tuple[Path, Path]:
    """Model files A and B in ``folder`` (made when missing, one model in memory at a time)."""
    import transformers

    from lmc.perm import random_permutation
    from lmc.perm.files import permute_file

    config = _config(args)
    path_a, path_b = _model_paths(args, folder)
    for seed, path in ((0, path_a), (1, path_b)):
        if path.exists():
            continue
        start = time.perf_counter()
        if seed == 1 and args.known:
            path.parent.mkdir(parents=True, exist_ok=True)
            permute_file(_spec(config), random_permutation(_spec(config), seed=1), path_a, path,
                         aliases=TIED)  # fmt: skip
        else:
            torch.manual_seed(seed)
            model = transformers.GPT2LMHeadModel(config).eval()
            model.save_pretrained(path.parent, safe_serialization=True)
            del model
        print(f"wrote {path} in {time.perf_counter() - start:.1f} s", flush=True)
    return path_a, path_b


def _match(args) -> None:
    """The child: derive the spec, match the files lazily, write the aligned B, report."""
    if args.threads:
        torch.set_num_threads(args.threads)
    from gpt2_matching import RssSampler
    from safetensors.torch import load_file

    from lmc.perm.files import match_files

    path_a, path_b = Path(args.path_a), Path(args.path_b)
    size = path_a.stat().st_size + path_b.stat().st_size
    config = _config(args)
    start = time.perf_counter()
    spec = _spec(config)
    spec_s = time.perf_counter() - start
    n_params = sum(torch.Size(spec.shapes[n]).numel() for n in spec if n not in TIED)
    print(
        f"GPT-2: {config.n_layer} blocks, width {config.n_embd}, {config.n_head} heads, "
        f"vocabulary {config.vocab_size}, {n_params / 1e6:.1f}M parameters per model; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"models' size (both files): {size / 2**20:.0f} MiB")
    sizes = sorted(set(spec.group_sizes.values()))
    print(f"spec: {len(spec.group_sizes)} groups (sizes {sizes}) over {len(spec)} tensors; "
          f"derived on the meta device in {spec_s:.1f} s")  # fmt: skip
    print("model B: " + ("a random permutation of A" if args.known else "independent (seed 1)"))
    out = Path(args.out)
    with RssSampler() as rss:
        before = rss.now()
        start = time.perf_counter()
        cpu = time.process_time()
        result = match_files(spec, path_a, path_b, None, aliases=TIED, init=args.init,
                             solver=args.solver)  # fmt: skip
        match_s, match_cpu = time.perf_counter() - start, time.process_time() - cpu
        peak_match = rss.peak
        start = time.perf_counter()
        from lmc.perm.files import permute_file

        permute_file(spec, result.perm, path_b, out, aliases=TIED)
        write_s = time.perf_counter() - start
    print(
        f"weight matching ({result.start} start, {result.solver} solver): {match_s:.1f} s wall "
        f"({match_cpu:.1f} s CPU), {result.passes} passes, {result.assignments} assignments, "
        f"converged={result.converged}"
    )
    print(f"objective Σ⟨θ_A, π(θ_B)⟩: identity {result.objective_before:.6g}, start "
          f"{result.objective_init:.6g}, after {result.objective_after:.6g}")  # fmt: skip
    written = out.stat().st_size / 2**20
    print(f"aligned B written tensor by tensor in {write_s:.1f} s ({written:.0f} MiB)")
    ratio = rss.peak / size
    print(
        f"memory (RSS): before matching {before / 2**20:.0f} MiB ({before / size:.2f}x the "
        f"models), peak while matching {peak_match / 2**20:.0f} MiB ({peak_match / size:.2f}x), "
        f"peak overall (matching and writing) {rss.peak / 2**20:.0f} MiB ({ratio:.2f}x)"
    )
    print(f"target: peak < 2x the two models ({2 * size / 2**20:.0f} MiB): "
          f"{'met' if ratio < 2 else 'NOT met'} ({ratio:.2f}x)")  # fmt: skip
    if args.known:
        a = load_file(path_a)
        same = all(torch.equal(a[k], v) for k, v in load_file(out).items())
        print(f"known permutation recovered exactly: {same}")
    out.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=None, help="where the model files live (kept)")
    parser.add_argument("--known", action="store_true", help="B = a random permutation of A")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--n-layer", type=int, default=36)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--heads", type=int, default=20)
    parser.add_argument("--init", choices=("identity", "onepass"), default="onepass")
    parser.add_argument("--solver", choices=("auto", "scipy", "lapx", "sparse"), default="auto")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path-a", help=argparse.SUPPRESS)
    parser.add_argument("--path-b", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _match(args)
        return
    folder = Path(args.folder or Path(tempfile.gettempdir()) / "lmc-gpt2-large-bench")
    folder.mkdir(parents=True, exist_ok=True)
    if args.write_only:
        _write_models(args, folder)
        return
    shape = ["--n-layer", str(args.n_layer), "--width", str(args.width),
             "--heads", str(args.heads)] + (["--known"] if args.known else [])  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    # the models are made in a child of their own, so that no process holds them afterwards
    code = subprocess.call([sys.executable, __file__, "--write-only", "--folder", str(folder),
                            *shape], env=env)  # fmt: skip
    if code:
        sys.exit(code)
    path_a, path_b = _model_paths(args, folder)
    command = [sys.executable, __file__, "--child", "--path-a", str(path_a),
               "--path-b", str(path_b), "--out", str(folder / "aligned.safetensors"), *shape,
               "--threads", str(args.threads), "--init", args.init,
               "--solver", args.solver]  # fmt: skip
    sys.exit(subprocess.call(command, env=env))


if __name__ == "__main__":
    main()
