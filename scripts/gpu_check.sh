#!/usr/bin/env bash
# The GPU check, one script (under 10 minutes on one GPU): on a machine with CUDA it runs the
# tests marked `gpu` (a training step, weight matching and a path evaluation on CUDA, each
# against the CPU), then benchmarks/gpu_check.py: one small model per architecture (mlp,
# vgg11, resnet20, vit, gpt) trained a few steps, weight matching and a path evaluation, each
# on the CPU and on the GPU in the same run, with the GPU's speed-up over the CPU and a check
# that both give the same answer. Without CUDA it runs the CPU halves, says what it skipped and
# exits 0 (unless a CPU check fails).
#
#   bash scripts/gpu_check.sh [OUT] [extra arguments of benchmarks/gpu_check.py, e.g. --quick]
#
# The logs go to OUT (default $OUT, else ./gpu-check): gpu_check.sh.log (everything printed),
# gpu_check.log and gpu_check.json (the measurements). The interpreter: $PYTHON, else .venv's,
# else python3 with src/ on its path (torch, numpy and scipy must be importable).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-check}}
[ $# -gt 0 ] && shift
mkdir -p "$out"
if [ -n "${PYTHON:-}" ]; then py=$PYTHON
elif [ -x .venv/bin/python ]; then py=.venv/bin/python
else py=python3; export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
fi
check() {
  status=0
  started=$(date +%s)
  echo "gpu_check.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ), $($py -c 'import sys; print(sys.version.split()[0])')"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

  echo "== the tests marked gpu"
  mapfile -t files < <(grep -rl --include='test_*.py' "pytest.mark.gpu" tests | sort)
  if [ ${#files[@]} -eq 0 ]; then
    echo "no test is marked gpu"; status=1
  elif $py -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    timeout 150 $py -m pytest -q -rs -m gpu -p no:cacheprovider "${files[@]}" || status=1
  else
    echo "skipped: no CUDA here; the gpu tests would skip (${#files[@]} files: ${files[*]})"
  fi

  echo "== benchmarks/gpu_check.py"
  timeout 400 $py benchmarks/gpu_check.py --out "$out" "$@" || status=1
  echo "gpu_check.sh: $(( $(date +%s) - started )) s, exit $status"
  return $status
}

check "$@" 2>&1 | tee "$out/gpu_check.sh.log"
exit "${PIPESTATUS[0]}"
