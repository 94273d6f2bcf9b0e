"""scripts/llfc_figures.py: each subcommand writes its figure and prints the numbers the README
quotes. The inputs are tiny fake results folders whose expected numbers are computed here,
independently of the script, and which carry rows the script must ignore (other lambdas, other
methods)."""

import csv
import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


@pytest.fixture
def script(load_script):
    return load_script("llfc_figures")


def _write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _result(method, pair, lam, loss_barrier, acc_barrier, accuracy):
    return {
        "width": 8, "weight_decay": 0.0001, "pair": pair, "method": method, "lam": lam,
        "midpoint_loss_barrier": loss_barrier, "midpoint_accuracy_barrier": acc_barrier,
        "accuracy": accuracy,
    }  # fmt: skip


def _layer(method, pair, layer, kind, **values):
    row = {
        "width": 8, "weight_decay": 0.0001, "pair": pair, "method": method, "lam": 0.5,
        "layer": layer, "name": f"layer{layer}", "kind": kind, "llfc_cosine": 0.5,
        "endpoint_cosine": 0.5, "llfc_scale": 1.0, "commutativity_distance": 0.0,
        "weight_distance": 1.0, "input_distance": 0.0, "commutativity_relative": "nan",
    }  # fmt: skip
    row.update(values)
    return row


def _mean(values):
    return statistics.mean(values)


def _std(values):
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _line(printed: str, prefix: str) -> str:
    (line,) = [x for x in printed.splitlines() if x.startswith(prefix)]
    return line


# spawn epoch -> pair -> (loss barrier, accuracy barrier, merged accuracy,
#                          [(llfc cosine, endpoint cosine, llfc scale) per layer 1, 2, 3]);
# each layer's commutativity distance is 10 x its layer number + the pair, its weight distance
# 2 + the pair and its relative residual the pair / 10
SPAWN = {
    0: {
        0: (1.20, 0.25, 0.60, [(0.90, 0.20, 0.7), (0.80, 0.25, 0.6), (0.85, 0.95, 0.8)]),
        1: (1.00, 0.20, 0.65, [(0.86, 0.22, 0.7), (0.84, 0.21, 0.5), (0.87, 0.96, 0.9)]),
    },
    2: {
        0: (0.02, 0.004, 0.88, [(0.999, 0.70, 0.99), (0.998, 0.72, 0.98), (0.9995, 0.99, 1.0)]),
        1: (0.01, 0.002, 0.89, [(0.997, 0.69, 0.97), (0.996, 0.74, 0.96), (0.9991, 0.99, 1.0)]),
    },
}


def _spawning_folder(root: Path) -> Path:
    variants = []
    for k, pairs in SPAWN.items():
        folder = f"spawn{k}"
        variants.append({"name": folder, "folder": folder, "changed": {"sweep.spawn_epoch": k}})
        results, layers = [], []
        for pair, (loss, acc, merged, per_layer) in pairs.items():
            results.append(_result("none", pair, 0.5, loss, acc, merged))
            # decoys: another lambda and another method
            results.append(_result("none", pair, 0.0, 9.0, 0.9, 0.1))
            results.append(_result("weight", pair, 0.5, 7.0, 0.7, 0.2))
            for layer, (llfc, ends, scale) in enumerate(per_layer, start=1):
                kind = "logits" if layer == 3 else "hidden"
                values = {
                    "llfc_cosine": llfc, "endpoint_cosine": ends, "llfc_scale": scale,
                    "commutativity_distance": 10 * layer + pair, "weight_distance": 2 + pair,
                    "commutativity_relative": pair / 10,
                }  # fmt: skip
                layers.append(_layer("none", pair, layer, kind, **values))
                layers.append(_layer("none", pair, layer, kind, lam=0.25, llfc_cosine=0.0))
                layers.append(_layer("weight", pair, layer, kind, llfc_cosine=0.0))
        _write_csv(root / folder / "results.csv", results)
        _write_csv(root / folder / "layers.csv", layers)
    (root / "variants.json").write_text(json.dumps({"name": "s", "variants": variants}))
    return root


