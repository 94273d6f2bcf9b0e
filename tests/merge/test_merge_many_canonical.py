"""Merging many pre-LN transformers beyond permutations (issue 42 item 4):
``lmc.merge.many.merge_many_canonical`` puts every model in its canonical form, aligns each onto
the reference's by an alignment method that works there, and averages.

Exact constructions: four copies of one zoo GPT or ViT, each moved by a random element of its
symmetry group (a Haar-random rotation of the canonical residual stream with random
permutations of MLP units, heads and within-head dims; or random permutations of the original
model), merge back into the model's function (1e-5, relative to the largest logit), while the
canonical control (``canonical``: no alignment) and plain averaging do not. Four GPTs trained
for a few steps merge into a model that evaluates, under every canonical method."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.merge import average, merge_many
from lmc.merge.many import canonical_methods, canonical_model, merge_many_canonical
from lmc.models import build
from lmc.perm import (
    Alignment,
    Orthogonal,
    apply_permutation,
    canonicalize,
    random_alignment,
    random_permutation,
    spec_from_model,
    symmetry_spec,
)
from lmc.perm.orthogonal_match import default_orthogonal_groups

WIDTH, HEADS = 32, 4
CASES = {
    "gpt": ("gpt", dict(vocab=16, context=12)),
    "vit": ("vit", dict(in_channels=1, image_size=8, num_classes=10)),
}


def _model(arch: str):
    """A zoo transformer whose every tensor matters (LayerNorms start at (1, 0), so each weight
    gets N(0, 0.2²) added), and inputs for it."""
    name, options = CASES[arch]
    model = build(name, seed=0, width=WIDTH, depth=2, heads=HEADS, **options).eval()
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=gen))
    gen = torch.Generator().manual_seed(1)
    if name == "gpt":
        x = torch.randint(0, options["vocab"], (32, options["context"]), generator=gen)
    else:
        x = torch.randn(32, 1, 8, 8, generator=gen)
    return model, x


def _relative_error(out: torch.Tensor, want: torch.Tensor) -> float:
    return float((out - want).abs().max() / want.abs().max())


def _rotated_copies(model, x, count: int = 4):
    """``count`` canonical forms of ``model``, each under a random stream rotation and random
    permutations of every other group (seeded, all different)."""
    canonical = canonicalize(model)
    spec = symmetry_spec(canonical, x[:2])
    (stream,) = default_orthogonal_groups(spec)
    copies = []
    for i in range(count):
        known = dict(random_alignment(spec, 10 + i, "permutation"))
        known[stream] = Orthogonal.random(WIDTH, 20 + i)
        copy = canonicalize(model)
        copy.load_state_dict(Alignment(known).apply(spec, canonical.state_dict()))
        copies.append(copy)
    return copies


@pytest.mark.parametrize("arch", sorted(CASES))
def test_rotated_and_permuted_copies_merge_back_into_the_model(arch):
    model, x = _model(arch)
    copies = _rotated_copies(model, x)
    with torch.no_grad():
        want = model(x)
        for copy in copies:  # each copy computes the model's function ...
            assert _relative_error(copy(x), want) < 1e-5
        # ... but their plain average (the control) does not
        control = merge_many_canonical(copies, "canonical", inputs=x)
        assert _relative_error(control.model(x), want) > 1e-2
        merged = merge_many_canonical(copies, "orthogonal", inputs=x)
        assert _relative_error(merged.model(x), want) < 1e-5
    assert merged.infos[0] is None and all(info["canonical"] for info in merged.infos[1:])
    assert merged.rounds == 0 and merged.shifts == []
    # the reference's frame is kept: the merge is copy 0's weights
    for name, value in copies[0].state_dict().items():
        torch.testing.assert_close(merged.state[name], value, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", sorted(CASES))
def test_permuted_copies_of_the_original_are_canonicalised_and_merged(arch):
    model, x = _model(arch)
    spec = spec_from_model(model, x[:2])
    copies = [model]
    for seed in (31, 32, 33):
        copy = build(CASES[arch][0], width=WIDTH, depth=2, heads=HEADS, **CASES[arch][1]).eval()
        copy.load_state_dict(
            apply_permutation(spec, random_permutation(spec, seed), model.state_dict())
        )
        copies.append(copy)
    before = {k: v.clone() for k, v in copies[1].state_dict().items()}
    with torch.no_grad():
        want = model(x)
        for method in ("orthogonal", "orthogonal-activation"):
            merged = merge_many_canonical(copies, method, inputs=x, rounds=1, reference=1)
            assert _relative_error(merged.model(x), want) < 1e-5, method
            assert merged.rounds == 1 and merged.shifts[0] < 1e-5  # the round found nothing to do
        plain = build(CASES[arch][0], width=WIDTH, depth=2, heads=HEADS, **CASES[arch][1]).eval()
        plain.load_state_dict(merge_many(copies))
        assert _relative_error(plain(x), want) > 1e-2  # unaligned averaging is another function
    for name, value in copies[1].state_dict().items():  # the inputs are not modified
        assert torch.equal(value, before[name]), name


def test_the_canonical_control_is_the_plain_average_of_the_canonical_forms():
    model_a, x = _model("gpt")
    models = [model_a] + [
        build("gpt", seed=s, width=WIDTH, depth=2, heads=HEADS, **CASES["gpt"][1]).eval()
        for s in (5, 6)
    ]
    merged = merge_many_canonical(models, "canonical", inputs=x, weights=[1, 2, 3])
    expected = average([canonicalize(m).state_dict() for m in models], [1, 2, 3])
    assert merged.state.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(merged.state[name], value), name
    # the merge loads into the canonical form of the architecture, rebuilt from any weights
    rebuilt = canonical_model(build("gpt", width=WIDTH, depth=2, heads=HEADS, **CASES["gpt"][1]),
                              merged.state)  # fmt: skip
    with torch.no_grad():
        assert torch.equal(rebuilt(x), merged.model(x))


def _train_gpts(count: int = 4):
    """``count`` tiny GPTs trained for one epoch (their own seeds) on one short text, and the
    dataset."""
    from lmc.data.text import build_text_dataset
    from lmc.train import TrainSettings, fit

    text = "the quick brown fox jumps over the lazy dog; pack my box with five dozen jugs. " * 30
    data = build_text_dataset("t", text, context=12)
    models = []
    for seed in range(count):
        model = build("gpt", seed=seed, vocab=data.vocab_size, context=12, width=16, depth=1,
                      heads=2)  # fmt: skip
        settings = TrainSettings(epochs=1, optimizer="adam", lr=3e-3, init_seed=seed,
                                 data_seed=seed, batch_size=16)  # fmt: skip
        fit(model, data, settings)
        models.append(model.eval())
    return models, data


@pytest.fixture(scope="module")
def trained_gpts():
    return _train_gpts()


@pytest.mark.parametrize("method, settings", [("orthogonal", {}), ("learned", {"steps": 5})])
def test_trained_gpts_merge_into_a_model_that_evaluates(trained_gpts, method, settings):
    from lmc.metrics import classification_metrics

    models, data = trained_gpts
    x, y = data.x_train[:200], data.y_train[:200]
    merged = merge_many_canonical(models, method, inputs=x, labels=y, task=data.task,
                                  seed=0, **settings)  # fmt: skip
    with torch.no_grad():
        result = classification_metrics(merged.model(data.x_test), data.y_test, task=data.task)
        first = classification_metrics(models[0](data.x_test), data.y_test, task=data.task)
    assert torch.isfinite(torch.tensor(result["loss"])) and 0 <= result["accuracy"] <= 1
    assert result["loss"] != pytest.approx(first["loss"], rel=1e-6)  # a merge, not model 0
    assert len(merged.alignments) == 4 and merged.infos[1]["method"] == method
    if method == "learned":
        assert merged.infos[1]["learned_best_step"] is not None


def test_bad_inputs_are_one_line_errors():
    model, x = _model("gpt")
    other = build("gpt", seed=1, width=16, depth=2, heads=HEADS, **CASES["gpt"][1])
    cases = [
        (dict(models=[model, model], method="weight"), "does not align them"),
        (dict(models=[model, other], method="orthogonal"), "merging"),
        (dict(models=[model, model], method="orthogonal", reference=2), "out of range"),
        (dict(models=[model, model], method="orthogonal", rounds=-1), "rounds"),
        (dict(models=[model, model], method="orthogonal", weights=[1]), "weights"),
        (dict(models=[model, model], method="orthogonal", max_iter=0), "max_iter"),
        (dict(models=[model.state_dict()] * 2, method="orthogonal"), "nn.Module"),
        (dict(models=[model, model], method="learned"), "needs labels"),
    ]
    for kwargs, message in cases:
        models = kwargs.pop("models")
        with pytest.raises(LmcError, match=message):
            merge_many_canonical(models, inputs=x, **kwargs)
    with pytest.raises(LmcError, match="merge_many_canonical"):
        merge_many([model, model], align="orthogonal")
    assert {"canonical", "orthogonal", "learned", "orthogonal-activation"} <= set(
        canonical_methods()
    )
