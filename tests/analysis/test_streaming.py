"""Streamed statistics equal a direct full-batch computation written independently here."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lmc.analysis import analyze
from lmc.models import build

LAMS = [0.3, 0.5]


def _conv_net(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(3, 5, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(5, 4, 2, stride=2),  # no activation: a hidden layer without pre-activation
        nn.Flatten(),
        nn.Linear(16, 10),
    ).double()


def _mlp_as_sequential(model) -> nn.Sequential:
    mods = [model.flatten]
    for i in range(1, model.depth + 1):
        mods += [getattr(model, f"fc{i}"), getattr(model, f"act{i}")]
    return nn.Sequential(*mods, model.out)


def _full_layers(seq: nn.Sequential, x: torch.Tensor) -> list[dict]:
    """Every weight layer's full-batch input, pre-activation and output, by a plain loop."""
    layers, h = [], x
    with torch.no_grad():
        for m in seq:
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                layers.append({"module": m, "inp": h, "pre": None})
                h = m(h)
                layers[-1]["out"] = h
            elif isinstance(m, nn.ReLU):
                layers[-1]["pre"] = h
                h = m(h)
                layers[-1]["out"] = h
            else:
                h = m(h)
    return layers


def _merged(a: nn.Module, b: nn.Module, lam: float) -> nn.Module:
    c = copy.deepcopy(a)
    sb = b.state_dict()
    c.load_state_dict({k: (1 - lam) * v + lam * sb[k] for k, v in a.state_dict().items()})
    return c


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


