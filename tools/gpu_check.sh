#!/usr/bin/env bash
# GPU validation of ipukit's CuPy backend (issue 17), for a machine with an NVIDIA GPU where
# python3 has numpy and cupy (pytest and hypothesis for the tests) and nothing else can be
# installed: ipukit needs only numpy, so it runs from this source tree (PYTHONPATH).
#
#   bash tools/gpu_check.sh            # from the project root; log in $OUT (or gpu-check-out)
#
# 1. the GPU and the versions; 2. the tests with IPUKIT_BACKEND=cupy (test modules that need
# packages this machine lacks are skipped, not failed); 3. the benchmarks, each on NumPy and
# then on CuPy: the emulator against NumPy and against raw CuPy on the same math at 10^5 to
# 10^7 vertices, the scale sweep, the sharded embedding and the emulated pipeline.
# Copy the CuPy rows into BENCHMARKS.md ("GPU" section) with the GPU's name.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}; mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
bench() {  # bench NAME ARGS...: run a benchmark on NumPy, then on CuPy
  local b=$1; shift
  echo "== $b $* (numpy)"
  IPUKIT_BACKEND=numpy timeout 600 "$py" "benchmarks/$b" "$@" 2>&1 | tail -15
  echo "== $b $* (cupy)"
  IPUKIT_BACKEND=cupy timeout 600 "$py" "benchmarks/$b" "$@" 2>&1 | tail -15
}
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" - <<'PY'
import cupy, numpy
print("numpy", numpy.__version__, "cupy", cupy.__version__, "gpu ok", cupy.is_available())
if cupy.is_available():
    print("gpu", cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
PY
  "$py" -c "import ipukit, ipukit.backend as b; b.use('cupy'); print('ipukit backend', b.name())"
  echo "== tests with IPUKIT_BACKEND=cupy (no notebooks, browser, widgets or grading)"
  IPUKIT_BACKEND=cupy timeout 1800 "$py" -m pytest -q -o addopts="" -p no:cacheprovider \
    --continue-on-collection-errors tests --ignore=tests/test_browser.py \
    --ignore=tests/browser -k "not notebook and not grading and not lesson" 2>&1 | tail -30
  bench bench_emulator.py --sizes 100000 1000000 10000000 --per-vertex-max 0 --repeats 5
  bench bench_scale.py
  bench bench_tut6.py
  bench bench_sharded.py
  bench bench_parallel.py
  bench bench_replication.py
  bench bench_host.py
} 2>&1 | tee "$out/gpu-check.log"
