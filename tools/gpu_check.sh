#!/usr/bin/env bash
# GPU validation of ipukit's CuPy backend (issue 17), for a machine with an NVIDIA GPU where
# python3 has numpy and cupy (pytest and hypothesis for the tests) and nothing else can be
# installed: ipukit needs only numpy, so it runs from this source tree (PYTHONPATH).
#
#   bash tools/gpu_check.sh [STAGE...]   # from the project root; logs in $OUT (or gpu-check-out)
#
# Stages (default: all of them, in this order), each well under 10 minutes on an H100 with
# 16 cores, so that each fits one command of a time-limited GPU lease:
#   env       the GPU and the versions
#   tests     the tests with IPUKIT_BACKEND=cupy (about 1 min with pytest-xdist); test modules
#             whose imports this machine lacks (nbformat, anywidget) are left out and named
#   emulator  bench_emulator.py at 10^5, 10^6 and 10^7 vertices on NumPy, then on CuPy (about
#             6 min: building 10^7 vertices is a Python loop of ~110 s per backend)
#   benches   bench_scale (to 10^7), tut6, sharded, parallel, replication and host, each on
#             NumPy then on CuPy (about 6 min; bench_parallel takes ~2 min per backend)
# Copy the rows into BENCHMARKS.md ("GPU (CuPy)") with the GPU's name.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}; mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
bench() {  # bench SECONDS NAME ARGS...: run a benchmark on NumPy, then on CuPy
  local t=$1 b=$2; shift 2
  for be in numpy cupy; do
    echo "== $b $* ($be)"
    IPUKIT_BACKEND=$be timeout "$t" "$py" "benchmarks/$b" "$@" 2>&1 | tail -25
    [ "${PIPESTATUS[0]}" = 124 ] && echo "(stopped after $t s)"
  done
}
stage_env() {
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" - <<'PY'
import cupy, numpy
print("numpy", numpy.__version__, "cupy", cupy.__version__, "gpu ok", cupy.is_available())
if cupy.is_available():
    print("gpu", cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
          "cuda runtime", cupy.cuda.runtime.runtimeGetVersion())
PY
  "$py" -c "import ipukit, ipukit.backend as b; b.use('cupy'); print('ipukit backend', b.name())"
}
stage_tests() {
  local skip=() jobs=() doc=tests/test_doctests.py::test_docstring_examples
  if ! "$py" -c "import nbformat" 2>/dev/null; then
    echo "no nbformat: leaving out the grading, lesson and exercise tests"
    skip+=(--ignore-glob="tests/test_grad*.py" --ignore-glob="tests/test_lesson*.py"
           --ignore=tests/test_make_exercises.py --deselect "$doc[ipukit.grade]")
  fi
  if ! "$py" -c "import anywidget" 2>/dev/null; then
    echo "no anywidget: leaving out the widget tests"
    skip+=(--ignore=tests/test_emulated.py --deselect "$doc[ipukit.widgets]")
  fi
  "$py" -c "import xdist" 2>/dev/null && jobs=(-n 8)
  echo "== tests with IPUKIT_BACKEND=cupy (no notebooks, browser, widgets or grading)"
  IPUKIT_BACKEND=cupy timeout 540 "$py" -m pytest -q -o addopts="" -p no:cacheprovider \
    "${jobs[@]}" tests --ignore=tests/test_browser.py --ignore=tests/browser "${skip[@]}" \
    -k "not notebook and not grading and not lesson" --tb=short -rfEx 2>&1 | tail -40
}
stage_emulator() {
  bench 290 bench_emulator.py --sizes 100000 1000000 10000000 --per-vertex-max 0 --repeats 5
}
stage_benches() {
  bench 60 bench_scale.py --sizes 1000 100000 10000000
  bench 50 bench_tut6.py
  bench 40 bench_sharded.py --repeats 5
  bench 170 bench_parallel.py
  bench 30 bench_replication.py
  bench 30 bench_host.py --repeats 5
}
stages=("$@"); [ ${#stages[@]} = 0 ] && stages=(env tests emulator benches)
for s in "${stages[@]}"; do
  case $s in env|tests|emulator|benches) "stage_$s" 2>&1 | tee -a "$out/gpu-check-$s.log";;
    *) echo "unknown stage $s: use env, tests, emulator or benches" >&2; exit 2;;
  esac
done
