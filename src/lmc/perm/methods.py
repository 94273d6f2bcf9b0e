"""Alignment methods as records: one :class:`AlignmentMethod` per method, registered once.

A method is its name, its settings (:class:`MethodSetting`: type, default, meaning, checks),
whether it reads training examples and labels, and its function. Everything else follows from
the records: :func:`lmc.perm.align` checks the settings and calls the function; ``lmc align``,
``lmc interpolate --align`` and ``lmc analyze --align`` get one flag per setting
(``--<method>-<setting>``, e.g. ``--weight-max-iter``); a study's ``[merge]`` table accepts one
key per setting (``<method>_<setting>``, e.g. ``weight_max_iter``) and checks it; the rows of
``docs/studies.md`` are generated from the records (:func:`settings_markdown`).

Adding a method is one module holding its function and one call::

    from lmc.perm.methods import AlignmentMethod, MethodOutput, MethodSetting, register_method

    def shift(job, *, by):            # job: an AlignJob; the settings as keywords
        perm = {g: torch.roll(torch.arange(n), by) for g, n in job.spec.group_sizes.items()}
        return MethodOutput(perm)

    register_method(AlignmentMethod(
        "shift", shift, "roll every group by a fixed offset",
        settings=(MethodSetting("by", 1, "units to roll by", minimum=0),),
    ))

A function returns a :class:`MethodOutput`: an :class:`~lmc.perm.alignment_map.Alignment` (or a
permutation dict, group -> index tensor, new unit i = old unit p[i]) that maps B onto A, and
method-specific extras for the record. ``none`` (the identity) is a method like the others;
so is ``canonical``, the identity between the pair's canonical forms (a method marked
``canonical``): the control of the methods that measure the pair there (``orthogonal``,
``orthogonal-activation``, ``learned``), which tells their alignment's effect from the
reparametrisation's (:func:`canonical_control_note` says when a study lists one without it).

Identities (what a result's id is hashed from): a setting enters the config of an aligned run
(``lmc align``) with its value, unless ``legacy`` is set and the value equals it; it enters a
sweep's merge job only when its value differs from ``legacy`` (or, without one, from its
default), so studies that never named it keep their job ids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError

from .alignment_map import Alignment
from .spec import PermutationSpec

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


@dataclass(frozen=True)
class AlignJob:
    """What a method's function reads: the two models and their states (never modified),
    the symmetry ``spec`` traced from A, the training ``inputs`` (all that were given; only the
    methods that read data get more than two rows) and their ``labels`` (``None`` unless the
    method needs labels and they were given), ``seed``, ``quiet``, the ``task``
    (:mod:`lmc.data.tasks`) the labels belong to, and for a ``canonical`` method ``symmetry``:
    the axis roles of A's spec (a :class:`~lmc.perm.symmetry.SymmetrySpec`; else ``None``)."""

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
class AlignmentMethod:
    """One alignment method (see the module docstring).

    ``function(job, **settings) -> MethodOutput``; ``description``: one line for ``--help`` and
    the docs; ``needs_data``: it reads training examples (not only two rows to trace the
    model); ``needs_labels``: it also reads their targets (implies ``needs_data``);
    ``canonical``: it aligns the pair's canonical forms (:mod:`lmc.perm.canonical`: LayerNorms
    folded, the stream centred, RMSNorms; pre-norm transformers, LayerNorm or RMSNorm, read off
    the traced graph): :func:`lmc.perm.align` canonicalises both models first and the job holds
    the canonical pair, whose stream admits orthogonal maps.
    """

    name: str
    function: Callable[..., MethodOutput]
    description: str
    settings: tuple[MethodSetting, ...] = ()
    needs_data: bool = False
    needs_labels: bool = False
    canonical: bool = False

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise LmcError(f"a method's name is letters, digits, '-' and '_', got {self.name!r}")
        names = [s.name for s in self.settings]
        if len(set(names)) != len(names):
            raise LmcError(f"method {self.name!r} lists a setting twice: {names}")
        if self.needs_labels and not self.needs_data:
            object.__setattr__(self, "needs_data", True)

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


# ---------------------------------------------------------------------------------------------
# the built-in methods: thin adapters over the matching functions


