"""``python -m ipukit.grade``: bounded in time, sandboxed, scores only from the kit's own
checks (issue 11, points 2-5). Each test grades a small notebook in a fresh kernel."""

import contextlib
import hashlib
import hmac
import io
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ipukit.grade import SIGNED_MIME, GradingError, grade, main, signed_result
from ipukit.grading.execute import TimeLimitError, positive_seconds, run_notebook
from ipukit.grading.feedback import RESULT_MIME

ROOT = Path(__file__).resolve().parents[1]
SOLVED_01 = [  # lesson 01's 01.1 and 01.2 solved, as a learner writes them
    "import ipukit as ipu\nfrom ipukit import grading\nfrom ipukit.grading import lesson01\n"
    "from ipukit.grading.lesson01 import Scale, reference_placement\n"
    "from IPython.display import display",
    "def build_scale(graph, x, y):\n    cs = graph.add_compute_set('scale')\n"
    "    graph.add_vertex(cs, Scale, {'x': x, 'out': y}, tile=0)\n"
    "    return ipu.Execute(cs)",
    "def place_vertices(cycles, num_tiles):\n"
    "    return reference_placement(cycles, num_tiles)",
    "lesson01.check_placement(place_vertices)",
    "def superstep_cycles(*args):\n    raise NotImplementedError('not yet')",
]
PASSED = repr({RESULT_MIME: {"id": "01.3", "title": "x", "status": "passed", "points": 2,
                            "max_points": 2, "message": ""}})


def notebook(path: Path, cells, lesson=None) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    if lesson:
        nb.metadata["ipukit"] = {"lesson": lesson}
    nbformat.write(nb, path)
    return path


def cli(*args, timeout=180):
    proc = subprocess.run([sys.executable, "-m", "ipukit.grade", *map(str, args), "--json"],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return proc


def graded(*args) -> dict:
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def statuses(report) -> dict:
    return {e["id"]: (e["status"], e["points"]) for e in report["exercises"]}


# -- point 2: every grade ends in bounded time ------------------------------------------------

@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "-inf", "soon"])
@pytest.mark.parametrize("option", ["--timeout", "--total-timeout"])
def test_a_time_limit_must_be_positive_finite_seconds(tmp_path, bad, option, capsys):
    path = notebook(tmp_path / "01_me.ipynb", ["pass"])
    with pytest.raises(SystemExit) as stop:
        main([str(path), f"{option}={bad}"])
    assert stop.value.code == 2 and "number of seconds" in capsys.readouterr().err
    with pytest.raises(TimeLimitError, match="number of seconds"):
        grade(path, **{option[2:].replace("-", "_"): bad})


def test_positive_seconds_accepts_fractions():
    assert positive_seconds("2.5") == 2.5 and positive_seconds(1) == 1.0


def test_a_fractional_timeout_stops_an_endless_loop(tmp_path):
    path = notebook(tmp_path / "01_me.ipynb", SOLVED_01 + ["while True:\n    pass"])
    report = graded(path, "--timeout", "2.5")
    assert report["errors"] == [{"cell": 6, "shown_as": "[6]", "error": "CellTimeoutError: the "
                                 "cell ran longer than 2.5 s and was stopped (an endless "
                                 "loop?)"}]
    assert report["score"] == 4  # the checks ran after it


def test_the_total_budget_counts_restarts_and_names_the_cells_that_did_not_run(tmp_path):
    # each dead kernel replays the earlier sleeps: 2 + 4 + 6 + ... s without a budget
    cells = ["import os, time"] + ["time.sleep(2)", "os._exit(1)"] * 6
    path = notebook(tmp_path / "01_me.ipynb", cells)
    report = graded(path, "--timeout", "30", "--total-timeout", "7")
    assert report["stopped"] == "the notebook's total time limit of 7 s was reached"
    assert report["not_run"] and report["not_run"] == list(range(report["not_run"][0], 14))
    assert report["not_run"][0] < 13  # the replays took their share of the 7 s
    assert report["score"] == 0 and all(
        e["message"].startswith("the check did not run") for e in report["exercises"])


def test_output_is_capped_per_cell():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in [
        "for i in range(3000):\n    print('x' * 999)", "print('y' * 3_000_000)",
        "raise ValueError('z' * 100_000)", "print('small')"]])
    run = run_notebook(nb, timeout=60, total_timeout=120)
    for cell in nb.cells[:2]:
        text = "".join(o.get("text", "") for o in cell.outputs if o.name == "stdout")
        assert len(text) == 1_000_000 and set(text) <= set("xy\n")  # the first 1 MB is kept
        assert cell.outputs[-1].text.startswith("\n[output truncated: this cell's output "
                                                "passed 1,000,000 characters")
    assert nb.cells[2].outputs[-1].ename == "ValueError"  # an error is always kept, short
    assert len(nb.cells[2].outputs[-1].evalue) == 10_000
    assert nb.cells[3].outputs[0].text == "small\n" and run.not_run == []


# -- point 3: a scratch copy of the folder ------------------------------------------------------

