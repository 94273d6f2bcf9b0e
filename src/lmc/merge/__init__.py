"""Merging models: interpolation of whole state dicts, N-model averages, BatchNorm fixes.

Path convention (docs/science.md): theta(lam) = (1 - lam) * theta_A + lam * theta_B; lam = 0 is A.

- :func:`lerp`, :func:`lerp_into`, :func:`lerp_stack`, :func:`average`: state-dict arithmetic
  (floating entries interpolated, integer buffers from the first model; names/shapes checked
  by :func:`lmc.models.compare.check_same_architecture`).
- :func:`merge_many`: N models, optionally aligned to a reference by weight matching, or by
  Git Re-Basin's iterative merge-many (:func:`merge_many_iterative`, App. A.10).
- :func:`reset_batchnorm`, :func:`repair`, :func:`has_batchnorm`, :func:`resolve_bn_mode`:
  what to do with BatchNorm after interpolation (``bn_mode`` in auto/reset/repair/none).
- :class:`Curve` (kinds :data:`PATH_KINDS`: ``line``, ``bezier``, ``chain``; t = 0 is A) and
  :func:`fit_curve` (:class:`CurveSettings`): curves through a trained control point for any
  model (:mod:`lmc.merge.curves`, :mod:`lmc.merge.curve_fit`); :func:`save_curve` /
  :func:`load_curve` store the control point as a run.
"""

from .batchnorm import (
    BN_MODES,
    batchnorm_modules,
    batchnorm_output_stats,
    has_batchnorm,
    repair,
    reset_batchnorm,
    resolve_bn_mode,
)
from .curve_fit import (
    CurveFit,
    CurveSettings,
    curve_config,
    curve_config_for_runs,
    endpoint_record,
    fit_curve,
    load_curve,
    remove_curve_checkpoint,
    save_curve,
)
from .curves import PATH_KINDS, Curve, PathKind, get_path_kind, path_kind_names
from .interpolate import StateDict, average, lerp, lerp_into, lerp_stack
from .many import IterativeMerge, merge_many, merge_many_iterative
from .merge_fn import bn_aware_merge

__all__ = [
    "BN_MODES",
    "Curve",
    "CurveFit",
    "CurveSettings",
    "IterativeMerge",
    "PATH_KINDS",
    "PathKind",
    "StateDict",
    "average",
    "batchnorm_modules",
    "bn_aware_merge",
    "batchnorm_output_stats",
    "curve_config",
    "curve_config_for_runs",
    "endpoint_record",
    "fit_curve",
    "get_path_kind",
    "load_curve",
    "path_kind_names",
    "remove_curve_checkpoint",
    "save_curve",
    "has_batchnorm",
    "lerp",
    "lerp_into",
    "lerp_stack",
    "merge_many",
    "merge_many_iterative",
    "repair",
    "reset_batchnorm",
    "resolve_bn_mode",
]
