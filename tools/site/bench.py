"""Each lesson's time in the browser (JupyterLite, Pyodide) beside its native time.

``python tools/site/bench.py [--site _site] [--rounds 3] [--lessons 01,02]`` serves a built
site on 127.0.0.1 and, lesson by lesson and round by round (browser then native,
alternating), times:

* in the browser: a fresh Chromium profile opens ``lite/notebooks/?path=notebooks/NN...``,
  runs all cells, and stops when every code cell has run and the kernel is idle (the
  kernel's start included; every host but the local server refused);
* natively: nbclient runs the same notebook in a fresh IPython kernel (its start included).

It prints medians as a Markdown table (BENCHMARKS.md, "In the browser"), the kernel's start
in the browser, any cell whose printed text differs from the stored output, and the site's
size. Screenshots of each lesson's end go to $IPUKIT_SCREENSHOTS (default /tmp/ipukit_png).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from serve import KERNEL_IDLE, OFFLINE_FLAGS, refuse_other_hosts, serve  # noqa: E402

CHROMIUM = os.environ.get("IPUKIT_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--disable-background-networking", "--disable-component-update"]
SHOTS = Path(os.environ.get("IPUKIT_SCREENSHOTS", "/tmp/ipukit_png"))

#: True once every code cell has an execution count (or one shows an error) and the
#: kernel is idle; then the cells' printed text.
DONE = """() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session
        && w.sessionContext.session.kernel;
    if (!k || k.status !== 'idle') return null;
    const cells = w.content.widgets.filter(c => c.model.type === 'code');
    const error = cells.some(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));
    if (!error && cells.some(c => c.model.executionCount === null)) return null;
    return cells.map(c => c.model.outputs.toJSON().filter(o => o.output_type === 'stream'
        || o.output_type === 'error').map(o => o.text || (o.ename + ': ' + o.evalue)).join(''));
}"""
FONT_CACHE = "Matplotlib is building the font cache; this may take a moment.\n"


def stored_text(path: Path) -> list[str]:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream")
            for c in nb.cells if c.cell_type == "code"]


def in_browser(p, base: str, name: str, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM,
                                                   headless=True, args=FLAGS + OFFLINE_FLAGS,
                                                   viewport={"width": 1300, "height": 900})
        refused = refuse_other_hosts(ctx, base)
        try:
            page = ctx.new_page()
            t0 = time.perf_counter()
            page.goto(f"{base}/lite/notebooks/index.html?path=notebooks/{name}")
            page.wait_for_function(KERNEL_IDLE, timeout=timeout_s * 1000, polling=100)
            ready = time.perf_counter() - t0
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            time.sleep(0.5)  # (the kernel goes busy)
            texts = page.wait_for_function(DONE, timeout=timeout_s * 1000, polling=100)
            total = time.perf_counter() - t0
            texts = texts.json_value()
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"lite_{name[:2]}.png"))
        finally:
            ctx.close()
    return {"ready": ready, "total": total, "texts": texts, "refused": refused}


def native(path: Path) -> float:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - t0


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, default=ROOT / "_site")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lessons", help="comma-separated lesson numbers (all in the site)")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    from playwright.sync_api import sync_playwright

    names = sorted(p.name for p in (args.site / "lite" / "files" / "notebooks").glob("*.ipynb"))
    if args.lessons:
        names = [n for n in names if n[:2] in args.lessons.split(",")]
    times = {n: {"browser": [], "native": [], "ready": []} for n in names}
    notes = []
    with serve(args.site) as base, sync_playwright() as p:
        for r in range(args.rounds):
            for n in names:
                b = in_browser(p, base, n, args.timeout)
                t = native(ROOT / "notebooks" / n)
                times[n]["browser"].append(b["total"])
                times[n]["ready"].append(b["ready"])
                times[n]["native"].append(t)
                print(f"round {r + 1} {n}: browser {b['total']:.1f} s (kernel ready "
                      f"{b['ready']:.1f} s), native {t:.1f} s", flush=True)
                if b["refused"]:
                    notes.append(f"{n}: requests refused: {b['refused'][:3]}")
                if r == 0:
                    for i, (got, want) in enumerate(zip(b["texts"], stored_text(
                            ROOT / "notebooks" / n))):
                        got = got.replace(FONT_CACHE, "")  # Pyodide's first matplotlib import
                        if got != want:
                            notes.append(f"{n} code cell {i}: printed\n{got[:600]}\n"
                                         f"stored:\n{want[:600]}")
    print("\n| lesson | in the browser (s) | natively (s) | ratio |\n| --- | ---: | ---: | ---: |")
    total_b = total_n = 0.0
    for n in names:
        b, t = statistics.median(times[n]["browser"]), statistics.median(times[n]["native"])
        total_b, total_n = total_b + b, total_n + t
        print(f"| {n[:-6]} | {b:.1f} | {t:.1f} | {b / t:.1f}x |")
    print(f"| all | {total_b:.1f} | {total_n:.1f} | {total_b / total_n:.1f}x |")
    ready = statistics.median(x for n in names for x in times[n]["ready"])
    print(f"\nkernel ready in the browser (page opened to idle kernel, kit loaded): "
          f"median {ready:.1f} s")
    lite = args.site / "lite"
    print(f"site: {size(args.site) / 2**20:.1f} MiB; lite/ {size(lite) / 2**20:.1f} MiB "
          f"(Pyodide and wheels {size(lite / 'static' / 'pyodide') / 2**20:.1f} MiB); "
          f"lesson pages {size(args.site / 'lessons') / 2**20:.1f} MiB")
    for note in notes:
        print("\nNOTE", note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
