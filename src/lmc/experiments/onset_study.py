"""The onset of linear mode connectivity over training: ``experiment = "onset"`` (Git Re-Basin
Fig. 3).

Git Re-Basin (Ainsworth et al. 2023, Fig. 3) plots the loss barrier between two independently
trained models, after weight matching and without it, against the training epoch of both
endpoints: at initialisation and early in training a permutation does not connect them
linearly; as training proceeds the barrier after weight matching falls toward zero while the
naive one stays high.

For each pair p the study trains A (init and data seed ``seed + 2p``) and B (``seed + 2p + 1``)
once each, exactly as :func:`lmc.train.train_run` trains the run of the same config (the same
model construction from the config's init seed, the same :func:`lmc.train.fit` call; on CPU
with a fixed thread count the states are bit-identical), capturing the model's state after
every listed epoch through ``fit``'s ``on_epoch_end`` callback (epoch 0 is the initialisation,
taken before training). Then, for every listed epoch and method, it evaluates the pair of
states of that epoch with :func:`lmc.pair.run_pair`: align B onto A (``none``: as it is,
``weight``: weight matching, ...) and measure the path θ(λ) = (1 − λ)θ_A + λθ_B (λ = 0 is A)
on the ``[data] split``. It writes

- ``onset.csv``: one row per pair, epoch, method and λ: ``loss`` (mean cross-entropy, nats),
  ``accuracy`` (fraction), ``calibrated_loss`` (nats; empty unless ``calibrate``) and, repeated
  on every row of the path, the path's barriers;
- ``barriers.csv``: one row per pair, epoch and method: the barriers of
  :func:`lmc.metrics.barriers` (``max_minus_mean_loss`` is Git Re-Basin's, ``loss_barrier``
  Frankle et al.'s, in nats; accuracy barriers as fractions, a drop below the chord positive),
  the endpoints' (``loss_a``/``accuracy_a`` at λ = 0, ``loss_b``/``accuracy_b`` at λ = 1) and
  the midpoint's loss and accuracy, and for an alignment the mean fraction of units it moved;
- ``study.json``: the resolved study, the environment, the timings, the job counts and the
  files; ``jobs/onset-<hash>.json``: one finished pair (its path and barrier rows and the
  training histories), reused on a re-run with the same settings, so an interrupted study
  resumes at the first unfinished pair.

When the last listed epoch is the last training epoch, each finished model is also saved in
the run store (``runs_dir``) as the run :func:`lmc.train.train_run` would make for its config
(a width study with the same settings reuses it); a run already there is left as it is and
compared with the state trained here (a difference is said on stderr: another thread count or
machine). The study runs in this process with the executor's thread count (``--threads``);
``--workers`` does not apply.

The study file::

    name = "rebasin-onset-fmnist-mlp"
    experiment = "onset"
    [data]                 # as a width study: dataset, options, split
    dataset = "fashion-mnist"
    [model]                # as a width study: name and options (no width)
    name = "mlp"
    [train]                # as a width study: lmc.train.TrainSettings but seeds, weight decay
    epochs = 10
    [onset]
    width = 512            # MLP hidden units or CNN channel multiplier (required)
    weight_decay = 1e-4
    pairs = 2              # pair p: A seed + 2p, B seed + 2p + 1
    seed = 0
    epochs = [0, 1, 2, 3, 5, 10]   # compared checkpoints; 0 = initialisation (default: all)
    methods = ["none", "weight"]
    lambdas = 11
    calibrate = false
    align_seed = 0         # seeds weight matching's visiting order, BatchNorm reset batches
    align_examples = 2000  # training examples read by activation matching / STE
"""

from __future__ import annotations

import sys
import time
from functools import partial
from typing import Any

import torch

from lmc.config import LmcError, check_int, check_number, config_hash, resolve_device
from lmc.data import Dataset
from lmc.metrics import BARRIER_KEYS, CALIBRATE_DEFAULTS, lambda_grid
from lmc.models import build, get_model
from lmc.store import RunStore
from lmc.train import TrainSettings, make_config
from lmc.train.loop import fit
from lmc.train.runs import final_metrics, settings_of