def test_spawning_figure_and_numbers(script, tmp_path, capsys):
    results = _spawning_folder(tmp_path / "results")
    out = tmp_path / "spawning.png"
    assert script.main(["spawning", str(results), str(out)]) == 0
    assert out.stat().st_size > 10_000
    printed = capsys.readouterr().out
    for k, pairs in SPAWN.items():
        loss = [p[0] for p in pairs.values()]
        acc = [100 * p[1] for p in pairs.values()]
        merged = [100 * p[2] for p in pairs.values()]
        line = _line(printed, f"K = {k} (")
        assert ("independent" in line) == (k == 0)
        assert f"midpoint accuracy barrier {_mean(acc):.2f} ± {_std(acc):.2f} points" in line
        assert f"midpoint loss barrier {_mean(loss):.3f} ± {_std(loss):.3f} nats" in line
        assert f"merged accuracy {_mean(merged):.2f} %" in line
        assert "2 pairs" in line
        hidden = []
        for layer in (1, 2, 3):
            llfc = [1 - p[3][layer - 1][0] for p in pairs.values()]
            ends = [1 - p[3][layer - 1][1] for p in pairs.values()]
            scale = [p[3][layer - 1][2] for p in pairs.values()]
            line = _line(printed, f"K = {k} layer {layer} (")
            assert ("logits" in line) == (layer == 3)
            assert f"1 - llfc_cosine {_mean(llfc):.3g} ± {_std(llfc):.2g}" in line
            assert f"1 - endpoint_cosine {_mean(ends):.3g} ± {_std(ends):.2g}" in line
            assert f"llfc_scale {_mean(scale):.3f}" in line
            assert f"(ratio of the means {_mean(llfc) / _mean(ends):.3g})" in line
            com = _mean([10 * layer + p for p in pairs])
            wd = _mean([2 + p for p in pairs])
            rel = _mean([p / 10 for p in pairs])
            assert line.endswith(
                f"commutativity distance {com:.3f}, weight distance {wd:.3f}, relative {rel:.4f}"
            )
            if layer != 3:
                hidden.append(_mean(llfc))
        line = _line(printed, f"K = {k}: mean over hidden layers")
        assert line.endswith(f"{_mean(hidden):.3g}")
    # the spawned pair is printed after the independent one, whatever variants.json's order
    assert printed.index("K = 0 (") < printed.index("K = 2 (")


# method -> pair -> {layer: (commutativity distance, weight distance, input distance,
#                            llfc cosine, endpoint cosine)}
METHODS = {
    "none": {
        0: {1: (0, 20, 0, 0.85, 0.15), 2: (24, 19, 18, 0.80, 0.2), 3: (30, 7, 13, 0.86, 0.98)},
        1: {1: (0, 21, 0, 0.86, 0.17), 2: (22, 19.5, 17, 0.81, 0.3), 3: (29, 7.5, 12, 0.87, 0.99)},
    },
    "weight": {
        0: {1: (0, 18, 0, 0.97, 0.6), 2: (11, 17, 12, 0.96, 0.62), 3: (6, 3.7, 7.3, 0.996, 0.98)},
        1: {
            1: (0, 18.5, 0, 0.98, 0.5),
            2: (12, 17.5, 13, 0.95, 0.7),
            3: (5.5, 3.9, 7, 0.997, 0.99),
        },
    },
}
METHOD_BARRIERS = {"none": [(1.3, 0.25), (1.1, 0.21)], "weight": [(0.05, 0.01), (0.03, 0.008)]}


def _methods_folder(root: Path) -> Path:
    results, layers = [], []
    for method, pairs in METHODS.items():
        for pair, per_layer in pairs.items():
            loss, acc = METHOD_BARRIERS[method][pair]
            results.append(_result(method, pair, 0.5, loss, acc, 0.8))
            results.append(_result(method, pair, 1.0, 5.0, 0.5, 0.8))  # decoy lambda
            for layer, (com, wd, dh, llfc, ends) in per_layer.items():
                rel = com / (wd * dh) if dh > 0 else "nan"
                values = {
                    "commutativity_distance": com, "weight_distance": wd, "input_distance": dh,
                    "commutativity_relative": rel, "llfc_cosine": llfc, "endpoint_cosine": ends,
                }  # fmt: skip
                kind = "logits" if layer == 3 else "hidden"
                layers.append(_layer(method, pair, layer, kind, **values))
                layers.append(_layer(method, pair, layer, kind, lam=0.0, weight_distance=99.0))
    _write_csv(root / "results.csv", results)
    _write_csv(root / "layers.csv", layers)
    return root


def test_methods_figure_and_numbers(script, tmp_path, capsys):
    results = _methods_folder(tmp_path / "results")
    out = tmp_path / "methods.png"
    assert script.main(["methods", str(results), str(out)]) == 0
    assert out.stat().st_size > 10_000
    printed = capsys.readouterr().out
    for method, pairs in METHODS.items():
        loss = [b[0] for b in METHOD_BARRIERS[method]]
        acc = [100 * b[1] for b in METHOD_BARRIERS[method]]
        line = _line(printed, f"{method}: ")
        assert f"midpoint accuracy barrier {_mean(acc):.2f} ± {_std(acc):.2f} points" in line
        assert f"midpoint loss barrier {_mean(loss):.3f} ± {_std(loss):.3f} nats" in line
        for layer in (1, 2, 3):
            com, wd, dh, llfc, ends = ([pairs[p][layer][i] for p in pairs] for i in range(5))
            line = _line(printed, f"{method} layer {layer} (")
            assert f"commutativity distance {_mean(com):.3f}," in line
            assert f"weight distance {_mean(wd):.3f}," in line
            assert f"feature distance {_mean(dh):.3f}," in line
            assert f"1 - llfc_cosine {_mean([1 - c for c in llfc]):.3g}," in line
            assert line.endswith(f"1 - endpoint_cosine {_mean([1 - c for c in ends]):.3g}")
            relative = re.search(r"relative (\S+),", line).group(1)
            if layer == 1:  # both models read the same input: no residual to normalise
                assert relative == "nan"
            else:
                expected = _mean([c / (w * d) for c, w, d in zip(com, wd, dh)])
                assert relative == f"{expected:.4f}"


