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
   fused qkv; the MLP's first layer; the head after the final norm) absorbs it:
   ``W (RMS(x) · g + b) + c = (W diag g) RMS(x) + (W b + c)``. A reader without a bias gets one
   (GPT heads are bias-free) when the norm has a bias.

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

Supported: the zoo's ``gpt`` and ``vit`` (:func:`lmc.models.build`), Hugging Face's
``GPT2LMHeadModel`` and ``ViTForImageClassification``, also inside the wrapper the CLI puts
around a ``--hf-model`` (:class:`lmc.models.factory.HFLogits`: the model under ``hf``, its state
names prefixed ``hf.``). :func:`stream_layout` says, for each, which tensors write the stream
and which layers read each norm.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from lmc.config import LmcError


@dataclass(frozen=True)
class Reader:
    """A weight layer that reads a norm's output: its module name and the weight axis of its
    input features (1 for ``nn.Linear``'s ``(out, in)`` weight, 0 for Hugging Face's
    ``Conv1D``, whose weight is ``(in, out)``)."""

    module: str
    in_axis: int


@dataclass(frozen=True)
class NormSite:
    """One LayerNorm of the stream (module name) and the layers that read its output."""

    norm: str
    readers: tuple[Reader, ...]


@dataclass(frozen=True)
class StreamLayout:
    """Where a pre-LN transformer's residual stream is written and read.

    ``writers``: ``(state name, feature axis)`` of every tensor whose values are added into
    the stream (the axis indexing the ``width`` features); ``norms``: every LayerNorm on the
    stream with its readers, the final norm (read by the head) included.
    """

    width: int
    writers: tuple[tuple[str, int], ...]
    norms: tuple[NormSite, ...]

    @property
    def readers(self) -> tuple[Reader, ...]:
        return tuple(r for site in self.norms for r in site.readers)


# ---- layouts of the supported architectures ----------------------------------------------------
def _linear(module: str) -> Reader:
    return Reader(module, 1)


