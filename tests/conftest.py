"""Shared fixtures: small datasets and quick training for tests; one tiny study
(``tiny_study``, written as TOML by ``study_toml``) and one store of two tiny trained digits
runs (``digits_runs``, built with ``save_digits_run`` from ``digits_run_config``); the guard
against tests that read system data the test command does not install
(``_system_data_guard``)."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import runpy
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from lmc.cli.main import main
from lmc.config import LmcError
from lmc.data import TASKS, Task, load, register_task
from lmc.models import build
from lmc.perm import apply_permutation, random_permutation, spec_from_model
from lmc.store import Run, RunStore
from lmc.train import TrainSettings, fit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

#: The Debian packages ``scripts/test.sh`` installs where apt can (as root), with the folder of
#: the data each installs: the only files under ``/usr/share`` a test may read. A test that
#: reads one of them must also pass without it (skip saying why, or fall back to data it
#: makes); keep this list and the packages of scripts/test.sh alike.
SYSTEM_DATA = {
    "dataset-fashion-mnist": "/usr/share/datasets/fashion-mnist/",
    "fortunes": "/usr/share/games/fortunes/",
}
SHARE = "/usr/share/"
#: Folders under /usr/share of the operating system's own support files that libraries read
#: for themselves, also from compiled code that leaves no Python frame to blame (time zones,
#: fonts, locales, TeX for matplotlib): no data a test could lack.
SUPPORT = tuple(
    f"{SHARE}{name}/"
    for name in ("zoneinfo", "fonts", "fontconfig", "locale", "i18n", "mime", "terminfo", "X11",
                 "icons", "ca-certificates", "misc", "file", "glib-2.0", "tcltk", "matplotlib",
                 "texmf", "texlive", "texmf-dist", "ghostscript", "python-wheels", "pyshared")
)  # fmt: skip
#: Where Python's own library lives: its frames are passed over to find who asked for a file.
_STDLIB = tuple(
    {
        str(form) + os.sep
        for key in ("stdlib", "platstdlib")
        for form in (Path(sysconfig.get_paths()[key]), Path(sysconfig.get_paths()[key]).resolve())
    }
)
_REPO = tuple(str(ROOT / d) + os.sep for d in ("src", "tests", "examples", "scripts", "benchmarks"))
_system_reads: list[tuple[str, str]] = []  # (path, the repository file:line that opened it)


def asked_by_repository(frame) -> str | None:
    """``file:line`` of the code that caused a file to be opened when that is this repository's
    (lmc, a test, an example, a script): the innermost frame outside Python's standard library.
    ``None`` when it is a third-party library's (matplotlib reading its fonts, say)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<") or name.startswith(_STDLIB)):
            return f"{name}:{frame.f_lineno}" if name.startswith(_REPO) else None
        frame = frame.f_back
    return None


def system_read(path) -> str | None:
    """The absolute path of a data file under ``/usr/share`` that ``scripts/test.sh`` does not
    install (not under :data:`SYSTEM_DATA`; the system's :data:`SUPPORT` files and Python code
    an import reads are no data), or ``None``."""
    if isinstance(path, int):  # a file descriptor
        return None
    text = os.fsdecode(path)
    if not text.startswith("/"):
        text = os.path.abspath(text)
    elif not text.startswith(SHARE) and "/.." not in text:
        return None
    text = os.path.normpath(text)
    if not text.startswith(SHARE) or text.startswith((*SYSTEM_DATA.values(), *SUPPORT)):
        return None
    return None if text.endswith((".py", ".pyc", ".so", ".pth")) else text


#: LMC_SYSTEM_DATA_GUARD=0 turns the guard off (a machine whose libraries read support files
#: under /usr/share that SUPPORT does not list: add the folder there).
GUARD = os.environ.get("LMC_SYSTEM_DATA_GUARD", "1") != "0"


def _audit(event: str, args: tuple) -> None:
    if event != "open" or not args:
        return
    path = system_read(args[0])
    if path is None:
        return
    where = asked_by_repository(sys._getframe(1))
    if where is not None:
        _system_reads.append((path, where))


if GUARD:
    sys.addaudithook(_audit)  # for the whole session (audit hooks cannot be removed)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``gpu`` is skipped where PyTorch sees no CUDA device."""
    if item.get_closest_marker("gpu") is not None and not torch.cuda.is_available():
        pytest.skip("needs CUDA (a GPU)")


