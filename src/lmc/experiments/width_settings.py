"""The width study's settings (``experiment = "width"``, the default kind): a TOML file
describing a width x weight-decay x pairs x methods grid.

Every key is checked: an unknown key or a wrong type is an ``LmcError`` naming it. The
resolved study (defaults filled in) is what gets recorded beside the results.

    name = "lewc-digits-mlp"
    description = "..."

    [data]
    dataset = "digits"        # any lmc.data name
    options = {}              # dataset options (synthetic sizes, ...)
    split = "test"            # the split merges are evaluated and analysed on

    [model]
    name = "mlp"              # mlp, vgg11, vgg16, resnet20
    depth = 3                 # any other model option except width/input size/classes
    norm = "none"

    [sweep]
    widths = [16, 64, 256, 1024]     # MLP hidden units or CNN channel multipliers
    weight_decays = [3e-3, 1e-4]
    pairs = 2                        # independent pairs (A, B) per width and weight decay
    spawn_epoch = 0                  # 0: independent training; K > 0: spawn A and B from one
                                     # run after K epochs (Frankle et al.)
    seed = 0                         # pair p trains A with seed + 2p, B with seed + 2p + 1
    width_ratio = 1                  # B's width over A's: above 1, a narrow model merged into
                                     # a wide one (zoo gpt; lmc.perm.widen; A's width is the
                                     # table's "width", B's is "width_b")

    [train]                          # lmc.train.TrainSettings except seeds and weight decay
    epochs = 30

    [merge]
    methods = ["none", "weight"]     # none, weight, activation, ste, random, onepass, ...,
                                     # or the control random-direction
    lambdas = 11                     # number of grid points, or a list
    calibrate = true
    calibration = "auto"             # split: beta on a random 20%, scored on the other 80%;
                                     # crossfit: K folds, beta on K - 1, every example scored
                                     # once; auto: crossfit below 1000 calibration examples
    calibration_folds = 5            # K of crossfit (>= 2)
    calibration_seed = 0
    bn = "auto"                      # auto, reset, repair, none
    align_seed = 0
    align_examples = 2000            # training examples used by activation matching / STE
    weight_init = "onepass"          # every setting of every alignment method is a key
    weight_solver = "auto"           # <method>_<setting> (docs/studies.md lists them):
    ste_steps = 200                  # weight_max_iter, weight_restarts, activation_statistic,
                                     # ste_lr, ... (lmc.perm.methods)
    paths = ["line"]                 # also "bezier", "chain": curves fitted and evaluated
                                     # beside the line (curve_epochs, curve_lr,
                                     # curve_batch_size, curve_seed, curve_plane)

    [analysis]
    enabled = true
    lambdas = [0.5]
    max_examples = 2000

    [stitch]                         # LLFC App. B.4: A's first l layers, then aligned B's
    enabled = false                  # stitch.csv: the error per l = 0..L of every merge job
"""

from __future__ import annotations

import copy
from typing import Any

from lmc.config import LmcError, check_int, check_number
from lmc.merge import BN_MODES
from lmc.metrics import CALIBRATE_DEFAULTS, CALIBRATIONS
from lmc.models import get_model
from lmc.pair.settings import ALIGN_METHODS
from lmc.perm.methods import get_method
from lmc.perm.solvers.assignment import resolve_solver
from lmc.train import TrainSettings

from .jobs import CURVE_KEYS, curve_settings, pair_settings
from .kind_settings import (
    DATA_SCHEMA,
    MAX_TRAINING_RUNS,
    check_data,
    check_name,
    data_given,
    resolve_model,
    resolve_train,
)

KIND = "width"
METHODS = ALIGN_METHODS
WEIGHT_INITS = get_method("weight").setting("init").choices
WEIGHT_SOLVERS = get_method("weight").setting("solver").choices

