#!/usr/bin/env bash
# Pure-Python test dependencies for a GPU machine without network (pytest and what it
# needs), installed into .gpu_deps/ of the checkout (git ignores it). Run here, then
# carry .gpu_deps to the GPU machine next to the checkout: benchmarks/gpu_check.sh
# puts it on PYTHONPATH only when that machine cannot import pytest itself.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
rm -rf .gpu_deps
"$PY" -m pip install -q --target .gpu_deps --no-deps --no-compile \
    pytest pluggy iniconfig packaging pygments
rm -rf .gpu_deps/bin
du -sh .gpu_deps
