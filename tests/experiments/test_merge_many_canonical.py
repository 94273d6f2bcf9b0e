"""Merge-many studies of language models merged beyond permutations (issue 46 item 4): the
canonical methods in ``[merge_many] methods``, next-token metrics, and a shared training subset
that makes a set's models the width study's runs."""

from __future__ import annotations

import csv
import math
import warnings

import pytest
import torch

from lmc.config import LmcError, config_hash
from lmc.data import load
from lmc.experiments import LocalExecutor, resolve, run_study
from lmc.experiments.jobs import train_configs
from lmc.experiments.merge_many_study import expand_merge_many
from lmc.merge.many import merge_many_canonical
from lmc.metrics import classification_metrics
from lmc.store import RunStore


def _corpus(tmp_path):
    corpus = tmp_path / "corpus.txt"
    words = "the cat sat on a mat while two dogs ran far away from home again".split()
    gen = torch.Generator().manual_seed(0)
    text = " ".join(words[int(i)] for i in torch.randint(len(words), (3000,), generator=gen))
    corpus.write_text(text, "utf-8")
    return corpus


def _study(corpus, methods, **merge_many):
    return {
        "name": "tiny-mm-text",
        "experiment": "merge-many",
        "data": {
            "dataset": "text",
            "options": {"path": str(corpus), "context": 16, "train_size": 200},
        },  # fmt: skip
        "model": {"name": "gpt", "depth": 1, "heads": 2},
        "train": {"epochs": 1, "optimizer": "adamw", "lr": 3e-3, "batch_size": 32},
        "merge_many": {
            "width": 16,
            "weight_decay": 0.1,
            "methods": methods,
            "reference": False,
            **merge_many,
        },  # fmt: skip
        "sets": [{"name": "four", "models": 3}],
    }


def test_a_shared_subset_is_allowed_only_when_every_set_is_all(tmp_path):
    corpus = _corpus(tmp_path)
    study = resolve(_study(corpus, ["none"]))
    assert study["data"]["options"]["train_size"] == 200
    assert study["merge_many"]["align_examples"] == 2000
    raw = _study(corpus, ["none"])
    raw["sets"].append({"name": "half", "models": 2, "subset": "random", "train_fraction": 0.5})
    with pytest.raises(LmcError, match='every set\'s subset to be "all"'):
        resolve(raw)


def test_method_choices_and_their_settings_are_checked(tmp_path):
    corpus = _corpus(tmp_path)
    for methods, extra, match in [
        (["activation"], {}, "'merge_many.methods'"),
        (["learned"], {"learned_steps": -1}, "learned"),
        (["learned"], {"learned_steps": "many"}, "learned_steps"),
        (["orthogonal"], {"weight_steps": 3}, "unknown key 'merge_many.weight_steps'"),
    ]:
        with pytest.raises(LmcError, match=match):
            resolve(_study(corpus, methods, **extra))
    study = resolve(_study(corpus, ["canonical", "learned"], learned_steps=3))
    assert study["merge_many"]["learned_steps"] == 3
    assert "orthogonal_max_iter" not in study["merge_many"]  # recorded only where given


def test_the_sets_models_are_the_width_studys_runs(tmp_path):
    corpus = _corpus(tmp_path)
    study = resolve(_study(corpus, ["none"]))
    data = load("text", path=str(corpus), context=16)
    train, sets = expand_merge_many(study, data)
    width = resolve({
        "name": "w", "data": study["data"], "model": study["model"], "train": study["train"],
        "sweep": {"widths": [16], "weight_decays": [0.1], "pairs": 2},
    })  # fmt: skip
    pair_ids = [config_hash(c) for p in range(2) for c in train_configs(width, data, 16, 0.1, p)]
    assert [config_hash(c) for c in sets[0]["configs"]] == pair_ids[:3]
    # a study with only none/weight keeps the job id it had (no new keys in the job)
    assert "given" not in sets[0] and "align_examples" not in sets[0]


