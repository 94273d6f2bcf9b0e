"""docs/studies.md against the code: every key a study accepts is documented under its
table's heading, every documented key is accepted, and the documented defaults, choices and
identities (what a key's value is part of) are those of the code.

The accepted keys are read from ``lmc.experiments.study`` (``SCHEMA``, ``SECTIONS``,
``_TRAIN_KEYS``), the model registry and the synthetic dataset's ``DEFAULTS``, so a key added
there and not to the page fails here. Identities are observed, not assumed: each key is
changed in a tiny study and the ids of the expanded train and merge jobs are compared.
"""

from __future__ import annotations

import copy
import re
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

from lmc.config import LmcError
from lmc.data import ALL_DATASETS, load
from lmc.data.dataset import SPLITS
from lmc.data.synthetic import DEFAULTS as SYNTHETIC_DEFAULTS
from lmc.experiments import study as study_module
from lmc.experiments.jobs import CONTROLS, expand
from lmc.experiments.study import (
    BN_MODES,
    METHODS,
    SCHEMA,
    SECTIONS,
    WEIGHT_INITS,
    WEIGHT_SOLVERS,
    resolve,
)
from lmc.metrics import CALIBRATIONS
from lmc.models import MODELS
from lmc.models.layers import ACTIVATIONS, NORMS
from lmc.models.vit import POOLS
from lmc.perm.methods import method_names, study_keys
from lmc.train import TrainSettings
from lmc.train.settings import OPTIMIZERS, PRECISIONS, SCHEDULES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DOC = Path(__file__).resolve().parents[2] / "docs" / "studies.md"
REQUIRED = ...  # the schema's marker of a required key
METHOD_MERGES = tuple(f"{m} merges" for m in method_names())
IDENTITIES = ("run", "merge", *METHOD_MERGES, "grid", "none")

# The choices of each string key, from the code; the doc's "allowed values" cell must name
# exactly these (in backticks).
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("data", "dataset"): tuple(ALL_DATASETS),
    ("data", "split"): tuple(SPLITS),
    ("model", "name"): tuple(MODELS),
    ("merge", "methods"): (*METHODS, *CONTROLS),
    ("merge", "bn"): tuple(BN_MODES),
    ("merge", "calibration"): tuple(CALIBRATIONS),
    ("merge", "weight_init"): tuple(WEIGHT_INITS),
    ("merge", "weight_solver"): tuple(WEIGHT_SOLVERS),
    **{("merge", key): s.choices for key, (_, s) in study_keys().items() if s.choices},
    ("train", "optimizer"): tuple(OPTIMIZERS),
    ("train", "schedule"): tuple(SCHEDULES),
    ("train", "precision"): tuple(PRECISIONS),
}
OPTION_CHOICES: dict[str, tuple[str, ...]] = {
    "norm": tuple(NORMS),
    "activation": tuple(ACTIVATIONS),
    "pool": tuple(POOLS),
}

