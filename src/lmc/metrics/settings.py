"""How a path is evaluated: the lambda grid and :class:`PathSettings`, every option of
:func:`lmc.metrics.evaluate_path` in one validated, frozen object.

Path: theta(lam) = (1 - lam) * theta_A + lam * theta_B; lam = 0 is A, lam = 1 is B.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType

from lmc.config import LmcError, check_choice, check_flag, check_int
from lmc.merge import BN_MODES

from .calibration import CALIBRATIONS
from .engine import ENGINES

_TOL = 1e-9

#: Whether a path is temperature-calibrated when its settings do not say: the one statement of
#: that default, read by every entry point (docs/science.md § Softmax temperature calibration).
#:
#: - ``path``: one path, :class:`PathSettings` / :func:`lmc.metrics.evaluate_path`,
#:   ``lmc interpolate`` (``--calibrate``/``--no-calibrate``): off, since a β fit per λ is extra
#:   work a quick look does not need;
#: - ``width``: a width study's ``[merge] calibrate``: on, since its Table 1 headline is the
#:   calibrated midpoint loss barrier;
#: - ``onset``: an onset study's ``[onset] calibrate``: off, since Git Re-Basin's onset is read
#:   from uncalibrated barriers.
#:
#: The value enters a study's job ids, so changing one changes the ids of studies that rely on
#: it (every committed recipe sets ``calibrate`` itself).
CALIBRATE_DEFAULTS: Mapping[str, bool] = MappingProxyType(
    {"path": False, "width": True, "onset": False}
)


def lambda_grid(lambdas: int | Sequence[float] = 11) -> tuple[list[float], list[float]]:
    """The evaluated grid and the values that were added to it.

    An integer ``N >= 2`` means ``N`` evenly spaced points ``i / (N - 1)`` from 0 to 1. A list is
    sorted and de-duplicated; its values must lie in [0, 1]. In both cases 0, 1 and ½ are added
    when missing (the endpoints define every barrier, ½ the midpoint barriers), and the added
    values are returned as the second element.
    """
    if isinstance(lambdas, bool):
        raise LmcError("lambdas must be a number of points or a list of values, got a bool")
    if isinstance(lambdas, numbers.Integral):
        lambdas = int(lambdas)
        if lambdas < 2:
            raise LmcError(f"a path needs at least 2 lambdas (the endpoints), got {lambdas}")
        values = [i / (lambdas - 1) for i in range(lambdas)]
    else:
        try:
            values = [float(v) for v in lambdas]
        except (TypeError, ValueError) as exc:
            raise LmcError(f"lambdas must be numbers, got {lambdas!r}") from exc
        for v in values:
            if not math.isfinite(v) or v < -_TOL or v > 1 + _TOL:
                raise LmcError(f"lambda {v} is outside [0, 1]; the path runs from A (0) to B (1)")
        values = [min(1.0, max(0.0, v)) for v in values]
    grid: list[float] = []
    for v in sorted(values):
        if not grid or v - grid[-1] > _TOL:
            grid.append(v)
    added = []
    for v in (0.0, 0.5, 1.0):
        if all(abs(v - g) > _TOL for g in grid):
            grid.append(v)
            added.append(v)
    grid.sort()
    for v in (0.0, 0.5, 1.0):  # snap near-hits to the exact value
        grid = [v if abs(g - v) <= _TOL else g for g in grid]
    return grid, added


@dataclass(frozen=True)
class PathSettings:
    """Every option of :func:`lmc.metrics.evaluate_path` (validated; ``LmcError`` names the
    option). Build a variant with ``dataclasses.replace(settings, option=value)``.

    Attributes:
        lambdas: number of evenly spaced points (≥ 2, default 11) or values in [0, 1] (stored
            as a tuple of floats); the grid is :meth:`grid` (0, ½ and 1 always included).
        bn: BatchNorm after interpolation, ``auto``/``reset``/``repair``/``none``
            (:func:`lmc.merge.resolve_bn_mode`).
        bn_batch_size: examples per batch of the BatchNorm statistics passes (≥ 2).
        bn_num_batches: random batches used for those passes (≥ 1), or ``None`` for every
            training input once, in order (:func:`lmc.merge.reset_batchnorm`).
        seed: seed of those random batches.
        reset_endpoints: also reset/repair the endpoints (default: keep their statistics).
        calibrate: fit an inverse temperature per lambda (endpoints included) and report the
            calibrated loss (:mod:`lmc.metrics.calibration`); default
            ``CALIBRATE_DEFAULTS["path"]`` (off).
        calibration: how the split is divided for that (:data:`lmc.metrics.CALIBRATIONS`):
            ``split`` fits beta on a random ``calibration_fraction`` of the split and scores
            the rest (the paper's 20/80); ``crossfit`` cuts the split into
            ``calibration_folds`` folds, fits beta on all folds but one and scores that one, so
            every example is scored once; ``auto`` (the default) cross-fits when the
            calibration subset would hold fewer than 1000 examples (splits under 5000 examples
            at 20%) and splits otherwise (:func:`lmc.metrics.calibration.resolve_calibration`).
            The result records the one used (``PathResult.calibration_method``).
        calibration_folds: K of ``crossfit`` (≥ 2, default 5; unused by ``split``).
        calibration_seed: seed of the calibration subset (:func:`lmc.metrics.calibration_split`)
            or of the folds (:func:`lmc.metrics.crossfit_folds`).
        calibration_fraction: share of the split in the calibration subset, in (0, 1) (``split``;
            ``auto`` also compares that subset's size with its threshold).
        batch_size: examples per forward pass (≥ 1; per lambda in the batched engine), or
            ``None`` for :func:`lmc.metrics.engine.auto_batch_size`.
        method: engine, ``auto``/``batched``/``loop`` (:func:`lmc.metrics.engine.select_engine`).
        max_stack_bytes: bound (≥ 1) on the stacked interior weights held at once (batched).
        fast: let the batched engine use the chain fast path (:mod:`lmc.metrics.chain`) for
            plain chains of Linear layers and activations; ``False``: always ``torch.vmap``.
        quiet: no progress bars.
    """

    lambdas: int | tuple[float, ...] = 11
    bn: str = "auto"
    bn_batch_size: int = 256
    bn_num_batches: int | None = None
    seed: int = 0
    reset_endpoints: bool = False
    calibrate: bool = CALIBRATE_DEFAULTS["path"]
    calibration: str = "auto"
    calibration_folds: int = 5
    calibration_seed: int = 0
    calibration_fraction: float = 0.2
    batch_size: int | None = None
    method: str = "auto"
    max_stack_bytes: int = 1 << 30
    fast: bool = True
    quiet: bool = True

    def __post_init__(self) -> None:
        lambdas = self.lambdas
        if isinstance(lambdas, str):
            raise LmcError(
                f"lambdas must be a number of points or a list of values, got {lambdas!r}"
            )
        if not isinstance(lambdas, (bool, numbers.Integral)):
            try:
                lambdas = tuple(lambdas)
            except TypeError as exc:
                raise LmcError(
                    f"lambdas must be a number of points or a list of values, got {lambdas!r}"
                ) from exc
        lambda_grid(lambdas)  # raises for anything that is not a valid grid
        if isinstance(lambdas, numbers.Integral):
            lambdas = int(lambdas)
        else:
            lambdas = tuple(float(v) for v in lambdas)
        fraction = self.calibration_fraction
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, numbers.Real)
            or not 0.0 < fraction < 1.0
        ):
            raise LmcError(f"calibration_fraction must be in (0, 1), got {fraction!r}")
        values = {
            "lambdas": lambdas,
            "bn": check_choice("bn", self.bn, BN_MODES, "BatchNorm mode"),
            "bn_batch_size": check_int("bn_batch_size", self.bn_batch_size, minimum=2),
            "bn_num_batches": check_int(
                "bn_num_batches", self.bn_num_batches, minimum=1, optional=True
            ),
            "seed": check_int("seed", self.seed, minimum=None),
            "reset_endpoints": check_flag("reset_endpoints", self.reset_endpoints),
            "calibrate": check_flag("calibrate", self.calibrate),
            "calibration": check_choice(
                "calibration", self.calibration, CALIBRATIONS, "calibration"
            ),
            "calibration_folds": check_int("calibration_folds", self.calibration_folds, minimum=2),
            "calibration_seed": check_int("calibration_seed", self.calibration_seed, minimum=None),
            "calibration_fraction": float(fraction),
            "batch_size": check_int("batch_size", self.batch_size, minimum=1, optional=True),
            "method": check_choice("method", self.method, ENGINES, "path evaluation method"),
            "max_stack_bytes": check_int("max_stack_bytes", self.max_stack_bytes, minimum=1),
            "fast": check_flag("fast", self.fast),
            "quiet": check_flag("quiet", self.quiet),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def grid(self) -> tuple[list[float], list[float]]:
        """``(grid, added)``: :func:`lambda_grid` of :attr:`lambdas`."""
        return lambda_grid(self.lambdas)

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The option names, as :func:`lmc.metrics.evaluate_path` accepts them as keywords."""
        return tuple(f.name for f in fields(cls))