from .executors import RunOptions, _torch_threads
from .kind_run import StudyRecord, load_data, reuse_or_run, write_tables
from .kind_settings import MAX_TRAINING_RUNS, resolve_trained, table, where

KIND = "onset"
#: key -> (allowed types, default) of the ``[onset]`` table; ``...``: required; ``None`` for
#: ``epochs``: every epoch 0, 1, ..., ``train.epochs``.
SETTINGS: dict[str, tuple[tuple[type, ...], Any]] = {
    "width": ((int, float), ...),
    "weight_decay": ((float, int), 1e-4),
    "pairs": ((int,), 2),
    "seed": ((int,), 0),
    "epochs": ((list,), None),
    "methods": ((list,), ["none", "weight"]),
    "lambdas": ((int, list), 11),
    "calibrate": ((bool,), CALIBRATE_DEFAULTS["onset"]),
    "align_seed": ((int,), 0),
    "align_examples": ((int,), 2000),
}
TOP_LEVEL = ("name", "description", "experiment", "data", "model", "train", KIND)
LABEL_COLUMNS = ["pair", "epoch", "method", "seed_a", "seed_b"]
PATH_COLUMNS = [*LABEL_COLUMNS, "lam", "loss", "accuracy", "calibrated_loss", *BARRIER_KEYS]
BARRIER_COLUMNS = [
    *LABEL_COLUMNS,
    *BARRIER_KEYS,
    "loss_a",
    "loss_b",
    "accuracy_a",
    "accuracy_b",
    "midpoint_loss",
    "midpoint_accuracy",
    "moved_fraction",
]
#: The result tables (:mod:`lmc.experiments.kind_run`): key -> (file, leading columns).
OUTPUTS = {"onset": ("onset.csv", PATH_COLUMNS), "barriers": ("barriers.csv", BARRIER_COLUMNS)}


