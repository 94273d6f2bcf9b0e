"""The registry of alignment methods: one :class:`AlignmentMethod` record per method.

A method is one module of :mod:`lmc.perm.methods` holding its algorithm and its record (or, for
a plug-in or a test, one :func:`register_method` call anywhere). The record carries everything
about the method: its name, its function, its settings (:class:`MethodSetting`: type, default,
meaning, checks), whether it reads training examples and labels, whether it aligns the pair's
canonical forms, and how reports show it: its ``label``, its ``order`` in tables and figures and
its plotting ``style`` (:class:`MethodStyle`: colour and marker). Everything else follows from
the records: :func:`lmc.perm.align` checks the settings and calls the function; ``lmc align``,
``lmc interpolate --align`` and ``lmc analyze --align`` get one flag per setting
(``--<method>-<setting>``, e.g. ``--weight-max-iter``); a study's ``[merge]`` table accepts one
key per setting (``<method>_<setting>``, e.g. ``weight_max_iter``) and checks it; the order of
methods in tables (``lmc.experiments.cells.METHOD_ORDER``), their figure styles
(``lmc.report.style.METHOD_STYLE``) and the method lists and settings rows of
``docs/studies.md`` (``scripts/results_pages.py``) are generated from the records.

Adding a method is one module holding its function and one call::

    from lmc.perm.methods import (
        AlignmentMethod, MethodOutput, MethodSetting, MethodStyle, register_method,
    )

    def shift(job, *, by):            # job: an AlignJob; the settings as keywords
        perm = {g: torch.roll(torch.arange(n), by) for g, n in job.spec.group_sizes.items()}
        return MethodOutput(perm)

    register_method(AlignmentMethod(
        "shift", shift, "roll every group by a fixed offset",
        settings=(MethodSetting("by", 1, "units to roll by", minimum=0),),
        label="shifted", order=25, style=MethodStyle("#117733", "d"),
    ))

(a built-in method's module is also imported by ``lmc/perm/methods/__init__.py``, whose
import order is the registration order, :func:`method_names`).

A function returns a :class:`MethodOutput`: an :class:`~lmc.perm.symmetries.alignment_map.
Alignment` (or a permutation dict, group -> index tensor, new unit i = old unit p[i]) that maps
B onto A, and method-specific extras for the record. ``none`` (the identity) is a method like
the others; so is ``canonical``, the identity between the pair's canonical forms (a method
marked ``canonical``): the control of the methods that measure the pair there (``orthogonal``,
``orthogonal-activation``, ``learned``), which tells their alignment's effect from the
reparametrisation's (:func:`canonical_control_note` says when a study lists one without it).

Identities (what a result's id is hashed from): a setting enters the config of an aligned run
(``lmc align``) with its value, unless ``legacy`` is set and the value equals it; it enters a
sweep's merge job only when its value differs from ``legacy`` (or, without one, from its
default), so studies that never named it keep their job ids. A method's label, order and style
enter no identity.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError

from ..symmetries.alignment_map import Alignment
from ..symmetries.permutation_spec import PermutationSpec

#: marker of a setting without a legacy value (see the module docstring)
NO_LEGACY = object()

_TYPES = {int: "integer", float: "number", str: "string", bool: "true/false"}


@dataclass(frozen=True)
class MethodSetting:
    """One setting of an alignment method.

    ``name``: the keyword the method's function takes (a Python identifier); ``default``;
    ``help``: its meaning, one sentence; ``type``: int, float, str or bool; ``choices``: the
    allowed strings; ``minimum``: the smallest allowed number (inclusive); ``optional``: ``None``
    is allowed (it means "unset": the method decides, as its help says); ``affects_result``:
    False for settings that change only speed or memory (they stay out of every identity);
    ``legacy``: the value results made before the setting was exposed ran with
    (:data:`NO_LEGACY`: none).
    """

    name: str
    default: Any
    help: str
    type: type = int
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    positive: bool = False
    optional: bool = False
    affects_result: bool = True
    legacy: Any = NO_LEGACY

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise LmcError(f"a method setting's name must be an identifier, got {self.name!r}")
        if self.type not in _TYPES:
            raise LmcError(f"setting {self.name!r}: type must be int, float, str or bool")
        self.check(self.default, f"the default of setting {self.name!r}")

    def check(self, value: Any, label: str) -> Any:
        """``value`` checked against the setting (``label`` names it in the one-line error);
        integers given for a float setting become floats."""
        if value is None:
            if self.optional:
                return None
            raise LmcError(f"{label} needs a value ({self.describe_type()})")
        is_bool = isinstance(value, bool)
        if self.type is bool:
            ok = is_bool
        elif self.type is float:
            ok = isinstance(value, (int, float)) and not is_bool
        else:
            ok = isinstance(value, self.type) and not is_bool
        if not ok:
            raise LmcError(f"{label} must be {self.describe_type()}, got {value!r}")
        if self.type is float:
            value = float(value)
            if value != value or value in (float("inf"), float("-inf")):
                raise LmcError(f"{label} must be a finite number, got {value!r}")
        if self.choices and value not in self.choices:
            raise LmcError(f"{label} must be one of {', '.join(self.choices)}, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise LmcError(f"{label} must be at least {self.minimum:g}, got {value!r}")
        if self.positive and not value > 0:
            raise LmcError(f"{label} must be above 0, got {value!r}")
        return value

    def describe_type(self) -> str:
        text = _TYPES[self.type]
        return f"{text} or none" if self.optional else text

    def parse(self, text: str, label: str) -> Any:
        """A command-line value: ``none`` for an optional setting, else the setting's type."""
        if self.optional and text.strip().lower() == "none":
            return None
        try:
            if self.type is bool:
                lowered = text.strip().lower()
                if lowered not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                value: Any = lowered in ("true", "1", "yes")
            else:
                value = self.type(text)
        except ValueError:
            raise LmcError(f"{label} must be {self.describe_type()}, got {text!r}") from None
        return self.check(value, label)

    @property
    def baseline(self) -> Any:
        """The value at which the setting stays out of a sweep's merge ids."""
        return self.default if self.legacy is NO_LEGACY else self.legacy

    def enters_sweep_id(self, value: Any) -> bool:
        """Whether ``value`` of this setting enters a sweep's merge job id: it changes the
        result and differs from :attr:`baseline` (see the module docstring)."""
        return self.affects_result and value != self.baseline


