"""The canonical control (issue 42 item 3): the alignment method ``canonical`` puts both models
in the canonical form (LayerNorms folded) and aligns nothing, so a study can tell how much of
``orthogonal``'s and ``learned``'s drop is the reparametrisation itself.

On a zoo GPT and ViT pair its path's endpoints are the original models' losses (the canonical
form keeps the function) and its midpoint is another model than plain averaging's; in a study
it is one more method whose merges run alone (the other methods' merge ids do not change); the
recipes that list a canonical method list it too."""

from __future__ import annotations

import csv
import sys

import pytest
import torch

from lmc.data.text import build_text_dataset
from lmc.experiments import LocalExecutor, resolve, run_study
from lmc.experiments.cells import METHOD_ORDER
from lmc.experiments.jobs import expand
from lmc.experiments.study import list_recipes, recipe_path
from lmc.metrics import PathSettings
from lmc.models import build
from lmc.pair import PairSettings, run_pair
from lmc.perm import align
from lmc.perm.canonical import canonicalize
from lmc.perm.methods import canonical_control_note, get_method, method_names
from lmc.report.style import method_style

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TEXT = "It was the best of times, it was the worst of times. " * 400


def test_the_record_is_a_canonical_method_without_settings_right_after_none():
    record = get_method("canonical")
    assert record.canonical and not record.settings and not record.needs_data
    assert method_names()[:2] == ("none", "canonical")
    assert METHOD_ORDER[:2] == ("none", "canonical")
    assert method_style("canonical")[2] == "canonical form, no alignment"


def _perturbed(model, seed: int):
    """LayerNorms start at (1, 0) in every model, and where two models' norms are equal folding
    them commutes with averaging (it is linear in the other weights): move every tensor by a
    noise of the model's own, as training does."""
    gen = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=gen))
    return model


def _gpt_pair():
    data = build_text_dataset("t", TEXT, context=12)

    def gpt(seed):
        model = build("gpt", seed=seed, vocab=data.vocab_size, context=12, width=16, depth=2,
                      heads=2)  # fmt: skip
        return _perturbed(model, seed)

    return gpt(0), gpt(1), data


def _vit_pair(digits):
    def vit(seed):
        model = build("vit", seed=seed, in_channels=1, image_size=8, num_classes=10, width=16,
                      depth=2, heads=2)  # fmt: skip
        return _perturbed(model, seed)

    return vit(0), vit(1), digits


@pytest.mark.parametrize("arch", ["gpt", "vit"])
def test_the_path_keeps_the_endpoints_and_moves_the_midpoint(arch, digits):
    a, b, data = _gpt_pair() if arch == "gpt" else _vit_pair(digits)
    path = PathSettings(lambdas=3, calibrate=False)
    plain = run_pair(a, b, data, PairSettings(path=path))
    control = run_pair(a, b, data, PairSettings(align="canonical", path=path))
    assert control.alignment["method"] == "canonical" and control.alignment["canonical"] is True
    assert control.path.loss[0] == pytest.approx(plain.path.loss[0], rel=1e-5)
    assert control.path.loss[-1] == pytest.approx(plain.path.loss[-1], rel=1e-5)
    assert control.path.loss[1] != pytest.approx(plain.path.loss[1], rel=1e-4)
    # the path runs between the canonical forms, B unaligned there
    ca, cb = control.models
    for name, value in canonicalize(b).state_dict().items():
        torch.testing.assert_close(control.state_b[name], value, rtol=0, atol=0)
    x = data.x_test[:8]
    with torch.no_grad():
        torch.testing.assert_close(ca(x), a(x), rtol=1e-5, atol=1e-5)


def test_the_paths_agree_where_the_norms_agree():
    """Folding equal norms is linear in the other weights (docs/science.md): with B's LayerNorm
    gains and biases set to A's, the control's midpoint is plain averaging's function."""
    a, b, data = _gpt_pair()
    norms = {k: v for k, v in a.state_dict().items() if "norm" in k}
    assert norms  # gains and biases of every LayerNorm
    b.load_state_dict({**b.state_dict(), **norms})
    path = PathSettings(lambdas=3, calibrate=False)
    plain = run_pair(a, b, data, PairSettings(path=path))
    control = run_pair(a, b, data, PairSettings(align="canonical", path=path))
    assert control.path.loss[1] == pytest.approx(plain.path.loss[1], rel=1e-6)


