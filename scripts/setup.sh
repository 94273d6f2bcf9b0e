#!/usr/bin/env bash
# Set up (once) the virtual environment .venv with lmc and its dependencies.
#
# PyTorch: an interpreter that already has torch (a GPU user's CUDA build, say) keeps it: the
# venv is created with --system-site-packages and torch is not reinstalled. Where no torch is
# present, the CPU build torch==2.13.0 is installed (a plain `pip install torch` would pull a
# multi-GB CUDA build). Override the interpreter with PYTHON=..., the venv folder with LMC_VENV=...
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${LMC_VENV:-.venv}
EXTRAS=${LMC_EXTRAS:-}  # comma-separated extras of pyproject.toml, e.g. ray,hf,pandas
EXTRAS=${EXTRAS// /}  # "ray, hf" works too

if [ ! -x "$VENV/bin/python" ]; then
  if "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "setup: reusing the torch of $PY ($("$PY" -c 'import torch; print(torch.__version__)'))" >&2
    "$PY" -m venv --system-site-packages "$VENV"
  else
    "$PY" -m venv "$VENV"
  fi
fi
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing the CPU build of PyTorch (torch==2.13.0)" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0 2>&1 \
    | grep -v "^WARNING: Location" >&2 || true
  "$VENV/bin/python" -W ignore -c "import torch" || { echo "setup: torch failed to install" >&2; exit 1; }
fi
stamp="$VENV/.lmc-installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing lmc and its dependencies into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test${EXTRAS:+,$EXTRAS}]" 2>&1 \
    | grep -v "^WARNING: Location" >&2 || true
  "$VENV/bin/python" -c "import lmc, sklearn, scipy, safetensors, matplotlib" \
    || { echo "setup: installing lmc failed" >&2; exit 1; }
  touch "$stamp"
fi
