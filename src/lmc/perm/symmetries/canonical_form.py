"""Canonical form of a pre-LayerNorm transformer: LayerNorm folded away (computational invariance).

A pre-LN transformer reads its residual stream ``x`` (width ``d``) only through LayerNorms,

    LN(x) = (x - μ(x)) / √(σ²(x) + ε) · g + b,     μ = mean over features, σ² = mean((x - μ)²).

The canonical form rewrites the weights so that the function is unchanged and every LayerNorm
becomes a parameter-free RMSNorm, ``RMS(x) = x / √(mean(x²) + ε)``, with the *same* ε:

1. *Centre the writers.* Every tensor that writes the stream (token / patch / position
   embeddings, the class token, each attention output projection and each MLP output layer,
   weights and biases alike) has the mean over its ``d`` output features subtracted:
   ``W -> (I - 11ᵀ/d) W``. The stream is a sum of such writes, so ``μ(x) = 0`` everywhere, and
   LayerNorm only ever subtracted μ: on a centred stream ``σ² = mean(x²)`` and
   ``LN(x) = RMS(x) · g + b`` exactly (the same ε; no rescaling of ε is needed).
2. *Fold the affine into the readers.* Each Linear that reads a norm's output (q, k, v or the
   fused qkv; the MLP's first layer; the head after the final norm) absorbs it (a gain stored
   as ``g - 1``, Gemma's ``x̂ · (1 + w)``, is folded as ``1 + w``):
   ``W (RMS(x) · g + b) + c = (W diag g) RMS(x) + (W b + c)``. A reader without a bias gets one
   (GPT heads are bias-free) when the norm has a bias.

Before both, two per-feature maps of the stream's writes are folded into the tensors they act
on (:mod:`lmc.perm.symmetries.residual_stream`): a layer scale ``s`` on a branch's output
(``x + s ⊙ (W h + c)``) into the layer that writes the branch, ``W -> diag(s) W``, ``c -> s ⊙ c``
(its module becomes ``nn.Identity``, or a gain held by a larger module the number 1); and a norm
applied to an embedding lookup into the table, each row ``E_i -> norm(E_i)`` (the module becomes
``nn.Identity``). A reader whose input is ``k`` copies of a norm's output side by side (a class
token and pooled tokens concatenated) absorbs the gain and bias repeated ``k`` times.

In floating point the stream is centred up to rounding, so canonical outputs agree with the
original to rounding error (about 1e-12 relative in float64, 1e-6 in float32).

The canonical stream has the symmetry LayerNorm hides: RMS(Q x) = Q RMS(x) for every orthogonal
``Q``, so ``writers -> Q W`` with ``readers -> W Qᵀ`` keeps the function (SliceGPT's
"computational invariance"; see docs/science.md, "Symmetries beyond permutations").

Representation: :func:`canonicalize` returns a *copy* of the model in which each LayerNorm
module is an ``nn.RMSNorm(d, eps, elementwise_affine=False)`` (no state), readers have the bias
they need, weights tied between a writer and a reader (a GPT's token embedding and head) are
untied (the fold changes them differently), and the state holds the folded weights. The
state-dict names are the original ones minus the norms' parameters plus any added reader bias
(e.g. ``head.bias``). :func:`canonical_skeleton` is that module without the folding (load a
canonical state into it); :func:`canonical_state` the folded state alone.

Which tensors write the stream, which norms read it and which layers read each norm is read
off the model's traced graph (:mod:`lmc.perm.symmetries.residual_stream`), not its class: any
transformer whose stream is read through LayerNorms (with or without gain and bias) or RMSNorms
(with or without gain; no centring then: RMSNorm has no mean), whatever their classes, also inside
the wrapper the CLI puts around a ``--hf-model`` (:class:`lmc.models.factory.HFLogits`: names
prefixed ``hf.``). Every function takes an optional ``example_input`` to trace with (default: one
made from the model, :func:`lmc.perm.symmetries.example_inputs.example_input`). A model whose stream
is normalised in place (post-LN, as BERT) or written or read by something lmc cannot fold is refused
with an ``LmcError`` naming the module and why.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from lmc.config import LmcError
from lmc.models import eval_mode

from .example_inputs import example_input as make_example
from .example_inputs import output_tensor, unwrap
from .residual_stream import NormSite, Reader, StreamLayout, traced_layout


def stream_layout(model: nn.Module, example_input: Any = None) -> StreamLayout:
    """The :class:`StreamLayout` of a pre-norm transformer (or of its canonical form), read
    off its traced graph on ``example_input``
    (:func:`lmc.perm.symmetries.residual_stream.traced_layout`; also inside lmc's Hugging Face
    wrapper, names prefixed).

    ``LmcError`` for any other model (convolutional nets; post-LN models such as BERT, whose
    norms sit on the stream itself and cannot be folded this way), naming what is in the way.
    """
    return traced_layout(model, example_input)


# ---- the rewrite ------------------------------------------------------------------------------
def is_canonical(model: nn.Module, example_input: Any = None) -> bool:
    """Whether every norm of the stream is already a parameter-free RMSNorm."""
    return stream_layout(model, example_input).canonical


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def _bias_target(model: nn.Module, reader: Reader) -> str:
    """The state name of the bias a reader gets when its norm has one and it has none."""
    if reader.bias is not None:
        return reader.bias
    module = model.get_submodule(reader.module) if reader.module else model
    if isinstance(module, nn.Linear) and reader.weight == f"{reader.module}.weight":
        return f"{reader.module}.bias"
    if isinstance(module, nn.MultiheadAttention) and reader.weight.endswith("in_proj_weight"):
        return f"{reader.module}.in_proj_bias"
    raise LmcError(f"canonical form: cannot give {reader.module!r} a bias")


def canonical_skeleton(model: nn.Module, example_input: Any = None) -> nn.Module:
    """A deep copy of ``model`` shaped like its canonical form, weights *not* folded.

    Each norm of the stream becomes ``nn.RMSNorm(d, eps=its eps, elementwise_affine=False)``;
    a reader without a bias gets a zero bias when its norm has one; a reader whose weight is
    tied to another tensor (a tied head) gets its own copy. Load a canonical state into it
    (``load_state_dict(canonical_state(...))``) or use :func:`canonicalize`.
    """
    layout = stream_layout(model, example_input)
    _check_unshared_scales(model, layout)
    out = copy.deepcopy(model)
    if layout.canonical:
        return out
    for site in layout.norms:
        for reader in site.readers:
            weight = out.get_parameter(reader.weight)
            tied = [
                n
                for n, p in out.named_parameters(remove_duplicate=False)
                if p is weight and n != reader.weight
            ]
            if tied:
                owner_name, _, leaf = reader.weight.rpartition(".")
                owner = out.get_submodule(owner_name) if owner_name else out
                setattr(owner, leaf, nn.Parameter(weight.detach().clone()))
            if site.bias is not None and reader.bias is None:
                target = _bias_target(out, reader)
                owner_name, _, leaf = target.rpartition(".")
                owner = out.get_submodule(owner_name) if owner_name else out
                rows = weight.shape[1 - reader.in_axis] if weight.dim() == 2 else None
                if rows is None:
                    raise LmcError(f"canonical form: cannot give {reader.module!r} a bias")
                setattr(owner, leaf, nn.Parameter(weight.detach().new_zeros(rows)))
        rms = nn.RMSNorm(layout.width, eps=site.eps, elementwise_affine=False)
        _set_submodule(out, site.norm, rms)
    for lookup in layout.embedding_norms:  # folded into the table's rows
        _set_submodule(out, lookup.norm, nn.Identity())
    for scale in layout.scales:  # folded into the writers it scales
        if scale.module:
            _set_submodule(out, scale.module, nn.Identity())
        else:
            owner_name, _, leaf = scale.param.rpartition(".")
            owner = out.get_submodule(owner_name) if owner_name else out
            delattr(owner, leaf)
            setattr(owner, leaf, 1.0)
    inner, _ = unwrap(out)
    if hasattr(inner, "tied"):  # the zoo's language models record their tying
        inner.tied = False
    config = getattr(inner, "config", None)
    if config is not None and hasattr(config, "tie_word_embeddings"):
        config.tie_word_embeddings = False  # Hugging Face must not re-tie the head
    return out


def _fold_reader(
    weight: torch.Tensor, bias: torch.Tensor | None, axis: int, g: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``W diag(g)`` along the input ``axis`` and ``c + W b`` (float64 in, float64 out); an
    ``axis`` of k × d entries reads k copies of the norm's output side by side (a class token
    and mean-pooled tokens concatenated): ``g`` and ``b`` are repeated k times."""
    copies = weight.shape[axis] // g.shape[0]
    if copies > 1 and weight.shape[axis] == copies * g.shape[0]:
        g, b = g.repeat(copies), b.repeat(copies)
    shape = [1] * weight.dim()
    shape[axis] = -1
    new_weight = weight * g.reshape(shape)
    if bias is None:
        return new_weight, None
    return new_weight, bias + torch.tensordot(weight, b, dims=([axis], [0]))


