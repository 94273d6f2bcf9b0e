"""State-dict interpolation, averaging and merging N models."""

import copy
import sys
import types

import pytest
import torch

import lmc.models
from lmc.config import LmcError
from lmc.merge import average, lerp, lerp_into, lerp_stack, merge_many


def test_lerp_formula_and_integer_buffers_from_a(random_state):
    a, b = random_state(0), random_state(1)
    out = lerp(a, b, 0.3)
    for k in ("w", "b", "bn.running_mean"):
        assert torch.allclose(out[k], 0.7 * a[k] + 0.3 * b[k], atol=1e-7)
    assert out["bn.num_batches_tracked"] == 10
    assert out["bn.num_batches_tracked"].dtype == torch.int64


def test_lerp_endpoints_are_exact_copies(random_state):
    a, b = random_state(0), random_state(1)
    out0, out1 = lerp(a, b, 0.0), lerp(a, b, 1.0)
    for k in a:
        assert torch.equal(out0[k], a[k])
        assert out0[k].data_ptr() != a[k].data_ptr()  # a copy, not a view
    for k in ("w", "b", "bn.running_mean"):
        assert torch.equal(out1[k], b[k])
    # integer entries are not interpolated: A's inside the path, B's at lambda = 1 (B itself)
    assert a["bn.num_batches_tracked"] != b["bn.num_batches_tracked"]
    assert torch.equal(out1["bn.num_batches_tracked"], b["bn.num_batches_tracked"])
    assert torch.equal(lerp(a, b, 0.999)["bn.num_batches_tracked"], a["bn.num_batches_tracked"])
    stacked = lerp_stack(a, b, [0.0, 0.5, 1.0])["bn.num_batches_tracked"]
    assert stacked.tolist() == [a["bn.num_batches_tracked"].item()] * 2 + [
        b["bn.num_batches_tracked"].item()
    ]


def test_endpoint_models_reproduce_outputs_bit_for_bit(mlp_pair, digits):
    a, b = mlp_pair
    x = digits[2]
    m = copy.deepcopy(a)
    with torch.no_grad():
        m.load_state_dict(lerp(a.state_dict(), b.state_dict(), 0.0))
        assert torch.equal(m(x), a(x))
        m.load_state_dict(lerp(a.state_dict(), b.state_dict(), 1.0))
        assert torch.equal(m(x), b(x))
        m.load_state_dict(lerp(a.state_dict(), b.state_dict(), 0.5))
        assert not torch.equal(m(x), a(x))


def test_lerp_stack_matches_lerp(random_state):
    a, b = random_state(0), random_state(1)
    lams = [0.0, 0.25, 0.9, 1.0]
    st = lerp_stack(a, b, lams)
    for i, lam in enumerate(lams):
        ref = lerp(a, b, lam)
        for k in a:
            assert torch.allclose(st[k][i], ref[k], atol=1e-6, rtol=0), (k, lam)
    assert torch.equal(st["w"][0], a["w"]) and torch.equal(st["w"][3], b["w"])


def test_mismatches_name_the_first_entry(random_state):
    a, b = random_state(0), random_state(1)
    b["w"] = torch.zeros(5, 3)
    with pytest.raises(LmcError, match=r"'w' has shape \(4, 3\) in A but \(5, 3\) in B"):
        lerp(a, b, 0.5)
    b = random_state(1)
    del b["b"]
    with pytest.raises(LmcError, match="'b' is in A but not in B"):
        lerp(a, b, 0.5)
    b = random_state(1)
    b["extra"] = torch.zeros(1)
    with pytest.raises(LmcError, match="'extra' is in B but not in A"):
        lerp(a, b, 0.5)
    with pytest.raises(LmcError, match="finite"):
        lerp(a, random_state(1), float("nan"))
    m16 = lmc.models.build("mlp", input_size=64, width=16).state_dict()
    m32 = lmc.models.build("mlp", input_size=64, width=32).state_dict()
    with pytest.raises(LmcError, match="fc1.weight"):
        lerp(m16, m32, 0.5)


