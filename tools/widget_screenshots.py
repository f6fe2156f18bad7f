"""Screenshots of the widgets for the README, taken in headless Chromium from their
``save_html`` pages (Debian's chromium through Playwright; no browser download): the three
widgets, and a PipelineTimeline of each schedule after Graphcore's (``after_*``).

    PYTHONPATH=$PWD python tools/widget_screenshots.py docs/widgets [NAME ...]
"""

import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from ipukit.parallel.schedule import schedule
from ipukit.widgets import BSPView, MemoryMap, PipelineTimeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.test_browser import CHROMIUM, FLAGS, demo_trace, op_point  # noqa: E402


def offloaded_trace():
    """An emulated 3-stage pipeline (Adam) whose optimiser state is in remote buffers."""
    import numpy as np

    import ipukit as ipu
    from ipukit.parallel import nn, optim, pipeline

    target = ipu.IPUModel(num_ipus=3, tiles_per_ipu=4).create_device().target
    stages = [[nn.Dense(6, 8, rng=1), nn.ReLU()], [nn.Dense(8, 8, rng=2), nn.ReLU()],
              [nn.Dense(8, 3, rng=3)]]
    p = pipeline(stages, None, 6, optimizer=optim.Adam(0.01), loss=nn.SoftmaxCrossEntropy(),
                 target=target, emulate=True, offload_optimizer_state=True)
    rng = np.random.default_rng(0)
    return p.run(rng.normal(size=(36, 6)).astype("float32"), rng.integers(0, 3, 36)).trace


def widgets() -> dict:
    """Name -> (widget, where to hover: fractions of its canvas, an op's Span, or None)."""
    trace = demo_trace(2, 8)
    bsp = BSPView(trace)
    bsp.frame = bsp.frame_index(1, "exchange")
    timeline = PipelineTimeline(schedule("grouped", 4, 8), compare=schedule("1f1b", 4, 8))
    timeline.frame = 150
    out = {"bsp_view": (bsp, (0.1, 0.25)), "pipeline_timeline": (timeline, None),
           "memory_map": (MemoryMap(trace), (0.42, 0.22)),  # its tooltip clear of the scale
           "memory_map_streaming": (MemoryMap(offloaded_trace()), None)}
    after = {"zb_h1": (schedule("zb_h1", 4, 8), schedule("1f1b", 4, 8)),
             "interleaved_1f1b": (schedule("interleaved_1f1b", 4, 8, virtual_stages=2),
                                  schedule("1f1b", 4, 8)),
             "zb_v": (schedule("zb_v", 4, 8), schedule("zb_h1", 4, 8)),
             "dualpipev": (schedule("dualpipev", 4, 8), None)}
    for kind, (s, other) in after.items():
        view = PipelineTimeline(s, compare=other)
        view.frame = 200
        boxes = view.timelines[0].boxes  # hover the first W (a fused one, for DualPipeV)
        w = next((b for b in boxes if b.kind == "W"), boxes[len(boxes) // 3])
        out[f"after_{kind}"] = (view, w)
    return out


def main(out: Path, names=()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        for name, (w, hover) in widgets().items():
            if names and name not in names:
                continue
            page.goto(w.save_html(Path(tmp) / f"{name}.html").as_uri())
            root = page.locator(".ipukit-widget")
            root.wait_for()
            box = page.locator("canvas").bounding_box()
            if isinstance(hover, tuple):
                page.mouse.move(box["x"] + hover[0] * box["width"],
                                box["y"] + hover[1] * box["height"])
            elif hover is not None:
                page.mouse.move(*op_point(box, w, hover))
            time.sleep(0.5)
            root.screenshot(path=str(out / f"{name}.png"))
            print(out / f"{name}.png")
        browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/widgets"), sys.argv[2:])
