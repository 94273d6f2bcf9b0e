"""What widening says when two models have no common architecture (issue 41): a narrower
model (by its stream) with more heads, dims per head or MLP units than the wider one is told
so, not to "give the narrower model first", which it was; only models given in the wrong
order to the functions that take them in order are told that."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build
from lmc.perm.widen import embed_gpt, embed_transformer, widen_pair


def _gpt(width, heads, seed=0, **options):
    options = {"vocab": 13, "context": 7, "depth": 2, **options}
    return build("gpt", seed=seed, width=width, heads=heads, **options).double().eval()


@pytest.mark.parametrize(
    ("narrow", "wide", "what"),
    [((8, 2), (16, 1), "more heads (2)"), ((16, 4), (32, 2), "more heads (4)"),
     ((16, 1), (32, 4), "more dims per head (16)")],
    ids=["two-heads-into-one", "four-into-two", "head-dims"],
)  # fmt: skip
def test_a_narrower_model_that_does_not_fit_is_told_why(narrow, wide, what):
    small, big = _gpt(*narrow), _gpt(*wide, seed=1)
    # zoo gpts: lmc makes the tokens to trace them with; widen_pair orders the pair itself
    for call in (lambda: embed_gpt(small, big), lambda: widen_pair(small, big),
                 lambda: widen_pair(big, small)):  # fmt: skip
        with pytest.raises(LmcError) as err:
            call()
        message = str(err.value)
        assert what in message and f"(stream width {narrow[0]})" in message
        assert "give the narrower model first" not in message
        assert "\n" not in message


def test_only_a_wrong_order_asks_for_the_narrower_model_first():
    narrow, wide = _gpt(8, 2), _gpt(16, 2, seed=1)
    with pytest.raises(LmcError, match=r"stream width 16\) is wider .*narrower model first"):
        embed_gpt(wide, narrow)
    tokens = torch.zeros(2, 7, dtype=torch.long)
    with pytest.raises(LmcError, match="give the narrower model first"):
        embed_transformer(wide, narrow, tokens)
