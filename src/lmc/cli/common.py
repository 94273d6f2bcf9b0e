"""Options and helpers shared by the verbs of the ``lmc`` command.

Building options imports neither torch nor the library (``lmc VERB --help`` stays light): the
helpers that load runs, data or models import what they need when called."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmc.config import LmcError

if TYPE_CHECKING:
    import torch


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default="auto",
        help="where to compute: cpu, cuda, cuda:N, mps, or auto (a GPU if present)",
    )


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout (keys in README)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder holding dataset files (then $LMC_DATA, ~/.cache/lmc, system locations)",
    )
    parser.add_argument(
        "--download", action="store_true", help="download the dataset if missing (needs internet)"
    )


def add_runs_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs-dir", default=None, help="the run store (default: $LMC_RUNS or ./runs)"
    )


#: what ``--log`` writes: nothing, or TensorBoard events
LOGS = ("none", "tensorboard")


def add_log_options(parser: argparse.ArgumentParser, default_dir: str) -> None:
    """``--log {none,tensorboard}`` and ``--log-dir DIR`` (shared with ``lmc sweep``)."""
    group = parser.add_argument_group("logging")
    group.add_argument(
        "--log",
        default="none",
        choices=LOGS,
        help="tensorboard: write each trained epoch's scalars (train/loss, test/accuracy, "
        "train/lr, ...) as TensorBoard events into LOG_DIR/<run folder name>; a reused run "
        "writes none. Needs the tensorboard package (pip install 'lmc[tensorboard]')",
    )
    group.add_argument(
        "--log-dir",
        default=None,
        metavar="LOG_DIR",
        help=f"where --log tensorboard writes (default: {default_dir}); "
        "view with: tensorboard --logdir LOG_DIR",
    )


def log_dir_from(args: argparse.Namespace, default: Path) -> Path | None:
    """The TensorBoard folder the flags ask for (``None`` without ``--log tensorboard``),
    checked before any work: the package is installed and the folder is not a file."""
    if getattr(args, "log", "none") == "none":
        if getattr(args, "log_dir", None) is not None:
            raise LmcError("--log-dir needs --log tensorboard")
        return None
    from lmc.train.tblog import check_log_dir, require_tensorboard

    require_tensorboard()
    return check_log_dir(args.log_dir if args.log_dir is not None else default)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options every verb that measures stored runs ends with: --runs-dir, --data-dir and
    --download, --device, then --json and --quiet."""
    add_runs_dir_option(parser)
    add_data_options(parser)
    add_device_option(parser)
    add_output_options(parser)


def device_from(args: argparse.Namespace) -> torch.device:
    from lmc.config import resolve_device

    return resolve_device(getattr(args, "device", "auto"))


def emit_json(obj: Any) -> None:
    """Print ``obj`` as one JSON object on stdout (non-finite floats become null)."""
    from lmc.store import jsonable

    sys.stdout.write(json.dumps(jsonable(obj), sort_keys=True) + "\n")
    sys.stdout.flush()


