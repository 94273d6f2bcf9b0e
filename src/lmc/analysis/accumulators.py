"""Streamed statistics of the layerwise analysis: one accumulator class per statistic.

Each accumulator has ``update(...)`` (called once per batch with that batch's tensors) and
``finalize()`` (the statistic over everything seen). They hold sums in float64, never the
activations themselves, so memory does not grow with the number of examples: at most one
vector per unit (second moments) and a few scalars.

Conventions (definitions as in docs/science.md, "Layerwise connectivity"):
- θ(λ) = (1 − λ)θ_A + λθ_B; "C" is the merged model θ(λ).
- Tensors ``f_*`` come as rows, one row per example: a feature map (C, H, W) is flattened, so
  LEWC, LLFC and endpoint cosines compare whole feature maps per example.
- Tensors ``*_units`` come as unit vectors, one row per example *and spatial position*
  (``unit_rows``): for convolutions every position is an example and a channel is a unit. Weak
  additivity, sign agreement, second moments and the reciprocal terms use this view.
- Cosines are per row, then averaged. Two zero rows have cosine 1 (they are equal); one zero
  row against a non-zero one has cosine 0.
- Least-squares fits and relative errors pool over all examples (sums of squares over the
  split), so a few examples with tiny features cannot dominate them.
- LEWC, LLFC, endpoint and logit-norm statistics all derive from the per-example Gram of
  (f_A, f_B, f_C) (``FeatureGram``: six inner products per example), which is computed once per
  batch and λ instead of once per statistic. ‖f_C − t‖² is expanded from it, so relative errors
  below ~1e-8 read as ~1e-8 (float64 cancellation).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch


def to_stat(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float64 for reductions (on the CPU for MPS, which has no float64)."""
    if t.device.type == "mps":
        return t.to("cpu", torch.float64)
    return t.to(torch.float64)


def example_rows(t: torch.Tensor) -> torch.Tensor:
    """(n, ...) -> (n, d) float64: one row per example, everything else flattened."""
    return to_stat(t.reshape(t.shape[0], -1))


def unit_rows(t: torch.Tensor) -> torch.Tensor:
    """(n, C, *spatial) -> (n * positions, C) float64; (n, d) -> (n, d). Channels are units."""
    if t.dim() <= 2:
        return to_stat(t.reshape(t.shape[0], -1))
    return to_stat(t.movedim(1, -1).reshape(-1, t.shape[1]))


def head_rows(t: torch.Tensor) -> torch.Tensor:
    """Attention heads' (n, heads, T, d_h) -> (n * T, heads * d_h) float64: one row per example
    and token, the heads' features (head-major) as units."""
    n, heads, length, head_dim = t.shape
    return to_stat(t.transpose(1, 2).reshape(n * length, heads * head_dim))