def test_align_gives_the_identity_between_the_canonical_forms():
    a, b, data = _gpt_pair()
    result = align("canonical", a, b, inputs=data.x_train[:4])
    assert set(result.info["kinds"].values()) == {"permutation"}
    assert all(torch.equal(p, torch.arange(len(p))) for p in result.perm.values())
    assert result.models is not None and result.info["objective_after"] == pytest.approx(
        result.info["objective_before"]
    )


def test_the_note_names_the_canonical_methods_listed_without_their_control():
    note = canonical_control_note(["none", "weight", "orthogonal", "learned"])
    assert note is not None and "orthogonal, learned" in note and "'canonical'" in note
    assert canonical_control_note(["none", "canonical", "orthogonal"]) is None
    assert canonical_control_note(["none", "weight", "random-direction"]) is None
    assert canonical_control_note(["none", "orthogonal"], widened=True) is None


def _methods_lists(raw: dict) -> list[list[str]]:
    lists = [raw.get("merge", {}).get("methods", ["none", "weight"])]
    for variant in raw.get("variants", []):
        if "methods" in variant.get("merge", {}):
            widened = variant.get("sweep", {}).get("width_ratio", 1) != 1
            lists.append([] if widened else variant["merge"]["methods"])
    return lists


def test_every_recipe_that_lists_a_canonical_method_lists_the_control():
    checked = 0
    for name in list_recipes():
        raw = tomllib.loads(recipe_path(name).read_text(encoding="utf-8"))
        widened = raw.get("sweep", {}).get("width_ratio", 1) != 1
        for methods in _methods_lists(raw):
            assert canonical_control_note(methods, widened=widened) is None, (name, methods)
            checked += "canonical" in methods
    assert checked >= 3  # beyond-perm-fmnist-vit, lewc-text-gpt, widen-text-gpt's base and same


def _study(corpus, methods) -> dict:
    return {
        "name": "tiny-canonical",
        "data": {"dataset": "text", "options": {"path": str(corpus), "context": 12}},
        "model": {"name": "gpt", "depth": 1, "heads": 2},
        "sweep": {"widths": [8], "pairs": 1},
        "train": {"epochs": 2, "optimizer": "adam", "lr": 1e-2},
        "merge": {"methods": methods, "lambdas": 3},
        "analysis": {"enabled": False},
    }


def test_a_study_reports_the_control_beside_none_and_keeps_the_other_merge_ids(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, "utf-8")
    with_control = resolve(_study(corpus, ["none", "canonical", "orthogonal"]))
    without = resolve(_study(corpus, ["none", "orthogonal"]))
    data = build_text_dataset("t", TEXT, context=12)
    ids = {
        key: {j["method"]: j["id"] for j in expand(study, data)[1]}
        for key, study in (("with", with_control), ("without", without))
    }
    assert ids["with"]["none"] == ids["without"]["none"]
    assert ids["with"]["orthogonal"] == ids["without"]["orthogonal"]
    assert ids["with"]["canonical"] not in ids["without"].values()

    record = run_study(with_control, tmp_path / "o", executor=LocalExecutor(1),
                       runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    assert record["status"] == "finished"
    rows = list(csv.DictReader((tmp_path / "o" / "results.csv").open()))
    paths = {m: {float(r["lam"]): float(r["loss"]) for r in rows if r["method"] == m}
             for m in ("none", "canonical", "orthogonal")}  # fmt: skip
    for lam in (0.0, 1.0):  # every method's endpoints are the two trained models
        assert paths["canonical"][lam] == pytest.approx(paths["none"][lam], rel=1e-5)
        assert paths["orthogonal"][lam] == pytest.approx(paths["none"][lam], rel=1e-5)
    assert paths["canonical"][0.5] != pytest.approx(paths["none"][0.5], rel=1e-5)
    table = list(csv.DictReader((tmp_path / "o" / "table1.csv").open()))
    assert sorted(r["method"] for r in table) == ["canonical", "none", "orthogonal"]
