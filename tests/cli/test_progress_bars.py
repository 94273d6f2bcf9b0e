"""Progress bars end complete: weight matching that converges early fills its bar."""

from __future__ import annotations

import io

import pytest
import torch

import lmc.perm.weight_match as wm_module
from lmc.config import progress
from lmc.config.progress import complete, progress_bar
from lmc.models import build
from lmc.perm import apply_permutation, random_permutation, spec_from_model, weight_matching


@pytest.fixture
def bars(monkeypatch):
    """The bars weight matching makes, drawn into a string rather than stderr."""
    made: list[tuple[object, io.StringIO]] = []

    def recording(total, *, quiet=False, **kwargs):
        bar = progress_bar(total, quiet=quiet, **{**kwargs, "file": io.StringIO()})
        if not quiet:
            made.append((bar, bar.fp))
        return bar

    monkeypatch.setattr(wm_module, "progress_bar", recording)
    return made


def _pair():
    model = build("mlp", seed=3, input_size=6, width=8, depth=2, num_classes=3)
    spec = spec_from_model(model, torch.zeros(2, 6))
    state_a = model.state_dict()
    state_b = apply_permutation(spec, random_permutation(spec, 5), state_a)
    return spec, state_a, state_b


def test_weight_matching_bar_ends_full_when_it_converges_early(bars):
    spec, state_a, state_b = _pair()
    result = weight_matching(spec, state_a, state_b, max_iter=40, quiet=False)
    assert result.converged and result.passes < 40  # it did stop early
    ((bar, drawn),) = bars
    assert bar.total == 40 and bar.n == 40  # the total is reached
    assert bar.disable  # closed (tqdm disables a bar when it is closed)
    text = drawn.getvalue()
    assert "40/40" in text and f"converged in pass {result.passes}" in text


def test_weight_matching_bar_at_max_iter_says_so(bars):
    model_a = build("mlp", seed=1, input_size=6, width=16, depth=2, num_classes=3)
    model_b = build("mlp", seed=2, input_size=6, width=16, depth=2, num_classes=3)
    spec = spec_from_model(model_a, torch.zeros(2, 6))
    result = weight_matching(
        spec, model_a.state_dict(), model_b.state_dict(), max_iter=1, tol=0.0, quiet=False
    )
    assert result.passes == 1
    ((bar, drawn),) = bars
    assert bar.n == bar.total == 1
    expected = "converged in pass 1" if result.converged else "max_iter reached"
    assert expected in drawn.getvalue()


def test_quiet_weight_matching_makes_no_bar(bars):
    weight_matching(*_pair(), quiet=True)
    assert bars == []


def test_complete_fills_a_bar_left_early_and_leaves_quiet_bars_alone():
    bar = progress_bar(10, file=io.StringIO(), desc="x")
    bar.update(3)
    complete(bar, "done early")
    assert bar.n == 10 and bar.disable and "done early" in bar.fp.getvalue()
    assert "10/10" in bar.fp.getvalue()
    quiet = progress_bar(10, quiet=True)
    complete(quiet)
    assert quiet.n == 0  # a quiet bar draws nothing and counts nothing
    unsized = progress_bar(None, file=io.StringIO())
    unsized.update(2)
    complete(unsized)
    assert unsized.disable and unsized.total is None and unsized.n == 2


def test_a_bar_that_wraps_an_iterable_closes_itself_when_left():
    """Why weight matching advances its bar by hand: leaving a loop over a tqdm iterator
    closes the bar at once, at the count it had, so it could not be completed after."""
    bar = progress(range(10), file=io.StringIO())
    for i in bar:
        if i == 2:
            break
    assert bar.disable and bar.n < 10
