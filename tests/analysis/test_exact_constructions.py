"""Exact constructions where every layerwise statistic is known in closed form."""

from __future__ import annotations

import pytest
import torch

from lmc.analysis import analyze, layerwise
from lmc.models import build

LAMS = (0.25, 0.5, 0.7)
HALF = 12  # hidden units per model; the network has 2 * HALF


def _disjoint_pair(depth: int = 3, input_size: int = 10, seed: int = 0):
    """Two bias-free ReLU MLPs on disjoint hidden units.

    A uses the first half of every hidden layer, B the second; zeros elsewhere. Both read the
    same input; the logits layer of each reads only its own half, so the merged logits sum
    both halves' contributions.
    """
    gen = torch.Generator().manual_seed(seed)
    options = dict(input_size=input_size, width=2 * HALF, depth=depth, bias=False)
    a, b = build("mlp", **options), build("mlp", **options)
    first, second = slice(0, HALF), slice(HALF, 2 * HALF)
    with torch.no_grad():
        for model, own in ((a, first), (b, second)):
            for i in range(1, depth + 2):
                layer = model.out if i == depth + 1 else getattr(model, f"fc{i}")
                w = torch.zeros_like(layer.weight)
                rows = slice(None) if i == depth + 1 else own
                cols = slice(None) if i == 1 else own
                block = w[rows, cols]
                w[rows, cols] = torch.randn(block.shape, generator=gen) / block.shape[1] ** 0.5
                layer.weight.copy_(w)
    return a, b


def _inputs(n: int = 200, size: int = 10, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, size, generator=torch.Generator().manual_seed(seed))


