#!/usr/bin/env bash
# The test suite: set up .venv (with the extras the tests use: Ray for the executor tests,
# transformers for the Hugging Face models, pandas for to_dataframe, tensorboard for the logger,
# lapx for the fast assignment solver; LMC_EXTRAS overrides the comma-separated list), fetch
# the real Fashion-MNIST files where Debian's package can be installed, lint, then run pytest.
# pytest runs its tests in parallel processes (pytest-xdist: one per CPU core, at most 4; each
# test at one PyTorch thread, so two cores run the suite in about half the time); -n 0 runs
# them in this process. Extra arguments go to pytest (e.g. -k weight_matching, -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
LMC_EXTRAS=${LMC_EXTRAS-ray,hf,pandas,tensorboard,fast} bash scripts/setup.sh
if [ ! -d /usr/share/datasets/fashion-mnist ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "test: installing Debian's dataset-fashion-mnist (real data for the loader tests)" >&2
  { apt-get install -y -q dataset-fashion-mnist || { apt-get update -q && apt-get install -y -q dataset-fashion-mnist; }; } \
    >/dev/null 2>&1 || echo "test: could not install dataset-fashion-mnist; its tests will skip" >&2
fi
.venv/bin/ruff check src tests benchmarks
exec .venv/bin/python -m pytest -q -n auto --maxprocesses 4 "$@"
