"""The guard against tests that read system data the test command does not install (issue 41:
the Hugging Face example's test read Debian's fortunes, installed by hand on CI only, and
failed on a fresh machine). tests/conftest.py records every file under /usr/share that this
repository's code opens and fails the test unless scripts/test.sh installs it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_only_the_installed_packages_data_may_be_read(system_data_guard):
    read = system_data_guard.system_read
    assert read("/usr/share/dict/words") == "/usr/share/dict/words"
    assert read("/usr/share/games/fortunes/../../dict/words") == "/usr/share/dict/words"
    assert read(b"/usr/share/dict/words") == "/usr/share/dict/words"
    assert read("/usr/share/games/fortunes/zippy") is None  # scripts/test.sh installs it
    assert read("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz") is None
    assert read("/usr/share/python3/debpython/tool.py") is None  # code, not data
    assert read("/usr/share/zoneinfo/UTC") is None  # the system's own support files
    assert read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf") is None
    assert read("/tmp/words") is None and read(3) is None


def test_a_read_is_blamed_on_this_repository_or_on_a_library(system_data_guard):
    here = system_data_guard.asked_by_repository(sys._getframe())
    assert here.startswith(__file__ + ":")
    scope: dict = {}
    library = "/opt/site-packages/somelib/fonts.py"  # a third-party library's own reads pass
    exec(compile("import sys\nframe = sys._getframe()\n", library, "exec"), scope)
    assert system_data_guard.asked_by_repository(scope["frame"]) is None


def test_a_test_that_opens_a_system_file_is_recorded(system_data_guard):
    """The audit hook sees the open (it fires before the file is looked up, so a file that
    does not exist is enough); the test clears the record, or the guard would fail it."""
    if not system_data_guard.enabled:
        pytest.skip("the guard is off (LMC_SYSTEM_DATA_GUARD=0)")
    probe = "/usr/share/lmc-guard-probe/missing.txt"
    with pytest.raises(OSError):
        open(probe)  # noqa: SIM115
    with pytest.raises(OSError):
        Path("/usr/share/lmc-guard-probe/other.txt").read_bytes()
    found = {path: where for path, where in system_data_guard.reads}
    system_data_guard.reads.clear()
    assert found[probe].startswith(__file__ + ":")
    assert "/usr/share/lmc-guard-probe/other.txt" in found


def test_the_test_command_installs_every_package_the_guard_allows(system_data_guard):
    script = (ROOT / "scripts" / "test.sh").read_text()
    entries = re.findall(r'"([a-z0-9.+-]+):(/usr/share/[^:"]+):[^"]*"', script)
    installed = {package: marker for package, marker in entries}
    allowed = system_data_guard.SYSTEM_DATA
    assert set(installed) == set(allowed) == {"dataset-fashion-mnist", "fortunes"}
    for package, marker in installed.items():
        assert marker.startswith(allowed[package])  # its marker file is in its data folder
    assert 'apt-get install -y -q "$package"' in script
