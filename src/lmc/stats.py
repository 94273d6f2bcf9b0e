"""Statistics over pairs, and the one vocabulary of verdicts lmc prints.

Every number lmc reports about a study rests on a few independent pairs of models (A, B). This
module summarises such numbers and compares them; docs/science.md ("Statistics and verdicts")
defines each quantity and each verdict word exactly as below.

Conventions:

- A **cell** is one quantity over independent pairs: one value per pair (e.g. the calibrated
  midpoint barrier of width 64, weight decay 3e-3, no alignment, over pairs 0, 1, 2). Give a
  cell as a mapping *pair key -> value* when its values can be matched with another cell's (the
  key names the pair: the same key means the same seeds), or as a plain sequence when they
  cannot; :func:`keyed` builds the mapping from parallel sequences. Values that are not finite
  (NaN: undefined) are left out everywhere.
- **Interval**: the two-sided 95 % t-interval of a mean, mean ± h with
  h = t_{0.975, n−1} · s / √n and s the sample standard deviation (ddof = 1). One value has no
  interval (s and h are NaN).
- **Difference = second − first**: :func:`compare` ``(a, b)`` reports b − a, so "higher" means b
  is higher than a. It is **paired** when the two cells share pair keys: over the pairs present
  (and finite) in both, the mean of the per-pair differences b_p − a_p with its 95 % t-interval
  (n − 1 degrees of freedom), the paired t-test's two-sided p-value (``scipy.stats.ttest_rel``)
  and the number of pairs in which b − a is positive and negative; pairs in one cell only are
  left out and counted. Otherwise it is **Welch's**: the difference of the means with the
  interval t_{0.975, ν} · √(s_a²/n_a + s_b²/n_b), ν by Welch–Satterthwaite, and the two-sided
  p-value of ``scipy.stats.ttest_ind(b, a, equal_var=False)``.
- **Ratios** are taken per pair (numerator_p / denominator_p, e.g. a barrier over plain
  averaging's on the same pair), then summarised as a cell; with a threshold, the number of
  pairs whose ratio exceeds it.
- **Verdicts** (:func:`verdict`, :func:`ratio_verdict`): with fewer than :data:`MIN_PAIRS` pairs
  (in either cell) there is none: ``too few pairs (n = 2 < 3): no verdict``. A difference is
  named ("higher" or "lower") only when its 95 % interval excludes 0; otherwise the verdict is
  ``no difference detected`` and states the largest difference the interval still admits,
  max(|low|, |high|). Never "no effect".
- **Numbers** (:func:`fmt_estimate`): an interval's half-width is shown to 2 significant digits
  and its mean to the same decimal place; a value without an interval (or with h = 0) to 3
  significant digits; below 1e-4 (a last digit past the 5th decimal) the same digits in
  scientific notation (``−4e−11 ± 1.3e−10``); negative numbers take the minus sign "−" (U+2212)
  and differences an explicit "+" when positive; p-values to 2 significant digits, below 0.001
  as "p < 0.001".
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as _scipy_stats

from lmc.config import LmcError

__all__ = [
    "CONFIDENCE",
    "MIN_PAIRS",
    "SCIENTIFIC_BELOW",
    "Cell",
    "Comparison",
    "Ratio",
    "cell_text",
    "compare",
    "fmt_estimate",
    "fmt_number",
    "fmt_p",
    "half_width",
    "keyed",
    "ratio_verdict",
    "ratios",
    "summarize",
    "too_few",
    "verdict",
]

#: The confidence of every interval (two-sided).
CONFIDENCE = 0.95
#: The fewest pairs a verdict rests on.
MIN_PAIRS = 3
MINUS = "−"  # U+2212

Values = Mapping[Hashable, float] | Iterable[float]


# ---- the cell ---------------------------------------------------------------------------------
def half_width(std: float, n: int) -> float:
    """Half-width of the 95 % t-interval of a mean of ``n`` values with sample standard
    deviation ``std``: t_{0.975, n−1} · std / √n; NaN below 2 values or for a non-finite
    ``std``."""
    if n < 2 or not math.isfinite(std):
        return math.nan
    return float(_scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * std / math.sqrt(n)


@dataclass(frozen=True)
class Cell:
    """One quantity over independent pairs: ``n`` finite values, their ``mean``, sample
    standard deviation ``std`` (ddof = 1; NaN when n < 2) and the ``half_width`` h of the mean's
    95 % t-interval (NaN when n < 2). ``values`` keeps them (pair key -> value where the cell
    was keyed, else position -> value)."""

    n: int
    mean: float
    std: float
    half_width: float
    values: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def interval(self) -> tuple[float, float]:
        """(mean − h, mean + h); NaN bounds without an interval (n < 2)."""
        return (self.mean - self.half_width, self.mean + self.half_width)

    def __str__(self) -> str:
        return cell_text(self)


def keyed(keys: Sequence[Hashable], values: Sequence[float]) -> dict[Hashable, float]:
    """A cell keyed by pair from parallel sequences: ``{keys[i]: values[i]}``. Keys must be
    distinct and the sequences of one length (else ``LmcError``)."""
    if len(keys) != len(values):
        raise LmcError(f"{len(keys)} pair keys for {len(values)} values; give one key per value")
    if len(set(keys)) != len(keys):
        raise LmcError("pair keys repeat; give each pair one value (e.g. average repeats first)")
    return {k: float(v) for k, v in zip(keys, values)}


def _finite(values: Values) -> tuple[dict, bool]:
    """(key -> finite value, whether the input was keyed). Non-numeric values are an error."""
    is_keyed = isinstance(values, Mapping)
    items = values.items() if is_keyed else enumerate(values)
    out = {}
    for key, value in items:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise LmcError(
                f"value {value!r} of pair {key!r} is not a number; give numbers (NaN for undefined)"
            ) from None
        if math.isfinite(number):
            out[key] = number
    return out, is_keyed


def summarize(values: Values) -> Cell:
    """The :class:`Cell` of ``values`` (a mapping pair key -> value, or a sequence); values
    that are not finite are left out."""
    finite, _ = _finite(values)
    return _cell(finite)


def _cell(finite: dict) -> Cell:
    array = np.array(list(finite.values()), dtype=np.float64)
    n = int(array.size)
    if n == 0:
        return Cell(0, math.nan, math.nan, math.nan, {})
    std = _sample_std(array)
    return Cell(n, float(array.mean()), std, half_width(std, n), dict(finite))


def _sample_std(array: np.ndarray) -> float:
    """The sample standard deviation (ddof = 1; NaN below 2 values), 0 where it is rounding
    noise: values equal up to float64 rounding (0.1 three times averages to 0.10000000000000002,
    and its deviations are not 0) have no spread."""
    if array.size < 2:
        return math.nan
    std = float(array.std(ddof=1))
    if std <= _ROUNDING * float(np.abs(array).max()):
        return 0.0
    return std


#: a standard deviation at most this times the largest magnitude is rounding noise
_ROUNDING = 8 * float(np.finfo(np.float64).eps)


# ---- comparing two cells ----------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """Cell b against cell a: the difference **b − a** (second − first).

    ``paired``: computed on shared pairs (see the module's conventions), else Welch's. ``n``:
    the pairs compared when paired; the smaller cell's size when not (the count a verdict
    needs at least :data:`MIN_PAIRS` of). ``n_first`` / ``n_second``: the finite values of a
    and b that entered. ``mean``: the mean of the per-pair differences (paired) or the
    difference of the means (Welch). ``std``: the per-pair differences' sample standard
    deviation (paired; NaN for Welch). ``half_width``: of the difference's 95 % t-interval,
    ``df`` its degrees of freedom (n − 1, or Welch–Satterthwaite's ν). ``p_value``: two-sided,
    of the paired or Welch t-test. ``higher`` / ``lower``: the pairs in which b − a is positive
    / negative (paired; ``None`` for Welch). ``left_out``: pairs in one cell only (paired).
    ``differences``: pair key -> b − a (paired; empty for Welch)."""

    paired: bool
    n: int
    n_first: int
    n_second: int
    mean: float
    std: float
    half_width: float
    df: float
    p_value: float
    higher: int | None
    lower: int | None
    left_out: int = 0
    differences: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def interval(self) -> tuple[float, float]:
        """(low, high) of the 95 % t-interval of b − a (NaN without one)."""
        return (self.mean - self.half_width, self.mean + self.half_width)

    @property
    def admitted(self) -> float:
        """The largest |b − a| the interval admits: max(|low|, |high|)."""
        low, high = self.interval
        return max(abs(low), abs(high))

    @property
    def direction(self) -> str:
        """The verdict's word: ``"too few pairs"`` (n < :data:`MIN_PAIRS` or no interval),
        ``"higher"`` / ``"lower"`` (b − a's interval lies above / below 0), or
        ``"no difference detected"`` (the interval contains 0)."""
        if self.n < MIN_PAIRS or not math.isfinite(self.half_width):
            return "too few pairs"
        low, high = self.interval
        if low > 0:
            return "higher"
        if high < 0:
            return "lower"
        return "no difference detected"

    def __str__(self) -> str:
        return verdict(self)


def _p_value(t: float, df: float) -> float:
    return float(2 * _scipy_stats.t.sf(abs(t), df))


def _paired(first: dict, second: dict, left_out: int) -> Comparison:
    keys = [k for k in first if k in second]
    diff = {k: second[k] - first[k] for k in keys}
    d = np.array(list(diff.values()), dtype=np.float64)
    n = int(d.size)
    mean = float(d.mean()) if n else math.nan
    std = _sample_std(d)
    h = half_width(std, n)
    if n < 2:
        p = math.nan
    elif std == 0.0:  # every pair moved by the same amount: t is ±inf, or 0/0 when no move
        p = 1.0 if mean == 0.0 else 0.0
    else:
        p = _p_value(mean / (std / math.sqrt(n)), n - 1)
    return Comparison(
        paired=True,
        n=n,
        n_first=len(first),
        n_second=len(second),
        mean=mean,
        std=std,
        half_width=h,
        df=float(n - 1) if n > 1 else math.nan,
        p_value=p,
        higher=int((d > 0).sum()),
        lower=int((d < 0).sum()),
        left_out=left_out,
        differences=diff,
    )


def _welch(first: dict, second: dict) -> Comparison:
    a = _cell(first)
    b = _cell(second)
    mean = b.mean - a.mean
    h = df = p = math.nan
    if a.n >= 2 and b.n >= 2:
        va, vb = a.std**2 / a.n, b.std**2 / b.n
        se = math.sqrt(va + vb)
        if se > 0:
            df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
            h = float(_scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * se
            p = _p_value(mean / se, df)
        else:  # both cells constant
            df = float(a.n + b.n - 2)
            h = 0.0
            p = 1.0 if mean == 0.0 else 0.0
    return Comparison(
        paired=False,
        n=min(a.n, b.n),
        n_first=a.n,
        n_second=b.n,
        mean=mean,
        std=math.nan,
        half_width=h,
        df=df,
        p_value=p,
        higher=None,
        lower=None,
    )


def compare(first: Values, second: Values) -> Comparison:
    """``second`` against ``first`` (difference = second − first), each a mapping pair key ->
    value or a plain sequence (unkeyed). Paired when both are mappings that share at least one
    pair key with a finite value in each: the pairs in one cell only are left out (counted in
    ``left_out``). Welch's otherwise. Non-finite values are left out first."""
    a, a_keyed = _finite(first)
    b, b_keyed = _finite(second)
    if a_keyed and b_keyed and any(k in b for k in a):
        shared = sum(1 for k in a if k in b)
        left_out = len(a) + len(b) - 2 * shared
        return _paired(a, b, left_out)
    return _welch(a, b)


# ---- ratios per pair --------------------------------------------------------------------------
@dataclass(frozen=True)
class Ratio:
    """Per-pair ratios numerator_p / denominator_p summarised as a :class:`Cell` (``cell``);
    ``ratios`` pair key -> ratio; with a ``threshold``, ``above`` counts the pairs whose ratio
    exceeds it (``None`` without one); ``left_out`` the pairs in one input only, with a value
    that is not finite, or with a zero denominator."""

    cell: Cell
    ratios: dict
    threshold: float | None
    above: int | None
    left_out: int = 0

    @property
    def n(self) -> int:
        return self.cell.n

    def __str__(self) -> str:
        return ratio_verdict(self) if self.threshold is not None else cell_text(self.cell)


def ratios(
    numerator: Mapping[Hashable, float],
    denominator: Mapping[Hashable, float],
    threshold: float | None = None,
) -> Ratio:
    """Ratios per pair of two keyed cells (e.g. a barrier after alignment over plain
    averaging's barrier on the same pair), their mean with its 95 % t-interval, and with
    ``threshold`` the number of pairs above it. Both must be mappings pair key -> value (a ratio
    of unmatched values means nothing; else ``LmcError``)."""
    if not isinstance(numerator, Mapping) or not isinstance(denominator, Mapping):
        raise LmcError(
            "ratios are taken per pair: give both cells as mappings pair key -> value "
            "(lmc.stats.keyed builds one from keys and values)"
        )
    num, _ = _finite(numerator)
    den, _ = _finite(denominator)
    out = {k: num[k] / den[k] for k in num if k in den and den[k] != 0.0}
    left_out = len(set(numerator) | set(denominator)) - len(out)
    above = None if threshold is None else sum(1 for r in out.values() if r > threshold)
    return Ratio(_cell(out), out, threshold, above, left_out)


# ---- numbers ----------------------------------------------------------------------------------
def _decimals_for(value: float, significant: int) -> int:
    """Decimal places that show ``value`` to ``significant`` significant digits (at least 0)."""
    if value == 0 or not math.isfinite(value):
        return significant - 1
    return max(0, significant - 1 - math.floor(math.log10(abs(value))))


#: Below this, a half-width (or a value without an interval) is written in scientific notation.
SCIENTIFIC_BELOW = 1e-4


def _exponent(text: str) -> str:
    """``e−11`` for an exponent of −11 ("−" U+2212; no "+" or leading zeros)."""
    value = int(text)
    return "e" + (MINUS if value < 0 else "") + str(abs(value))


def _scientific(value: float, place: int, signed: bool) -> str:
    """``value`` rounded to the digit 10**place and written as ``m e x`` with just the digits down
    to that place (``−4e−11``, ``1.3e−10``); ``0`` when it rounds to zero."""
    rounded = round(value, -place)
    if rounded == 0.0:
        return "0"
    exponent = math.floor(math.log10(abs(rounded)))
    mantissa = f"{abs(rounded) / 10.0**exponent:.{max(0, exponent - place)}f}"
    if float(mantissa) >= 10.0:  # 9.96e−5 at 2 digits
        exponent += 1
        mantissa = f"{abs(rounded) / 10.0**exponent:.{max(0, exponent - place)}f}"
    text = mantissa + _exponent(str(exponent))
    if value < 0:
        return MINUS + text
    return "+" + text if signed else text


def fmt_number(value: float, decimals: int, signed: bool = False) -> str:
    """``value`` with ``decimals`` places, "−" (U+2212) for negatives, "+" when ``signed`` and
    positive; "nan" when not finite. A value that rounds to zero prints without a sign. A value
    below :data:`SCIENTIFIC_BELOW` shown past 5 decimals (a last digit below 1e-5) is written in
    scientific notation with the same digits: ``fmt_number(-4e-11, 11)`` is ``−4e−11``, and one
    that rounds to zero there is ``0``."""
    if not math.isfinite(value):
        return "nan"
    if decimals > 5 and abs(value) < SCIENTIFIC_BELOW:
        return _scientific(value, -decimals, signed)
    text = f"{abs(value):.{decimals}f}"
    if float(text) == 0.0:
        return text
    if value < 0:
        return MINUS + text
    return "+" + text if signed else text


def fmt_estimate(mean: float, half: float = math.nan, signed: bool = False) -> str:
    """``mean ± h``: h to 2 significant digits and the mean to the same decimal place; without
    an interval (h NaN or 0) the mean alone to 3 significant digits (and ``± 0`` when h = 0).
    ``signed`` puts "+" before a positive mean (differences). Where that last digit lies below
    1e-5 (h below :data:`SCIENTIFIC_BELOW`, or such a value without an interval), each number
    below :data:`SCIENTIFIC_BELOW` is written in scientific notation with the same digits:
    ``−4e−11 ± 1.3e−10``, ``0.5000000 ± 1.0e−6``."""
    if math.isfinite(half) and half > 0:
        decimals = _decimals_for(half, 2)
        return f"{fmt_number(mean, decimals, signed)} ± {fmt_number(half, decimals)}"
    text = fmt_number(mean, _decimals_for(mean, 3), signed)
    return f"{text} ± 0" if half == 0 else text


def fmt_p(p: float) -> str:
    """``p = 0.0021``, ``p = 0.030`` (2 significant digits), ``p < 0.001`` below 0.001,
    ``p = nan`` when undefined."""
    if not math.isfinite(p):
        return "p = nan"
    if p < 0.001:
        return "p < 0.001"
    return f"p = {p:#.2g}"


def _admitted(c: Comparison) -> str:
    decimals = _decimals_for(c.half_width, 2) if c.half_width > 0 else _decimals_for(c.mean, 3)
    return "±" + fmt_number(c.admitted, decimals)


# ---- verdicts ---------------------------------------------------------------------------------
def cell_text(c: Cell) -> str:
    """A cell as text: ``0.178 ± 0.053 (n = 3)``; ``0.178 (n = 1, no interval)``;
    ``no value (n = 0)``."""
    if c.n == 0:
        return "no value (n = 0)"
    if c.n == 1:
        return f"{fmt_estimate(c.mean)} (n = 1, no interval)"
    return f"{fmt_estimate(c.mean, c.half_width)} (n = {c.n})"


def too_few(n: int) -> str:
    """The verdict below :data:`MIN_PAIRS` pairs: ``too few pairs (n = 2 < 3): no verdict``."""
    return f"too few pairs (n = {n} < {MIN_PAIRS}): no verdict"


def verdict(c: Comparison) -> str:
    """The verdict on b − a (:attr:`Comparison.direction`), one of:

    - ``too few pairs (n = 2 < 3): no verdict`` (n < 3, or no interval);
    - paired, interval excluding 0: ``lower in every pair: −0.071 ± 0.013 (3 pairs, p =
      0.0034)`` when every pair has that sign, else ``higher in 4 of 5 pairs: +0.20 ± 0.15 (p =
      0.018)``;
    - Welch, interval excluding 0: ``higher (unpaired, Welch): +0.20 ± 0.15 (n = 3 and 4, p =
      0.018)``;
    - interval containing 0: ``no difference detected: +0.010 ± 0.050 (higher in 2 of 3 pairs,
      p = 0.57); the interval admits ±0.060`` (Welch: ``(unpaired, Welch, n = 3 and 4, ...)``),
      where ±0.060 is max(|low|, |high|), the largest difference the data cannot rule out.
    """
    word = c.direction
    if word == "too few pairs":
        return too_few(c.n)
    estimate = fmt_estimate(c.mean, c.half_width, signed=True)
    p = fmt_p(c.p_value)
    if word in ("higher", "lower"):
        if not c.paired:
            return f"{word} (unpaired, Welch): {estimate} (n = {c.n_first} and {c.n_second}, {p})"
        k = c.higher if word == "higher" else c.lower
        if k == c.n:
            return f"{word} in every pair: {estimate} ({c.n} pairs, {p})"
        return f"{word} in {k} of {c.n} pairs: {estimate} ({p})"
    if c.paired:
        context = f"higher in {c.higher} of {c.n} pairs, {p}"
    else:
        context = f"unpaired, Welch, n = {c.n_first} and {c.n_second}, {p}"
    return f"no difference detected: {estimate} ({context}); the interval admits {_admitted(c)}"


def ratio_verdict(r: Ratio, threshold: float | None = None) -> str:
    """The verdict on per-pair ratios against ``threshold`` (default: the one ``r`` was made
    with), one of ``too few pairs (n = 2 < 3): no verdict``; ``at most 0.1 in every pair: 0.061
    ± 0.020 (9 pairs)``; ``above 0.1 in 4 of 9 pairs: 0.11 ± 0.04``; ``above 0.1 in every pair:
    ...``. The threshold is printed with :g. Without a threshold, ``LmcError``."""
    t = r.threshold if threshold is None else threshold
    if t is None:
        raise LmcError("a ratio verdict needs a threshold (ratios(..., threshold=0.1))")
    if r.n < MIN_PAIRS:
        return too_few(r.n)
    above = sum(1 for v in r.ratios.values() if v > t)
    estimate = fmt_estimate(r.cell.mean, r.cell.half_width)
    if above == 0:
        return f"at most {t:g} in every pair: {estimate} ({r.n} pairs)"
    if above == r.n:
        return f"above {t:g} in every pair: {estimate} ({r.n} pairs)"
    return f"above {t:g} in {above} of {r.n} pairs: {estimate}"