# --------------------------------------------------------------------------- the page


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tables(lines: list[str]) -> list[tuple[list[str], list[list[str]]]]:
    """The markdown tables of ``lines``: (header cells, body rows)."""
    tables, i = [], 0
    while i < len(lines):
        if (
            lines[i].startswith("|")
            and i + 1 < len(lines)
            and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip())
        ):
            header, rows, i = _cells(lines[i]), [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            tables.append((header, rows))
        else:
            i += 1
    return tables


def _section_of(title: str) -> str | None:
    """``""`` for the top-level keys, ``x`` for a heading naming ``[x]``, else ``None``."""
    if title.lower().startswith("top-level keys"):
        return ""
    match = re.fullmatch(r"`\[([A-Za-z0-9_]+)\]`", title.strip())
    return match.group(1) if match else None


def parse_doc(text: str) -> dict[str, Any]:
    """The documented keys: ``{"keys": {section: {key: row}}, "options": {section: {name:
    {option: row}}}, "sections": [...], "example": toml text or None}``; a row maps each
    column header to its cell. Key tables have a first column ``key``; option tables a first
    column ``option`` and sit under a ``###`` heading naming (in backticks) whose options they
    are (models, or the dataset ``synthetic``)."""
    out: dict[str, Any] = {"keys": {}, "options": {}, "sections": [], "example": None}
    chunks = re.split(r"^## (.+)$", text, flags=re.M)
    for title, body in zip(chunks[1::2], chunks[2::2]):
        if title.strip().lower() == "example":
            blocks = re.findall(r"```toml\n(.*?)```", body, flags=re.S)
            out["example"] = blocks[0] if blocks else None
            continue
        section = _section_of(title)
        if section is None:
            continue
        out["sections"].append(section)
        keys = out["keys"].setdefault(section, {})
        options = out["options"].setdefault(section, {})
        parts = re.split(r"^### (.+)$", body, flags=re.M)
        subsections = [("", parts[0])] + list(zip(parts[1::2], parts[2::2]))
        for heading, sub in subsections:
            names = re.findall(r"`([^`]+)`", heading)
            for header, rows in _tables(sub.splitlines()):
                kind = header[0].lower()
                if kind not in ("key", "option"):
                    continue
                for row in rows:
                    match = re.fullmatch(r"`([^`]+)`", row[0])
                    name = match.group(1) if match else row[0]
                    record = dict(zip([h.lower() for h in header], row))
                    if kind == "key":
                        if name in keys:
                            record["duplicate"] = True
                        keys[name] = record
                    else:
                        for owner in names or ["?"]:
                            options.setdefault(owner, {})[name] = record
    return out


def doc_value(cell: str) -> Any:
    """A default cell: ``required``, ``unset...`` (None) or one backticked TOML value."""
    cell = cell.strip()
    if cell == "required":
        return REQUIRED
    if cell.startswith("unset"):
        return None
    match = re.fullmatch(r"`([^`]*)`", cell)
    if match is None:
        raise ValueError(f"default {cell!r} is not `TOML value`, 'required' or 'unset: ...'")
    return tomllib.loads(f"v = {match.group(1)}")["v"]


def _same(doc: Any, code: Any) -> bool:
    if isinstance(code, tuple):
        code = list(code)
    return doc == code and type(doc) is type(code)


# --------------------------------------------------------------------------- the code


def code_keys(section: str) -> dict[str, Any]:
    """Every key study.py accepts in ``section`` (``""``: top level) with its default."""
    if section == "model":
        return {"name": REQUIRED}  # the rest are the model's options (code_options)
    if section == "train":
        defaults = {
            f.name: (f.default if f.default is not MISSING else REQUIRED)
            for f in fields(TrainSettings)
        }
        return {k: defaults[k] for k in sorted(study_module._TRAIN_KEYS)}
    if section in SCHEMA:
        return {key: default for key, (_, default) in SCHEMA[section].items()}
    raise AssertionError(
        f"study.py accepts a table [{section}] that this test cannot read the keys of: "
        "teach code_keys() where they live"
    )


def code_options(section: str) -> dict[str, dict[str, Any]]:
    """The options (with defaults) of the things a table names: models, synthetic data."""
    if section == "model":
        return {name: dict(entry.options) for name, entry in MODELS.items()}
    if section == "data":
        return {"synthetic": dict(SYNTHETIC_DEFAULTS)}
    return {}


def doc_problems(text: str) -> list[str]:
    """Every way the page and the code disagree (empty when they agree)."""
    doc = parse_doc(text)
    problems: list[str] = []
    expected_sections = ["", *SECTIONS]
    for section in expected_sections:
        if section not in doc["sections"]:
            problems.append(f"no heading for table [{section}]" if section else "no top-level keys")
    for section in doc["sections"]:
        if section not in expected_sections:
            problems.append(f"documented table [{section}] is not accepted by study.py")
    for section in expected_sections:
        documented = doc["keys"].get(section, {})
        where = f"{section}." if section else ""
        accepted = code_keys(section)
        for key in accepted:
            if key not in documented:
                problems.append(f"key {where}{key} is accepted but not documented")
        for key, row in documented.items():
            if key not in accepted:
                problems.append(f"documented key {where}{key} is not accepted by study.py")
                continue
            problems += _row_problems(
                f"{where}{key}", row, accepted[key], CHOICES.get((section, key))
            )
        documented_options = doc["options"].get(section, {})
        for owner, options in code_options(section).items():
            got = documented_options.get(owner)
            if got is None:
                problems.append(f"options of {owner} are not documented under [{section}]")
                continue
            for option in options:
                if option not in got:
                    problems.append(f"option {owner}.{option} is accepted but not documented")
            for option, row in got.items():
                if option not in options:
                    problems.append(f"documented option {owner}.{option} is not accepted")
                    continue
                problems += _row_problems(
                    f"{owner}.{option}", row, options[option], OPTION_CHOICES.get(option)
                )
        for owner in documented_options:
            if owner not in code_options(section):
                problems.append(f"documented options of {owner!r} under [{section}] are unknown")
    return problems


def _row_problems(name: str, row: dict[str, str], default: Any, choices) -> list[str]:
    problems = []
    if row.get("duplicate"):
        problems.append(f"{name} is documented twice")
    try:
        value = doc_value(row.get("default", ""))
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        return [*problems, f"{name}: {exc}"]
    if value is REQUIRED or default is REQUIRED or value is None or default is None:
        if value is not default:
            problems.append(f"{name}: documented default {row.get('default')!r}, code {default!r}")
    elif not _same(value, default):
        problems.append(f"{name}: documented default {value!r}, code {default!r}")
    if choices is not None and "allowed values" in row:
        named = set(re.findall(r"`([^`]+)`", row["allowed values"]))
        if named != set(choices):
            problems.append(f"{name}: documented choices {sorted(named)}, code {sorted(choices)}")
    if "identity" in row and row["identity"] not in IDENTITIES:
        problems.append(f"{name}: identity {row['identity']!r} is not one of {IDENTITIES}")
    return problems


# --------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def text() -> str:
    return DOC.read_text(encoding="utf-8")


def test_page_and_code_agree(text):
    assert doc_problems(text) == []


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda t: re.sub(r"^\| `ste_steps` .*\n", "", t, flags=re.M), "merge.ste_steps is"),
        (
            lambda t: t.replace(
                "| `pairs` | integer | `2` |",
                "| `bogus` | integer | `1` | | grid | x |\n| `pairs` | integer | `2` |",
            ),
            "sweep.bogus is not accepted",
        ),
        (
            lambda t: t.replace(
                "| `lambdas` | integer or list of numbers | `11` |",
                "| `lambdas` | integer or list of numbers | `12` |",
            ),
            "merge.lambdas",
        ),
        (
            lambda t: t.replace("| `epochs` | integer | `10` |", "| `epochs` | number | `10.0` |"),
            "train.epochs",
        ),
        (
            lambda t: t.replace(
                "`cosine`, `onecycle`, `constant` | run", "`cosine`, `constant` | run"
            ),
            "train.schedule: documented choices",
        ),
        (
            lambda t: t.replace("| `depth` | integer | `4` |", "| `depth` | integer | `3` |"),
            "vit.depth",
        ),
        (
            lambda t: re.sub(r"^\| `clusters_per_class` .*\n", "", t, flags=re.M),
            "synthetic.clusters_per_class",
        ),
        (lambda t: t.replace("## `[analysis]`", "## Analysis"), "no heading for table [analysis]"),
        (
            lambda t: t.replace(
                '| `split` | string | `"test"` | `test`, `train` | merge',
                '| `split` | string | `"test"` | `test`, `train` | maybe',
            ),
            "identity 'maybe'",
        ),
    ],
)
def test_a_drifted_page_is_caught(text, edit, expected):
    """The checker itself can fail: each edit of the real page is reported."""
    edited = edit(text)
    assert edited != text, "the edit did not apply: update the test's anchor text"
    problems = doc_problems(edited)
    assert any(expected in p for p in problems), problems


