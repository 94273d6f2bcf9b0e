"""`lmc analyze`'s printed table: compact (100 columns), each column explained by the legend."""

from __future__ import annotations

import csv
import re

import pytest

from lmc.analysis import RECORD_KEYS
from lmc.cli.analyze import COMPACT_COLUMNS, TABLE_WIDTH, compact_table, legend
from lmc.cli.main import main
from lmc.models import build
from lmc.store import RunStore
from lmc.train import make_config


def _record(name: str, lam: float, kind: str = "hidden", value: float = 0.5) -> dict:
    record = {key: value for key in RECORD_KEYS}
    record.update(name=name, lam=lam, kind=kind, layer=1, units=10, activation="relu")
    record.update(has_bias=True, n_examples=50)
    return record


def _legend_map(text: str) -> dict[str, str]:
    """``title -> record key`` as the legend states them (``title = key``)."""
    titles = "|".join(re.escape(title) for title, _ in COMPACT_COLUMNS)
    return dict(re.findall(rf"(?:^|; |: )({titles}) = (\w+)", text))


def test_extreme_cells_and_long_names_fit_in_100_columns():
    records = [
        _record("encoder.blocks.11.mlp.fc2", 0.333333, value=-123456.789),
        _record("layer2", 0.5, value=-0.00012345),
        _record("logits", 1.0, kind="logits", value=99999.4),
    ]
    records[1]["weak_additivity_cosine"] = None
    records[1]["commutativity_relative"] = float("nan")
    lines = compact_table(records).splitlines()
    assert max(len(line) for line in lines) <= TABLE_WIDTH == 100
    header = lines[0].split("  ")
    assert [h.strip() for h in header if h.strip()] == [t for t, _ in COMPACT_COLUMNS]
    rows = [line.split() for line in lines[1:4]]
    assert rows[0][0] == "...ks.11.mlp.fc2"  # 16 characters: the name's end kept
    assert rows[0][2] == "-1e+05" and rows[1][2] == "-1e-04" and rows[2][2] == "99999"
    assert "-" in rows[1] and "nan" in rows[1]
    assert "LEWC prediction" in lines[4]


def test_legend_names_the_record_key_of_every_column_header():
    text = " ".join(line.strip() for line in legend())
    stated = _legend_map(text)
    assert stated == dict(COMPACT_COLUMNS)  # every header, each with its own key
    assert set(stated.values()) <= set(RECORD_KEYS)  # real columns of layers.csv
    assert "layers.csv" in text and "--json" in text
    assert all(len(line) <= TABLE_WIDTH for line in legend())


@pytest.fixture()
def runs(tmp_path):
    store = RunStore(tmp_path / "runs")
    made = []
    for seed in (1, 2):
        config = make_config(
            "digits", "mlp", {"width": 16, "depth": 2}, epochs=1, init_seed=seed, data_seed=seed
        )
        model = build(config["model"], seed=seed, **config["model_options"])
        made.append(store.save(config, model.state_dict(), {"final_test_accuracy": 0.1}))
    return made


def test_printed_table_is_compact_and_the_csv_keeps_every_column(runs, tmp_path, capsys):
    a, b = runs
    out = tmp_path / "out"
    argv = ["analyze", str(a.path), str(b.path), "--quiet", "--lam", "0.25,0.5"]
    argv += ["--max-examples", "60", "--device", "cpu", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(printed) if line.split()[:2] == ["layer", "lam"])
    table = printed[start:]
    assert max(len(line) for line in table) <= TABLE_WIDTH
    rows = table[1:7]  # 2 lambdas x (layer1, layer2, logits)
    assert [row.split()[:2] for row in rows] == [
        [name, lam] for lam in ("0.25", "0.5") for name in ("layer1", "layer2", "logits")
    ]
    assert _legend_map(" ".join(line.strip() for line in table)) == dict(COMPACT_COLUMNS)
    with open(out / "layers.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == list(RECORD_KEYS)  # the full records stay in the file
        csv_rows = list(reader)
    for row, shown in zip(csv_rows, rows):
        cells = shown.split()
        assert float(cells[2]) == pytest.approx(float(row["lewc_cosine"]), abs=5e-4)
        assert float(cells[4]) == pytest.approx(float(row["llfc_cosine"]), abs=5e-4)
