"""What made a result: versions, device and machine."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

import torch

import lmc


def cpu_model() -> str:
    """The CPU's model name (Linux: ``model name`` in /proc/cpuinfo; else what ``platform``
    knows, possibly empty). Two machines whose CPUs differ may round floats differently, so
    a run retrained elsewhere need not be the same bits."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def environment_info(device: torch.device | str | None = None) -> dict[str, Any]:
    """Versions of Python, lmc and the numeric libraries, the device and the machine (its CPU
    model and the vector instructions PyTorch's CPU kernels use, which set float rounding)."""
    import numpy
    import scipy

    info: dict[str, Any] = {
        "lmc": lmc.__version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if device is not None:
        dev = torch.device(device)
        info["device"] = str(dev)
        if dev.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(dev)
    return info