def _base() -> dict[str, Any]:
    return {
        "data": {
            "dataset": "synthetic",
            "options": {"input_shape": [1, 8, 8], "train_size": 64, "test_size": 32},
        },
        "model": {"name": "mlp"},
        "sweep": {"widths": [8], "pairs": 1},
        "train": {"epochs": 2},
    }


def _with(raw: dict[str, Any], section: str, key: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    if section:
        raw.setdefault(section, {})[key] = value
    else:
        raw[key] = value
    return raw


def test_every_documented_key_is_accepted_at_its_documented_default(text):
    doc = parse_doc(text)
    for section, keys in doc["keys"].items():
        for key, row in keys.items():
            value = doc_value(row["default"])
            if value is REQUIRED:
                continue  # the base study gives it
            if value is None:  # unset: any valid value (TOML has no null)
                value = ALTERNATIVES.get((section, key), lambda v: True)(None)
            resolved = resolve(_with(_base(), section, key, value))
            assert key in (resolved[section] if section else resolved)
    for name, options in doc["options"]["model"].items():
        for option, row in options.items():
            raw = _with(_base(), "model", "name", name)
            resolved = resolve(_with(raw, "model", option, doc_value(row["default"])))
            assert resolved["model"][option] == MODELS[name].options[option]


@pytest.mark.parametrize("section", ["", *SECTIONS])
def test_an_undocumented_key_is_refused(section):
    with pytest.raises(LmcError, match="not_a_key"):
        resolve(_with(_base(), section, "not_a_key", 1))


# ---- identities: change one key, compare the ids of the expanded jobs

ALTERNATIVES = {
    ("sweep", "widths"): lambda v: [*v, 2 * max(v)],
    ("sweep", "weight_decays"): lambda v: [*v, 1e-4],
    ("sweep", "seed"): lambda v: v + 10,  # + 1 would give pair 0's A the old B's seeds
    ("merge", "methods"): lambda v: [*v, "random"],
    ("merge", "paths"): lambda v: [*v, "bezier"],
    ("train", "precision"): lambda v: "bf16" if v != "bf16" else "fp32",
    ("merge", "activation_max_examples"): lambda v: 16,
    ("merge", "orthogonal_activation_max_examples"): lambda v: 16,
    ("merge", "ste_holdout"): lambda v: 8,
    ("merge", "learned_holdout"): lambda v: 8,
    ("merge", "lambdas"): lambda v: v + 1 if isinstance(v, int) else [0.25],
    ("analysis", "lambdas"): lambda v: [0.25],
    ("data", "options"): lambda v: {**v, "seed": 1},
    ("model", "name"): lambda v: "vgg11" if v != "vgg11" else "mlp",  # gpt cannot expand
    ("model", "patch"): lambda v: 4,  # not 2: "auto" is 2 on the tiny 8x8 images
    ("model", "heads"): lambda v: 2,
}


def alternative(section: str, key: str, current: Any) -> Any:
    """A valid value of ``section.key`` other than ``current``."""
    if (section, key) in ALTERNATIVES:
        return ALTERNATIVES[(section, key)](current)
    choices = CHOICES.get((section, key)) or (
        OPTION_CHOICES.get(key) if section == "model" else None
    )
    if choices:
        return next(c for c in choices if c != current)
    if isinstance(current, bool):
        return not current
    if current is None:
        return True
    if isinstance(current, int):
        return current + 1
    if isinstance(current, float):
        return current + 0.05
    if isinstance(current, str):
        return current + "-x"
    raise AssertionError(f"give {section}.{key} an alternative value in ALTERNATIVES")


def _current(resolved: dict[str, Any], section: str, key: str) -> Any:
    if not section:
        return resolved[key]
    if section == "train":
        return resolved["train"].get(key, code_keys("train")[key])
    return resolved[section][key]


@pytest.fixture(scope="module")
def tiny_data():
    return load("synthetic", **_base()["data"]["options"])


def _ids(raw: dict[str, Any], data) -> tuple[set[str], set[str]]:
    train_jobs, merge_jobs = expand(resolve(raw), data)
    return {j["id"] for j in train_jobs}, {j["id"] for j in merge_jobs}


def _method_merge_ids(raw: dict[str, Any], data, method: str) -> set[str]:
    return {j["id"] for j in expand(resolve(raw), data)[1] if j["method"] == method}


def observed_identity(raw: dict[str, Any], section: str, key: str, data) -> str:
    t0, m0 = _ids(raw, data)
    value = alternative(section, key, _current(resolve(raw), section, key))
    t1, m1 = _ids(_with(raw, section, key, value), data)
    if (t0, m0) == (t1, m1):
        return "none"
    if t0 <= t1 and m0 <= m1:
        return "grid"
    if t0 == t1 and not m0 & m1:
        return "merge"
    for method in method_names():
        own = _method_merge_ids(raw, data, method)
        if t0 == t1 and own and m0 - m1 == own and len(m1) == len(m0):
            return f"{method} merges"  # only that method's merges changed
    if not t0 & t1 and not m0 & m1:
        return "run"
    return f"mixed (runs kept {len(t0 & t1)}/{len(t0)}, merges kept {len(m0 & m1)}/{len(m0)})"


def test_documented_identities_are_observed(text, tiny_data):
    doc = parse_doc(text)
    wrong = []
    for section, keys in doc["keys"].items():
        for key, row in keys.items():
            if (section, key) == ("", "experiment"):
                continue  # another kind is another experiment, not a width study's variant
            if (section, key) == ("sweep", "width_ratio"):
                continue  # gpt studies only (this base is an MLP): test_text_study.py checks it
            base = _base()
            if section == "merge" and key in study_keys():  # its method among the merges
                owner = study_keys()[key][0].name
                base["merge"] = {"methods": sorted({"none", "weight", owner})}
            seen = observed_identity(base, section, key, tiny_data)
            if seen != row["identity"]:
                wrong.append(f"{section}.{key}: documented {row['identity']}, observed {seen}")
    for name, options in doc["options"]["model"].items():
        base = _with(_base(), "model", "name", name)
        for option, row in options.items():
            if "identity" not in row:
                continue
            seen = observed_identity(base, "model", option, tiny_data)
            if seen != row["identity"]:
                wrong.append(f"{name}.{option}: documented {row['identity']}, observed {seen}")
    assert wrong == []


def test_models_without_identity_column_cannot_be_expanded(text, tiny_data):
    """A model documented without identities (gpt) is read but fails when expanded."""
    doc = parse_doc(text)
    for name, options in doc["options"]["model"].items():
        if any("identity" in row for row in options.values()):
            continue
        raw = _with(_base(), "model", "name", name)
        resolve(raw)
        with pytest.raises(LmcError):
            expand(resolve(raw), tiny_data)


def test_example_resolves_and_its_counts_are_right(text, digits):
    example = parse_doc(text)["example"]
    assert example is not None, "no ```toml block under '## Example'"
    study = resolve(tomllib.loads(example), source="docs/studies.md")
    assert set(tomllib.loads(example)) >= set(SECTIONS), "the example leaves out a table"
    train_jobs, merge_jobs = expand(study, digits)
    sweep = study["sweep"]
    grid = len(sweep["widths"]) * len(sweep["weight_decays"]) * sweep["pairs"]
    assert len(train_jobs) == 2 * grid
    assert len(merge_jobs) == grid * len(study["merge"]["methods"])
    assert re.search(rf"=\s+{len(train_jobs)}\s+MLPs", text)
    assert re.search(rf"=\s+{len(merge_jobs)}\s+merges", text)
