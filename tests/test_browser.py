"""Real-browser tests of the widgets, in headless Chromium (Debian's ``chromium``, driven by
Playwright's Python package with ``executable_path``: no browser download).

* JupyterLab on a free localhost port with a token runs tests/browser/widgets_demo.ipynb:
  Play animates each widget (its ``data-ipukit-frame`` moves), hover shows a tooltip, a
  clicked tile reaches Python (``selected``), and so does the frame.
* ``save_html`` pages and a lesson exported by ``jupyter nbconvert --to html`` play with
  every network request refused and no console error.
* Frame rate, measured in the page while playing: a BSPView of 2 x 1,472 tiles and a
  timeline of 10,016 spans draw at 30 frames a second or more.

Waits are on conditions (the widgets' ``data-ipukit-*`` attributes, the next animation frame),
not fixed sleeps, but where a rate is measured. The attack tests hover a grid of points (one
round trip a grid: the ``mousemove`` events a mouse sends the canvas), and the first point that
shows a tooltip with the real mouse too.

Screenshots go to $IPUKIT_SCREENSHOTS (default /tmp/ipukit_png). Skips, saying why, only
where Chromium or Playwright is not installed (``apt-get install -y chromium``,
``pip install playwright``; never ``playwright install``).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).parent
NOTEBOOK = HERE / "browser" / "widgets_demo.ipynb"
CHROMIUM = next((p for p in (os.environ.get("IPUKIT_CHROMIUM"), "/usr/bin/chromium",
                             shutil.which("chromium"), shutil.which("chromium-browser"))
                 if p and os.path.exists(p)), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]
SHOTS = Path(os.environ.get("IPUKIT_SCREENSHOTS", "/tmp/ipukit_png"))

if CHROMIUM is None:
    pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright's Python package is not installed "
    "(pip install playwright; the system Chromium is used, no browser download)")
pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (pip install -e .[lab])")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base, token, path, method="GET"):
    req = urllib.request.Request(f"{base}{path}", method=method,
                                 headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        body = r.read()
    return json.loads(body) if body else None


@pytest.fixture
def lab(tmp_path, request):
    """JupyterLab serving a copy of the notebook (or the folder that the fixture named by
    an indirect parameter makes); stopped (kernels too) whatever happens. The page exposes
    the app as ``window.jupyterapp``."""
    if hasattr(request, "param"):
        root = request.getfixturevalue(request.param)
    else:
        root = tmp_path / "root"
        root.mkdir()
        shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    config = tmp_path / "config"
    (config / "labconfig").mkdir(parents=True)
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
               IPYTHONDIR=str(tmp_path / "ipython"), MPLBACKEND="Agg")
    port, token = free_port(), uuid.uuid4().hex
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.expose_app_in_browser=True"]
        + (["--allow-root"] if os.geteuid() == 0 else []),
        env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 90
        while True:
            try:
                api(base, token, "/api/status")
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n" +
                                (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield base, token
    finally:
        try:
            for k in api(base, token, "/api/kernels"):
                api(base, token, f"/api/kernels/{k['id']}", method="DELETE")
        except OSError:
            pass
        stop(proc)
        log.close()


def stop(proc):
    """SIGTERM the server's process group (SIGKILL after 20 s), if it is still running."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for_idle_kernel(base, token, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        sessions = api(base, token, "/api/sessions")
        if sessions and sessions[0]["kernel"]["execution_state"] == "idle":
            return
        time.sleep(0.5)
    pytest.fail(f"the notebook's kernel did not start in {timeout} s: {sessions}")



@pytest.fixture(scope="module")
def chromium():
    """One Chromium for the module; each test opens its own context in it (open_chromium),
    with nothing shared: cookies, storage and cache are the context's own."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def open_chromium(chromium, offline=False, viewport=None):
    """A new Chromium context; ``offline`` refuses every request that is not a local file."""
    ctx = chromium.new_context(viewport=viewport or {"width": 1400, "height": 1000})
    ctx.refused = []
    if offline:
        def refuse(route):
            if route.request.url.startswith("file:"):
                route.continue_()
            else:
                ctx.refused.append(route.request.url)
                route.abort()
        ctx.route("**/*", refuse)
    return ctx


def watch(page):
    """Console errors and uncaught exceptions of ``page``, as they happen."""
    errors = []
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error"
            else None)
    page.on("pageerror", lambda e: errors.append(f"exception: {e}"))
    return errors


def open_widget(ctx, path, dialogs=None, timeout=10_000):
    """A new page on the saved ``path``, its console errors watched (and its dialogs, into
    ``dialogs``), once its widget shows."""
    page = ctx.new_page()
    errors = watch(page)
    if dialogs is not None:
        watch_dialogs(page, dialogs)
    page.goto(path.as_uri())
    w = page.locator(".ipukit-widget")
    w.wait_for(timeout=timeout)
    return page, w, errors


def frame(widget) -> int:
    return int(widget.get_attribute("data-ipukit-frame"))


def rewind(widget):
    """Drag the frame slider to the first frame (a BSPView opens on its first compute
    superstep, which may be its last frame)."""
    widget.locator('[aria-label="Frame"]').evaluate(
        "e => { e.value = '0'; e.dispatchEvent(new Event('input')); }")
    settle(widget, 0)  # (the frame shown updates on the next animation frame)


#: True once the widget ``e`` shows a frame other than ``k`` (it moved) or is paused again.
MOVED = "([e, k]) => Number(e.dataset.ipukitFrame) !== k || e.dataset.ipukitPlaying === 'false'"


def plays(widget, seconds=None, speed=None, timeout=15_000) -> tuple[int, int]:
    """Press Play (at ``speed``), wait ``seconds`` (by default: until the frame shown
    moves, at most ``timeout`` ms), press it again (pause); the frame shown before and
    after."""
    if speed:
        widget.locator('[aria-label="Speed"]').select_option(speed)
    before = frame(widget)
    widget.locator('[aria-label="Play"]').click()
    if seconds is None:
        try:
            widget.page.wait_for_function(MOVED, arg=[widget.element_handle(), before],
                                          timeout=timeout)
        except sync_api.TimeoutError:
            pass  # (the caller's assertion says what it saw)
    else:
        time.sleep(seconds)
    after = frame(widget)
    widget.locator('[aria-label="Play"]').click()
    drawn_next(widget.page)  # paused: its words are those of the frame shown
    return before, after


def drawn_next(page):
    """Wait for the page's next two animation frames: a widget made dirty has drawn."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => "
                  "requestAnimationFrame(r)))")


