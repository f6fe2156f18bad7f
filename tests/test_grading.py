"""Tests of ipukit.grading and the ``python -m ipukit.grade`` command line."""

import contextlib
import hashlib
import io
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import numpy as np
import pytest

import ipukit as ipu
from ipukit import grading
from ipukit.grading import feedback, lesson01, lesson04
from ipukit.grading.make_exercises import (
    edited_exercise,
    exercise_notebook,
    sync_problems,
    sync_report,
)
from ipukit.grading.markers import SolutionMarkerError, strip_solutions

ROOT = Path(__file__).resolve().parents[1]
MINE = ["01_ipu_and_bsp", "02_graphs_tensors_streams", "03_vertices_codelets",
        "04_compute_sets_races_exchange"]


def quiet(check, *args):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        result = check(*args)
    return result, out.getvalue()


# -- solution markers ---------------------------------------------------------------------

def test_strip_replaces_the_region_with_a_stub_that_carries_the_hint():
    src = ("def f(x):\n    y = 1\n    # BEGIN SOLUTION\n    # HINT: add y\n"
           "    return x + y\n    # END SOLUTION\n\nprint('kept')")
    out = strip_solutions(src)
    assert out == ("def f(x):\n    y = 1\n    # YOUR CODE HERE\n"
                   "    raise NotImplementedError('add y')\n\nprint('kept')")
    namespace = {}
    exec(out.replace("print('kept')", ""), namespace)
    with pytest.raises(NotImplementedError, match="add y"):
        namespace["f"](1)


@pytest.mark.parametrize("src, message", [
    ("    # END SOLUTION", "END SOLUTION without a BEGIN"),
    ("  # BEGIN SOLUTION\n  x = 1", "never closed"),
    ("  # BEGIN SOLUTION\n  # BEGIN SOLUTION\n  # END SOLUTION", "inside the region"),
    ("  # BEGIN SOLUTION\n  x = 1\n# END SOLUTION", "indented differently"),
    ("  ### BEGIN SOLUTION\n  ### END SOLUTION", "single '#'"),
])
def test_marker_pairing_is_checked(src, message):
    with pytest.raises(SolutionMarkerError, match=message):
        strip_solutions(src, where="cell 3")


def test_exercises_are_in_sync_with_solutions():
    """`make test`'s sync check: fails when the generator changed; a learner's edits to an
    exercise notebook are reported (a warning) and kept, never a failure."""
    problems, notes = sync_report(ROOT / "solutions", ROOT / "exercises")
    assert problems == [], "\n".join(problems)
    for note in notes:
        warnings.warn(note, stacklevel=1)


def test_sync_check_notices_a_stale_exercise(tmp_path):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    ex.mkdir()
    nb = nbformat.read(ROOT / "solutions" / f"{MINE[0]}_solutions.ipynb", as_version=4)
    nbformat.write(nb, sol / f"{MINE[0]}_solutions.ipynb")
    stale = exercise_notebook(nb)
    [missing] = sync_problems(sol, ex)
    assert missing.startswith(f"{ex / MINE[0]}_exercises.ipynb is missing")
    nbformat.write(stale, ex / f"{MINE[0]}_exercises.ipynb")
    assert sync_problems(sol, ex) == []
    cell = next(c for c in nb.cells if "BEGIN SOLUTION" in c.source)
    cell.source = cell.source.replace("# END SOLUTION", "return 0\n    # END SOLUTION")
    nbformat.write(nb, sol / f"{MINE[0]}_solutions.ipynb")
    assert sync_problems(sol, ex) == []  # solution code may change freely
    cell.source += "\nprint('a new line outside the solution')"
    nbformat.write(nb, sol / f"{MINE[0]}_solutions.ipynb")
    problems = sync_problems(sol, ex)
    assert len(problems) == 1 and "differs from the generated one" in problems[0]
    assert "the generator changed" in problems[0] and "loses nothing" in problems[0]


def test_generated_exercise_keeps_everything_but_the_solutions():
    sol = nbformat.read(ROOT / "solutions" / f"{MINE[2]}_solutions.ipynb", as_version=4)
    ex = exercise_notebook(sol)
    assert [c.cell_type for c in ex.cells] == [c.cell_type for c in sol.cells]
    for s, e in zip(sol.cells, ex.cells):
        if "BEGIN SOLUTION" not in s.source:
            assert e.source == s.source
        else:
            assert "raise NotImplementedError(" in e.source and "SOLUTION" not in e.source