def resolve_onset(raw: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Check a parsed onset study and fill in its defaults (module docstring); an unknown key,
    a wrong type or a value out of range is an ``LmcError`` naming the key and the file."""
    study = resolve_trained(raw, KIND, TOP_LEVEL, source)
    settings = table(raw.get(KIND, {}), SETTINGS, KIND, source)
    _check_settings(settings, study["model"], study["train"], study["data"], source)
    study[KIND] = settings
    for method in settings["methods"]:  # the settings every evaluation builds, built now
        try:
            onset_pair_settings(study, method)
        except LmcError as exc:
            raise LmcError(f"[{KIND}]{where(source)}: {exc}") from None
    return study


def _check_settings(
    settings: dict[str, Any],
    model: dict[str, Any],
    train: dict[str, Any],
    data: dict[str, Any],
    source: str | None,
) -> None:
    """Value checks of ``[onset]`` (in place: the epochs sorted, numbers as floats)."""
    from lmc.perm.methods import method_names

    at = f"'{KIND}.%s'{where(source)}"
    try:
        settings["width"] = get_model(model["name"]).width_value(
            check_number(at % "width", settings["width"], positive=True)
        )
    except LmcError as exc:
        raise LmcError(f"{at % 'width'}: {exc}") from None
    settings["weight_decay"] = check_number(
        at % "weight_decay", settings["weight_decay"], minimum=0.0
    )
    check_int(at % "pairs", settings["pairs"], minimum=1)
    if 2 * settings["pairs"] > MAX_TRAINING_RUNS:
        raise LmcError(
            f"{at % 'pairs'} asks for {2 * settings['pairs']:,} training runs; the limit "
            f"is {MAX_TRAINING_RUNS:,}"
        )
    for key in ("seed", "align_seed"):
        check_int(at % key, settings[key], minimum=0)
    check_int(at % "align_examples", settings["align_examples"], minimum=1)
    total = train.get("epochs", TrainSettings().epochs)
    epochs = settings["epochs"]
    if epochs is None:
        epochs = list(range(total + 1))
    if not epochs:
        raise LmcError(f"{at % 'epochs'} is empty: list the epochs to compare (0 = init)")
    for epoch in epochs:
        check_int(f"each of {at % 'epochs'}", epoch, minimum=0)
        if epoch > total:
            raise LmcError(
                f"{at % 'epochs'}: epoch {epoch} exceeds the {total} training epochs (train.epochs)"
            )
    if len(set(epochs)) != len(epochs):
        raise LmcError(f"{at % 'epochs'} lists an epoch twice: {epochs}")
    settings["epochs"] = sorted(epochs)
    methods = settings["methods"]
    if not methods:
        raise LmcError(f"{at % 'methods'} is empty")
    for method in methods:
        if method not in method_names():
            raise LmcError(
                f"unknown method {method!r} in {at % 'methods'}: "
                f"choose from {', '.join(method_names())}"
            )
    if len(set(methods)) != len(methods):
        raise LmcError(f"{at % 'methods'} lists a method twice: {methods}")
    try:
        lambda_grid(settings["lambdas"])
    except LmcError as exc:
        raise LmcError(f"{at % 'lambdas'}: {exc}") from None


def onset_pair_settings(study: dict[str, Any], method: str):
    """The :class:`lmc.pair.PairSettings` of one evaluation: align with ``method`` (seeded by
    ``align_seed``), then the path on ``[data] split`` (BatchNorm ``auto``: reset when the
    model has BatchNorm), no layerwise analysis."""
    from lmc.pair import PairSettings, PathSettings

    settings = study[KIND]
    return PairSettings(
        align=method,
        align_examples=settings["align_examples"],
        # weight matching from the identity with SciPy's solver, as the committed onset results
        # ran (its own defaults are now the one-pass start and solver "auto")
        align_options={"init": "identity", "solver": "scipy"} if method == "weight" else {},
        seed=settings["align_seed"],
        split=study["data"]["split"],
        path=PathSettings(
            lambdas=settings["lambdas"],
            bn="auto",
            seed=settings["align_seed"],
            calibrate=settings["calibrate"],
        ),
        analysis=None,
    )


def train_config(study: dict[str, Any], seed: int, data: Dataset | None = None) -> dict:
    """The config of the run with init and data seed ``seed`` (what :func:`lmc.train.train_run`
    would train and the run store names); ``data`` saves reading the dataset's shapes."""
    from .jobs import model_options

    settings = study[KIND]
    return make_config(
        study["data"]["dataset"],
        study["model"]["name"],
        model_options(study, settings["width"]),
        study["data"]["options"],
        data=data,
        init_seed=seed,
        data_seed=seed,
        weight_decay=float(settings["weight_decay"]),
        **study["train"],
    )


def train_capturing(
    config: dict[str, Any],
    data: Dataset,
    epochs: list[int],
    *,
    device: str | torch.device = "cpu",
    quiet: bool = True,
) -> tuple[dict[int, dict[str, torch.Tensor]], torch.nn.Module, list[dict]]:
    """Train the run ``config`` as :func:`lmc.train.train_run` does (the model built from the
    config's init seed, one :func:`lmc.train.fit` pass) up to the last of ``epochs``, keeping
    a CPU copy of the state after each listed epoch (0: the initialisation, before training).

    Returns ``(states, model, history)``: epoch -> state dict, the model after the last listed
    epoch, and ``fit``'s per-epoch history. The learning-rate schedule is that of the whole
    ``train.epochs`` run, so epoch K's state is the full run's state after K epochs.
    """
    settings = settings_of(config)
    wanted = set(epochs)
    model = build(config["model"], seed=settings.init_seed, **config["model_options"])
    states: dict[int, dict[str, torch.Tensor]] = {}

    def copy_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}

    if 0 in wanted:
        states[0] = copy_state(model)

    def keep(epoch: int, module: torch.nn.Module, optimizer: Any, history: list) -> None:
        if epoch in wanted:
            states[epoch] = copy_state(module)

    last = max(epochs)
    history: list[dict] = []
    if last > 0:
        history = fit(
            model, data, settings, device=device, quiet=quiet, stop_epoch=last, on_epoch_end=keep
        )
    missing = wanted - set(states)
    if missing:  # fit calls back after every epoch: a missing one is a bug, said plainly
        raise LmcError(f"the states after epochs {sorted(missing)} were not captured")
    return states, model.eval(), history