@dataclass(frozen=True)
class AlignJob:
    """What a method's function reads: the two models and their states (never modified),
    the symmetry ``spec`` traced from A, the training ``inputs`` (all that were given; only the
    methods that read data get more than two rows) and their ``labels`` (``None`` unless the
    method needs labels and they were given), ``seed``, ``quiet``, the ``task``
    (:mod:`lmc.data.tasks`) the labels belong to, and for a ``canonical`` method ``symmetry``:
    the axis roles of A's spec (a :class:`~lmc.perm.symmetries.symmetry_spec.SymmetrySpec`; else
    ``None``)."""

    spec: PermutationSpec
    model_a: nn.Module
    model_b: nn.Module
    state_a: Mapping[str, torch.Tensor]
    state_b: Mapping[str, torch.Tensor]
    inputs: torch.Tensor
    labels: torch.Tensor | None
    seed: int
    quiet: bool
    task: Any = "classification"
    symmetry: Any = None


@dataclass
class MethodOutput:
    """A method's answer: ``alignment`` maps B onto A (an :class:`Alignment`, or a permutation
    dict group -> int64 index tensor), ``extras`` go into the result's ``info``."""

    alignment: Alignment | Mapping[str, torch.Tensor]
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MethodStyle:
    """How figures draw a method: ``colour`` (a Matplotlib colour, e.g. ``"#D55E00"``) and
    ``marker`` (a Matplotlib marker, e.g. ``"s"``)."""

    colour: str
    marker: str