def test_disjoint_units_satisfy_lewc_exactly():
    a, b = _disjoint_pair()
    records = layerwise(a, b, _inputs(), lam=list(LAMS), batch_size=64)
    assert len(records) == 4 * len(LAMS)
    for r in records:
        lam, l = r["lam"], r["layer"]
        assert r["has_bias"] is False
        assert r["lewc_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert r["lewc_relative_error"] < 1e-5
        assert r["lewc_expected_a"] == pytest.approx((1 - lam) ** l)
        assert r["lewc_expected_b"] == pytest.approx(lam**l)
        assert r["lewc_coef_a"] == pytest.approx((1 - lam) ** l, rel=1e-4)
        assert r["lewc_coef_b"] == pytest.approx(lam**l, rel=1e-4)
        if r["kind"] == "hidden":
            assert r["activation"] == "relu"
            assert r["weak_additivity_cosine"] == pytest.approx(1.0, abs=1e-6)
            assert r["sign_agreement"] == 1.0
            assert r["large_unit_overlap"] == 0.0  # the two models' units are disjoint
        if l == 1:  # both read the same data: W_A z_B = W_A z_A
            assert r["reciprocal_ratio"] == pytest.approx(1.0)
            assert r["reciprocal_cosine"] == pytest.approx(1.0)
        else:
            assert r["reciprocal_ratio"] < 1e-7
            assert r["reciprocal_ratio_ba"] < 1e-7
        if r["kind"] == "logits":
            assert r["logit_norm"] == pytest.approx(r["logit_norm_lewc"], rel=1e-5)
    # LEWC is not LLFC: away from the first layer the LLFC target is off in scale
    deep = [r for r in records if r["layer"] == 3 and r["lam"] == 0.25][0]
    assert abs(deep["llfc_scale"] - 1) > 0.1


def test_lewc_fails_when_units_overlap():
    """Control: the same construction on shared units must not look like LEWC."""
    a, _ = _disjoint_pair(seed=0)
    _, b = _disjoint_pair(seed=5)
    with torch.no_grad():  # move B onto A's half
        for name, p in b.named_parameters():
            h = HALF
            if name == "fc1.weight":
                p.copy_(torch.roll(p, -h, dims=0))
            elif name == "out.weight":
                p.copy_(torch.roll(p, -h, dims=1))
            else:
                p.copy_(torch.roll(p, (-h, -h), dims=(0, 1)))
    records = layerwise(a, b, _inputs(), lam=0.5)
    deep = [r for r in records if r["layer"] >= 2]
    assert max(r["reciprocal_ratio"] for r in deep) > 0.1
    assert min(r["lewc_cosine"] for r in deep) < 0.999


def test_model_against_itself_is_llfc_with_scale_one():
    torch.manual_seed(0)
    model = build("mlp", seed=3, input_size=10, width=32, depth=3)  # with biases
    for r in layerwise(model, model, _inputs(), lam=[0.3, 0.5]):
        assert r["llfc_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert r["llfc_scale"] == pytest.approx(1.0, abs=1e-5)
        assert r["endpoint_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert r["lewc_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert r["has_bias"] is True
        if r["kind"] == "hidden":
            assert r["weak_additivity_cosine"] == pytest.approx(1.0, abs=1e-6)
            assert r["large_unit_overlap"] == 1.0
        assert r["reciprocal_ratio"] == pytest.approx(1.0)
        assert r["commutativity_distance"] == 0.0


def _permute_mlp(state: dict, depth: int, seed: int) -> tuple[dict, list[torch.Tensor]]:
    """Permute every hidden layer's units (function-preserving); returns state and perms."""
    gen = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in state.items()}
    perms = []
    for i in range(1, depth + 1):
        p = torch.randperm(state[f"fc{i}.weight"].shape[0], generator=gen)
        perms.append(p)
        state[f"fc{i}.weight"] = state[f"fc{i}.weight"][p]
        state[f"fc{i}.bias"] = state[f"fc{i}.bias"][p]
        nxt = f"fc{i + 1}.weight" if i < depth else "out.weight"
        state[nxt] = state[nxt][:, p]
    return state, perms


def _unpermute_mlp(state: dict, perms: list[torch.Tensor], depth: int) -> dict:
    state = {k: v.clone() for k, v in state.items()}
    for i, p in enumerate(perms, start=1):
        inv = torch.argsort(p)
        state[f"fc{i}.weight"] = state[f"fc{i}.weight"][inv]
        state[f"fc{i}.bias"] = state[f"fc{i}.bias"][inv]
        nxt = f"fc{i + 1}.weight" if i < depth else "out.weight"
        state[nxt] = state[nxt][:, inv]
    return state


@pytest.fixture(scope="module")
def trained_mlp(digits):
    """A digits MLP (2 hidden layers of 48) trained for 3 epochs."""
    from lmc.train import TrainSettings, fit

    model = build("mlp", seed=0, input_size=64, width=48, depth=2)
    fit(model, digits, TrainSettings(epochs=3, init_seed=0, data_seed=0))
    return model.eval()


def _permuted_copy(a: torch.nn.Module, seed: int) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """A copy of ``trained_mlp`` (depth 2, width 48) with its hidden units permuted from
    ``seed``, and the permutations."""
    permuted, perms = _permute_mlp(a.state_dict(), 2, seed=seed)
    b = build("mlp", input_size=64, width=48, depth=2)
    b.load_state_dict(permuted)
    return b, perms


def test_permuted_copy_needs_alignment(digits, trained_mlp):
    a = trained_mlp
    b, perms = _permuted_copy(a, seed=7)
    x = digits.x_test
    plain = layerwise(a, b, x, lam=0.5)
    hidden = [r for r in plain if r["kind"] == "hidden"]
    assert max(r["endpoint_cosine"] for r in hidden) < 0.8
    assert min(r["llfc_cosine"] for r in hidden) < 0.99
    logits = plain[-1]
    assert logits["endpoint_cosine"] == pytest.approx(1.0, abs=1e-5)  # same function

    aligned = _unpermute_mlp(b.state_dict(), perms, 2)
    for r in layerwise(a, b, x, lam=[0.5, 0.8], state_b=aligned):
        assert r["endpoint_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert r["llfc_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert r["lewc_cosine"] == pytest.approx(1.0, abs=1e-6)


def test_permuted_copy_aligned_by_lmc_perm_weight_matching(digits, trained_mlp):
    """The same, with lmc.perm's weight matching finding the permutation."""
    import lmc.perm as perm

    a = trained_mlp
    b, _ = _permuted_copy(a, seed=11)
    x = digits.x_test
    spec = perm.spec_from_model(a, x[:2])
    found = perm.weight_matching(spec, a.state_dict(), b.state_dict(), seed=0).perm
    aligned = perm.apply_permutation(spec, found, b.state_dict())
    result = analyze(a, b, x, lam=0.5, state_b=aligned)
    for r in result.records:
        assert r["llfc_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert r["lewc_cosine"] == pytest.approx(1.0, abs=1e-6)


def test_merge_fn_replaces_the_interpolation():
    """A merge that returns A's state makes θ(λ) = A: coefficients (1, 0) at every layer."""
    a, b = _disjoint_pair()
    records = layerwise(a, b, _inputs(), lam=0.5, merge_fn=lambda sa, sb, lam: sa)
    for r in records:
        assert r["lewc_coef_a"] == pytest.approx(1.0, abs=1e-6)
        assert r["lewc_coef_b"] == pytest.approx(0.0, abs=1e-6)
