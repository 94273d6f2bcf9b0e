"""Train one model into the run store.

The run folder is named by a hash of everything that changes the weights (dataset, model and
its options, the training recipe, both seeds). A finished run with the same config is reused;
an interrupted one resumes from its last epoch. The run folder is the last line on stdout.
With --log tensorboard each trained epoch's scalars go to LOG_DIR/<run folder name> (logging
does not change the run's config or folder).

Each epoch is N // --batch-size steps over the N training examples (the last partial batch is
dropped); a --batch-size above N is one full-batch step per epoch, never zero steps (a note on
stderr says so). Training uses --threads PyTorch threads, default 1 as in every sweep job, so
a run's weights are bit for bit what `lmc sweep` makes for the same config.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lmc.config import LmcError
from lmc.data import ALL_DATASETS, TEXT_DATASETS, canonical_name
from lmc.data.text import DEFAULT_CONTEXT
from lmc.models import MODELS, get_model
from lmc.models.registry import flag_options, option_summary, width_summary
from lmc.store import RunStore, default_runs_dir
from lmc.train import (
    OPTIMIZERS,
    PRECISIONS,
    SCHEDULES,
    TrainSettings,
    make_config,
    spawn_config,
    train_run,
)
from lmc.train.runs import DEFAULT_THREADS, check_threads, torch_threads

from .common import (
    add_data_options,
    add_device_option,
    add_log_options,
    add_output_options,
    add_runs_dir_option,
    dataset_for_config,
    device_from,
    emit_json,
    log_dir_from,
    resolve_run,
)

DEFAULTS = TrainSettings()
MODEL_GROUP = "model options (from each model's registry entry)"


class _DefaultModel(str):
    """``--model``'s default, told apart from a ``--model`` given (for the help)."""


DEFAULT_MODEL = _DefaultModel("mlp")


def _shown_default(field: str, help: str, spec: str = "") -> dict[str, Any]:
    """``default`` and ``help`` of a flag whose default is the training default
    ``DEFAULTS.<field>``: its help ends with that value (formatted by ``spec``), read from the
    same field, so the two cannot disagree."""
    value = getattr(DEFAULTS, field)
    return {"default": value, "help": f"{help} (default: {value:{spec}})"}