def test_relative_writes_and_deletes_do_not_touch_the_notebook_or_its_neighbours(tmp_path):
    neighbour = notebook(tmp_path / "01_someone_else.ipynb", SOLVED_01)
    path = notebook(tmp_path / "01_me.ipynb", SOLVED_01 + [
        "import os\nos.remove('01_me.ipynb')\nopen('01_someone_else.ipynb', 'w').write('x')"
        "\nopen('new_file.txt', 'w').write('x')"])
    before = {p: p.read_bytes() for p in (path, neighbour)}
    report = graded(path)
    assert report["errors"] == [] and report["score"] == 4
    assert {p: p.read_bytes() for p in (path, neighbour)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["01_me.ipynb",
                                                           "01_someone_else.ipynb"]


# -- point 4: scores only from the grader's own checks ----------------------------------------

def test_an_answer_that_shows_passed_and_then_loops_scores_nothing(tmp_path):
    path = notebook(tmp_path / "01_me.ipynb", SOLVED_01[:2] + [
        "def superstep_cycles(*args):\n"
        f"    display({PASSED}, raw=True)\n    while True:\n        pass",
        "lesson01.check_superstep_cycles(superstep_cycles)"])
    report = graded(path, "--timeout", "3")
    assert statuses(report)["01.3"] == ("failed", 0)
    assert report["exercises"][2]["message"].startswith("the check stopped: CellTimeoutError")


def test_patched_check_and_recording_functions_score_nothing(tmp_path):
    path = notebook(tmp_path / "01_me.ipynb", SOLVED_01 + [
        "from ipukit.grading import feedback\n"
        "real_run = feedback.run\n"
        "feedback.run = lambda id, body, show=True: real_run(id, lambda: None, show)\n"
        "real = feedback._run\n"
        "feedback._run = lambda ex, body, show: real(ex, lambda: None, show)\n"
        "lesson01.check_superstep_cycles = lambda f: real_run('01.3', lambda: None)\n"
        # builtins shadowed in the learner's namespace
        "def compile(*args):\n    return __builtins__.compile("
        "'import ipukit.grading.feedback as f\\nf.run(\"01.3\", lambda: None)', 'x', 'exec')",
        "lesson01.check_superstep_cycles(superstep_cycles)",
        # replayed 'passed' output from a look-alike of the check cell
        f"class Fake:\n    def check_superstep_cycles(self, f):\n"
        f"        display({PASSED}, raw=True)\nlesson01 = Fake()",
        "lesson01.check_superstep_cycles(superstep_cycles)"])
    report = graded(path)
    assert statuses(report) == {"01.1": ("passed", 2), "01.2": ("passed", 2),
                                "01.3": ("not solved", 0), "01.4": ("failed", 0)}
    assert report["exercises"][2]["message"] == "not yet"


def test_an_edited_check_cell_in_the_kits_own_exercise_file_scores_nothing(tmp_path,
                                                                          monkeypatch):
    """A learner works in exercises/ in place and edits the check cell there."""
    import ipukit.grade as grade_module

    kit = tmp_path / "kit"
    (kit / "exercises").mkdir(parents=True)
    (kit / "solutions").mkdir()
    for folder in ("exercises", "solutions"):
        (kit / folder / "01_ipu_and_bsp.ipynb").write_bytes(
            (ROOT / folder / "01_ipu_and_bsp.ipynb").read_bytes())
    path = kit / "exercises" / "01_ipu_and_bsp.ipynb"
    nb = nbformat.read(path, as_version=4)
    forged = ("import ipukit.grading.feedback as f\nf.run('01.3', lambda: None)"
              "  # lesson01.check_superstep_cycles(superstep_cycles)")
    cell = next(c for c in nb.cells if "check_superstep_cycles(" in c.source)
    cell.source = forged
    nbformat.write(nb, path)
    monkeypatch.setattr(grade_module, "EXERCISE_DIR", kit / "exercises")
    monkeypatch.setattr(grade_module, "SOLUTION_DIR", kit / "solutions")
    assert dict(grade_module.kit_checks("01"))["01.3"] == \
        "lesson01.check_superstep_cycles(superstep_cycles)"
    report = grade(path, timeout=30)
    assert statuses(report)["01.3"] == ("not solved", 0) and report["score"] == 0


def test_only_this_runs_signature_counts():
    key = b"k" * 64
    payload = json.dumps({"id": "01.1", "status": "passed", "message": ""})

    def cell(payload, mac):
        c = nbformat.v4.new_code_cell("")
        c.outputs = [nbformat.v4.new_output("display_data", data={
            SIGNED_MIME: {"payload": payload, "mac": mac}})]
        return c

    good = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
    assert signed_result(cell(payload, good), "01.1", key)["status"] == "passed"
    assert signed_result(cell(payload, good), "01.2", key) is None  # another exercise
    assert signed_result(cell(payload, good), "01.1", b"x" * 64) is None  # another run
    assert signed_result(cell(payload.replace("01.1", "01.2"), good), "01.2", key) is None


# -- point 5: the maximum is the notebook's own lesson's ----------------------------------------

def test_a_lesson_02_solution_named_01_is_graded_as_lesson_01(tmp_path):
    nb = nbformat.read(ROOT / "solutions" / "02_graphs_tensors_streams.ipynb", as_version=4)
    nb.metadata.pop("ipukit", None)
    nbformat.write(nb, tmp_path / "01_x.ipynb")
    report = graded(tmp_path / "01_x.ipynb")
    assert (report["lesson"], report["score"], report["max_score"]) == ("01", 0, 9)
    assert [e["id"] for e in report["exercises"]] == ["01.1", "01.2", "01.3", "01.4"]


@pytest.mark.parametrize("name", ["mine.ipynb", "99_mine.ipynb"])
def test_a_notebook_whose_lesson_cannot_be_told_is_a_clear_error(tmp_path, name):
    path = notebook(tmp_path / name, ["pass"])
    proc = cli(path, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert ("cannot tell which lesson" if name == "mine.ipynb" else
            "lesson 99 has no graded exercises") in proc.stderr
    with pytest.raises(GradingError):
        with contextlib.redirect_stdout(io.StringIO()):
            grade(path)
