"""The one PyTorch CPU thread count every entry point trains with, and its check.

Light (no torch): ``lmc train --help`` and ``lmc sweep --help`` show the default. The context
that sets the count, :func:`lmc.train.runs.torch_threads`, lives with training.
"""

from __future__ import annotations

from typing import Any

from .errors import LmcError

#: PyTorch CPU threads a training run uses unless told otherwise. ``lmc train`` (``--threads``)
#: and every sweep job (``lmc sweep --threads``, :mod:`lmc.experiments.executors`) take their
#: default from here, so one config gives the same weights, bit for bit, whichever command
#: trained it: on CPU the thread count changes how matrix products and reductions are split,
#: so float rounding (and after a few steps the weights) differs between thread counts. The
#: count is not part of a run's config (adding it would rename every stored run); a run
#: trained with another count lands in the same folder with other last bits.
DEFAULT_THREADS = 1


def check_threads(threads: Any) -> int:
    """``threads`` as a positive int (``None``: :data:`DEFAULT_THREADS`), or ``LmcError``."""
    if threads is None:
        return DEFAULT_THREADS
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise LmcError(f"threads must be a positive whole number, got {threads!r}")
    return threads


__all__ = ["DEFAULT_THREADS", "check_threads"]
