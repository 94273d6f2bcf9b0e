"""A narrow transformer written exactly into a wider one's architecture (issue 30 item 4).

To merge a narrow model into a wide one, the narrow one is first embedded isometrically: a
model of the wide architecture, in the canonical form (:mod:`lmc.perm.canonical`), that
computes the narrow model's function. For zoo ``gpt`` (width w, h heads of d_h dims, MLP
hidden m) into width W ≥ w, H ≥ h heads of D_h ≥ d_h dims, MLP hidden M ≥ m (same vocabulary,
context, depth, activation and bias):

- the residual stream takes the first w of W coordinates, scaled by c = √(W / w): every
  writer (token and position embeddings, attention output, MLP output, weights and biases) is
  multiplied by c and every reader of the stream (q/k/v, MLP input, head) by 1/c. A canonical
  norm is x / √(mean(x²) + ε), and the mean over W coordinates of (c·x padded)² is the mean over
  w of x², so the norm's output is c times the narrow one's, ε included: exact;
- head j < h takes the first d_h of its D_h dims; q is multiplied by √(D_h / d_h) so that the
  attention's 1 / √D_h scale gives the narrow 1 / √d_h; heads j ≥ h are zero (zero q, k and v:
  their output is 0);
- MLP unit i < m is the narrow unit i; the others are zero (the activation of 0 is 0: ReLU,
  GELU).

Everything else is zero. The result is the canonical form of a wide model whose extra units,
heads and coordinates are unused; an alignment (``orthogonal``, ``learned``) then maps it onto
the wide model's coordinates.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from lmc.config import LmcError

from .canonical import canonical_skeleton, canonicalize, is_canonical

#: The zoo models :func:`widen_pair` can embed into a wider copy of themselves.
WIDENABLE_MODELS = ("gpt",)

#: zoo gpt options that must agree for one model to be written into the other
SAME_OPTIONS = ("vocab", "context", "depth", "activation", "bias")


def _gpt_shape(model: nn.Module, which: str) -> dict:
    spec = getattr(model, "lmc_spec", None)
    if not spec or spec.get("name") != "gpt":
        raise LmcError(
            f"widening: the {which} model is not a zoo gpt (only zoo gpt models can be "
            "embedded into a wider one so far)"
        )
    block = model.blocks[0]
    return {
        "vocab": model.vocab,
        "context": model.context,
        "depth": model.depth,
        "activation": type(block.mlp.act).__name__,
        "bias": block.attn.out.bias is not None,
        "width": model.width,
        "heads": block.attn.heads,
        "head_dim": block.attn.head_dim,
        "hidden": block.mlp.fc1.out_features,
    }


def embed_gpt(narrow: nn.Module, wide: nn.Module) -> nn.Module:
    """The canonical model of ``wide``'s architecture that computes ``narrow``'s function
    (module docstring). Neither model is changed; the result is in ``narrow``'s dtype and on
    its device. Raises ``LmcError`` when ``narrow`` does not fit into ``wide``."""
    n, w = _gpt_shape(narrow, "narrow"), _gpt_shape(wide, "wide")
    for key in SAME_OPTIONS:
        if n[key] != w[key]:
            raise LmcError(f"widening: the models' {key} differ ({n[key]} and {w[key]})")
    for key in ("width", "heads", "head_dim", "hidden"):
        if n[key] > w[key]:
            raise LmcError(
                f"widening: the narrow model's {key} ({n[key]}) exceeds the wide one's "
                f"({w[key]}); give the narrower model first"
            )
    small = narrow if is_canonical(narrow) else canonicalize(narrow)
    out = canonical_skeleton(wide).to(
        dtype=next(small.parameters()).dtype, device=next(small.parameters()).device
    )
    src = {k: v.detach() for k, v in small.state_dict().items()}
    dst = {k: torch.zeros_like(v) for k, v in out.state_dict().items()}
    wn, ww = n["width"], w["width"]
    c = math.sqrt(ww / wn)
    q_scale = math.sqrt(w["head_dim"] / n["head_dim"])
    # narrow index -> wide index of the attention's within-head dims
    starts = [j * w["head_dim"] for j in range(n["heads"])]
    head_rows = torch.cat([torch.arange(s, s + n["head_dim"]) for s in starts])
    dst["tok.weight"][:, :wn] = c * src["tok.weight"]
    dst["pos.weight"][:, :wn] = c * src["pos.weight"]
    for i in range(n["depth"]):
        p = f"blocks.{i}."
        for part in range(3):  # q, k, v of the fused qkv
            scale = q_scale if part == 0 else 1.0
            rows_n = slice(part * wn, (part + 1) * wn)
            rows_w = part * ww + head_rows
            dst[p + "attn.qkv.weight"][rows_w, :wn] = scale * src[p + "attn.qkv.weight"][rows_n] / c
            if n["bias"]:
                dst[p + "attn.qkv.bias"][rows_w] = scale * src[p + "attn.qkv.bias"][rows_n]
        dst[p + "attn.out.weight"][:wn, head_rows] = c * src[p + "attn.out.weight"]
        m = n["hidden"]
        dst[p + "mlp.fc1.weight"][:m, :wn] = src[p + "mlp.fc1.weight"] / c
        dst[p + "mlp.fc2.weight"][:wn, :m] = c * src[p + "mlp.fc2.weight"]
        if n["bias"]:
            dst[p + "attn.out.bias"][:wn] = c * src[p + "attn.out.bias"]
            dst[p + "mlp.fc1.bias"][:m] = src[p + "mlp.fc1.bias"]
            dst[p + "mlp.fc2.bias"][:wn] = c * src[p + "mlp.fc2.bias"]
    dst["head.weight"][:, :wn] = src["head.weight"] / c
    if "head.bias" in dst and "head.bias" in src:
        dst["head.bias"] = src["head.bias"].clone()
    out.load_state_dict(dst, strict=True)
    out.train(narrow.training)
    return out


def widen_pair(model_a: nn.Module, model_b: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The pair in one architecture: the narrower model (by embedding width) embedded into the
    wider one's (:func:`embed_gpt`), the wider one in its canonical form; the order (A, B) is
    kept. Both results are canonical, so a canonical alignment method uses them as they are."""
    narrow_is_a = _gpt_shape(model_a, "first")["width"] <= _gpt_shape(model_b, "second")["width"]
    if narrow_is_a:
        return embed_gpt(model_a, model_b), canonicalize(model_b)
    return canonicalize(model_a), embed_gpt(model_b, model_a)


__all__ = ["SAME_OPTIONS", "WIDENABLE_MODELS", "embed_gpt", "widen_pair"]
