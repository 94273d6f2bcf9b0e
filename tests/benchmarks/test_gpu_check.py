"""scripts/gpu_check.sh in its CPU-only mode (what runs where there is no CUDA; with
--quick, tiny sizes): every check runs on the CPU, the log says what was skipped, exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_its_cpu_halves_and_says_what_it_skipped(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "unused")}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(out), "--quick", "--device", "cpu"],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    log = (out / "gpu_check.log").read_text()
    assert "skipped: every GPU half and every speed-up (--device cpu)" in log
    for arch in ("mlp", "vgg11", "resnet20", "vit", "gpt"):
        assert f"train {arch} (2 steps): cpu " in log, arch
    assert "weight matching (MLP width 32, depth 3): cpu" in log
    assert "path evaluation" in log and "all checks passed" in log
    record = json.loads((out / "gpu_check.json").read_text())
    assert record["cuda"] is False and all(r["ok"] for r in record["records"])
    assert record["records"][5]["cpu"]["recovered"] is True  # the known permutation
    script_log = (out / "gpu_check.sh.log").read_text()
    assert "== the tests marked gpu" in script_log and "exit 0" in script_log
    if not torch.cuda.is_available():
        assert "skipped: no CUDA here; the gpu tests would skip" in script_log
        assert "tests/perm/test_cuda.py" in script_log
