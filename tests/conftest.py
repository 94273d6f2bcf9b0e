"""Shared fixtures: small datasets and quick training for tests; the guard against tests
that read system data the test command does not install (``_system_data_guard``)."""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from lmc.data import load

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


@pytest.fixture(scope="session")
def digits():
    return load("digits")


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