# section -> key -> (allowed types, default). A default of ... means required.
SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], Any]]] = {
    "": {
        "name": ((str,), "study"),
        "description": ((str,), ""),
        "experiment": ((str,), KIND),
    },
    "data": DATA_SCHEMA,
    "sweep": {
        "widths": ((list,), ...),
        "weight_decays": ((list,), [3e-3]),
        "pairs": ((int,), 2),
        "spawn_epoch": ((int,), 0),
        "seed": ((int,), 0),
        "width_ratio": ((int, float), 1),
    },
    "merge": {
        "methods": ((list,), ["none", "weight"]),
        "lambdas": ((int, list), 11),
        "calibrate": ((bool,), CALIBRATE_DEFAULTS["width"]),
        "calibration": ((str,), "auto"),
        "calibration_folds": ((int,), 5),
        "calibration_seed": ((int,), 0),
        "bn": ((str,), "auto"),
        "align_seed": ((int,), 0),
        "align_examples": ((int,), 2000),
        # curves beside the line (issue 44): each left out of merge ids at its default
        "paths": ((list,), list(CURVE_KEYS["paths"])),
        "curve_epochs": ((int,), CURVE_KEYS["curve_epochs"]),
        "curve_lr": ((float,), CURVE_KEYS["curve_lr"]),
        "curve_batch_size": ((int,), CURVE_KEYS["curve_batch_size"]),
        "curve_seed": ((int,), CURVE_KEYS["curve_seed"]),
        "curve_plane": ((int,), CURVE_KEYS["curve_plane"]),
        # then one key per alignment-method setting (merge_schema)
    },
    "analysis": {
        "enabled": ((bool,), True),
        "lambdas": ((list, float, int), [0.5]),
        "max_examples": ((int,), 2000),
    },
    "stitch": {"enabled": ((bool,), False)},
}
SECTIONS = ("data", "model", "sweep", "train", "merge", "analysis", "stitch")
_MERGE_BASE = dict(SCHEMA["merge"])
_PY_TYPES = {int: (int,), float: (float, int), str: (str,), bool: (bool,)}


def merge_schema() -> dict[str, tuple[tuple[type, ...], Any]]:
    """``[merge]``'s keys: the study's own, then ``<method>_<setting>`` for every setting of
    every registered alignment method (:mod:`lmc.perm.methods`), with its default."""
    from lmc.perm.methods import study_keys

    schema = dict(_MERGE_BASE)
    for key, (_, setting) in study_keys().items():
        types = _PY_TYPES[setting.type] + ((type(None),) if setting.optional else ())
        schema[key] = (types, setting.default)
    return schema


SCHEMA["merge"] = merge_schema()  # the built-in methods' keys (resolve reads the registry anew)


def _where(source: str | None) -> str:
    return f" in {source}" if source else ""


def _check_type(key: str, value: Any, types: tuple[type, ...], source: str | None) -> None:
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if float in types and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        names = " or ".join(t.__name__ for t in types)
        raise LmcError(f"key {key!r}{_where(source)} must be {names}, got {value!r}")


