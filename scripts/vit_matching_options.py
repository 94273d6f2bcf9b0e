"""Which matching settings connect two ViTs? The midpoint accuracy barrier of recipe
``lewc-fmnist-vit``'s pairs at one width and weight decay, for each alignment setting.

The pairs are the recipe's own runs (trained into the run store when missing, with the
recipe's exact configs, so ``lmc sweep lewc-fmnist-vit`` reuses them and vice versa). For every
pair and setting, B is permuted onto A and the merge θ(½) = ½(θ_A + π(θ_B)) is evaluated on the
test split; the midpoint accuracy barrier is ½(acc_A + acc_B) − acc(θ(½)) in percentage points
(the ViTs use LayerNorm, so no statistics are reset). Settings:

- ``none``: plain averaging;
- ``weight``: weight matching from the identity (lmc's default, what the recipe uses);
- ``weight, restarts=K``: the best of K visiting orders (Σ⟨θ_A, π(θ_B)⟩ decides);
- ``weight, onepass start`` (and with restarts): from Git Re-Basin's greedy one-pass answer;
- ``activation``: activation matching on ``--examples`` training examples;
- ``weight from activation``: weight matching started at activation matching's answer;
- ``weight, onepass start, head rotations``: then each head's q/k and v/out dims rotated onto
  A's by orthogonal Procrustes (:func:`rotate_heads`: a symmetry of attention beyond
  permutations, which no permutation spec can express).

Printed per setting: each pair's barrier, their mean, the mean as a fraction of ``none``'s, and
the objective Σ⟨θ_A, π(θ_B)⟩ reached (weight-matching settings).

    python scripts/vit_matching_options.py [--width 256] [--weight-decay 3e-3] [--restarts 8]
        [--set train.epochs=10 --set model.heads=1 ...] [--only weight --only activation]

``--set TABLE.KEY=VALUE`` (repeatable; VALUE is read as TOML, ``data.options.train_size=60000``
reaches into a nested table) changes the recipe before its runs are expanded, so the pairs are
trained with that setting (into the same run store, under their own ids).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings

import torch


def _accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    from lmc.metrics import model_logits
    from lmc.models import eval_mode

    with eval_mode(model), torch.no_grad():
        logits = model_logits(model, x, 1024, torch.device("cpu"))
    return float((logits.argmax(1) == y).double().mean())


def _procrustes(m: torch.Tensor) -> torch.Tensor:
    """The orthogonal ``O`` maximising ⟨O, m⟩ (``m = U Σ Vᵀ`` gives ``O = U Vᵀ``)."""
    u, _, vt = torch.linalg.svd(m.double())
    return u @ vt


def _head_cross(state_a: dict, state_b: dict, keys: list[str], rows: slice) -> torch.Tensor:
    """Σ over ``keys`` of A's rows ``rows`` times B's, flattened: the (d, d) cross product."""
    d = rows.stop - rows.start
    m = torch.zeros(d, d, dtype=torch.float64)
    for key in keys:
        if key in state_a:
            a, b = state_a[key][rows].double(), state_b[key][rows].double()
            m += a.reshape(d, -1) @ b.reshape(d, -1).T
    return m


def rotate_heads(model: torch.nn.Module, state_a: dict, state_b: dict) -> dict:
    """B's state with each attention head's dims rotated onto A's (a continuous symmetry that
    permutations only sample): q and k of head h share an orthogonal ``O`` (qᵀk is unchanged),
    v and the output projection's columns share ``G`` (``W_o Gᵀ G v = W_o v``); each is the
    orthogonal Procrustes solution maximising ⟨θ_A, θ_B⟩ over that head's tensors. For the zoo's
    attention (``SelfAttention`` with separate ``q``, ``k``, ``v``, ``out``); B's function is
    unchanged up to rounding."""
    out = {k: v.clone() for k, v in state_b.items()}
    for name, module in model.named_modules():
        if type(module).__name__ != "SelfAttention" or getattr(module, "fused", True):
            continue
        d = module.head_dim
        key = {t: f"{name}.{t}" for t in ("q.weight", "q.bias", "k.weight", "k.bias",
                                            "v.weight", "v.bias", "out.weight")}  # fmt: skip
        for h in range(module.heads):
            rows = slice(h * d, (h + 1) * d)
            qk = _procrustes(_head_cross(state_a, out, [key[t] for t in key if t[0] in "qk"], rows))
            vo = _head_cross(state_a, out, [key["v.weight"], key["v.bias"]], rows)
            out_a, out_b = state_a[key["out.weight"]], out[key["out.weight"]]
            vo = _procrustes(vo + out_a[:, rows].double().T @ out_b[:, rows].double())
            for t, rot in (("q", qk), ("k", qk), ("v", vo)):
                for suffix in ("weight", "bias"):
                    if f"{name}.{t}.{suffix}" in out:
                        tensor = out[f"{name}.{t}.{suffix}"]
                        block = tensor[rows].double().reshape(d, -1)
                        tensor[rows] = (rot @ block).reshape(tensor[rows].shape).to(tensor.dtype)
            out_b[:, rows] = (out_b[:, rows].double() @ vo.T).to(out_b.dtype)
    return out


def _override(study: dict, item: str) -> None:
    """Apply one ``TABLE.KEY=VALUE`` to ``study`` in place (VALUE parsed as a TOML value)."""
    import tomllib

    path, _, text = item.partition("=")
    keys = path.strip().split(".")
    if not text or len(keys) < 2:
        raise SystemExit(f"--set {item!r}: expected TABLE.KEY=VALUE")
    value = tomllib.loads(f"v = {text}")["v"]
    table = study
    for key in keys[:-1]:
        table = table.setdefault(key, {})
    table[keys[-1]] = value


def main(argv: list[str] | None = None) -> int:
    from lmc.data import load
    from lmc.experiments import expand, load_study
    from lmc.merge import lerp
    from lmc.perm import activation_matching, apply_permutation, spec_from_model, weight_matching
    from lmc.perm.ops import matching_objective
    from lmc.store import RunStore, default_runs_dir
    from lmc.train import train_run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=float, default=256)
    parser.add_argument("--weight-decay", type=float, default=3e-3)
    parser.add_argument("--restarts", type=int, default=8)
    parser.add_argument("--examples", type=int, default=2000, help="activation matching's")
    parser.add_argument("--runs-dir", default=None)
    parser.add_argument("--set", action="append", default=[], metavar="TABLE.KEY=VALUE")
    parser.add_argument(
        "--only", action="append", default=[], help="a setting to run (repeatable; default all)"
    )
    args = parser.parse_args(argv)

    study, _ = load_study("lewc-fmnist-vit")
    for item in args.set:
        _override(study, item)
    data = load("fashion-mnist", **study["data"]["options"])
    train_jobs, _ = expand(study, data)
    jobs = [j for j in train_jobs if j["labels"]["width"] == args.width
            and j["labels"]["weight_decay"] == args.weight_decay]  # fmt: skip
    if not jobs:
        print(f"no runs of width {args.width:g} and weight decay {args.weight_decay:g}")
        return 2
    store = RunStore(args.runs_dir or default_runs_dir())
    runs = {}
    for job in jobs:
        run, _ = train_run(job["config"], store=store, data=data, quiet=True)
        runs[(job["labels"]["pair"], job["labels"]["model"])] = run
    x, y = data.x_test, data.y_test
    settings = [
        ("none", None),
        ("weight", {}),
        (f"weight, restarts={args.restarts}", {"restarts": args.restarts}),
        ("weight, onepass start", {"init": "onepass"}),
        (f"weight, onepass start, restarts={args.restarts}",
         {"init": "onepass", "restarts": args.restarts}),
        ("activation", "activation"),
        ("weight from activation", "activation+weight"),
        ("weight, onepass start, head rotations", "onepass+rotations"),
    ]  # fmt: skip
    if args.only:
        wanted = {name.strip() for name in args.only}
        settings = [(name, how) for name, how in settings if name in wanted or how is None]
    barriers: dict[str, list[float]] = {name: [] for name, _ in settings}
    objectives: dict[str, list[float]] = {name: [] for name, _ in settings}
    pairs = sorted({p for p, _ in runs})
    for pair in pairs:
        model_a, model_b = (
            runs[(pair, "A")].build_model("cpu"),
            runs[(pair, "B")].build_model("cpu"),
        )
        state_a, state_b = model_a.state_dict(), model_b.state_dict()
        ends = (_accuracy(model_a, x, y) + _accuracy(model_b, x, y)) / 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec = spec_from_model(model_a, data.x_train[:2])
        gen = torch.Generator().manual_seed(0)
        sample = data.x_train[torch.randperm(len(data.x_train), generator=gen)[: args.examples]]
        merged = runs[(pair, "A")].build_model("cpu")
        for name, how in settings:
            if how is None:
                permuted = state_b
            elif how in ("activation", "activation+weight"):
                act = activation_matching(spec, model_a, model_b, sample)
                perm = act.perm
                if how == "activation+weight":
                    perm = weight_matching(
                        spec, state_a, state_b, init_perm=act.perm, solver="scipy"
                    ).perm
                permuted = apply_permutation(spec, perm, state_b)
            elif how == "onepass+rotations":
                perm = weight_matching(spec, state_a, state_b, init="onepass", solver="scipy").perm
                permuted = apply_permutation(spec, perm, state_b)
                permuted = rotate_heads(model_a, state_a, permuted)
            else:
                # the identity start and SciPy's solver unless the row names another: what
                # the committed matching_options.txt ran with (lmc's defaults are now onepass
                # and solver "auto")
                pinned = {"init": "identity", "solver": "scipy", **how}
                perm = weight_matching(spec, state_a, state_b, **pinned).perm
                permuted = apply_permutation(spec, perm, state_b)
            merged.load_state_dict(lerp(state_a, permuted, 0.5))
            barriers[name].append(100 * (ends - _accuracy(merged, x, y)))
            objectives[name].append(matching_objective(spec, state_a, permuted))
        print(f"pair {pair}: endpoints {100 * ends:.1f} %", file=sys.stderr)
    base = statistics.mean(barriers["none"])
    changes = f" with {', '.join(args.set)}" if args.set else ""
    print(
        f"ViT width {args.width:g}, weight decay {args.weight_decay:g}, {len(pairs)} pairs "
        f"(recipe lewc-fmnist-vit's runs{changes}): midpoint accuracy barrier (points)"
    )
    for name, _ in settings:
        values = barriers[name]
        mean = statistics.mean(values)
        per_pair = ", ".join(f"{v:.2f}" for v in values)
        obj = statistics.mean(objectives[name])
        print(
            f"  {name:<42} {mean:6.2f} (pairs {per_pair}); {mean / base:.2f} of none's; "
            f"objective {obj:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