def test_usage_on_bad_arguments(script, capsys):
    assert script.main(["nope", "a", "b"]) == 2
    assert "spawning" in capsys.readouterr().err


def _stitch_folder(root: Path) -> tuple[Path, dict]:
    """A two-variant study (spawn epochs 0 and 3) with stitch.csv; returns the folder and the
    errors per (label, layer) over pairs."""
    variants = [{"name": "k0", "folder": "k0", "changed": {"sweep.spawn_epoch": 0}},
                {"name": "k3", "folder": "k3", "changed": {"sweep.spawn_epoch": 3}}]  # fmt: skip
    root.mkdir(parents=True)
    (root / "variants.json").write_text(json.dumps({"variants": variants}))
    expected: dict = {}
    for v, scale in (("k0", 1.0), ("k3", 0.5)):
        rows = []
        for method in ("none", "weight"):
            for pair in (0, 1):
                errors = [0.1, 0.5 * scale + 0.01 * pair, 0.3 * scale, 0.12 + 0.01 * pair]
                for layer, error in enumerate(errors):
                    rows.append({"width": 8, "weight_decay": 0.0001, "pair": pair,
                                 "method": method, "layer": layer, "layers": 3, "error": error,
                                 "error_a": errors[-1], "error_b": errors[0]})  # fmt: skip
                    label = ("independent" if v == "k0" else "spawned at epoch 3", method)
                    expected.setdefault((*label, layer), []).append(100 * error)
        _write_csv(root / v / "stitch.csv", rows)
    return root, expected


def test_stitching_figure_and_numbers(script, tmp_path, capsys):
    results, expected = _stitch_folder(tmp_path / "results")
    out = tmp_path / "stitching.png"
    assert script.main(["stitching", str(results), str(out)]) == 0
    assert out.stat().st_size > 10_000
    printed = capsys.readouterr().out
    labels = {"none": "no permutation", "weight": "weight matching"}
    for variant in ("independent", "spawned at epoch 3"):
        for method, label in labels.items():
            line = _line(printed, f"{variant}, {label}: ")
            cells = [f"{_mean(expected[(variant, method, k)]):.2f} ± "
                     f"{_std(expected[(variant, method, k)]):.2f}" for k in range(4)]  # fmt: skip
            assert " / ".join(cells) in line


@pytest.mark.parametrize("command", ["spawning", "methods", "stitching"])
def test_missing_results_folder_is_an_error(script, command, tmp_path):
    with pytest.raises((OSError, ValueError)):
        script.main([command, str(tmp_path / "absent"), str(tmp_path / "f.png")])


@pytest.mark.parametrize(
    "command, folder",
    [
        ("spawning", "llfc-spawning-fmnist-mlp"),
        ("methods", "llfc-methods-fmnist-mlp"),
        ("stitching", "llfc-stitching-fmnist-mlp"),
    ],
)
def test_each_figure_is_drawn_from_committed_results(script, command, folder, tmp_path, capsys):
    out = tmp_path / "figure.png"
    assert script.main([command, str(RESULTS / folder), str(out)]) == 0
    assert out.stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert printed.strip() and "nan" not in printed.replace("relative nan", "").lower()


def test_committed_methods_barriers_match_table1(script, capsys, tmp_path):
    folder = RESULTS / "llfc-methods-fmnist-mlp"
    script.methods(folder, tmp_path / "f.png")
    printed = capsys.readouterr().out
    with (folder / "table1.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["method"] for r in rows} == {"none", "weight", "activation", "ste"}
    for row in rows:
        line = _line(printed, f"{row['method']}: ")
        loss = float(row["midpoint_loss_barrier_mean"])
        acc = 100 * float(row["midpoint_accuracy_barrier_mean"])
        assert f"midpoint loss barrier {loss:.3f} ± " in line
        assert f"midpoint accuracy barrier {acc:.2f} ± " in line


def test_committed_spawning_barriers_match_each_variants_table1(script, capsys, tmp_path):
    folder = RESULTS / "llfc-spawning-fmnist-mlp"
    script.spawning(folder, tmp_path / "f.png")
    printed = capsys.readouterr().out
    variants = json.loads((folder / "variants.json").read_text())["variants"]
    assert [v["changed"]["sweep.spawn_epoch"] for v in variants] == [0, 1, 2, 5]
    for variant in variants:
        with (folder / variant["folder"] / "table1.csv").open() as f:
            (row,) = list(csv.DictReader(f))
        line = _line(printed, f"K = {variant['changed']['sweep.spawn_epoch']} (")
        loss = float(row["midpoint_loss_barrier_mean"])
        acc = 100 * float(row["midpoint_accuracy_barrier_mean"])
        assert f"midpoint loss barrier {loss:.3f} ± " in line
        assert f"midpoint accuracy barrier {acc:.2f} ± " in line