# -- checks: every solution passes, every stub is "not solved yet" --------------------------

def run_cells(path: Path) -> dict:
    """Execute a notebook's code cells in this process (no kernel); return results."""
    nb = nbformat.read(path, as_version=4)
    namespace = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for cell in nb.cells:
            if cell.cell_type == "code":
                exec(compile(cell.source, str(path), "exec"), namespace)
    return grading.results()


@pytest.mark.parametrize("name", MINE)
def test_every_solution_gets_full_marks(name):
    results = run_cells(ROOT / "solutions" / f"{name}_solutions.ipynb")
    lesson = name[:2]
    expected = {i for i, ex in grading.EXERCISES.items() if ex.lesson == lesson}
    assert len(expected) >= 3 and set(results) == expected
    assert all(r.passed and r.points == r.max_points > 0 for r in results.values()), results


@pytest.mark.parametrize("name", MINE)
def test_every_untouched_exercise_scores_zero_and_says_not_solved(name):
    path = ROOT / "exercises" / f"{name}_exercises.ipynb"
    if edited_exercise(path):
        pytest.skip(f"{path} was edited since it was generated (a learner's)")
    results = run_cells(path)
    assert len(results) >= 3
    for r in results.values():
        assert (r.status, r.points) == ("not solved", 0)
        assert "not solved yet" in r.text()


def test_a_wrong_superstep_formula_names_the_step_and_both_values():
    def no_sync(sync, bytes_in, bytes_out, compute, result_in, result_out, bpc=4):
        return superstep(0, bytes_in, bytes_out, compute, result_in, result_out, bpc)

    result, shown = quiet(lesson01.check_superstep_cycles, no_sync)
    assert result.status == "failed" and result.points == 0
    assert "step 'Copy a -> b'" in result.message
    sync = ipu.IPUModel(tiles_per_ipu=4).create_device().target.sync_cycles
    expected, got = (int(x) for x in
                     result.message.splitlines()[0].split("expected ")[1].split(" cycles, got "))
    assert expected - got == sync
    assert all(line in shown for line in result.message.splitlines())  # shown, indented
    assert result.message.splitlines()[-1] == "hint 1 of 3: " + \
        lesson01.check_superstep_cycles.exercise.hints[0]


ARGS = ("sync", "bytes_in", "bytes_out", "compute", "result_bytes_in", "result_bytes_out",
        "bpc")


@pytest.mark.parametrize("formula", [
    # floor instead of ceil, and bytes received only: both right on every FLOAT step
    lambda s, i, o, c, ri, ro, bpc=4: s + int(np.maximum(i, o).max()) // bpc + int(c.max())
    + int(np.maximum(ri, ro).max()) // bpc,
    lambda s, i, o, c, ri, ro, bpc=4: s + math.ceil(int(i.max()) / bpc) + int(c.max())
    + math.ceil(int(ri.max()) / bpc),
])
def test_superstep_formulas_wrong_only_on_a_half_scatter_fail(formula):
    result, _ = quiet(lesson01.check_superstep_cycles, formula)
    assert result.status == "failed"
    # 12 halves on tile 0, 3 per tile: in [0, 6, 6, 6], out [18, 0, 0, 0] -> ceil(18/4) = 5;
    # the random steps before it may catch the formula first
    scatter = [c for c in lesson01.check_superstep_cycles.exercise.cases(
        np.random.default_rng(0)) if c["_name"] == "Copy src -> dst"]
    assert [c["bytes_in"].tolist() for c in scatter] == [[0, 6, 6, 6]]
    assert formula(*[scatter[0][k] for k in ARGS]) != scatter[0]["_cycles"]


