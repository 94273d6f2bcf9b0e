"""A small input batch a model accepts, made from the model itself (to trace it).

:func:`lmc.perm.canonicalize` and :func:`lmc.perm.symmetries.canonical_form.stream_layout` read a
model's stream off its traced graph, which needs an example input; callers that do not pass one get
one from here. What the model tells: the zoo's token models (``gpt``, ``llama``: ``vocab`` and
``context``), image models (``vit``: ``in_channels`` and ``image_size``) and vector models
(``input_size``), a Hugging Face
model's config (``vocab_size`` with ``max_position_embeddings`` / ``n_positions``; or
``num_channels`` with ``image_size``), also inside lmc's wrapper
(:class:`lmc.models.factory.HFLogits`); otherwise a model whose first layer is an
``nn.Embedding`` gets token ids. Two rows; token ids are ``0, 1, 2, ...`` modulo the
vocabulary (the trace depends on shapes only), images a seeded standard normal draw.
"""

from __future__ import annotations

import torch
from torch import nn

from lmc.config import LmcError
from lmc.models.factory import HFLogits

#: The longest token window made for a model whose context is longer (shapes only matter).
MAX_TOKENS = 16


def _device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    for p in model.parameters():
        if p.is_floating_point():
            return p.device, p.dtype
    return torch.device("cpu"), torch.float32


def _tokens(vocab: int, length: int, device: torch.device) -> torch.Tensor:
    ids = torch.arange(2 * length, device=device).reshape(2, length) % max(int(vocab), 1)
    return ids.long()


def _image(channels: int, size, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    gen = torch.Generator().manual_seed(0)
    return torch.randn(2, int(channels), int(h), int(w), generator=gen).to(device, dtype)


def unwrap(model: nn.Module) -> tuple[nn.Module, str]:
    """``(inner, prefix)``: the library model inside a wrapper lmc puts around it
    (:class:`lmc.models.factory.HFLogits`, whose Hugging Face model is ``hf``) and the prefix
    of its names in the wrapper (``"hf."``); ``(model, "")`` for any other model."""
    if isinstance(model, HFLogits):
        inner, prefix = unwrap(model.hf)
        return inner, f"hf.{prefix}"
    return model, ""


def example_input(model: nn.Module, *, full_context: bool = True) -> torch.Tensor:
    """Two rows the model accepts (see the module docstring); ``LmcError`` when the model does
    not say what it reads (pass an example input then). ``full_context``: token windows as
    long as a zoo model's context (a Hugging Face model's are at most ``MAX_TOKENS``)."""
    inner, _ = unwrap(model)
    device, dtype = _device_dtype(inner)
    spec = getattr(inner, "lmc_spec", None)
    options = spec.get("options", {}) if isinstance(spec, dict) else {}
    if hasattr(inner, "vocab") and hasattr(inner, "context"):
        length = int(inner.context) if full_context else min(int(inner.context), MAX_TOKENS)
        return _tokens(inner.vocab, length, device)
    if "in_channels" in options and "image_size" in options:
        return _image(options["in_channels"], options["image_size"], device, dtype)
    if isinstance(options.get("input_size"), int):
        gen = torch.Generator().manual_seed(0)
        return torch.randn(2, options["input_size"], generator=gen).to(device, dtype)
    config = getattr(inner, "config", None)
    if config is not None:
        if getattr(config, "num_channels", None) and getattr(config, "image_size", None):
            return _image(config.num_channels, config.image_size, device, dtype)
        vocab = getattr(config, "vocab_size", None)
        if vocab:
            limit = next(
                (
                    getattr(config, key)
                    for key in ("max_position_embeddings", "n_positions", "n_ctx")
                    if isinstance(getattr(config, key, None), int)
                ),
                MAX_TOKENS,
            )
            return _tokens(vocab, max(1, min(limit, MAX_TOKENS)), device)
    first = next((m for m in inner.modules() if isinstance(m, nn.Embedding)), None)
    if first is not None:
        return _tokens(first.num_embeddings, 4, device)
    raise LmcError(
        f"cannot make an example input for {type(inner).__name__}: it does not say what it reads "
        "(pass example_input, a batch of two rows it accepts)"
    )


__all__ = ["MAX_TOKENS", "example_input", "output_tensor", "unwrap"]


def output_tensor(y: object) -> torch.Tensor | None:
    """A model's output as one tensor: the output itself, its ``logits`` (a Hugging Face
    ``ModelOutput``), else the first floating tensor in it (tuples, lists and dicts searched in
    order); ``None`` without one."""
    if isinstance(y, torch.Tensor):
        return y
    logits = getattr(y, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    values = y.values() if isinstance(y, dict) else y if isinstance(y, (tuple, list)) else ()
    for v in values:
        t = output_tensor(v)
        if t is not None and t.is_floating_point():
            return t
    return None