def resolve_width(raw: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Check a parsed width study against the schema and fill in defaults; return the
    resolved study (``source`` names the file in errors)."""
    raw = copy.deepcopy(raw)
    study: dict[str, Any] = {}
    for key in raw:
        if key not in SECTIONS and key not in SCHEMA[""]:
            known = ", ".join([*SCHEMA[""], *SECTIONS])
            raise LmcError(f"unknown key {key!r}{_where(source)}; top-level keys are {known}")
    for key, (types, default) in SCHEMA[""].items():
        study[key] = raw.get(key, default)
        _check_type(key, study[key], types, source)
    check_name(study["name"], source)
    for section in SECTIONS:
        given = raw.get(section, {})
        if not isinstance(given, dict):
            raise LmcError(f"{section!r}{_where(source)} must be a table ([{section}])")
        if section == "model":
            study["model"] = resolve_model(given, study.get("data"), "[sweep]", source, "widths")
            continue
        if section == "train":
            study["train"] = resolve_train(given, "[sweep]", source)
            continue
        resolved = {}
        schema = merge_schema() if section == "merge" else SCHEMA[section]
        for key in given:
            if key not in schema:
                raise LmcError(
                    f"unknown key '{section}.{key}'{_where(source)}; known: {', '.join(schema)}"
                )
        for key, (types, default) in schema.items():
            if key not in given and default is ...:
                raise LmcError(f"missing key '{section}.{key}'{_where(source)}")
            value = given.get(key, copy.deepcopy(default))
            _check_type(f"{section}.{key}", value, types, source)
            resolved[key] = value
        study[section] = resolved
    _check_values(study, source)
    return study


def _check_values(study: dict[str, Any], source: str | None) -> None:
    where = _where(source)
    check_data(study["data"], source)
    sweep = study["sweep"]
    if not sweep["widths"] or not all(
        isinstance(w, (int, float)) and w > 0 for w in sweep["widths"]
    ):
        raise LmcError(f"'sweep.widths'{where} must be a non-empty list of positive numbers")
    entry = get_model(study["model"]["name"])
    for width in sweep["widths"]:
        try:
            entry.width_value(width)
        except LmcError as exc:
            raise LmcError(f"'sweep.widths'{where}: {exc}") from None
    if not sweep["weight_decays"]:
        raise LmcError(f"'sweep.weight_decays'{where} must be a non-empty list of numbers >= 0")
    for value in sweep["weight_decays"]:
        check_number(f"each of 'sweep.weight_decays'{where}", value, minimum=0.0)
    _at("sweep", where, check_int, "pairs", sweep["pairs"], minimum=1)
    for key in ("spawn_epoch", "seed"):
        _at("sweep", where, check_int, key, sweep[key], minimum=0)
    runs = 2 * sweep["pairs"] * len(sweep["widths"]) * len(sweep["weight_decays"])
    if runs > MAX_TRAINING_RUNS:
        raise LmcError(
            f"'sweep'{where} asks for {runs:,} training runs ({sweep['pairs']:,} pairs x "
            f"{len(sweep['widths'])} widths x {len(sweep['weight_decays'])} weight decays x 2); "
            f"the limit is {MAX_TRAINING_RUNS:,}: split the study into smaller ones"
        )
    _check_width_ratio(study, where)
    epochs = study["train"].get("epochs", TrainSettings().epochs)
    if sweep["spawn_epoch"] > epochs:
        raise LmcError(f"'sweep.spawn_epoch'{where} exceeds the {epochs} training epochs")
    from lmc.perm.methods import method_names, study_keys

    from .jobs import CONTROLS

    merge = study["merge"]
    for method in merge["methods"]:
        if method not in method_names() and method not in CONTROLS:
            raise LmcError(
                f"unknown merge method {method!r} in 'merge.methods'{where}: "
                f"choose from {', '.join((*method_names(), *CONTROLS))}"
            )
    if not merge["methods"]:
        raise LmcError(f"'merge.methods'{where} is empty")
    if merge["bn"] not in BN_MODES:
        raise LmcError(f"'merge.bn'{where} must be one of {', '.join(BN_MODES)}")
    if merge["calibration"] not in CALIBRATIONS:
        raise LmcError(
            f"'merge.calibration'{where} must be one of {', '.join(CALIBRATIONS)}, "
            f"got {merge['calibration']!r}"
        )
    if merge["calibration_folds"] < 2:
        raise LmcError(
            f"'merge.calibration_folds'{where} must be at least 2, got {merge['calibration_folds']}"
        )
    if isinstance(merge["lambdas"], int) and merge["lambdas"] < 2:
        raise LmcError(f"'merge.lambdas'{where} must be at least 2 points or a list")
    for key in ("calibration_seed", "align_seed"):
        _at("merge", where, check_int, key, merge[key], minimum=0)
    _check_paths(merge, where)
    _at("merge", where, check_int, "align_examples", merge["align_examples"], minimum=1)
    for key, (_, setting) in study_keys().items():
        merge[key] = setting.check(merge[key], f"'merge.{key}'{where}")
    if "weight" in merge["methods"]:
        try:
            resolve_solver(merge["weight_solver"])  # lapx asked for where it cannot run
        except LmcError as exc:
            raise LmcError(f"'merge.weight_solver'{where}: {exc}") from None
    _at("analysis", where, check_int, "max_examples", study["analysis"]["max_examples"])
    lams = study["analysis"]["lambdas"]
    lams = lams if isinstance(lams, list) else [lams]
    if not lams or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in lams):
        raise LmcError(f"'analysis.lambdas'{where} must be a non-empty list of numbers in [0, 1]")
    study["analysis"]["lambdas"] = [float(v) for v in lams]
    if not all(0.0 <= v <= 1.0 for v in study["analysis"]["lambdas"]):
        raise LmcError(f"'analysis.lambdas'{where} must lie in [0, 1]")
    if study["stitch"]["enabled"]:
        _check_stitchable(study, where)
    # The settings every merge job will build, built now: a value only they rule out (a
    # lambda outside [0, 1], ...) fails here, before any run is trained.
    for method in merge["methods"]:
        job = {"merge": merge, "analysis": study["analysis"], "method": method,
               "split": study["data"]["split"]}  # fmt: skip
        try:
            pair_settings(job)
        except LmcError as exc:
            raise LmcError(f"[merge]{where}: {exc}") from None


def _check_paths(merge: dict[str, Any], where: str) -> None:
    """``paths``: ``line`` and any curves (``bezier``, ``chain``), each once; the ``curve_*``
    keys make a valid :class:`lmc.merge.CurveSettings`; ``curve_plane`` 0 or ≥ 2."""
    from lmc.merge.curves import path_kind_names

    paths = merge["paths"]
    kinds = path_kind_names()
    if not all(isinstance(p, str) and p in kinds for p in paths):
        raise LmcError(
            f"'merge.paths'{where} must list path kinds from {', '.join(kinds)}, got {paths!r}"
        )
    if "line" not in paths or len(set(paths)) != len(paths):
        raise LmcError(
            f"'merge.paths'{where} must hold \"line\" (every merge's path; curves are measured "
            f"beside it) and each kind once, got {paths!r}"
        )
    try:
        curve_settings(merge, "bezier")
    except LmcError as exc:
        raise LmcError(f"[merge]{where}: curve setting {exc}") from None
    plane = merge["curve_plane"]
    if plane < 0 or plane == 1:
        raise LmcError(
            f"'merge.curve_plane'{where} must be 0 (no plane) or at least 2 points per side, "
            f"got {plane}"
        )


def _check_width_ratio(study: dict[str, Any], where: str) -> None:
    """``sweep.width_ratio`` (B's width over A's) is 1, or above 1 for models lmc can embed
    into a wider copy of themselves (:mod:`lmc.perm.widen`: zoo ``gpt`` and ``vit``), with B's
    widths valid widths of the model and independent training (a spawned pair shares one width)."""
    sweep = study["sweep"]
    ratio = sweep["width_ratio"]
    check_number(f"'sweep.width_ratio'{where}", ratio, minimum=1.0)
    if ratio == 1:
        return
    from lmc.perm.symmetries.widening import WIDENABLE_MODELS

    name = study["model"]["name"]
    if name not in WIDENABLE_MODELS:
        raise LmcError(
            f"'sweep.width_ratio'{where} is {ratio:g}: merging across widths embeds the narrow "
            f"model into the wide one, which lmc can do for {', '.join(WIDENABLE_MODELS)} "
            f"models, not {name!r}"
        )
    if sweep["spawn_epoch"]:
        raise LmcError(f"'sweep.width_ratio'{where} needs independent training (spawn_epoch 0)")
    if study["stitch"]["enabled"]:
        raise LmcError(f"'stitch.enabled'{where} is for pairs of one width (width_ratio 1)")
    entry = get_model(name)
    for width in sweep["widths"]:
        try:
            entry.width_value(width * ratio)
        except LmcError as exc:
            raise LmcError(
                f"'sweep.width_ratio'{where}: B's width {width * ratio:g}: {exc}"
            ) from None


def _check_stitchable(study: dict[str, Any], where: str) -> None:
    """``[stitch] enabled`` needs a model :mod:`lmc.analysis.stitch` can cut into layers:
    checked on the study's narrowest model, before anything is trained."""
    from lmc.analysis import num_stitch_layers
    from lmc.models import build

    from .jobs import model_options

    entry = get_model(study["model"]["name"])
    given = data_given(entry, study["data"])
    width = min(study["sweep"]["widths"])
    try:
        model = build(study["model"]["name"], **given, num_classes=10,
                      **model_options(study, width))  # fmt: skip
        num_stitch_layers(model)
    except LmcError as exc:
        raise LmcError(f"'stitch.enabled'{where}: {exc}") from None


def _at(section: str, where: str, check, key: str, value: Any, **limits: Any) -> Any:
    """``check(...)`` of :mod:`lmc.config.validate` on ``value``, its error naming
    ``section.key`` and the file."""
    return check(f"'{section}.{key}'{where}", value, **limits)


def method_key_rows() -> list[str]:
    """The rows of ``docs/studies.md``'s ``[merge]`` table for the alignment methods' keys,
    made from their records (``scripts/results_pages.py`` writes them into the page; a test
    checks the page holds exactly these)."""
    from lmc.perm.methods import NO_LEGACY, study_keys

    from .jobs import ORIGINAL_MERGE_KEYS

    names = {int: "integer", float: "number", str: "string", bool: "boolean"}
    rows = []
    for key, (method, setting) in study_keys().items():
        if setting.default is None:
            default = "unset (see its meaning)"
        else:
            default = f"`{_toml(setting.default)}`"
        if setting.choices:
            allowed = ", ".join(f"`{c}`" for c in setting.choices)
        elif setting.positive:
            allowed = "> 0"
        elif setting.minimum is not None:
            allowed = f"≥ {setting.minimum:g}"
        else:
            allowed = ""
        if key in ORIGINAL_MERGE_KEYS:
            identity, note = "merge", ""
        elif not setting.affects_result:
            identity, note = "none", "; speed and memory only, in no identity"
        else:
            identity = f"{method.name} merges"
            at = "unset" if setting.baseline is None else f"at `{_toml(setting.baseline)}`"
            why = " (the value earlier merges ran with)" if setting.legacy is not NO_LEGACY else ""
            note = f"; {at}{why} it is left out of the merge's id"
        rows.append(
            f"| `{key}` | {names[setting.type]} | {default} | {allowed} | {identity} | "
            f"`{method.name}`: {setting.help}{note} |"
        )
    return rows


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)
