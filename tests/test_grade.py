"""``python -m ipukit.grade``: bounded in time, sandboxed, scores only from the judge
(issues 11 and 26). Most tests grade a small notebook in a fresh kernel; the attacks of
issue 26 start from an untouched copy of ``exercises/01`` (honest score 0 of 9) and must
still score 0."""

import asyncio
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from queue import Empty

import nbformat
import pytest

import ipukit.grade as grade_module
from ipukit.grade import GradingError, grade, main
from ipukit.grading import sandbox
from ipukit.grading.execute import (
    TimeLimitError,
    _client_class,
    positive_seconds,
    run_notebook,
)
from ipukit.grading.feedback import RESULT_MIME
from ipukit.grading.make_exercises import edited_exercise

ROOT = Path(__file__).resolve().parents[1]
EXERCISE_01 = sorted((ROOT / "exercises").glob("01_*.ipynb"))[0]
SOLUTION_01 = ROOT / "solutions" / "01_ipu_and_bsp_solutions.ipynb"
LANDLOCK = pytest.mark.skipif(sandbox.landlock_abi() == 0, reason=sandbox.landlock_missing())
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


def untouched(path: Path, *cells) -> Path:
    """An untouched copy of exercises/01 with ``cells`` added at its end."""
    if edited_exercise(EXERCISE_01):
        pytest.skip(f"{EXERCISE_01} was edited since it was generated (a learner's work)")
    nb = nbformat.read(EXERCISE_01, as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)
    return path


def cli(*args, timeout=180, **kw):
    return subprocess.run([sys.executable, "-m", "ipukit.grade", *map(str, args), "--json"],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw)


def graded(*args) -> dict:
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def statuses(report) -> dict:
    return {e["id"]: (e["status"], e["points"]) for e in report["exercises"]}


def quietly(*args, **kw) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        return grade(*args, **kw)


# -- issue 11: every grade ends in bounded time -------------------------------------------------

@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "-inf", "soon"])
@pytest.mark.parametrize("option", ["--timeout", "--total-timeout"])
def test_a_time_limit_must_be_positive_finite_seconds(tmp_path, bad, option, capsys):
    path = notebook(tmp_path / "01_me.ipynb", ["pass"])
    with pytest.raises(SystemExit) as stop:
        main([str(path), f"{option}={bad}"])
    assert stop.value.code == 2 and "number of seconds" in capsys.readouterr().err
    with pytest.raises(TimeLimitError, match="number of seconds"):
        grade(path, **{option[2:].replace("-", "_"): bad})


@pytest.mark.parametrize("option, bad", [("--seed", "-1"), ("--seed", "x"),
                                         ("--scratch-limit", "0"), ("--scratch-limit", "nan")])
def test_seed_and_scratch_limit_are_checked(tmp_path, option, bad, capsys):
    path = notebook(tmp_path / "01_me.ipynb", ["pass"])
    with pytest.raises(SystemExit) as stop:
        main([str(path), f"{option}={bad}"])
    assert stop.value.code == 2 and option in capsys.readouterr().err


def test_positive_seconds_accepts_fractions():
    assert positive_seconds("2.5") == 2.5 and positive_seconds(1) == 1.0


def test_a_fractional_timeout_stops_an_endless_loop(tmp_path):
    path = notebook(tmp_path / "01_me.ipynb", SOLVED_01 + ["while True:\n    pass"])
    report = quietly(path, timeout=2.5)
    assert report["errors"] == [{"cell": 6, "shown_as": "[6]", "error": "CellTimeoutError: the "
                                 "cell ran longer than 2.5 s and was stopped (an endless "
                                 "loop?)"}]
    assert report["score"] == 4  # the checks ran after it


def test_the_total_budget_counts_restarts_and_names_the_cells_that_did_not_run(tmp_path):
    # each dead kernel replays the earlier sleeps: 2 + 4 + 6 + ... s without a budget
    cells = ["import os, time"] + ["time.sleep(2)", "os._exit(1)"] * 6
    path = notebook(tmp_path / "01_me.ipynb", cells)
    report = quietly(path, timeout=30, total_timeout=7)
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


class _SilentChannel:
    async def get_msg(self, timeout=None):
        await asyncio.sleep(timeout)
        raise Empty


class _SilentKernelClient:  # a kernel that sends nothing: the cell runs on
    iopub_channel = _SilentChannel()


def _spinning_guard(client):
    calls = []

    def malformed(cell, what):
        calls.append(what)
        if len(calls) > 100:
            raise RuntimeError(f"the output poll spins without yielding: {what}")
    client.malformed = malformed
    return calls


def test_a_cell_that_times_out_leaves_no_output_poll_running():
    # nbclient keeps a timed-out cell's output poll (CellTimeoutError is a
    # CellControlSignal); on the grader's one event loop it ran on into later cells, and
    # spun for ever once its kernel was replaced: the CLI blocked past every budget
    from nbclient.exceptions import CellTimeoutError

    client = _client_class()(nbformat.v4.new_notebook())
    client.kc = _SilentKernelClient()
    cell = nbformat.v4.new_code_cell("while True:\n    pass")
    calls = _spinning_guard(client)

    async def time_out():
        poll = asyncio.ensure_future(client._async_poll_output_msg("id", cell, 0))
        await asyncio.sleep(0.3)  # it polls: nothing comes
        with pytest.raises(CellTimeoutError):
            await client._async_handle_timeout(2, cell)
        await asyncio.sleep(0.3)
        running = not poll.done()
        client.kc = None  # the kernel is replaced
        await asyncio.sleep(0.3)
        return running

    assert asyncio.run(asyncio.wait_for(time_out(), 10)) is False and calls == []


