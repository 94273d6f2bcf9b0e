"""What the zoo's causal language models, ``gpt`` and ``llama``, build alike: the output head.

Both take token ids (n, T) and end in a bias-free Linear ``head`` (width -> vocab) that may
share the token embedding's weight; :func:`finish_causal_lm` builds it, and the rest of what
ends their constructors, once.
"""

from __future__ import annotations

from torch import nn

from .transformer import TokenIdsCheck


def finish_causal_lm(model: nn.Module, name: str) -> None:
    """End the constructor of causal LM ``name`` (zoo ``gpt``, ``llama``), whose ``width``,
    ``vocab``, ``tied`` and token embedding ``tok`` are set and whose other modules are built:
    add ``head``, a bias-free Linear width -> vocab that shares ``tok``'s weight when ``tied``
    (one tensor, two state-dict names: ``tok.weight`` and ``head.weight``), draw the model's
    own initialisation (``model.lmc_init(None)``) and register :class:`TokenIdsCheck` (``name``
    in its messages) as the forward pre-hook that checks the input. Call it last: the head is
    registered, and its default initialisation drawn from the global RNG, after every other
    module of the model."""
    model.head = nn.Linear(model.width, model.vocab, bias=False)
    if model.tied:
        model.head.weight = model.tok.weight
    model.lmc_init(None)
    model.register_forward_pre_hook(TokenIdsCheck(name))
