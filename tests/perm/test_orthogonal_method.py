"""The ``orthogonal`` alignment method (issue 30 item 3): registered like the others, it aligns
the canonical forms of two pre-LN transformers, recovers a known stream rotation with
permutations through :func:`lmc.perm.align`, and the pair is measured between the canonical
models (the same functions) in ``run_pair``."""

from __future__ import annotations

import argparse

import pytest
import torch

from lmc.config import LmcError
from lmc.data.text import build_text_dataset
from lmc.metrics import PathSettings
from lmc.models import build
from lmc.pair import AnalysisOptions, PairSettings, run_pair
from lmc.perm import Alignment, Orthogonal, align, random_alignment
from lmc.perm.canonical import canonicalize
from lmc.perm.methods import get_method
from lmc.perm.orthogonal_match import default_orthogonal_groups, distance_from_permutation
from lmc.perm.symmetry import symmetry_spec
from lmc.perm.transforms import Permutation

WIDTH, HEADS, VOCAB, CONTEXT = 8, 2, 11, 6


def _gpt(seed: int):
    return build(
        "gpt", seed=seed, vocab=VOCAB, context=CONTEXT, width=WIDTH, depth=2, heads=HEADS
    ).double()


def _tokens(n: int = 4) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, CONTEXT), generator=torch.Generator().manual_seed(0))


def test_the_method_record_says_it_aligns_canonical_forms():
    record = get_method("orthogonal")
    assert record.canonical and not record.needs_data
    assert [s.name for s in record.settings] == ["max_iter", "tol"]
    assert not get_method("weight").canonical


def _moved_copy(a, spec, perm_seed: int, rotation_seed: int):
    """``(B, stream)``: the canonical GPT ``a`` under a known alignment, random permutations of
    every group (``perm_seed``) but the residual stream, which a Haar-random rotation
    (``rotation_seed``) turns; and the stream's group."""
    (stream,) = default_orthogonal_groups(spec)
    known = dict(random_alignment(spec, perm_seed, "permutation"))
    known[stream] = Orthogonal.random(spec.group_sizes[stream], rotation_seed)
    b = canonicalize(_gpt(0).eval())
    b.load_state_dict(Alignment(known).apply(spec, a.state_dict()))
    return b, stream


def test_a_known_rotation_and_permutations_are_recovered_through_align():
    canonical_a = canonicalize(_gpt(0).eval())
    x = _tokens(2)
    model_b, stream = _moved_copy(canonical_a, symmetry_spec(canonical_a, x), 3, 4)
    result = align("orthogonal", canonical_a, model_b, inputs=x)
    for name, want in canonical_a.state_dict().items():
        assert torch.allclose(result.state_dict[name], want, atol=1e-4), name
    assert result.info["canonical"] is True and result.info["orthogonal_groups"] == [stream]
    assert result.info["objective_after"] > result.info["objective_before"]
    assert result.models is not None and result.models[0] is canonical_a  # already canonical
    # a Haar-random rotation is far from every permutation
    assert result.info["distance_from_permutation"][stream] > 0.5


def test_distance_from_permutation_is_zero_for_permutations_and_signed_ones():
    perm = Permutation(torch.tensor([2, 0, 1, 3]))
    assert distance_from_permutation(perm) == 0.0
    assert distance_from_permutation(perm.as_orthogonal(1)) == pytest.approx(0.0, abs=1e-12)
    q = Orthogonal.random(64, 0)
    assert 0.8 < distance_from_permutation(q) <= 2**0.5


def test_original_models_are_canonicalised_and_the_function_is_kept():
    a, b = _gpt(0).eval(), _gpt(1).eval()
    x = _tokens()
    result = align("orthogonal", a, b, inputs=x)
    ca, cb = result.models
    with torch.no_grad():
        assert torch.allclose(ca(x), a(x), atol=1e-8)  # the canonical pair: the same functions
        assert torch.allclose(cb(x), b(x), atol=1e-8)
        aligned = canonicalize(b)
        aligned.load_state_dict(result.state_dict)
        assert torch.allclose(aligned(x), b(x), atol=1e-8)  # the alignment keeps B's function
    assert result.info["objective_after"] >= result.info["objective_before"]


@pytest.mark.parametrize("method", ["orthogonal", "orthogonal-activation"])
def test_run_pair_measures_the_path_between_the_canonical_models(method):
    text = "the quick brown fox jumps over the lazy dog. " * 40
    data = build_text_dataset("t", text, context=CONTEXT)
    vocab = data.vocab_size

    def gpt(seed):
        return build("gpt", seed=seed, vocab=vocab, context=CONTEXT, width=WIDTH, depth=1,
                     heads=HEADS)  # fmt: skip

    a, b = gpt(0), gpt(1)
    path = PathSettings(lambdas=3, calibrate=False)
    settings = PairSettings(align=method, path=path, analysis=AnalysisOptions(lambdas=[0.5]))
    plain = run_pair(a, b, data, PairSettings(path=path))
    rotated = run_pair(a, b, data, settings)
    # the endpoints are the same functions: their losses agree with the plain path's
    assert rotated.path.loss[0] == pytest.approx(plain.path.loss[0], rel=1e-5)
    assert rotated.path.loss[-1] == pytest.approx(plain.path.loss[-1], rel=1e-5)
    assert rotated.alignment["method"] == method and rotated.alignment["canonical"]
    assert rotated.perm is None  # not a permutation
    assert rotated.path.loss[1] != pytest.approx(plain.path.loss[1], rel=1e-6)
    assert {r["lam"] for r in rotated.analysis.records} == {0.5}  # analysed in canonical form


def test_lmc_align_refuses_a_canonical_method_with_what_to_do_instead():
    from lmc.cli.align import run

    args = argparse.Namespace(method="orthogonal")
    with pytest.raises(LmcError, match="interpolate/analyze --align orthogonal"):
        run(args)


def test_orthogonal_activation_recovers_a_known_rotation_through_align():
    """A rotated and permuted copy of a canonical GPT, aligned by its features."""
    a = canonicalize(_gpt(0).eval())
    x = _tokens(12)
    b, stream = _moved_copy(a, symmetry_spec(a, x[:2]), 2, 3)
    result = align("orthogonal-activation", a, b, inputs=x)
    for name, want in a.state_dict().items():
        assert torch.allclose(result.state_dict[name], want, atol=1e-6), name
    assert result.info["canonical"] is True and result.info["orthogonal_groups"] == [stream]
    assert result.info["examples"] == 12
    assert result.info["distance_from_permutation"][stream] > 0.1  # a rotation, not a shuffle
