"""STE matching asks the task for its loss: next-token prediction on a tiny (tied-head) GPT."""

from __future__ import annotations

import copy

import pytest
import torch

from lmc.data import NEXT_TOKEN
from lmc.merge import lerp
from lmc.models import build
from lmc.perm import apply_permutation, spec_from_model, ste_matching, weight_matching

VOCAB, CONTEXT = 7, 6


def test_ste_on_token_windows_judges_by_the_per_token_loss():
    a = build("gpt", seed=0, vocab=VOCAB, context=CONTEXT, width=16, heads=2, depth=1).eval()
    b = build("gpt", seed=1, vocab=VOCAB, context=CONTEXT, width=16, heads=2, depth=1).eval()
    x = torch.randint(0, VOCAB, (30, CONTEXT), generator=torch.Generator().manual_seed(0))
    y = (x + 1) % VOCAB  # targets (N, T): the next token of a counting sequence
    spec = spec_from_model(a, x[:2])
    result = ste_matching(spec, a, b, x, y, steps=1, batch_size=8, holdout=6, task="next-token")
    # step 0's candidate is weight matching's permutation (with STE's start and solver),
    # judged on the last 6 whole windows
    perm = weight_matching(
        spec, a.state_dict(), b.state_dict(), seed=0, init="identity", solver="scipy"
    ).perm
    mid = copy.deepcopy(a)
    mid.load_state_dict(lerp(a.state_dict(), apply_permutation(spec, perm, b.state_dict()), 0.5))
    with torch.no_grad():
        want = NEXT_TOKEN.loss(mid(x[-6:]), y[-6:]).item()
    assert result.holdout == 6 and result.steps == 1
    assert result.initial_loss == pytest.approx(want, rel=1e-5)
    assert result.best_loss <= result.initial_loss
