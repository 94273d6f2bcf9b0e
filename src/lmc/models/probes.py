"""Probe points: the named layer outputs that analysis hooks into."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lmc.config import LmcError

LAYOUTS = ("channels", "tokens", "heads")


@dataclass(frozen=True)
class ProbePoint:
    """One layer of a model as the layerwise analysis sees it.

    Attributes:
        name: short unique name (``layer1`` ... ``logits``; ``block3`` in ResNets and
            transformers, ``mlp3`` for a transformer block's MLP hidden units).
        layer: the depth ``l`` in 1..L: weight layers (Linear/Conv) counted along the main path
            up to and including this point; the logits have ``layer == L``. LEWC's exponents use it.
        kind: ``hidden`` (post-activation features of one weight layer), ``attention`` (a
            transformer's attention heads' outputs, before the output projection), ``block`` (a
            residual block's output: in a transformer, the residual stream after the block) or
            ``logits``.
        output: qualified name of the module whose forward *output* is the feature f_l.
        weight: qualified name of the Linear/Conv of this layer (its *input* is z_{l-1}, its weight
            W_l), or ``None`` for a block output that is not a single weight layer.
        preactivation: qualified name of the activation module whose *input* is the
            pre-activation z~_l, or ``None`` (logits, or no single activation). For an
            ``attention`` point, the heads' module whose inputs (q, k, v) are all three held.
        layout: how the hooked tensors are laid out. ``channels``: (n, d) or (n, C, *spatial),
            features on dim 1 (Linear and Conv layers as the MLP and CNNs use them).
            ``tokens``: (n, T, d), features last, as Linear and LayerNorm see a sequence of T
            tokens (transformers). The analysis treats tokens as positions: the recorder hands
            such tensors on as (n, d, T), so a per-example vector (LEWC, LLFC, endpoint
            cosines) holds every token's features, and the unit statistics (weak additivity,
            second moments, reciprocal terms) take one row per example and token with the d
            features as units -- the convention of a convolution's feature map.
            ``heads``: (n, heads, T, d_h), the per-head tensors of attention; the recorder hands
            the output on as (n, heads · d_h, T) (head-major features, the order in which the
            heads are merged back), so it reads as a ``tokens`` point of d features.
    """

    name: str
    layer: int
    kind: str
    output: str
    weight: str | None = None
    preactivation: str | None = None
    layout: str = "channels"

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise LmcError(f"ProbePoint layout must be one of {LAYOUTS}, got {self.layout!r}")

    def to_dict(self) -> dict:
        return asdict(self)
