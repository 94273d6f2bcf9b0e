"""Results do not depend on the worker count: a small sweep run in-process (1 worker) and in a
pool of 2 workers writes byte-identical results.csv, layers.csv and table1.csv."""

from lmc.experiments import LocalExecutor, resolve, run_study

STUDY = {
    "name": "workers",
    "data": {"dataset": "digits"},
    "model": {"name": "mlp", "depth": 2},
    "sweep": {"widths": [8, 32], "weight_decays": [3e-3], "pairs": 1},
    "train": {"epochs": 2},
    "merge": {"methods": ["none", "weight"], "lambdas": 5},
    "analysis": {"max_examples": 128},
}


def test_one_and_two_workers_give_identical_results(tmp_path):
    study = resolve(STUDY)
    for workers in (1, 2):
        run_study(
            study,
            tmp_path / f"out{workers}",
            executor=LocalExecutor(workers),
            runs_dir=tmp_path / f"runs{workers}",
            quiet=True,
        )
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