@pytest.mark.parametrize("formula", [
    # the exchange out left out; both exchanges as one phase (the kit before issue 31: its
    # busiest tile is not the sum of the two phases' busiest); the out phase before compute
    # is the same sum, so it is not a separate case
    lambda s, i, o, c, ri, ro, bpc=4: superstep(s, i, o, c, 0 * ri, 0 * ro, bpc),
    lambda s, i, o, c, ri, ro, bpc=4: s + math.ceil(int(np.maximum(i + ri, o + ro).max()) / bpc)
    + int(c.max()),
])
def test_superstep_formulas_without_a_separate_exchange_out_fail(formula):
    result, _ = quiet(lesson01.check_superstep_cycles, formula)
    assert result.status == "failed" and "results in" in result.message
    # a vertex on tile 1 fetches 20 B from tile 2 and sends its 4-B result to tile 3:
    # sync + ceil(20 / 4) + 30 x 6 (one worker) + ceil(4 / 4)
    case = next(c for c in lesson01.check_superstep_cycles.exercise.cases(
        np.random.default_rng(0)) if c["_name"] == "fetch and send back")
    assert case["_cycles"] == case["sync"] + 5 + 6 * 30 + 1
    assert formula(*[case[k] for k in ARGS]) != case["_cycles"]


@pytest.mark.parametrize("answer, shown", [
    (lambda *a: float("nan"), "got nan"), (lambda *a: float("inf"), "got inf"),
    (lambda *a: np.float32("-inf"), "got np.float32(-inf)")])
def test_non_finite_numbers_are_wrong_answers_not_crashes(answer, shown):
    result, _ = quiet(lesson01.check_superstep_cycles, answer)
    assert result.status == "failed" and "your code raised" not in result.message
    assert "expected a whole number of cycles or bytes, " + shown in result.message


def test_non_finite_numbers_in_lesson07_are_wrong_answers():
    from ipukit.grading import lesson07
    from ipukit.grading.feedback import Wrong

    with pytest.raises(Wrong, match="expected a whole number, got nan"):
        lesson07.as_int(float("nan"), "IPU 0")
    assert lesson07.as_int(10**30, "IPU 0") == 10**30


def test_a_race_is_reported_with_the_compiler_message():
    def racy(graph, v, iterations):
        class Mean3(ipu.Vertex):
            x = ipu.Input(ipu.Vector(ipu.FLOAT))
            out = ipu.Output(ipu.FLOAT)

            def compute(self):
                self.out[...] = self.x.mean(axis=-1)

        cs = graph.add_compute_set("smooth")
        for i in range(1, v.shape[0] - 1):
            graph.add_vertex(cs, Mean3, {"x": v[i - 1:i + 2], "out": v[i]}, tile=i)
        return ipu.Repeat(iterations, ipu.Execute(cs))

    result, _ = quiet(lesson04.check_smoothing, racy)
    assert result.status == "failed"
    assert "your graph has a data race" in result.message and "tensor 'v'" in result.message
    assert "ipukit refuses it, as Poplar's graph compiler does (poplar::graph_cycle_error" in \
        result.message


def test_learner_exceptions_are_reported_not_raised():
    result, _ = quiet(lesson01.check_superstep_cycles, lambda sync, *a: sync.no_such_attribute)
    assert result.status == "failed"
    assert result.message.startswith("your code raised AttributeError")


def test_grading_mode_raises_assertion_error_for_nbgrader_and_otter():
    def stub(*args):
        raise NotImplementedError("write it")

    feedback.set_mode("raise")
    with pytest.raises(AssertionError, match="not solved yet"):
        quiet(lesson01.check_superstep_cycles, stub)
    with pytest.raises(AssertionError, match=r"expected \d+ cycles, got 0"):
        quiet(lesson01.check_superstep_cycles, lambda *a: 0)
    result, _ = quiet(lesson01.check_superstep_cycles, superstep)
    assert result.passed


def test_scoreboard_lists_every_exercise_of_the_lesson():
    quiet(lesson01.check_superstep_cycles, superstep)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        grading.scoreboard("01")
    lines = out.getvalue().splitlines()
    assert lines[0] == "Scoreboard, lesson 01"
    assert [ln.split()[0] for ln in lines[2:]] == ["01.1", "01.2", "01.3", "01.4", "total"]
    assert lines[-1].split()[-1] == "2/9"


def superstep(sync, bytes_in, bytes_out, compute, result_in, result_out, bpc=4):
    return sync + math.ceil(int(np.maximum(bytes_in, bytes_out).max()) / bpc) + \
        int(np.max(compute)) + math.ceil(int(np.maximum(result_in, result_out).max()) / bpc)


