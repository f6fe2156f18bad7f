"""``make site`` (issue 30), tested offline in a real browser.

A reduced site (lessons 01 and 02, and the JupyterLite app) is built with
tools/site/build.py, served on 127.0.0.1, and opened in Debian's Chromium with every other
host refused twice over (``--host-resolver-rules`` maps every other name to nowhere, and
Playwright aborts any request that is not to the local server; the test asserts none was
even made):

* a lesson page shows its figures (every image decoded) and its widget plays;
* in JupyterLite, exercise 01 runs in the Pyodide kernel: the untouched checks say
  "NOT SOLVED YET", a solved exercise's check says "PASSED", and the README's tutorial-3
  example prints ``v2`` = [7, 6, 4.5, 2.5].

The Pyodide assets are fetched once per machine into the cache by the build
(tools/site/assets.py). When they cannot be had, the lesson pages are still built and
tested, and the JupyterLite test skips, saying why; everything skips, saying why, where
Chromium or Playwright is not installed. Screenshots go to $IPUKIT_SCREENSHOTS.
"""

import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_browser import CHROMIUM, FLAGS, SHOTS, plays, rewind, sync_api

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "tools" / "site" / "build.py"
_spec = importlib.util.spec_from_file_location("ipukit_site_serve", BUILD.parent / "serve.py")
site_serve = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site_serve)
LESSONS = ["01_ipu_and_bsp", "02_graphs_tensors_streams"]
V2 = "v2: [7.0000000 6.0000000 4.5000000 2.5000000]"


def readme_example() -> str:
    """The README's "taste of the API" (Graphcore's tutorial 3), as the README has it."""
    text = (ROOT / "README.md").read_text()
    return re.search(r"tutorial 3.*?```python\n(.*?)```", text, re.S).group(1)


def solution_cell(lesson: str, name: str) -> str:
    nb = json.loads((ROOT / "solutions" / f"{lesson}_solutions.ipynb").read_text())
    return next("".join(c["source"]) for c in nb["cells"]
                if c["cell_type"] == "code" and f"def {name}(" in "".join(c["source"]))


