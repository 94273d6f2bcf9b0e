#!/usr/bin/env bash
# The main job: set up .venv, then run `lmc demo` (the width study on the offline digits
# dataset), which writes a report with figures into the folder it prints (default lmc-demo/).
# Extra arguments go to `lmc demo` (see `lmc demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/lmc demo "$@"
