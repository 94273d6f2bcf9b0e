"""Store-backed training: configs, reuse of finished runs, resume, spawning; the one PyTorch
thread count every entry point trains with (:data:`DEFAULT_THREADS`, defined in
:mod:`lmc.config.threads` and re-exported here)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from lmc.config import LmcError, environment_info
from lmc.config.threads import DEFAULT_THREADS, check_threads  # noqa: F401  (its home before)
from lmc.data import TASKS, Dataset, canonical_name, load
from lmc.data import dataset_options as recorded_dataset_options
from lmc.data.text import PATH_OPTIONS, TEXT_DATASETS, absolute_paths, with_recorded_paths
from lmc.models import (
    build,
    check_fits_memory,
    count_parameters,
    has_input_options,
    resolve_options,
)
from lmc.store import Run, RunStore, made_folder, write_json

from .checkpoint import load_checkpoint, remove_checkpoint, save_checkpoint
from .evaluate import evaluate
from .loop import fit
from .settings import TrainSettings
from .tblog import TensorBoardLogger, chain_hooks, check_log_dir, require_tensorboard

#: the tokenizer of a text run (its character vocabulary), saved beside the weights
TOKENIZER_FILE = "tokenizer.json"


@contextmanager
def torch_threads(threads: int | None = None) -> Iterator[int]:
    """Run the block with ``threads`` PyTorch threads (``None``: :data:`DEFAULT_THREADS`),
    restoring the caller's count after; yields the count used."""
    threads = check_threads(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


def make_config(
    dataset: str,
    model: str,
    model_options: dict[str, Any] | None = None,
    dataset_options: dict[str, Any] | None = None,
    *,
    data: Dataset | None = None,
    spawn: dict[str, Any] | None = None,
    **train_settings: Any,
) -> dict[str, Any]:
    """The canonical config of a training run (what is hashed into its folder name).

    The model's options are completed by the registry (``lmc.models.resolve_options``): every
    default filled in, and the data-given ones (input size or channels, ``num_classes``) read
    from the dataset (``data``, or loaded to read its shapes), so the same settings give the
    same config from the CLI, a study or Python. A model too large to train in this machine's
    memory is refused here (:func:`lmc.models.check_fits_memory`), before anything is created.
    ``spawn`` is ``{"parent": <parent config>, "epoch": K}`` for a spawned run.
    """
    options = dict(model_options or {})
    if data is None and not has_input_options(model, options):
        data = load(dataset, **(dataset_options or {}))
    shape = {}
    if data is not None:
        shape = {"input_shape": data.input_shape, "num_classes": data.num_classes,
                 "task": data.task}  # fmt: skip
    options = resolve_options(model, options, **shape)
    check_fits_memory(model, options)
    settings = TrainSettings.from_dict(train_settings)
    train = settings.to_dict()
    if spawn is not None:
        train["spawn"] = spawn
    return {
        "kind": "train",
        "dataset": canonical_name(dataset),
        "dataset_options": recorded_dataset_options(dataset, dataset_options),
        "model": model,
        "model_options": options,
        "train": train,
    }


def settings_of(config: dict[str, Any]) -> TrainSettings:
    """The training settings of a run config (its ``"train"`` table), leaving out the ``spawn``
    entry of a spawned run, which names its parent and epoch rather than a setting."""
    train = {k: v for k, v in config["train"].items() if k != "spawn"}
    return TrainSettings.from_dict(train)


def spawn_config(parent: Run | dict[str, Any], epoch: int, data_seed: int) -> dict[str, Any]:
    """The config of a run that copies ``parent``'s state after ``epoch`` epochs and continues
    with ``data_seed`` (Frankle et al.'s spawning). Everything else is the parent's recipe."""
    parent_config = parent.config if isinstance(parent, Run) else parent
    if parent_config.get("kind") != "train" or "spawn" in parent_config["train"]:
        raise LmcError("spawn from a plain training run (not an aligned or spawned one)")
    total = parent_config["train"]["epochs"]
    if not 0 <= epoch <= total:
        raise LmcError(f"--spawn-epoch must be between 0 and the parent's {total} epochs")
    train = {k: v for k, v in parent_config["train"].items()}
    train["data_seed"] = data_seed
    return make_config(
        parent_config["dataset"],
        parent_config["model"],
        parent_config["model_options"],
        parent_config["dataset_options"],
        spawn={"parent": parent_config, "epoch": epoch},
        **train,
    )


def train_run(
    config: dict[str, Any],
    *,
    store: RunStore,
    device: str | torch.device = "cpu",
    quiet: bool = True,
    data_dir: str | None = None,
    download: bool = False,
    data: Dataset | None = None,
    log_dir: str | os.PathLike | None = None,
) -> tuple[Run, bool]:
    """Train the run ``config`` into ``store``; return ``(run, reused)``.

    ``log_dir``: when given, TensorBoard scalars of every epoch trained by this call
    (:class:`lmc.train.tblog.TensorBoardLogger`, steps = 1-based epochs) go to
    ``log_dir / <run folder name>``, written after each epoch's checkpoint; the writer is closed
    at the end, also on error. A reused run writes no events, and a resumed one logs only the
    epochs it trains. Logging is not part of the config: the run folder is the same with or
    without it. A missing ``tensorboard`` package or a ``log_dir`` that is a file is a one-line
    ``LmcError`` before anything is created.

    A finished run is reused as it is, once every file has been checked against its
    manifest. A damaged one (a file cut short, changed, or a config that no longer hashes to
    its folder) is said so on stderr, one line naming the file, and trained again in its
    folder. An interrupted one resumes from its last per-epoch checkpoint, ending
    bit-identical (on CPU) to an uninterrupted run; a checkpoint that is not whole is ignored
    with a warning (training starts from scratch). What a killed writer left in the store
    (stale temporary folders, :meth:`lmc.store.RunStore.tidy`) is tidied first.

    Batches: each epoch is ``n // batch_size`` steps of ``batch_size`` examples drawn without
    replacement from the ``n`` training examples (the last partial batch is dropped); a
    ``batch_size`` above ``n`` is one step per epoch on all ``n`` (full batch), never zero
    steps. Threads: training runs with the caller's PyTorch thread count; ``lmc train`` and
    every sweep job set it to :data:`DEFAULT_THREADS` (wrap the call in
    :func:`torch_threads` to get their bits from Python).
    """
    found = store.find_or_reopen(config, "training")
    if found is not None:
        remove_checkpoint(found.path)  # left by a kill between the finish and its cleanup
        return found, True
    if log_dir is not None:
        require_tensorboard()
        log_dir = check_log_dir(check_log_dir(log_dir) / store.path_for(config).name)
    store.check_writable()  # before the data is loaded, not after the training
    device = torch.device(device)
    if data is None:
        data = load(
            config["dataset"],
            data_dir=data_dir,
            device=device,
            download=download,
            **config.get("dataset_options", {}),
        )
    if len(data.x_train) == 0:  # fit would take zero steps
        raise LmcError(f"the training split of {config['dataset']} is empty: nothing to train on")
    run_dir = store.path_for(config)
    # a failure before the first whole checkpoint (a full disk) leaves no run folder behind
    with made_folder(run_dir, keep=lambda path: load_checkpoint(path) is not None):
        return _train_into(run_dir, config, store, data, device, quiet, log_dir), False


def _train_into(
    run_dir: Path,
    config: dict[str, Any],
    store: RunStore,
    data: Dataset,
    device,
    quiet: bool,
    log_dir: Path | None = None,
) -> Run:
    """Train ``config`` in its folder ``run_dir`` (resuming a checkpoint there); save it.
    ``log_dir``: this run's TensorBoard folder, or ``None`` for no logging."""
    settings = settings_of(config)
    write_json(run_dir / "config.json", config)

    model = build(config["model"], seed=settings.init_seed, **config["model_options"])
    checkpoint = load_checkpoint(run_dir, epochs=settings.epochs)
    start_epoch, optimizer_state, history = 0, None, []
    spawn = config["train"].get("spawn")
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model_state"])
        start_epoch = checkpoint["epoch"]
        optimizer_state = checkpoint["optimizer_state"]
        history = checkpoint["history"]
    elif spawn is not None:
        start_epoch, optimizer_state, history = _trunk(spawn, model, data, device, quiet)

    def on_epoch_end(epoch, model, optimizer, history):
        save_checkpoint(run_dir, epoch, model, optimizer, history)

    started = time.perf_counter()
    logger = TensorBoardLogger(log_dir) if log_dir is not None else None
    try:
        history = fit(
            model,
            data,
            settings,
            device=device,
            quiet=quiet,
            start_epoch=start_epoch,
            optimizer_state=optimizer_state,
            history=history,
            on_epoch_end=chain_hooks(on_epoch_end, logger),  # checkpoint first, then log
        )
    finally:
        if logger is not None:
            logger.close()
    metrics = final_metrics(
        model,
        data,
        history,
        seconds=time.perf_counter() - started,
        device=device,
        resumed_from_epoch=start_epoch if checkpoint is not None else None,
    )
    paths = data_paths(config)
    if paths:  # where the data were read: the config keeps the paths as given
        metrics["data_paths"] = paths
    tokenizer = getattr(data, "tokenizer", None)  # a text run keeps what reads its text
    extra = {TOKENIZER_FILE: json.loads(tokenizer.to_json())} if tokenizer is not None else None
    run = store.save(config, model.state_dict(), metrics, extra_json=extra)
    remove_checkpoint(run_dir)
    return run


def data_paths(config: dict[str, Any]) -> dict[str, str]:
    """The absolute paths of the files and folders ``config``'s dataset options name (a text
    file's ``path``, a ``tokenizer`` folder; :func:`lmc.data.text.absolute_paths`), resolved
    against the current folder: what a run records as ``data_paths`` in its metrics. ``{}``
    for a dataset that names none."""
    if config.get("dataset") not in TEXT_DATASETS:  # configs hold canonical names
        return {}
    return absolute_paths(config.get("dataset_options") or {})


def run_dataset_options(run: Run | dict[str, Any]) -> dict[str, Any]:
    """The dataset options to read ``run``'s data with: its config's ``dataset_options``, each
    path given relative replaced by the absolute one recorded when it was trained
    (``metrics["data_paths"]``) while that exists (:func:`lmc.data.text.with_recorded_paths`),
    so a run is evaluated from any folder. A config (no metrics) gives its options as they
    are."""
    if not isinstance(run, Run):
        return dict(run.get("dataset_options") or {})
    options = dict(run.config.get("dataset_options") or {})
    if run.config.get("dataset") not in TEXT_DATASETS:
        return options
    return with_recorded_paths(options, run.metrics.get("data_paths"))


def load_run_data(
    run: Run | dict[str, Any],
    *,
    data_dir: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    download: bool = False,
) -> Dataset:
    """The dataset ``run`` (a :class:`lmc.store.Run`, or a run's config) was trained on, read
    with :func:`run_dataset_options`. Errors name the files and folders as the run's config
    gives them (as the user typed them), also where they were read at their recorded place."""
    config = run.config if isinstance(run, Run) else run
    given = dict(config.get("dataset_options") or {})
    options = run_dataset_options(run)
    try:
        data = load(
            config["dataset"], data_dir=data_dir, device=device, download=download, **options
        )
    except LmcError as exc:
        moved = sorted(
            (k for k in PATH_OPTIONS if options.get(k) != given.get(k)),
            key=lambda k: -len(str(options[k])),  # the longer first: one may hold the other
        )
        if not moved:
            raise
        message = str(exc)
        for key in moved:
            message = message.replace(str(options[key]), str(given[key]))
        raise LmcError(message) from exc
    return with_run_task(data, run) if isinstance(run, Run) else data


def with_run_task(data: Dataset, run: Run) -> Dataset:
    """``data`` carrying the task ``run`` recorded (:attr:`lmc.store.Run.task`), so that what
    evaluates the run asks the run's own task: ``data`` itself when it already carries that
    task (every run of a zoo dataset), else a copy with ``task`` replaced. ``LmcError`` when
    the recorded task is not registered in this process (:func:`lmc.data.register_task`)."""
    name = run.task
    if name == data.task:
        return data
    if name not in TASKS:
        raise LmcError(
            f"run {run.name} was trained for the task {name!r}, which is not registered in "
            f"this process (known: {', '.join(sorted(TASKS))}): register it "
            "(lmc.data.register_task) before evaluating the run"
        )
    return dataclasses.replace(data, task=name)


def final_metrics(
    model: torch.nn.Module,
    data: Dataset,
    history: list[dict],
    *,
    seconds: float,
    device: str | torch.device,
    resumed_from_epoch: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The ``metrics.json`` of a finished training run: the per-epoch ``history``, the final
    train and test loss (nats) and accuracy (fraction; ``None`` for a task without one), the
    parameter count, the epoch it resumed from (``None``), the wall time in seconds, the
    environment, ``decay_budget`` (Σ_t lr_t·wd over every step: the last epoch's, ``None`` if
    its history lacks it) and ``task``, the name of the data's task (:mod:`lmc.data.tasks`:
    what :attr:`lmc.store.Run.task` reads, and what the run is evaluated with; recorded here,
    not in the hashed config, so run names are unchanged); ``extra`` keys are added (e.g. who
    trained it)."""
    train_eval = evaluate(model, data.x_train, data.y_train, task=data.task)
    test_eval = evaluate(model, data.x_test, data.y_test, task=data.task)
    return {
        "history": history,
        "final_train_loss": train_eval["loss"],
        "final_train_accuracy": train_eval["accuracy"],
        "final_test_loss": test_eval["loss"],
        "final_test_accuracy": test_eval["accuracy"],
        "parameters": count_parameters(model),
        "resumed_from_epoch": resumed_from_epoch,
        "wall_seconds": seconds,
        "environment": environment_info(device),
        "decay_budget": history[-1].get("decay_budget") if history else None,
        "task": data.task_spec.name,
        **extra,
    }


def _trunk(spawn: dict, model, data: Dataset, device, quiet: bool):
    """Re-create the parent's state after ``spawn['epoch']`` epochs (deterministic), in memory."""
    parent = spawn["parent"]
    parent_settings = settings_of(parent)
    captured: dict[str, Any] = {}

    def keep(epoch, model, optimizer, history):
        captured["optimizer_state"] = optimizer.state_dict()

    history = fit(
        model,
        data,
        parent_settings,
        device=device,
        quiet=quiet,
        stop_epoch=spawn["epoch"],
        on_epoch_end=keep,
    )
    return spawn["epoch"], captured.get("optimizer_state"), history
