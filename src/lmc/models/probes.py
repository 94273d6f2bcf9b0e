"""Probe points: the named layer outputs that analysis hooks into."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ProbePoint:
    """One layer of a model as the layerwise analysis sees it.

    Attributes:
        name: short unique name (``layer1`` ... ``logits``; ``block3`` in ResNets).
        layer: the depth ``l`` in 1..L: weight layers (Linear/Conv) counted along the main path
            up to and including this point; the logits have ``layer == L``. LEWC's exponents use it.
        kind: ``hidden`` (post-activation features of one weight layer), ``block`` (a residual
            block's output) or ``logits``.
        output: qualified name of the module whose forward *output* is the feature f_l.
        weight: qualified name of the Linear/Conv of this layer (its *input* is z_{l-1}, its weight
            W_l), or ``None`` for a block output that is not a single weight layer.
        preactivation: qualified name of the activation module whose *input* is the
            pre-activation z~_l, or ``None`` (logits, or no single activation).
    """

    name: str
    layer: int
    kind: str
    output: str
    weight: str | None = None
    preactivation: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)
