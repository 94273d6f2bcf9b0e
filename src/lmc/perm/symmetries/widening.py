"""A narrow transformer written exactly into a wider one's architecture (issue 30 item 4).

To merge a narrow model into a wide one, the narrow one is first embedded isometrically: a
model of the wide architecture, in the canonical form (:mod:`lmc.perm.symmetries.canonical_form`),
that computes the narrow model's function. For zoo ``gpt`` (width w, h heads of d_h dims, MLP
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

:func:`embed_transformer` does the same for any pre-LN transformer lmc canonicalises (zoo
``gpt`` and ``vit``, Hugging Face GPT-2 and ViT), read off the two canonical models' symmetry
specs rather than their module names: an axis of the stream group (the orthogonal one) takes
the first w coordinates, multiplied by c where the tensor writes the stream (role ``out``) and
by 1/c where it reads it (``in``); an axis of a within-head group maps head j's dims to the
first dims of wide head j, multiplied by √(D_h / d_h) on the q side (role ``out`` of a q/k
group: the within-head group whose ``in`` side reads the stream, where v/o's ``in`` side is the
output projection, which writes it); an axis of any other group (MLP units, whole heads) takes
the first units; every other axis must have the same size in both models (vocabulary,
positions, patches, classes). For zoo ``gpt`` it gives exactly :func:`embed_gpt`'s model.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from lmc.config import LmcError
from lmc.models import MODELS

from .canonical_form import canonical_skeleton, canonicalize, is_canonical, stream_layout
from .symmetry_spec import SymmetrySpec, default_orthogonal_groups, symmetry_spec


def widenable_models() -> tuple[str, ...]:
    """The zoo models :func:`widen_pair` can embed into a wider copy of themselves (their
    registry entry says ``widenable``; Hugging Face GPT-2 and ViT models widen too, through
    :func:`embed_transformer`), in registry order."""
    return tuple(name for name, entry in MODELS.items() if entry.widenable)


def __getattr__(name: str):
    # WIDENABLE_MODELS (the old constant) is read from the registry when asked, plug-ins included
    if name == "WIDENABLE_MODELS":
        return widenable_models()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: what the refusals of a model widening cannot handle add (e.g. rotary heads: zoo llama)
_SUPPORTED = (
    "widening supports zoo gpt and vit and Hugging Face GPT-2 and ViT (not rotary-position "
    "heads such as llama's); pair models of one width without --widen"
)

#: zoo gpt options that must agree for one model to be written into the other
SAME_OPTIONS = ("vocab", "context", "depth", "activation", "bias")


def _gpt_shape(model: nn.Module, which: str) -> dict:
    if not _is_zoo_gpt(model):
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


def _exceeds(what: str, n: int, w: int, width_n: int, width_w: int) -> LmcError:
    """The error for a narrow model (stream width ``width_n``) with more of ``what`` (``n``)
    than the wide one (``width_w``; ``w``). Only when the models came in the wrong order
    (``width_n > width_w``, a direct call) does it ask for the narrower one first:
    :func:`widen_pair` orders them itself."""
    if width_n > width_w:
        return LmcError(
            f"widening: the model to embed (stream width {width_n}) is wider than the one to "
            f"embed it into ({width_w}); give the narrower model first"
        )
    return LmcError(
        f"widening: the narrower model (stream width {width_n}) has more {what} ({n}) than "
        f"the wider one (stream width {width_w}, {w} {what}); a model is written into another "
        "only when none of its widths (stream, heads, dims per head, MLP units) exceeds the "
        "other's, so these two have no common architecture"
    )


def embed_gpt(narrow: nn.Module, wide: nn.Module) -> nn.Module:
    """The canonical model of ``wide``'s architecture that computes ``narrow``'s function, for
    two zoo ``gpt`` models (module docstring; :func:`embed_transformer` on token ids). Neither
    model is changed; the result is in ``narrow``'s dtype and on its device. Raises
    ``LmcError`` when ``narrow`` does not fit into ``wide``."""
    n, w = _gpt_shape(narrow, "narrow"), _gpt_shape(wide, "wide")
    for key in SAME_OPTIONS:
        if n[key] != w[key]:
            raise LmcError(f"widening: the models' {key} differ ({n[key]} and {w[key]})")
    names = {"width": "stream width", "heads": "heads", "head_dim": "dims per head",
             "hidden": "MLP units"}  # fmt: skip
    for key in ("width", "heads", "head_dim", "hidden"):
        if n[key] > w[key]:
            raise _exceeds(names[key], n[key], w[key], n["width"], w["width"])
    return embed_transformer(narrow, wide, _gpt_tokens(narrow))


def _gpt_tokens(model: nn.Module) -> torch.Tensor:
    """Two windows of token ids a zoo gpt accepts (to trace it)."""
    device = next(model.parameters()).device
    return torch.zeros(2, model.context, dtype=torch.long, device=device)


def _segments(spec: SymmetrySpec, name: str) -> list[tuple[int, int, str, str | None]]:
    """``(axis, segment index, group, role)`` of every transformed segment of tensor ``name``."""
    return [
        (axis, k, seg.perm, spec.role(name, axis, k))
        for axis, entry in enumerate(spec.spec[name])
        for k, seg in enumerate(entry or ())
        if seg.perm is not None
    ]


def _qk_groups(spec: SymmetrySpec, stream: str) -> set[str]:
    """The within-head groups on the q/k side: those no tensor reads as an input (role ``in``)
    while writing the stream (role ``out`` of ``stream`` on another axis), as the output
    projection reads v/o."""
    heads = spec.spec.heads
    vo: set[str] = set()
    for name in spec.spec.axes:
        segs = _segments(spec, name)
        writes = {a for a, _, g, role in segs if g == stream and role == "out"}
        vo |= {g for a, _, g, role in segs if g in heads and role == "in" and writes - {a}}
    return set(heads) - vo


def _q_side(spec: SymmetrySpec, group: str) -> set[tuple[str, int]] | None:
    """For a one-head model's q/k group (not split into q and k sides by the spec: every one of
    its segments is ``out``, at least two of them), the ``(module, segment index)`` keys of the
    side scaled: the first module's (in a fused qkv, the q segment). ``None`` otherwise."""
    segments = [
        (name, k, role)
        for name in spec.spec.axes
        for _, k, g, role in _segments(spec, name)
        if g == group
    ]
    if len(segments) < 2 or any(role != "out" for *_, role in segments):
        return None
    keys = {(name.rpartition(".")[0], k) for name, k, _ in segments}
    first = min(keys)
    return {key for key in keys if key == first}