# -- the command line: a fresh kernel, errors and endless loops survived --------------------

FORGED = "{'application/vnd.ipukit.result+json': {'id': '01.3', 'status': 'passed'}}"
LEARNER = [
    "import ipukit as ipu\nfrom ipukit import grading\nfrom ipukit.grading import lesson01",
    "def build_scale(graph, x, y):\n    cs = graph.add_compute_set('scale')\n"
    "    graph.add_vertex(cs, lesson01.Scale, {'x': x, 'out': y}, tile=0)\n"
    "    return ipu.Execute(cs)",
    "lesson01.check_scale_superstep(build_scale)",
    "def place_vertices(cycles, num_tiles):\n    return [0] * len(cycles)",
    "lesson01.check_placement(place_vertices)",
    "def superstep_cycles(*args):\n    raise NotImplementedError('not yet')",
    "lesson01.check_superstep_cycles(superstep_cycles)",
    "1 / 0",
    "kept = 42\nwhile True:\n    pass",
    "assert kept == 42\nimport time\nwhile True:\n    try:\n        time.sleep(0.1)\n"
    "    except KeyboardInterrupt:\n        pass",
    "def place_vertices(cycles, num_tiles):\n"
    "    return lesson01.reference_placement(cycles, num_tiles)",
    "lesson01.check_placement(place_vertices)",
    "import os\nos._exit(1)",
    "print(build_scale.__name__)",
    # results shown by cells other than the check cells do not count
    f"from IPython.display import display\ndisplay({FORGED}, raw=True)",
    "from ipukit.grading import feedback\nfeedback.run('01.3', lambda: None)",
    "lesson01.check_superstep_cycles(lambda *args: 0)  # not the check cell",
]


def test_cli_grades_a_learner_notebook_in_a_fresh_kernel(tmp_path):
    path = tmp_path / "01_learner.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in LEARNER])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    proc = subprocess.run([sys.executable, "-m", "ipukit.grade", str(path), "--json",
                           "--timeout", "2"], capture_output=True, text=True, timeout=180,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # never written
    assert (report["score"], report["max_score"]) == (4, 9)
    by_id = {e["id"]: e for e in report["exercises"]}
    assert [e["id"] for e in report["exercises"]] == ["01.1", "01.2", "01.3", "01.4"]
    assert set(report["exercises"][0]) >= {"id", "title", "status", "points", "max_points"}
    assert by_id["01.1"]["status"] == "passed"
    # 01.2 failed first, and passed when checked again after the endless loops
    assert by_id["01.2"]["status"] == "passed" and by_id["01.2"]["points"] == 2
    # the forged results of the last three cells are ignored
    assert by_id["01.3"]["status"] == "not solved" and by_id["01.3"]["message"] == "not yet"
    errors = {e["cell"]: e["error"] for e in report["errors"]}
    assert errors[8].startswith("ZeroDivisionError")
    # cells are numbered from 1, as JupyterLab shows them: cell 10 ran in the same kernel
    # after cell 9 was interrupted (kept == 42 held) and timed out itself; it ignores
    # interrupts, so cell 11 ran in a fresh kernel, where the cells without errors (the
    # import, the definitions) were re-run first
    assert errors[9].startswith("CellTimeoutError") and errors[10].startswith("CellTimeoutError")
    # cell 13 killed the kernel; cell 14 ran in a fresh one with the definitions restored
    assert errors[13].startswith("DeadKernelError")
    assert sorted(errors) == [8, 9, 10, 13]


def test_cli_scoreboard_of_an_untouched_exercise():
    if edited_exercise(ROOT / "exercises" / f"{MINE[0]}_exercises.ipynb"):
        pytest.skip(f"exercises/{MINE[0]}_exercises.ipynb was edited since it was generated")
    proc = subprocess.run([sys.executable, "-m", "ipukit.grade",
                           f"exercises/{MINE[0]}_exercises.ipynb"], capture_output=True, text=True,
                          timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    total = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("total"))
    assert total.split()[-1] == "0/9" and proc.stdout.count("NOT SOLVED YET") == 4


