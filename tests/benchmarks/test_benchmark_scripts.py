"""The benchmark scripts still run (they are run on demand, so nothing else would notice one
breaking): a one-block GPT-2 through benchmarks/gpt2_matching.py recovers a known permutation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_gpt2_matching_benchmark_runs_and_recovers_a_known_permutation():
    pytest.importorskip("transformers")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpt2_matching.py"), "--n-layer", "1",
         "--known", "--threads", "1"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "known permutation recovered exactly: True" in done.stdout
    assert "memory (RSS):" in done.stdout and "weight matching:" in done.stdout
