"""Executors: where jobs run. ``local`` (a process pool, or in-process with one worker) and
``ray`` (tasks on a Ray cluster, or a local one). Both run the same job function with the same
number of PyTorch threads per job (``threads``, default 1) whatever the number of workers.

Why a fixed thread count: on CPU, PyTorch splits matrix products and reductions differently for
different thread counts, so float rounding (and, after a few epochs of training, the weights)
differs between 1 and 2 threads. With the thread count fixed, a study gives bit-identical
results for any ``--workers`` on one machine; a different CPU (another instruction set) or a
different ``threads`` may change the last bits."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

from lmc.config import LmcError

from .jobs import Context, run_job

Outcome = tuple[dict, dict | None, BaseException | None]


#: Seconds between a pool worker's checks that its parent is still alive.
ORPHAN_POLL_S = 0.5


def _worker_init(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _exit_when_orphaned(parent_pid: int, poll_s: float) -> None:
    """Poll until this process's parent is no longer ``parent_pid``, then exit at once.

    A dead parent's children are re-parented (to init or a subreaper), so ``os.getppid()``
    changes when the parent dies, however it dies (SIGKILL included). ``os._exit`` ends the
    process even while the main thread is inside a job. Exit status 70 (EX_SOFTWARE)."""
    while os.getppid() == parent_pid:
        time.sleep(poll_s)
    os._exit(70)


def _pool_worker_init(threads: int, parent_pid: int, poll_s: float = ORPHAN_POLL_S) -> None:
    """Initializer of a local pool worker: fix the PyTorch thread count, and start a daemon
    watchdog thread that ends the worker within ``poll_s`` seconds of its parent's death.

    Without it, a worker whose parent was killed with SIGKILL blocks forever on the pool's
    call queue (it holds that pipe's write end itself, so it never sees end-of-file).
    ``parent_pid`` is recorded by the parent (``os.getpid()`` there), so a parent that died
    before this initializer ran is noticed too. Polling is used rather than Linux's
    ``PR_SET_PDEATHSIG``, which fires when the parent *thread* that started the worker exits
    (the pool may start workers from a thread) and is not portable."""
    _worker_init(threads)
    watchdog = threading.Thread(
        target=_exit_when_orphaned,
        args=(parent_pid, poll_s),
        name="lmc-orphan-watchdog",
        daemon=True,
    )
    watchdog.start()


def _run_with_threads(job: dict, ctx: Context, threads: int) -> dict:
    _worker_init(threads)
    return run_job(job, ctx)


@contextmanager
def _torch_threads(threads: int):
    """Run the block with ``threads`` PyTorch threads, restoring the caller's count after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_threads(threads: int | None) -> int:
    """``None`` is lmc train's count too (one config, the same bits from either)."""
    from lmc.train.runs import check_threads

    return check_threads(threads)


class _Sessions:
    """What both executors share: :meth:`session`, during which the expensive start-up (a
    process pool, a Ray instance) is kept across :meth:`map` calls, and closed at its end.
    Sessions nest (a study with variants); only the outermost one closes. Outside a session
    each ``map`` starts and stops its own."""

    _depth = 0

    @contextmanager
    def session(self):
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._close()

    def _close(self) -> None:  # pragma: no cover - overridden
        pass


class LocalExecutor(_Sessions):
    """Runs jobs in this process (``workers=1``) or in a pool of ``workers`` processes, each
    job with ``threads`` PyTorch threads (default 1, so results do not depend on ``workers``).
    Pool workers exit within about ``ORPHAN_POLL_S`` seconds if this process dies (even by
    SIGKILL), rather than being left blocked. Within a :meth:`session` one pool serves every
    ``map`` (a study's training and merge phases start their workers once)."""

    name = "local"

    def __init__(self, workers: int | None = None, threads: int | None = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.threads = _check_threads(threads)
        self._pool = None

    def _new_pool(self, size: int):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(
            max_workers=size,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_pool_worker_init,
            initargs=(self.threads, os.getpid()),
        )

    def _close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def map(self, jobs: list[dict], ctx: Context) -> Iterator[Outcome]:
        """Yield ``(job, summary, error)`` as jobs finish (any order)."""
        if self.workers == 1 or len(jobs) <= 1:
            for job in jobs:
                try:
                    with _torch_threads(self.threads):
                        summary = run_job(job, ctx)
                    yield job, summary, None
                except Exception as exc:  # reported by the runner
                    yield job, None, exc
            return
        from concurrent.futures import as_completed

        if self._depth > 0:  # in a session: one pool for every map
            if self._pool is None:
                self._pool = self._new_pool(self.workers)
            pool = self._pool
        else:
            pool = self._new_pool(min(self.workers, len(jobs)))
        futures = {pool.submit(run_job, job, ctx): job for job in jobs}
        try:
            for future in as_completed(futures):
                job = futures[future]
                try:
                    yield job, future.result(), None
                except Exception as exc:
                    yield job, None, exc
        except BaseException:
            for future in futures:
                future.cancel()
            if pool is self._pool:  # a broken or interrupted pool is not reused
                self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        if pool is not self._pool:
            pool.shutdown(wait=True)


class RayExecutor(_Sessions):
    """Runs each job as a Ray task (one CPU, or ``num_gpus`` GPUs, each).

    ``address`` is an existing cluster's address (``auto`` or ``ray://host:port``); without it a
    local Ray instance is started (and stopped afterwards: at the end of the :meth:`session`,
    so a study's phases share one instance, or of the ``map`` outside one).
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_gpus: float = 0.0,
        num_cpus: int | None = None,
        threads: int | None = None,
    ) -> None:
        try:
            import ray
        except ImportError as exc:
            raise LmcError(
                "the ray executor needs Ray: pip install 'lmc[ray]' (or pip install ray)"
            ) from exc
        self.ray = ray
        self.address = address
        self.num_gpus = num_gpus
        self.num_cpus = num_cpus
        self.threads = _check_threads(threads)
        self._started = False  # this executor started the running Ray instance

    def _close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False

    def map(self, jobs: list[dict], ctx: Context) -> Iterator[Outcome]:
        ray = self.ray
        if not ray.is_initialized():
            kwargs = (
                {"address": self.address}
                if self.address
                else {"num_cpus": self.num_cpus or os.cpu_count(), "include_dashboard": False}
            )
            ray.init(ignore_reinit_error=True, log_to_driver=False, **kwargs)
            self._started = True
        try:
            task = ray.remote(num_cpus=self.threads, num_gpus=self.num_gpus)(_run_with_threads)
            pending = {task.remote(job, ctx, self.threads): job for job in jobs}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                job = pending.pop(done[0])
                try:
                    yield job, ray.get(done[0]), None
                except Exception as exc:
                    yield job, None, exc
        finally:
            if self._depth == 0:
                self._close()


def make_executor(
    name: str,
    *,
    workers: int | None = None,
    address: str | None = None,
    num_gpus: float = 0.0,
    threads: int | None = None,
) -> LocalExecutor | RayExecutor:
    """The executor ``name`` runs a study's jobs with: ``local`` (a process pool of ``workers``
    processes, each at ``threads`` PyTorch threads; 1 runs in this process) or ``ray`` (tasks
    on the cluster at ``address``, or a local Ray of ``workers`` CPUs, with ``num_gpus`` per
    job). ``LmcError`` for another name or a workers count that is not a positive integer."""
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise LmcError(f"workers must be a positive whole number, got {workers!r}")
    if name == "local":
        return LocalExecutor(workers, threads=threads)
    if name == "ray":
        return RayExecutor(address=address, num_gpus=num_gpus, num_cpus=workers, threads=threads)
    raise LmcError(f"unknown executor {name!r}: use local or ray")


Executor = LocalExecutor | RayExecutor
ProgressFn = Callable[[dict, dict], None]


@dataclass(frozen=True)
class RunOptions(Context):
    """How a study runs (nothing here changes a result): the jobs' :class:`Context` (derived
    from it, so its fields are listed once) and what only a study's runner uses.

    Beside :class:`Context`'s fields: ``executor`` (default: a local pool of one process per
    CPU core), ``toml_text`` (the study file's text, copied to ``study.toml``). Differences:
    ``runs_dir`` ``None`` is the default run store (:func:`lmc.store.default_runs_dir`, read
    when the jobs' context is made), ``out_dir`` is the study's output folder (set by
    :func:`lmc.experiments.run_study`), ``quiet`` defaults to ``False`` (progress bars and job
    lines on) and ``log_dir`` is made absolute. Every experiment kind's runner takes one
    (:mod:`lmc.experiments.kinds`); :meth:`job_context` is what ships to the jobs.
    """

    runs_dir: str | None = None  # type: ignore[assignment]
    out_dir: str = ""
    quiet: bool = False
    executor: Executor | None = None
    toml_text: str | None = None

    def __post_init__(self) -> None:
        if self.runs_dir is not None:
            object.__setattr__(self, "runs_dir", str(self.runs_dir))
        object.__setattr__(self, "out_dir", str(self.out_dir))
        if self.log_dir is not None:
            object.__setattr__(self, "log_dir", str(Path(self.log_dir).absolute()))
        if self.executor is None:
            object.__setattr__(self, "executor", LocalExecutor())

    @property
    def out(self) -> Path:
        """The study's output folder."""
        if not self.out_dir:
            raise LmcError("RunOptions.out_dir is not set: run studies with run_study")
        return Path(self.out_dir)

    @property
    def workers(self) -> int:
        """Jobs the executor runs at once (a Ray executor counts as several)."""
        return getattr(self.executor, "workers", 2)

    @property
    def threads(self) -> int:
        """PyTorch threads per job (the executor's ``threads``)."""
        return getattr(self.executor, "threads", 1) or 1

    def job_context(self) -> Context:
        """The jobs' context: the run store resolved, and the jobs' own progress lines off
        with several workers (they would interleave)."""
        from lmc.store import default_runs_dir

        values = {f.name: getattr(self, f.name) for f in fields(Context)}
        values["runs_dir"] = str(self.runs_dir or default_runs_dir())
        values["quiet"] = self.quiet or self.workers > 1
        return Context(**values)