def test_canonical_merges_of_language_models_run_end_to_end(tmp_path):
    corpus = _corpus(tmp_path)
    raw = _study(corpus, ["none", "canonical", "orthogonal", "learned"], learned_steps=2)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="lmc.perm: ")
        record = run_study(resolve(raw), tmp_path / "o", executor=LocalExecutor(1),
                           runs_dir=tmp_path / "runs", quiet=True)  # fmt: skip
    assert record["status"] == "finished"
    rows = list(csv.DictReader((tmp_path / "o" / "models.csv").open()))
    merged = {r["method"]: r for r in rows if r["role"] == "merged"}
    assert set(merged) == {"none", "canonical", "orthogonal", "learned"}
    for row in rows:
        assert math.isfinite(float(row["test_loss"])) and 0 <= float(row["test_accuracy"]) <= 1

    # the control's row is the mean of the canonical forms, evaluated per token
    store = RunStore(tmp_path / "runs")
    study = resolve(raw)
    data = load("text", path=str(corpus), context=16)
    _, sets = expand_merge_many(study, data)
    models = [store.find(c).build_model("cpu") for c in sets[0]["configs"]]
    x, y = data.split("test")
    control = merge_many_canonical(models, "canonical", inputs=data.x_train[:2], task=data.task)
    with torch.no_grad():
        expected = classification_metrics(control.model(x), y, 15, task=data.task)
    assert float(merged["canonical"]["test_loss"]) == pytest.approx(expected["loss"], rel=1e-6)
    # the canonical forms compute the models' functions, so the control differs from the plain
    # average only through the reparametrisation: both are finite, neither is the ensemble
    ensemble = next(r for r in rows if r["role"] == "ensemble")
    assert float(merged["canonical"]["test_loss"]) != float(ensemble["test_loss"])


def test_settings_of_methods_not_listed_are_refused(tmp_path):
    corpus = _corpus(tmp_path)
    with pytest.raises(LmcError, match="setting of method 'learned', which .* does not list"):
        resolve(_study(corpus, ["none", "orthogonal"], learned_steps=10))
    raw = _study(corpus, ["none"])
    del raw["merge_many"]["width"]
    raw["merge_many"]["learned_steps"] = 3  # the missing width is what is named
    with pytest.raises(LmcError, match="missing key 'merge_many.width'"):
        resolve(raw)


def test_merge_ids_hold_only_settings_that_change_the_result(tmp_path):
    corpus = _corpus(tmp_path)
    data = load("text", path=str(corpus), context=16)

    def job(**extra):
        methods = ["none", "learned", "orthogonal-activation"]
        return expand_merge_many(resolve(_study(corpus, methods, **extra)), data)[1][0]

    plain = job()
    assert job(learned_steps=200)["id"] == plain["id"]  # the baseline
    assert job(orthogonal_activation_batch_size=64)["id"] == plain["id"]  # changes no result
    assert job(orthogonal_activation_batch_size=64)["options"]["orthogonal-activation"][
        "batch_size"] == 64  # fmt: skip
    changed = job(learned_steps=3)
    assert changed["id"] != plain["id"] and changed["given"]["learned"] == {"steps": 3}
    assert changed["options"]["learned"]["steps"] == 3


def test_a_merge_many_study_with_variants_writes_its_index(tmp_path, capsys, study_toml):
    import json

    from lmc.cli.main import main
    from lmc.experiments import read_csv

    corpus = _corpus(tmp_path)
    raw = _study(corpus, ["none", "canonical"])
    raw["variants"] = [{"name": "gpt", "model": {"name": "gpt"}},
                       {"name": "llama", "model": {"name": "llama", "kv_heads": 1}}]  # fmt: skip
    study = tmp_path / "mm.toml"
    study.write_text(study_toml(raw))
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["sweep", str(study), "--out", str(out), "--runs-dir", str(tmp_path / "runs"),
                     "--workers", "1", "--quiet", "--json"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    record = json.loads(capsys.readouterr().out)
    assert [v["name"] for v in record["variants"]] == ["gpt", "llama"]
    rows = read_csv(out / "variants.csv")  # every variant's models.csv rows
    assert {r["variant"] for r in rows} == {"gpt", "llama"}
    merged = [r for r in rows if r["role"] == "merged"]
    assert sorted((r["variant"], r["method"]) for r in merged) == [
        ("gpt", "canonical"),
        ("gpt", "none"),
        ("llama", "canonical"),
        ("llama", "none"),
    ]
    per_variant = read_csv(out / "llama" / "models.csv")
    assert [r["test_loss"] for r in rows if r["variant"] == "llama"] == [
        r["test_loss"] for r in per_variant]  # fmt: skip
    index = (out / "report.md").read_text()
    assert "Results across variants" in index and "Table 1 across variants" not in index
