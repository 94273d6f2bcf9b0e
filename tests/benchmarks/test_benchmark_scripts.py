"""The benchmark scripts still run (they are run on demand, so nothing else would notice one
breaking): a one-block GPT-2 through benchmarks/gpt2_matching.py recovers a known permutation."""

from __future__ import annotations

import pytest


def test_gpt2_matching_benchmark_runs_and_recovers_a_known_permutation(run_benchmark):
    """In-process, on a GPT-2-shaped model small enough for a test (same code as GPT-2 small)."""
    pytest.importorskip("transformers")
    args = ["--n-layer", "1", "--n-embd", "64", "--n-head", "4",
            "--vocab", "512", "--known", "--threads", "1"]  # fmt: skip
    out = run_benchmark("gpt2_matching", *args)
    assert "GPT-2: 1 blocks, width 64, 4 heads, vocabulary 512" in out
    assert "known permutation recovered exactly: True" in out
    assert "memory (RSS):" in out and "weight matching:" in out


def test_train_throughput_gpt_mode_reports_tokens_per_second(run_benchmark):
    """In-process (a new interpreter would cost more than the run): two tiny widths, one
    timed repeat; a row per width with both precisions' tokens/s and their ratio."""
    args = ["--model", "gpt", "--widths", "16,32", "--steps", "2",
            "--repeats", "1", "--context", "8", "--batch-size", "4", "--vocab", "11"]  # fmt: skip
    lines = run_benchmark("train_throughput", *args).splitlines()
    assert "tokens/step" in lines[0] and "bf16/fp32" in lines[1]
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["16", "32"]
    assert all(float(r[1]) > 0 and float(r[2]) > 0 and r[3].endswith("x") for r in rows)


def test_learned_alignment_benchmark_reports_both_methods(run_benchmark):
    args = ["--widths", "8", "--learned", "steps=2", "--repeats", "1",
            "--examples", "20", "--context", "6", "--vocab", "11", "--heads", "2"]  # fmt: skip
    lines = run_benchmark("learned_alignment", *args).splitlines()
    assert lines[1].startswith("learned legacy:") and "steps 200" in lines[1]
    assert lines[2].startswith("learned fast:") and "steps 2," in lines[2]  # --learned applies
    assert "legacy/closed" in lines[3] and "fast/closed" in lines[3]
    width, closed, legacy, legacy_ratio, fast, fast_ratio, *_, before, kept, kept_fast = lines[
        4
    ].split()
    assert width == "8" and float(closed) > 0 and float(legacy) > 0 and float(fast) > 0
    assert legacy_ratio.endswith("x") and fast_ratio.endswith("x")
    # the kept map is never worse than the closed form on the held-out midpoint loss
    assert float(kept) <= float(before) and float(kept_fast) <= float(before)


def test_weight_matching_benchmark_times_every_solver_on_the_same_assignments(run_benchmark):
    """In-process, two tiny MLPs: the comparison row, and ``--solvers`` timing every available
    solver on the run's assignments with none missing SciPy's optimum."""
    from lmc.perm.lap import lapx_problem

    args = ["--mlp-widths", "48", "--resnet-widths", "", "--epochs", "1",
            "--examples", "64", "--repeats", "1", "--solvers"]  # fmt: skip
    out = run_benchmark("weight_matching", *args)
    assert "lmc from the one-pass answer (--init onepass) with solver auto" in out
    row = next(line for line in out.splitlines() if line.startswith("mlp w=48"))
    cells = row.split()
    obj_id, obj_ref, obj_lmc = (float(v) for v in cells[9:12])
    assert cells[5].endswith("x") and obj_ref >= obj_id and obj_lmc >= obj_id
    solvers = next(line for line in out.splitlines() if "LAP solvers on the" in line)
    assert "scipy" in solvers and "missed" not in solvers.replace("lapjvs(float32)", "")
    if lapx_problem() is None:
        assert "lapx.lapjvr" in solvers


def test_assignment_overlap_benchmark_times_each_solver_alone_and_overlapped(run_benchmark):
    """In-process on a tiny similarity: a row per solver with the four timings and the saving."""
    args = ["--n", "64", "--k", "16", "--products", "2",
            "--repeats", "1", "--threads", "1"]  # fmt: skip
    lines = run_benchmark("assignment_overlap", *args).splitlines()
    assert "1 threads; n=64, k=16, 2 products" in lines[0]
    rows = [line.split() for line in lines[2:-1]]
    assert rows[0][0] == "scipy" and all(len(r) == 6 for r in rows)
    for _, lap_s, prod_s, total, both, saved in rows:
        assert float(total) == pytest.approx(float(lap_s) + float(prod_s), abs=2e-3)
        assert float(both) >= 0 and saved.endswith("%")  # a tiny case may print 0.000