def test_cli_rejects_a_missing_notebook(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ipukit.grade", str(tmp_path / "no.ipynb")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "no notebook" in proc.stderr


def test_the_environment_variable_turns_on_grading_mode():
    code = ("from ipukit.grading import lesson01\n"
            "lesson01.check_superstep_cycles(lambda *args: 0)")
    env = {**os.environ, "IPUKIT_GRADING": "raise"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, cwd=ROOT)
    assert proc.returncode == 1 and "AssertionError: WRONG · Exercise 01.3" in proc.stderr


# -- issue 16: one shape for every check, escalating hints, HTML, budgets, pictures ----------

@pytest.fixture
def toy():
    """A throw-away exercise 99.1 with three hints and a budget in cycles."""

    @feedback.exercise("99.1", "a toy", points=1, budget="cycles",
                       hints=("nudge", "concept", "near-answer"))
    def check_toy(answer):
        got = answer(3)
        if got != 6:
            raise feedback.Wrong(f"expected 6, got {got}",
                                 picture=feedback.side_by_side(feedback.tile_grid([got % 4]),
                                                               feedback.tile_grid([2])))
        return feedback.Cost(used=answer.cost, budget=10, unit="cycle")

    yield check_toy
    feedback.EXERCISES.pop("99.1")


def answer_of(value, cost=10):
    def f(x):
        return value

    f.cost = cost
    return f


def test_the_decorator_runs_the_check_and_hints_escalate(toy):
    assert toy.exercise.check == "check_toy" and toy.__name__ == "check_toy"
    texts = [toy(answer_of(5), show=False).message for _ in range(4)]
    assert [t.splitlines()[-1] for t in texts] == [
        "hint 1 of 3: nudge", "hint 2 of 3: concept", "hint 3 of 3: near-answer",
        "hint 3 of 3: near-answer"]
    assert all(t.startswith("expected 6, got 5") for t in texts)


def test_a_single_hint_still_waits_for_the_second_failure():
    ex = feedback.Exercise("99.2", "x", 1, ("only",))
    assert [ex.hint_after(k) for k in (1, 2, 3)] == ["", "only", "only"]


def test_budget_gives_a_star_only_within_the_budget(toy):
    good, slow = toy(answer_of(6, cost=10), show=False), toy(answer_of(6, cost=11), show=False)
    assert (good.passed, good.star, slow.passed, slow.star) == (True, True, True, False)
    assert good.points == slow.points == 1
    assert "★ 10 cycles, within the budget of 10 cycles" in good.text()
    assert "11 cycles; the reference takes 10 cycles: match it for a ★" in slow.text()
    assert "★" in feedback.format_scoreboard([good]).splitlines()[2]


def test_feedback_is_coloured_html_with_a_text_fallback_and_no_emoji(toy):
    wrong = toy(answer_of(5), show=False)
    stub = toy(lambda x: (_ for _ in ()).throw(NotImplementedError("write it")), show=False)
    right = toy(answer_of(6), show=False)
    for r, colour, label in ((right, "#1a7f37", "PASSED"), (wrong, "#cf222e", "WRONG"),
                             (stub, "#9a6700", "NOT SOLVED YET")):
        assert colour in r.html() and r.text().startswith(label + " · Exercise 99.1")
        shown = r.text() + r.html()  # no emoji (★ is a text symbol)
        assert not any(ord(ch) >= 0x1F000 or ch in "✅❌⏳" for ch in shown)
    assert "<table" in wrong.html() and "yours:" in wrong.text()  # the picture, both ways
    assert right.text() == "PASSED · Exercise 99.1 · a toy: 1/1 point\n   " \
        "★ 10 cycles, within the budget of 10 cycles"


@pytest.mark.parametrize("n, word, text", [
    (1, "point", "1 point"), (2, "point", "2 points"), (1, "vertex", "1 vertex"),
    (5, "vertex", "5 vertices"), (0, "copy", "0 copies"), (2, "pass", "2 passes"),
    (1200, "byte", "1,200 bytes")])
def test_plurals(n, word, text):
    assert feedback.plural(n, word) == text


def test_a_timeline_picture_draws_every_bar():
    pic = feedback.timeline([("IPU0", 0, 2, "F0"), ("IPU1", 2, 4, "F0"), ("IPU0", 2, 3, "B")])
    lines = pic.text.splitlines()
    assert lines[0].strip().startswith("IPU0 |F") and lines[1].strip().startswith("IPU1 |")
    assert pic.html.count("position:absolute") == 3


def test_library_errors_lose_the_fix_they_suggest():
    exc = ValueError("bad gradient accumulation 5; use 16 or 24")
    assert feedback.library_error("your pipeline", exc) == \
        "your pipeline: ValueError: bad gradient accumulation 5."
    race = ("race in compute set 'step': vertex 4 writes element [4] of tensor 'cells'. "
            "Vertices of one compute set run in parallel. Fix: write to separate tensors")
    assert feedback.without_fix(race) == \
        "race in compute set 'step': vertex 4 writes element [4] of tensor 'cells'."


LESSON_MODULES = sorted((ROOT / "ipukit" / "grading").glob("lesson*.py"))


@pytest.mark.parametrize("path", LESSON_MODULES, ids=lambda p: p.stem)
def test_no_lesson_imports_another_lessons_private_helpers(path):
    import re

    found = re.findall(r"from \.(?:lesson\d\d|checks) import|import ipukit\.grading\.lesson",
                       path.read_text())
    assert not found, f"{path.name}: {found} (shared helpers live in ipukit.grading.common)"


# -- issue 26: judged checks ----------------------------------------------------------------

@pytest.mark.parametrize("lesson", sorted(p.name[:2] for p in (ROOT / "solutions").glob(
    "[0-9][0-9]_*.ipynb")))
def test_every_registered_exercise_has_a_trial(lesson):
    feedback.load_lesson(lesson)
    exercises = feedback.lesson_exercises(lesson)
    assert exercises and all(ex.trial is not None and ex.cases is not None and ex.answers
                             for ex in exercises), [ex.id for ex in exercises
                                                    if ex.trial is None]


def test_plain_data_round_trips_and_refuses_what_is_not():
    from ipukit.grading import plain

    value = {"a": np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2], "b": np.bool_(True),
             "c": [np.int64(3), float("nan"), float("-inf")], "d": np.array(2.5)}
    back = plain.decode(json.loads(json.dumps(plain.encode(value), allow_nan=False)))
    assert back["a"].tolist() == [[0.0, 2.0], [3.0, 5.0]] and back["a"].dtype == np.float32
    assert back["b"] is True and back["c"][0] == 3 and math.isnan(back["c"][1])
    assert back["c"][2] == -math.inf and back["d"].shape == () and back["d"] == 2.5
    for bad in (object(), np.array(["x"]), {1: 2}, {"__ndarray__": 1}, {"__float__": 1}):
        with pytest.raises(plain.NotPlainData):
            plain.encode(bad)
    for bad in ({"__float__": "1e999"}, {"__ndarray__": "!!"}, object()):
        with pytest.raises(plain.NotPlainData):
            plain.decode(bad)


