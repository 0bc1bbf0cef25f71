#!/usr/bin/env bash
# The GPU check, one run on a machine with an NVIDIA GPU (written for an H200 with
# Python 3.12, CuPy for CUDA 13, PyTorch with CUDA and Numba installed, no network).
# Installs nothing but tapegrad itself (pip --no-deps over what is there; the
# checkout is also put on PYTHONPATH, so a failed install changes nothing), then runs
# independent stages, each under its own time limit, all within GPU_CHECK_BUDGET
# seconds (default 470: under 8 minutes):
#   versions   python, numpy, numba, cupy, torch, nvidia-smi
#   install    pip install --no-deps --no-build-isolation -e .
#   smoke      a CUDA tensor, an op, a gradient
#   tests      tests/gpu (all but the registry sweep) and the CUDA fusion tests
#   registry   tests/gpu/test_registry_gpu.py: every op's samples, forward, 1st/2nd order
#   demo       the digits demo (CNN) with --device cuda
#   bench      benchmarks/bench_gpu.py: tapegrad vs PyTorch CUDA, one table
# A stage that fails or runs out of time does not stop the others. Full logs go to
# $OUT/gpu_check/ when OUT is set (else /tmp/tapegrad_gpu_check); the console gets
# each stage's tail and a summary. GPU_CHECK_NO_INSTALL=1 skips the install stage;
# PYTHON picks the interpreter (default python3). GPU_CHECK_ON_CPU=1 runs every stage
# on the CPU instead (tests in their CPU mode, the demo on cpu, bench --dry-run): a
# check of this script where no GPU is.
#
#     bash benchmarks/gpu_check.sh            # on the GPU machine, from the checkout
#
# Where that machine may lack pytest: run benchmarks/gpu_deps.sh first here and carry
# .gpu_deps along (only used when `import pytest` fails there).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
LOG=${OUT:+$OUT/gpu_check}
LOG=${LOG:-/tmp/tapegrad_gpu_check}
mkdir -p "$LOG"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || PY=python
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# pytest (pure Python) carried in .gpu_deps (benchmarks/gpu_deps.sh) where the
# machine has none of its own
if ! "$PY" -c "import pytest" >/dev/null 2>&1 && [[ -d "$ROOT/.gpu_deps" ]]; then
    export PYTHONPATH="$PYTHONPATH:$ROOT/.gpu_deps"
    echo "pytest from $ROOT/.gpu_deps"
fi
BUDGET=${GPU_CHECK_BUDGET:-470}
DEV=cuda
BENCH_ARGS=(--case-timeout 25)
if [[ -n "${GPU_CHECK_ON_CPU:-}" ]]; then
    export TAPEGRAD_GPU_TESTS_ON_CPU=1
    DEV=cpu
    BENCH_ARGS=(--dry-run)
fi
export DEV
START=$(date +%s)
: > "$LOG/summary.txt"

stage() {  # stage NAME LIMIT_SECONDS TAIL_LINES command...
    local name=$1 limit=$2 lines=$3
    shift 3
    local left=$(( BUDGET - ($(date +%s) - START) - 5 ))
    if (( left < 10 )); then
        echo "=== $name: skipped, the budget of ${BUDGET}s is spent" | tee -a "$LOG/summary.txt"
        return
    fi
    (( limit > left )) && limit=$left
    echo "=== $name (limit ${limit}s)"
    local t0=$(date +%s)
    timeout -k 5 "$limit" "$@" > "$LOG/$name.log" 2>&1
    local rc=$?
    local took=$(( $(date +%s) - t0 ))
    tail -n "$lines" "$LOG/$name.log"
    local what="rc=$rc"
    (( rc == 124 || rc == 137 )) && what="TIMED OUT (rc=$rc)"
    echo "=== $name: $what in ${took}s" | tee -a "$LOG/summary.txt"
}

versions() {
    "$PY" - <<'EOF'
import platform, sys
print("python", sys.version.split()[0], platform.machine())
for name in ("numpy", "numba", "cupy", "torch", "pytest", "sklearn", "matplotlib", "tqdm"):
    try:
        mod = __import__(name)
        print(f"{name:<10} {getattr(mod, '__version__', '?')}")
    except Exception as e:
        print(f"{name:<10} MISSING ({type(e).__name__}: {e})")
try:
    import cupy
    print("cupy CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(),
          "driver", cupy.cuda.runtime.driverGetVersion(),
          "devices", cupy.cuda.runtime.getDeviceCount())
except Exception as e:
    print("cupy CUDA: unusable:", type(e).__name__, e)
try:
    import torch
    print("torch CUDA", torch.version.cuda, "available", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except Exception as e:
    print("torch CUDA: unusable:", type(e).__name__, e)
EOF
    nvidia-smi || echo "nvidia-smi: not found"
}

smoke() {
    "$PY" - <<'EOF'
import numpy as np
import tapegrad as tg
print("tapegrad from", tg.__file__, "cuda available:", tg.cuda.is_available())
import os
x = tg.tensor(np.linspace(-1, 1, 5), device=os.environ["DEV"], requires_grad=True)
y = (tg.sin(x) * x).sum()
y.backward()
print("value", y.item(), "grad", x.grad.cpu().numpy())
ref = np.cos(np.linspace(-1, 1, 5)) * np.linspace(-1, 1, 5) + np.sin(np.linspace(-1, 1, 5))
assert np.allclose(x.grad.cpu().numpy(), ref), "wrong gradient on the GPU"
print("smoke: ok")
EOF
}

export PY
export -f versions smoke   # run by `timeout ... bash -c NAME`

PYTEST=("$PY" -m pytest -p no:cacheprovider -v --tb=short -rfE --durations=5)

stage versions 30 40 bash -c versions
if [[ -z "${GPU_CHECK_NO_INSTALL:-}" ]]; then
    stage install 40 3 "$PY" -m pip install --no-deps --no-build-isolation -e "$ROOT"
fi
stage smoke 40 6 bash -c smoke
stage tests 90 25 "${PYTEST[@]}" tests/gpu --ignore=tests/gpu/test_registry_gpu.py \
    tests/fusion/test_fusion_cuda.py tests/fusion/test_codegen_cuda.py
stage registry 120 25 "${PYTEST[@]}" tests/gpu/test_registry_gpu.py
stage demo 40 6 "$PY" -m tapegrad.examples.digits --device "$DEV" --model cnn --epochs 5 \
    --no-progress --out "$LOG/digits" --data benchmarks/data/digits.npz
stage bench 120 22 "$PY" benchmarks/bench_gpu.py "${BENCH_ARGS[@]}"

echo "=== summary ($(( $(date +%s) - START ))s; logs in $LOG)"
cat "$LOG/summary.txt"
