"""lmc.stats on exact cases: cells, paired and Welch comparisons against hand computations and
SciPy, per-pair ratios, the verdict vocabulary and the number format."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from lmc import stats
from lmc.config import LmcError

T2 = float(sps.t.ppf(0.975, 2))  # t_{0.975, 2}: three pairs


def test_cell_mean_std_and_interval_by_hand():
    cell = stats.summarize([1.0, 2.0, 4.0])
    assert cell.n == 3
    assert cell.mean == pytest.approx(7 / 3)
    std = math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)  # ddof = 1
    assert cell.std == pytest.approx(std)
    assert cell.half_width == pytest.approx(T2 * std / math.sqrt(3))
    assert cell.interval == pytest.approx((7 / 3 - cell.half_width, 7 / 3 + cell.half_width))
    assert stats.cell_text(cell) == f"2.3 ± {T2 * std / math.sqrt(3):.1f} (n = 3)"


def test_one_value_has_no_interval_and_nan_is_left_out():
    cell = stats.summarize({0: 0.178, 1: math.nan})
    assert cell.n == 1 and cell.mean == 0.178
    assert math.isnan(cell.std) and math.isnan(cell.half_width)
    assert stats.cell_text(cell) == "0.178 (n = 1, no interval)"
    assert stats.cell_text(stats.summarize([])) == "no value (n = 0)"
    assert math.isnan(stats.half_width(0.1, 1))


def test_paired_difference_known_per_pair_values():
    """Per-pair differences b − a are exactly −0.07, −0.071, −0.069: mean −0.07, sd 0.001."""
    a = {"p0": 1.0, "p1": 2.0, "p2": 3.0}
    b = {"p0": 0.93, "p1": 1.929, "p2": 2.931}
    c = stats.compare(a, b)
    assert c.paired and c.n == 3 and c.df == 2
    assert c.mean == pytest.approx(-0.07, abs=1e-12)
    assert c.std == pytest.approx(0.001, rel=1e-6)
    assert c.half_width == pytest.approx(T2 * 0.001 / math.sqrt(3), rel=1e-6)
    assert (c.higher, c.lower, c.left_out) == (0, 3, 0)
    assert c.differences == pytest.approx({"p0": -0.07, "p1": -0.071, "p2": -0.069})
    assert c.direction == "lower"
    # the difference is second − first: swapping the cells flips its sign and word
    assert stats.compare(b, a).mean == pytest.approx(0.07) and stats.compare(b, a).higher == 3
    # a difference in every pair with a tight interval
    assert stats.verdict(c) == "lower in every pair: −0.0700 ± 0.0025 (3 pairs, p < 0.001)"
    assert str(c) == stats.verdict(c)


def test_paired_p_and_interval_match_scipy_ttest_rel():
    a = [0.31, 0.27, 0.40, 0.22, 0.35]
    b = [0.25, 0.26, 0.30, 0.24, 0.28]
    c = stats.compare(stats.keyed(range(5), a), stats.keyed(range(5), b))
    ref = sps.ttest_rel(b, a)
    assert c.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    low, high = ref.confidence_interval(0.95)
    assert c.interval == pytest.approx((low, high), rel=1e-10)
    assert (c.higher, c.lower) == (1, 4)


def test_welch_interval_df_and_p_match_scipy():
    a = [1.1, 2.3, 2.9, 4.2]
    b = [2.0, 3.9, 4.1, 5.5, 6.8]
    c = stats.compare(a, b)  # plain sequences carry no pair keys: unpaired
    assert not c.paired and c.higher is None and c.lower is None
    assert (c.n, c.n_first, c.n_second) == (4, 4, 5)
    va, vb = np.var(a, ddof=1) / 4, np.var(b, ddof=1) / 5
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 4)  # Welch–Satterthwaite, by hand
    assert c.df == pytest.approx(df, rel=1e-12)
    assert c.mean == pytest.approx(np.mean(b) - np.mean(a))
    assert c.half_width == pytest.approx(sps.t.ppf(0.975, df) * math.sqrt(va + vb), rel=1e-12)
    ref = sps.ttest_ind(b, a, equal_var=False)
    assert c.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    assert c.interval == pytest.approx(tuple(ref.confidence_interval(0.95)), rel=1e-10)
    assert c.df == pytest.approx(ref.df, rel=1e-12)


def test_cells_without_shared_pairs_are_compared_by_welch():
    a = {"a0": 1.0, "a1": 2.0, "a2": 3.0}
    b = {"b0": 4.0, "b1": 5.5, "b2": 6.0}
    c = stats.compare(a, b)
    assert not c.paired
    assert c.p_value == pytest.approx(sps.ttest_ind([4, 5.5, 6], [1, 2, 3], equal_var=False).pvalue)
    assert c.direction == "higher"
    assert stats.verdict(c).startswith("higher (unpaired, Welch): +3.2 ± ")
    assert "(n = 3 and 3, p = " in stats.verdict(c)


def test_pairs_in_one_cell_only_are_left_out_of_a_paired_comparison():
    a = {0: 1.0, 1: 2.0, 2: 3.0, 3: 9.0}
    b = {0: 1.5, 1: 2.5, 2: math.nan, 4: 0.0}
    c = stats.compare(a, b)
    assert c.paired and c.n == 2 and c.left_out == 3  # pair 2 (NaN), 3 and 4
    assert c.differences == {0: 0.5, 1: 0.5}


def test_two_pairs_give_too_few_pairs_and_no_verdict():
    c = stats.compare({0: 1.0, 1: 2.0}, {0: 0.5, 1: 1.2})
    assert c.n == 2 and c.direction == "too few pairs"
    assert stats.verdict(c) == "too few pairs (n = 2 < 3): no verdict"
    welch = stats.compare([1.0, 2.0], [5.0, 6.0, 7.0, 8.0])  # the smaller cell decides
    assert stats.verdict(welch) == "too few pairs (n = 2 < 3): no verdict"
    r = stats.ratios({0: 1.0, 1: 2.0}, {0: 2.0, 1: 4.0}, threshold=0.1)
    assert stats.ratio_verdict(r) == "too few pairs (n = 2 < 3): no verdict"


def test_interval_straddling_zero_says_no_difference_and_what_it_admits():
    """Differences −0.1, −0.2, −0.3: mean −0.2, sd 0.1, h = t·0.1/√3 ≈ 0.248 > 0.2."""
    a = {0: 1.0, 1: 2.0, 2: 3.0}
    b = {0: 0.9, 1: 1.8, 2: 2.7}
    c = stats.compare(a, b)
    h = T2 * 0.1 / math.sqrt(3)
    assert c.half_width == pytest.approx(h)
    assert c.direction == "no difference detected"
    assert c.admitted == pytest.approx(0.2 + h)  # max(|low|, |high|)
    p = sps.ttest_rel([0.9, 1.8, 2.7], [1.0, 2.0, 3.0]).pvalue
    assert stats.verdict(c) == (
        f"no difference detected: −0.20 ± {h:.2f} (higher in 0 of 3 pairs, p = {p:#.2g}); "
        f"the interval admits ±{0.2 + h:.2f}"
    )


def test_difference_in_most_but_not_every_pair():
    a = {k: 0.0 for k in range(5)}
    b = dict(enumerate([0.30, 0.25, 0.35, 0.28, -0.01]))
    c = stats.compare(a, b)
    assert c.direction == "higher" and (c.higher, c.lower) == (4, 1)
    assert stats.verdict(c).startswith("higher in 4 of 5 pairs: +")


def test_same_shift_in_every_pair_has_a_zero_width_interval():
    c = stats.compare({0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.5, 1: 2.5, 2: 3.5})
    assert c.half_width == 0.0 and c.p_value == 0.0 and c.direction == "higher"
    assert stats.verdict(c) == "higher in every pair: +0.500 ± 0 (3 pairs, p < 0.001)"


def test_ratios_are_taken_per_pair():
    num = {0: 0.05, 1: 0.2, 2: 0.08, 3: 0.3, 4: 1.0}
    den = {0: 1.0, 1: 1.0, 2: 0.5, 3: 3.0, 4: 0.0}  # pair 4: zero denominator, left out
    r = stats.ratios(num, den, threshold=0.1)
    per_pair = [0.05, 0.2, 0.16, 0.1]
    assert r.ratios == pytest.approx(dict(enumerate(per_pair)))
    assert r.n == 4 and r.left_out == 1 and r.above == 2  # 0.1 itself is not above 0.1
    assert r.cell.mean == pytest.approx(np.mean(per_pair))  # not the ratio of the means
    assert r.cell.mean != pytest.approx(sum(list(num.values())[:4]) / sum(list(den.values())[:4]))
    h = sps.t.ppf(0.975, 3) * np.std(per_pair, ddof=1) / 2
    assert r.cell.half_width == pytest.approx(h)
    assert stats.ratio_verdict(r) == f"above 0.1 in 2 of 4 pairs: {np.mean(per_pair):.2f} ± {h:.2f}"
    low = stats.ratios({0: 0.01, 1: 0.02, 2: 0.05}, {0: 1.0, 1: 1.0, 2: 1.0})
    assert low.above is None
    assert stats.ratio_verdict(low, 0.1).startswith("at most 0.1 in every pair: ")
    assert stats.ratio_verdict(low, 0.001).startswith("above 0.001 in every pair: ")
    with pytest.raises(LmcError, match="threshold"):
        stats.ratio_verdict(low)
    with pytest.raises(LmcError, match="per pair"):
        stats.ratios([1.0, 2.0], {0: 1.0, 1: 1.0})


def test_number_format():
    assert stats.fmt_estimate(-0.07123, 0.01339, signed=True) == "−0.071 ± 0.013"
    assert stats.fmt_estimate(0.07123, 0.01339, signed=True) == "+0.071 ± 0.013"
    assert stats.fmt_estimate(0.07123, 0.01339) == "0.071 ± 0.013"
    assert stats.fmt_estimate(1234.4, 56.0) == "1234 ± 56"
    assert stats.fmt_estimate(0.1234) == "0.123"
    assert stats.fmt_estimate(-12.345) == "−12.3"
    assert stats.fmt_estimate(-0.0004, 0.02, signed=True) == "0.000 ± 0.020"  # rounds to zero
    # below 1e-4 the same digits in scientific notation, not a row of zeros
    assert stats.fmt_estimate(-4e-11, 1.3e-10, signed=True) == "−4e−11 ± 1.3e−10"
    assert stats.fmt_estimate(4.2e-11, 1.3e-10, signed=True) == "+4e−11 ± 1.3e−10"
    assert stats.fmt_estimate(1.23e-4, 5.67e-5) == "0.000123 ± 5.7e−5"
    assert stats.fmt_estimate(0.5, 1e-6) == "0.5000000 ± 1.0e−6"  # only numbers below 1e-4
    assert stats.fmt_estimate(3e-13, 1.3e-10, signed=True) == "0 ± 1.3e−10"  # rounds to zero
    assert stats.fmt_estimate(-5.004e-7) == "−5.00e−7"
    assert stats.fmt_estimate(0.00012345) == "0.000123"  # 1e-4 and up: fixed
    tiny = stats.compare({0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.0 + 1e-11, 1: 2.0 - 3e-11, 2: 3.0 + 5e-11})
    assert "0.0000000" not in stats.verdict(tiny) and "e−1" in stats.verdict(tiny)
    assert stats.fmt_p(0.0034567) == "p = 0.0035"
    assert stats.fmt_p(0.5) == "p = 0.50"
    assert stats.fmt_p(0.03) == "p = 0.030"
    assert stats.fmt_p(0.0009) == "p < 0.001"
    assert stats.fmt_p(math.nan) == "p = nan"


def test_keyed_checks_its_inputs():
    assert stats.keyed(["s0", "s1"], [1, 2]) == {"s0": 1.0, "s1": 2.0}
    with pytest.raises(LmcError, match="one key per value"):
        stats.keyed([0, 1], [1.0])
    with pytest.raises(LmcError, match="repeat"):
        stats.keyed([0, 0], [1.0, 2.0])
    with pytest.raises(LmcError, match="not a number"):
        stats.summarize({0: "abc"})


def test_docs_define_every_verdict_the_code_writes():
    """Each verdict's words (its text before the numbers) appear in docs/science.md's section
    "Statistics and verdicts"."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "science.md").read_text()
    section = doc[doc.index("## Statistics and verdicts") :]
    section = section[: section.index("\n## ", 1)]
    three = {0: 1.0, 1: 2.0, 2: 3.0}
    verdicts = [
        stats.verdict(stats.compare({0: 1.0, 1: 2.0}, {0: 1.1, 1: 2.2})),
        stats.verdict(stats.compare(three, {0: 1.5, 1: 2.5, 2: 3.5})),
        stats.verdict(stats.compare(three, {0: 0.5, 1: 1.5, 2: 2.5})),
        stats.verdict(
            stats.compare({k: 0.0 for k in range(5)}, dict(enumerate([3, 2, 4, 3, -0.1])))
        ),
        stats.verdict(stats.compare([1.0, 2.0, 3.0], [7.0, 8.0, 9.5])),
        stats.verdict(stats.compare(three, {0: 0.9, 1: 2.3, 2: 2.9})),
        stats.verdict(stats.compare([1.0, 2.0, 3.0], [1.1, 2.3, 2.9])),
        stats.ratio_verdict(stats.ratios(three, three, threshold=2.0)),
        stats.ratio_verdict(stats.ratios(three, {0: 2.0, 1: 0.5, 2: 0.5}, threshold=1.0)),
        stats.ratio_verdict(stats.ratios(three, three, threshold=0.5)),
    ]
    assert verdicts[0] == "too few pairs (n = 2 < 3): no verdict"
    assert f"`{verdicts[0]}`" in section
    words = {v.split(":")[0] for v in verdicts[1:]}
    assert len(words) == 8  # every kind (two "no difference detected": paired, Welch)
    for word in words:
        generic = word.replace("in 4 of 5 pairs", "in k of n pairs").replace(
            "in 2 of 3", "in k of n"
        )
        generic = generic.replace("at most 2", "at most τ").replace("above 1", "above τ")
        generic = generic.replace("above 0.5", "above τ")
        assert f"`{generic}:" in section, generic
    assert "the interval admits ±X" in section and "(unpaired, Welch, n = n_a and n_b" in section


def test_values_equal_up_to_rounding_have_no_spread():
    # 0.1 three times averages to 0.10000000000000002 with deviations of ~1e-17: no spread, so
    # the text is "0.100 ± 0", not eighteen digits of rounding noise
    cell = stats.summarize([0.1, 0.1, 0.1])
    assert cell.std == 0.0 and cell.half_width == 0.0
    assert str(cell) == "0.100 ± 0 (n = 3)"
    moved = stats.compare({0: 0.3, 1: 0.1, 2: 0.7}, {0: 0.4, 1: 0.2, 2: 0.8})  # 0.8 - 0.7 != 0.1
    assert moved.std == 0.0 and stats.verdict(moved).startswith("higher in every pair: +0.100 ± 0 ")
    assert stats.summarize([1.0, 1.0 + 1e-9, 1.0]).std > 0  # a real spread, however small, is kept
