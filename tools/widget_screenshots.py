"""Screenshots of the three widgets for the README, taken in headless Chromium from their
``save_html`` pages (Debian's chromium through Playwright; no browser download).

    PYTHONPATH=$PWD python tools/widget_screenshots.py docs/widgets
"""

import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from ipukit.parallel.schedule import schedule
from ipukit.widgets import BSPView, MemoryMap, PipelineTimeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.test_browser import CHROMIUM, FLAGS, demo_trace  # noqa: E402


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    trace = demo_trace(2, 8)
    bsp = BSPView(trace)
    bsp.frame = bsp.frame_index(1, "exchange")
    timeline = PipelineTimeline(schedule("grouped", 4, 8), compare=schedule("1f1b", 4, 8))
    timeline.frame = 150
    memory = MemoryMap(trace)
    widgets = {"bsp_view": (bsp, (0.1, 0.25)), "pipeline_timeline": (timeline, None),
               "memory_map": (memory, (0.42, 0.22))}  # its tooltip clear of the scale
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        for name, (w, hover) in widgets.items():
            page.goto(w.save_html(Path(tmp) / f"{name}.html").as_uri())
            root = page.locator(".ipukit-widget")
            root.wait_for()
            if hover:
                box = page.locator("canvas").bounding_box()
                page.mouse.move(box["x"] + hover[0] * box["width"],
                                box["y"] + hover[1] * box["height"])
            time.sleep(0.5)
            root.screenshot(path=str(out / f"{name}.png"))
            print(out / f"{name}.png")
        browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/widgets"))
