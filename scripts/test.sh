#!/usr/bin/env bash
# The test suite: set up .venv (with the extras the tests use: Ray for the executor tests,
# transformers for the Hugging Face models, pandas for to_dataframe, tensorboard for the logger,
# lapx for the fast assignment solver, mkdocs-material + mkdocstrings for the documentation site
# that tests/docs builds with --strict; LMC_EXTRAS overrides the comma-separated list), install
# the Debian data packages the tests read where apt can (as root): dataset-fashion-mnist (the
# real Fashion-MNIST files) and fortunes (the fortunes text corpus); lint, then run pytest.
# Without them the tests that need them skip, saying why, and the others fall back to data
# they make or that Python carries; tests/conftest.py fails a test that reads a file under
# /usr/share which is not one of these packages' (SYSTEM_DATA there; keep the two lists alike).
# pytest runs its tests in parallel processes (pytest-xdist: one per CPU core, at most 4; each
# test at one PyTorch thread, so two cores run the suite in about half the time); -n 0 runs
# them in this process. Extra arguments go to pytest (e.g. -k weight_matching, -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
LMC_EXTRAS=${LMC_EXTRAS-ray,hf,pandas,tensorboard,fast,docs} bash scripts/setup.sh
# package, the file it installs that says it is there, what the tests read from it
for entry in "dataset-fashion-mnist:/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz:real data for the loader tests" \
             "fortunes:/usr/share/games/fortunes/zippy:the fortunes text corpus"; do
  IFS=: read -r package marker use <<<"$entry"
  [ -f "$marker" ] && continue
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test: installing Debian's $package ($use)" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package" \
      || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package"; }; } \
      >/dev/null 2>&1 || echo "test: could not install $package; the tests that read it skip or fall back" >&2
  else
    echo "test: Debian's $package is not installed ($use; apt-get install $package as root); the tests that read it skip or fall back" >&2
  fi
done
.venv/bin/ruff check src tests benchmarks
exec .venv/bin/python -m pytest -q -n auto --maxprocesses 4 "$@"