def _model_from(config: dict[str, Any], state: dict[str, torch.Tensor], device) -> torch.nn.Module:
    model = build(config["model"], **config["model_options"])
    model.load_state_dict(state, strict=True)
    return model.to(device).eval()


def _same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def _store_final(
    store: RunStore,
    config: dict[str, Any],
    model: torch.nn.Module,
    history: list[dict],
    data: Dataset,
    seconds: float,
    device,
) -> dict[str, Any]:
    """Save the finished model in the run store as :func:`lmc.train.train_run` would (same
    files and metrics), unless the run is there already: then compare the two states. Returns
    ``{"run": <folder name>, "saved": bool, "matches": bool | None}``."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    found = store.find_or_reopen(config, "saving")
    if found is not None:
        matches = _same_state(found.state_dict(), state)
        if not matches:
            print(
                f"{KIND}: the stored run {found.name} differs from the model trained here "
                "(another thread count or machine?); the study uses its own",
                file=sys.stderr,
            )
        return {"run": found.name, "saved": False, "matches": matches}
    metrics = final_metrics(
        model, data, history, seconds=seconds, device=device, trained_by=f"experiment {KIND}"
    )
    run = store.save(config, state, metrics)
    return {"run": run.name, "saved": True, "matches": None}


def _evaluate(
    study: dict[str, Any],
    config: dict[str, Any],
    states: tuple[dict, dict],
    data: Dataset,
    labels: dict[str, Any],
    method: str,
    device,
) -> tuple[list[dict], dict[str, Any]]:
    """The path rows and the barrier row of one pair at one epoch with one method."""
    from lmc.pair import run_pair

    model_a = _model_from(config, states[0], device)
    model_b = _model_from(config, states[1], device)
    result = run_pair(model_a, model_b, data, onset_pair_settings(study, method))
    path = result.path
    barriers = path.barriers()
    chosen = {key: barriers.get(key) for key in BARRIER_KEYS}
    calibrated = path.calibrated_loss or [None] * len(path.lambdas)
    rows = [
        {**labels, "lam": lam, "loss": loss, "accuracy": acc, "calibrated_loss": cal, **chosen}
        for lam, loss, acc, cal in zip(path.lambdas, path.loss, path.accuracy, calibrated)
    ]

    def at(value: float) -> int:  # the grid always holds 0, 1/2 and 1 (lambda_grid)
        return min(range(len(path.lambdas)), key=lambda i: abs(path.lambdas[i] - value))

    a, b, mid = at(0.0), at(1.0), at(0.5)
    moved = None
    if result.alignment is not None:
        fractions = list(result.alignment.get("moved_fraction", {}).values())
        moved = sum(fractions) / len(fractions) if fractions else None
    barrier_row = {
        **labels,
        **chosen,
        "loss_a": path.loss[a],
        "loss_b": path.loss[b],
        "accuracy_a": path.accuracy[a],
        "accuracy_b": path.accuracy[b],
        "midpoint_loss": path.loss[mid],
        "midpoint_accuracy": path.accuracy[mid],
        "moved_fraction": moved,
    }
    return rows, barrier_row


def pair_job(study: dict[str, Any], pair: int, data: Dataset) -> dict[str, Any]:
    """The job of pair ``pair``: everything that changes its numbers (the two runs' configs,
    the epochs, the methods and the path settings)."""
    settings = study[KIND]
    seed_a, seed_b = settings["seed"] + 2 * pair, settings["seed"] + 2 * pair + 1
    return {
        "type": KIND,
        "pair": pair,
        "seeds": [seed_a, seed_b],
        "run_a": train_config(study, seed_a, data),
        "run_b": train_config(study, seed_b, data),
        "epochs": settings["epochs"],
        "methods": settings["methods"],
        "split": study["data"]["split"],
        "path": {k: settings[k] for k in ("lambdas", "calibrate", "align_seed", "align_examples")},
    }


def _run_pair_job(
    study: dict[str, Any],
    job: dict[str, Any],
    data: Dataset,
    store: RunStore | None,
    device,
    say,
) -> dict[str, Any]:
    """Train the pair's two runs capturing their states, then evaluate every epoch and
    method; returns the job record's results."""
    pair, epochs = job["pair"], job["epochs"]
    states, training, stored = {}, {}, {}
    for side, key, seed in (("A", "run_a", job["seeds"][0]), ("B", "run_b", job["seeds"][1])):
        begun = time.perf_counter()
        captured, model, history = train_capturing(job[key], data, epochs, device=device)
        seconds = time.perf_counter() - begun
        states[side] = captured
        training[side] = {"seed": seed, "seconds": seconds, "history": history}
        say(f"pair {pair}: trained {side} (seed {seed}) to epoch {max(epochs)} in {seconds:.1f} s")
        if store is not None:
            stored[side] = _store_final(store, job[key], model, history, data, seconds, device)
    path_rows, barrier_rows = [], []
    for epoch in epochs:
        done = []
        for method in job["methods"]:
            labels = {"pair": pair, "epoch": epoch, "method": method,
                      "seed_a": job["seeds"][0], "seed_b": job["seeds"][1]}  # fmt: skip
            rows, row = _evaluate(
                study,
                job["run_a"],
                (states["A"][epoch], states["B"][epoch]),
                data,
                labels,
                method,
                device,
            )
            path_rows += rows
            barrier_rows.append(row)
            done.append(f"{method} {row['max_minus_mean_loss']:.3f}")
        say(f"pair {pair} epoch {epoch}: loss barrier (max - mean, nats) " + ", ".join(done))
    return {"paths": path_rows, "barriers": barrier_rows, "training": training, "stored": stored}


