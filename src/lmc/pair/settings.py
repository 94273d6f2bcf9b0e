"""What a pair study is asked to do: the alignment, the path and the layerwise analysis."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmc.config import LmcError, check_int
from lmc.merge import BN_MODES
from lmc.metrics import PathSettings
from lmc.perm.methods import get_method, method_names

#: The built-in alignment methods, ``none`` first (``lmc.perm.methods.method_names()`` lists
#: every registered one, plug-ins included).
ALIGN_METHODS = method_names()
#: Baselines a pair is measured against: ``none`` (plain averaging) and ``random-direction``
#: (B replaced by A plus a random direction of the same length as B − A).
BASELINES = ("none", "random-direction")
SPLITS = ("test", "train")


def _positive_or_none(name: str, value: int | None, minimum: int = 1) -> None:
    check_int(name, value, minimum=minimum, optional=True)


@dataclass(frozen=True)
class AnalysisOptions:
    """The layerwise analysis at each of ``lambdas`` (see :func:`lmc.analysis.analyze`), streamed
    over at most ``max_examples`` examples of the split (``None``: all) in batches of
    ``batch_size``; ``bn``: the merged model's BatchNorm statistics (auto = reset when the model
    has BatchNorm, reset, repair, none), as in the path."""

    lambdas: Sequence[float] = (0.5,)
    max_examples: int | None = None
    batch_size: int = 256
    bn: str = "auto"

    def __post_init__(self) -> None:
        values = [self.lambdas] if isinstance(self.lambdas, (int, float)) else list(self.lambdas)
        if not values or not all(
            isinstance(v, (int, float)) and math.isfinite(v) and 0.0 <= v <= 1.0 for v in values
        ):
            raise LmcError(f"analysis lambdas must be numbers in [0, 1], got {values!r}")
        object.__setattr__(self, "lambdas", tuple(float(v) for v in values))
        _positive_or_none("analysis max_examples", self.max_examples)
        _positive_or_none("analysis batch_size", self.batch_size)
        if self.bn not in BN_MODES:
            raise LmcError(f"unknown BatchNorm mode {self.bn!r}: choose {', '.join(BN_MODES)}")


@dataclass(frozen=True)
class PairSettings:
    """Everything that changes a pair's numbers, wherever it is run from (CLI or sweep).

    ``align``: align B onto A first with a registered method (none, weight, activation, ste,
    random, onepass, or a plug-in's: :mod:`lmc.perm.methods`) and ``align_options`` (its
    settings, checked against its record);
    activation matching and STE read ``align_examples`` training examples drawn at random
    with ``seed`` (``None``: the whole training split). ``seed`` also seeds weight matching's
    visiting order, STE's batches, the random permutation, the BatchNorm-reset batches and
    the random direction. ``split``: where the path and the analysis are measured;
    ``max_examples``: only the first N examples of it. ``path``: how the path is evaluated
    (:class:`lmc.metrics.PathSettings`); ``baseline``: ``random-direction`` also evaluates
    A → A + ‖B − A‖u for a seeded random unit direction u (a flatness control);
    ``baseline_only``: evaluate that path and not A → B (the sweep's control jobs).
    ``path`` / ``analysis``: ``None`` skips that part. ``stitch``: also measure the error of
    the model that runs A's first l layers and (aligned) B's others, for l = 0..L
    (:func:`lmc.analysis.stitching_errors`, LLFC App. B.4), on the same examples as the path.
    ``widen``: the two models may differ in width (pre-LN transformers: zoo ``gpt`` and
    ``vit``, Hugging Face GPT-2 and ViT): the narrower is embedded exactly into the wider one's
    architecture (:func:`lmc.perm.widen.embed_transformer`) and the pair
    is measured in the canonical form (issue 30: merging a narrow model into a wide one).
    """

    align: str = "none"
    align_examples: int | None = 2000
    align_options: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    split: str = "test"
    max_examples: int | None = None
    path: PathSettings | None = field(default_factory=PathSettings)
    baseline: str = "none"
    baseline_only: bool = False
    analysis: AnalysisOptions | None = None
    stitch: bool = False
    widen: bool = False

    def __post_init__(self) -> None:
        get_method(self.align).resolve(self.align_options)  # the method and its settings
        if self.split not in SPLITS:
            raise LmcError(f"split must be test or train, got {self.split!r}")
        _positive_or_none("align_examples", self.align_examples)
        _positive_or_none("max_examples", self.max_examples, minimum=2)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise LmcError(f"seed must be an integer, got {self.seed!r}")
        if self.baseline not in BASELINES:
            raise LmcError(f"unknown baseline {self.baseline!r}: choose {', '.join(BASELINES)}")
        if self.baseline != "none" and self.path is None:
            raise LmcError("a path baseline needs the path evaluated")
        if self.baseline_only is not False and (
            self.baseline_only is not True or self.baseline == "none"
        ):
            raise LmcError("baseline_only needs a baseline (random-direction) and true or false")
        if not isinstance(self.stitch, bool):
            raise LmcError(f"stitch must be true or false, got {self.stitch!r}")
        if not isinstance(self.widen, bool):
            raise LmcError(f"widen must be true or false, got {self.widen!r}")
        object.__setattr__(self, "align_options", dict(self.align_options))