def _check_unshared_scales(model: nn.Module, layout: StreamLayout) -> None:
    """``LmcError`` where a layer scale's gain is one tensor under several names (one scale
    module used in two places): folding it into one branch's writer would leave the others."""
    if not layout.scales:
        return
    state = model.state_dict(keep_vars=True)
    for scale in layout.scales:
        gain = state[scale.param]
        others = [k for k, v in state.items() if v is gain and k != scale.param]
        if others:
            raise LmcError(
                f"canonical form: the layer scale {scale.param!r} is also {others[0]!r} (one "
                "scale used in several places) and cannot be folded into one branch; "
                "permutations still work (--align weight)"
            )


@torch.no_grad()
def canonical_state(model: nn.Module, example_input: Any = None) -> dict[str, torch.Tensor]:
    """The canonical model's state dict: writers centred (when a norm is a LayerNorm), norms
    folded into their readers.

    Computed in float64 and returned in each tensor's own dtype; the keys are those of
    :func:`canonical_skeleton` (the norms' parameters gone, added reader biases present).
    Tensors the rewrite does not touch are copies (``clone``) of the model's.
    """
    layout = stream_layout(model, example_input)
    _check_unshared_scales(model, layout)
    state = model.state_dict()
    out = {k: v.detach().clone() for k, v in state.items()}
    if layout.canonical:
        return out
    d = layout.width
    for name, axis in layout.writers:
        if state[name].shape[axis] != d:
            raise LmcError(f"canonical form: {name!r} axis {axis} is not the {d} features")
    for lookup in layout.embedding_norms:  # norm(E[ids]) = norm(E)[ids], row by row
        t = state[lookup.table]
        rows = t.detach().double().movedim(lookup.axis, -1)
        c = rows - rows.mean(-1, keepdim=True) if lookup.kind == "layer" else rows
        eps = lookup.eps if lookup.eps is not None else torch.finfo(t.dtype).eps
        normed = c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps)
        if lookup.gain is not None:
            normed = normed * (state[lookup.gain].double().to(t.device) + lookup.gain_offset)
        if lookup.bias is not None:
            normed = normed + state[lookup.bias].double().to(t.device)
        out[lookup.table] = normed.movedim(-1, lookup.axis).to(t.dtype)
        for key in (lookup.gain, lookup.bias):
            if key is not None:
                out.pop(key, None)
    for scale in layout.scales:  # s ⊙ (W x + c) = (diag(s) W) x + s ⊙ c
        s = state[scale.param].detach().double().reshape(-1)
        for name, axis in scale.writers:
            t = out[name]
            shape = [1] * t.dim()
            shape[axis] = -1
            out[name] = (t.double() * s.to(t.device).reshape(shape)).to(t.dtype)
        out.pop(scale.param, None)
    if layout.centred:
        for name, axis in layout.writers:
            t = out[name]
            t64 = t.detach().double()
            out[name] = (t64 - t64.mean(dim=axis, keepdim=True)).to(t.dtype)
    for site in layout.norms:
        g = (
            torch.ones(d, dtype=torch.float64)
            if site.gain is None
            else state[site.gain].double() + site.gain_offset
        )
        b = torch.zeros(d, dtype=torch.float64) if site.bias is None else state[site.bias].double()
        g, b = g.cpu(), b.cpu()
        for key in (site.gain, site.bias):
            if key is not None:
                out.pop(key, None)
        for reader in site.readers:
            w = state[reader.weight].detach()
            c = None if reader.bias is None else state[reader.bias].detach()
            if c is None and site.bias is not None:
                c = w.new_zeros(w.shape[1 - reader.in_axis])
            new_w, new_c = _fold_reader(
                w.double().cpu(),
                None if c is None else c.double().cpu(),
                reader.in_axis,
                g,
                b,
            )
            out[reader.weight] = new_w.to(w.dtype).to(w.device)
            if new_c is not None:
                out[reader.bias or _bias_target(model, reader)] = new_c.to(w.dtype).to(w.device)
    return out


