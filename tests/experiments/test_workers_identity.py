"""Results do not depend on the worker count: a small sweep run in-process (1 worker) and in a
pool of 2 workers writes byte-identical results.csv, layers.csv and table1.csv."""

import pytest

from lmc.experiments import LocalExecutor, resolve, run_study


@pytest.fixture
def study(tiny_study) -> dict:
    """The tiny study at depth 2, widths 8 and 32, two epochs, merged plain and by weight matching
    at five λ (calibrated), analysed on 128 examples."""
    return tiny_study(
        "workers",
        model={"depth": 2},
        sweep={"widths": [8, 32]},
        train={"epochs": 2},
        merge={"methods": ["none", "weight"], "lambdas": 5, "calibrate": None},
        analysis={"enabled": None, "max_examples": 128},
    )


def test_one_and_two_workers_give_identical_results(tmp_path, study):
    study = resolve(study)
    for workers in (1, 2):
        executor = LocalExecutor(workers)
        pools = []
        original = executor._new_pool

        def counted(size, original=original, pools=pools):
            pools.append(size)
            return original(size)

        executor._new_pool = counted
        run_study(
            study,
            tmp_path / f"out{workers}",
            executor=executor,
            runs_dir=tmp_path / f"runs{workers}",
            quiet=True,
        )
        # the training and merge phases share one pool, closed when the study ends
        assert pools == ([2] if workers == 2 else []) and executor._pool is None
    for name in ("results.csv", "layers.csv", "table1.csv"):
        one = (tmp_path / "out1" / name).read_text()
        two = (tmp_path / "out2" / name).read_text()
        assert one == two, f"{name} differs between 1 and 2 workers"


def test_worker_and_thread_counts_are_validated():
    import pytest

    from lmc.config import LmcError
    from lmc.experiments import make_executor

    for bad in (0, -1, True):
        with pytest.raises(LmcError, match="workers"):
            make_executor("local", workers=bad)
        with pytest.raises(LmcError, match="threads"):
            make_executor("local", workers=1, threads=bad)


def test_sessions_nest_and_only_the_outermost_closes():
    closed = []

    class Probe(LocalExecutor):
        def _close(self):
            closed.append(self._depth)

    executor = Probe(1)
    with executor.session():
        with executor.session():
            pass
        assert closed == []
    assert closed == [0]