def row_dots(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """⟨u_i, v_i⟩ for each row i."""
    return torch.einsum("nd,nd->n", u, v)


def gram_cosine(dot: torch.Tensor, sq_u: torch.Tensor, sq_v: torch.Tensor) -> torch.Tensor:
    """cos = ⟨u, v⟩ / (‖u‖‖v‖) from inner products (zero-row rules above), clipped to [-1, 1]."""
    denom = torch.sqrt(sq_u.clamp_min(0) * sq_v.clamp_min(0))
    cos = (dot / denom.clamp_min(torch.finfo(dot.dtype).tiny)).clamp(-1.0, 1.0)
    return torch.where((sq_u == 0) & (sq_v == 0), torch.ones_like(cos), cos)


def row_cosines(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Cosine of each row of ``u`` with the same row of ``v`` (zero-row rules above)."""
    return gram_cosine(row_dots(u, v), row_dots(u, u), row_dots(v, v))


def _sq(t: torch.Tensor) -> torch.Tensor:
    """Squared Frobenius norm."""
    return (t * t).sum()


@dataclass
class FeatureGram:
    """Per-example inner products of f_A, f_B and f_C = f(θ(λ)); each a (n,) float64 tensor."""

    aa: torch.Tensor
    ab: torch.Tensor
    bb: torch.Tensor
    ac: torch.Tensor
    bc: torch.Tensor
    cc: torch.Tensor

    def target(self, alpha: float, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(⟨f_C, t⟩, ‖t‖²) per example for t = alpha f_A + beta f_B."""
        dot = alpha * self.ac + beta * self.bc
        sq = alpha * alpha * self.aa + 2 * alpha * beta * self.ab + beta * beta * self.bb
        return dot, sq.clamp_min(0)


class MeanCosine:
    """E cos(u, v) over rows."""

    def __init__(self) -> None:
        self.total: torch.Tensor | float = 0.0
        self.count = 0

    def update(self, u: torch.Tensor, v: torch.Tensor) -> None:
        self.add(row_cosines(u, v))

    def add(self, cosines: torch.Tensor) -> None:
        """Add already computed per-row cosines."""
        self.total = self.total + cosines.sum()
        self.count += cosines.shape[0]

    def finalize(self) -> float:
        return float(self.total) / self.count if self.count else math.nan


class EndpointStats:
    """``endpoint_cosine`` = E_x cos(f_A, f_B): the baseline LLFC is compared with."""

    def __init__(self) -> None:
        self.cosine = MeanCosine()

    def update(self, aa: torch.Tensor, ab: torch.Tensor, bb: torch.Tensor) -> None:
        """Per-example ⟨f_A, f_A⟩, ⟨f_A, f_B⟩, ⟨f_B, f_B⟩ (as in ``FeatureGram``)."""
        self.cosine.add(gram_cosine(ab, aa, bb))

    def finalize(self) -> dict[str, float]:
        return {"endpoint_cosine": self.cosine.finalize()}


class LlfcStats:
    """LLFC at λ: target s = (1 − λ)f_A + λf_B.

    ``llfc_cosine`` = E_x cos(f_C, s); ``llfc_scale`` = the least-squares c in f_C ≈ c·s,
    c = Σ_x⟨f_C, s⟩ / Σ_x‖s‖² (pooled over examples).
    """

    def __init__(self, lam: float) -> None:
        self.lam = lam
        self.cosine = MeanCosine()
        self.cross: torch.Tensor | float = 0.0
        self.norm: torch.Tensor | float = 0.0

    def update(self, gram: FeatureGram) -> None:
        dot, sq = gram.target(1.0 - self.lam, self.lam)
        self.cosine.add(gram_cosine(dot, gram.cc, sq))
        self.cross = self.cross + dot.sum()
        self.norm = self.norm + sq.sum()

    def finalize(self) -> dict[str, float]:
        norm = float(self.norm)
        return {
            "llfc_cosine": self.cosine.finalize(),
            "llfc_scale": float(self.cross) / norm if norm > 0 else math.nan,
        }


class LewcStats:
    """LEWC at λ for layer ℓ: target t = (1 − λ)^ℓ f_A + λ^ℓ f_B.

    - ``lewc_cosine`` = E_x cos(f_C, t);
    - ``lewc_relative_error`` = ‖f_C − t‖_F / ‖t‖_F over the stacked split (pooled);
    - ``lewc_coef_a``, ``lewc_coef_b``: least squares (a, b) in f_C ≈ a f_A + b f_B, pooled over
      examples: the normal equations G (a, b)ᵀ = r with the 2×2 Gram G of (f_A, f_B) and the
      cross terms r = (Σ⟨f_A, f_C⟩, Σ⟨f_B, f_C⟩). A singular G (f_A ∝ f_B, e.g. a model against
      itself) gets the minimum-norm solution. Where the endpoints nearly agree (endpoint cosine
      near 1, typical of logits) G is ill-conditioned and only a + b is well determined;
    - ``lewc_expected_a`` = (1 − λ)^ℓ and ``lewc_expected_b`` = λ^ℓ, what LEWC predicts.
    """

    def __init__(self, lam: float, layer: int) -> None:
        self.lam = lam
        self.alpha = (1.0 - lam) ** layer
        self.beta = lam**layer
        self.cosine = MeanCosine()
        self.sums: dict[str, torch.Tensor | float] = dict.fromkeys(
            ("aa", "ab", "bb", "ac", "bc", "err", "tt"), 0.0
        )

    def update(self, gram: FeatureGram) -> None:
        dot, sq = gram.target(self.alpha, self.beta)
        self.cosine.add(gram_cosine(dot, gram.cc, sq))
        s = self.sums
        for key in ("aa", "ab", "bb", "ac", "bc"):
            s[key] = s[key] + getattr(gram, key).sum()
        s["err"] = s["err"] + (gram.cc - 2 * dot + sq).sum()
        s["tt"] = s["tt"] + sq.sum()

    def finalize(self) -> dict[str, float]:
        s = {k: float(v) for k, v in self.sums.items()}
        gram = np.array([[s["aa"], s["ab"]], [s["ab"], s["bb"]]])
        rhs = np.array([s["ac"], s["bc"]])
        if np.abs(gram).max() > 0:
            coef, *_ = np.linalg.lstsq(gram, rhs, rcond=1e-12)
        else:
            coef = np.array([math.nan, math.nan])
        return {
            "lewc_cosine": self.cosine.finalize(),
            "lewc_relative_error": (
                math.sqrt(max(s["err"], 0.0) / s["tt"]) if s["tt"] > 0 else math.nan
            ),
            "lewc_coef_a": float(coef[0]),
            "lewc_coef_b": float(coef[1]),
            "lewc_expected_a": self.alpha,
            "lewc_expected_b": self.beta,
        }


class WeakAdditivityStats:
    """Weak additivity of the activation σ on the two models' pre-activations z~_A, z~_B.

    ``weak_additivity_cosine`` = E cos(σ((z~_A + z~_B)/2), (σ(z~_A) + σ(z~_B))/2), over unit
    rows (per example; per example and position for convolutions). It does not depend on λ.
    ``sign_agreement`` = the fraction of (row, unit) entries with z~_A·z~_B ≥ 0, i.e. where the
    two pre-activations do not straddle zero, which is exactly where ReLU is additive.
    σ is the model's own activation module, so GELU, tanh, ... are measured with themselves.

    Attention heads: when the pre-activations come as tuples (q, k, v) of (n, heads, T, d_h)
    tensors, σ is the heads' computation softmax(q kᵀ/√d_h) v applied to the averaged triple,
    its (n, heads, T, d_h) output is read as unit rows (one per example and token, the heads'
    d = heads · d_h features as units, head-major) and ``sign_agreement`` does not apply
    (``None``). Attention is linear in
    v, so this measures how far the softmax of averaged scores is from the average of the two
    softmaxes: the cosine is 1 whenever A and B attend alike.
    """

    def __init__(self, activation: Callable[..., torch.Tensor]) -> None:
        self.activation = activation
        self.cosine = MeanCosine()
        self.agree: torch.Tensor | float = 0.0
        self.entries = 0
        self.heads = False  # fed (q, k, v) triples: sign agreement does not apply

    def update(
        self,
        pre_a: torch.Tensor | tuple[torch.Tensor, ...],
        pre_b: torch.Tensor | tuple[torch.Tensor, ...],
    ) -> None:
        sigma = self.activation
        if isinstance(pre_a, tuple):
            self.heads = True
            mid = tuple((a + b) / 2 for a, b in zip(pre_a, pre_b, strict=True))
            merged = head_rows(sigma(*mid))
            self.cosine.update(merged, head_rows((sigma(*pre_a) + sigma(*pre_b)) / 2))
            return
        merged = unit_rows(sigma((pre_a + pre_b) / 2))
        ensemble = unit_rows((sigma(pre_a) + sigma(pre_b)) / 2)
        self.cosine.update(merged, ensemble)
        self.agree = self.agree + (pre_a * pre_b >= 0).sum()
        self.entries += pre_a.numel()

    def finalize(self) -> dict[str, float | None]:
        agreement = float(self.agree) / self.entries if self.entries else math.nan
        return {
            "weak_additivity_cosine": self.cosine.finalize(),
            "sign_agreement": None if self.heads else agreement,
        }


class ReciprocalStats:
    """Reciprocal orthogonality: W_A z_B ≈ 0 and W_B z_A ≈ 0 (z = the layer inputs).

    Inputs are the four bias-free products as unit rows: ``aa`` = W_A z_A, ``ab`` = W_A z_B,
    ``ba`` = W_B z_A, ``bb`` = W_B z_B. ``reciprocal_ratio`` = E‖W_A z_B‖ / E‖W_A z_A‖ and
    ``reciprocal_ratio_ba`` = E‖W_B z_A‖ / E‖W_B z_B‖ (means of row norms).
    """

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = dict.fromkeys(("aa", "ab", "ba", "bb"), 0.0)

    def update(self, aa: torch.Tensor, ab: torch.Tensor, ba: torch.Tensor, bb: torch.Tensor):
        for key, rows in (("aa", aa), ("ab", ab), ("ba", ba), ("bb", bb)):
            self.sums[key] = self.sums[key] + torch.linalg.vector_norm(rows, dim=1).sum()

    def finalize(self) -> dict[str, float]:
        s = {k: float(v) for k, v in self.sums.items()}
        return {
            "reciprocal_ratio": s["ab"] / s["aa"] if s["aa"] > 0 else math.nan,
            "reciprocal_ratio_ba": s["ba"] / s["bb"] if s["bb"] > 0 else math.nan,
        }


class ReciprocalCosineStats:
    """``reciprocal_cosine`` = E cos(W_A z_C, W_A z_A), z_C the merged model's layer input."""

    def __init__(self) -> None:
        self.cosine = MeanCosine()

    def update(self, ac: torch.Tensor, aa: torch.Tensor) -> None:
        self.cosine.update(ac, aa)

    def finalize(self) -> dict[str, float]:
        return {"reciprocal_cosine": self.cosine.finalize()}


class CommutativityStats:
    """Commutativity (LLFC Def. 4): (W_A − W_B)(H_A − H_B) = 0, H = layer inputs as columns.

    Streamed exactly: ‖(W_A − W_B)(H_A − H_B)‖_F² = Σ_x ‖(W_A − W_B)(z_A(x) − z_B(x))‖², and
    (W_A − W_B)(z_A − z_B) = (W_A z_A − W_A z_B) − (W_B z_A − W_B z_B) reuses the reciprocal
    products (bias-free). For convolutions H is the unfolded (im2col) patch matrix, whose
    squared norm the caller passes as ``input_diff_sq``. Reported (N = number of examples):

    - ``commutativity_distance`` = ‖(W_A − W_B)(H_A − H_B)‖_F / √N (root mean square per example);
    - ``commutativity_relative`` = ‖(W_A − W_B)(H_A − H_B)‖_F / (‖W_A − W_B‖_F ‖H_A − H_B‖_F),
      in [0, 1] since ‖XY‖_F ≤ ‖X‖_F‖Y‖_F: 0 is exact commutativity;
    - ``commutativity_vs_features`` = ‖(W_A − W_B)(H_A − H_B)‖_F / ‖W_A H_A + W_B H_B‖_F, the
      violation against the size of the sum it is meant to preserve;
    - ``weight_distance`` = ‖W_A − W_B‖_F and ``input_distance`` = ‖H_A − H_B‖_F / √N.
    """

    def __init__(self, weight_distance: float) -> None:
        self.weight_distance = weight_distance
        self.sums: dict[str, torch.Tensor | float] = dict.fromkeys(("prod", "sum", "dh"), 0.0)
        self.examples = 0

    def update(
        self,
        aa: torch.Tensor,
        ab: torch.Tensor,
        ba: torch.Tensor,
        bb: torch.Tensor,
        input_diff_sq: torch.Tensor | float,
        examples: int,
    ) -> None:
        s = self.sums
        s["prod"] = s["prod"] + _sq((aa - ab) - (ba - bb))
        s["sum"] = s["sum"] + _sq(aa + bb)
        s["dh"] = s["dh"] + input_diff_sq
        self.examples += examples

    def finalize(self) -> dict[str, float]:
        prod, total, dh = (math.sqrt(float(self.sums[k])) for k in ("prod", "sum", "dh"))
        n = max(self.examples, 1)
        scale = self.weight_distance * dh
        return {
            "commutativity_distance": prod / math.sqrt(n),
            "commutativity_relative": prod / scale if scale > 0 else math.nan,
            "commutativity_vs_features": prod / total if total > 0 else math.nan,
            "weight_distance": self.weight_distance,
            "input_distance": dh / math.sqrt(n),
        }


class SecondMomentStats:
    """Per unit, the root of the uncentred second moment √E[z~_i²] over unit rows."""

    def __init__(self) -> None:
        self.sum_sq: torch.Tensor | float = 0.0
        self.rows = 0

    def update(self, units: torch.Tensor) -> None:
        self.sum_sq = self.sum_sq + (units * units).sum(dim=0)
        self.rows += units.shape[0]

    def finalize(self) -> np.ndarray:
        if not self.rows:
            return np.zeros(0)
        return torch.sqrt(self.sum_sq / self.rows).cpu().numpy()


class LogitNormStats:
    """Mean logit norms at λ: E‖f_C‖, E‖f_A‖, E‖f_B‖ and the LEWC prediction
    E‖(1 − λ)^L f_A + λ^L f_B‖ (``logit_norm``, ``_a``, ``_b``, ``_lewc``)."""

    def __init__(self, lam: float, layer: int) -> None:
        self.alpha = (1.0 - lam) ** layer
        self.beta = lam**layer
        self.sums: dict[str, torch.Tensor | float] = dict.fromkeys(("c", "a", "b", "lewc"), 0.0)
        self.count = 0

    def update(self, gram: FeatureGram) -> None:
        _, sq = gram.target(self.alpha, self.beta)
        for key, squares in (("c", gram.cc), ("a", gram.aa), ("b", gram.bb), ("lewc", sq)):
            self.sums[key] = self.sums[key] + torch.sqrt(squares).sum()
        self.count += sq.shape[0]

    def finalize(self) -> dict[str, float]:
        n = self.count or math.nan
        s = {k: float(v) / n for k, v in self.sums.items()}
        return {
            "logit_norm": s["c"],
            "logit_norm_a": s["a"],
            "logit_norm_b": s["b"],
            "logit_norm_lewc": s["lewc"],
        }