def canonicalize(model: nn.Module, example_input: Any = None) -> nn.Module:
    """The canonical form of ``model``: a new module computing the same function whose stream
    norms are parameter-free RMSNorms (see the module docstring). ``model`` is untouched; the
    copy is in ``model``'s training mode, on its device, in its dtypes. ``example_input``: a
    batch to trace the model with (default: one made from the model).

    The copy is checked on that batch (eval mode, in the model's dtype): where it does not
    compute the model's function (relative difference above :data:`CHECK_TOL`, or
    :data:`HALF_CHECK_TOL` for float16 and bfloat16 models) or fails to run
    -- a module that reads its norms' parameters itself instead of calling them, as
    ``nn.TransformerEncoderLayer``'s fused inference path does -- ``LmcError`` says so."""
    if example_input is None:
        example_input = make_example(model)
    skeleton = canonical_skeleton(model, example_input)
    skeleton.load_state_dict(canonical_state(model, example_input), strict=True)
    _check_function(model, skeleton, example_input)
    return skeleton


#: Relative difference between a model's output and its canonical form's on the example input
#: above which the canonical form is refused (float32 rounding gives about 1e-6).
CHECK_TOL = 1e-3
#: The same for a float16 or bfloat16 model, checked in its own dtype (its rounding is ~1e-2).
HALF_CHECK_TOL = 5e-2