@dataclass(frozen=True)
class AlignmentMethod:
    """One alignment method (see the module docstring).

    ``function(job, **settings) -> MethodOutput``; ``description``: one line for ``--help`` and
    the docs; ``needs_data``: it reads training examples (not only two rows to trace the
    model); ``needs_labels``: it also reads their targets (implies ``needs_data``);
    ``canonical``: it aligns the pair's canonical forms (:mod:`lmc.perm.symmetries.
    canonical_form`: LayerNorms folded, the stream centred, RMSNorms; pre-norm transformers,
    LayerNorm or RMSNorm, read off the traced graph): :func:`lmc.perm.align` canonicalises both
    models first and the job holds the canonical pair, whose stream admits orthogonal maps.

    How reports show it: ``label``, its name in figures and tables (empty: the method's name);
    ``order``, its place in tables and figures (lower first; ``None``: after every method with
    one, by name); ``style``, its colour and marker in figures (``None``: one of a few spare
    styles, picked from the name); ``summary``, the phrase that describes it in the lists of
    methods of ``docs/studies.md`` (empty: the label).
    """

    name: str
    function: Callable[..., MethodOutput]
    description: str
    settings: tuple[MethodSetting, ...] = ()
    needs_data: bool = False
    needs_labels: bool = False
    canonical: bool = False
    label: str = ""
    order: float | None = None
    style: MethodStyle | None = None
    summary: str = ""

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise LmcError(f"a method's name is letters, digits, '-' and '_', got {self.name!r}")
        names = [s.name for s in self.settings]
        if len(set(names)) != len(names):
            raise LmcError(f"method {self.name!r} lists a setting twice: {names}")
        if self.needs_labels and not self.needs_data:
            object.__setattr__(self, "needs_data", True)
        if self.order is not None and not (
            isinstance(self.order, (int, float)) and math.isfinite(self.order)
        ):
            raise LmcError(f"method {self.name!r}: order must be a finite number or None")
        if self.style is not None and not isinstance(self.style, MethodStyle):
            raise LmcError(f"method {self.name!r}: style must be a MethodStyle or None")
        if not self.label:
            object.__setattr__(self, "label", self.name)
        if not self.summary:
            object.__setattr__(self, "summary", self.label)

    def setting(self, name: str) -> MethodSetting:
        for s in self.settings:
            if s.name == name:
                return s
        choices = ", ".join(s.name for s in self.settings) or "none"
        raise LmcError(f"method {self.name!r} has no setting {name!r} (its settings: {choices})")

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every setting's value: ``given`` (checked) over the defaults."""
        for key in given:
            self.setting(key)
        return {
            s.name: s.check(given[s.name], f"setting {s.name!r} of method {self.name!r}")
            if s.name in given
            else s.default
            for s in self.settings
        }

    def identity(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The settings that enter an aligned run's config (see the module docstring)."""
        return {
            s.name: values[s.name]
            for s in self.settings
            if s.affects_result and not (s.legacy is not NO_LEGACY and values[s.name] == s.legacy)
        }

    def flag(self, setting: MethodSetting) -> str:
        """The command-line flag of ``setting``: ``--<method>-<setting>``."""
        return f"--{self.name}-{setting.name}".replace("_", "-")

    def study_key(self, setting: MethodSetting) -> str:
        """The ``[merge]`` key of ``setting``: ``<method>_<setting>``."""
        return f"{self.name}_{setting.name}".replace("-", "_")


_REGISTRY: dict[str, AlignmentMethod] = {}


def register_method(method: AlignmentMethod, *, replace: bool = False) -> AlignmentMethod:
    """Make ``method`` known to :func:`lmc.perm.align`, the CLI verbs and studies.

    A name already taken is refused unless ``replace``; a ``[merge]`` key or flag that would
    collide with another method's is refused."""
    if not isinstance(method, AlignmentMethod):
        raise LmcError(f"register_method takes an AlignmentMethod, got {type(method).__name__}")
    if method.name in _REGISTRY and not replace:
        raise LmcError(f"an alignment method named {method.name!r} is already registered")
    taken = {
        other.study_key(s): other.name
        for other in _REGISTRY.values()
        if other.name != method.name
        for s in other.settings
    }
    for s in method.settings:
        if method.study_key(s) in taken:
            raise LmcError(
                f"setting {s.name!r} of method {method.name!r} would be study key "
                f"{method.study_key(s)!r}, which method {taken[method.study_key(s)]!r} uses"
            )
    _REGISTRY[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Forget a registered method (for tests and plug-ins that replace one)."""
    _REGISTRY.pop(name, None)


def import_package_modules(package: str, path: Sequence[str]) -> list[str]:
    """Import every module of ``package`` (its folders ``path``, as a package's ``__path__``)
    that is not imported yet, in the order of their names, and return their names: the
    methods' modules register their records on import, so a method is its module alone."""
    found = sorted(
        info.name
        for info in pkgutil.iter_modules(path)
        if not info.ispkg and info.name.isidentifier()  # not a copy such as "x copy.py"
    )
    fresh = [name for name in found if f"{package}.{name}" not in sys.modules]
    for name in fresh:
        try:
            importlib.import_module(f"{package}.{name}")
        except (ImportError, LmcError) as exc:
            raise LmcError(
                f"the module {name}.py of {package} ({', '.join(map(str, path))}) does not "
                f"import: {exc}; mend or remove it"
            ) from exc
    return fresh


def get_method(name: str) -> AlignmentMethod:
    """The registered method called ``name`` (``LmcError`` naming the choices otherwise)."""
    if name not in _REGISTRY:
        raise LmcError(f"unknown alignment method {name!r}: choose one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def method_names() -> tuple[str, ...]:
    """Every registered method, ``none`` first, then in registration order."""
    return tuple(sorted(_REGISTRY, key=lambda n: n != "none"))


def all_methods() -> tuple[AlignmentMethod, ...]:
    return tuple(_REGISTRY[n] for n in method_names())


def study_keys() -> dict[str, tuple[AlignmentMethod, MethodSetting]]:
    """``[merge]`` key -> (method, setting), for every registered method."""
    return {m.study_key(s): (m, s) for m in all_methods() for s in m.settings}


#: The method that is the control of the canonical methods (``AlignmentMethod.canonical``).
CANONICAL_CONTROL = "canonical"


def canonical_control_note(methods: Sequence[str], *, widened: bool = False) -> str | None:
    """A one-line note when ``methods`` (a study's ``[merge] methods``) lists a method that
    measures the pair between canonical forms but not their control, :data:`CANONICAL_CONTROL`;
    ``None`` otherwise. Names that are not registered methods (controls such as
    ``random-direction``) are passed over. ``widened``: the pairs are merged across widths
    (``width_ratio`` above 1), where every method, ``none`` included, is measured between
    canonical forms, so ``none`` is the control there and no note is due."""
    canonical = [
        m for m in methods if m in _REGISTRY and m != CANONICAL_CONTROL and _REGISTRY[m].canonical
    ]
    if widened or not canonical or CANONICAL_CONTROL in methods:
        return None
    return (
        f"note: {', '.join(canonical)} measure the pair between the canonical forms but the "
        f"study does not list {CANONICAL_CONTROL!r}, their control (the canonical forms "
        "interpolated without alignment): add it to [merge] methods to tell the alignment's "
        "effect from the reparametrisation's"
    )


__all__ = [
    "NO_LEGACY",
    "AlignJob",
    "CANONICAL_CONTROL",
    "AlignmentMethod",
    "MethodOutput",
    "MethodSetting",
    "MethodStyle",
    "all_methods",
    "canonical_control_note",
    "get_method",
    "import_package_modules",
    "method_names",
    "register_method",
    "study_keys",
    "unregister_method",
]