#: True once the timeline ``e`` shows a time window no wider than ``width``.
NARROWER = """([e, width]) => {
    const [a, b] = e.dataset.ipukitWindow.split(',').map(Number);
    return b - a <= width;
}"""


def zoom_in(page, w, notches):
    """Turn the wheel ``notches`` times over the timeline at the mouse; wait until each has
    zoomed in (by 1.25) and the widget has drawn."""
    a, b = map(float, w.get_attribute("data-ipukit-window").split(","))
    for _ in range(notches):
        page.mouse.wheel(0, -100)
    try:
        page.wait_for_function(NARROWER, arg=[w.element_handle(),
                                              (b - a) / 1.25 ** notches * 1.001], timeout=3000)
    except sync_api.TimeoutError:
        pass  # (the caller's assertion says what it saw)
    drawn_next(page)


#: Where to hover in each widget's canvas, (x, y) as fractions of its size or pixels.
HOVER = {"bsp": (0.1, 0.25), "timeline": (65, 34), "memory": (0.1, 0.25)}
TIP = {"bsp": r"tile \d+ \(IPU \d\)", "timeline": r"F0 on IPU 0.*stage 0 · micro-batch 0",
       "memory": r"tile \d+ \(IPU \d\): [\d,]+ B"}


def hover(page, widget, kind):
    """Move the mouse over a tile or an op; the tooltip's text."""
    box = widget.locator("canvas").bounding_box()
    fx, fy = HOVER[kind]
    x = fx * box["width"] if fx < 1 else fx
    y = fy * box["height"] if fy < 1 else fy
    page.mouse.move(box["x"] + x, box["y"] + y)
    tip = widget.locator('[role="tooltip"]')
    tip.wait_for(state="visible", timeout=5000)
    text = tip.inner_text()
    assert re.search(TIP[kind], text, re.S), (kind, text)
    return box["x"] + x, box["y"] + y, text


