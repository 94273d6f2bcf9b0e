"""The layerwise metrics as records: one :class:`LayerMetric` per statistic of the analysis.

A record carries everything about one statistic: how its accumulator is made at a probe point
(``accumulator``: a factory, ``None`` where the statistic does not apply), whether it depends
on λ (``per_lam``), the record keys it fills (``columns``: each with its meaning and where it
is shown), and its panels in the report's layerwise figure (``report``). Everything that
lists layerwise columns is generated from :data:`LAYER_METRICS`, in registration order:

- :func:`record_keys`: the keys of every record, i.e. the columns of ``layers.csv``
  (identity columns, then each metric's columns, then ``n_examples``);
- :func:`compact_columns`: the table ``lmc analyze`` prints (a column's ``title``);
- :func:`table_columns`: the wide table of :func:`lmc.analysis.output.format_table`
  (a column's ``short`` title);
- :func:`figure_lines`: the lines of ``cosines.png`` (a column's ``label``);
- :func:`report_panels`: the panels of the report's ``layer_cosines`` figure.

Adding a metric is one :func:`register_layer_metric` call. Its accumulator has
``update(batch)`` (once per batch: an :class:`EndpointBatch` for a λ-free metric, a
:class:`MergedBatch` for a ``per_lam`` one) and ``finalize(final) -> dict`` (``final``: a
:class:`ProbeFinal`; the dict's keys are its columns). Definitions: docs/science.md,
"Layerwise connectivity"; conventions of the tensors: :mod:`lmc.analysis.accumulators`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from lmc.config import LmcError
from lmc.models import ProbePoint

from .accumulators import (
    CommutativityStats,
    EndpointStats,
    FeatureGram,
    LewcStats,
    LlfcStats,
    LogitNormStats,
    ReciprocalCosineStats,
    ReciprocalStats,
    WeakAdditivityStats,
    example_rows,
    row_dots,
    unit_rows,
)
from .layers import activation_function, apply_weight, unfolded_sq_norm, weight_distance
from .probes import Capture
from .retention import RETENTION_KEYS, layer_retention
from .spectra import effective_rank, stable_rank
from .theory import GAUSSIAN_RELU_LIMIT
from .units import unit_summary

StateDict = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class Column:
    """One record key of the layerwise analysis (a column of ``layers.csv``).

    ``meaning``: what it is, in a line (docs/science.md defines it). Where it is shown, each
    ``None`` when it is not: ``title`` (its column in the table ``lmc analyze`` prints),
    ``short`` (in :func:`lmc.analysis.output.format_table`), ``label`` (its line in
    ``cosines.png``, a cosine-like value in [-1, 1]), ``note`` (words after the key in the
    printed table's legend). ``fmt``: how the tables print its value (``None``: the table's
    own number format).
    """

    key: str
    meaning: str
    title: str | None = None
    short: str | None = None
    label: str | None = None
    note: str | None = None
    fmt: Callable[[Any], str] | None = None


@dataclass(frozen=True)
class ReportPanel:
    """One panel of the report's layerwise figure (:func:`lmc.report.figures.layer_cosines`):
    the mean over pairs of ``key`` at λ = ½ against the layer, one line per width.

    ``title``: the panel's title; ``axis_label``: its y label (the formula); ``caption``: its
    words in the figure's caption (``""``: none, e.g. when a neighbouring panel's words cover
    it); ``reference``: a dotted horizontal line at that value, labelled ``reference_label``;
    ``floor``: the y axis starts there (``None``: matplotlib's choice).
    """

    key: str
    title: str
    axis_label: str
    caption: str = ""
    reference: float | None = None
    reference_label: str = ""
    floor: float | None = None


class Accumulator(Protocol):
    """What a metric's factory returns: streamed statistics of one probe point."""

    def update(self, batch: Any) -> None: ...

    def finalize(self, final: ProbeFinal) -> dict[str, Any]: ...


@dataclass(frozen=True)
class LayerMetric:
    """One statistic of the layerwise analysis (module doc).

    ``name``: the registry key. ``columns``: the record keys it fills, in ``layers.csv``
    order. ``accumulator``: ``factory(site)`` (λ-free) or ``factory(site, lam)`` (``per_lam``)
    -> an :class:`Accumulator`, or ``None`` where the statistic does not apply at that probe
    point (its columns stay ``None``). ``report``: its panels in the report's layerwise
    figure. ``table``: the keys of the wide table in their order there (default: the columns
    with a ``short`` title, in column order).
    """

    name: str
    columns: tuple[Column, ...]
    accumulator: Callable[..., Accumulator | None]
    per_lam: bool = False
    report: tuple[ReportPanel, ...] = ()
    table: tuple[str, ...] | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """The record keys this metric fills."""
        return tuple(c.key for c in self.columns)


# ---- what an accumulator sees ---------------------------------------------------------------
@dataclass
class ProbeSite:
    """One probe point of a pair of models, as a metric's factory sees it.

    ``weight_module``: A's module holding the point's weight (``None`` without one);
    ``weight_a``/``weight_b``: the two weights; ``activation_module``: A's activation module
    (``None`` without a pre-activation); ``activation``: its short name.
    """

    point: ProbePoint
    weight_module: nn.Module | None
    weight_a: torch.Tensor | None
    weight_b: torch.Tensor | None
    activation_module: nn.Module | None
    activation: str | None

    @property
    def has_weight(self) -> bool:
        return self.weight_module is not None


class EndpointBatch:
    """One batch at one probe point of A and B (λ-free).

    ``cap_a``/``cap_b``: the captures (:class:`lmc.analysis.probes.Capture`); ``f_a``/``f_b``:
    the outputs as example rows (float64); ``aa``/``ab``/``bb``: their per-example inner
    products; :attr:`products`: the bias-free W z products, computed on first use.
    """

    def __init__(self, site: ProbeSite, cap_a: Capture, cap_b: Capture) -> None:
        self.site, self.cap_a, self.cap_b = site, cap_a, cap_b
        self.f_a, self.f_b = example_rows(cap_a.output), example_rows(cap_b.output)
        self.aa, self.ab, self.bb = (
            row_dots(self.f_a, self.f_a),
            row_dots(self.f_a, self.f_b),
            row_dots(self.f_b, self.f_b),
        )
        self._products: dict[str, torch.Tensor] | None = None

    @property
    def products(self) -> dict[str, torch.Tensor]:
        """``aa`` = W_A z_A, ``ab`` = W_A z_B, ``ba`` = W_B z_A, ``bb`` = W_B z_B as unit rows
        (z: the layer inputs; bias-free, the module's own stride and padding); only at a point
        with a weight."""
        if self._products is None:
            site = self.site
            if site.weight_module is None:
                raise LmcError(f"probe point {site.point.name!r} has no weight: no W z products")
            za, zb = self.cap_a.inputs, self.cap_b.inputs
            products = {
                "aa": apply_weight(site.weight_module, site.weight_a, za),
                "ab": apply_weight(site.weight_module, site.weight_a, zb),
                "ba": apply_weight(site.weight_module, site.weight_b, za),
                "bb": apply_weight(site.weight_module, site.weight_b, zb),
            }
            self._products = {k: unit_rows(v) for k, v in products.items()}
        return self._products


class MergedBatch:
    """One batch at one probe point of the merged model θ(λ): ``lam``, ``cap_c`` (its
    capture), ``endpoints`` (the :class:`EndpointBatch` of the same batch) and ``gram`` (the
    :class:`lmc.analysis.accumulators.FeatureGram` of f_A, f_B, f_C)."""

    def __init__(self, lam: float, endpoints: EndpointBatch, cap_c: Capture) -> None:
        self.lam, self.endpoints, self.cap_c = lam, endpoints, cap_c
        e = endpoints
        f_c = example_rows(cap_c.output)
        self.gram = FeatureGram(
            e.aa, e.ab, e.bb, row_dots(e.f_a, f_c), row_dots(e.f_b, f_c), row_dots(f_c, f_c)
        )


@dataclass
class ProbeFinal:
    """What a metric's ``finalize`` may read besides its own sums: the point's ``site``, the
    per-unit root second moments ``moments`` (``{"a": (units,), "b": (units,)}``), the
    singular values ``spectra`` of its weights (``None`` when not computed or without a
    weight), the unit-summary thresholds ``near_zero``/``large_energy``, the endpoints'
    initial states ``init_states`` (``None`` when not given) and ``n_examples``."""

    site: ProbeSite
    moments: dict[str, np.ndarray]
    spectra: dict[str, np.ndarray] | None
    near_zero: float
    large_energy: float
    init_states: tuple[StateDict, StateDict] | None
    n_examples: int


class Streamed:
    """An accumulator of :mod:`lmc.analysis.accumulators` fed by ``feed(stats, batch)``;
    ``finalize`` returns ``stats.finalize()``."""

    def __init__(self, stats: Any, feed: Callable[[Any, Any], None]) -> None:
        self.stats, self.feed = stats, feed

    def update(self, batch: Any) -> None:
        self.feed(self.stats, batch)

    def finalize(self, final: ProbeFinal) -> dict[str, Any]:
        return self.stats.finalize()


class Derived:
    """A metric computed only at the end, ``compute(final) -> dict`` (nothing streamed)."""

    def __init__(self, compute: Callable[[ProbeFinal], dict[str, Any]]) -> None:
        self.compute = compute

    def update(self, batch: Any) -> None:
        pass

    def finalize(self, final: ProbeFinal) -> dict[str, Any]:
        return self.compute(final)


# ---- the registry -----------------------------------------------------------------------------
#: The registered layerwise metrics by name, in registration order (the order of the columns).
LAYER_METRICS: dict[str, LayerMetric] = {}

#: The columns every record starts with (what and where the record is).
IDENTITY_COLUMNS: tuple[Column, ...] = (
    Column("layer", "ℓ, the layer's index from the input (1..L, the logits L)", short="l"),
    Column("name", "the probe point's name", title="layer", short="layer", note="probe point"),
    Column("kind", "the probe point's kind (hidden, block, attention, logits, ...)"),
    Column(
        "lam",
        "λ of the merged model θ(λ) = (1 − λ)θ_A + λθ_B",
        title="lam",
        short="lam",
        note="theta(lam) = (1-lam) theta_A + lam theta_B",
    ),
    Column("units", "the number of units (features per example and position)"),
    Column("activation", "the activation whose weak additivity is measured (None: none)"),
    Column("has_bias", "whether the model has biases"),
)
#: The column every record ends with.
LAST_COLUMNS: tuple[Column, ...] = (Column("n_examples", "examples the statistics are over"),)
#: The identity columns of the printed table and of the wide table, in their order there.
COMPACT_IDENTITY = ("name", "lam")
TABLE_IDENTITY = ("name", "layer", "lam")


def register_layer_metric(metric: LayerMetric) -> LayerMetric:
    """Add ``metric`` to :data:`LAYER_METRICS` (after the ones there) and return it;
    ``LmcError`` when its name is taken by another metric or one of its keys by another
    column."""
    known = LAYER_METRICS.get(metric.name)
    if known is not None and known != metric:
        raise LmcError(f"a layerwise metric named {metric.name!r} is already registered")
    if known is None:
        taken = {c.key for c in all_columns()}
        clash = [key for key in metric.keys if key in taken]
        if clash or len(set(metric.keys)) != len(metric.keys):
            raise LmcError(
                f"layerwise metric {metric.name!r}: column {(clash or list(metric.keys))[0]!r} "
                "is already a column of the records; give it its own name"
            )
    LAYER_METRICS[metric.name] = metric
    return metric


def all_columns() -> tuple[Column, ...]:
    """Every column of a record, in order: identity, each metric's, ``n_examples``."""
    inner = tuple(c for m in LAYER_METRICS.values() for c in m.columns)
    return (*IDENTITY_COLUMNS, *inner, *LAST_COLUMNS)


def column(key: str) -> Column:
    """The :class:`Column` of record key ``key``; ``LmcError`` for an unknown key."""
    for c in all_columns():
        if c.key == key:
            return c
    raise LmcError(f"{key!r} is not a column of the layerwise records")


def record_keys() -> tuple[str, ...]:
    """The keys of every layerwise record, in order: the columns of ``layers.csv``."""
    return tuple(c.key for c in all_columns())


def compact_columns() -> tuple[tuple[str, str], ...]:
    """``(title, key)`` of the table ``lmc analyze`` prints, in order."""
    cols = {c.key: c for c in IDENTITY_COLUMNS}
    inner = [c for m in LAYER_METRICS.values() for c in m.columns if c.title is not None]
    return tuple((c.title, c.key) for c in [*(cols[k] for k in COMPACT_IDENTITY), *inner])


def column_notes() -> dict[str, str]:
    """Record key -> the words after it in the printed table's legend (the keys that have
    some)."""
    return {c.key: c.note for c in all_columns() if c.note is not None}


def column_format(key: str) -> Callable[[Any], str] | None:
    """The format of column ``key`` in the tables (``None``: the table's own)."""
    return next((c.fmt for c in all_columns() if c.key == key), None)


def table_columns() -> tuple[tuple[str, str], ...]:
    """``(key, short title)`` of the wide table (:func:`lmc.analysis.output.format_table`)."""
    by_key = {c.key: c for c in all_columns()}
    keys = list(TABLE_IDENTITY)
    for m in LAYER_METRICS.values():
        keys += m.table if m.table is not None else [c.key for c in m.columns if c.short]
    return tuple((k, by_key[k].short or k) for k in keys)


def figure_lines() -> tuple[tuple[str, str], ...]:
    """``(key, label)`` of the lines of ``cosines.png``, in order."""
    return tuple((c.key, c.label) for m in LAYER_METRICS.values() for c in m.columns if c.label)


def report_panels() -> tuple[ReportPanel, ...]:
    """The panels of the report's layerwise figure, in order."""
    return tuple(p for m in LAYER_METRICS.values() for p in m.report)


# ---- the built-in metrics -------------------------------------------------------------------
def _gram(stats: Any, batch: MergedBatch) -> None:
    stats.update(batch.gram)


def _products(batch: EndpointBatch) -> tuple[torch.Tensor, ...]:
    rows = batch.products
    return rows["aa"], rows["ab"], rows["ba"], rows["bb"]


def _reciprocal_cosine(site: ProbeSite, lam: float) -> Accumulator | None:
    if not site.has_weight:
        return None

    def feed(stats: ReciprocalCosineStats, batch: MergedBatch) -> None:
        merged = apply_weight(site.weight_module, site.weight_a, batch.cap_c.inputs)
        stats.update(unit_rows(merged), batch.endpoints.products["aa"])

    return Streamed(ReciprocalCosineStats(), feed)


def _commutativity(site: ProbeSite) -> Accumulator | None:
    if not site.has_weight:
        return None

    def feed(stats: CommutativityStats, batch: EndpointBatch) -> None:
        za, zb = batch.cap_a.inputs, batch.cap_b.inputs
        diff = unfolded_sq_norm(site.weight_module, za - zb)
        stats.update(*_products(batch), diff, za.shape[0])

    return Streamed(CommutativityStats(weight_distance(site.weight_a, site.weight_b)), feed)


def _ranks(final: ProbeFinal) -> dict[str, Any]:
    sv = final.spectra
    if sv is None:
        return {}
    return {
        "stable_rank_a": stable_rank(sv["a"]),
        "stable_rank_b": stable_rank(sv["b"]),
        "effective_rank_a": effective_rank(sv["a"]),
        "effective_rank_b": effective_rank(sv["b"]),
    }


def _retention(site: ProbeSite) -> Accumulator | None:
    if not site.has_weight:
        return None
    done: dict[str, Any] = {}

    def compute(final: ProbeFinal) -> dict[str, Any]:
        if final.init_states is None:
            return {}
        if not done:  # λ-free: computed once, whatever the number of λs
            init_a, init_b = final.init_states
            key = f"{site.point.weight}.weight"
            missing = [s for s, state in (("A", init_a), ("B", init_b)) if key not in state]
            if missing:
                raise LmcError(
                    f"init_states: the initial state of {missing[0]} has no {key!r}: "
                    "it is of another architecture"
                )
            done.update(
                layer_retention(site.weight_a, site.weight_b, init_a[key], init_b[key], name=key)
            )
        return dict(done)

    return Derived(compute)


_RETENTION_MEANINGS = {
    "init_coef_a": "<W_T, W_0>/|W_0|^2 of A: the coefficient of A's initial weights",
    "init_coef_b": "the same for B",
    "init_share_a": "|cos(W_T, W_0)| of A: the share of A's weights along its initial ones",
    "init_share_b": "the same for B",
    "init_shared_energy_a": "A_0's energy in the top-k singular subspaces of A_T + B_T",
    "init_shared_energy_b": "the same for B_0",
    "init_shared_rank": "k of the shared subspaces",
    "init_shared_chance": "k^2/(rows·cols): the shared energy of a random matrix",
}

BUILTIN_LAYER_METRICS: tuple[LayerMetric, ...] = (
    LayerMetric(
        "lewc",
        (
            Column(
                "lewc_cosine",
                "E_x cos(f_C, t), t = (1 − λ)^ℓ f_A + λ^ℓ f_B",
                title="LEWC cos",
                short="lewc",
                label="LEWC",
            ),
            Column(
                "lewc_relative_error",
                "‖f_C − t‖_F / ‖t‖_F over the split",
                title="LEWC err",
                short="lewc_err",
            ),
            Column("lewc_coef_a", "a of the least squares f_C ≈ a f_A + b f_B", short="a"),
            Column("lewc_coef_b", "b of the same fit", short="b"),
            Column("lewc_expected_a", "(1 − λ)^ℓ, LEWC's prediction of a", short="(1-lam)^l"),
            Column("lewc_expected_b", "λ^ℓ, LEWC's prediction of b", short="lam^l"),
        ),
        lambda site, lam: Streamed(LewcStats(lam, site.point.layer), _gram),
        per_lam=True,
        report=(
            ReportPanel(
                "lewc_cosine",
                "LEWC cosine at λ = ½",
                r"$\cos(f_\ell(\theta_{1/2}),\ f_\ell^A + f_\ell^B)$",
                caption="LEWC cosine of the merged model's layer output against the ensemble's",
            ),
        ),
        table=(
            "lewc_cosine",
            "lewc_relative_error",
            "lewc_coef_a",
            "lewc_expected_a",
            "lewc_coef_b",
            "lewc_expected_b",
        ),
    ),
    LayerMetric(
        "llfc",
        (
            Column(
                "llfc_cosine",
                "E_x cos(f_C, s), s = (1 − λ)f_A + λf_B",
                title="LLFC cos",
                short="llfc",
                label="LLFC",
            ),
            Column("llfc_scale", "c of the least squares f_C ≈ c·s", short="c"),
        ),
        lambda site, lam: Streamed(LlfcStats(lam), _gram),
        per_lam=True,
    ),
    LayerMetric(
        "endpoint",
        (
            Column(
                "endpoint_cosine",
                "E_x cos(f_A, f_B), the baseline of LLFC",
                title="A-B cos",
                short="endpoint",
                label="endpoints A vs B",
            ),
        ),
        lambda site: Streamed(EndpointStats(), lambda s, b: s.update(b.aa, b.ab, b.bb)),
    ),
    LayerMetric(
        "weak_additivity",
        (
            Column(
                "weak_additivity_cosine",
                "E cos(σ((z~_A + z~_B)/2), (σ(z~_A) + σ(z~_B))/2) over unit rows",
                title="weak-add",
                short="weak_add",
                label="weak additivity",
            ),
            Column(
                "sign_agreement",
                "the fraction of pre-activation entries with z~_A·z~_B ≥ 0",
                title="signs",
                short="signs",
            ),
        ),
        lambda site: (
            None
            if site.activation_module is None
            else Streamed(
                WeakAdditivityStats(activation_function(site.activation_module)),
                lambda s, b: s.update(b.cap_a.pre, b.cap_b.pre),
            )
        ),
        report=(
            ReportPanel(
                "weak_additivity_cosine",
                "weak additivity of the activation",
                r"$\cos(\sigma((\tilde z^A{+}\tilde z^B)/2),\ "
                r"(\sigma(\tilde z^A){+}\sigma(\tilde z^B))/2)$",
                caption=(
                    "weak additivity of the activation (dotted: Theorem 5.4's Gaussian limit "
                    f"{GAUSSIAN_RELU_LIMIT:.3f}; values above it point to low rank)"
                ),
                reference=GAUSSIAN_RELU_LIMIT,
                reference_label=f"Thm 5.4 limit {GAUSSIAN_RELU_LIMIT:.3f}",
            ),
        ),
    ),
    LayerMetric(
        "reciprocal",
        (
            Column(
                "reciprocal_ratio",
                "E‖W_A z_B‖ / E‖W_A z_A‖",
                title="recip",
                short="recip",
            ),
            Column("reciprocal_ratio_ba", "E‖W_B z_A‖ / E‖W_B z_B‖", short="recip_ba"),
        ),
        lambda site: (
            Streamed(ReciprocalStats(), lambda s, b: s.update(*_products(b)))
            if site.has_weight
            else None
        ),
    ),
    LayerMetric(
        "reciprocal_cosine",
        (
            Column(
                "reciprocal_cosine",
                "E cos(W_A z_C, W_A z_A), z_C the merged model's layer input",
                short="recip_cos",
                label="reciprocal cos(W_A z_C, W_A z_A)",
            ),
        ),
        _reciprocal_cosine,
        per_lam=True,
        report=(
            ReportPanel(
                "reciprocal_cosine",
                "reciprocal cosine",
                r"$\cos(W^A z^C,\ W^A z^A)$",
                caption="the reciprocal cosine and ratio",
            ),
            ReportPanel(
                "reciprocal_ratio",
                "reciprocal ratio",
                r"$E\|W^A z^B\| \ /\ E\|W^A z^A\|$",
                floor=0.0,
            ),
        ),
    ),
    LayerMetric(
        "commutativity",
        (
            Column(
                "commutativity_distance",
                "‖(W_A − W_B)(H_A − H_B)‖_F / √N",
            ),
            Column(
                "commutativity_relative",
                "‖(W_A − W_B)(H_A − H_B)‖_F / (‖W_A − W_B‖_F ‖H_A − H_B‖_F), 0 = commuting",
                title="comm",
                short="comm_rel",
            ),
            Column(
                "commutativity_vs_features",
                "‖(W_A − W_B)(H_A − H_B)‖_F / ‖W_A H_A + W_B H_B‖_F",
            ),
            Column("weight_distance", "‖W_A − W_B‖_F"),
            Column("input_distance", "‖H_A − H_B‖_F / √N"),
        ),
        _commutativity,
    ),
    LayerMetric(
        "units",
        (
            Column(
                "near_zero_fraction_a",
                "A's share of units with √E[z~_i²] below near_zero × the largest",
                short="near0_a",
            ),
            Column("near_zero_fraction_b", "the same for B"),
            Column("large_unit_fraction_a", "A's share of units holding large_energy of E‖z~‖²"),
            Column("large_unit_fraction_b", "the same for B"),
            Column(
                "large_unit_overlap", "Jaccard index of A's and B's large units", short="overlap"
            ),
        ),
        lambda site: Derived(
            lambda f: unit_summary(
                f.moments["a"], f.moments["b"], near_zero=f.near_zero, energy=f.large_energy
            )
        ),
    ),
    LayerMetric(
        "ranks",
        (
            Column("stable_rank_a", "‖W_A‖_F² / ‖W_A‖_2²"),
            Column("stable_rank_b", "the same for W_B"),
            Column(
                "effective_rank_a",
                "exp of the entropy of W_A's normalised spectrum",
                short="erank_a",
            ),
            Column("effective_rank_b", "the same for W_B", short="erank_b"),
        ),
        lambda site: Derived(_ranks),
    ),
    LayerMetric(
        "retention",
        tuple(Column(key, _RETENTION_MEANINGS[key]) for key in RETENTION_KEYS),
        _retention,
    ),
    LayerMetric(
        "logit_norm",
        (
            Column("logit_norm", "E‖f_C‖ at the logits"),
            Column("logit_norm_a", "E‖f_A‖"),
            Column("logit_norm_b", "E‖f_B‖"),
            Column("logit_norm_lewc", "E‖(1 − λ)^L f_A + λ^L f_B‖, LEWC's prediction"),
        ),
        lambda site, lam: (
            Streamed(LogitNormStats(lam, site.point.layer), _gram)
            if site.point.kind == "logits"
            else None
        ),
        per_lam=True,
    ),
)

for _metric in BUILTIN_LAYER_METRICS:
    register_layer_metric(_metric)

__all__ = [
    "BUILTIN_LAYER_METRICS",
    "IDENTITY_COLUMNS",
    "LAYER_METRICS",
    "Accumulator",
    "Column",
    "Derived",
    "EndpointBatch",
    "LayerMetric",
    "MergedBatch",
    "ProbeFinal",
    "ProbeSite",
    "ReportPanel",
    "Streamed",
    "all_columns",
    "column",
    "column_format",
    "column_notes",
    "compact_columns",
    "figure_lines",
    "record_keys",
    "register_layer_metric",
    "report_panels",
    "table_columns",
]
