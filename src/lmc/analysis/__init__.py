"""Layerwise analysis of a merge: LEWC, LLFC, weak additivity, reciprocal orthogonality,
commutativity, second moments and spectra, streamed through forward hooks.

Path convention: θ(λ) = (1 − λ)θ_A + λθ_B (λ = 0 is A). Definitions: docs/science.md,
"Layerwise connectivity"; record keys: ``RECORD_KEYS``.

- ``layerwise(model_a, model_b, inputs, lam=0.5, ...) -> list[dict]``: one record per probe
  point per λ.
- ``analyze(...) -> AnalysisResult``: the records plus per-unit second moments and spectra.
- ``gaussian_relu_cosine(dim, samples, seed)`` and ``GAUSSIAN_RELU_LIMIT``: Theorem 5.4.
- ``stitch(model_a, model_b, layer)`` and ``stitching_errors(model_a, model_b, data)``:
  stitching without an adapter (LLFC App. B.4), :mod:`lmc.analysis.stitch`.
"""

from .layers import apply_weight, has_bias
from .pipeline import RECORD_KEYS, AnalysisResult, analyze, layerwise
from .probes import derive_probe_points, resolve_probe_points
from .spectra import effective_rank, singular_values, stable_rank
from .stitch import Stitched, num_stitch_layers, stitch, stitch_segments, stitching_errors
from .theory import GAUSSIAN_RELU_LIMIT, gaussian_relu_cosine
from .units import large_unit_overlap, near_zero_fraction

__all__ = [
    "GAUSSIAN_RELU_LIMIT",
    "RECORD_KEYS",
    "AnalysisResult",
    "Stitched",
    "analyze",
    "apply_weight",
    "derive_probe_points",
    "effective_rank",
    "gaussian_relu_cosine",
    "has_bias",
    "large_unit_overlap",
    "layerwise",
    "near_zero_fraction",
    "num_stitch_layers",
    "resolve_probe_points",
    "singular_values",
    "stable_rank",
    "stitch",
    "stitch_segments",
    "stitching_errors",
]
