"""Pool workers of the local executor exit soon after their parent dies, even by SIGKILL.

A child script starts ``LocalExecutor(2)`` on two jobs that record their pid and then sleep;
the test SIGKILLs that script and checks that both worker processes are gone within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

CHILD = textwrap.dedent(
    """
    import os
    import sys
    import time
    from pathlib import Path


    def sleep_job(job, ctx):
        Path(job["pid_dir"], f"{job['i']}.pid").write_text(str(os.getpid()))
        time.sleep(120)
        return {}


    if __name__ == "__main__":
        from lmc.experiments import executors
        from lmc.experiments.jobs import Context

        executors.run_job = sleep_job  # the pool submits executors.run_job
        pid_dir = sys.argv[1]
        jobs = [{"pid_dir": pid_dir, "i": i} for i in range(2)]
        ctx = Context(runs_dir=pid_dir, out_dir=pid_dir)
        for outcome in executors.LocalExecutor(2).map(jobs, ctx):
            print(outcome, flush=True)
    """
)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not yet reaped, counts as gone)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.is_dir() and Path("/proc/self").exists():
        try:
            text = stat.read_text()
        except OSError:
            return False
        return text[text.rindex(")") + 2] not in "ZX"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_pool_workers_exit_when_parent_is_killed(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    parent = subprocess.Popen(
        [sys.executable, str(script), str(pid_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    pids: list[int] = []
    try:
        files = [pid_dir / f"{i}.pid" for i in range(2)]
        started = _wait(lambda: all(f.exists() and f.read_text() for f in files), 60)
        if not started:
            parent.kill()
            pytest.fail(f"workers did not start: {parent.communicate()[1].decode()[-2000:]}")
        pids = [int(f.read_text()) for f in files]
        assert len(set(pids)) == 2 and parent.pid not in pids
        # Control: while the parent lives, the watchdog leaves busy workers alone.
        time.sleep(1.5)
        assert all(_alive(pid) for pid in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert _wait(lambda: not any(_alive(pid) for pid in pids), 10), (
            f"workers still alive 10 s after their parent was killed: "
            f"{[pid for pid in pids if _alive(pid)]}"
        )
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_watchdog_exits_a_process_whose_recorded_parent_is_gone():
    """The initializer given a parent pid that is not this process's parent (as after the
    parent's death) ends the process within a poll, with status 70."""
    code = (
        "import os, time\n"
        "from lmc.experiments.executors import _pool_worker_init\n"
        "_pool_worker_init(1, os.getppid() + 10**7, poll_s=0.05)\n"
        "time.sleep(30)\n"
    )
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 70, done.stderr.decode()[-2000:]
    # importing torch dominates; the 30 s sleep must have been cut short
    assert time.monotonic() - start < 25
