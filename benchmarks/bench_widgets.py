"""The widgets in the browser against the kernel-drawn flipbook they replaced.

Per widget: building it in Python (its data for the browser, sent once; median of 3 ms)
and the payload's size; one matplotlib PNG frame (what the old flipbook drew in the kernel
for every step of Play; median of 5 ms) and how many such frames a second that allows;
and the frames a second the browser draws while playing, measured in the page
(``data-ipukit-fps``) in headless Chromium (Debian's, via Playwright) on the widget's
``save_html`` page, when Chromium is installed.

    .venv/bin/python benchmarks/bench_widgets.py
"""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ipukit as ipu
from ipukit.parallel.schedule import schedule
from ipukit.widgets import BSPView, MemoryMap, PipelineTimeline


class SumVertex(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.sum(axis=-1)


def trace(num_ipus, tiles_per_ipu):
    dev = ipu.IPUModel(num_ipus=num_ipus, tiles_per_ipu=tiles_per_ipu).create_device()
    g = ipu.Graph(dev.target)
    n = dev.target.num_tiles
    sizes = np.random.default_rng(0).integers(4, 40, n).tolist()
    x = g.add_variable(ipu.FLOAT, [sum(sizes)], "x")
    y = g.add_variable(ipu.FLOAT, [n], "y")
    z = g.add_variable(ipu.FLOAT, [n], "z")
    cs = g.add_compute_set("sum rows")
    start = 0
    for i, s in enumerate(sizes):
        g.set_tile_mapping(x[start:start + s], i)
        g.set_tile_mapping(y[i], i)
        g.set_tile_mapping(z[i], (i + n // 2 + 1) % n)
        v = g.add_vertex(cs, SumVertex, {"x": x[start:start + s], "out": y[i]})
        g.set_tile_mapping(v, (i + 1) % n if i % 7 == 0 else i)
        start += s
    eng = ipu.Engine(g, ipu.Sequence(ipu.Execute(cs), ipu.Copy(y, z)))
    eng.load(dev)
    eng.run()
    return eng.trace


def median_ms(fn, args):
    """Median milliseconds of ``fn(a)`` over ``args``."""
    times = []
    for a in args:
        t0 = time.perf_counter()
        fn(a)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def payload_kib(view) -> float:
    p = view._payload
    binary = sum(len(a["data"]) for a in p["arrays"].values())
    return (binary + len(json.dumps(p["meta"]))) / 1024


def browser_fps(views: dict, seconds: float = 3.5) -> dict:
    """Frames a second each widget draws while playing, as its page measures them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    try:
        from playwright.sync_api import sync_playwright

        from tests.test_browser import CHROMIUM, FLAGS
    except Exception as e:  # noqa: BLE001 - no browser: report the Python side only
        print(f"(no browser frame rates: {e})")
        return {}
    if CHROMIUM is None:
        print("(no browser frame rates: Chromium is not installed)")
        return {}
    out = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for i, (name, view) in enumerate(views.items()):
            page.goto(view.save_html(Path(tmp) / f"{i}.html").as_uri())
            root = page.locator(".ipukit-widget")
            root.wait_for()
            root.locator('[aria-label="Play"]').click()
            time.sleep(seconds)
            out[name] = float(root.get_attribute("data-ipukit-fps"))
        browser.close()
    return out


def main():
    small, mk2 = trace(2, 8), trace(2, 1472)  # built once: only the widgets are timed
    cases = [
        ("BSPView, 2 IPUs x 8 tiles", lambda: BSPView(small)),
        ("BSPView, 2 IPUs x 1472 tiles", lambda: BSPView(mk2)),
        ("PipelineTimeline, grouped vs 1f1b, 4 stages, GA 8",
         lambda: PipelineTimeline(schedule("grouped", 4, 8), compare=schedule("1f1b", 4, 8))),
        ("PipelineTimeline, gpipe 16 stages, GA 313 (10,016 spans)",
         lambda: PipelineTimeline(schedule("gpipe", 16, 313))),
        ("MemoryMap, 2 IPUs x 1472 tiles", lambda: MemoryMap(mk2)),
    ]
    views, rows = {}, []
    for name, make in cases:
        build = median_ms(lambda f: f(), [make] * 3)
        view = views[name] = make()
        n = view.num_frames()
        frame = median_ms(view.render, [k * (n - 1) // 4 for k in range(5)])
        rows.append((name, build, payload_kib(view), frame))
    fps = browser_fps(views)
    print(f"{'widget':<58}{'build ms':>9}{'data KiB':>9}{'PNG frame ms':>13}"
          f"{'kernel fps':>11}{'browser fps':>12}")
    for name, build, kib, frame in rows:
        print(f"{name:<58}{build:>9.0f}{kib:>9.0f}{frame:>13.0f}{1e3 / frame:>11.1f}"
              f"{fps.get(name, float('nan')):>12.1f}")


if __name__ == "__main__":
    main()