def _weight(job: AlignJob, **settings: Any) -> MethodOutput:
    from .weight_match import weight_matching

    wm = weight_matching(
        job.spec, job.state_a, job.state_b, seed=job.seed, quiet=job.quiet, **settings
    )
    extras = {
        "solver": wm.solver,
        "passes": wm.passes,
        "assignments": wm.assignments,
        "converged": wm.converged,
        "objective_per_pass": list(wm.objective_per_pass),
    }
    if settings["restarts"] > 1:
        extras.update(restart_objectives=list(wm.restart_objectives), best_restart=wm.best_restart)
    return MethodOutput(wm.perm, extras)


def _activation(
    job: AlignJob, *, batch_size: int, statistic: str, max_examples: int | None
) -> MethodOutput:
    from .activation_match import activation_matching

    data = job.inputs if max_examples is None else job.inputs[:max_examples]
    am = activation_matching(
        job.spec,
        job.model_a,
        job.model_b,
        data,
        batch_size=batch_size,
        method=statistic,
        quiet=job.quiet,
    )
    return MethodOutput(am.perm, {"examples": am.examples})


def _ste(job: AlignJob, **settings: Any) -> MethodOutput:
    from .ste import ste_matching

    ste = ste_matching(
        job.spec,
        job.model_a,
        job.model_b,
        job.inputs,
        job.labels,
        seed=job.seed,
        quiet=job.quiet,
        task=job.task,
        **settings,
    )
    extras = {}
    for f in fields(ste):
        if f.name != "perm":
            value = getattr(ste, f.name)
            extras[f"ste_{f.name}"] = list(value) if isinstance(value, tuple) else value
    return MethodOutput(ste.perm, extras)


def _onepass(job: AlignJob) -> MethodOutput:
    from .weight_match import one_pass_matching

    return MethodOutput(one_pass_matching(job.spec, job.state_a, job.state_b).perm)


def _random(job: AlignJob) -> MethodOutput:
    from .ops import random_permutation

    return MethodOutput(random_permutation(job.spec, job.seed))


def _orthogonal(job: AlignJob, *, max_iter: int, tol: float) -> MethodOutput:
    from .orthogonal_match import distance_from_permutation, orthogonal_weight_matching

    om = orthogonal_weight_matching(
        job.symmetry, job.state_a, job.state_b, seed=job.seed, max_iter=max_iter, tol=tol
    )
    extras = {
        "orthogonal_groups": list(om.orthogonal_groups),
        "passes": om.passes,
        "converged": om.converged,
        "objective_per_pass": list(om.objective_per_pass),
        "distance_from_permutation": {
            g: distance_from_permutation(om.alignment[g]) for g in om.orthogonal_groups
        },
    }
    return MethodOutput(om.alignment, extras)


def _orthogonal_activation(
    job: AlignJob, *, batch_size: int, statistic: str, max_examples: int | None
) -> MethodOutput:
    from .orthogonal_activation import orthogonal_activation_matching
    from .orthogonal_match import distance_from_permutation

    data = job.inputs if max_examples is None else job.inputs[:max_examples]
    result = orthogonal_activation_matching(
        job.symmetry, job.model_a, job.model_b, data, batch_size=batch_size,
        statistic=statistic, quiet=job.quiet,
    )  # fmt: skip
    extras = {
        "examples": result.examples,
        "orthogonal_groups": list(result.orthogonal_groups),
        "distance_from_permutation": {
            g: distance_from_permutation(result.alignment[g]) for g in result.orthogonal_groups
        },
    }
    return MethodOutput(result.alignment, extras)


def _learned(job: AlignJob, **settings: Any) -> MethodOutput:
    from .learned import learned_alignment
    from .orthogonal_match import distance_from_permutation

    result = learned_alignment(
        job.symmetry, job.model_a, job.model_b, job.inputs, job.labels, seed=job.seed,
        quiet=job.quiet, task=job.task, **settings,
    )  # fmt: skip
    extras = {
        "learned_groups": list(result.learned_groups),
        "learned_initial_loss": result.initial_loss,
        "learned_best_loss": result.best_loss,
        "learned_best_step": result.best_step,
        "learned_train_losses": list(result.train_losses),
        "learned_holdout": result.holdout,
        "learned_steps_taken": result.steps_taken,
        "learned_precision": result.precision,
        "distance_from_closed_form": result.distance_from_closed_form,
        "distance_from_permutation": {
            g: distance_from_permutation(result.alignment[g])
            for g in result.learned_groups
            if result.alignment[g].kind == "orthogonal" and result.alignment[g].heads == 1
        },
    }
    return MethodOutput(result.alignment, extras)


def _none(job: AlignJob) -> MethodOutput:
    return MethodOutput(Alignment.identity(job.spec))