@pytest.fixture(scope="session")
def digits():
    return load("digits")


#: The one tiny study the tests start from: a depth-1 MLP of width 8 on digits, one pair, one
#: epoch, the unaligned merge at three λ, uncalibrated, no layerwise analysis. ``tiny_study``
#: changes it per test.
TINY_STUDY: dict[str, Any] = {
    "name": "tiny",
    "data": {"dataset": "digits"},
    "model": {"name": "mlp", "depth": 1},
    "sweep": {"widths": [8], "pairs": 1},
    "train": {"epochs": 1},
    "merge": {"methods": ["none"], "lambdas": 3, "calibrate": False},
    "analysis": {"enabled": False},
}


def make_tiny_study(name: str = "tiny", **tables: Any) -> dict[str, Any]:
    """A fresh copy of :data:`TINY_STUDY` named ``name``. Each keyword is a table: a dict is
    merged into the tiny study's table of that name (a key given ``None`` is left out, so the
    study's default applies; a table given ``None`` is left out whole), any other value (a
    new table, a list of ``variants``, a top-level ``description``) is set as given."""
    raw = copy.deepcopy(TINY_STUDY)
    raw["name"] = name
    for table, value in tables.items():
        if value is None:
            raw.pop(table, None)
        elif isinstance(value, dict) and isinstance(raw.get(table), dict):
            raw[table].update(copy.deepcopy(value))
            raw[table] = {k: v for k, v in raw[table].items() if v is not None}
        else:
            raw[table] = copy.deepcopy(value)
    return raw


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml_value, value)) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def study_toml(raw: dict[str, Any]) -> str:
    """``raw`` (a study as ``resolve`` takes it) as the text of a study file: top-level values
    first, then a ``[table]`` per dict (nested dicts inline) and a ``[[table]]`` per item of a
    list of dicts (``variants``). Checked to read back as ``raw``."""
    tables = {k: v for k, v in raw.items() if isinstance(v, dict)}
    arrays = {k: v for k, v in raw.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
    lines = [f"{k} = {_toml_value(v)}" for k, v in raw.items() if k not in tables | arrays]
    for name, table in tables.items():
        lines += [f"[{name}]", *(f"{k} = {_toml_value(v)}" for k, v in table.items())]
    for name, items in arrays.items():
        for item in items:
            lines += ["", f"[[{name}]]", *(f"{k} = {_toml_value(v)}" for k, v in item.items())]
    text = "\n".join(lines) + "\n"
    assert tomllib.loads(text) == raw, text
    return text


@pytest.fixture(scope="session")
def tiny_study():
    """``tiny_study(name, **tables)``: the tests' one tiny study (:func:`make_tiny_study`)."""
    return make_tiny_study


@pytest.fixture(scope="session", name="study_toml")
def _study_toml():
    """``study_toml(raw)``: a study dict as the text of its TOML file (:func:`study_toml`)."""
    return study_toml


#: The model options of the tiny digits runs in :func:`digits_runs`.
DIGITS_MLP = {"input_size": 64, "width": 12, "depth": 2}


def digits_run_config(options: dict[str, Any], **train: Any) -> dict[str, Any]:
    """The config of a trained MLP run on digits as the store keeps it: ``options`` its model
    options, the keywords its ``train`` table (``epochs``, ``init_seed``, ...)."""
    return {
        "kind": "train",
        "dataset": "digits",
        "dataset_options": {},
        "model": "mlp",
        "model_options": dict(options),
        "train": train,
    }


def save_digits_run(
    store: RunStore, digits, seed: int, options: dict[str, Any] = DIGITS_MLP, *, epochs: int = 1
) -> Run:
    """An MLP built and trained on ``digits`` from ``seed`` (init and data order) for
    ``epochs``, saved in ``store`` under :func:`digits_run_config` (test loss recorded as 0)."""
    model = build("mlp", seed=seed, **options)
    fit(model, digits, TrainSettings(epochs=epochs, init_seed=seed, data_seed=seed))
    config = digits_run_config(options, epochs=epochs, init_seed=seed, data_seed=seed)
    return store.save(config, model.state_dict(), {"final_test_loss": 0.0})


def save_permuted_runs(
    store: RunStore, digits, options: dict[str, Any], seeds: tuple[int, ...]
) -> tuple[torch.nn.Module, list[Run]]:
    """A digits MLP (``options``) trained one epoch from seed 0 and saved as a run, then one
    run per seed ``s`` of ``seeds`` holding it under ``random_permutation(spec, s)`` (its
    config's seeds ``s``): the same function, other weights. Returns the model, in eval
    mode, and the runs, the unpermuted first."""
    model = build("mlp", seed=0, **options)
    fit(model, digits, TrainSettings(epochs=1, init_seed=0, data_seed=0))
    model.eval()
    spec = spec_from_model(model, digits.x_train[:2])
    config = digits_run_config(options, epochs=1, init_seed=0, data_seed=0)
    runs = [store.save(config, model.state_dict(), {})]
    for seed in seeds:
        state = apply_permutation(spec, random_permutation(spec, seed), model.state_dict())
        config = digits_run_config(options, epochs=1, init_seed=seed, data_seed=seed)
        runs.append(store.save(config, state, {}))
    return model, runs


#: The model options of :func:`save_untrained`'s default run: an untrained MLP of width 8.
UNTRAINED_MLP = {"input_size": 64, "width": 8, "num_classes": 10}


def save_untrained(
    root, config: dict[str, Any] | None = None, *, seed: int = 0, metrics: dict | None = None
) -> Run:
    """The MLP of ``config`` (default: :data:`UNTRAINED_MLP`, ``train = {"epochs": 1}``) built
    from ``seed``, untrained, saved as a finished run of the store at ``root`` with ``metrics``
    (default: test accuracy 0.5)."""
    config = digits_run_config(UNTRAINED_MLP, epochs=1) if config is None else config
    model = build("mlp", seed=seed, **config["model_options"])
    metrics = {"final_test_accuracy": 0.5} if metrics is None else metrics
    return RunStore(root).save(config, model.state_dict(), metrics)


@pytest.fixture(scope="session", name="save_untrained")
def _save_untrained():
    """``save_untrained(root, config=None, *, seed=0, metrics=None)``: an untrained digits MLP
    saved as a finished run (:func:`save_untrained`)."""
    return save_untrained


@pytest.fixture(scope="session", name="save_permuted_runs")
def _save_permuted_runs():
    """``save_permuted_runs(store, digits, options, seeds)``: a trained digits MLP and
    permuted copies of it, each a run (:func:`save_permuted_runs`)."""
    return save_permuted_runs


@pytest.fixture(scope="session", name="digits_run_config")
def _digits_run_config():
    """``digits_run_config(options, **train)``: a stored digits MLP run's config."""
    return digits_run_config


@pytest.fixture(scope="session", name="save_digits_run")
def _save_digits_run():
    """``save_digits_run(store, digits, seed, options=DIGITS_MLP, *, epochs=1)``: a trained
    digits MLP saved as a run (:func:`save_digits_run`)."""
    return save_digits_run


@pytest.fixture(scope="module")
def digits_runs(tmp_path_factory, digits):
    """The tests' one store: ``(root, a, b)``, a store of its own (one per test module) with
    two digits MLPs (:data:`DIGITS_MLP`) trained one epoch from seeds 1 and 2, and their run
    folders. ``digits`` must be the lmc dataset (not the metrics folder's tensors)."""
    root = tmp_path_factory.mktemp("runs")
    store = RunStore(root)
    return root, save_digits_run(store, digits, 1).path, save_digits_run(store, digits, 2).path


@dataclass(frozen=True)
class ToyRegression(Task):
    """A toy regression task: outputs (N, D) values for float targets (N, D), the loss their
    mean squared error, no accuracy, no calibration."""

    def check(self, output, target, *, name="labels", num_classes=None) -> None:
        if not target.is_floating_point() or target.dim() != 2:
            raise LmcError(f"{name} must be (N, D) float values, got {tuple(target.shape)}")
        if output is not None and output.shape[1:] != target.shape[1:]:
            raise LmcError(f"output {tuple(output.shape)} does not fit {name}")

    def loss(self, output, target, *, label_smoothing=0.0):
        return F.mse_loss(output, target)

    def prediction_losses(self, output, target):
        return ((output - target) ** 2).mean(dim=-1)

    def loss_sum(self, output, target):
        return self.stack_losses(output, target).sum()

    def stack_losses(self, outputs, targets, beta=1.0):
        return ((outputs.double() - targets.double()) ** 2).mean(dim=-1)

    def correct(self, output, target):
        return None

    def correct_count(self, output, target):
        return None

    def stack_accuracy(self, outputs, targets):
        return None


@pytest.fixture
def regression_task():
    """:class:`ToyRegression` registered as task ``toy-regression`` for the test (``calibrates``
    false), unregistered after it."""
    task = register_task(ToyRegression("toy-regression", 1, "values (N, D)", calibrates=False))
    yield task
    del TASKS[task.name]


@pytest.fixture
def cli_error(capsys):
    """``cli_error(argv)``: runs ``lmc`` on ``argv``, checks that it exits with status 2
    printing nothing on stdout and one line on stderr, and returns that line."""

    def run(argv: list[str]) -> str:
        assert main(argv) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and captured.out == "", captured.err
        return lines[0]

    return run


@pytest.fixture
def run_benchmark(monkeypatch, capsys):
    """``run_benchmark(name, *args)``: ``benchmarks/<name>.py`` run in this process as
    ``__main__`` with ``args`` as its command line (benchmarks/ first on ``sys.path``, for the
    scripts' shared ``_common``); returns what it printed (the capture is read and reset)."""

    def run(name: str, *args: str) -> str:
        script = ROOT / "benchmarks" / f"{name}.py"
        monkeypatch.setattr(sys, "argv", [script.name, *args])
        monkeypatch.syspath_prepend(str(script.parent))
        runpy.run_path(str(script), run_name="__main__")
        return capsys.readouterr().out

    return run


@pytest.fixture(scope="session")
def load_script():
    """``load_script(name)``: ``scripts/<name>.py`` imported as a module (the scripts are not
    a package), so tests can call its functions."""
    root = Path(__file__).resolve().parents[1]

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, root / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """The whole session at one PyTorch thread, and ``OMP_NUM_THREADS=1`` for the processes
    the tests start: the tests' models are tiny, where a second thread only adds
    synchronisation, and on a shared machine two spinning threads per process can make a
    test several times slower (lmc's own training defaults to one thread as well). Session
    scope, so module- and session-scoped fixtures that train models get it too."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        # precision "auto" trains fp32 in the suite on every machine (bf16 where it is native
        # would change the tests' numbers), and no timing is written to the user's cache
        patch.setenv("LMC_AUTO_PRECISION", "fp32")
        patch.setenv("LMC_PRECISION_CACHE", "")
        # and no help text is read from or stored in it (tests/cli/test_help_is_light.py
        # gives its cases a folder of their own)
        patch.setenv("LMC_HELP_CACHE", "")
        yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """Never read or write the user's run store or cache from a test; every test starts at
    one PyTorch thread (see ``_one_thread``), whatever the test before it left."""
    monkeypatch.setenv("LMC_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    torch.set_num_threads(1)
    torch.set_grad_enabled(True)


@pytest.fixture(autouse=True)
def _system_data_guard(request):
    """Fail a test whose code (or a fixture it set up) read a file under ``/usr/share`` that
    the test command does not install (:data:`SYSTEM_DATA`): on a fresh machine that file is
    missing and the test breaks, as ``fortunes`` broke the Hugging Face example's test (issue
    41). Install the package in scripts/test.sh (and add it to SYSTEM_DATA) with a skip or a
    fallback for a machine without it, or read data the test makes. Reads by third-party
    libraries (fonts, time zones) are theirs and pass; files opened by other processes are
    not seen."""
    yield
    reads = list(dict.fromkeys(_system_reads))
    _system_reads.clear()
    if reads:
        listed = "; ".join(f"{path} (opened by {where})" for path, where in reads[:3])
        pytest.fail(
            f"{request.node.nodeid} read system data that scripts/test.sh does not install: "
            f"{listed}. Install its package in scripts/test.sh and tests/conftest.py's "
            "SYSTEM_DATA, with a skip or fallback for a machine without it, or make the data "
            "in the test",
            pytrace=False,
        )


@pytest.fixture
def system_data_guard():
    """The guard's parts, for its own tests: ``system_read``, ``asked_by_repository``,
    ``reads`` (the list of ``(path, where)`` it has recorded since the last test ended),
    ``SYSTEM_DATA`` and ``enabled`` (``False`` under LMC_SYSTEM_DATA_GUARD=0)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        system_read=system_read,
        asked_by_repository=asked_by_repository,
        reads=_system_reads,
        SYSTEM_DATA=SYSTEM_DATA,
        enabled=GUARD,
    )
