"""The zoo's ViT: sizes per dataset, the pre-LN structure, options, training, CLI, probes."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F

from lmc.analysis import analyze
from lmc.cli.main import main
from lmc.config import LmcError
from lmc.data import input_shape
from lmc.experiments.study import load_study
from lmc.models import ViT, build, check_options, initialize, resolve_options
from lmc.train import TrainSettings, evaluate, fit

GEN = torch.Generator().manual_seed(0)


def _tiny(seed=0, **options):
    options = {"width": 12, "depth": 2, "heads": 2, "in_channels": 1, "image_size": 8, **options}
    return build("vit", seed=seed, **options)


@pytest.mark.parametrize(
    "dataset,patch,tokens",
    [("digits", 2, 16), ("fashion-mnist", 4, 49), ("cifar10", 4, 64)],
)
def test_sizes_follow_the_dataset(dataset, patch, tokens):
    shape = input_shape(dataset)
    options = resolve_options(
        "vit", {"width": 8, "depth": 1, "heads": 2}, input_shape=shape, num_classes=10
    )
    assert options["patch"] == patch and options["image_size"] == shape[1]
    assert options["in_channels"] == shape[0]
    model = build("vit", seed=0, **options)
    assert model.tokens == tokens + 1  # the class token
    x = torch.randn(3, *shape, generator=GEN)
    assert model(x).shape == (3, 10)
    mean = build("vit", seed=0, **{**options, "pool": "mean"})
    assert mean.tokens == tokens and mean(x).shape == (3, 10)


def test_flat_digits_give_the_same_logits_as_images():
    model = _tiny()
    x = torch.randn(5, 1, 8, 8, generator=GEN)
    assert torch.equal(model(x), model(x.reshape(5, 64)))


def test_patch_embedding_is_local():
    """A pixel changes only the token of its patch; the patches are ordered row by row."""
    model = _tiny(patch=2)
    seen = {}
    model.patch_embed.register_forward_hook(lambda m, i, o: seen.__setitem__("e", o))
    x = torch.randn(1, 1, 8, 8, generator=GEN)
    model(x)
    before = seen["e"].flatten(2).transpose(1, 2)
    y = x.clone()
    y[0, 0, 5, 2] += 1.0  # row 5, column 2: patch (2, 1), token 2 * 4 + 1 = 9
    model(y)
    after = seen["e"].flatten(2).transpose(1, 2)
    changed = (after - before)[0].abs().amax(dim=1) > 0
    assert changed.nonzero().flatten().tolist() == [9]


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_zeroed_residual_branches_leave_the_embedding_and_pool(pool):
    """Pre-LN: with every block's attention and MLP output maps zero, each block is the
    identity, so the logits are head(LN(pool(embedding + positions)))."""
    model = _tiny(pool=pool)
    with torch.no_grad():
        for block in model.blocks:
            for layer in (block.attn.out, block.mlp.fc2):
                layer.weight.zero_()
                layer.bias.zero_()
    x = torch.randn(4, 1, 8, 8, generator=GEN)
    tokens = model.patch_embed(x).flatten(2).transpose(1, 2)
    if pool == "cls":
        tokens = torch.cat([model.cls_token.expand(4, -1, -1), tokens], dim=1)
    stream = F.layer_norm(tokens + model.pos_embed, (12,), model.norm.weight, model.norm.bias)
    pooled = stream[:, 0] if pool == "cls" else stream.mean(dim=1)
    want = F.linear(pooled, model.head.weight, model.head.bias)
    got = model(x)
    torch.testing.assert_close(got, want)
    if pool == "cls":  # the class token alone: every image gets the same logits
        torch.testing.assert_close(got, got[:1].expand(4, -1))
    else:
        assert not torch.allclose(got, got[:1].expand(4, -1))


def test_attention_mixes_tokens():
    """With the MLPs zeroed, the class token's output still depends on the image (only
    attention can carry it there)."""
    model = _tiny()
    with torch.no_grad():
        for block in model.blocks:
            block.mlp.fc2.weight.zero_()
            block.mlp.fc2.bias.zero_()
    x = torch.randn(2, 1, 8, 8, generator=GEN)
    out = model(x)
    assert not torch.allclose(out[0], out[1])


def test_options_shape_the_modules():
    model = _tiny(width=16, depth=3, heads=4, mlp_ratio=1.5, bias=False, activation="relu")
    assert len(model.blocks) == 3
    block = model.blocks[0]
    assert block.attn.heads == 4 and block.attn.head_dim == 4
    assert block.mlp.fc1.out_features == 24 and isinstance(block.mlp.act, torch.nn.ReLU)
    assert all(
        m.bias is None for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))
    )
    assert isinstance(model, ViT) and model.lmc_spec["options"]["heads"] == 4


@pytest.mark.parametrize(
    "options,match",
    [
        ({"width": 18, "heads": 4}, "divisible by heads"),
        ({"patch": 3}, "patch 3 does not divide the 8x8 image"),
        ({"pool": "max"}, "pool must be one of cls, mean"),
        ({"mlp_ratio": 0}, "mlp_ratio must be a positive number"),
        ({"heads": 0}, "heads must be at least 1"),
        ({"patch": 0}, "patch must be at least 1"),
        ({"norm": "layer"}, "no option 'norm'"),
        ({"activation": "swish"}, "unknown activation"),
    ],
)
def test_bad_options_are_clear_errors(options, match):
    with pytest.raises(LmcError, match=match):
        _tiny(**options)


def test_registry_checks_without_width_and_needs_images():
    check_options("vit", {"heads": 3})  # a study sets the width per sweep point
    with pytest.raises(LmcError, match="divisible"):
        resolve_options("vit", {"heads": 3, "width": 16})
    with pytest.raises(LmcError, match="needs image data"):
        resolve_options("vit", {"width": 8}, input_shape=(32,), num_classes=10)
    wide = resolve_options("vit", {"mlp_ratio": 2}, input_shape=(3, 32, 32), num_classes=10)
    assert wide["mlp_ratio"] == 2.0 and isinstance(wide["mlp_ratio"], float)
    assert wide["width"] == 128 and wide["patch"] == 4  # the registry's defaults
    oblong = resolve_options("vit", {}, input_shape=(1, 6, 12), num_classes=3)
    assert oblong["image_size"] == [6, 12] and oblong["patch"] == 2
    small = build("vit", seed=0, **{**oblong, "width": 8, "heads": 2, "depth": 1})
    assert small(torch.randn(2, 1, 6, 12)).shape == (2, 3)


def test_seeded_initialisation_covers_class_and_position_embeddings():
    a, b, c = _tiny(seed=3), _tiny(seed=3), _tiny(seed=4)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    assert not torch.equal(a.pos_embed, c.pos_embed)
    assert not torch.equal(a.cls_token, c.cls_token)
    torch.manual_seed(0)
    first = initialize(_tiny(), seed=1).pos_embed.clone()
    torch.manual_seed(99)
    assert torch.equal(initialize(_tiny(), seed=1).pos_embed, first)


def test_fit_one_epoch_on_digits_lowers_the_loss(digits):
    small = dataclasses.replace(digits, x_train=digits.x_train[:600], y_train=digits.y_train[:600])
    model = _tiny(seed=1, width=24, depth=1)
    before = evaluate(model, small.x_train, small.y_train)["loss"]
    settings = TrainSettings(
        epochs=1,
        batch_size=8,
        optimizer="adam",
        lr=2e-3,
        weight_decay=0,
        schedule="constant",
        data_seed=1,
    )
    history = fit(model, small, settings, evaluate_test=False)
    after = evaluate(model, small.x_train, small.y_train)
    assert len(history) == 1 and after["loss"] < before - 0.15
    assert after["accuracy"] > 0.15  # above chance (0.1) after 75 steps


def test_cli_trains_a_vit_on_digits(tmp_path, capsys):
    argv = ["train", "--model", "vit", "--width", "16", "--depth", "1", "--heads", "2"]
    argv += ["--mlp-ratio", "1", "--pool", "mean", "--epochs", "1", "--quiet"]
    argv += ["--runs-dir", str(tmp_path), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    options = out["config"]["model_options"]
    assert options["width"] == 16 and options["heads"] == 2 and options["depth"] == 1
    assert options["patch"] == 2 and options["pool"] == "mean" and options["mlp_ratio"] == 1.0
    assert options["image_size"] == 8 and options["in_channels"] == 1
    assert 0.0 <= out["final_test_accuracy"] <= 1.0


def test_cli_bad_vit_options_are_one_line_errors(tmp_path, capsys):
    base = ["train", "--model", "vit", "--quiet", "--runs-dir", str(tmp_path)]
    assert main(base + ["--width", "18", "--heads", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "divisible by heads" in err
    assert main(base + ["--patch", "3"]) == 2
    assert "patch 3 does not divide" in capsys.readouterr().err
    assert main(base + ["--norm", "layer"]) == 2
    assert "--norm is not an option of vit" in capsys.readouterr().err
    assert main(["train", "--model", "mlp", "--heads", "2", "--quiet"]) == 2
    assert "--heads is not an option of mlp" in capsys.readouterr().err


def test_study_toml_takes_vit_options(tmp_path):
    text = """