def _canonical(job: AlignJob) -> MethodOutput:
    """The canonical control: the identity, in the canonical coordinates the job holds."""
    return MethodOutput(Alignment.identity(job.spec))


def _weight_settings() -> tuple[MethodSetting, ...]:
    from .lap import SOLVERS
    from .weight_match import INITS

    return (
        MethodSetting("max_iter", 100, "most coordinate-descent passes", minimum=1),
        MethodSetting(
            "tol",
            1e-4,
            "stop after a pass that raises the matching objective by at most this fraction "
            "(0: run until a pass changes nothing)",
            type=float,
            minimum=0.0,
        ),
        MethodSetting(
            "init",
            "onepass",
            "the start: Git Re-Basin's greedy one-pass answer (higher objectives in less time "
            "on the benchmark MLPs) or the identity (Git Re-Basin's own start)",
            type=str,
            choices=tuple(sorted(INITS, key=lambda init: init != "onepass")),
            legacy="identity",
        ),
        MethodSetting(
            "restarts",
            1,
            "run from K visiting orders and keep the highest objective (about K times the time)",
            minimum=1,
            legacy=1,
        ),
        MethodSetting(
            "solver",
            "auto",
            "the exact linear-assignment solver: auto (lapx on groups of 32 units or more where "
            "it is installed, else scipy), scipy, lapx or sparse; they may break exact ties "
            "differently",
            type=str,
            choices=tuple(SOLVERS),
            legacy="scipy",
        ),
    )


def _activation_settings(
    statistic: str = "what is matched: the cross-correlation or the cross-covariance of units",
) -> tuple[MethodSetting, ...]:
    """The settings of the methods that read features (activation matching, orthogonal
    activation matching); ``statistic``: the meaning of the ``statistic`` setting."""
    from .activation_match import STATISTICS

    return (
        MethodSetting(
            "batch_size",
            256,
            "batch size of the statistics pass",
            minimum=1,
            affects_result=False,
        ),  # fmt: skip
        MethodSetting(
            "statistic",
            "correlation",
            statistic,
            type=str,
            choices=STATISTICS,
        ),
        MethodSetting(
            "max_examples",
            None,
            "at most this many of the training examples it is given (none: all)",
            minimum=1,
            optional=True,
        ),
    )