def _cos(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per-row cosine; two zero rows count as equal (1), one zero row as orthogonal (0)."""
    nu, nv = np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1)
    cos = (u * v).sum(1) / np.where(nu * nv > 0, nu * nv, 1.0)
    return np.where((nu == 0) & (nv == 0), 1.0, cos)


def _examples(t: torch.Tensor) -> np.ndarray:
    return _np(t).reshape(t.shape[0], -1)


def _positions(t: torch.Tensor) -> np.ndarray:
    a = _np(t)
    return a if a.ndim == 2 else np.moveaxis(a, 1, -1).reshape(-1, a.shape[1])


def _bias_free(module: nn.Module, w: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    if isinstance(module, nn.Linear):
        return z @ w.T
    return F.conv2d(z, w, None, module.stride, module.padding)


def _patches(module: nn.Module, z: torch.Tensor) -> np.ndarray:
    """H as a matrix: columns are examples (Linear) or unfolded patches (Conv)."""
    if isinstance(module, nn.Linear):
        return _np(z).T
    cols = F.unfold(z, module.kernel_size, padding=module.padding, stride=module.stride)
    return _np(cols.permute(1, 0, 2).reshape(cols.shape[1], -1))


def _reference(seq_a, seq_b, seq_c, x, lam) -> list[dict]:
    la, lb, lc = (_full_layers(s, x) for s in (seq_a, seq_b, seq_c))
    out, n, L = [], x.shape[0], len(la)
    for ell, (A, B, C) in enumerate(zip(la, lb, lc), start=1):
        fa, fb, fc = _examples(A["out"]), _examples(B["out"]), _examples(C["out"])
        al, be = (1 - lam) ** ell, lam**ell
        t, s = al * fa + be * fb, (1 - lam) * fa + lam * fb
        coef, *_ = np.linalg.lstsq(np.stack([fa.ravel(), fb.ravel()], 1), fc.ravel(), rcond=None)
        r = {
            "lewc_cosine": _cos(fc, t).mean(),
            "lewc_relative_error": np.linalg.norm(fc - t) / np.linalg.norm(t),
            "lewc_coef_a": coef[0],
            "lewc_coef_b": coef[1],
            "llfc_cosine": _cos(fc, s).mean(),
            "llfc_scale": (fc * s).sum() / (s * s).sum(),
            "endpoint_cosine": _cos(fa, fb).mean(),
        }
        if A["pre"] is not None:
            pa, pb = A["pre"], B["pre"]
            mix = _positions(torch.relu((pa + pb) / 2))
            ens = _positions((torch.relu(pa) + torch.relu(pb)) / 2)
            r["weak_additivity_cosine"] = _cos(mix, ens).mean()
            r["sign_agreement"] = np.mean(_np(pa) * _np(pb) >= 0)
        m = A["module"]
        wa, wb = A["module"].weight, B["module"].weight
        za, zb, zc = A["inp"], B["inp"], C["inp"]
        prods = {
            k: _positions(_bias_free(m, w, z))
            for k, w, z in (("aa", wa, za), ("ab", wa, zb), ("ba", wb, za), ("bb", wb, zb))
        }
        prods["ac"] = _positions(_bias_free(m, wa, zc))
        norms = {k: np.linalg.norm(v, axis=1).mean() for k, v in prods.items()}
        r["reciprocal_ratio"] = norms["ab"] / norms["aa"]
        r["reciprocal_ratio_ba"] = norms["ba"] / norms["bb"]
        r["reciprocal_cosine"] = _cos(prods["ac"], prods["aa"]).mean()
        dw = _np(wa - wb).reshape(wa.shape[0], -1)
        dh = _patches(m, za - zb)
        prod = np.linalg.norm(dw @ dh)
        r["commutativity_distance"] = prod / math.sqrt(n)
        if np.linalg.norm(dh) > 0:
            r["commutativity_relative"] = prod / (np.linalg.norm(dw) * np.linalg.norm(dh))
        r["commutativity_vs_features"] = prod / np.linalg.norm(prods["aa"] + prods["bb"])
        r["weight_distance"] = np.linalg.norm(dw)
        r["input_distance"] = np.linalg.norm(dh) / math.sqrt(n)
        for side, W in (("a", wa), ("b", wb)):
            sv = np.linalg.svd(_np(W).reshape(W.shape[0], -1), compute_uv=False)
            p = sv / sv.sum()
            r[f"stable_rank_{side}"] = (sv**2).sum() / sv.max() ** 2
            r[f"effective_rank_{side}"] = math.exp(-(p * np.log(p)).sum())
        if ell == L:
            r["logit_norm"] = np.linalg.norm(fc, axis=1).mean()
            r["logit_norm_a"] = np.linalg.norm(fa, axis=1).mean()
            r["logit_norm_b"] = np.linalg.norm(fb, axis=1).mean()
            r["logit_norm_lewc"] = np.linalg.norm(t, axis=1).mean()
        moments = {
            side: np.sqrt(
                np.mean(_positions(T["pre"] if T["pre"] is not None else T["out"]) ** 2, axis=0)
            )
            for side, T in (("a", A), ("b", B))
        }
        out.append((r, moments))
    return out


def _check(result, seqs, x):
    seq_a, seq_b, to_seq = seqs
    for lam in LAMS:
        records = [r for r in result.records if r["lam"] == lam]
        ref = _reference(seq_a, seq_b, to_seq(lam), x, lam)
        assert len(records) == len(ref)
        for rec, (expected, moments) in zip(records, ref):
            assert rec["n_examples"] == x.shape[0]
            for key, value in expected.items():
                assert rec[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (rec["name"], key)
            for side in "ab":
                got = result.moments[rec["name"]][side]
                np.testing.assert_allclose(got, moments[side], rtol=1e-6, atol=1e-12)


def test_streaming_equals_direct_mlp():
    a = build("mlp", seed=0, input_size=12, width=16, depth=3).double()
    b = build("mlp", seed=1, input_size=12, width=16, depth=3).double()
    x = torch.randn(97, 12, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    result = analyze(a, b, x, LAMS, batch_size=10)  # 97 = 9 full batches + one of 7
    seqs = (
        _mlp_as_sequential(a),
        _mlp_as_sequential(b),
        lambda lam: _mlp_as_sequential(_merged(a, b, lam)),
    )
    _check(result, seqs, x)


def test_streaming_equals_direct_conv_with_derived_probe_points():
    a, b = _conv_net(0), _conv_net(1)
    x = torch.randn(41, 1, 8, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    result = analyze(a, b, x, LAMS, batch_size=6)
    names = [p["name"] for p in result.settings["probe_points"]]
    assert names == ["layer1", "layer2", "layer3", "logits"]
    assert result.settings["derived_probe_points"] is True
    layer3 = [r for r in result.records if r["name"] == "layer3"][0]
    assert layer3["weak_additivity_cosine"] is None and layer3["activation"] is None
    _check(result, (a, b, lambda lam: _merged(a, b, lam)), x)


def test_batches_and_max_examples():
    """An iterable of (x, y) batches and max_examples give the same as a tensor prefix."""
    a = build("mlp", seed=0, input_size=12, width=16, depth=2).double()
    b = build("mlp", seed=1, input_size=12, width=16, depth=2).double()
    x = torch.randn(60, 12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    direct = analyze(a, b, x[:45], 0.5, batch_size=45).records
    batches = [(x[i : i + 7], torch.zeros(7)) for i in range(0, 60, 7)]
    streamed = analyze(a, b, batches, 0.5, max_examples=45).records
    for r, s in zip(direct, streamed):
        assert s["n_examples"] == 45
        for key, value in r.items():
            if isinstance(value, float):
                assert s[key] == pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True), key


def test_accumulated_state_does_not_grow_with_examples(monkeypatch):
    """Accumulators keep sums: their tensors are the same size for 20 or 2000 examples."""
    from lmc.analysis import pipeline

    a = build("mlp", seed=0, input_size=12, width=16, depth=2)
    b = build("mlp", seed=1, input_size=12, width=16, depth=2)
    probes = []
    original = pipeline._ProbeStats.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        probes.append(self)

    monkeypatch.setattr(pipeline._ProbeStats, "__init__", spy)
    sizes = []
    for n in (20, 2000):
        probes.clear()
        analyze(a, b, torch.randn(n, 12), 0.5, batch_size=10)
        sizes.append(sum(_tensor_elements(p) for p in probes))
    assert sizes[0] == sizes[1]
    assert sizes[0] < 1000  # a few per-unit vectors, not activations


def _tensor_elements(obj, seen=None) -> int:
    seen = seen if seen is not None else set()
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel()
    if isinstance(obj, nn.Module):
        return 0  # the models' own weights
    if isinstance(obj, dict):
        return sum(_tensor_elements(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_elements(v, seen) for v in obj)
    if hasattr(obj, "__dict__"):
        return sum(
            _tensor_elements(v, seen)
            for k, v in vars(obj).items()
            if k not in ("weight_a", "weight_b")
        )
    return 0
