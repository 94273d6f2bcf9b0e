"""Study variants: one TOML file, several studies that differ in a few settings.

A width study answers "what changes with width?"; some questions need a second axis (depth,
the activation function). A study file may list ``[[variants]]``, each a ``name`` and the
settings it changes, as tables over the study's own (``model``, ``train``, ``sweep``, ``merge``,
``analysis``, ``data``)::

    name = "question-depth"
    [model]
    name = "mlp"
    [sweep]
    widths = [1024]

    [[variants]]
    name = "depth1"
    model = { depth = 1 }

    [[variants]]
    name = "depth2"
    model = { depth = 2 }

Each variant is the base study with its tables updated key by key (a key it gives replaces the
base's; the others stay), named ``<study>-<variant>``, and resolved and validated like any
study before anything runs. ``lmc sweep`` runs each into ``OUT/<variant>/`` (an ordinary
results folder with its own report) and writes ``OUT/variants.json`` (the variants and the
settings each changes) and ``OUT/variants.csv`` (every variant's ``table1.csv`` rows, or
another kind's first table, e.g. merge-many's ``models.csv``, with the variant's name and
changed settings as leading columns), the file to plot across variants.
Runs with the same settings are shared between variants through the run store.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from lmc.config import LmcError

#: The tables a variant of a width study may change (the width kind's
#: :attr:`lmc.experiments.kinds.ExperimentKind.variants`).
TABLES = ("data", "model", "sweep", "train", "merge", "analysis", "stitch")

_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


def split_variants(
    raw: dict[str, Any], source: str | None = None, tables: tuple[str, ...] = TABLES
) -> list[tuple[str, dict, dict]]:
    """The variants of the raw study ``raw`` (a parsed TOML file), as ``(variant name, raw
    study, changed settings)`` triples; ``[]`` when it has none. A variant may change the
    ``tables`` (its kind's, :attr:`lmc.experiments.kinds.ExperimentKind.variants`; default:
    the width study's :data:`TABLES`). The changed settings are flattened as
    ``{"model.depth": 2, ...}``. Bad variants are an ``LmcError`` naming them."""
    entries = raw.get("variants")
    if entries is None:
        return []
    where = f" in {source}" if source else ""
    if not isinstance(entries, list) or not entries:
        raise LmcError(f"variants must be a non-empty list of [[variants]] tables{where}")
    base = {k: v for k, v in raw.items() if k != "variants"}
    out: list[tuple[str, dict, dict]] = []
    for i, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            raise LmcError(f"variant {i} must be a table{where}, got {entry!r}")
        name = entry.get("name")
        if not isinstance(name, str) or not _PLAIN.match(name):
            raise LmcError(
                f"variant {i} needs a plain name (letters, digits, '.', '_', '-'; at most 40 "
                f"characters){where}, got {name!r}"
            )
        if name in (n for n, _, _ in out):
            raise LmcError(f"two variants are named {name!r}{where}")
        unknown = sorted(set(entry) - {"name", *tables})
        if unknown:
            raise LmcError(
                f"variant {name!r} sets {unknown[0]!r}{where}; a variant changes only these "
                f"tables: {', '.join(tables)}"
            )
        study = copy.deepcopy(base)
        changed: dict[str, Any] = {}
        for table in tables:
            if table not in entry:
                continue
            if not isinstance(entry[table], dict):
                raise LmcError(f"variant {name!r}: {table} must be a table{where}")
            study.setdefault(table, {})
            if not isinstance(study[table], dict):
                raise LmcError(f"[{table}] must be a table{where}")
            for key, value in entry[table].items():
                study[table][key] = copy.deepcopy(value)
                changed[f"{table}.{key}"] = value
        if not changed:
            raise LmcError(f"variant {name!r} changes nothing{where}")
        study["name"] = f"{base.get('name', 'study')}-{name}"
        out.append((name, study, changed))
    return out


def variant_rows(variants: list[dict[str, Any]], tables: list[list[dict]]) -> list[dict]:
    """``variants.csv``'s rows: each variant's table rows after its name and changed
    settings (``variants``: ``{"name", "changed"}`` records, one per table in ``tables``)."""
    keys = sorted({k for v in variants for k in v["changed"]})
    rows = []
    for variant, table in zip(variants, tables):
        lead = {"variant": variant["name"], **{k: variant["changed"].get(k, "") for k in keys}}
        rows.extend({**lead, **row} for row in table)
    return rows
