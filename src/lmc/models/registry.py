"""The model registry: each zoo architecture declares itself once, and everyone asks it.

An entry says what ``width`` means for the model: its kind (``units``: an integer count, such
as hidden units per layer or a transformer's embedding dimension; ``multiplier``: a factor on
the architecture's standard channel counts) and its ``width_label`` (what the number counts,
for ``--help``, figure axes and tables: ``hidden units per layer``, ``channel multiplier``,
``embedding dimension``), which options it takes and their defaults, and how the options that
come from the data (input size or channels, number of classes) are read off a dataset's
``input_shape`` and ``num_classes``. Training configs, studies, the CLI and alignment all fill
and check a model's options through :func:`resolve_options`, so the same settings give the same
config wherever they are written (in the spirit of timm's ``register_model`` /
``create_model``).

An option is declared once, in its model's module, as a :class:`ModelOption` (its default, its
meaning, its type and choices, its ``lmc train`` flag) or as a bare default. ``lmc train``'s
model flags and their help are generated from the declarations (:func:`flag_options`): one
flag per option name, ``--<name>`` with ``_`` written ``-``, its help saying which models take
it, with what meaning and default; ``lmc train --model NAME --help`` shows that model's own.
Adding an option to a model is one edit of its module.

>>> @register_model("mlp", width="units", default_width=512, inputs=vector_inputs,
...                 options={"depth": ModelOption(3, "number of hidden layers"),
...                          "norm": "none", "activation": "relu", "bias": True})
... def mlp(**options): ...
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError, canonical_json, check_int
from lmc.data.tasks import get_task

from .init import initialize
from .layers import ACTIVATIONS, NORMS
from .options import ModelOption

InputOptions = Callable[[Sequence[int], int], dict[str, Any]]
OptionCheck = Callable[[str, Mapping[str, Any]], None]
OptionFill = Callable[[dict[str, Any]], dict[str, Any]]
WIDTH_KINDS = ("units", "multiplier")
#: The width label of an entry that gives none, by width kind.
DEFAULT_WIDTH_LABELS = {"units": "hidden units per layer", "multiplier": "channel multiplier"}


#: The output layouts a model may serve, by the axes of the task's target
#: (:attr:`lmc.data.Task.target_axes`): ``per-example``, one output per example (``(N, C)``:
#: class logits, a regression's values); ``per-position``, one per position of a token window
#: (``(N, T, C)``).
OUTPUT_LAYOUTS: dict[int, str] = {1: "per-example", 2: "per-position"}
#: What a model serving each layout does, in words (its refusals say it).
LAYOUT_WORDS = {
    "per-example": "classifies (one output per example)",
    "per-position": "predicts at every position of a token window",
}


def task_layout(task: Any) -> str:
    """The output layout (:data:`OUTPUT_LAYOUTS`) the task ``task`` (a name or a
    :class:`lmc.data.Task`) asks of a model; ``LmcError`` for an unknown task."""
    spec = get_task(task)
    layout = OUTPUT_LAYOUTS.get(spec.target_axes)
    if layout is None:
        raise LmcError(
            f"the {spec.name} task has targets with {spec.target_axes} axes; a zoo model serves "
            f"{' or '.join(OUTPUT_LAYOUTS.values())} outputs"
        )
    return layout


def vector_inputs(
    input_shape: Sequence[int], num_classes: int, task: str = "classification"
) -> dict[str, Any]:
    """Options of a model that flattens its input: ``input_size`` = prod(shape) (the task is
    checked by the registry against the entry's ``outputs``, :meth:`ModelEntry.check_task`)."""
    return {"input_size": int(math.prod(input_shape)), "num_classes": int(num_classes)}


vector_inputs.keys = ("input_size", "num_classes")  # type: ignore[attr-defined]
vector_inputs.outputs = ("per-example",)  # type: ignore[attr-defined]


def image_inputs(
    input_shape: Sequence[int], num_classes: int, task: str = "classification"
) -> dict[str, Any]:
    """Options of a model of images (C, H, W): ``in_channels`` = C (the task is checked by
    the registry, as for :func:`vector_inputs`)."""
    if len(input_shape) != 3:
        raise LmcError(
            f"this model needs image data (C, H, W); the dataset's examples have shape "
            f"{tuple(input_shape)}"
        )
    return {"in_channels": int(input_shape[0]), "num_classes": int(num_classes)}


image_inputs.keys = ("in_channels", "num_classes")  # type: ignore[attr-defined]
image_inputs.outputs = ("per-example",)  # type: ignore[attr-defined]


def _declared(options: Mapping[str, Any] | None) -> dict[str, ModelOption]:
    """Every option as a :class:`ModelOption` (a bare default becomes one)."""
    return {
        key: value if isinstance(value, ModelOption) else ModelOption(value)
        for key, value in (options or {}).items()
    }


@dataclass(frozen=True)
class ModelEntry:
    """One registered architecture.

    ``factory(**options)`` builds it; ``width`` is the kind of its width (:data:`WIDTH_KINDS`)
    and ``width_label`` what the number is, a noun phrase (``hidden units per layer``,
    ``channel multiplier``, ``embedding dimension``); ``options`` maps each user-settable
    option (besides ``width``) to its default; ``inputs`` turns a dataset's ``(input_shape,
    num_classes)`` into the data-given options, whose names are ``input_keys``;
    ``declarations`` maps each option to its :class:`ModelOption` (default, meaning, type,
    flag: what ``lmc train --help`` says of it). ``widenable``:
    :func:`lmc.perm.symmetries.widening.widen_pair` can write a narrow model of this
    architecture into a wider one. ``check(name,
    options)`` (optional) raises ``LmcError`` for values that only this model rules out (ViT:
    heads must divide width); it sees the registry defaults filled in under the options given
    (``width`` only when given: a study sets it per sweep point). ``complete`` (optional)
    fills, in :func:`resolve_options`, the defaults that depend on other options (ViT: the
    patch size from the image size), so a resolved config holds concrete values.
    ``outputs``: the output layouts (:data:`OUTPUT_LAYOUTS`) the model serves, which the data's
    task must ask for (:meth:`check_task`): ``("per-example",)`` for a model with one output
    per example (MLP, VGG, ResNet, ViT: classification, or any registered task with
    per-example targets, a regression say), ``("per-position",)`` for a language model. Left
    empty, it is what the ``inputs`` function declares (its ``outputs`` attribute, as
    :func:`vector_inputs` and :func:`image_inputs` do); an entry that declares none is not
    checked here (its ``inputs`` function checks the task itself).
    """

    name: str
    factory: Callable[..., nn.Module]
    width: str
    default_width: float
    inputs: InputOptions
    options: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    check: OptionCheck | None = None
    complete: OptionFill | None = None
    width_label: str = ""
    declarations: Mapping[str, ModelOption] = field(default_factory=dict)
    widenable: bool = False
    outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        outputs = tuple(self.outputs or getattr(self.inputs, "outputs", ()))
        unknown = [o for o in outputs if o not in OUTPUT_LAYOUTS.values()]
        if unknown:
            raise ValueError(
                f"model {self.name!r}: unknown output layout {unknown[0]!r}; use "
                f"{', '.join(OUTPUT_LAYOUTS.values())}"
            )
        object.__setattr__(self, "outputs", outputs)
        if not self.width_label:
            object.__setattr__(self, "width_label", DEFAULT_WIDTH_LABELS[self.width])
        declared = {**_declared(self.options), **dict(self.declarations)}
        object.__setattr__(self, "declarations", declared)
        object.__setattr__(self, "options", {k: v.default for k, v in declared.items()})

    def check_task(self, task: Any) -> None:
        """``LmcError`` unless the model serves the output layout the task ``task`` (a name or
        a :class:`lmc.data.Task`) asks for (:func:`task_layout` in :attr:`outputs`); an entry
        that declares no ``outputs`` passes every task."""
        if not self.outputs:
            return
        layout = task_layout(task)
        if layout in self.outputs:
            return
        spec = get_task(task)
        others = [n for n, e in MODELS.items() if layout in e.outputs]
        hint = f": train {' or '.join(others)} on it (--model {others[0]})" if others else ""
        serves = "; ".join(LAYOUT_WORDS[o] for o in self.outputs)
        raise LmcError(
            f"{self.name}: this model {serves}; the dataset holds {spec.name} data "
            f"({spec.target_layout()}), which needs {layout} outputs{hint}"
        )

    def data_options(
        self, input_shape: Sequence[int], num_classes: int, task: Any = "classification"
    ) -> dict[str, Any]:
        """The options read off the data (:attr:`input_keys`: ``inputs(input_shape,
        num_classes, task)``), once the task is checked against the model's ``outputs``
        (:meth:`check_task`); ``task`` is a task's name or a :class:`lmc.data.Task`."""
        self.check_task(task)
        return self.inputs(tuple(input_shape), num_classes, get_task(task).name)

    @property
    def input_keys(self) -> tuple[str, ...]:
        return tuple(getattr(self.inputs, "keys", ()))

    @property
    def option_names(self) -> tuple[str, ...]:
        """Every option ``build`` accepts: width, the user options and the data-given ones."""
        return ("width", *self.options, *self.input_keys)

    @property
    def width_help(self) -> str:
        """The width label with how the number is read, e.g. ``hidden units per layer (an
        integer)`` or ``channel multiplier (× the standard channel counts)``."""
        if self.width == "units":
            return f"{self.width_label} (an integer)"
        return f"{self.width_label} (× the standard channel counts)"

    def width_value(self, width: Any) -> int | float:
        """``width`` checked (positive, finite; an integer for ``units``) and typed."""
        if isinstance(width, bool) or not isinstance(width, (int, float)):
            raise LmcError(
                f"{self.name}: width must be a number ({self.width_help}), got {width!r}"
            )
        if not math.isfinite(width) or width <= 0:
            raise LmcError(f"{self.name}: width must be positive and finite, got {width!r}")
        if self.width == "units":
            if float(width) != int(width):
                raise LmcError(f"{self.name}: width is {self.width_help}, got {width!r}")
            return int(width)
        return float(width)


#: Every registered model: its name -> its :class:`ModelEntry` (``register_model`` adds one).
MODELS: dict[str, ModelEntry] = {}


def register_model(
    name: str,
    *,
    width: str,
    default_width: float,
    inputs: InputOptions,
    options: Mapping[str, Any] | None = None,
    description: str = "",
    check: OptionCheck | None = None,
    complete: OptionFill | None = None,
    width_label: str | None = None,
    widenable: bool = False,
    outputs: Sequence[str] = (),
) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator registering ``factory`` as zoo model ``name`` (see :class:`ModelEntry`).
    ``outputs``: the output layouts it serves (:data:`OUTPUT_LAYOUTS`; default: what its
    ``inputs`` function declares).

    ``options`` maps each option to a :class:`ModelOption` or a bare default;
    ``width_label`` defaults to :data:`DEFAULT_WIDTH_LABELS` of the width kind. An option
    whose name another model declares too shares its ``lmc train`` flag, so its type and flag
    must agree with theirs (``ValueError`` otherwise)."""
    if width not in WIDTH_KINDS:
        raise ValueError(f"width must be one of {WIDTH_KINDS}")
    declared = _declared(options)
    for key, option in declared.items():
        for other, taken in MODELS.items():
            theirs = taken.declarations.get(key)
            if other == name or theirs is None:
                continue
            if (theirs.type, theirs.flag_for(key)) != (option.type, option.flag_for(key)):
                raise ValueError(
                    f"model {name!r}: option {key!r} ({option.type.__name__}, flag "
                    f"{option.flag_for(key)!r}) disagrees with model {other!r}'s "
                    f"({theirs.type.__name__}, flag {theirs.flag_for(key)!r}): one name, one flag"
                )

    def decorate(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        MODELS[name] = ModelEntry(
            name,
            factory,
            width,
            default_width,
            inputs,
            {k: v.default for k, v in declared.items()},
            description,
            check,
            complete,
            width_label or DEFAULT_WIDTH_LABELS[width],
            declared,
            widenable,
            tuple(outputs),
        )
        return factory

    return decorate


def flag_options() -> dict[str, list[tuple[str, ModelOption]]]:
    """Every option that has an ``lmc train`` flag: its name -> ``[(model, declaration)]`` of
    the registered models that take it, in registry order (which models take an option is
    read off the declarations, never listed)."""
    found: dict[str, list[tuple[str, ModelOption]]] = {}
    for name, entry in MODELS.items():
        for key, option in entry.declarations.items():
            if option.flag_for(key):
                found.setdefault(key, []).append((name, option))
    return found


def option_summary(takers: Sequence[tuple[str, ModelOption]]) -> str:
    """One option's ``--help``: each meaning and default with the models it holds for
    (``mlp: number of hidden layers (default 3); gpt, llama: transformer blocks (default
    2)``), the takers as :func:`flag_options` lists them."""
    groups: dict[tuple[str, str], list[str]] = {}
    for model, option in takers:
        groups.setdefault((option.help, option.shown_default), []).append(model)
    return "; ".join(
        f"{', '.join(models)}: {meaning or 'see the model'} (default {shown})"
        for (meaning, shown), models in groups.items()
    )


def width_summary() -> str:
    """What ``width`` means for each registered model, one clause per meaning and default
    (``mlp: hidden units per layer (an integer), default 512; resnet20, vgg11: ...``), for
    ``--width``'s help."""
    groups: dict[tuple[str, float], list[str]] = {}
    for name, entry in MODELS.items():
        groups.setdefault((entry.width_help, entry.default_width), []).append(name)
    return "; ".join(
        f"{', '.join(names)}: {help_text}, default {default:g}"
        for (help_text, default), names in groups.items()
    )


def get_model(name: str) -> ModelEntry:
    """The registry entry of ``name``, or ``LmcError`` listing the registered names."""
    if name not in MODELS:
        raise LmcError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")
    return MODELS[name]


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """``LmcError`` for an option ``name`` does not take or a value out of its range."""
    entry = get_model(name)
    unknown = sorted(set(options) - set(entry.option_names))
    if unknown:
        raise LmcError(
            f"model {name!r} has no option {unknown[0]!r}: "
            f"its options are {', '.join(sorted(entry.option_names))}"
        )
    if "width" in options:
        entry.width_value(options["width"])
    for key in ("depth", "in_channels", "heads"):
        if key in options:
            check_int(f"{name}: {key}", options[key])
    if "num_classes" in options:
        check_int(f"{name}: num_classes", options["num_classes"], minimum=2)
    if "input_size" in options and not isinstance(options["input_size"], (list, tuple)):
        check_int(f"{name}: input_size", options["input_size"])
    if "norm" in options and options["norm"] not in NORMS:
        raise LmcError(f"unknown norm {options['norm']!r}: choose one of {', '.join(NORMS)}")
    if "activation" in options and options["activation"] not in ACTIVATIONS:
        raise LmcError(
            f"unknown activation {options['activation']!r}: choose one of {', '.join(ACTIVATIONS)}"
        )
    if "bias" in options and not isinstance(options["bias"], bool):
        raise LmcError(f"{name}: bias must be true or false, got {options['bias']!r}")
    for key, value in options.items():
        declared = entry.declarations.get(key)
        if declared is None or value is None:
            continue
        if declared.type is bool and not isinstance(value, bool):
            raise LmcError(f"{name}: {key} must be true or false, got {value!r}")
        if declared.choices is not None and value not in declared.choices:
            raise LmcError(
                f"{name}: {key} must be one of {', '.join(map(str, declared.choices))}, "
                f"got {value!r}"
            )
    if entry.check is not None:
        merged = {**entry.options, **options}
        if "width" in options:
            merged["width"] = entry.width_value(options["width"])
        entry.check(name, merged)


def resolve_options(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    input_shape: Sequence[int] | None = None,
    num_classes: int | None = None,
    task: str = "classification",
) -> dict[str, Any]:
    """The complete, checked options of model ``name``: every default filled in, ``width``
    typed, and the data-given options read from ``input_shape``, ``num_classes`` and the
    data's ``task`` (when given and not already set; a next-token dataset's ``num_classes``
    is its vocabulary). The one place a model's config is completed."""
    entry = get_model(name)
    given = dict(options or {})
    resolved: dict[str, Any] = {**entry.options, **given}
    resolved["width"] = entry.width_value(given.get("width", entry.default_width))
    if input_shape is not None and num_classes is not None:
        for key, value in entry.data_options(tuple(input_shape), num_classes, task).items():
            resolved.setdefault(key, value)
    if entry.complete is not None:
        resolved = entry.complete(resolved)
    check_options(name, resolved)
    return resolved


def has_input_options(name: str, options: Mapping[str, Any]) -> bool:
    """Whether ``options`` already hold every data-given option of ``name``."""
    return all(key in options for key in get_model(name).input_keys)


def build(name: str, *, seed: int | None = None, **options: Any) -> nn.Module:
    """Build zoo model ``name`` with ``options``; with ``seed``, initialise from that seed.

    Raises ``LmcError`` for an unknown name, an unknown option or a value out of range. The
    model carries ``lmc_spec = {"name": name, "options": options}`` (the options as given) so
    the same architecture can be rebuilt.
    """
    entry = get_model(name)
    check_options(name, options)
    model = entry.factory(**options)
    model.lmc_spec = {"name": name, "options": dict(options)}
    if seed is not None:
        initialize(model, seed)
    return model


#: Bytes of memory a training run needs per parameter, roughly: float32 weights, gradients and
#: up to two optimizer moments (Adam), before activations.
TRAINING_BYTES_PER_PARAMETER = 16


def parameter_count(name: str, options: Mapping[str, Any]) -> int:
    """Parameters of zoo model ``name`` with complete ``options``, counted on PyTorch's meta
    device (no memory is allocated, so a width that would not fit can still be measured)."""
    return _parameter_count(name, canonical_json(dict(options)))


@functools.lru_cache(maxsize=256)
def _parameter_count(name: str, options_json: str) -> int:
    with torch.device("meta"):
        model = get_model(name).factory(**json.loads(options_json))
    return sum(p.numel() for p in model.parameters())


def physical_memory_bytes() -> int | None:
    """This machine's physical memory in bytes, or ``None`` where the OS does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
        return None


def check_fits_memory(name: str, options: Mapping[str, Any], memory: int | None = None) -> int:
    """``LmcError`` when training zoo model ``name`` with ``options`` needs more than
    ``memory`` bytes (default: this machine's physical memory), estimated as
    :data:`TRAINING_BYTES_PER_PARAMETER` per parameter; otherwise the parameter count.

    It runs before anything is created, so a width typed with too many zeros is one line, not
    an allocation of terabytes."""
    count = parameter_count(name, options)
    memory = physical_memory_bytes() if memory is None else memory
    need = count * TRAINING_BYTES_PER_PARAMETER
    if memory is not None and need > memory:
        raise LmcError(
            f"{name} at width {options.get('width')!r} has {count:,} parameters: training "
            f"it needs about {_bytes(need)} ({TRAINING_BYTES_PER_PARAMETER} bytes per "
            f"parameter), more than this machine's {_bytes(memory)} of memory; choose a "
            "smaller width"
        )
    return count


def _bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.3g} {unit}"
        count /= 1024
    raise AssertionError  # pragma: no cover
