"""Whether bfloat16 is native and faster on a device, and what ``precision = "auto"`` means.

A training run's ``precision`` (:class:`lmc.train.TrainSettings`) is ``fp32``, ``bf16``
(bfloat16 autocast of the forward pass) or ``auto``. :func:`resolve_precision` turns ``auto``
into ``bf16`` where bfloat16 is **native** on the training device **and** measured **faster**
than float32 there, else ``fp32``. A run's config (and so its identity, the hash naming its
folder) holds the resolved value, never ``auto``: an ``auto`` run that resolved to fp32 is the
same run as an explicit fp32 one.

- Native: on CUDA, a GPU with bfloat16 arithmetic (compute capability 8.0 or newer,
  ``torch.cuda.is_bf16_supported(including_emulation=False)``); on a CPU, a bfloat16
  instruction set among its flags (x86 ``avx512_bf16`` or ``amx_bf16``, Arm ``bf16``) in
  ``/proc/cpuinfo``. PyTorch's CPU capability (``torch.backends.cpu.get_cpu_capability()``:
  ``AVX2``, ``AVX512``, ...) is reported beside it. Elsewhere PyTorch emulates bfloat16; on
  an AVX2-only CPU a bfloat16 matrix product runs a few hundred times slower than float32.
- Faster: :func:`measure_speedup` times a matrix product in float32 and under bfloat16
  autocast (:data:`TIMED_SHAPES`; one PyTorch thread on CPU, the best of a few calls, well
  under a second) and returns t_fp32 / t_bf16; ``auto`` needs at least :data:`MIN_SPEEDUP`.

The answer (:class:`Bf16Support`) is cached in the process and on disk, in
``$XDG_CACHE_HOME/lmc/precision.json`` (``~/.cache/lmc`` when unset; :func:`cache_file`),
keyed by the torch version, the processor or GPU, its capability and flags, so ``auto``
resolves alike in every process on one machine (a run's identity does not follow timing
noise). Delete the file to measure again.

A request for ``bf16`` on a device where it is emulated (or measured slower) warns once per
process (:class:`lmc.config.LmcWarning`, on stderr), before the training starts, with the
measured slowdown and the fp32 alternative (a different run: another config hash).

Set by the environment (and for tests):

- ``LMC_CPU_CAPABILITY``: the CPU's capability and bfloat16 flags instead of the real ones,
  e.g. ``AVX2`` (an AVX2-only CPU: bfloat16 emulated) or ``AVX512 amx_bf16`` (native).
- ``LMC_AUTO_PRECISION``: ``fp32`` or ``bf16``: what ``auto`` resolves to on this machine,
  without measuring (e.g. one identity for every node of a mixed cluster).
- ``LMC_PRECISION_CACHE``: the cache file instead of the default (empty: no file).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import platform
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .device import resolve_device
from .errors import LmcError, LmcWarning
from .user_cache import cache_place

#: the values a ``precision`` setting takes; ``auto`` is resolved before a run is hashed
PRECISIONS = ("auto", "fp32", "bf16")
#: the precisions a run trains (and its config records) in
TRAINED_PRECISIONS = ("fp32", "bf16")
#: the measured speedup (t_fp32 / t_bf16) ``auto`` needs to pick bf16 on a native device
MIN_SPEEDUP = 1.2
#: the CPU flags that mean bfloat16 arithmetic in hardware (x86: AVX512-BF16, AMX; Arm: BF16)
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
#: the timed matrix product (m, k, n) per device type: (m x k) @ (k x n)
TIMED_SHAPES = {"cpu": (128, 256, 256), "cuda": (1024, 1024, 1024)}
#: seconds of timed calls per precision (after one untimed call; at least 2 calls each)
TIMING_BUDGET = 0.1

CAPABILITY_ENV = "LMC_CPU_CAPABILITY"
AUTO_ENV = "LMC_AUTO_PRECISION"
CACHE_ENV = "LMC_PRECISION_CACHE"
#: set in the environment once the warning was printed, so worker processes started after it
#: (a study's process pool) do not print it again
_WARNED_ENV = "LMC_BF16_WARNED"

_DEVICE: contextvars.ContextVar[torch.device | None] = contextvars.ContextVar(
    "lmc_training_device", default=None
)
_CACHE: dict[tuple, Bf16Support] = {}


@dataclass(frozen=True)
class Bf16Support:
    """What a device does with bfloat16.

    Attributes:
        device: the device type, ``cpu`` or ``cuda``.
        hardware: the processor's model name, or the GPU's name.
        capability: PyTorch's CPU capability (``AVX2``, ``AVX512``, ...) or the GPU's
            ``sm_XY``.
        flags: the bfloat16 CPU flags found (:data:`BF16_FLAGS`); empty on CUDA.
        native: bfloat16 arithmetic in hardware (module docstring).
        speedup: t_fp32 / t_bf16 of the timed matrix product (above 1: bf16 faster); ``None``
            when not measured.
    """

    device: str
    hardware: str
    capability: str
    flags: tuple[str, ...]
    native: bool
    speedup: float | None = None

    @property
    def auto(self) -> str:
        """What ``auto`` trains in here: ``bf16`` when native and at least
        :data:`MIN_SPEEDUP` times faster (measured), else ``fp32``."""
        use = self.native and self.speedup is not None and self.speedup >= MIN_SPEEDUP
        return "bf16" if use else "fp32"

    @property
    def slow(self) -> bool:
        """bf16 is emulated here, or measured slower than fp32: a bf16 request warns."""
        return not self.native or (self.speedup is not None and self.speedup < 1)

    def describe(self) -> str:
        """One phrase, e.g. ``CPU AMD EPYC (AVX2; bfloat16 emulated: no avx512_bf16, amx_bf16
        or Arm bf16)`` or ``CPU ... (AVX512; bfloat16 native: amx_bf16)``."""
        if self.device == "cuda":
            kind = "native" if self.native else "emulated (compute capability below 8.0)"
            return f"GPU {self.hardware} ({self.capability}; bfloat16 {kind})"
        if self.native:
            flags = ", ".join(self.flags)
            return f"CPU {self.hardware} ({self.capability}; bfloat16 native: {flags})"
        return (
            f"CPU {self.hardware} ({self.capability}; bfloat16 emulated: "
            "no avx512_bf16, amx_bf16 or Arm bf16)"
        )


# --------------------------------------------------------------------------- the CPU


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what :mod:`platform` says."""
    match = re.search(r"^(?:model name|Model|Hardware)\s*:\s*(.+)$", _cpuinfo(), re.M)
    name = match.group(1).strip() if match else platform.processor()
    return name or platform.machine() or "unknown"