def test_widgets_play_in_jupyterlab(chromium, lab):
    base, token = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    ctx = open_chromium(chromium)
    try:
        page = ctx.new_page()
        page.goto(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        wait_for_idle_kernel(base, token)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.get_by_text("Run All Cells", exact=True).click()
        page.wait_for_function(
            "document.querySelectorAll('.jp-OutputArea-output .ipukit-widget').length >= 3",
            timeout=120_000)
        assert "Error displaying widget" not in page.content()
        assert page.locator(".jp-OutputArea-output[data-mime-type*='error']").count() == 0
        widgets = page.locator(".jp-OutputArea-output .ipukit-widget")
        clicked = None
        for i, kind in enumerate(["bsp", "timeline", "memory"]):
            w = widgets.nth(i)
            w.scroll_into_view_if_needed()
            assert w.get_attribute("data-ipukit-kind") == kind
            w.screenshot(path=str(SHOTS / f"lab_{kind}_before.png"))
            before, after = plays(w, speed="4" if kind == "bsp" else None)
            assert after > before, (kind, before, after)
            x, y, text = hover(page, w, kind)
            w.screenshot(path=str(SHOTS / f"lab_{kind}_hover.png"))
            if kind == "bsp":
                page.mouse.click(x, y)
                clicked = int(re.search(r"tile (\d+)", text).group(1))
        # Python sees the browser's frame and the clicked tile (`selected`).
        page.locator(".jp-Cell").last.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        out = page.locator(".jp-OutputArea-output", has_text="python sees: True")
        out.wait_for(timeout=30_000)
        assert out.inner_text().strip() == f"python sees: True tile {clicked}"
        settle(widgets.nth(1), 123)  # Python set the timeline's frame
        page.screenshot(path=str(SHOTS / "lab_page.png"), full_page=True)
    finally:
        ctx.close()


def demo_trace(ipus, tiles):
    import ipukit as ipu

    class SumVertex(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.FLOAT)

        def compute(self):
            self.out[...] = self.x.sum(axis=-1)

    n = ipus * tiles
    dev = ipu.IPUModel(num_ipus=ipus, tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
    sizes = [8 + 4 * (i % 3) for i in range(n)]
    x = g.add_variable(ipu.FLOAT, [sum(sizes)], "x")
    y = g.add_variable(ipu.FLOAT, [n], "y")
    z = g.add_variable(ipu.FLOAT, [n], "z")
    cs = g.add_compute_set("sum rows")
    start = 0
    for i, s in enumerate(sizes):
        g.set_tile_mapping(x[start:start + s], i)
        g.set_tile_mapping(y[i], i)
        g.set_tile_mapping(z[i], (i + 3) % n)
        v = g.add_vertex(cs, SumVertex, {"x": x[start:start + s], "out": y[i]})
        g.set_tile_mapping(v, (i + 1) % n if i % 4 == 0 else i)
        start += s
    eng = ipu.Engine(g, ipu.Sequence(ipu.Execute(cs), ipu.Copy(y, z)))
    eng.load(dev)
    eng.run()
    return eng.trace


def test_saved_pages_play_offline(chromium, tmp_path):
    from ipukit.parallel.schedule import schedule
    from ipukit.widgets import BSPView, MemoryMap, PipelineTimeline

    trace = demo_trace(2, 8)
    pages = {"bsp": BSPView(trace).save_html(tmp_path / "bsp.html"),
             "timeline": PipelineTimeline(schedule("grouped", 4, 8)).save_html(
                 tmp_path / "timeline.html"),
             "memory": MemoryMap(trace).save_html(tmp_path / "memory.html")}
    SHOTS.mkdir(parents=True, exist_ok=True)
    ctx = open_chromium(chromium, offline=True)
    try:
        for kind, path in pages.items():
            page, w, errors = open_widget(ctx, path)
            # a BSPView opens on a compute phase, its longest to play
            before, after = plays(w, speed="4" if kind == "bsp" else None)
            assert after > before, (kind, before, after)
            hover(page, w, kind)
            page.screenshot(path=str(SHOTS / f"saved_{kind}.png"), full_page=True)
            if kind == "timeline":
                timeline_controls(page, w)
            assert errors == [], (kind, errors)
            page.close()
        assert ctx.refused == []  # nothing was even asked for
    finally:
        ctx.close()


def settle(w, k, timeout=3.0):
    """Wait until the widget shows frame ``k`` (it draws on the next animation frame)."""
    try:
        w.page.wait_for_function("([e, k]) => e.dataset.ipukitFrame === k",
                                 arg=[w.element_handle(), str(k)], timeout=timeout * 1000)
    except sync_api.TimeoutError:
        pass
    assert frame(w) == k, f"frame {frame(w)}, expected {k}"


def timeline_controls(page, w):
    """Scrub, speed (the whole run in about 10 s at 1x), zoom with the wheel, reset."""
    w.locator('[aria-label="Frame"]').fill("200")
    settle(w, 200)
    w.locator('[aria-label="Frame"]').fill("0")
    settle(w, 0)
    before, after = plays(w, 1.0)  # 401 frames in 10 s: about 40 a second
    assert 30 <= after - before <= 90, (before, after)  # clicks take a while under load
    w.locator('[aria-label="Speed"]').select_option("4")
    w.locator('[aria-label="Frame"]').fill("0")
    settle(w, 0)
    before, after = plays(w, 1.0)
    assert after - before >= 100, (before, after)  # 4x: about 160 a second
    assert w.get_attribute("data-ipukit-window") == "0.000,22.000"
    box = w.locator("canvas").bounding_box()
    page.mouse.move(box["x"] + 200, box["y"] + 60)
    zoom_in(page, w, 6)
    a, b = map(float, w.get_attribute("data-ipukit-window").split(","))
    assert 0 <= a < b <= 22 and b - a < 22 / 3, (a, b)  # zoomed in: labels fit
    w.screenshot(path=str(SHOTS / "saved_timeline_zoomed.png"))
    w.locator("canvas").dblclick()
    assert w.get_attribute("data-ipukit-window") == "0.000,22.000"


#: Keeps every frame rate the widget writes while it plays (``data-ipukit-fps``: the
#: frames it drew in each second or so), in ``e.__fps``.
FPS_SEEN = """e => {
    e.__fps = [];
    new MutationObserver(() => e.__fps.push(e.dataset.ipukitFps)).observe(
        e, {attributes: true, attributeFilter: ['data-ipukit-fps']});
}"""


def test_frame_rate_at_scale(chromium, tmp_path):
    """Mk2's 1,472 tiles on 2 IPUs and a timeline of 10,016 spans play at >= 30 fps."""
    from ipukit.parallel.schedule import schedule
    from ipukit.widgets import BSPView, PipelineTimeline

    timeline = PipelineTimeline(schedule("gpipe", 16, 313))
    assert sum(len(tl.boxes) for tl in timeline.timelines) == 10_016
    pages = {"bsp_2x1472": BSPView(demo_trace(2, 1472)).save_html(tmp_path / "bsp.html"),
             "timeline_10016": timeline.save_html(tmp_path / "timeline.html")}
    measured = {}
    ctx = open_chromium(chromium, offline=True)
    try:
        for name, path in pages.items():
            page, w, errors = open_widget(ctx, path)
            w.evaluate(FPS_SEEN)
            w.locator('[aria-label="Play"]').click()
            # the second second of play (the first has the start's work in it)
            page.wait_for_function("e => e.__fps.length >= 2", arg=w.element_handle(),
                                   timeout=20_000)
            measured[name] = float(w.evaluate("e => e.__fps[1]"))
            page.screenshot(path=str(SHOTS / f"fps_{name}.png"), full_page=True)
            assert errors == []
            page.close()
    finally:
        ctx.close()
    print("frames per second:", measured)
    assert min(measured.values()) >= 30, measured


def test_nbconvert_export_plays_offline(chromium, tmp_path):
    """Lesson 01 as `jupyter nbconvert --to html` writes it: its BSPView plays with every
    network request refused (the template's own CDN links are refused too)."""
    lesson = HERE.parent / "notebooks" / "01_ipu_and_bsp.ipynb"
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html",
                    "--output-dir", str(tmp_path), str(lesson)], check=True,
                   capture_output=True, timeout=120)
    path = tmp_path / "01_ipu_and_bsp.html"
    ctx = open_chromium(chromium, offline=True)
    try:
        page, w, errors = open_widget(ctx, path, timeout=20_000)
        w.scroll_into_view_if_needed()
        w.locator('[aria-label="Speed"]').select_option("4")  # 6 phases, a long first one
        rewind(w)
        before, after = plays(w)
        assert after > before
        hover(page, w, "bsp")
        w.screenshot(path=str(SHOTS / "nbconvert_bsp.png"))
        ours = [e for e in errors if "net::ERR_FAILED" not in e]
        assert ours == [], ours
        assert all(not u.startswith("file:") for u in ctx.refused)
    finally:
        ctx.close()