def _axis_map(
    spec_n: SymmetrySpec,
    spec_w: SymmetrySpec,
    name: str,
    axis: int,
    sizes: tuple[int, int],
    unit_map: dict[str, tuple[torch.Tensor, Callable[[str, int, str], float | None]]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(wide index, scale) of every narrow position along ``name``'s ``axis``."""
    entry_n, entry_w = spec_n.spec[name][axis], spec_w.spec[name][axis]
    if entry_n is None or entry_w is None:
        if entry_n is not entry_w and (entry_n is None) != (entry_w is None):
            raise LmcError(f"widening: {name!r} axis {axis} is transformed in one model only")
        if sizes[0] != sizes[1]:
            raise LmcError(
                f"widening: {name!r} axis {axis} has {sizes[0]} and {sizes[1]} entries but is "
                "no width of the model (vocabulary, positions, classes must agree)"
            )
        return torch.arange(sizes[0]), torch.ones(sizes[0], dtype=torch.float64)
    if len(entry_n) != len(entry_w):
        raise LmcError(
            f"widening: {name!r} axis {axis} is laid out differently in the models; {_SUPPORTED}"
        )
    index, scale, off_w = [], [], 0
    for k, (seg_n, seg_w) in enumerate(zip(entry_n, entry_w, strict=True)):
        if seg_n.perm != seg_w.perm or seg_n.repeat != seg_w.repeat:
            raise LmcError(
                f"widening: {name!r} axis {axis} is laid out differently in the models; "
                f"{_SUPPORTED}"
            )
        if seg_n.perm is None:
            if seg_n.extent != seg_w.extent:
                raise LmcError(f"widening: {name!r} axis {axis}: a fixed part differs in size")
            index.append(off_w + torch.arange(seg_n.extent))
            scale.append(torch.ones(seg_n.extent, dtype=torch.float64))
        else:
            units, scale_of = unit_map[seg_n.perm]
            factor = scale_of(name, k, spec_w.role(name, axis, k))
            if factor is None:
                raise LmcError(
                    f"widening: {name!r} is an elementwise parameter of {seg_n.perm!r} "
                    "(canonicalise the transformer first)"
                )
            r = seg_n.repeat
            index.append(off_w + (units[:, None] * r + torch.arange(r)[None, :]).reshape(-1))
            scale.append(torch.full((seg_n.extent,), factor, dtype=torch.float64))
        off_w += seg_w.extent
    return torch.cat(index), torch.cat(scale)


def embed_transformer(narrow: nn.Module, wide: nn.Module, example_input) -> nn.Module:
    """The canonical model of ``wide``'s architecture that computes ``narrow``'s function, for
    any pre-LN transformer lmc canonicalises (module docstring); ``example_input``: a batch
    both models accept (two rows are enough), to trace their symmetry specs. Neither model is
    changed; the result is in ``narrow``'s dtype and on its device. Raises ``LmcError`` when
    ``narrow`` does not fit into ``wide``."""
    x = example_input
    small = narrow if is_canonical(narrow, x) else canonicalize(narrow, x)
    param = next(small.parameters())
    big = canonical_skeleton(wide, x).to(dtype=param.dtype, device=param.device)
    spec_n, spec_w = symmetry_spec(small, example_input), symmetry_spec(big, example_input)
    head_groups = {h for h, _ in spec_w.spec.heads.values()}  # a one-head model has none
    width_n, width_w = stream_layout(small, x).width, stream_layout(big, x).width
    if spec_n.spec.heads and not spec_w.spec.heads:
        heads_n = max(h for _, h in spec_n.spec.heads.values())
        raise _exceeds("heads", heads_n, 1, width_n, width_w)
    if not set(spec_n.group_sizes) <= set(spec_w.group_sizes) or not (
        set(spec_w.group_sizes) - set(spec_n.group_sizes) <= head_groups
    ):
        raise LmcError("widening: the models' layers differ (another depth or architecture)")
    streams = default_orthogonal_groups(spec_w)
    if len(streams) != 1 or default_orthogonal_groups(spec_n) != streams:
        raise LmcError("widening: the models have no residual stream lmc can rotate")
    (stream,) = streams
    sizes_n, sizes_w = spec_n.group_sizes, spec_w.group_sizes
    whole_heads = {h for h, _ in spec_n.spec.heads.values()}
    for g in sizes_n:
        if g in spec_n.spec.heads:  # heads x dims: told apart below
            continue
        if sizes_n[g] > sizes_w[g]:
            what = "heads" if g in whole_heads else f"units in {g!r}"
            raise _exceeds(what, sizes_n[g], sizes_w[g], width_n, width_w)
    c = math.sqrt(sizes_w[stream] / sizes_n[stream])
    qk = _qk_groups(spec_w, stream)
    unit_map: dict[str, tuple[torch.Tensor, Callable[[str, int, str], float | None]]] = {}
    for g, n in sizes_n.items():
        units, q_scale, q_side = torch.arange(n), 1.0, None
        if g == stream:
            unit_map[g] = (units, lambda _n, _k, role: {"out": c, "in": 1 / c}.get(role))
            continue
        heads_n = spec_n.spec.heads[g][1] if g in spec_n.spec.heads else 1
        heads_w = spec_w.spec.heads[g][1] if g in spec_w.spec.heads else 1
        if g in spec_w.spec.heads or (q_side := _q_side(spec_w, g)) is not None:
            if heads_n > heads_w:
                raise _exceeds("heads", heads_n, heads_w, width_n, width_w)
            d_n, d_w = n // heads_n, sizes_w[g] // heads_w
            if d_n > d_w:
                raise _exceeds("dims per head", d_n, d_w, width_n, width_w)
            units = (torch.arange(heads_n)[:, None] * d_w + torch.arange(d_n)[None, :]).reshape(-1)
            if g in qk or q_side is not None:
                q_scale = math.sqrt(d_w / d_n)
        elif g in spec_n.spec.heads:
            raise _exceeds("heads", heads_n, 1, width_n, width_w)

        def scale_of(name, k, role, q_scale=q_scale, q_side=q_side, split=g in qk):
            if role not in ("out", "in"):
                return None
            if q_side is not None:  # one head, q and k not told apart by role
                return q_scale if (name.rpartition(".")[0], k) in q_side else 1.0
            return q_scale if split and role == "out" else 1.0

        unit_map[g] = (units, scale_of)
    src = {k: v.detach() for k, v in small.state_dict().items()}
    dst = {k: torch.zeros_like(v) for k, v in big.state_dict().items()}
    if set(src) != set(dst):
        raise LmcError("widening: the models' tensors differ (another architecture)")
    for name, target in dst.items():
        value = src[name]
        if value.dim() != target.dim():
            raise LmcError(f"widening: {name!r} has another number of axes in the models")
        if not value.is_floating_point() or name not in spec_w.spec:
            if value.shape != target.shape:
                raise LmcError(f"widening: {name!r} differs in shape and is no width")
            dst[name] = value.clone()
            continue
        out = value.double()
        for axis in range(value.dim()):
            index, scale = _axis_map(
                spec_n, spec_w, name, axis, (value.shape[axis], target.shape[axis]), unit_map
            )
            shape = [1] * value.dim()
            shape[axis] = -1
            out = out * scale.to(out.device).reshape(shape)
            grown = list(out.shape)
            grown[axis] = target.shape[axis]
            out = out.new_zeros(grown).index_copy_(axis, index.to(out.device), out)
        dst[name] = out.to(target.dtype)
    big.load_state_dict(dst, strict=True)
    big.train(narrow.training)
    return big


def widen_pair(
    model_a: nn.Module, model_b: nn.Module, example_input=None
) -> tuple[nn.Module, nn.Module]:
    """The pair in one architecture: the narrower model (by the width of its residual stream)
    embedded into the wider one's (:func:`embed_transformer`; :func:`embed_gpt` for zoo
    ``gpt``), the wider one in its canonical form; the order (A, B) is kept. Both results are
    canonical, so a canonical alignment method uses them as they are. ``example_input``: a
    batch both models accept (needed except for zoo ``gpt``, whose token ids lmc makes)."""
    width_a, width_b = stream_layout(model_a).width, stream_layout(model_b).width
    narrow, wide = (model_a, model_b) if width_a <= width_b else (model_b, model_a)
    if _is_zoo_gpt(narrow) and _is_zoo_gpt(wide):
        embedded = embed_gpt(narrow, wide)
    elif example_input is None:
        raise LmcError("widening: give an example input to trace the models with")
    else:
        embedded = embed_transformer(narrow, wide, example_input)
    if width_a <= width_b:
        return embedded, canonicalize(model_b)
    return canonicalize(model_a), embedded


def _is_zoo_gpt(model: nn.Module) -> bool:
    spec = getattr(model, "lmc_spec", None)
    return bool(spec) and spec.get("name") == "gpt"


__all__ = [
    "SAME_OPTIONS",
    "widenable_models",
    "embed_gpt",
    "embed_transformer",
    "widen_pair",
]