def cpu_capability() -> str:
    """PyTorch's CPU capability (``AVX2``, ``AVX512``, ``DEFAULT``, ...), or the first word of
    ``$LMC_CPU_CAPABILITY`` when set."""
    given = os.environ.get(CAPABILITY_ENV, "").strip()
    if given:
        return re.split(r"[\s,+]+", given)[0].upper()
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return "unknown"


def cpu_bf16_flags() -> tuple[str, ...]:
    """The bfloat16 flags (:data:`BF16_FLAGS`) of this CPU, from ``/proc/cpuinfo`` (x86
    ``flags``, Arm ``Features``), or those named in ``$LMC_CPU_CAPABILITY`` when set (so
    ``AVX2`` has none)."""
    given = os.environ.get(CAPABILITY_ENV, "").strip()
    if given:
        words = set(re.split(r"[\s,+]+", given.lower()))
    else:
        lines = re.findall(r"^(?:flags|Features)\s*:\s*(.*)$", _cpuinfo(), re.M)
        words = set(lines[0].split()) if lines else set()
    return tuple(flag for flag in BF16_FLAGS if flag in words)


# --------------------------------------------------------------------------- timing


def _best_seconds(call: Callable[[], object], sync: Callable[[], None]) -> float:
    """The fastest of a few timed calls of ``call`` (one untimed first, then for about
    :data:`TIMING_BUDGET` seconds, at least 2 and at most 50)."""
    call()
    sync()
    best, calls, started = float("inf"), 0, time.perf_counter()
    while calls < 2 or (calls < 50 and time.perf_counter() - started < TIMING_BUDGET):
        start = time.perf_counter()
        call()
        sync()
        best = min(best, time.perf_counter() - start)
        calls += 1
    return best


