"""What made a result: versions, device and machine."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

import torch

import lmc


def environment_info(device: torch.device | str | None = None) -> dict[str, Any]:
    """Versions of Python, lmc and the numeric libraries, the device and the machine."""
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
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if device is not None:
        dev = torch.device(device)
        info["device"] = str(dev)
        if dev.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(dev)
    return info