@pytest.fixture(scope="module")
def site(tmp_path_factory, kit_wheel):
    """The reduced site; without the lite app (``site.lite`` says why) only when the
    Pyodide assets cannot be had (the build's exit code 3)."""
    out = tmp_path_factory.mktemp("site") / "_site"
    args = [sys.executable, str(BUILD), "--out", str(out),
            "--lessons", ",".join(n[:2] for n in LESSONS), "--kit-wheel", str(kit_wheel)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    missing = None
    if r.returncode == 3:
        missing = r.stderr.strip()[-500:]
        r = subprocess.run(args + ["--no-lite"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return out, missing


@pytest.fixture(scope="module")
def server(site):
    with site_serve.serve(site[0]) as base:
        yield base


@pytest.fixture(scope="module")
def chromium():
    """One Chromium for the module, which resolves no host but 127.0.0.1; each test has its
    own context in it (browser), with nothing shared: storage and cache are the context's."""
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=FLAGS + site_serve.OFFLINE_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def browser(server, chromium):
    """A Chromium context that can reach the local server and nothing else."""
    ctx = chromium.new_context(viewport={"width": 1300, "height": 900})
    ctx.refused, ctx.errors = site_serve.refuse_other_hosts(ctx, server), []
    ctx.on("response", lambda r: ctx.errors.append(f"{r.status} {r.url}")
           if r.status >= 400 else None)
    try:
        yield ctx
    finally:
        ctx.close()
    assert ctx.refused == [], f"requests to other hosts: {ctx.refused[:5]}"
    assert ctx.errors == [], ctx.errors[:5]


def test_lesson_pages_show_figures_and_a_widget_plays(server, browser, site):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page()
    page.goto(f"{server}/index.html")
    for name in LESSONS:
        assert page.locator(f'a[href="lessons/{name}.html"]').count() >= 1
    page.screenshot(path=str(SHOTS / "site_index.png"), full_page=True)
    page.locator(f'a[href="lessons/{LESSONS[0]}.html"]').first.click()
    page.wait_for_load_state("load")
    images = page.evaluate("() => Array.from(document.images).map(i => [i.complete, "
                           "i.naturalWidth])")
    assert len(images) >= 2 and all(ok and w > 0 for ok, w in images), images
    w = page.locator(".ipukit-widget").first
    w.wait_for(timeout=20_000)
    w.scroll_into_view_if_needed()
    w.locator('[aria-label="Speed"]').select_option("4")
    rewind(w)
    before, after = plays(w)
    assert after > before, (before, after)
    w.screenshot(path=str(SHOTS / "site_lesson01_widget.png"))
    page.screenshot(path=str(SHOTS / "site_lesson01.png"))
    # the lesson's links: the next lesson's page, its exercise in JupyterLite
    assert page.locator(f'nav a[rel="next"][href="{LESSONS[1]}.html"]').count() == 2
    lite = page.locator(f'a[href="../lite/notebooks/index.html?path=exercises/{LESSONS[0]}'
                        '_exercises.ipynb"]')
    assert lite.count() >= 2  # the nav bars and the lesson's own link
    if site[1] is None:
        exercises = site[0] / "lite" / "files" / "exercises"
        assert (exercises / f"{LESSONS[0]}_exercises.ipynb").exists()


#: Run cell ``i`` of the open notebook (or a new last cell, i = -1) with ``source``; the
#: text of its output area once the kernel is idle again (an error after 180 s).
RUN_CELL = """async ([i, source]) => {
    const app = window.jupyterapp, panel = app.shell.currentWidget, nb = panel.content;
    if (i < 0) {
        nb.activeCellIndex = nb.widgets.length - 1;
        await app.commands.execute('notebook:insert-cell-below');
        i = nb.widgets.length - 1;
    }
    if (source !== null) nb.widgets[i].model.sharedModel.setSource(source);
    nb.activeCellIndex = i;
    await app.commands.execute('notebook:run-cell');
    const kernel = panel.sessionContext.session.kernel, deadline = Date.now() + 180000;
    while (nb.widgets[i].model.executionCount === null || kernel.status !== 'idle') {
        if (Date.now() > deadline) throw new Error(`cell ${i} did not finish in 180 s`);
        await new Promise(r => setTimeout(r, 100));
    }
    return nb.widgets[i].outputArea.node.innerText;
}"""
#: The shown text of the stored output of the first cell whose source contains ``text``.
STORED_OUTPUT = """async (text) => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    const i = nb.widgets.findIndex(c => c.model.sharedModel.getSource().includes(text));
    await nb.scrollToItem(i);
    const node = nb.widgets[i].outputArea.node, deadline = Date.now() + 10000;
    while (!(node.isConnected && node.getClientRects().length && node.innerText.trim())
           && Date.now() < deadline)  // shown once the windowed notebook renders the cell
        await new Promise(r => setTimeout(r, 50));
    return node.innerText;
}"""
CELL_INDEX = """(text) => window.jupyterapp.shell.currentWidget.content.widgets.findIndex(
    c => c.model.sharedModel.getSource().includes(text))"""

#: Prints whether NumPy, the kit and Matplotlib were imported from unchecked-hash bytecode
#: (PEP 552: flags 1) and the standard library's json from its ``.pyc``.
BYTECODE_USED = """import importlib.util, json
import matplotlib.pyplot, numpy, ipukit
def flags(m):
    with open(importlib.util.cache_from_source(m.__file__), "rb") as f:
        return f.read(8)[4:]
print("bytecode:", [flags(m) == bytes([1, 0, 0, 0]) for m in (numpy, ipukit, matplotlib)],
      json.__file__.endswith(".pyc"))
"""


def test_jupyterlite_runs_the_kit_and_its_checks(site, server, browser):
    if site[1]:
        pytest.skip(site[1])  # "error: the Pyodide assets could not be had: ..." and why
    page = browser.new_page()
    t0 = time.perf_counter()
    page.goto(f"{server}/lite/notebooks/index.html?path=exercises/{LESSONS[0]}_exercises.ipynb")
    page.wait_for_function(site_serve.KERNEL_IDLE, timeout=180_000, polling=200)
    started = time.perf_counter() - t0
    # the stored outputs read as in JupyterLab (one string per text, not a list of lines)
    stored = page.evaluate(STORED_OUTPUT, 'grading.scoreboard("01")')
    assert stored.startswith("Scoreboard, lesson 01\n") and "\n," not in stored, stored
    assert re.search(r"^ +01\.4 +a central difference", stored, re.M), stored
    # the exercise's first check, untouched: the learner's feedback
    first = page.evaluate(CELL_INDEX, "check_scale_superstep(")
    imports = page.evaluate(CELL_INDEX, "import ipukit as ipu")
    text = page.evaluate(RUN_CELL, [imports, None])  # the kit, from the site's own wheel
    assert "Error" not in text, text
    first_imports = text
    page.evaluate(RUN_CELL, [first - 1, None])  # the stub, as generated
    text = page.evaluate(RUN_CELL, [first, None])
    assert re.search(r"NOT SOLVED YET · Exercise 01\.1 .*0/2 points", text, re.S), text
    # exercise 01.3 solved in the browser: its check passes
    stub = page.evaluate(CELL_INDEX, "def superstep_cycles(")
    page.evaluate(RUN_CELL, [stub, solution_cell(LESSONS[0], "superstep_cycles")])
    text = page.evaluate(RUN_CELL, [stub + 1, None])
    assert re.search(r"PASSED · Exercise 01\.3 .*2/2 points", text, re.S), text
    # the README's tutorial 3
    text = page.evaluate(RUN_CELL, [-1, readme_example()])
    assert V2 in text, text
    # the kernel reads the bytecode and Matplotlib's font list that the build made
    # (tools/site/precompile.py) instead of compiling every module and building the list
    text = page.evaluate(RUN_CELL, [-1, BYTECODE_USED])
    assert "bytecode: [True, True, True] True" in text, text
    assert "font cache" not in first_imports + text, first_imports + text
    page.screenshot(path=str(SHOTS / "site_lite_exercise01.png"))
    print(f"JupyterLite: kernel ready {started:.1f} s after the page was opened")