def measure_speedup(device: str | torch.device = "cpu") -> float:
    """t_fp32 / t_bf16 of the :data:`TIMED_SHAPES` matrix product on ``device``: float32, and
    under ``torch.autocast`` to bfloat16 as training runs it (above 1: bf16 is faster). On CPU
    it runs on one PyTorch thread (the caller's count is restored)."""
    device = torch.device(device)
    m, k, n = TIMED_SHAPES[device.type]
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=generator).to(device)
    b = torch.randn(k, n, generator=generator).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def bf16() -> torch.Tensor:
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            return a @ b

    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        with torch.no_grad():
            fp32_seconds = _best_seconds(lambda: a @ b, sync)
            bf16_seconds = _best_seconds(bf16, sync)
    finally:
        torch.set_num_threads(threads)
    return fp32_seconds / max(bf16_seconds, 1e-12)


# --------------------------------------------------------------------------- the answer


def cache_file() -> Path | None:
    """Where measured answers are kept: ``$LMC_PRECISION_CACHE`` when set (empty: nowhere),
    else ``$XDG_CACHE_HOME/lmc/precision.json`` (or ``~/.cache/lmc/precision.json``)."""
    return cache_place(CACHE_ENV, "precision.json")


def _disk_key(support: Bf16Support) -> str:
    parts = (support.device, support.hardware, support.capability, ",".join(support.flags))
    return "|".join(parts) + f"|torch {torch.__version__}"


def _read_disk(key: str) -> float | None:
    path = cache_file()
    if path is None:
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get(key, {}).get("speedup")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _write_disk(key: str, support: Bf16Support) -> None:
    """Add ``support``'s measurement to the cache file (replaced whole; failures ignored)."""
    path = cache_file()
    if path is None:
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    data[key] = {"speedup": support.speedup, "native": support.native}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".precision.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _probe(device: torch.device) -> Bf16Support:
    """What ``device`` is (without timing)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        with torch.cuda.device(index):
            try:
                native = bool(torch.cuda.is_bf16_supported(including_emulation=False))
            except TypeError:  # older PyTorch: no emulation argument
                native = major >= 8
        name = torch.cuda.get_device_name(index)
        return Bf16Support("cuda", name, f"sm_{major}{minor}", (), native)
    flags = cpu_bf16_flags()
    return Bf16Support("cpu", cpu_model(), cpu_capability(), flags, bool(flags))


def bf16_support(
    device: str | torch.device | None = None,
    *,
    measure: bool = True,
    speedup: float | None = None,
) -> Bf16Support:
    """What ``device`` (default: the training device, :func:`training_device`, else the CPU)
    does with bfloat16; with ``measure``, timed (:func:`measure_speedup`) unless cached in
    this process or on disk (:func:`cache_file`). ``speedup``: use this t_fp32 / t_bf16
    instead of a measurement (not cached). Only ``cpu`` and ``cuda`` devices."""
    device = _device(device)
    if device.type not in ("cpu", "cuda"):
        raise LmcError(f"bfloat16 support is known for cpu and cuda devices, not {device.type!r}")
    key = (str(device), os.environ.get(CAPABILITY_ENV, ""))
    support = _CACHE.get(key) or _probe(device)
    if speedup is not None:
        return replace(support, speedup=float(speedup))
    if measure and support.speedup is None:
        disk_key = _disk_key(support)
        cached = _read_disk(disk_key)
        if cached is not None:
            support = replace(support, speedup=cached)
        else:
            support = replace(support, speedup=measure_speedup(device))
            _write_disk(disk_key, support)
    _CACHE[key] = support
    return support


def clear_cache() -> None:
    """Forget this process's answers and warnings (the disk cache stays); for tests."""
    _CACHE.clear()
    os.environ.pop(_WARNED_ENV, None)


# --------------------------------------------------------------------------- resolving


@contextlib.contextmanager
def training_device(device: str | torch.device | None) -> Iterator[torch.device]:
    """Within the block, ``auto`` precision is resolved for ``device`` (``auto``/``None``:
    :func:`lmc.config.resolve_device`) wherever no device is given, as when a run's config is
    made (``lmc.train.make_config``); outside any block, for the CPU."""
    resolved = resolve_device(device)
    token = _DEVICE.set(resolved)
    try:
        yield resolved
    finally:
        _DEVICE.reset(token)


