"""A layerwise metric is one record: a toy metric registered here reaches the records,
layers.csv, the printed table of ``lmc analyze``, cosines.png and the report's panels; the
built-in records generate exactly the tables that were kept by hand before."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from lmc.analysis import RECORD_KEYS, analyze
from lmc.analysis.accumulators import MeanCosine, gram_cosine
from lmc.analysis.figures import cosines_figure
from lmc.analysis.layer_metrics import (
    LAYER_METRICS,
    Column,
    LayerMetric,
    ReportPanel,
    Streamed,
    compact_columns,
    figure_lines,
    record_keys,
    register_layer_metric,
    report_panels,
    table_columns,
)
from lmc.analysis.output import write_results
from lmc.cli.analyze import compact_table
from lmc.config import LmcError
from lmc.models import build


class _CosineToA:
    """E_x cos(f_C, f_A) at λ, from the Gram of (f_A, f_B, f_C)."""

    def __init__(self) -> None:
        self.cosine = MeanCosine()

    def update(self, gram) -> None:
        self.cosine.add(gram_cosine(gram.ac, gram.cc, gram.aa))

    def finalize(self) -> dict[str, float]:
        return {"toy_cosine_to_a": self.cosine.finalize()}


class _Rows:
    """Examples seen (λ-free)."""

    def __init__(self) -> None:
        self.rows = 0

    def update(self, batch) -> None:
        self.rows += batch.f_a.shape[0]

    def finalize(self, final) -> dict[str, int]:
        return {"toy_rows": self.rows}


TOY = LayerMetric(
    "toy",
    (
        Column("toy_rows", "examples seen", title="rows"),
        Column(
            "toy_cosine_to_a",
            "E_x cos(f_C, f_A)",
            title="toy cos",
            short="toy",
            label="toy cosine to A",
            note="a test's metric",
        ),
    ),
    lambda site, lam: Streamed(_CosineToA(), lambda s, b: s.update(b.gram)),
    per_lam=True,
    report=(ReportPanel("toy_cosine_to_a", "toy cosine", r"$\cos(f^C, f^A)$", caption="toy"),),
)
TOY_ROWS = LayerMetric("toy_rows", (), lambda site: _Rows())


@pytest.fixture
def toy():
    """TOY registered for one test (its rows counted by a second, λ-free accumulator that
    fills TOY's first column)."""
    register_layer_metric(TOY)
    register_layer_metric(TOY_ROWS)
    yield TOY
    del LAYER_METRICS[TOY_ROWS.name], LAYER_METRICS[TOY.name]


def _pair():
    a = build("mlp", seed=0, input_size=12, width=16, depth=2)
    b = build("mlp", seed=1, input_size=12, width=16, depth=2)
    x = torch.randn(40, 12, generator=torch.Generator().manual_seed(0))
    return a, b, x


def test_a_registered_metric_reaches_every_output(toy, tmp_path):
    a, b, x = _pair()
    result = analyze(a, b, x, [0.0, 0.5], batch_size=16, spectra=False)
    keys = record_keys()
    assert keys[-3:] == ("toy_rows", "toy_cosine_to_a", "n_examples")
    assert keys[:-3] == RECORD_KEYS[:-1]  # the built-in columns keep their order
    for r in result.records:
        assert list(r) == list(keys)
        assert r["toy_rows"] == 40
    for r in result.records:
        if r["lam"] == 0.0:  # θ(0) is A
            assert r["toy_cosine_to_a"] == pytest.approx(1.0, abs=1e-12)
    mid = [r for r in result.records if r["lam"] == 0.5]
    assert all(0.0 < r["toy_cosine_to_a"] < 1.0 for r in mid)

    # layers.csv: its columns, its values
    write_results(result, tmp_path, {"settings": {}}, figures=False)
    with open(tmp_path / "layers.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(keys)
    assert [float(r["toy_cosine_to_a"]) for r in rows] == [
        r["toy_cosine_to_a"] for r in result.records
    ]

    # the table lmc analyze prints: the column and its legend entry
    table = compact_table(result.records)
    header = table.splitlines()[0].split()
    assert header[-2:] == ["toy", "cos"] and "rows" in header
    legend = " ".join(line.strip() for line in table.splitlines())
    assert "toy cos = toy_cosine_to_a (a test's metric)" in legend
    assert "rows = toy_rows" in legend

    # cosines.png: a line labelled as the column says
    fig = cosines_figure(result.records)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "toy cosine to A" in labels
    assert ("toy_cosine_to_a", "toy") in table_columns()
    assert report_panels()[-1].key == "toy_cosine_to_a"


def test_without_it_nothing_changes(toy):
    del LAYER_METRICS[TOY.name], LAYER_METRICS[TOY_ROWS.name]
    try:
        assert record_keys() == RECORD_KEYS
        assert "toy_cosine_to_a" not in dict(figure_lines())
    finally:
        register_layer_metric(TOY)
        register_layer_metric(TOY_ROWS)


def test_a_column_is_one_metrics_only(toy):
    clash = LayerMetric("other", (Column("lewc_cosine", "again"),), lambda site: None)
    with pytest.raises(LmcError, match="'lewc_cosine' is already a column"):
        register_layer_metric(clash)
    with pytest.raises(LmcError, match="already registered"):
        register_layer_metric(LayerMetric("toy", (), lambda site: None))


def test_the_built_in_records_give_the_tables_that_were_kept_by_hand():
    """The lists each output kept before the records existed, copied from that code."""
    assert compact_columns() == (
        ("layer", "name"),
        ("lam", "lam"),
        ("LEWC cos", "lewc_cosine"),
        ("LEWC err", "lewc_relative_error"),
        ("LLFC cos", "llfc_cosine"),
        ("A-B cos", "endpoint_cosine"),
        ("weak-add", "weak_additivity_cosine"),
        ("signs", "sign_agreement"),
        ("recip", "reciprocal_ratio"),
        ("comm", "commutativity_relative"),
    )
    assert table_columns() == (
        ("name", "layer"),
        ("layer", "l"),
        ("lam", "lam"),
        ("lewc_cosine", "lewc"),
        ("lewc_relative_error", "lewc_err"),
        ("lewc_coef_a", "a"),
        ("lewc_expected_a", "(1-lam)^l"),
        ("lewc_coef_b", "b"),
        ("lewc_expected_b", "lam^l"),
        ("llfc_cosine", "llfc"),
        ("llfc_scale", "c"),
        ("endpoint_cosine", "endpoint"),
        ("weak_additivity_cosine", "weak_add"),
        ("sign_agreement", "signs"),
        ("reciprocal_ratio", "recip"),
        ("reciprocal_ratio_ba", "recip_ba"),
        ("reciprocal_cosine", "recip_cos"),
        ("commutativity_relative", "comm_rel"),
        ("near_zero_fraction_a", "near0_a"),
        ("large_unit_overlap", "overlap"),
        ("effective_rank_a", "erank_a"),
        ("effective_rank_b", "erank_b"),
    )
    assert figure_lines() == (
        ("lewc_cosine", "LEWC"),
        ("llfc_cosine", "LLFC"),
        ("endpoint_cosine", "endpoints A vs B"),
        ("weak_additivity_cosine", "weak additivity"),
        ("reciprocal_cosine", "reciprocal cos(W_A z_C, W_A z_A)"),
    )
    panels = report_panels()
    assert [p.key for p in panels] == [
        "lewc_cosine",
        "weak_additivity_cosine",
        "reciprocal_cosine",
        "reciprocal_ratio",
    ]
    assert [p.floor for p in panels] == [None, None, None, 0.0]
    assert [p.reference is not None for p in panels] == [False, True, False, False]
    assert not math.isnan(panels[1].reference)