#: True once the current notebook's kernel is idle and has answered kernel_info (whose
#: language_info JupyterLab writes into the notebook's metadata).
KERNEL_READY = """async () => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = w && w.sessionContext && w.sessionContext.session
        && w.sessionContext.session.kernel;
    if (!kernel || kernel.status !== 'idle') return false;
    await kernel.info;
    return true;
}"""


@pytest.fixture
def learners_checkout(tmp_path):
    """Lesson 01's solution, the exercise notebook make_exercises makes of it, and the
    stored lesson notebook, in their folders."""
    from ipukit.grading import make_exercises

    root = tmp_path / "checkout"
    (root / "solutions").mkdir(parents=True)
    (root / "notebooks").mkdir()
    solution = next((HERE.parent / "solutions").glob("01_*.ipynb"))
    shutil.copy(solution, root / "solutions" / solution.name)
    lesson = make_exercises.lesson_name(solution.name)
    shutil.copy(HERE.parent / "notebooks" / lesson, root / "notebooks" / lesson)
    assert make_exercises.main(["--solutions", str(root / "solutions"), "--exercises",
                                str(root / "exercises"), "--no-execute"]) == 0
    return root


def document(name: str) -> str:
    """A JavaScript expression: JupyterLab's loaded document panel of the file ``name``."""
    return ("Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.context"
            f" && w.context.path === {json.dumps(name)} && w.context.isReady)")