def run_onset(study: dict[str, Any], options: RunOptions) -> dict[str, Any]:
    """Run a resolved onset study into ``options.out`` (module docstring); returns the
    contents of ``study.json``. Runs in this process with the executor's ``threads`` PyTorch
    threads (default 1); finished pairs in ``OUT/jobs`` are reused."""
    out = options.out
    torch_device = resolve_device(options.device)
    settings = study[KIND]
    store_final = max(settings["epochs"]) == study["train"].get("epochs", TrainSettings().epochs)
    store = RunStore(options.job_context().runs_dir) if store_final else None

    def say(text: str) -> None:
        if not options.quiet:
            print(f"{KIND}: {text}", file=sys.stderr, flush=True)

    with _torch_threads(options.threads):
        record = StudyRecord(
            study,
            options,
            torch_device,
            threads_per_job=options.threads,
            runs_dir=None if store is None else str(store.root),
        )
        data = load_data(study, options, device=torch_device)
        jobs = [pair_job(study, pair, data) for pair in range(settings["pairs"])]
        ids = [f"{KIND}-{config_hash(job)}" for job in jobs]
        record.running()
        counts = {"total": len(jobs), "reused": 0, "run": 0}
        results = []

        def compute(job: dict[str, Any]) -> dict[str, Any]:
            if store is not None:
                store.check_writable()
            return _run_pair_job(study, job, data, store, torch_device, say)

        for job, job_id in zip(jobs, ids):
            result, reused = reuse_or_run(out, job_id, job, partial(compute, job))
            results.append(result)
            counts["reused" if reused else "run"] += 1
            if reused:
                say(f"pair {job['pair']}: reused ({job_id}.json)")
        files = write_tables(
            out,
            OUTPUTS,
            {
                "onset": [r for x in results for r in x["paths"]],
                "barriers": [r for x in results for r in x["barriers"]],
            },
        )
        return record.finished(counts, files, job_ids=ids)