def test_an_array_whose_header_claims_more_than_it_holds_is_refused_unread():
    import base64

    from ipukit.grading import plain

    buf = io.BytesIO()
    np.save(buf, np.zeros(4))
    lie = buf.getvalue().replace(b"'shape': (4,), }", b"'shape': (99999999999,), }")
    with pytest.raises(plain.NotPlainData, match="that holds"):
        plain.decode({"__ndarray__": base64.b64encode(lie).decode()})


def test_the_judge_turns_unreadable_outputs_into_wrong_answers():
    ex = lesson01.check_superstep_cycles.exercise
    cases = feedback.notebook_cases(ex)
    for outputs, message in [
            ("x", "the trial gave no readable results"),
            ([5], "case 1: the trial gave no readable result"),
            ([{"raised": "ValueError: " + "x" * 10_000}], "your code raised ValueError"),
            ([{"ok": [1]}] * len(cases), "step '")]:
        with pytest.raises(feedback.Wrong, match=message) as caught:
            feedback.judge(ex, outputs, cases)
        assert len(str(caught.value)) < 4_500
    feedback.reset()
    r = feedback.result_of(ex, cases, [{"wrong": "no"}])
    assert (r.status, r.message) == ("failed", "no")  # no hint: the judge saw no attempt
    assert feedback.results() == {} and feedback.previous_failures("01.3") == 0
