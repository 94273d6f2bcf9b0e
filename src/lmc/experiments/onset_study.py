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
- ``barriers.csv``: one row per pair, epoch and method (and width and connectivity, below):
  the barriers of
  :func:`lmc.metrics.barriers` (``max_minus_mean_loss`` is Git Re-Basin's, ``loss_barrier``
  Frankle et al.'s, in nats; accuracy barriers as fractions, a drop below the chord positive),
  the endpoints' (``loss_a``/``accuracy_a`` at λ = 0, ``loss_b``/``accuracy_b`` at λ = 1) and
  the midpoint's loss and accuracy, and for an alignment the mean fraction of units it moved;
- ``study.json``: the resolved study, the environment, the timings, the job counts and the
  files; ``jobs/onset-<hash>.json``: one finished pair (its path and barrier rows and the
  training histories), reused on a re-run with the same settings, so an interrupted study
  resumes at the first unfinished pair.

Connectivity along training (Sharma et al. 2024, "Simultaneous linear connectivity of neural
networks modulo permutation"; ``docs/science.md``). ``alignment = ["weak"]`` (the default) aligns
each epoch's pair by itself: the barrier is that of θ_A(s) and π_s(θ_B(s)), π_s found between
the epoch-s states (weak connectivity). ``"strong"`` adds, for every aligning method, the
barrier of θ_A(s) and π_T(θ_B(s)) with π_T the alignment found once between the last listed
epoch's states (the final models, T = ``max(epochs)``), applied to every epoch's B (strong
connectivity; at epoch T the two are the same path). Such rows say ``connectivity`` =
``strong``, the others ``weak``; ``none`` has only weak rows (the identity is both), and a
method that aligns canonical forms (``orthogonal``, ...) cannot be applied across epochs. The
``connectivity`` column is written when ``"strong"`` is asked for (a file without it holds weak
rows only), and ``width`` a column when ``width`` is a list (``width = [128, 512]``: the study
at each width, pair p the same seeds at every width; a file without it is at the one width of
its ``study.json``), so the files and job ids of a study without them are what they were.

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
    width = 512            # MLP hidden units or CNN channel multiplier, or a list (required)
    weight_decay = 1e-4
    pairs = 2              # pair p: A seed + 2p, B seed + 2p + 1
    seed = 0
    epochs = [0, 1, 2, 3, 5, 10]   # compared checkpoints; 0 = initialisation (default: all)
    methods = ["none", "weight"]
    alignment = ["weak"]   # and "strong": the final epoch's alignment applied at every epoch
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
from lmc.metrics import BARRIER_KEYS, CALIBRATE_DEFAULTS, evaluate_path, lambda_grid
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
    "width": ((int, float, list), ...),
    "weight_decay": ((float, int), 1e-4),
    "pairs": ((int,), 2),
    "seed": ((int,), 0),
    "epochs": ((list,), None),
    "methods": ((list,), ["none", "weight"]),
    "alignment": ((list,), ["weak"]),
    "lambdas": ((int, list), 11),
    "calibrate": ((bool,), CALIBRATE_DEFAULTS["onset"]),
    "align_seed": ((int,), 0),
    "align_examples": ((int,), 2000),
}
TOP_LEVEL = ("name", "description", "experiment", "data", "model", "train", KIND)
LABEL_COLUMNS = ["pair", "epoch", "method", "seed_a", "seed_b"]
#: Connectivity along training (module docstring): ``weak``, each epoch's own alignment;
#: ``strong``, the final epoch's alignment applied at every epoch.
CONNECTIVITY = ("weak", "strong")
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
#: The result tables (:mod:`lmc.experiments.kind_run`): key -> (file, leading columns), for a
#: study at one width with weak connectivity only (:func:`outputs` gives any study's).
OUTPUTS = {"onset": ("onset.csv", PATH_COLUMNS), "barriers": ("barriers.csv", BARRIER_COLUMNS)}


def widths(settings: dict[str, Any]) -> list[int | float]:
    """The widths of a resolved ``[onset]`` table: ``width`` itself, or its list."""
    width = settings["width"]
    return list(width) if isinstance(width, list) else [width]


def outputs(study: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    """The result tables of ``study``: :data:`OUTPUTS`, with a ``width`` label after ``pair``
    when ``width`` is a list and a ``connectivity`` label after ``method`` when ``alignment``
    lists ``strong`` (module docstring)."""
    settings = study[KIND]
    labels = list(LABEL_COLUMNS)
    if isinstance(settings["width"], list):
        labels.insert(labels.index("pair") + 1, "width")
    if "strong" in settings["alignment"]:
        labels.insert(labels.index("method") + 1, "connectivity")
    return {
        key: (name, [*labels, *columns[len(LABEL_COLUMNS) :]])
        for key, (name, columns) in OUTPUTS.items()
    }


def resolve_onset(raw: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Check a parsed onset study and fill in its defaults (module docstring); an unknown key,
    a wrong type or a value out of range is an ``LmcError`` naming the key and the file."""
    study = resolve_trained(raw, KIND, TOP_LEVEL, source)
    settings = table(raw.get(KIND, {}), SETTINGS, KIND, source)
    _check_settings(settings, study["model"], study["train"], source)
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
    source: str | None,
) -> None:
    """Value checks of ``[onset]`` (in place: the epochs sorted, numbers as floats)."""
    from lmc.perm.methods import method_names

    at = f"'{KIND}.%s'{where(source)}"
    given = settings["width"]
    if isinstance(given, list):
        if not given:
            raise LmcError(f"{at % 'width'} is an empty list: give a width or a list of widths")
        if len(set(given)) != len(given):
            raise LmcError(f"{at % 'width'} lists a width twice: {given}")
    try:
        checked = [
            get_model(model["name"]).width_value(
                check_number(f"each of {at % 'width'}", w, positive=True)
                if isinstance(given, list)
                else check_number(at % "width", w, positive=True)
            )
            for w in (given if isinstance(given, list) else [given])
        ]
    except LmcError as exc:
        raise LmcError(f"{at % 'width'}: {exc}") from None
    settings["width"] = sorted(checked) if isinstance(given, list) else checked[0]
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
    alignment = settings["alignment"]
    if not alignment or any(a not in CONNECTIVITY for a in alignment):
        raise LmcError(
            f"{at % 'alignment'} must list weak, strong or both (weak: each epoch's own "
            f"alignment, strong: the final epoch's at every epoch), got {alignment!r}"
        )
    if len(set(alignment)) != len(alignment):
        raise LmcError(f"{at % 'alignment'} lists a connectivity twice: {alignment}")
    settings["alignment"] = [a for a in CONNECTIVITY if a in alignment]
    if "strong" in alignment:
        from lmc.perm.methods import get_method

        canonical = [m for m in methods if get_method(m).canonical]
        if canonical:
            raise LmcError(
                f"{at % 'alignment'}: strong connectivity applies the final epoch's alignment "
                f"to every epoch's B, but {', '.join(canonical)} align(s) the pair's canonical "
                "forms, which change with the epoch; drop strong or those methods"
            )
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


def train_config(
    study: dict[str, Any], seed: int, data: Dataset | None = None, width: int | float | None = None
) -> dict:
    """The config of the run with init and data seed ``seed`` at ``width`` (default: the
    study's first; what :func:`lmc.train.train_run` would train and the run store names);
    ``data`` saves reading the dataset's shapes."""
    from .jobs import model_options

    settings = study[KIND]
    return make_config(
        study["data"]["dataset"],
        study["model"]["name"],
        model_options(study, widths(settings)[0] if width is None else width),
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
    final: Any = None,
) -> tuple[list[dict], dict[str, Any]]:
    """The path rows and the barrier row of one pair at one epoch with one method: B aligned
    onto A by ``method`` at this epoch (weak), or, given ``final`` (an
    :class:`lmc.perm.AlignResult` found between the final models), B with that alignment
    applied (strong), measured on the same grid with the same path settings."""
    from lmc.pair import run_pair
    from lmc.pair.pipeline import evaluation_examples

    model_a = _model_from(config, states[0], device)
    model_b = _model_from(config, states[1], device)
    settings = onset_pair_settings(study, method)
    if final is None:
        result = run_pair(model_a, model_b, data, settings)
        path, info = result.path, result.alignment
    else:  # run_pair's path with the final alignment in place of this epoch's
        x, y = evaluation_examples(data, settings)
        path = evaluate_path(
            model_a,
            model_b,
            x,
            y,
            settings.path,
            state_b=final.apply(model_b.state_dict()),
            bn_inputs=data.x_train,
            task=data.task,
        )
        info = final.info
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
    if info is not None:
        fractions = list(info.get("moved_fraction", {}).values())
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


def final_alignment(
    study: dict[str, Any],
    config: dict[str, Any],
    states: tuple[dict, dict],
    data: Dataset,
    method: str,
    device,
):
    """The alignment of B onto A that ``method`` finds between the final states ``states``
    (an :class:`lmc.perm.AlignResult`, ``None`` for ``none``): the one a weak evaluation of
    those states finds (same settings, same seed), kept to apply at every epoch (strong)."""
    from lmc.pair import align_pair

    model_a = _model_from(config, states[0], device)
    model_b = _model_from(config, states[1], device)
    aligned = align_pair(model_a, model_b, data, onset_pair_settings(study, method))
    if aligned is not None and aligned.models is not None:
        raise LmcError(
            f"{method} aligned the pair's canonical forms: strong connectivity cannot apply its "
            "alignment at other epochs"
        )
    return aligned


def pair_job(
    study: dict[str, Any], pair: int, data: Dataset, width: int | float | None = None
) -> dict[str, Any]:
    """The job of pair ``pair`` at ``width`` (default: the study's first): everything that
    changes its numbers (the two runs' configs, which hold the width, the epochs, the methods,
    the path settings, and the connectivities when they are not weak only: the jobs of a study
    without strong keep their ids)."""
    settings = study[KIND]
    seed_a, seed_b = settings["seed"] + 2 * pair, settings["seed"] + 2 * pair + 1
    job = {
        "type": KIND,
        "pair": pair,
        "seeds": [seed_a, seed_b],
        "run_a": train_config(study, seed_a, data, width),
        "run_b": train_config(study, seed_b, data, width),
        "epochs": settings["epochs"],
        "methods": settings["methods"],
        "split": study["data"]["split"],
        "path": {k: settings[k] for k in ("lambdas", "calibrate", "align_seed", "align_examples")},
    }
    if settings["alignment"] != ["weak"]:
        job["alignment"] = settings["alignment"]
    return job


def _run_pair_job(
    study: dict[str, Any],
    job: dict[str, Any],
    data: Dataset,
    store: RunStore | None,
    device,
    say,
) -> dict[str, Any]:
    """Train the pair's two runs capturing their states, then evaluate every epoch and
    method (and connectivity); returns the job record's results."""
    pair, epochs = job["pair"], job["epochs"]
    alignment = job.get("alignment", ["weak"])
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
    finals = {}
    if "strong" in alignment:
        last = max(epochs)
        for method in job["methods"]:
            if method != "none":
                finals[method] = final_alignment(
                    study, job["run_a"], (states["A"][last], states["B"][last]), data, method,
                    device,
                )  # fmt: skip
    path_rows, barrier_rows = [], []
    for epoch in epochs:
        done = []
        for method in job["methods"]:
            for connectivity in alignment:
                if method == "none" and connectivity == "strong":
                    continue  # the identity: the weak rows are the strong ones
                final = finals[method] if connectivity == "strong" else None
                labels = {"pair": pair, "epoch": epoch, "method": method}
                if "strong" in alignment:
                    labels["connectivity"] = "weak" if final is None else "strong"
                labels.update(seed_a=job["seeds"][0], seed_b=job["seeds"][1])
                rows, row = _evaluate(
                    study,
                    job["run_a"],
                    (states["A"][epoch], states["B"][epoch]),
                    data,
                    labels,
                    method,
                    device,
                    final,
                )
                path_rows += rows
                barrier_rows.append(row)
                name = method if final is None else f"{method} (strong)"
                done.append(f"{name} {row['max_minus_mean_loss']:.3f}")
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
    several = isinstance(settings["width"], list)

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
        cells = [(w, pair) for w in widths(settings) for pair in range(settings["pairs"])]
        jobs = [pair_job(study, pair, data, width) for width, pair in cells]
        ids = [f"{KIND}-{config_hash(job)}" for job in jobs]
        record.running()
        counts = {"total": len(jobs), "reused": 0, "run": 0}
        tables: dict[str, list[dict]] = {"onset": [], "barriers": []}

        def compute(job: dict[str, Any]) -> dict[str, Any]:
            if store is not None:
                store.check_writable()
            return _run_pair_job(study, job, data, store, torch_device, say)

        for (width, _), job, job_id in zip(cells, jobs, ids):
            if several:
                say(f"width {width:g}, pair {job['pair']}")
            result, reused = reuse_or_run(out, job_id, job, partial(compute, job))
            counts["reused" if reused else "run"] += 1
            if reused:
                say(f"pair {job['pair']}: reused ({job_id}.json)")
            for key, file_key in (("paths", "onset"), ("barriers", "barriers")):
                # the width is a label of the table, not of the job's rows (a job is the same
                # at one width or in a list of them)
                tables[file_key] += [{**r, "width": width} if several else r for r in result[key]]
        files = write_tables(out, outputs(study), tables)
        return record.finished(counts, files, job_ids=ids)