def _check_function(model: nn.Module, canonical: nn.Module, example: Any) -> None:
    """``LmcError`` where ``canonical`` does not compute ``model``'s function on ``example``."""
    params = list(model.parameters())
    dtypes = {p.dtype for p in params}
    if not dtypes or not all(d.is_floating_point for d in dtypes):
        return
    half = not dtypes <= {torch.float32, torch.float64}
    tol = HALF_CHECK_TOL if half else CHECK_TOL
    if any(p.is_meta for p in params):  # nothing to run on: a lazily loaded skeleton
        return
    inputs = example if isinstance(example, tuple) else (example,)
    with eval_mode(model), torch.no_grad():
        want = output_tensor(model(*inputs))
    if want is None:
        return

    def norms() -> str:
        return ", ".join(repr(site.norm) for site in stream_layout(model, example).norms[:2])

    try:
        with eval_mode(canonical), torch.no_grad():
            got = output_tensor(canonical(*inputs))
    except Exception as exc:  # noqa: BLE001 - whatever the model's own code raises
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LmcError(
            f"canonical form: {type(model).__name__} does not run with its norms ({norms()}, ...) "
            f"replaced by parameter-free RMSNorms ({type(exc).__name__}: {first}): a module reads "
            "their parameters itself (as nn.TransformerEncoderLayer's fused inference path "
            "does); permutations still work (--align weight)"
        ) from exc
    scale = float(want.double().norm()) or 1.0
    diff = float((got.double() - want.double()).norm()) / scale if got is not None else math.inf
    if not diff <= tol:
        raise LmcError(
            f"canonical form: {type(model).__name__} with its norms ({norms()}, ...) folded does "
            f"not compute its function (relative difference {diff:.1e} on the example input): "
            "some module uses the norms other than by calling them; permutations still work "
            "(--align weight)"
        )


__all__ = [
    "NormSite",
    "Reader",
    "StreamLayout",
    "canonical_skeleton",
    "canonical_state",
    "canonicalize",
    "is_canonical",
    "stream_layout",
    "unwrap",
]