def test_weighted_average(random_state):
    s = [random_state(i) for i in range(3)]
    out = average(s, [1.0, 2.0, 1.0])
    for k in ("w", "b"):
        want = (s[0][k] + 2 * s[1][k] + s[2][k]) / 4
        assert torch.allclose(out[k], want, atol=1e-6)
    assert out["bn.num_batches_tracked"] == 10
    plain = average(s)
    assert torch.allclose(plain["w"], (s[0]["w"] + s[1]["w"] + s[2]["w"]) / 3, atol=1e-6)
    two = average(s[:2], [0.6, 0.4])
    assert torch.allclose(two["w"], lerp(s[0], s[1], 0.4)["w"], atol=1e-6)
    with pytest.raises(LmcError, match="weights"):
        average(s, [1.0, -1.0, 1.0])
    s[2]["w"] = torch.zeros(2, 3)
    with pytest.raises(LmcError, match="'w'.*model 0.*model 2"):
        average(s)


def test_merge_many_without_alignment_is_the_average(mlp_pair):
    a, b = mlp_pair
    out = merge_many([a, b.state_dict()])
    ref = lerp(a.state_dict(), b.state_dict(), 0.5)
    for k in ref:
        assert torch.allclose(out[k], ref[k], atol=1e-6)
    out = merge_many([a, b], reference=1, weights=[3.0, 1.0])
    assert torch.allclose(out["fc1.weight"], 0.75 * a.fc1.weight + 0.25 * b.fc1.weight, atol=1e-6)


def permute_hidden(model, seed):
    """A functionally identical copy of an MLP with its hidden units permuted by hand."""
    g = torch.Generator().manual_seed(seed)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    prev = None
    for i in range(1, model.depth + 1):
        p = torch.randperm(sd[f"fc{i}.weight"].shape[0], generator=g)
        w = sd[f"fc{i}.weight"]
        sd[f"fc{i}.weight"] = (w if prev is None else w[:, prev])[p]
        sd[f"fc{i}.bias"] = sd[f"fc{i}.bias"][p]
        prev = p
    sd["out.weight"] = sd["out.weight"][:, prev]
    return sd


def test_merge_many_calls_weight_matching_on_the_reference(monkeypatch, mlp_pair):
    """Exercise the alignment path with a stand-in lmc.perm (the real one is tested below)."""
    a, b = mlp_pair
    calls, applied = [], []
    fake = types.ModuleType("lmc.perm")
    fake.spec_from_model = lambda model, x: ("spec", tuple(x.shape))
    fake.weight_matching = lambda spec, sa, sb, seed=0: types.SimpleNamespace(
        perm=calls.append((spec, seed)) or {"p": 1}
    )
    fake.apply_permutation = lambda spec, perm, sd: (
        applied.append(perm) or {k: torch.zeros_like(v) for k, v in sd.items()}
    )
    monkeypatch.setitem(sys.modules, "lmc.perm", fake)
    monkeypatch.setattr(lmc, "perm", fake, raising=False)
    out = merge_many([a, b, b], align="weight", example_input=torch.zeros(2, 64), seed=4)
    assert calls == [(("spec", (2, 64)), 4)] * 2
    assert applied == [{"p": 1}] * 2  # the result's .perm is what gets applied
    assert torch.allclose(out["fc1.weight"], a.fc1.weight / 3, atol=1e-6)
    with pytest.raises(LmcError, match="spec"):
        merge_many([a.state_dict(), b.state_dict()], align="weight")


def test_merge_many_weight_matching_undoes_a_permutation(mlp_pair):
    perm = pytest.importorskip("lmc.perm")
    if not hasattr(perm, "weight_matching"):
        pytest.skip("lmc.perm.weight_matching is not there yet")
    a, _ = mlp_pair
    permuted = permute_hidden(a, 3)
    assert not torch.equal(permuted["fc1.weight"], a.state_dict()["fc1.weight"])
    out = merge_many([a, permuted], align="weight", example_input=torch.zeros(2, 64))
    for k, v in a.state_dict().items():
        assert torch.allclose(out[k].float(), v.float(), atol=1e-6), k


def test_lerp_into_writes_the_same_bits_in_place(mlp_pair):
    a, b = mlp_pair
    sa, sb = a.state_dict(), b.state_dict()
    work = copy.deepcopy(a)
    ptr = work.fc1.weight.data_ptr()
    for lam in (0.0, 0.3, 0.5, 1.0):
        lerp_into(work, sa, sb, lam)
        ref = lerp(sa, sb, lam)
        for k, v in work.state_dict().items():
            assert torch.equal(v, ref[k]), (k, lam)
    assert work.fc1.weight.data_ptr() == ptr  # written in place
    wide = lmc.models.build("mlp", input_size=64, width=48)
    with pytest.raises(LmcError, match="fc1.weight"):
        lerp_into(wide, sa, sb, 0.5)
