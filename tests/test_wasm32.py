"""The kit on 32-bit WebAssembly (issue 30): NumPy's index type is int32 there, and the kit's
index, count and offset arrays are ``np.intp`` so that ``np.bincount``, ``np.repeat`` and
friends take them. tests/wasm32.py makes this 64-bit machine refuse what wasm32 refuses;
here every lesson and every exercise's solution and check run under it (the whole suite
can too: ``IPUKIT_WASM32=1 pytest tests/test_compile.py``)."""

import re
from pathlib import Path

import matplotlib
import nbformat
import numpy as np
import pytest

from ipukit.grading import feedback
from tests.wasm32 import strict_ints

ROOT = Path(__file__).resolve().parents[1]
WASM32_MESSAGE = ("Cannot cast array data from dtype('int64') to dtype('int32') according to "
                  "the rule 'safe'")  # NumPy 2.0.2 in Pyodide 0.27.7, np.bincount(int64)


@pytest.mark.parametrize("call", [
    lambda i: np.bincount(i),
    lambda i: np.bincount(i, None, 3),
    lambda i: np.repeat(np.arange(2.0), i),
    lambda i: np.repeat([1, 2], repeats=i),
    lambda i: np.put(np.zeros(3), i, 1.0),
    lambda i: np.choose(i, [np.zeros(2), np.ones(2)]),
], ids=["bincount", "bincount minlength", "repeat", "repeat repeats=", "put", "choose"])
def test_the_shim_refuses_what_wasm32_refuses(call):
    with strict_ints():
        wide = [np.array([0, 1], np.int64), np.zeros(2, np.int64) + 1,
                np.array([0, 1], np.int32).astype(np.int64), np.array([0, 1], np.uint32),
                np.array([0, 1], np.uint64), np.concatenate([np.arange(2), np.zeros(0, np.int64)])]
        for i in wide:
            with pytest.raises(TypeError, match=r"Cannot cast array data from dtype\('u?int"
                               r"(32|64)'\) to dtype\('int32'\) according to the rule 'safe'"):
                call(i)
        with pytest.raises(TypeError, match=re.escape(WASM32_MESSAGE)):
            call(np.array([0, 1], np.int64))
        # what is int32 on wasm32: np.intp, the default integer, int32, Python ints, bools
        for i in (np.array([0, 1], np.intp), np.arange(2), np.array([0, 1], np.int32),
                  np.array([0, 1], np.int64).astype(np.intp), [0, 1], np.array([0, 1], bool)):
            call(i)
    call(np.array([0, 1], np.int64))  # off again: this machine's NumPy
    assert np.int64 is np.dtype("int64").type


def _run(path: Path, checks: bool) -> dict:
    """Every code cell of a notebook, in one namespace (``display`` as IPython's; figures
    drawn off screen); check cells only if ``checks``."""
    from IPython.display import display

    nb = nbformat.read(path, as_version=4)
    ns = {"display": display}
    for cell in nb.cells:
        if cell.cell_type == "code" and (checks or "nbval-check-output"
                                         not in cell.metadata.get("tags", [])):
            exec(compile(cell.source, f"{path.name}:{cell.id}", "exec"), ns)
    return ns


@pytest.fixture
def offscreen():
    import matplotlib.pyplot as plt

    backend = matplotlib.get_backend()
    plt.switch_backend("Agg")
    yield
    plt.close("all")
    plt.switch_backend(backend)


def test_readme_example_runs_with_wasm32_ints(capsys):
    text = (ROOT / "README.md").read_text()
    code = re.search(r"tutorial 3.*?```python\n(.*?)```", text, re.S).group(1)
    with strict_ints():
        exec(compile(code, "README.md", "exec"), {})
    assert "v2: [7.0000000 6.0000000 4.5000000 2.5000000]" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")),
                         ids=lambda p: p.name[:2])
def test_lesson_runs_with_wasm32_ints(path, offscreen, capsys):
    with strict_ints():
        _run(path, checks=False)


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")),
                         ids=lambda p: p.name[:2])
def test_solutions_pass_their_checks_with_wasm32_ints(path, offscreen, capsys):
    """The checks build and run their own cases on the emulator: every one passes."""
    lesson = path.name[:2]
    before = feedback.results()
    with strict_ints():
        _run(path, checks=True)
    rows = feedback.lesson_rows(lesson, feedback.results())
    assert rows and all(before.get(r.id) is not r for r in rows)  # each checked just now
    assert all(r.status == feedback.PASSED for r in rows), [
        (r.id, r.status, r.message[:200]) for r in rows]