def opened_dirty(page, base, token, name):
    """Open ``name`` in JupyterLab, wait for its document, its kernel and the metadata
    JupyterLab writes from it, watch it for 2 s: None when it stays clean, else what was
    dirty. The document is found by its path (JupyterLab's layout restorer may put another
    panel first while it loads)."""
    page.goto(f"{base}/lab/tree/{name}?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    page.wait_for_function(KERNEL_READY, timeout=90_000, polling=200)
    doc = document(name)
    model = f"({doc}).context.model"
    # JupyterLab writes the kernel's metadata just after the kernel is ready
    page.wait_for_function(f"() => {{ const w = {doc}; return w && w.context.model.metadata"
                           ".language_info && w.context.model.metadata.language_info.version; }",
                           timeout=60_000, polling=200)
    for _ in range(20):
        time.sleep(0.1)
        if page.evaluate(f"() => {model}.dirty"):
            return "the document model"
    tab = page.locator(".lm-TabBar-tab", has_text=name.rsplit("/", 1)[-1])
    if "jp-mod-dirty" in tab.first.get_attribute("class"):
        return "the tab"
    return None


@pytest.mark.parametrize("lab", ["learners_checkout"], indirect=True)
def test_opening_a_notebook_does_not_mark_it_unsaved(chromium, lab, learners_checkout):
    """Issue 31: JupyterLab marked an exercise notebook unsaved on opening (the kernel
    filled in language_info). A generated exercise and a lesson notebook open, their
    kernel starts, and the document stays clean; saving it is not a learner's edit."""
    from ipukit.grading.make_exercises import edited_exercise

    base, token = lab
    [exercise] = (learners_checkout / "exercises").glob("01_*.ipynb")
    [lesson] = (learners_checkout / "notebooks").glob("01_*.ipynb")
    ctx = open_chromium(chromium)
    try:
        page = ctx.new_page()
        for path in (exercise, lesson):
            name = path.relative_to(learners_checkout).as_posix()
            dirty = opened_dirty(page, base, token, name)
            assert dirty is None, f"{name}: {dirty} dirty on opening"
        name = exercise.relative_to(learners_checkout).as_posix()
        assert opened_dirty(page, base, token, name) is None, name
        before = exercise.stat().st_mtime_ns
        # the document's own save, awaited (found by its path, as opened_dirty does)
        page.evaluate(f"async () => await ({document(name)}).context.save()")
        assert exercise.stat().st_mtime_ns != before, "JupyterLab did not save the notebook"
        time.sleep(0.5)
        assert not edited_exercise(exercise)
    finally:
        ctx.close()


# -- pages are safe to open ----------------------------------------------------------------
sys.path.insert(0, str(HERE / "browser"))
import hostile  # noqa: E402  (tests/browser/hostile.py: widgets named by payloads)

#: Elements a payload would have made had it been parsed as HTML (the widget's own
#: ``details`` is the bubble measures' help).
PARSED = ", ".join(f".ipukit-widget {t}" for t in
                   ("img", "script", "iframe", "svg", "a", "details:not(.ipukit-help)"))


def watch_dialogs(page, dialogs=None) -> list:
    """Messages of every alert/confirm/prompt the page opens (each dismissed), appended
    to ``dialogs`` (a new list by default)."""
    dialogs = [] if dialogs is None else dialogs

    def seen(d):
        dialogs.append(d.message)
        d.dismiss()
    page.on("dialog", seen)
    return dialogs


#: Hover a grid of ``cols`` x ``rows`` points over the canvas in one round trip: at each, the
#: ``mousemove`` a real mouse sends the canvas (the widget's one hover handler, which fills
#: the tooltip), the tooltip's text when it shows; a row's last point is left to the next
#: animation frame (the hovered item drawn), and ``mouseleave`` ends it. [[i, j, text]].
SWEEP = """async (canvas, [tip, cols, rows]) => {
    const r = canvas.getBoundingClientRect(), shown = [];
    for (let i = 0; i < rows; i++) {
        for (let j = 0; j < cols; j++) {
            canvas.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, view: window,
                clientX: r.left + (j + 0.5) * r.width / cols,
                clientY: r.top + (i + 0.5) * r.height / rows}));
            if (tip.checkVisibility()) shown.push([i, j, tip.innerText]);
        }
        await new Promise(requestAnimationFrame);
    }
    canvas.dispatchEvent(new MouseEvent('mouseleave', {view: window}));
    return shown;
}"""


def sweep(page, w, cols=14, rows=7) -> list[str]:
    """Hover a grid of points over the widget's canvas; the tooltips' texts. The first
    point that shows one is hovered again with the real mouse: the same text."""
    canvas, tip = w.locator("canvas"), w.locator('[role="tooltip"]')
    shown = canvas.evaluate(SWEEP, [tip.element_handle(), cols, rows])
    if shown:
        i, j, text = shown[0]
        box = canvas.bounding_box()
        canvas.hover(position={"x": (j + 0.5) * box["width"] / cols,
                               "y": (i + 0.5) * box["height"] / rows})
        assert tip.is_visible() and tip.inner_text() == text, (tip.inner_text(), text)
        page.mouse.move(0, 0)
    return [text for _, _, text in shown]


#: Scrub the slider ``scrub`` to every ``stride``-th frame in one round trip, each shown
#: (drawn, its words written) before the next; the header's and caption's texts.
WALK = """async (scrub, stride) => {
    const root = scrub.closest('.ipukit-widget'), texts = [];
    for (let k = 0; k <= Number(scrub.max); k += stride) {
        scrub.value = String(k);
        scrub.dispatchEvent(new Event('input'));
        for (let n = 0; root.dataset.ipukitFrame !== String(k) || n < 1; n++) {
            if (n > 60) throw new Error(`frame ${k} not shown`);
            await new Promise(requestAnimationFrame);
        }
        for (const c of ['.ipukit-header', '.ipukit-caption'])
            texts.push(root.querySelector(c).innerText);
    }
    return texts;
}"""


def attack(page, w) -> str:
    """Play; scrub through its frames (every one, or about 50 evenly spaced), then to three
    hovering all over each; click every category button and superstep; play; all the text
    the widget showed (tooltips, headers and captions)."""
    w.scroll_into_view_if_needed()
    plays(w)
    scrub = w.locator('[aria-label="Frame"]')
    last = int(scrub.get_attribute("max"))
    shown = scrub.evaluate(WALK, -(-(last + 1) // 50))
    for k in sorted({0, last // 2, last}):
        scrub.fill(str(k))
        settle(w, k)
        shown += sweep(page, w)
        shown += [w.locator(".ipukit-header").inner_text(),
                  w.locator(".ipukit-caption").inner_text()]
    for button in w.locator(".ipukit-categories button").all():
        button.click()
        shown.append(w.locator(".ipukit-caption").inner_text())
    box = w.locator("canvas").bounding_box()  # clicks: a tile, an op, the superstep strip
    for fy in (0.3, 0.9):
        page.mouse.click(box["x"] + 0.5 * box["width"], box["y"] + fy * box["height"])
    plays(w)
    return "\n".join(shown)


def assert_nothing_ran(page, dialogs):
    for f in page.frames:  # an iframe payload would write to its parent: look everywhere
        assert f.evaluate(f"window.{hostile.FLAG}") is None, f.url
    assert dialogs == []
    assert page.locator(PARSED).count() == 0


def test_the_reported_label_does_not_run(chromium, tmp_path):
    """Issue 26's finding: a span labelled ``<img src=x onerror=...>`` ran its script
    when the saved page played (the caption's innerHTML). Now it is the caption's text."""
    from ipukit.timeline import Span
    from ipukit.widgets import PipelineTimeline

    label = f"<img src=x onerror=window.{hostile.FLAG}=1;alert(1)>"
    path = PipelineTimeline([Span(0, "compute", 0, 10, label=label)]).save_html(
        tmp_path / "t.html")
    ctx = open_chromium(chromium, offline=True)
    try:
        page, w, errors = open_widget(ctx, path, dialogs := [])
        before, after = plays(w)
        assert after > before
        assert_nothing_ran(page, dialogs)
        assert label in w.locator(".ipukit-caption").inner_text()
        assert errors == []
    finally:
        ctx.close()


def test_payloads_in_every_name_never_run_in_saved_pages(chromium, tmp_path):
    """Issue 26 point 5: HTML and JavaScript in every name a program chooses (tensor,
    compute set, vertex class, stream, memory category, span kind and label, panel title)
    reaches a save_html page as text, in all three widgets: played, scrubbed, hovered and
    clicked, no payload runs, and the names show as the characters they are."""
    pages = {kind: w.save_html(tmp_path / f"{kind}.html")
             for kind, w in hostile.widgets().items()}
    ctx = open_chromium(chromium, offline=True)
    try:
        shown = {}
        for kind, path in pages.items():
            page, w, errors = open_widget(ctx, path, dialogs := [])
            shown[kind] = attack(page, w)
            page.screenshot(path=str(SHOTS / f"hostile_{kind}.png"), full_page=True)
            assert_nothing_ran(page, dialogs)
            assert errors == [], (kind, errors)
            page.close()
        assert ctx.refused == []  # not even the img payloads' src=x was fetched
    finally:
        ctx.close()
    # the payloads are on the page as text: the headers, captions and tooltips show them
    p = hostile.payload
    assert p(4) in shown["bsp"] and f"StreamCopy {p(6)} -> {p(0)}" in shown["bsp"]
    assert p(9) in shown["timeline"] and p(10) in shown["timeline"]
    assert p(4) in shown["timeline"]  # a hovered span's label
    assert f"{p(7)} variables" in shown["memory"]  # a category, its button and tooltip
    assert f"in 1 buffer (largest: {p(8)} 32 B)" in shown["memory"]  # a remote buffer
    assert f"RemoteCopy {p(3)} -> {p(8)}" in shown["bsp"]
    assert "\ufffd" in shown["timeline"] or "\ufffd" in shown["bsp"]  # the lone surrogate
    assert "x" * 1000 not in "".join(shown.values())  # 100,000 characters: cut


def test_payloads_never_run_in_an_nbconvert_export(chromium, tmp_path):
    """The same widgets displayed in a notebook, executed and exported with ``jupyter
    nbconvert --to html`` (their text/html output: the page that plays with no kernel):
    played, scrubbed, hovered and clicked offline, no payload runs."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        f"import sys\nsys.path.insert(0, {str(HERE / 'browser')!r})\nimport hostile\n"
        "for w in hostile.widgets().values():\n    display(w)")])
    NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=False,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert [o.output_type for o in nb.cells[0].outputs] == ["display_data"] * 3
    nbformat.write(nb, tmp_path / "hostile.ipynb")
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html",
                    str(tmp_path / "hostile.ipynb")], check=True, capture_output=True,
                   timeout=120)
    ctx = open_chromium(chromium, offline=True)
    try:
        page = ctx.new_page()
        errors, dialogs = watch(page), watch_dialogs(page)
        page.goto((tmp_path / "hostile.html").as_uri())
        widgets = page.locator(".ipukit-widget")
        widgets.nth(2).wait_for(timeout=20_000)
        assert widgets.count() == 3
        shown = [attack(page, widgets.nth(i)) for i in range(3)]
        page.screenshot(path=str(SHOTS / "hostile_nbconvert.png"), full_page=True)
        assert_nothing_ran(page, dialogs)
        assert [e for e in errors if "net::ERR_FAILED" not in e] == []
    finally:
        ctx.close()
    assert hostile.payload(4) in shown[0] and hostile.payload(9) in shown[1]


# -- what a learner sees (issue 31) ---------------------------------------------------------
#: Records every string the page draws on a canvas (window.__drawn).
RECORD_TEXT = """(() => {
  window.__drawn = [];
  const fill = CanvasRenderingContext2D.prototype.fillText;
  CanvasRenderingContext2D.prototype.fillText = function (text, ...rest) {
    window.__drawn.push(String(text));
    return fill.call(this, text, ...rest);
  };
})();"""


def frames_while_playing(page, w, speed="4", limit=20.0) -> list[int]:
    """Press Play at ``speed``; the frame shown every 20 ms until the play stops."""
    w.locator('[aria-label="Speed"]').select_option(speed)
    w.locator('[aria-label="Play"]').click()
    seen, deadline = [], time.time() + limit
    while w.get_attribute("data-ipukit-playing") != "false" and time.time() < deadline:
        seen.append(frame(w))
        time.sleep(0.02)
    drawn_next(page)  # the last frame is drawn on the next animation frame
    return seen + [frame(w)]


def test_what_a_learner_sees(chromium, tmp_path):
    """Lesson 08's timeline in an 800-pixel notebook labels every forward box and names its
    stash lines; a BSPView spends little of its play on host syncs; a MemoryMap opened on
    one category plays every category, from the total."""
    from ipukit.parallel.schedule import schedule
    from ipukit.widgets import BSPView, MemoryMap, PipelineTimeline

    trace = demo_trace(2, 8)
    bsp = BSPView(trace, frame=0)
    memory = MemoryMap(trace)
    memory.frame = memory.names.index("vertex code")  # as lesson 05 leaves it
    pages = {"timeline": PipelineTimeline(schedule("grouped", 4, 8), t_B=2,
                                          compare=schedule("interleaved", 4, 8)),
             "bsp": bsp, "memory": memory}
    pages = {k: w.save_html(tmp_path / f"{k}.html") for k, w in pages.items()}
    host = {k for k, (e, _) in enumerate(bsp.frames)
            if trace.steps[bsp.events[e].step].kind == "host"}
    out = BSPView(trace)  # opened on the exchange out of "sum rows" (remote results)
    out.frame = out.frame_index(next(e for e, ev in enumerate(out.events)
                                     if trace.steps[ev.step].exchange_out_cycles), "exchange out")
    pages["bsp_out"] = out.save_html(tmp_path / "bsp_out.html")
    # a notebook beside an open side panel
    ctx = open_chromium(chromium, viewport={"width": 800, "height": 900})
    ctx.add_init_script(RECORD_TEXT)
    try:
        page, w, errors = open_widget(ctx, pages["timeline"])
        page.wait_for_function("window.__drawn.length > 0")  # its first drawing
        drawn_next(page)
        drawn = page.evaluate("window.__drawn")
        forward = [t for t in drawn if re.fullmatch(r"F\d( s\d| · stage \d)?", t)]
        assert len(forward) >= 2 * 4 * 8, drawn  # every F box of both panels
        legend = "stashed micro-batches per IPU (dot: at the play head):"
        assert drawn.count(legend) == 2 and all(f"IPU {q}" in drawn for q in range(4))
        w.screenshot(path=str(SHOTS / "learner_timeline.png"))

        page, w, errors = open_widget(ctx, pages["bsp"])
        seen = frames_while_playing(page, w)
        assert seen and max(seen) == bsp.num_frames() - 1
        share = sum(k in host for k in seen) / len(seen)
        assert share < 0.2, (share, seen)  # host syncs flash by

        page, w, errors = open_widget(ctx, pages["bsp_out"])
        settle(w, out.frame)
        text = w.inner_text()
        assert "EXCHANGE OUT phase · 1 cycles" in text, text
        assert "go there after the compute phase" in text, text
        drawn = page.evaluate("window.__drawn")
        assert "↓4 B" in drawn and "↑4 B" in drawn, drawn  # tiles i and i + 1
        key = ["exchange out", "compute", "exchange", "sync"]  # drawn right to left
        assert any(drawn[i:i + 4] == key for i in range(len(drawn))), drawn  # the strip's
        w.screenshot(path=str(SHOTS / "learner_bsp_exchange_out.png"))

        page, w, errors = open_widget(ctx, pages["memory"])
        assert frame(w) == memory.names.index("vertex code")
        seen = frames_while_playing(page, w, speed="2")
        assert set(seen) == set(range(len(memory.names))), seen  # every category
        assert frame(w) == len(memory.names) - 1
        assert "one scale for every category" in " ".join(page.evaluate("window.__drawn"))
        w.screenshot(path=str(SHOTS / "learner_memory.png"))
        assert errors == []
    finally:
        ctx.close()


# -- the schedules after Graphcore's (issue 27) ---------------------------------------------
def with_controls(view, path):
    """``view``'s saved page with its schedule controls kept (a saved page drops them: no
    kernel answers them); what a learner's notebook shows, its kind selector included."""
    from ipukit.widgets._player import script_json

    page = view.to_html()
    state = view._state()
    state["_payload"]["meta"]["controls"] = view._payload["meta"]["controls"]
    start = page.index('type="application/json"')
    start = page.index(">", start) + 1
    page = page[:start] + script_json(state) + page[page.index("</script>", start):]
    path.write_text(f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"></head>'
                    f"<body>{page}</body></html>\n", encoding="utf-8")
    return path


def op_point(box, view, span, panel=0):
    """Page coordinates of the middle of ``span``'s box (the layout of timelineView: rows
    of 30 px from y = 22, time from x = 62 to the width less 20)."""
    assert panel == 0 and len(view.timelines[0].ipus) <= 8
    t = span.start + span.duration / 2
    x = 62 + t / view.time(view.num_frames() - 1) * (box["width"] - 82)
    return box["x"] + x, box["y"] + 22 + 30 * span.ipu + 10


def test_new_schedules_play_with_w_ops_and_chunks(chromium, tmp_path):
    """A ZB-H1 (beside 1F1B), a ZB-V and a DualPipeV schedule play offline: the key names
    the W boxes, the W boxes are drawn with their labels and say what they are on hover,
    ZB-V's chunks show on its boxes (bands; ``F3c1`` once zoomed in), a DualPipeV op names
    the unit it runs in, and nothing errs. The kind selector lists every kind, with where
    it comes from in each option's tooltip."""
    from ipukit.parallel.schedule import ALL_KINDS, schedule
    from ipukit.widgets import PipelineTimeline

    views = {"zb_h1": PipelineTimeline(schedule("zb_h1", 4, 8), compare=schedule("1f1b", 4, 8)),
             "zb_v": PipelineTimeline(schedule("zb_v", 4, 8)),
             "dualpipev": PipelineTimeline(schedule("dualpipev", 4, 8))}
    pages = {k: with_controls(v, tmp_path / f"{k}.html") for k, v in views.items()}
    SHOTS.mkdir(parents=True, exist_ok=True)
    ctx = open_chromium(chromium, offline=True)
    ctx.add_init_script(RECORD_TEXT)
    try:
        for kind, view in views.items():
            page, w, errors = open_widget(ctx, pages[kind])
            before, after = plays(w)
            assert after > before, (kind, before, after)
            keys = w.locator(".ipukit-key")
            assert w.locator('.ipukit-key[data-op="W"]').inner_text() == \
                "W: weight gradient"
            drawn = page.evaluate("window.__drawn")
            ws = [b for b in view.timelines[0].boxes if b.kind == "W"]
            assert len([t for t in drawn if re.fullmatch(r"W\d(c\d)?( s\d)?", t)]) >= \
                len(ws) // 2, drawn  # most W boxes carry their name
            box = w.locator("canvas").bounding_box()
            page.mouse.move(*op_point(box, view, ws[0]))
            tip = w.locator('[role="tooltip"]')
            tip.wait_for(state="visible", timeout=5000)
            name = f"W{ws[0].microbatch}" + ("" if kind == "zb_h1" else "c")
            assert tip.inner_text().startswith(name), tip.inner_text()
            assert "weight gradient" in tip.inner_text()
            w.screenshot(path=str(SHOTS / f"after_graphcore_{kind}.png"))
            # every kind in the selector, each with its origin as the tooltip
            options = w.locator('select[aria-label="schedule"] option')
            assert options.all_inner_texts() == list(ALL_KINDS)
            titles = [options.nth(i).get_attribute("title") for i in range(len(ALL_KINDS))]
            assert "ScheduleZBVZeroBubble" in titles[ALL_KINDS.index("zb_v")]
            assert "ScheduleDualPipeV" in titles[ALL_KINDS.index("dualpipev")]
            assert "ScheduleInterleavedZeroBubble" in titles[ALL_KINDS.index("zb_h1")]
            assert "ScheduleInterleaved1F1B" in titles[ALL_KINDS.index("interleaved_1f1b")]
            compare = w.locator('select[aria-label="compare with"]')
            assert compare.input_value() == ("1f1b" if kind == "zb_h1" else "none")
            if kind == "dualpipev":  # a unit's op names the unit's ops, in order
                tl = view.timelines[0]
                unit = tl.units[0]
                page.mouse.move(*op_point(box, view, tl.boxes[unit[1]]))
                names = " → ".join(tl.name(j) for j in unit)
                sync_api.expect(tip).to_contain_text(f"one unit: {names}", timeout=3000)
                assert "backward for the input gradient" in tip.inner_text()
                assert keys.all_inner_texts()[-1] == "bracket: ops run as one unit"
                w.screenshot(path=str(SHOTS / "after_graphcore_dualpipev_unit.png"))
            if kind == "zb_v":
                assert "band: chunk 0…1" in keys.all_inner_texts()[-1]
                page.evaluate("window.__drawn = []")
                page.mouse.move(box["x"] + 200, box["y"] + 60)
                zoom_in(page, w, 4)
                drawn = page.evaluate("window.__drawn")
                chunked = [t for t in drawn if re.fullmatch(r"[FBW]\dc[01]( s\d)?", t)]
                assert {t[3] for t in chunked} == {"0", "1"}, drawn
                w.screenshot(path=str(SHOTS / "after_graphcore_zb_v_zoomed.png"))
                assert "stashed micro-batches per IPU (a chunk's micro-batch counts " \
                    "1/2 (kit convention: equal chunks)) (dot: at the play head):" in drawn
            assert errors == [], (kind, errors)
            page.close()
        assert ctx.refused == []
    finally:
        ctx.close()
