"""``lmc interpolate A B --hf-model FOLDER --data corpus.txt --align learned`` on two tiny Hugging
Face Llama checkpoints saved with ``save_pretrained`` (issue 42): the stream is read off the
traced graph (RMSNorm gains folded, no centring), the learned maps include one rotation and
scaling per RoPE frequency plane and grouped-query attention's shared maps, and the canonical
pair computes the models' own functions, so the aligned path ends at each model's own loss. A
post-LN model asked for ``--align orthogonal`` is refused in one line naming its norm.
"""

from __future__ import annotations

import json
import random

import pytest

from lmc.cli.main import main

transformers = pytest.importorskip("transformers")

LETTERS = "abcdefgh "
FAST = ["--lambdas", "3", "--quiet", "--json", "--device", "cpu", "--align-examples", "48"]
LEARNED = ["--learned-steps", "2", "--learned-batch-size", "8", "--learned-holdout", "8"]


def _llama(folder, seed: int, kv_heads: int = 2) -> str:
    import torch

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # gains away from 1, so folding them matters
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(folder)
    return str(folder)


def _bert(folder) -> str:
    config = transformers.BertConfig(
        vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=24, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertForMaskedLM(config).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-llama")
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        made = {
            "a": _llama(root / "a", 0),
            "b": _llama(root / "b", 1),
            "bert": _bert(root / "bert"),
        }
    finally:
        transformers.logging.set_verbosity(verbosity)
    text = root / "corpus.txt"
    rng = random.Random(0)
    text.write_text("".join(rng.choice(LETTERS) for _ in range(3000)), encoding="utf-8")
    made["data"] = str(text)
    made["root"] = root
    return made


def _run(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured


def test_learned_alignment_of_two_llama_checkpoints(folders, capsys, tmp_path):
    common = ["--hf-model", folders["a"], "--data", folders["data"], *FAST]
    own = {}
    for name in ("a", "b"):
        code, got = _run(capsys, ["interpolate", folders[name], folders[name], *common,
                                  "--out", str(tmp_path / f"own-{name}")])  # fmt: skip
        assert code == 0, got.err
        own[name] = json.loads(got.out)["loss"][0]
    argv = ["interpolate", folders["a"], folders["b"], *common, "--align", "learned", *LEARNED]
    code, got = _run(capsys, [*argv, "--out", str(tmp_path / "out")])
    assert code == 0, got.err
    summary = json.loads(got.out)
    assert summary["align"] == "learned"
    info = summary["align_info"]
    assert info["canonical"] is True
    assert "rope" in info["kinds"].values()  # RoPE's per-plane maps were learned
    assert any(g.endswith(":vo") for g in info["learned_groups"])  # GQA's shared v/o maps
    assert summary["loss"][0] == pytest.approx(own["a"], rel=1e-5)
    assert summary["loss"][-1] == pytest.approx(own["b"], rel=1e-5)


def test_a_post_ln_model_asked_for_orthogonal_gets_one_line_naming_its_norm(
    folders, capsys, tmp_path
):
    out = tmp_path / "out"
    code, got = _run(capsys, ["interpolate", folders["bert"], folders["bert"], "--hf-model",
                              folders["bert"], "--data", folders["data"], *FAST, "--align",
                              "orthogonal", "--out", str(out)])  # fmt: skip
    assert code == 2
    err = got.err.strip()
    assert len(err.splitlines()) == 1, err
    assert "'hf.bert.embeddings.LayerNorm'" in err and "post-LN" in err
    assert not out.exists() or not any(out.iterdir())