def _device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return _DEVICE.get() or torch.device("cpu")
    return resolve_device(device)


def _times(factor: float) -> str:
    return f"{factor:.0f}x" if factor >= 10 else f"{factor:.1f}x"


#: What a training run's bf16 warning offers instead (:func:`slow_bf16_message`'s default).
TRAINING_FP32 = (
    'lmc train --precision fp32, or precision = "fp32" in a study\'s [train]',
    "trains in float32 at full speed, but it is a different run: another config hash, and "
    "other weights than the bf16 run's. Precision auto picks fp32 on this device",
)


def slow_bf16_message(support: Bf16Support, fp32: tuple[str, str] | None = None) -> str:
    """The warning for a bf16 request on ``support``'s device (:attr:`Bf16Support.slow`).
    ``fp32``: ``(the setting that asks for float32 where the warning was raised, what it
    does)``, e.g. ``("--learned-precision fp32 (learned_precision in a study)", "runs the
    learned alignment's steps in float32 at full speed")``; default a training run's
    (:data:`TRAINING_FP32`: ``lmc train --precision fp32``, another run)."""
    if support.speedup is None:
        measured = "bfloat16 is emulated there, which can be hundreds of times slower"
    elif support.speedup < 1:
        measured = (
            f"a bfloat16 matrix product measured {_times(1 / support.speedup)} slower than "
            "float32 here, so training may take up to that much longer"
        )
    else:
        measured = (
            f"bfloat16 is emulated there (a bfloat16 matrix product measured "
            f"{_times(support.speedup)} the float32 speed; other operations may be far slower)"
        )
    setting, effect = fp32 or TRAINING_FP32
    return (
        f"precision bf16 on {support.describe()}: {measured}. Precision fp32 ({setting}) {effect}"
    )


def warn_slow_bf16(support: Bf16Support, fp32: tuple[str, str] | None = None) -> bool:
    """Warn (:class:`lmc.config.LmcWarning`) that bf16 is emulated or slower on ``support``'s
    device, once per process and device type (and not in worker processes started after the
    warning); returns whether it warned. ``fp32``: what to use instead where it was raised
    (:func:`slow_bf16_message`; default a training run's)."""
    if not support.slow:
        return False
    warned = set(filter(None, os.environ.get(_WARNED_ENV, "").split(",")))
    if support.device in warned:
        return False
    os.environ[_WARNED_ENV] = ",".join(sorted(warned | {support.device}))
    warnings.warn(slow_bf16_message(support, fp32), LmcWarning, stacklevel=3)
    return True


def resolve_precision(
    precision: str,
    device: str | torch.device | None = None,
    *,
    fp32: tuple[str, str] | None = None,
) -> str:
    """``fp32`` or ``bf16``: the precision a run of setting ``precision`` trains in on
    ``device`` (default: the training device, :func:`training_device`, else the CPU).
    ``fp32``: the float32 alternative the slow-bf16 warning names (:func:`slow_bf16_message`;
    default a training run's).

    ``fp32`` stays ``fp32``. ``auto`` is ``$LMC_AUTO_PRECISION`` when set, else
    :attr:`Bf16Support.auto` (bf16 only where native and measured faster; fp32 on devices
    other than CPU and CUDA, and on a CPU without bfloat16 flags without timing anything).
    ``bf16`` stays ``bf16``, with a warning (once) where it is emulated or slower
    (:func:`warn_slow_bf16`); devices other than CPU and CUDA refuse it when training starts.
    """
    if precision not in PRECISIONS:
        raise LmcError(f"unknown precision {precision!r}: choose {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return precision
    if precision == "auto":
        pinned = os.environ.get(AUTO_ENV, "").strip()
        if pinned:
            if pinned not in TRAINED_PRECISIONS:
                raise LmcError(
                    f"{AUTO_ENV}={pinned!r}: set it to {' or '.join(TRAINED_PRECISIONS)}, or unset"
                )
            return pinned
    device = _device(device)
    if device.type not in ("cpu", "cuda"):
        return "fp32" if precision == "auto" else precision
    if precision == "auto":
        support = bf16_support(device, measure=False)
        return support.auto if not support.native else bf16_support(device).auto
    warn_slow_bf16(bf16_support(device), fp32)
    return precision