def _dest(option: str) -> str:
    return f"model_option__{option}"


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per model option the registry declares (:func:`lmc.models.registry.
    flag_options`), its help saying which models take it, with what meaning and default.
    Every flag defaults to ``None`` (not given: the registry's default)."""
    options = flag_options()
    group = parser.add_argument_group(
        MODEL_GROUP,
        "Each flag says which models take it, with what meaning and default; a flag the model "
        "does not take is an error. lmc train --model NAME --help shows NAME's alone.",
    )
    for name, takers in options.items():
        option = takers[0][1]
        flag = option.flag_for(name)
        kwargs: dict = {"dest": _dest(name), "default": None}
        if option.type is bool:
            switch = flag == f"--no-{name.replace('_', '-')}"
            kwargs["action"] = "store_const" if switch else argparse.BooleanOptionalAction
            if switch:
                kwargs["const"] = False
        else:
            kwargs["type"] = option.type
            choices = [c for _, o in takers for c in (o.choices or ())]
            if choices:
                kwargs["choices"] = list(dict.fromkeys(choices))
            else:
                kwargs["metavar"] = name.upper()
        try:
            group.add_argument(flag, help=option_summary(takers).replace("%", "%%"), **kwargs)
        except argparse.ArgumentError as exc:
            raise LmcError(
                f"model option {name!r} of {', '.join(m for m, _ in takers)} has flag {flag}, "
                "which lmc train already uses: declare another (ModelOption(flag=...))"
            ) from exc


class ModelHelp(argparse.Action):
    """``lmc train``'s ``-h/--help`` (:data:`HELP_ACTION`): after ``--model NAME``, the model
    options shown are NAME's alone, each with NAME's own meaning and default."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help=None):  # fmt: skip
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        model = getattr(namespace, "model", None)
        if isinstance(model, str) and not isinstance(model, _DefaultModel) and model in MODELS:
            _focus_help(parser, model)
        parser.print_help()
        parser.exit()


#: the help action ``lmc.cli.main`` gives this verb's parser
HELP_ACTION = ModelHelp


def _focus_help(parser: argparse.ArgumentParser, model: str) -> None:
    entry = get_model(model)
    for group in parser._action_groups:
        if group.title == MODEL_GROUP:
            group.title = f"options of model {model} (lmc train --help lists every model's)"
            group.description = entry.description or None
    for action in parser._actions:
        if not action.dest.startswith("model_option__"):
            continue
        name = action.dest.removeprefix("model_option__")
        option = entry.declarations.get(name)
        if option is None:
            action.help = argparse.SUPPRESS
        else:
            action.help = f"{option.help} (default {option.shown_default})".replace("%", "%%")


# TrainSettings.augment None: the dataset's default (random crop + flip on CIFAR only)
AUGMENT_DEFAULT = "(default: on for CIFAR, off otherwise)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("data and model")
    model.add_argument(
        "--dataset",
        default="digits",
        choices=ALL_DATASETS,
        help="dataset (text ones: token windows with next-token targets, for --model gpt)",
    )
    model.add_argument(
        "--data",
        default=None,
        metavar="FILE.txt",
        help="train on a UTF-8 text file (dataset 'text'; split by position into train / "
        "validation / test)",
    )
    text = parser.add_argument_group("text data (--data, --dataset fortunes|tiny-shakespeare)")
    text.add_argument(
        "--context", type=int, default=None, metavar="T",
        help=f"tokens per window (the GPT's context; default {DEFAULT_CONTEXT})",
    )  # fmt: skip
    text.add_argument(
        "--tokenizer", default=None, metavar="char|bytes|FOLDER",
        help="characters (vocabulary from the training split, the default), bytes, or a "
        "local Hugging Face tokenizer folder (needs lmc[hf])",
    )  # fmt: skip
    text.add_argument(
        "--stride", type=int, default=None, metavar="S",
        help="tokens between window starts (default: the context, windows do not overlap)",
    )  # fmt: skip
    model.add_argument(
        "--train-size",
        type=int,
        default=None,
        metavar="N",
        help="train on a random subset of N training examples (seeded by --subset-seed; "
        "the test split stays whole; default: all)",
    )
    model.add_argument(
        "--subset-seed",
        type=int,
        default=None,
        metavar="S",
        help="seed of --train-size's draw (0 when not given)",
    )
    model.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        choices=list(MODELS),
        help="architecture (its options are below; lmc train --model NAME --help shows only "
        "NAME's)",
    )
    model.add_argument(
        "--width",
        type=float,
        default=None,
        help=width_summary(),  # what width means, from the model registry
    )
    add_model_flags(parser)
    recipe = parser.add_argument_group("training recipe")
    recipe.add_argument("--epochs", type=int, default=DEFAULTS.epochs, help="epochs")
    recipe.add_argument(
        "--batch-size",
        type=int,
        **_shown_default(
            "batch_size",
            "examples per step; each epoch is N // B steps over the N training examples (the "
            "last partial batch dropped), and a batch size above N is one full-batch step per "
            "epoch",
        ),
    )
    recipe.add_argument(
        "--optimizer",
        default=DEFAULTS.optimizer,
        choices=OPTIMIZERS,
        help="sgd (momentum, coupled weight decay), adam, adamw (decoupled)",
    )
    recipe.add_argument("--lr", type=float, default=DEFAULTS.lr, help="peak learning rate")
    recipe.add_argument(
        "--momentum", type=float, default=DEFAULTS.momentum, help="SGD momentum (Adam beta1)"
    )
    recipe.add_argument(
        "--weight-decay",
        type=float,
        default=DEFAULTS.weight_decay,
        help="weight decay (the width paper: 3e-3 default, 1e-4 ablation)",
    )
    recipe.add_argument(
        "--schedule", default=DEFAULTS.schedule, choices=SCHEDULES, help="learning-rate schedule"
    )
    recipe.add_argument(
        "--warmup-epochs",
        type=float,
        **_shown_default("warmup_epochs", "linear warm-up epochs (cosine/constant)", "g"),
    )
    recipe.add_argument(
        "--label-smoothing",
        type=float,
        **_shown_default("label_smoothing", "label smoothing (0 = off)", "g"),
    )
    recipe.add_argument(
        "--precision",
        choices=PRECISIONS,
        **_shown_default(
            "precision",
            "auto: bf16 where bfloat16 is native on --device and measured faster than float32 "
            "(a short timing at start-up, kept in ~/.cache/lmc/precision.json), else fp32; the "
            "run's config records which, so an auto run that trains in fp32 is the fp32 run. "
            "fp32: float32. bf16: mixed precision (bfloat16 forward under autocast, float32 "
            "weights; evaluation stays float32); where the device only emulates bfloat16 (a CPU "
            "without AVX512-BF16 or AMX) it warns before training, as it can be hundreds of "
            "times slower",
        ),
    )
    aug = recipe.add_mutually_exclusive_group()
    aug.add_argument(
        "--augment",
        dest="augment",
        action="store_true",
        default=None,
        help=f"random crop + flip {AUGMENT_DEFAULT}",
    )
    aug.add_argument(
        "--no-augment",
        dest="augment",
        action="store_false",
        help=f"no augmentation {AUGMENT_DEFAULT}",
    )

    seeds = parser.add_argument_group("seeds and spawning")
    seeds.add_argument("--seed", type=int, **_shown_default("init_seed", "sets both seeds below"))
    seeds.add_argument(
        "--init-seed", type=int, default=None, help="seed of the initial weights (default: --seed)"
    )
    seeds.add_argument(
        "--data-seed",
        type=int,
        default=None,
        help="seed of the data order and augmentation (default: --seed)",
    )
    seeds.add_argument(
        "--spawn-from",
        default=None,
        metavar="RUN",
        help="spawn: start from this run's state (a run folder, or its name in --runs-dir) "
        "after --spawn-epoch epochs "
        "(re-created deterministically) and continue with --data-seed; "
        "the recipe is the parent's",
    )
    seeds.add_argument(
        "--spawn-epoch",
        type=int,
        default=None,
        metavar="K",
        help="epoch of the parent to spawn from",
    )

    add_runs_dir_option(parser)
    add_log_options(parser, "the run store's tb folder (RUNS_DIR/tb)")
    add_data_options(parser)
    add_device_option(parser)
    parser.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_THREADS,
        metavar="N",
        help=f"PyTorch CPU threads (default: {DEFAULT_THREADS}, as every sweep job, so the run's "
        "weights are bit for bit those `lmc sweep` makes for the same config; more threads are "
        "faster on wide models but change float rounding, and the run's folder does not record "
        "them)",
    )
    add_output_options(parser)


def model_options_from_args(args: argparse.Namespace) -> dict:
    """The model options the user gave (``--width`` and the generated flags); the registry
    fills in the rest (one place). A flag of an option the model does not take is an error."""
    entry = get_model(args.model)
    given = {}
    if args.width is not None:
        given["width"] = args.width
    for name, takers in flag_options().items():
        value = getattr(args, _dest(name), None)
        if value is None:
            continue
        if name not in entry.option_names:
            raise LmcError(f"{takers[0][1].flag_for(name)} is not an option of {args.model}")
        given[name] = value
    return given


def config_from_args(args: argparse.Namespace, data=None) -> dict:
    """The run's config from the flags (``data``: the loaded dataset, for its shapes)."""
    init_seed = args.seed if args.init_seed is None else args.init_seed
    data_seed = args.seed if args.data_seed is None else args.data_seed
    if args.spawn_from is not None:
        if args.spawn_epoch is None:
            raise LmcError("--spawn-from needs --spawn-epoch K")
        parent = resolve_run(args.spawn_from, args.runs_dir)  # a folder or a name in the store
        return spawn_config(parent, args.spawn_epoch, data_seed)
    if args.spawn_epoch is not None:
        raise LmcError("--spawn-epoch needs --spawn-from RUN")
    recipe = dict(
        epochs=args.epochs,
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        lr=args.lr,
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        schedule=args.schedule,
        warmup_epochs=args.warmup_epochs,
        label_smoothing=args.label_smoothing,
        augment=args.augment,
        init_seed=init_seed,
        data_seed=data_seed,
        precision=TrainSettings(precision=args.precision).resolved(device_from(args)).precision,
    )
    options = model_options_from_args(args)
    return make_config(
        args.dataset, str(args.model), options, dataset_options_from_args(args), data=data, **recipe
    )


def dataset_options_from_args(args: argparse.Namespace) -> dict:
    """``--train-size`` / ``--subset-seed`` (and, for text, ``--data``, ``--context``,
    ``--tokenizer``, ``--stride``) as dataset options (``{}`` when none is given)."""
    options = {}
    if args.data is not None:
        if args.dataset not in ("digits", "text"):  # digits: the default, not a choice
            raise LmcError(f"--data reads a text file; drop --dataset {args.dataset}")
        options["path"] = args.data
    text = {"context": args.context, "tokenizer": args.tokenizer, "stride": args.stride}
    given = {k: v for k, v in text.items() if v is not None}
    dataset = "text" if args.data is not None else args.dataset
    if given and canonical_name(dataset) not in TEXT_DATASETS:
        flag = "--" + next(iter(given))
        raise LmcError(f"{flag} is for text data (--data FILE.txt or a text --dataset)")
    options.update(given)
    if args.train_size is not None:
        options["train_size"] = args.train_size
    if args.subset_seed is not None:
        options["subset_seed"] = args.subset_seed
    return options


def note_full_batch(config: dict, data, quiet: bool) -> None:
    """One line on stderr when the batch size exceeds the training split (each epoch is then
    one full-batch step; see lmc.train.train_run)."""
    batch_size, n = config["train"]["batch_size"], len(data.x_train)
    if batch_size > n and not quiet:
        print(
            f"lmc train: note: --batch-size {batch_size} is more than the {n} training "
            f"examples of {config['dataset']}: each epoch is one full-batch step on all {n}",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    threads = check_threads(args.threads)
    options = dataset_options_from_args(args)  # checked before anything is read
    if args.data is not None:
        args.dataset = "text"
    runs_dir = Path(args.runs_dir) if args.runs_dir is not None else default_runs_dir()
    log_dir = log_dir_from(args, runs_dir / "tb")
    device = device_from(args)
    data = None
    if args.spawn_from is None:
        data = dataset_for_config(
            {"dataset": args.dataset, "dataset_options": options},
            args,
            device,
        )
    config = config_from_args(args, data)
    data = data or dataset_for_config(config, args, device)
    store = RunStore(runs_dir)
    note_full_batch(config, data, args.quiet)
    with torch_threads(threads):  # the sweep's count: the same bits from either command
        run_result, reused = train_run(
            config, store=store, device=device, quiet=args.quiet, data=data, log_dir=log_dir
        )
    metrics = run_result.metrics
    if args.json:
        emit_json(
            {
                "run_dir": str(run_result.path),
                "reused": reused,
                "config": config,
                "final_test_accuracy": metrics["final_test_accuracy"],
                "final_test_loss": metrics["final_test_loss"],
                "final_train_accuracy": metrics.get("final_train_accuracy"),
                "final_train_loss": metrics.get("final_train_loss"),
                "parameters": metrics.get("parameters"),
                "wall_seconds": metrics.get("wall_seconds"),
            }
        )
        return 0
    if reused:
        print(f"reusing the finished run with this config (delete {run_result.path} to retrain)")
    print(
        f"test accuracy {metrics['final_test_accuracy']:.4f}, "
        f"test loss {metrics['final_test_loss']:.4f}"
    )
    print(run_result.path)
    return 0