def _has(model: nn.Module, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True


def _weight_and_bias(model: nn.Module, module: str, axis: int) -> list[tuple[str, int]]:
    """``(module.weight, axis)`` and, when the module has a bias, ``(module.bias, 0)``."""
    out = [(f"{module}.weight", axis)]
    if getattr(model.get_submodule(module), "bias", None) is not None:
        out.append((f"{module}.bias", 0))
    return out


def _zoo_blocks(model: nn.Module) -> tuple[list[tuple[str, int]], list[NormSite]]:
    writers: list[tuple[str, int]] = []
    norms: list[NormSite] = []
    for i, block in enumerate(model.blocks):
        p = f"blocks.{i}"
        attn = ["qkv"] if block.attn.fused else ["q", "k", "v"]
        norms.append(NormSite(f"{p}.norm1", tuple(_linear(f"{p}.attn.{n}") for n in attn)))
        norms.append(NormSite(f"{p}.norm2", (_linear(f"{p}.mlp.fc1"),)))
        writers += _weight_and_bias(model, f"{p}.attn.out", 0)
        writers += _weight_and_bias(model, f"{p}.mlp.fc2", 0)
    return writers, norms


def _zoo_gpt(model: nn.Module) -> StreamLayout:
    writers, norms = _zoo_blocks(model)
    writers = [("tok.weight", 1), ("pos.weight", 1), *writers]
    return StreamLayout(model.width, tuple(writers), (*norms, NormSite("norm", (_linear("head"),))))


def _zoo_vit(model: nn.Module) -> StreamLayout:
    writers, norms = _zoo_blocks(model)
    embed = _weight_and_bias(model, "patch_embed", 0)
    if model.pool == "cls":
        embed.append(("cls_token", 2))
    embed.append(("pos_embed", 2))
    return StreamLayout(
        model.width, tuple(embed + writers), (*norms, NormSite("norm", (_linear("head"),)))
    )


def _hf_gpt2(model: nn.Module) -> StreamLayout:
    if getattr(model.config, "add_cross_attention", False):
        raise LmcError("canonical form: GPT-2 with cross-attention is not supported")
    writers: list[tuple[str, int]] = [("transformer.wte.weight", 1), ("transformer.wpe.weight", 1)]
    norms: list[NormSite] = []
    for i in range(len(model.transformer.h)):
        p = f"transformer.h.{i}"
        norms.append(NormSite(f"{p}.ln_1", (Reader(f"{p}.attn.c_attn", 0),)))
        norms.append(NormSite(f"{p}.ln_2", (Reader(f"{p}.mlp.c_fc", 0),)))
        for out in (f"{p}.attn.c_proj", f"{p}.mlp.c_proj"):  # Conv1D: weight (in, out)
            writers += [(f"{out}.weight", 1), (f"{out}.bias", 0)]
    norms.append(NormSite("transformer.ln_f", (_linear("lm_head"),)))
    return StreamLayout(model.config.n_embd, tuple(writers), tuple(norms))


# Hugging Face ViT module names: transformers >= 5, then 4.x
_HF_VIT_NAMES = (
    ("vit.layers", ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
     "attention.o_proj", "mlp.fc1", "mlp.fc2"),
    ("vit.encoder.layer", ("attention.attention.query", "attention.attention.key",
     "attention.attention.value"), "attention.output.dense", "intermediate.dense",
     "output.dense"),
)  # fmt: skip


def _hf_vit(model: nn.Module) -> StreamLayout:
    names = next((n for n in _HF_VIT_NAMES if _has(model, n[0])), None)
    if names is None:
        raise LmcError("canonical form: this version of Hugging Face's ViT is not supported")
    layers, qkv, out, fc1, fc2 = names
    emb = "vit.embeddings"
    writers = _weight_and_bias(model, f"{emb}.patch_embeddings.projection", 0)
    writers += [(f"{emb}.cls_token", 2), (f"{emb}.position_embeddings", 2)]
    if getattr(model.get_submodule(emb), "mask_token", None) is not None:
        writers.append((f"{emb}.mask_token", 2))
    norms: list[NormSite] = []
    for i in range(len(model.get_submodule(layers))):
        p = f"{layers}.{i}"
        norms.append(NormSite(f"{p}.layernorm_before", tuple(_linear(f"{p}.{n}") for n in qkv)))
        norms.append(NormSite(f"{p}.layernorm_after", (_linear(f"{p}.{fc1}"),)))
        writers += _weight_and_bias(model, f"{p}.{out}", 0)
        writers += _weight_and_bias(model, f"{p}.{fc2}", 0)
    norms.append(NormSite("vit.layernorm", (_linear("classifier"),)))
    return StreamLayout(model.config.hidden_size, tuple(writers), tuple(norms))


def unwrap(model: nn.Module) -> tuple[nn.Module, str]:
    """``(inner, prefix)``: the library model inside a wrapper lmc puts around it
    (:class:`lmc.models.factory.HFLogits`, whose Hugging Face model is ``hf``) and the prefix
    of its names in the wrapper (``"hf."``); ``(model, "")`` for any other model."""
    from lmc.models.factory import HFLogits

    if isinstance(model, HFLogits):
        inner, prefix = unwrap(model.hf)
        return inner, f"hf.{prefix}"
    return model, ""


def _prefixed(layout: StreamLayout, prefix: str) -> StreamLayout:
    if not prefix:
        return layout
    writers = tuple((prefix + name, axis) for name, axis in layout.writers)
    norms = []
    for site in layout.norms:
        readers = tuple(Reader(prefix + r.module, r.in_axis) for r in site.readers)
        norms.append(NormSite(prefix + site.norm, readers))
    return StreamLayout(layout.width, writers, tuple(norms))


def stream_layout(model: nn.Module) -> StreamLayout:
    """The :class:`StreamLayout` of a supported pre-LN transformer (or of its canonical form),
    also inside lmc's Hugging Face wrapper (:func:`unwrap`: its names then carry the prefix).

    ``LmcError`` for any other model (convolutional nets, post-LN models such as BERT, whose
    LayerNorms sit on the stream itself and cannot be folded this way).
    """
    inner, prefix = unwrap(model)
    return _prefixed(_inner_layout(inner), prefix)


def _inner_layout(model: nn.Module) -> StreamLayout:
    from lmc.models.gpt import GPT
    from lmc.models.vit import ViT

    if isinstance(model, GPT):
        return _zoo_gpt(model)
    if isinstance(model, ViT):
        return _zoo_vit(model)
    cls = type(model)
    if cls.__module__.startswith("transformers."):
        if cls.__name__ == "GPT2LMHeadModel":
            return _hf_gpt2(model)
        if cls.__name__ == "ViTForImageClassification":
            return _hf_vit(model)
    raise LmcError(
        f"canonical form: {cls.__name__} is not a supported pre-LayerNorm transformer (zoo gpt "
        "or vit, Hugging Face GPT2LMHeadModel or ViTForImageClassification)"
    )


# ---- the rewrite ------------------------------------------------------------------------------
def _is_rms(module: nn.Module) -> bool:
    return isinstance(module, nn.RMSNorm) and module.weight is None


def is_canonical(model: nn.Module) -> bool:
    """Whether every norm of the stream is already a parameter-free RMSNorm."""
    layout = stream_layout(model)
    kinds = {_norm_kind(model, site.norm) for site in layout.norms}
    if len(kinds) > 1:
        raise LmcError("canonical form: the model mixes LayerNorms and parameter-free RMSNorms")
    return kinds == {"rms"}


def _norm_kind(model: nn.Module, name: str) -> str:
    module = model.get_submodule(name)
    if _is_rms(module):
        return "rms"
    if isinstance(module, nn.LayerNorm) and len(module.normalized_shape) == 1:
        return "layer"
    raise LmcError(
        f"canonical form: {name!r} is a {type(module).__name__}, not a LayerNorm over the "
        "features; only pre-LayerNorm transformers can be canonicalised"
    )


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def canonical_skeleton(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` shaped like its canonical form, weights *not* folded.

    Each LayerNorm of the stream becomes ``nn.RMSNorm(d, eps=LN.eps, elementwise_affine=False)``;
    a reader without a bias gets a zero bias when its norm has one; a reader whose weight is
    tied to another tensor (a tied head) gets its own copy. Load a canonical state into it
    (``load_state_dict(canonical_state(...))``) or use :func:`canonicalize`.
    """
    layout = stream_layout(model)
    out = copy.deepcopy(model)
    if is_canonical(model):
        return out
    for site in layout.norms:
        norm = out.get_submodule(site.norm)
        for reader in site.readers:
            mod = out.get_submodule(reader.module)
            tied = [
                n
                for n, p in out.named_parameters(remove_duplicate=False)
                if p is mod.weight and n != f"{reader.module}.weight"
            ]
            if tied:
                mod.weight = nn.Parameter(mod.weight.detach().clone())
            if norm.bias is not None and getattr(mod, "bias", None) is None:
                if not isinstance(mod, nn.Linear):
                    raise LmcError(f"canonical form: cannot give {reader.module!r} a bias")
                mod.bias = nn.Parameter(mod.weight.new_zeros(mod.out_features))
        rms = nn.RMSNorm(norm.normalized_shape, eps=norm.eps, elementwise_affine=False)
        _set_submodule(out, site.norm, rms)
    inner, _ = unwrap(out)
    if hasattr(inner, "tied"):  # the zoo GPT records its tying
        inner.tied = False
    config = getattr(inner, "config", None)
    if config is not None and hasattr(config, "tie_word_embeddings"):
        config.tie_word_embeddings = False  # Hugging Face must not re-tie the head
    return out


def _fold_reader(
    weight: torch.Tensor, bias: torch.Tensor | None, axis: int, g: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``W diag(g)`` along the input ``axis`` and ``c + W b`` (float64 in, float64 out)."""
    shape = [1] * weight.dim()
    shape[axis] = -1
    new_weight = weight * g.reshape(shape)
    if bias is None:
        return new_weight, None
    return new_weight, bias + torch.tensordot(weight, b, dims=([axis], [0]))


@torch.no_grad()
def canonical_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The canonical model's state dict: writers centred, norms folded into their readers.

    Computed in float64 and returned in each tensor's own dtype; the keys are those of
    :func:`canonical_skeleton` (the norms' parameters gone, added reader biases present).
    Tensors the rewrite does not touch are copies (``clone``) of the model's.
    """
    layout = stream_layout(model)
    canonical = is_canonical(model)
    state = model.state_dict()
    out = {k: v.detach().clone() for k, v in state.items()}
    for name, axis in layout.writers:
        t = state[name]
        if t.shape[axis] != layout.width:
            raise LmcError(
                f"canonical form: {name!r} axis {axis} is not the {layout.width} features"
            )
        t64 = t.detach().double()
        out[name] = (t64 - t64.mean(dim=axis, keepdim=True)).to(t.dtype)
    if canonical:
        return out
    for site in layout.norms:
        norm = model.get_submodule(site.norm)
        d = layout.width
        g = torch.ones(d, dtype=torch.float64) if norm.weight is None else norm.weight.double()
        b = torch.zeros(d, dtype=torch.float64) if norm.bias is None else norm.bias.double()
        g, b = g.cpu(), b.cpu()
        for key in ("weight", "bias"):
            out.pop(f"{site.norm}.{key}", None)
        for reader in site.readers:
            mod = model.get_submodule(reader.module)
            w = mod.weight.detach()
            c = getattr(mod, "bias", None)
            if c is None and norm.bias is not None:
                c = w.new_zeros(w.shape[1 - reader.in_axis])
            new_w, new_c = _fold_reader(
                w.double().cpu(),
                None if c is None else c.detach().double().cpu(),
                reader.in_axis,
                g,
                b,
            )
            out[f"{reader.module}.weight"] = new_w.to(w.dtype).to(w.device)
            if new_c is not None:
                out[f"{reader.module}.bias"] = new_c.to(w.dtype).to(w.device)
    return out


def canonicalize(model: nn.Module) -> nn.Module:
    """The canonical form of ``model``: a new module computing the same function whose stream
    norms are parameter-free RMSNorms (see the module docstring). ``model`` is untouched; the
    copy is in ``model``'s training mode, on its device, in its dtypes."""
    skeleton = canonical_skeleton(model)
    skeleton.load_state_dict(canonical_state(model), strict=True)
    return skeleton


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
