"""scripts/vit_matching_options.py's head rotations: a function-preserving symmetry of attention
beyond permutations (q/k share an orthogonal map per head, v and the output columns another),
recovered exactly when B is A with known rotations; and its ``--set`` recipe override."""

import pytest
import torch

from lmc.models import build


@pytest.fixture
def script(load_script):
    return load_script("vit_matching_options")


def _vit(seed):
    return build("vit", seed=seed, in_channels=1, image_size=8, patch=4, width=16, depth=2,
                 heads=2, num_classes=10).eval()  # fmt: skip


def _random_rotations(state, heads, d, seed):
    gen = torch.Generator().manual_seed(seed)
    out = {k: v.clone() for k, v in state.items()}
    blocks = sorted({k.rsplit(".", 2)[0] for k in state if k.endswith("attn.q.weight")})
    for block in blocks:
        for h in range(heads):
            rows = slice(h * d, (h + 1) * d)
            qk, _ = torch.linalg.qr(torch.randn(d, d, generator=gen))
            vo, _ = torch.linalg.qr(torch.randn(d, d, generator=gen))
            for t, rot in (("q", qk), ("k", qk), ("v", vo)):
                out[f"{block}.{t}.weight"][rows] = rot @ state[f"{block}.{t}.weight"][rows]
                out[f"{block}.{t}.bias"][rows] = rot @ state[f"{block}.{t}.bias"][rows]
            w = state[f"{block}.out.weight"]
            out[f"{block}.out.weight"][:, rows] = w[:, rows] @ vo.T
    return out


def test_known_head_rotations_keep_the_function_and_are_undone_exactly(script):
    script = script
    model = _vit(0)
    state = model.state_dict()
    rotated = _random_rotations(state, heads=2, d=8, seed=1)
    x = torch.randn(5, 1, 8, 8)
    other = _vit(0)
    other.load_state_dict(rotated)
    with torch.no_grad():
        assert torch.allclose(other(x), model(x), atol=1e-5)
        assert any(not torch.allclose(rotated[k], state[k]) for k in state)
        undone = script.rotate_heads(model, state, rotated)
        assert all(torch.allclose(undone[k], state[k], atol=1e-5) for k in state)


def test_rotating_an_independent_model_keeps_its_function_and_raises_the_overlap(script):
    script = script
    a, b = _vit(0), _vit(1)
    sa, sb = a.state_dict(), b.state_dict()
    out = script.rotate_heads(a, sa, sb)
    x = torch.randn(5, 1, 8, 8)
    moved = _vit(1)
    moved.load_state_dict(out)
    with torch.no_grad():
        assert torch.allclose(moved(x), b(x), atol=1e-5)
    attn = [k for k in sa if ".attn." in k]
    before = sum(float((sa[k] * sb[k]).sum()) for k in attn)
    after = sum(float((sa[k] * out[k]).sum()) for k in attn)
    assert after > before


def test_set_overrides_reach_nested_tables_and_refuse_bad_items(script):
    script = script
    study = {"train": {"epochs": 4}, "data": {"options": {"train_size": 10}}}
    script._override(study, "train.epochs=16")
    script._override(study, 'train.optimizer="adamw"')
    script._override(study, "data.options={}")
    script._override(study, "sweep.widths=[256]")
    assert study["train"] == {"epochs": 16, "optimizer": "adamw"}
    assert study["data"]["options"] == {} and study["sweep"]["widths"] == [256]
    with pytest.raises(SystemExit, match="TABLE.KEY=VALUE"):
        script._override(study, "epochs=3")