name = "vit-digits"
[data]
dataset = "digits"
[model]
name = "vit"
heads = 2
depth = 1
pool = "mean"
[sweep]
widths = [8, 16]
"""
    path = tmp_path / "vit.toml"
    path.write_text(text)
    study, _ = load_study(path)
    assert study["model"]["heads"] == 2 and study["model"]["patch"] == "auto"
    path.write_text(text.replace('pool = "mean"', 'pool = "max"'))
    with pytest.raises(LmcError, match="pool must be one of"):
        load_study(path)


def _token_hook_moments(model, module, x):
    """√E[v_i²] over examples and tokens of ``module``'s output features v."""
    seen = {}
    handle = module.register_forward_hook(lambda m, i, o: seen.__setitem__("v", o.detach()))
    with torch.no_grad():
        model(x)
    handle.remove()
    v = seen["v"].double()
    return v.reshape(-1, v.shape[-1]).pow(2).mean(0).sqrt().numpy()


def test_probes_record_every_block_with_tokens_as_positions():
    a, b = _tiny(seed=0, mlp_ratio=1.5), _tiny(seed=1, mlp_ratio=1.5)
    x = torch.randn(12, 1, 8, 8, generator=GEN)
    result = analyze(a, b, x, [0.5], batch_size=5)
    records = result.records
    names = ["attn1", "mlp1", "block1", "attn2", "mlp2", "block2", "logits"]
    assert [r["name"] for r in records] == names
    assert [r["layer"] for r in records] == [2, 4, 5, 6, 8, 9, 10]
    assert [r["units"] for r in records] == [12, 18, 12, 12, 18, 12, 10]  # not 17 tokens
    for r in records:
        assert r["n_examples"] == 12 and -1 <= r["lewc_cosine"] <= 1
        assert r["llfc_cosine"] is not None
    attn1, mlp1 = records[0], records[1]
    assert attn1["activation"] == "attention" and attn1["kind"] == "attention"
    assert attn1["weak_additivity_cosine"] is not None and attn1["reciprocal_ratio"] is None
    assert mlp1["activation"] == "gelu" and mlp1["kind"] == "hidden"
    assert mlp1["weak_additivity_cosine"] is not None and mlp1["reciprocal_ratio"] > 0
    assert records[2]["kind"] == "block" and records[2]["reciprocal_ratio"] is None
    # units are the d features, rows are (example, token): the convolution's convention
    want = _token_hook_moments(a, a.blocks[0].mlp.fc1, x)
    assert result.moments["mlp1"]["a"] == pytest.approx(want, rel=1e-5)
    want = _token_hook_moments(b, b.blocks[1], x)
    assert result.moments["block2"]["b"] == pytest.approx(want, rel=1e-5)


def test_probes_of_a_model_against_itself_are_exact():
    a = _tiny(seed=0)
    x = torch.randn(8, 1, 8, 8, generator=GEN)
    records = analyze(a, copy.deepcopy(a), x, [0.3]).records
    for r in records:
        # θ(λ) = θ_A, and ((1-λ)^l + λ^l) f_A points along f_A
        assert r["lewc_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert r["endpoint_cosine"] == pytest.approx(1.0, abs=1e-6)
        if r["kind"] == "hidden":
            assert r["weak_additivity_cosine"] == pytest.approx(1.0, abs=1e-6)
            assert r["commutativity_distance"] == pytest.approx(0.0, abs=1e-9)


def test_a_permuted_vit_computes_the_same_function(assert_permutation_keeps_function):
    x = torch.randn(4, 1, 8, 8, generator=GEN)
    assert_permutation_keeps_function(_tiny(), x, 3, "blocks.0.mlp.fc1.weight")