def _register_builtins() -> None:

    register_method(AlignmentMethod("none", _none, "no alignment: B as it is (the identity)"))
    register_method(
        AlignmentMethod(
            CANONICAL_CONTROL,
            _canonical,
            "the control of orthogonal, orthogonal-activation and learned: both models in the "
            "canonical form (pre-LN transformers: LayerNorms folded), B as it is there (the "
            "identity), so the path is measured where theirs is",
            canonical=True,
        )
    )
    register_method(
        AlignmentMethod(
            "weight",
            _weight,
            "weight matching: coordinate descent on sum <theta_A, pi(theta_B)> (data-free)",
            settings=_weight_settings(),
        )
    )
    register_method(
        AlignmentMethod(
            "activation",
            _activation,
            "activation matching: one assignment per layer on the correlation of A's and B's "
            "features over training examples",
            settings=_activation_settings(),
            needs_data=True,
        )
    )
    register_method(
        AlignmentMethod(
            "ste",
            _ste,
            "straight-through estimator: learns the permutation whose midpoint with A has low "
            "training loss (the best one seen is kept, weight matching's included)",
            settings=(
                MethodSetting(
                    "steps", 200, "Adam steps (0: the weight-matching start, untrained)", minimum=0
                ),
                MethodSetting("lr", 1e-3, "Adam learning rate", type=float, positive=True),
                MethodSetting("batch_size", 128, "training batch size", minimum=1),
                MethodSetting(
                    "holdout",
                    None,
                    "training examples held out to pick the best permutation (none: "
                    "min(1024, 20% of the examples))",
                    minimum=1,
                    optional=True,
                ),
                MethodSetting("max_iter", 100, "weight matching's most passes", minimum=1),
                MethodSetting(
                    "tol", 1e-4, "weight matching's stopping fraction", type=float, minimum=0.0
                ),
            ),
            needs_labels=True,
        )
    )
    register_method(
        AlignmentMethod(
            "random", _random, "a uniformly random valid permutation from the seed (a control)"
        )
    )
    register_method(
        AlignmentMethod(
            "onepass",
            _onepass,
            "Git Re-Basin's greedy one-pass matching (App. A.7): each layer once, input to output",
        )
    )

    register_method(
        AlignmentMethod(
            "orthogonal",
            _orthogonal,
            "orthogonal weight matching of pre-LN transformers: in the canonical form, an "
            "orthogonal map of the residual stream (Procrustes) and permutations of MLP units, "
            "heads and head dims (weight matching), by coordinate descent (data-free)",
            settings=(
                MethodSetting("max_iter", 20, "most coordinate-descent rounds", minimum=1),
                MethodSetting(
                    "tol",
                    1e-10,
                    "stop after a round that raises the matching objective by at most this "
                    "fraction",
                    type=float,
                    minimum=0.0,
                ),
            ),
            canonical=True,
        )
    )
    register_method(
        AlignmentMethod(
            "learned",
            _learned,
            "learned orthogonal alignment of pre-LN transformers: from the orthogonal closed "
            "form, stream and within-head rotations trained on the path's loss at sampled "
            "lambdas (the best on held-out examples kept)",
            settings=(
                MethodSetting("steps", 200, "Adam steps (0: the closed form)", minimum=0),
                MethodSetting(
                    "lr",
                    1e-2,
                    "Adam learning rate (with schedule cosine: its start)",
                    type=float,
                    positive=True,
                ),
                MethodSetting(
                    "schedule",
                    "constant",
                    "the learning rate over the steps: constant, or a half cosine from lr to 0",
                    type=str,
                    choices=("constant", "cosine"),
                    legacy="constant",
                ),
                MethodSetting("batch_size", 64, "training batch size", minimum=1),
                MethodSetting(
                    "lambda_batch",
                    1,
                    "values of lambda per step, stratified over the path, each on its slice "
                    "of the batch (1: one lambda per step)",
                    minimum=1,
                    legacy=1,
                ),
                MethodSetting(
                    "lambdas",
                    "uniform",
                    "where on the path each step's loss is taken: uniform (a fresh lambda in "
                    "[0, 1] per step) or midpoint (1/2)",
                    type=str,
                    choices=("uniform", "midpoint"),
                ),
                MethodSetting(
                    "heads", True, "also learn maps within each head (see head_maps)", type=bool
                ),
                MethodSetting(
                    "head_maps",
                    "orthogonal",
                    "the maps learned within heads: orthogonal, or invertible (q/k and v/out "
                    "admit any invertible map)",
                    type=str,
                    choices=("orthogonal", "invertible"),
                ),
                MethodSetting(
                    "holdout",
                    None,
                    "training examples held out to pick the best map (none: min(1024, 20% of "
                    "the examples))",
                    minimum=1,
                    optional=True,
                ),
                MethodSetting(
                    "evals",
                    10,
                    "judgements of the map on the held-out examples after the closed form's: "
                    "every steps // evals steps and at the end",
                    minimum=1,
                    legacy=10,
                ),
                MethodSetting(
                    "patience",
                    0,
                    "stop after this many held-out judgements in a row without improvement "
                    "(0: take every step)",
                    minimum=0,
                    legacy=0,
                ),
                MethodSetting(
                    "precision",
                    "fp32",
                    "the steps' forward passes: fp32, bf16 (bfloat16 autocast) or auto (bf16 "
                    "where native and faster); the maps and their judgement stay float32",
                    type=str,
                    choices=("fp32", "bf16", "auto"),
                    legacy="fp32",
                ),
                MethodSetting("max_iter", 20, "the closed form's most rounds", minimum=1),
            ),
            needs_labels=True,
            canonical=True,
        )
    )

    register_method(
        AlignmentMethod(
            "orthogonal-activation",
            _orthogonal_activation,
            "orthogonal activation matching of pre-LN transformers: in the canonical form, the "
            "orthogonal map of the residual stream closest on training examples' features "
            "(Procrustes) and activation matching of MLP units, heads and head dims",
            settings=_activation_settings(
                "what MLP units, heads and head dims are matched on: the cross-correlation or "
                "the cross-covariance (the stream always takes the uncentred cross-moment)"
            ),
            needs_data=True,
            canonical=True,
        )
    )


_register_builtins()

__all__ = [
    "NO_LEGACY",
    "AlignJob",
    "CANONICAL_CONTROL",
    "AlignmentMethod",
    "MethodOutput",
    "MethodSetting",
    "all_methods",
    "canonical_control_note",
    "get_method",
    "method_names",
    "register_method",
    "study_keys",
    "unregister_method",
]
