"""Weight matching of safetensors files read lazily, and models written tensor by tensor
(issue 32 item 3): a known permutation is recovered exactly from files, the aligned file is
exactly the in-memory result, and the writer round-trips every dtype."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from lmc.config import LmcError
from lmc.perm import apply_permutation, random_permutation, spec_from_model
from lmc.perm.files import match_files, permute_file
from lmc.store.lazy import LazyStateDict, write_tensors

transformers = pytest.importorskip("transformers")
TIED = {"lm_head.weight": "transformer.wte.weight"}


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory):
    """A tiny GPT-2 saved by save_pretrained (the LM head tied: stored once), and its spec
    derived on the meta device, without weights."""
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=40, n_positions=16,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    folder = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(folder, safe_serialization=True)
    with torch.device("meta"):
        skeleton = transformers.GPT2LMHeadModel(config).eval()
    spec = spec_from_model(skeleton, torch.zeros(1, 8, dtype=torch.long, device="meta"))
    return spec, model, folder / "model.safetensors"


def test_the_file_is_read_lazily_with_the_tied_head_aliased(gpt2_file):
    spec, model, path = gpt2_file
    with LazyStateDict(path, TIED) as state:
        assert "lm_head.weight" in state and "lm_head.weight" not in state.stored_names
        assert set(spec) <= set(state)
        assert torch.equal(state["lm_head.weight"], model.lm_head.weight)
        assert state.nbytes() == sum(p.numel() * 4 for p in model.parameters())  # tied: once


def test_a_known_permutation_is_recovered_exactly_from_files(gpt2_file, tmp_path):
    spec, model, path_a = gpt2_file
    perm = random_permutation(spec, seed=3)
    path_b = permute_file(spec, perm, path_a, tmp_path / "b.safetensors", aliases=TIED)
    aligned = tmp_path / "aligned.safetensors"
    for solver in ("scipy", "auto"):
        result = match_files(spec, path_a, path_b, aligned, aliases=TIED, solver=solver)
        a, back = load_file(path_a), load_file(aligned)
        assert a.keys() == back.keys()
        for name in a:
            assert torch.equal(a[name], back[name]), (solver, name)
        assert result.objective_after > result.objective_before


def test_the_written_file_is_the_in_memory_permutation(gpt2_file, tmp_path):
    spec, model, path = gpt2_file
    perm = random_permutation(spec, seed=1)
    out = permute_file(spec, perm, path, tmp_path / "p.safetensors", aliases=TIED)
    expected = apply_permutation(spec, perm, model.state_dict())
    written = load_file(out)
    assert set(written) == set(load_file(path))  # the tied head is still stored once
    for name, tensor in written.items():
        assert torch.equal(tensor, expected[name]), name
    restored = transformers.GPT2LMHeadModel.from_pretrained(path.parent).eval()
    restored.load_state_dict({**written, "lm_head.weight": written["transformer.wte.weight"]})
    ids = torch.randint(0, 40, (2, 8))
    with torch.no_grad():  # the same function as the original
        assert torch.allclose(restored(ids).logits, model(ids).logits, atol=1e-5)


def test_files_that_do_not_fit_the_spec_are_refused(gpt2_file, tmp_path):
    spec, model, path = gpt2_file
    with pytest.raises(LmcError, match="lacks"):
        match_files(spec, path, path)  # without the alias the tied head is missing
    other = tmp_path / "other.safetensors"
    state = {k: v.clone() for k, v in load_file(path).items()}
    state["transformer.wpe.weight"] = torch.zeros(16, 33)
    save_file(state, other)
    with pytest.raises(LmcError, match="another architecture"):
        match_files(spec, path, other, aliases=TIED)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(LmcError, match="safetensors"):
        LazyStateDict(bad)
    with pytest.raises(LmcError, match="alias"):
        LazyStateDict(path, {"x": "not.there"})


def test_the_writer_round_trips_every_dtype_and_leaves_nothing_on_failure(tmp_path):
    tensors = {
        "f32": torch.randn(3, 5),
        "bf16": torch.randn(4).to(torch.bfloat16),
        "f16": torch.randn(2, 2).to(torch.float16),
        "i64": torch.arange(7),
        "scalar": torch.tensor(2.5),
        "mask": torch.tensor([True, False, True]),
        "transposed": torch.randn(4, 3).t(),  # not contiguous
    }
    layout = [(k, v.dtype, tuple(v.shape)) for k, v in tensors.items()]
    out = write_tensors(tmp_path / "t.safetensors", layout, tensors.__getitem__, {"k": "v"})
    back = load_file(out)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name
    (length,) = struct.unpack("<Q", out.read_bytes()[:8])
    assert length % 8 == 0 and json.loads(out.read_bytes()[8 : 8 + length])["__metadata__"] == {
        "k": "v"
    }
    wrong = tmp_path / "wrong.safetensors"
    with pytest.raises(LmcError, match="layout"):
        write_tensors(wrong, layout, lambda name: torch.zeros(1))
    assert not wrong.exists() and not list(tmp_path.glob("*.tmp"))