def parse_float_list(text: str, what: str) -> list[float]:
    """The numbers of a comma-separated list (``"0.25,0.5"``; a trailing comma is allowed).
    A list with no number in it (``""``, ``","``) or an item that is not a number is an
    ``LmcError`` naming ``what``."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise LmcError(f"{what} must be comma-separated numbers, got {text!r}") from exc
    if not values:
        raise LmcError(f"{what} is empty: give one or more comma-separated numbers")
    return values


def number_list_type(what: str, *, count: bool = False):
    """An argparse ``type`` that checks a comma-separated list option at parse time, so an
    empty or malformed value (``--lambdas ""``) is a one-line usage error (exit 2) before any
    work; it returns the text unchanged (the verb parses it). ``count``: a whole number alone
    (a number of evenly spaced points) is allowed too."""

    alone = " (or a whole number of points)" if count else ""

    def check(text: str) -> str:
        if count and text.strip().isdigit():
            return text
        try:
            parse_float_list(text, what)
        except LmcError:
            if not text.replace(",", "").strip():
                message = f"empty: give one or more comma-separated numbers{alone}"
            else:
                message = f"{text!r} is not a comma-separated list of numbers{alone}"
            raise argparse.ArgumentTypeError(message) from None
        return text

    check.__name__ = what  # argparse names the type in some messages
    return check


def dataset_for_config(run: Any, args: argparse.Namespace, device: torch.device):
    """Load the dataset a run (a :class:`lmc.store.Run`, or a run's config) was trained on: its
    ``dataset`` and ``dataset_options``, a path given relative read where the run was trained
    (:func:`lmc.train.runs.load_run_data`)."""
    from lmc.train.runs import load_run_data

    return load_run_data(
        run,
        data_dir=getattr(args, "data_dir", None),
        device=device,
        download=getattr(args, "download", False),
    )


def resolve_run(text: str, runs_dir: str | None):
    """A run given as a folder path, or as a folder name inside the run store."""
    from pathlib import Path

    from lmc.store import default_runs_dir, load_run

    path = Path(text)
    if not path.is_dir():
        store = Path(runs_dir) if runs_dir is not None else default_runs_dir()
        if (store / text).is_dir():
            path = store / text
        elif path.exists():
            raise LmcError(
                f"{text} is a file, not a run: give a run folder (lmc train prints it) or its "
                "name in the run store"
            )
    return load_run(path)


def check_same_data(run_a, run_b, verb: str) -> None:
    """One-line ``LmcError`` naming the first difference of the two runs' datasets
    (:func:`lmc.pair.aligned.check_same_data`)."""
    from lmc.pair.aligned import check_same_data as check

    check(run_a, run_b, verb)


def load_pair(args: argparse.Namespace, verb: str):
    """``(run_a, run_b, model_a, model_b, data)`` for the verbs that take RUN_A RUN_B: both runs
    resolved, their datasets and architectures checked, the models built on ``--device`` and
    the dataset loaded there."""
    from lmc.pair.merged import build_run_models

    run_a, run_b = resolve_run(args.run_a, args.runs_dir), resolve_run(args.run_b, args.runs_dir)
    check_same_data(run_a, run_b, verb)
    device = device_from(args)
    # a canonical-form run (lmc merge beyond permutations) loads into its canonical skeleton,
    # and a plain run beside one is put in its canonical form (the same function)
    model_a, model_b = build_run_models([run_a, run_b], device)
    if not getattr(args, "widen", False):  # --widen: widths may differ (lmc.perm.widen)
        check_pair_architecture(model_a, model_b, ("RUN_A", "RUN_B"), args)
    data = dataset_for_config(run_a, args, device)
    return run_a, run_b, model_a, model_b, data


#: the Hugging Face model types :mod:`lmc.perm.widen` writes into a wider copy
WIDENABLE_HF_TYPES = ("gpt2", "vit")


def _widenable(model) -> bool:
    """Whether ``--widen`` could pair ``model`` with a wider one (zoo gpt/vit, HF GPT-2/ViT)."""
    from lmc.perm.symmetries.canonical_form import unwrap
    from lmc.perm.symmetries.widening import widenable_models

    inner, prefix = unwrap(model)
    spec = getattr(inner, "lmc_spec", None) or getattr(model, "lmc_spec", None)
    if isinstance(spec, dict) and spec.get("name") in widenable_models():
        return True
    config = getattr(inner, "config", None) if prefix else None
    return getattr(config, "model_type", None) in WIDENABLE_HF_TYPES


def check_pair_architecture(model_a, model_b, names: tuple[str, str], args) -> None:
    """:func:`lmc.models.check_same_architecture` for a verb's pair; when the verb takes
    ``--widen`` and the models are widenable (:func:`_widenable`) the refusal mentions it."""
    from lmc.models import check_same_architecture

    try:
        check_same_architecture(model_a, model_b, names=names)
    except LmcError as exc:
        if hasattr(args, "widen") and _widenable(model_a) and _widenable(model_b):
            raise LmcError(
                f"{exc} (if they differ only in width, add --widen to write the narrower into "
                "the wider one's architecture)"
            ) from exc
        raise


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN_A and RUN_B (runs, or weight files with --model-factory/--hf-model and --data:
    :func:`add_model_options`), then --align, --align-examples, --seed and every alignment
    method's settings (``--<method>-<setting>``, :mod:`lmc.cli.method_flags`), as
    lmc.pair.PairSettings reads them."""
    from lmc.perm.methods import method_names

    from .method_flags import add_method_options

    methods = method_names()

    parser.add_argument(
        "run_a",
        metavar="RUN_A",
        help="run folder (or its name in --runs-dir) of model A, λ = 0; with --model-factory "
        "or --hf-model: A's weight file",
    )
    parser.add_argument(
        "run_b",
        metavar="RUN_B",
        help="run folder (or its name in --runs-dir) of model B, λ = 1; with --model-factory "
        "or --hf-model: B's weight file",
    )
    add_model_options(parser)

    parser.add_argument(
        "--align",
        default="none",
        choices=methods,
        metavar="METHOD",
        help="align B to A first: " + ", ".join(methods) + " (default none); each method's "
        "settings are the --METHOD-SETTING flags below",
    )
    parser.add_argument(
        "--align-examples",
        type=int,
        default=2000,
        metavar="N",
        help="training examples (drawn at random with --seed) that activation matching and "
        "STE read; 0 = the whole training split (default 2000, as in sweeps)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the alignment, its examples, BatchNorm-reset batches and random "
        "directions (default 0)",
    )
    parser.add_argument(
        "--widen",
        action="store_true",
        help="the runs may differ in width (pre-LN transformers: zoo gpt and vit, Hugging Face "
        "GPT-2 and ViT): the narrower is written exactly into "
        "the wider one's architecture (its stream, heads and MLP padded) and the pair is "
        "measured in the canonical form; use with --align orthogonal, orthogonal-activation or "
        "learned (two Hugging Face models of different widths: --hf-model-b)",
    )
    parser.add_argument(
        "--hf-model-b",
        default=None,
        metavar="FOLDER",
        help="with --hf-model: the Hugging Face folder whose architecture B's weights load into "
        "(default: --hf-model's), e.g. a wider GPT-2 with --widen",
    )
    add_method_options(parser)


def pair_alignment(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of :class:`lmc.pair.PairSettings` that :func:`add_pair_arguments`' flags
    give (the alignment, its examples and settings, the seed, the split, --widen), shared by
    every pair verb."""
    from .method_flags import given_settings

    return {
        "align": args.align,
        "align_examples": args.align_examples or None,
        "align_options": given_settings(args, args.align),
        "seed": args.seed,
        "split": args.split,
        "widen": args.widen,
    }


def add_lambdas_option(
    parser: argparse.ArgumentParser, default: str, help: str, *, count: bool = False
) -> None:
    """The λ option, named --lambdas in every verb (--lam is an alias): a comma-separated list
    of λ (``count``: or a whole number of evenly spaced points), checked when parsed (an empty
    list is a usage error)."""
    parser.add_argument(
        "--lambdas",
        "--lam",
        dest="lambdas",
        default=default,
        type=number_list_type("--lambdas", count=count),
        help=help,
    )


# ---------------------------------------------------------------------------------------------
# the user's own model and checkpoints (instead of two runs)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """--model-factory, --hf-model and --data: A and B become weight files of the user's own
    model (see :func:`load_inputs`)."""
    group = parser.add_argument_group(
        "your own model (then A and B are weight files: .safetensors, or .pt/.pth/.bin read "
        "with torch.load(weights_only=True))"
    )
    group.add_argument(
        "--model-factory",
        default=None,
        metavar="SPEC",
        help="module:callable or path/to/file.py:callable returning the nn.Module (called "
        "with no arguments) whose weights A and B hold",
    )
    group.add_argument(
        "--hf-model",
        default=None,
        metavar="FOLDER",
        help="a local Hugging Face model folder (config.json + weights; needs lmc[hf]); A and "
        "B are weight files (or save_pretrained folders) of that model",
    )
    group.add_argument(
        "--data",
        default=None,
        metavar="NAME|FILE",
        help="with --model-factory/--hf-model: a zoo dataset (digits, mnist, ...) or a .npz/"
        ".safetensors file holding x and y (optionally x_test, y_test; see README)",
    )


@dataclass
class PairInputs:
    """What a pair verb measures: the two models (on ``--device``, eval mode), the dataset,
    the metadata recorded in its JSON (``meta``), display names and the runs (``None`` for
    weight files)."""

    model_a: Any
    model_b: Any
    data: Any
    meta: dict[str, Any]
    name_a: str
    name_b: str
    dataset: str
    runs: tuple[Any, Any] | None = None
    source: str | None = None  # "the model from SPEC" for the user's model


def uses_own_model(args: argparse.Namespace) -> bool:
    return any(getattr(args, key, None) for key in ("model_factory", "hf_model", "hf_model_b"))


def load_user_dataset(
    text: str, args: argparse.Namespace, device: torch.device, model: torch.nn.Module | None = None
):
    """``--data``: a .npz/.safetensors file (:mod:`lmc.data.user_file`), a UTF-8 ``.txt`` file
    (next-token windows, :mod:`lmc.data.text`) or a zoo dataset.

    A text file is read with ``--hf-model``'s tokenizer when that folder holds one (so a
    GPT-2 reads text as it was trained to), else characters; its windows are
    ``DEFAULT_CONTEXT`` tokens, or the model's own context when that is shorter."""
    from pathlib import Path

    from lmc.data import load
    from lmc.data.user_file import is_data_file, load_user_data

    if is_data_file(text):
        return load_user_data(text, device=device)
    if Path(text).suffix.lower() == ".txt":
        return load("text", device=device, path=text, **_text_options(args, model))
    if Path(text).is_file():
        raise LmcError(f"--data {text}: a data file must be .npz, .safetensors or .txt (UTF-8)")
    return load(
        text,
        data_dir=getattr(args, "data_dir", None),
        device=device,
        download=getattr(args, "download", False),
    )


def _text_options(args: argparse.Namespace, model: torch.nn.Module | None) -> dict[str, Any]:
    """The tokenizer and context a user's model reads a text file with (see above)."""
    from pathlib import Path

    from lmc.data.text import DEFAULT_CONTEXT

    options: dict[str, Any] = {"context": DEFAULT_CONTEXT}
    folder = getattr(args, "hf_model", None)
    if folder and any(
        (Path(folder) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")
    ):
        options["tokenizer"] = str(folder)
    config = getattr(getattr(model, "hf", None), "config", None)
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and limit > 0:
        options["context"] = min(options["context"], limit)
    return options


def _vocabulary_message(source: str, vocab: int, tokens: int) -> str:
    """The refusal of a text whose tokenizer has more token ids than the model's vocabulary."""
    return (
        f"{source} predicts {vocab} token ids but the text's tokenizer has {tokens}: give the "
        "model's own tokenizer (an --hf-model folder with tokenizer files) or a model with a "
        "larger vocabulary"
    )


def _token_table_size(model) -> int | None:
    """The rows of a model's first embedding table (its vocabulary), or ``None``."""
    from torch import nn

    for module in model.modules():
        if isinstance(module, nn.Embedding):
            return int(module.num_embeddings)
    return None


def check_data_fits(model, data, source: str) -> None:
    """One batch forward of two test examples, checked against the data's task
    (``data.task_spec``): a one-line ``LmcError`` if the data's shape does not fit the model,
    or its output does not have the task's layout. For a task whose output is class logits
    (:attr:`lmc.data.Task.calibrates`) that is the target's shape plus a class axis of at
    least the data's ``num_classes`` (per example: ``(2, C)``; per position of a window:
    ``(2, T, V)``, ``V`` the vocabulary); any other task checks the output itself
    (:meth:`lmc.data.Task.check`)."""
    import torch

    from lmc.models import eval_mode

    task = data.task_spec
    x, y = data.x_test[:2], data.y_test[:2]
    shape = "(" + ", ".join(str(d) for d in (len(data.x_test), *data.input_shape)) + ")"
    try:
        with torch.no_grad(), eval_mode(model):
            out = model(x)
    except LmcError:
        raise
    except Exception as exc:
        vocab = _token_table_size(model) if task.target_axes > 1 else None
        if vocab is not None and data.num_classes > vocab:
            raise LmcError(_vocabulary_message(source, vocab, data.num_classes)) from exc
        message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LmcError(
            f"data of shape {shape} ({data.name}) does not fit {source}: {message}"
        ) from exc
    if not isinstance(out, torch.Tensor):
        wanted = "a logits tensor (N, C)" if task.calibrates else f"a tensor {task.output_layout()}"
        raise LmcError(f"{source} returns a {type(out).__name__}, not {wanted}")
    if not task.calibrates:  # not class logits: the task says what its output is
        try:
            task.check(out, y, name=f"the labels of {data.name}")
        except LmcError as exc:
            raise LmcError(f"{source} does not fit the {task.name} task: {exc}") from None
        return
    fits = out.dim() == y.dim() + 1 and tuple(out.shape[:-1]) == tuple(y.shape)
    if task.target_axes > 1:  # a prediction per position of a window
        if not fits:
            raise LmcError(
                f"{source} turns 2 windows of {data.name} (shape {tuple(x.shape)}) into outputs "
                f"of shape {tuple(out.shape)}, not {task.name} logits (2, T, V)"
            )
        if out.shape[-1] < data.num_classes:
            raise LmcError(_vocabulary_message(source, out.shape[-1], data.num_classes))
        return
    if not fits:
        raise LmcError(
            f"{source} turns 2 examples of {data.name} into outputs of shape "
            f"{tuple(out.shape)}, not logits (2, C)"
        )
    if out.shape[1] < data.num_classes:
        raise LmcError(
            f"{source} gives {out.shape[1]} logits but {data.name} has labels up to "
            f"{data.num_classes - 1}"
        )


def load_inputs(args: argparse.Namespace, verb: str) -> PairInputs:
    """The pair of a verb that takes A B: two runs (as :func:`load_pair`), or, with
    ``--model-factory``/``--hf-model``, two weight files of the user's model with ``--data``.
    Either way the architectures are checked, the models are on ``--device`` in eval mode,
    and (for the user's model) one batch of the data is passed through model A."""
    if not uses_own_model(args):
        if getattr(args, "data", None):
            raise LmcError(
                "--data is for --model-factory/--hf-model; runs use the dataset they were "
                "trained on"
            )
        run_a, run_b, model_a, model_b, data = load_pair(args, verb)
        meta = {
            "run_a": str(run_a.path),
            "run_b": str(run_b.path),
            "model": run_a.config["model"],
            "model_options": run_a.config["model_options"],
            "dataset": run_a.config["dataset"],
        }
        return PairInputs(model_a, model_b, data, meta, run_a.name, run_b.name,
                          run_a.config["dataset"], runs=(run_a, run_b))  # fmt: skip
    from pathlib import Path

    from lmc.models.factory import load_factory, load_hf_folder, load_weights

    if args.model_factory and args.hf_model:
        raise LmcError("give --model-factory or --hf-model, not both")
    hf_model_b = getattr(args, "hf_model_b", None)
    if hf_model_b and not args.hf_model:
        raise LmcError("--hf-model-b is B's architecture beside --hf-model's: give --hf-model too")
    if not getattr(args, "data", None):
        raise LmcError(
            "--data is needed with --model-factory/--hf-model: a zoo dataset name (digits, "
            "mnist, ...), a .npz/.safetensors file holding x and y, or a UTF-8 text file "
            "(.txt) for a language model"
        )
    quiet = bool(getattr(args, "quiet", False))
    if args.model_factory:
        make, key, spec = load_factory(args.model_factory), "model_factory", args.model_factory
    else:
        make, key, spec = load_hf_folder(args.hf_model, quiet=quiet), "hf_model", args.hf_model
    make_b, source_b = make, f"the model from {spec}"
    if hf_model_b:
        make_b, source_b = load_hf_folder(hf_model_b, quiet=quiet), f"the model from {hf_model_b}"
    source = f"the model from {spec}"
    device = device_from(args)
    model_a = load_weights(make(), args.run_a, source=source)
    model_b = load_weights(make_b(), args.run_b, source=source_b)
    if not getattr(args, "widen", False):
        check_pair_architecture(model_a, model_b, ("A", "B"), args)
    model_a, model_b = model_a.to(device).eval(), model_b.to(device).eval()
    data = load_user_dataset(args.data, args, device, model_a)
    check_data_fits(model_a, data, source)
    if hf_model_b:
        check_data_fits(model_b, data, source_b)
    meta = {
        "weights_a": str(args.run_a),
        "weights_b": str(args.run_b),
        key: spec,
        "model": type(model_a).__name__,
        "dataset": data.name,
        "data": str(args.data),
    }
    if hf_model_b:
        meta["hf_model_b"] = str(hf_model_b)
    name_a, name_b = Path(args.run_a).stem, Path(args.run_b).stem
    return PairInputs(model_a, model_b, data, meta, name_a, name_b, data.name, source=source)
