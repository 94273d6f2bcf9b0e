"""Layerwise analysis of a merge: LEWC, LLFC, weak additivity, reciprocal orthogonality,
commutativity, second moments and spectra, streamed through forward hooks.

Path convention: θ(λ) = (1 − λ)θ_A + λθ_B (λ = 0 is A). Definitions: docs/science.md,
"Layerwise connectivity"; record keys: ``RECORD_KEYS`` (the built-in metrics) and
``record_keys()`` (with the metrics registered later).

- Each statistic is one :class:`LayerMetric` record (:mod:`lmc.analysis.layer_metrics`: its
  accumulator, its columns, its table entries, its figure line and report panels); a new one
  is one ``register_layer_metric(...)`` call.

- ``layerwise(model_a, model_b, inputs, lam=0.5, ...) -> list[dict]``: one record per probe
  point per λ.
- ``analyze(...) -> AnalysisResult``: the records plus per-unit second moments and spectra.
- ``gaussian_relu_cosine(dim, samples, seed)`` and ``GAUSSIAN_RELU_LIMIT``: Theorem 5.4.
- :mod:`lmc.analysis.retention`: how much of a run's initial weights survives training
  (``state_retention``, ``pair_retention``, ``run_retention``; W_0 rebuilt by
  ``initial_state``) and its decay budget Σ_t lr_t·wd (``decay_budget``, ``decay_factor``);
  ``analyze(..., init_states=(A_0, B_0))`` adds its ``RETENTION_KEYS`` to the records.
- ``stitch(model_a, model_b, layer)`` and ``stitching_errors(model_a, model_b, data)``:
  stitching without an adapter (LLFC App. B.4), :mod:`lmc.analysis.stitch`.
"""

from .layer_metrics import LayerMetric, record_keys, register_layer_metric
from .layers import apply_weight, has_bias
from .pipeline import RECORD_KEYS, AnalysisResult, analyze, layerwise
from .probes import derive_probe_points, resolve_probe_points
from .retention import (
    RETENTION_KEYS,
    decay_budget,
    decay_factor,
    initial_state,
    pair_retention,
    run_retention,
    state_retention,
)
from .spectra import effective_rank, singular_values, stable_rank
from .stitch import Stitched, num_stitch_layers, stitch, stitch_segments, stitching_errors
from .theory import GAUSSIAN_RELU_LIMIT, gaussian_relu_cosine
from .units import large_unit_overlap, near_zero_fraction

__all__ = [
    "GAUSSIAN_RELU_LIMIT",
    "RECORD_KEYS",
    "RETENTION_KEYS",
    "AnalysisResult",
    "LayerMetric",
    "Stitched",
    "analyze",
    "apply_weight",
    "decay_budget",
    "decay_factor",
    "derive_probe_points",
    "effective_rank",
    "gaussian_relu_cosine",
    "has_bias",
    "initial_state",
    "large_unit_overlap",
    "layerwise",
    "near_zero_fraction",
    "pair_retention",
    "record_keys",
    "register_layer_metric",
    "num_stitch_layers",
    "resolve_probe_points",
    "run_retention",
    "singular_values",
    "stable_rank",
    "state_retention",
    "stitch",
    "stitch_segments",
    "stitching_errors",
]