def test_an_output_poll_ends_when_its_kernel_is_gone():
    client = _client_class()(nbformat.v4.new_notebook())
    client.kc = None  # shut down (nbclient's cleanup)
    calls = _spinning_guard(client)
    asyncio.run(asyncio.wait_for(
        client._async_poll_output_msg("id", nbformat.v4.new_code_cell("1"), 0), 10))
    assert calls == []


# -- issue 11: a scratch copy of the folder -----------------------------------------------------

def test_relative_writes_and_deletes_do_not_touch_the_notebook_or_its_neighbours(tmp_path):
    neighbour = notebook(tmp_path / "01_someone_else.ipynb", SOLVED_01)
    path = notebook(tmp_path / "01_me.ipynb", SOLVED_01 + [
        "import os\nos.remove('01_me.ipynb')\nopen('01_someone_else.ipynb', 'w').write('x')"
        "\nopen('new_file.txt', 'w').write('x')"])
    before = {p: p.read_bytes() for p in (path, neighbour)}
    report = quietly(path)
    assert report["errors"] == [] and report["score"] == 4
    assert {p: p.read_bytes() for p in (path, neighbour)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["01_me.ipynb",
                                                           "01_someone_else.ipynb"]


# -- issue 11: scores only from the kit's checks ----------------------------------------------

def test_an_answer_that_shows_passed_and_then_loops_scores_nothing(tmp_path):
    path = notebook(tmp_path / "01_me.ipynb", SOLVED_01[:2] + [
        "def superstep_cycles(*args):\n"
        f"    display({PASSED}, raw=True)\n    while True:\n        pass",
        "lesson01.check_superstep_cycles(superstep_cycles)"])
    report = quietly(path, timeout=3)
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
    report = quietly(path)
    assert statuses(report) == {"01.1": ("passed", 2), "01.2": ("passed", 2),
                                "01.3": ("not solved", 0), "01.4": ("failed", 0)}
    assert report["exercises"][2]["message"] == "not yet"
    assert report["exercises"][3]["message"] == ("the notebook defines no "
                                                 "build_ring_difference (the check calls it "
                                                 "by this name)")


# -- issue 11: the maximum is the notebook's own lesson's --------------------------------------

def test_a_lesson_02_solution_named_01_is_graded_as_lesson_01(tmp_path):
    nb = nbformat.read(ROOT / "solutions" / "02_graphs_tensors_streams_solutions.ipynb",
                       as_version=4)
    nb.metadata.pop("ipukit", None)
    nbformat.write(nb, tmp_path / "01_x.ipynb")
    report = quietly(tmp_path / "01_x.ipynb")
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
        quietly(path)


def test_the_solution_scores_full_marks_with_stars_costs_seed_and_sandbox():
    """Issues 16 and 31: a budget passed within it carries its star and its figure."""
    report = graded(SOLUTION_01, "--seed", "12345")
    assert (report["score"], report["max_score"], report["seed"]) == (9, 9, 12345)
    assert {e["id"]: e["star"] for e in report["exercises"]} == {
        "01.1": True, "01.2": True, "01.3": False, "01.4": False}
    costs = {e["id"]: e["cost"] for e in report["exercises"]}
    assert costs["01.1"].startswith("★ ") and "cycles, within the budget of" in costs["01.1"]
    assert costs["01.2"].startswith("★ ") and costs["01.3"] == costs["01.4"] == ""
    assert report["sandbox"] == (f"landlock ABI {sandbox.landlock_abi()}"
                                 if sandbox.landlock_abi() else report["sandbox"])
    assert report["sandbox"].startswith(("landlock ABI ", "none: "))


def test_the_same_seed_draws_the_same_cases_and_another_seed_others(tmp_path):
    # right on every fixed case, wrong on others: only the drawn cases can catch it
    path = untouched(tmp_path / "01_me.ipynb",
                     "import math\n"
                     "def superstep_cycles(sync, bytes_in, bytes_out, compute, r_in, r_out,"
                     " bpc=4):\n"
                     "    busiest = int(np.maximum(bytes_in, bytes_out).max())\n"
                     "    back = int(np.maximum(r_in, r_out).max())\n"
                     "    return sync + math.ceil(busiest / bpc) + int(compute.max()) + "
                     "math.ceil(back / bpc) + int(compute.sum()) % 2")
    one, again, other = (quietly(path, seed=s) for s in (1, 1, 2))
    message = [r["exercises"][2]["message"] for r in (one, again, other)]
    assert message[0] == message[1] and message[0] != message[2]
    assert one["seed"] == 1 and other["seed"] == 2
    assert quietly(path)["seed"] not in (1, 2)  # a fresh secret seed otherwise


# -- issue 26, score forging: each trick on an untouched exercise still scores 0 ---------------

#: The forgeries: each beat the grader before the judge (9/9, numpy.isclose 5/9). Each
#: also tries what it can against the judge: rewrite, patch or add to what its cells send.
TRICKS = {
    "input_transformers_cleanup": """\
def forge(lines):
    src = ''.join(lines).replace('r.status if ok else ""', '"passed"')
    src = src.replace('feedback.run_trials(', '(lambda ex, cases, f: [{"ok": 0}] * len(cases))(')
    return src.splitlines(True)
get_ipython().input_transformers_cleanup.append(forge)""",
    "ast_transformers": """\
import ast
class Forge(ast.NodeTransformer):
    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr == 'status' and isinstance(node.ctx, ast.Load):  # r.status: 'passed'
            return ast.copy_location(ast.Constant('passed'), node)
        if node.attr == 'run_trials':  # feedback.run_trials -> a forged one
            return ast.copy_location(ast.parse('lambda ex, cases, f: [{"ok": 0}] * len(cases)',
                                               mode='eval').body, node)
        return node
get_ipython().ast_transformers.append(Forge())""",
    "pre_run_cell hook": """\
import dataclasses
def hook(info):
    ns = get_ipython().user_ns
    for k, v in list(ns.items()):
        if k.startswith('_ipukit_result_') and isinstance(v, tuple) and v[1] is not None:
            ns[k] = (v[0], dataclasses.replace(v[1], status='passed'))
    from ipukit.grading import feedback
    feedback.run_trials = lambda ex, cases, f: [{"ok": 0} for _ in cases]
get_ipython().events.register('pre_run_cell', hook)""",
    "json.dumps patched": """\
import json
real_dumps = json.dumps
def forge(obj):
    if isinstance(obj, dict):
        obj = {k: forge(v) for k, v in obj.items()}
        if 'status' in obj:
            obj['status'] = 'passed'
        if isinstance(obj.get('outputs'), list):
            obj['outputs'] = [{'ok': 0}] * len(obj['outputs'])
    return obj
json.dumps = lambda obj, *a, **k: real_dumps(forge(obj), *a, **k)""",
    "builtins.compile patched": """\
import builtins
real_compile = builtins.compile
def compile(src, filename, mode, *a, **k):
    if isinstance(src, str) and src.startswith('lesson01.check_'):
        name = src.split('(')[0].split('.')[1]
        src = ('from ipukit.grading import feedback as f\\n'
               f'f.run(next(e.id for e in f.EXERCISES.values() if e.check == {name!r}), '
               'lambda: None)')
    if isinstance(src, str) and 'feedback.run_trials(' in src:
        src = src.replace('feedback.run_trials(', '(lambda ex, c, f: [{"ok": 0}] * len(c))(')
    return real_compile(src, filename, mode, *a, **k)
builtins.compile = compile""",
    "sys.settrace reads the grader's key": """\
import hashlib, hmac, json, re, sys
from IPython.display import publish_display_data
def tracer(frame, event, arg):
    if event == 'call' and frame.f_code.co_name == '_ipukit_report':
        consts = frame.f_code.co_consts
        key = next(c for c in consts if isinstance(c, bytes) and len(c) == 64)
        ex = next(c for c in consts if isinstance(c, str) and re.fullmatch(r'\\d\\d\\.\\d+', c))
        payload = json.dumps({'id': ex, 'status': 'passed', 'message': '', 'star': True})
        mac = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
        publish_display_data({'application/vnd.ipukit.signed-result+json':
                              {'payload': payload, 'mac': mac}})
    if event == 'call' and frame.f_code.co_name == '_ipukit_trial':
        publish_display_data({'application/vnd.ipukit.trial+json':
                              {'outputs': [{'ok': 0}] * 40}})
    return None
sys.settrace(tracer)""",
    "audit hook reads the grader's cell": """\
import hashlib, hmac, json, re, sys
from IPython.display import publish_display_data
def hook(event, args):
    if event != 'compile' or not isinstance(args[0], (str, bytes)):
        return
    src = args[0].decode() if isinstance(args[0], bytes) else args[0]
    key = re.search(r"hmac\\.new\\((b'[0-9a-f]{64}')", src)
    ex = re.search(r"r\\.id == '(\\d\\d\\.\\d+)'", src)
    if key and ex:
        payload = json.dumps({'id': ex.group(1), 'status': 'passed', 'message': ''})
        mac = hmac.new(eval(key.group(1)), payload.encode(), hashlib.sha256).hexdigest()
        publish_display_data({'application/vnd.ipukit.signed-result+json':
                              {'payload': payload, 'mac': mac}})
    if '_ipukit_trial' in src:
        publish_display_data({'application/vnd.ipukit.trial+json': {'outputs': []}})
sys.addaudithook(hook)""",
    "sys.meta_path finder": """\
import importlib.abc, importlib.util, sys
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != 'ipukit.grading.feedback':
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        real_exec = spec.loader.exec_module
        def exec_module(module):
            real_exec(module)
            real_run = module._run
            module._run = lambda ex, body, show: real_run(ex, lambda: None, show)
            module.run_trials = lambda ex, cases, f: [{'ok': 0} for _ in cases]
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Finder())
for name in [m for m in sys.modules if m.startswith('ipukit.grading')]:
    del sys.modules[name]""",
    "a thread re-patches the recorder": """\
import sys, threading, time
def loop():
    while True:
        m = sys.modules.get('ipukit.grading.feedback')
        if hasattr(m, '_run') and not getattr(m._run, 'forged', False):
            real = m._run
            def run(ex, body, show, real=real):
                return real(ex, lambda: None, show)
            run.forged = True
            m._run = run
            m.run_trials = lambda ex, cases, f: [{'ok': 0} for _ in cases]
        time.sleep(0)
threading.Thread(target=loop, daemon=True).start()""",
    "numpy.isclose patched": """\
import numpy as np
np.isclose = lambda a, b, *args, **kw: np.ones(np.broadcast(a, b).shape, bool)
def build_scale(graph, x, y):
    return ipu.Sequence()
def build_ring_difference(graph, x, out):
    return ipu.Sequence()""",
}


@pytest.mark.parametrize("trick", TRICKS)
def test_a_forging_trick_scores_nothing(tmp_path, trick):
    report = quietly(untouched(tmp_path / "01_me.ipynb", TRICKS[trick]))
    assert report["score"] == 0, report["exercises"]
    assert report["max_score"] == 9 and not any(e["star"] for e in report["exercises"])


SHADOW = """\
import importlib, os, sys
here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != here]
del sys.modules['ipukit']
real = importlib.import_module('ipukit')  # the kit itself, then patched at every import
import ipukit.grading.feedback as f
""" + TRICKS["sys.meta_path finder"] + "\n" + TRICKS["a thread re-patches the recorder"]


def test_a_shadow_ipukit_package_beside_the_notebook_scores_nothing(tmp_path):
    (tmp_path / "ipukit").mkdir()
    (tmp_path / "ipukit" / "__init__.py").write_text(SHADOW)
    report = quietly(untouched(tmp_path / "01_me.ipynb"))
    assert report["score"] == 0, report["exercises"]


def test_edited_check_cells_in_the_kits_own_solutions_change_nothing(tmp_path, monkeypatch):
    """A learner working in the repository edits the check cells of solutions/01 (and the
    exercise notebook there): the judge reads no notebook of the kit."""
    kit = tmp_path / "kit"
    for folder, source in (("exercises", EXERCISE_01), ("solutions", SOLUTION_01)):
        (kit / folder).mkdir(parents=True)
        nb = nbformat.read(source, as_version=4)
        for cell in nb.cells:
            if "lesson01.check_" in cell.source:
                name = cell.source.split("(")[0].split(".")[1]
                cell.source = (
                    "import ipukit.grading.feedback as f\nf.run(next(e.id for e in "
                    f"f.EXERCISES.values() if e.check == {name!r}), lambda: None)"
                    f"  # {cell.source}")
        nbformat.write(nb, kit / folder / f"01_ipu_and_bsp_{folder}.ipynb")
    # the grader before the judge read these folders (they no longer exist)
    monkeypatch.setattr(grade_module, "EXERCISE_DIR", kit / "exercises", raising=False)
    monkeypatch.setattr(grade_module, "SOLUTION_DIR", kit / "solutions", raising=False)
    path = untouched(tmp_path / "01_me.ipynb")
    report = quietly(path)
    assert report["score"] == 0 and statuses(report)["01.3"] == ("not solved", 0)


def test_a_learners_extra_notebook_in_the_kits_exercises_changes_nothing(tmp_path):
    extra = ROOT / "exercises" / f"01_copy_{uuid.uuid4().hex[:8]}.ipynb"
    nb = nbformat.read(EXERCISE_01, as_version=4)
    nb.cells[-1].source += "\n# the learner's work"
    try:
        nbformat.write(nb, extra)
        report = graded(untouched(tmp_path / "01_me.ipynb"))
    finally:
        extra.unlink(missing_ok=True)
    assert (report["score"], report["max_score"]) == (0, 9)


KIT_FILE = ROOT / "ipukit" / "grading" / "feedback.py"


def rewrite(kit_file: Path) -> str:
    """A cell that makes every check of ``kit_file`` (the kit's feedback.py) pass."""
    return f"""\
from pathlib import Path
kit = Path({str(kit_file)!r})
try:
    with open(kit, 'a') as f:
        f.write('\\n_forged_run = _run\\n'
                'def _run(ex, body, show):\\n'
                '    return _forged_run(ex, lambda: None, show)\\n'
                'result_of = lambda ex, cases, outputs: _result(ex, "passed", "", None, None)\\n')
except PermissionError as exc:
    print('refused:', exc)"""


@pytest.fixture
def kit_file_kept():
    """Whatever a test's notebook does, the kit's file is as it was afterwards."""
    before = KIT_FILE.read_bytes()
    yield before
    if KIT_FILE.read_bytes() != before:
        KIT_FILE.write_bytes(before)
        pytest.fail("the kit's file was left changed")


@pytest.fixture(autouse=True)
def backups(tmp_path, monkeypatch) -> Path:
    """Where the grader keeps the kit's changed files (not beside the real kit)."""
    folder = tmp_path / "backups"
    monkeypatch.setattr(grade_module, "BACKUPS", folder)
    return folder


@pytest.fixture
def kit_copy(tmp_path, monkeypatch):
    """The grader pointed at a copy of the kit, for tests that edit the kit's files while
    it grades (edits to the real kit would void the grades other test workers are taking
    at the same time). Returns the copy's ``grading/feedback.py``."""
    copy = tmp_path / "kit" / "ipukit"
    shutil.copytree(grade_module.KIT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(grade_module, "KIT", copy)
    return copy / "grading" / "feedback.py"


def test_an_edit_saved_to_the_kit_during_grading_is_kept_and_the_grade_void(
        tmp_path, kit_copy, backups, monkeypatch, capsys):
    """An instructor saves an edit of a kit file while a batch is being graded: that grade
    is void (exit status 2), the kit is restored for the next notebook, and the edit is in
    the backup folder the message names, not lost."""
    kit_file_kept = kit_copy.read_bytes()
    edited = kit_file_kept + b"\n# an instructor's edit, saved during grading\n"
    real_run = grade_module.run_notebook

    def instructor_saves_during_the_run(*args, **kw):
        kit_copy.write_bytes(edited)
        return real_run(*args, **kw)

    monkeypatch.setattr(grade_module, "run_notebook", instructor_saves_during_the_run)
    path = notebook(tmp_path / "01_me.ipynb", ["pass"])
    assert main([str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no report for a void grade
    (kept,) = backups.glob("*/grading/feedback.py")
    assert kept.read_bytes() == edited  # the edit, moved to the backup
    assert kit_copy.read_bytes() == kit_file_kept  # the kit restored for the next one
    assert "this grade is void" in err and f"were moved to {kept.parents[1]} first" in err
    assert "(grading/feedback.py)" in err
    monkeypatch.setattr(grade_module, "run_notebook", real_run)
    assert quietly(untouched(tmp_path / "01_next.ipynb"))["score"] == 0  # nothing carried
    assert kit_copy.read_bytes() == kit_file_kept


def test_a_file_added_to_the_kit_is_moved_to_the_backup_too(
        tmp_path, kit_copy, backups, monkeypatch):
    added = grade_module.KIT / "grading" / f"planted_{uuid.uuid4().hex}.py"
    real_run = grade_module.run_notebook

    def plant(*args, **kw):
        added.write_text("forged = True\n")
        return real_run(*args, **kw)

    monkeypatch.setattr(grade_module, "run_notebook", plant)
    try:
        with pytest.raises(grade_module.KitChanged, match=f"grading/{added.name}"):
            quietly(notebook(tmp_path / "01_me.ipynb", ["pass"]), total_timeout=20)
        assert not added.exists()
        (kept,) = backups.glob(f"*/grading/{added.name}")
        assert kept.read_text() == "forged = True\n"
    finally:
        added.unlink(missing_ok=True)


def test_the_kit_is_restored_even_where_no_backup_folder_can_be_made(
        tmp_path, kit_copy, monkeypatch):
    monkeypatch.setattr(grade_module, "BACKUPS", Path("/proc/no-such-folder"))
    monkeypatch.setattr(grade_module.tempfile, "mkdtemp", lambda **kw: (_ for _ in ()).throw(
        OSError(28, "No space left on device")))
    kit_file_kept = kit_copy.read_bytes()
    before = sandbox.KitSnapshot(grade_module.KIT)
    kit_copy.write_bytes(kit_file_kept + b"\n# edited\n")
    with pytest.raises(grade_module.KitChanged, match="No folder could be made to keep"):
        grade_module._kit_unchanged(before)
    assert kit_copy.read_bytes() == kit_file_kept


@LANDLOCK
def test_a_cell_cannot_rewrite_the_kit_and_the_next_notebook_keeps_its_score(tmp_path,
                                                                              kit_file_kept):
    report = quietly(untouched(tmp_path / "01_me.ipynb", rewrite(KIT_FILE)))
    assert report["score"] == 0 and KIT_FILE.read_bytes() == kit_file_kept
    assert quietly(untouched(tmp_path / "01_next.ipynb"))["score"] == 0


def test_without_landlock_a_rewritten_kit_voids_the_grade_and_is_restored(tmp_path,
                                                                         kit_copy):
    kit_file_kept = kit_copy.read_bytes()
    with pytest.raises(grade_module.KitChanged, match="this grade is void: the kit's files "
                       r"changed while the notebook ran \(grading/feedback.py\)"):
        quietly(untouched(tmp_path / "01_me.ipynb", rewrite(kit_copy)), landlock=False)
    assert kit_copy.read_bytes() == kit_file_kept  # restored by the grader
    report = quietly(untouched(tmp_path / "01_next.ipynb"), landlock=False)
    assert report["score"] == 0 and report["sandbox"].startswith("none: Landlock was not")


def test_a_kernel_that_never_starts_is_still_checked_for_changes_to_the_kit(tmp_path,
                                                                         kit_copy):
    """A file beside the notebook runs in place of the kernel (``python -m`` looks in the
    working folder first), rewrites the kit and exits: the grade is void all the same."""
    kit_file_kept = kit_copy.read_bytes()
    (tmp_path / "ipykernel_launcher.py").write_text(
        f"open({str(kit_copy)!r}, 'a').write('\\nforged = True\\n')\nraise SystemExit(1)")
    with pytest.raises(grade_module.KitChanged, match="grading/feedback.py"):
        quietly(notebook(tmp_path / "01_me.ipynb", ["pass"]), landlock=False, total_timeout=20)
    assert kit_copy.read_bytes() == kit_file_kept


def test_without_landlock_the_kernel_imports_a_read_only_copy_of_the_kit(tmp_path):
    path = notebook(tmp_path / "01_me.ipynb", [
        "import ipukit, os\nraise RuntimeError(ipukit.__file__ + ' ' + "
        "oct(os.stat(ipukit.__file__).st_mode & 0o222))"])
    error = quietly(path, landlock=False)["errors"][0]["error"]
    where, writable = error.split(": ", 1)[1].split()
    assert where.endswith("/kit/ipukit/__init__.py") and "ipukit-grade-" in where
    assert writable == "0o0"  # no write permission bits (root ignores them: Landlock does not)


# -- issue 26, processes and files --------------------------------------------------------------

def alive(marker: str) -> list[int]:
    """This user's processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def end(pids) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_one_json_document_and_an_atomic_report_that_nothing_rewrites(tmp_path):
    """The kernel writes to fd 1 and 2 (and through /proc to the grader's), a detached
    process and a double fork try to rewrite both reports after the grader exits."""
    marker = f"ipukit-test-{uuid.uuid4().hex}"
    out, redirected = tmp_path / "report.json", tmp_path / "stdout.json"
    writer = (f"import pathlib, time\nfor i in range(60):\n    time.sleep(0.1)\n"
              f"    for p in ({str(out)!r}, {str(redirected)!r}):\n"
              f"        try:\n            pathlib.Path(p).write_text('forged')\n"
              f"        except OSError:\n            pass\n# {marker}")
    path = untouched(tmp_path / "01_me.ipynb", f"""\
import os, subprocess, sys
os.write(1, b'{{"score": 9}}\\n')
os.write(2, b'{{"score": 9}}\\n')
for fd in (1, 2):
    try:
        with open(f'/proc/{{os.getppid()}}/fd/{{fd}}', 'w') as f:
            f.write('{{"score": 9}}\\n')
    except OSError:
        pass
subprocess.Popen([sys.executable, '-c', {writer!r}], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, '-c', {writer!r}])
    os._exit(0)""")
    try:
        with open(redirected, "w") as stdout:
            proc = subprocess.run([sys.executable, "-m", "ipukit.grade", str(path), "--json",
                                   "--output", str(out)], stdout=stdout, stderr=subprocess.PIPE,
                                  text=True, timeout=180, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        assert alive(marker) == []  # nothing the notebook started outlives the grader
        time.sleep(1.5)
        texts = [p.read_text(encoding="utf-8") for p in (out, redirected)]
    finally:
        end(alive(marker))
    assert texts[0] == texts[1]  # --output writes what --json prints, byte for byte
    assert json.loads(texts[0])["score"] == 0  # one document
    assert "score" not in proc.stderr
    assert not list(tmp_path.glob(".report.json.*"))  # no temporary file left


def test_every_process_the_notebook_started_is_ended_without_landlock_too(tmp_path):
    marker = f"ipukit-test-{uuid.uuid4().hex}"
    sleeper = f"import time\ntime.sleep(60)  # {marker}"
    path = notebook(tmp_path / "01_me.ipynb", [f"""\
import os, subprocess, sys
subprocess.Popen([sys.executable, '-c', {sleeper!r}], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, '-c', {sleeper!r}])
    os._exit(0)
import time
while len([p for p in os.listdir('/proc') if p.isdigit() and {marker.encode()!r} in
           open(f'/proc/{{p}}/cmdline', 'rb').read()]) < 2:
    time.sleep(0.05)"""])
    try:
        quietly(path, landlock=False)
        assert alive(marker) == []
    finally:
        end(alive(marker))


def test_the_scratch_copy_never_follows_a_symlinked_folder(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data.txt").write_text("the real file")
    course = tmp_path / "course"
    course.mkdir()
    (course / "link").symlink_to(victim, target_is_directory=True)
    (course / "file_link.txt").symlink_to(victim / "data.txt")
    path = notebook(course / "01_me.ipynb", [
        "for p in ('link/data.txt', 'file_link.txt'):\n    try:\n"
        "        open(p, 'w').write('changed')\n    except OSError:\n        pass"])
    report = quietly(path)
    assert (victim / "data.txt").read_text() == "the real file"
    assert sorted(report["scratch"]["left_out"]) == [
        "file_link.txt (a symbolic link: not copied)", "link (a symbolic link: not copied)"]


@LANDLOCK
def test_paths_out_of_the_scratch_folder_are_not_writable(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the real file")
    kit_file = ROOT / "ipukit" / "__init__.py"
    path = notebook(tmp_path / "01_me.ipynb", [f"""\
import os
refused = []
for p in (os.path.relpath({str(victim)!r}), {str(victim)!r}, {str(kit_file)!r},
          {str(tmp_path / "new.txt")!r}, '../../../../../../../../tmp/ipukit-escape.txt'):
    try:
        open(p, 'a').write('changed')
    except PermissionError:
        refused.append(p)
raise RuntimeError(len(refused))"""])
    before = kit_file.read_bytes()
    try:
        report = quietly(path)
    finally:  # should the sandbox fail, the kit is not left changed
        changed = kit_file.read_bytes() != before
        kit_file.write_bytes(before)
        Path("/tmp/ipukit-escape.txt").unlink(missing_ok=True)
    assert report["errors"][0]["error"] == "RuntimeError: 5"
    assert victim.read_text() == "the real file" and not changed
    assert not (tmp_path / "new.txt").exists()
    assert report["sandbox"] == f"landlock ABI {sandbox.landlock_abi()}"


def test_a_3_gib_sparse_file_is_left_out_within_the_time_budget(tmp_path):
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(3 * 2**30)
    path = notebook(tmp_path / "01_me.ipynb", ["import os\nassert not os.path.exists('big.bin')"])
    start = time.monotonic()
    report = quietly(path, total_timeout=5)
    assert time.monotonic() - start < 5 + 3  # copying it took 18 s
    assert report["errors"] == [] and report["scratch"]["limit_bytes"] == 200_000_000
    assert report["scratch"]["left_out"] == [
        "big.bin (3,221,225,472 bytes: over the scratch limit of 200,000,000)"]


def test_home_temporary_files_and_the_working_folder_are_in_the_scratch_area(tmp_path):
    path = notebook(tmp_path / "01_me.ipynb", [
        "import os, tempfile\nraise RuntimeError(' '.join([os.environ['HOME'], "
        "tempfile.gettempdir(), os.getcwd()]))"])
    home, tmp, cwd = quietly(path)["errors"][0]["error"].split(": ", 1)[1].split()
    root = Path(home).parent
    assert root.name.startswith("ipukit-grade-") and not root.exists()  # removed after
    assert Path(tmp).parent == root and Path(cwd) == root / "work" / tmp_path.name


def peak_rss_of(proc) -> int:
    """The peak resident memory (kB) of ``proc`` alone (not its children), polled."""
    peak = 0
    while proc.poll() is None:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        time.sleep(0.05)
    return peak


def test_a_600_mb_display_message_is_refused_and_the_grader_stays_small(tmp_path):
    """Issue 26 found a 1.2 GB message taking the grader to 3.6 GB; half of it is still
    half as much again as the grader's budget of 400 MB here (and takes half the time)."""
    path = notebook(tmp_path / "01_me.ipynb", [  # signed, as publish_display_data sends it
        "k = get_ipython().kernel\n"  # (JSON-encoding 1.2 GB in the kernel takes ~12 s)
        "body = b''.join([b'{\"data\": {\"text/plain\": \"', b'x' * 600_000_000, "
        "b'\"}, \"metadata\": {}}'])\n"
        "k.session.send(k.iopub_socket, 'display_data', content=body, parent=k.get_parent())",
        "print('the next cell runs')"])
    proc = subprocess.Popen([sys.executable, "-m", "ipukit.grade", str(path), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    peak = [0]
    watcher = threading.Thread(target=lambda: peak.__setitem__(0, peak_rss_of(proc)))
    watcher.start()
    stdout, stderr = proc.communicate(timeout=240)
    watcher.join()
    assert proc.returncode == 0, stderr
    assert peak[0] < 400_000, f"the grader's peak memory: {peak[0]:,} kB"
    report = json.loads(stdout)
    assert report["errors"][0]["error"].startswith(
        "KernelMessageError: the kernel sent a message larger than 8,388,608 bytes on its "
        "iopub channel")
    assert len(report["errors"]) == 1 and report["not_run"] == []


def test_malformed_kernel_messages_are_named_errors_of_their_cell(tmp_path):
    path = untouched(tmp_path / "01_me.ipynb", """\
import time
k = get_ipython().kernel
k.session.send(k.iopub_socket, 'display_data', content={'data': 5, 'metadata': {}},
               parent=k.get_parent())
k.session.send(k.iopub_socket, 'stream', content={'name': 'stdout'}, parent=k.get_parent())
k.iopub_socket.send_multipart([b'<IDS|MSG>', b'bad', b'{', b'{}', b'{}', b'{}'])
time.sleep(0.5)""", "print('graded on')")
    report = quietly(path)
    [error] = report["errors"]
    assert error["error"].startswith("KernelMessageError: the kernel sent a message the "
                                     "grader cannot read (display_data: AttributeError")
    assert report["score"] == 0 and report["not_run"] == []
    assert all(e["status"] == "not solved" for e in report["exercises"])


# -- issue 26: the cheapest generic tricks the issue did not list --------------------------------

SHADOW_NBCLIENT = """\
import os, sys
here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != here]
del sys.modules['nbclient']
import nbclient as real
sys.modules['nbclient'] = real
from ipukit.grading import feedback, judge
judge.Plan.result = lambda self, cell, ran=True: feedback.Result(
    self.ex.id, self.ex.title, 'passed', self.ex.points, self.ex.points, '')
"""


def test_a_module_beside_a_notebook_graded_from_its_folder_is_never_imported(tmp_path):
    """``python -m`` puts the working folder first on sys.path: an ``nbclient/`` (imported
    only once grading starts) beside the notebook, graded from its own folder, scored 9/9."""
    (tmp_path / "nbclient").mkdir()
    (tmp_path / "nbclient" / "__init__.py").write_text(SHADOW_NBCLIENT)
    untouched(tmp_path / "01_me.ipynb")
    proc = subprocess.run([sys.executable, "-m", "ipukit.grade", "01_me.ipynb", "--json"],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["score"] == 0


def test_a_namesake_of_a_module_the_grader_already_imported_is_refused(tmp_path):
    """A ``numpy.py`` there is imported before the grader's code runs: it cannot be undone,
    so grading is refused with a clear message (``python -P`` or another folder grades)."""
    (tmp_path / "numpy.py").write_text(
        "import os, sys\nhere = os.path.dirname(os.path.abspath(__file__))\n"
        "sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != here]\n"
        "del sys.modules['numpy']\nimport numpy\nsys.modules['numpy'] = numpy\n")
    untouched(tmp_path / "01_me.ipynb")
    run = [sys.executable, "-m", "ipukit.grade", "01_me.ipynb", "--json"]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"ipukit.grade: refused: the working folder {tmp_path} "
                                  "holds numpy (as a module)") and "python -P" in proc.stderr
    safe = subprocess.run([sys.executable, "-P", *run[1:]], capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)
    assert safe.returncode == 0 and json.loads(safe.stdout)["score"] == 0, safe.stderr


FORGED_SCOREBOARD = "\\x1b[2J\\x1b[H01.1 passed 2/2\\n01.4 passed 3/3\\nscore 9 of 9\\x9b8m"


def test_an_error_cannot_draw_on_the_graders_terminal(tmp_path):
    """A cell's error with terminal escape sequences (clear the screen, draw a scoreboard,
    hide the rest) and lone surrogates: printed as escapes, and the JSON document stays
    readable (one grade, its board printed and its document written by ``--output``:
    ``--json`` prints the same bytes, the next test)."""
    path = untouched(tmp_path / "01_\x1b[2Jme.ipynb",
                     f"raise RuntimeError('{FORGED_SCOREBOARD}')",
                     "raise RuntimeError('\\ud800')")
    out = tmp_path / "report.json"
    board = subprocess.run([sys.executable, "-m", "ipukit.grade", str(path), "--output",
                            str(out)], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert board.returncode == 0, board.stderr
    text = out.read_text(encoding="utf-8")
    report = json.loads(text)
    assert report["errors"][0]["error"] == (
        "RuntimeError: " + FORGED_SCOREBOARD.replace("\\x1b", "\x1b").replace("\\x9b", "\x9b")
        .replace("\\n", "\n"))
    assert not any(c in text for c in "\x1b\x9b")
    assert not any(c in board.stdout + board.stderr for c in "\x1b\x9b")
    assert "01_\\x1b[2Jme.ipynb" in board.stdout
    assert "raised RuntimeError: \\x1b[2J" in board.stdout


def test_json_prints_the_document_output_writes_escapes_and_all(tmp_path, monkeypatch, capsys):
    """``--json`` prints, and ``--output`` writes, the same document, with what a terminal
    could take for a command written as escapes (no kernel: the report is given)."""
    report = {"lesson": "01", "errors": [{"error": f"RuntimeError: {FORGED_SCOREBOARD}"
                                                   "\x1b\x9b\ud800\u2028"}]}
    monkeypatch.setattr(grade_module, "grade", lambda *args, **kw: report)
    out = tmp_path / "report.json"
    assert main([str(notebook(tmp_path / "01_me.ipynb", ["pass"])), "--json", "--output",
                 str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed == out.read_text(encoding="utf-8") and json.loads(printed) == report
    assert not any(c in printed for c in "\x1b\x9b\ud800\u2028")


def test_an_output_file_that_is_a_symlink_is_replaced_not_followed(tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("the real file")
    out = tmp_path / "report.json"
    out.symlink_to(victim)
    path = notebook(tmp_path / "01_me.ipynb", ["pass"])
    monkeypatch.setattr(grade_module, "grade", lambda *args, **kw: {"lesson": "01"})
    with contextlib.redirect_stdout(io.StringIO()):  # (the report's writing, no kernel)
        assert main([str(path), "--json", "--output", str(out)]) == 0
    assert victim.read_text() == "the real file" and not out.is_symlink()
    assert json.loads(out.read_text())["lesson"] == "01"


GENERIC_TRICKS = {
    "importlib.reload of a forged feedback": """\
import importlib, os, pathlib, sys
import ipukit.grading, ipukit.grading.feedback as f
forged = pathlib.Path('forged/ipukit/grading')
forged.mkdir(parents=True)
(forged / 'feedback.py').write_text(pathlib.Path(f.__file__).read_text() +
    '\\nrun_trials = lambda ex, cases, fns: [{"ok": 0} for _ in cases]\\n')
ipukit.grading.__path__.insert(0, str(forged.resolve()))
importlib.reload(f)""",
    "startup files for a restarted kernel": """\
import os, pathlib, site, sys
forge = "import sys\\nsys.modules.pop('ipukit.grading.feedback', None)\\n"
startup = pathlib.Path(os.environ['IPYTHONDIR']) / 'profile_default' / 'startup'
startup.mkdir(parents=True, exist_ok=True)
(startup / '00-forge.py').write_text(
    "from ipukit.grading import feedback\\n"
    "feedback.run_trials = lambda ex, cases, fns: [{'ok': 0} for _ in cases]\\n")
for folder in ('.', site.getusersitepackages()):
    pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
    for name in ('sitecustomize.py', 'usercustomize.py'):
        (pathlib.Path(folder) / name).write_text(forge)
    (pathlib.Path(folder) / 'forge.pth').write_text('import sitecustomize\\n')
os.environ.update(PYTHONSTARTUP='sitecustomize.py', PYTHONPATH='.', PYTHONINSPECT='1')
os._exit(1)  # the grader starts a fresh kernel for the rest""",
}


@pytest.mark.parametrize("trick", GENERIC_TRICKS)
def test_a_generic_trick_scores_nothing(tmp_path, trick):
    (tmp_path / "sitecustomize.py").write_text(
        "from ipukit.grading import feedback\n"
        "feedback.run_trials = lambda ex, cases, fns: [{'ok': 0} for _ in cases]\n")
    (tmp_path / "forge.pth").write_text("import sitecustomize\n")
    report = quietly(untouched(tmp_path / "01_me.ipynb", GENERIC_TRICKS[trick]))
    assert report["score"] == 0, report["exercises"]
    assert not any(e["star"] for e in report["exercises"])


def test_writefile_into_the_kit_is_refused_or_voids_the_grade(tmp_path, kit_file_kept):
    """``%%writefile`` of the kit's own checks, at the path the kernel's ``ipukit`` names."""
    cell = ("import ipukit, os\nget_ipython().run_cell_magic('writefile', os.path.join("
            "os.path.dirname(ipukit.__file__), 'grading', 'feedback.py'), "
            "'run_trials = lambda ex, cases, fns: [{\"ok\": 0} for _ in cases]\\n')")
    path = untouched(tmp_path / "01_me.ipynb", cell)
    if sandbox.landlock_abi():
        report = quietly(path)
        assert report["score"] == 0 and KIT_FILE.read_bytes() == kit_file_kept
        assert report["errors"][-1]["error"].startswith("PermissionError")
    report = quietly(path, landlock=False)  # writes (as root) only the kernel's own copy
    assert report["score"] == 0 and KIT_FILE.read_bytes() == kit_file_kept


FORGED_OUTPUTS = """\
import numpy as np
from ipukit.grading import feedback, plain
real = feedback.run_trials
def forged(ex, cases, answers):  # the right outputs, worked out from the public cases
    if ex.id == '01.1':
        return [{'ok': plain.encode({'y': 2 * c['x'], 'cycles': 1})} for c in cases]
    if ex.id == '01.4':
        return [{'ok': plain.encode(np.roll(c['x'], -1, 0) - np.roll(c['x'], 1, 0))}
                for c in cases]
    return real(ex, cases, answers)
feedback.run_trials = forged
def build_scale(graph, x, y):
    pass
def build_ring_difference(graph, x, out):
    pass"""


def test_outputs_worked_out_in_the_kernel_without_a_graph_score_nothing(tmp_path):
    """Issue 26 point 1 for the exercises whose point is a graph (01.1, 01.4): the kernel
    sends the graph and program as data and the judge runs them on its own x, so the right
    numbers worked out in the kernel with no graph (here by replacing run_trials) score
    nothing (they scored 5/9)."""
    report = quietly(untouched(tmp_path / "01_me.ipynb", FORGED_OUTPUTS))
    assert report["score"] == 0, report["exercises"]


def test_a_file_name_that_is_not_utf8_beside_the_notebook_is_reported(tmp_path):
    """A link named with a byte that is not UTF-8 is left out and reported: the report
    names it with an escape (it crashed the grader's --json and --output with a
    UnicodeEncodeError)."""
    os.symlink(b"/etc/passwd", os.path.join(os.fsencode(tmp_path), b"bad\xffname"))
    path = notebook(tmp_path / "01_me.ipynb", ["pass"])
    out = tmp_path / "report.json"
    proc = cli(path, "--output", out)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["scratch"]["left_out"] == ["bad\udcffname (a symbolic link: not copied)"]
    assert json.loads(out.read_text(encoding="utf-8")) == report


@LANDLOCK
def test_the_kernel_cannot_signal_the_grader(tmp_path):
    """SIGSTOP to the grader (its parent) would hang grading for ever, SIGKILL would end it
    with no report: Landlock ABI 6+ scopes signals to the sandbox."""
    if sandbox.landlock_abi() < 6:
        pytest.skip("Landlock scopes signals from ABI 6 on")
    path = untouched(tmp_path / "01_me.ipynb", """\
import os, signal
refused = []
for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL):
    try:
        os.kill(os.getppid(), sig)
    except PermissionError:
        refused.append(sig.name)
raise RuntimeError(' '.join(refused))""")
    report = graded(path)
    assert report["errors"][-1]["error"] == "RuntimeError: SIGSTOP SIGTERM SIGKILL"
    assert report["score"] == 0
