"""The kit on real 32-bit WebAssembly (issue 30 point 3): Pyodide's NumPy under Node.js.

JupyterLite runs the kit in Pyodide, where NumPy's index type ``np.intp`` is int32: an
int64 index array given to ``np.bincount``, ``np.repeat`` and friends raises there and
nowhere else. ``tests/wasm32.py`` imitates that on this machine; this test runs the real
thing, with no browser: every solution notebook passes its checks (also on the grader's
fresh cases) and every untouched exercise notebook says "not solved yet". It needs Node.js
and the site's Pyodide (fetched once per machine into the cache by tools/site/assets.py,
each file checked by sha256); without them it is skipped, saying why.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "site"))
import assets  # noqa: E402


@pytest.fixture(scope="module")
def pyodide(request):
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the kit cannot be run in Pyodide here")
    try:
        where = assets.pyodide_dir()
    except (assets.AssetsUnavailable, OSError) as exc:
        pytest.skip(f"the Pyodide assets could not be had: {exc}")
    return node, where, request.getfixturevalue("kit_wheel")  # (conftest.py: one a run)


def run(pyodide, files) -> dict:
    node, where, wheel = pyodide
    done = subprocess.run([node, str(ROOT / "tools" / "site" / "run_in_pyodide.mjs"),
                           str(where), str(wheel), str(ROOT / "tests" / "pyodide_checks.py"),
                           *map(str, files)],
                          capture_output=True, text=True, timeout=900)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*_solutions.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("[0-9][0-9]_*_exercises.ipynb"))
# lessons 01-05 (the emulator and PopLibs; 06-13 take about a minute more: run them with
# IPUKIT_PYODIDE_LESSONS=all)
WANTED = "[0-9][0-9]" if os.environ.get("IPUKIT_PYODIDE_LESSONS") == "all" else "0[1-5]"
LESSONS = sorted((ROOT / "notebooks").glob(f"{WANTED}_*.ipynb"))


@pytest.fixture(scope="module")
def found(pyodide) -> dict:
    """One Pyodide for every notebook (each runs in a namespace of its own; starting
    Pyodide, NumPy and the kit once instead of once per test), with the widgets'
    pure-Python wheels that the site ships."""
    return run(pyodide, [*assets.extra_wheels().values(), *SOLUTIONS, *EXERCISES, *LESSONS])


def test_every_solution_passes_and_every_exercise_is_not_solved_on_wasm32(found):
    assert found["intp_bits"] == 32  # really 32-bit WebAssembly
    for name in [p.name for p in SOLUTIONS + EXERCISES]:
        nb = found["notebooks"][name]  # (a KeyError: the notebook did not run)
        assert nb["error"] is None, f"{name}: {nb['error']}"
        want = "passed" if name.endswith("_solutions.ipynb") else "not solved"
        wrong = {k: v for k, v in nb["results"].items() if v[0] != want}
        assert nb["results"] and not wrong, f"{name}: {wrong}"
        wrong = {k: v for k, v in nb["fresh"].items() if v[0] != "passed"}
        assert not wrong, f"{name}, the grader's fresh cases: {wrong}"


def test_the_emulator_lessons_run_on_wasm32(found):
    assert found["intp_bits"] == 32 and len(LESSONS) >= 5
    for name in [p.name for p in LESSONS]:
        nb = found["notebooks"][name]
        assert nb["error"] is None, f"{name}: {nb['error']}"
