"""``make site``: the lessons as a static website, and JupyterLite, in ``_site/``.

* ``_site/index.html``: the learning path; ``_site/lessons/NN_topic.html``: each lesson with
  its stored outputs (figures; widgets that play from their own HTML, no kernel), links to
  its exercise and to the next lesson; ``_site/browser.html``: what works in the browser.
  Pages are nbconvert's ``lab`` template with every script from another host left out.
* ``_site/lite/``: JupyterLite (jupyterlite-core, the Pyodide kernel) with the lessons,
  exercises and solutions; Pyodide and every wheel come from the site (tools/site/assets.py),
  and ``import ipukit`` loads the kit's wheel built from this checkout.

Nothing is fetched when the site is viewed. ``--lessons 01,02`` builds a reduced site (the
CI test's); ``--no-lite`` only the static pages (no Pyodide assets needed).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import assets  # noqa: E402

MARKER = ".ipukit-site"  # a folder with this file is ours to replace
LITE_NOTEBOOK = "lite/notebooks/index.html?path={}"
FOLDERS = ("notebooks", "exercises", "solutions")


def in_folder(folder: str, lesson: Path) -> str:
    """The name of ``lesson``'s notebook in ``folder``: ``NN_topic.ipynb`` in notebooks/,
    ``NN_topic_exercises.ipynb`` in exercises/, ``NN_topic_solutions.ipynb`` in solutions/."""
    return lesson.name if folder == "notebooks" else f"{lesson.stem}_{folder}.ipynb"


def lessons(selected=None) -> list[Path]:
    found = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
    if selected:
        found = [p for p in found if p.name[:2] in selected]
        missing = set(selected) - {p.name[:2] for p in found}
        if missing:
            raise SystemExit(f"error: no lesson {', '.join(sorted(missing))} in notebooks/")
    return found


def title_and_goal(nb) -> tuple[str, str]:
    first = "".join(nb.cells[0].source) if nb.cells else ""
    title = re.search(r"^#\s+(.+)$", first, re.M)
    goal = re.search(r"\*\*Goal\.\*\*\s+(.+?)(?:\n\n|$)", first, re.S)
    return (title.group(1).strip() if title else "Lesson",
            " ".join(goal.group(1).split()) if goal else "")


def nav(lesson: Path, prev: Path | None, nxt: Path | None, root="../") -> str:
    links = [f'<a href="{root}index.html">ipukit · all lessons</a>']
    if prev:
        links.append(f'<a href="{prev.stem}.html" rel="prev">← {prev.name[:2]}</a>')
    links.append(f'<a href="{root}{LITE_NOTEBOOK.format("notebooks/" + lesson.name)}">'
                 "run this lesson in the browser</a>")
    exercise = "exercises/" + in_folder("exercises", lesson)
    if (ROOT / exercise).exists():
        links.append(f'<a href="{root}{LITE_NOTEBOOK.format(exercise)}">its exercises</a>')
    if nxt:
        links.append(f'<a href="{nxt.stem}.html" rel="next">next: {nxt.name[:2]} →</a>')
    return f'<nav class="ipukit-nav">{" · ".join(links)}</nav>'


def link_targets(page: str, names: set[str]) -> str:
    """The lessons' links to notebooks, made links of the site: a lesson's page, or the
    notebook opened in JupyterLite."""
    def fix(m):
        folder, name = m.group(2), m.group(3)
        if folder in (None, "", "../notebooks/", "./") and name in names:
            return f'{m.group(1)}{Path(name).stem}.html"'
        if folder and folder.strip("./").rstrip("/") in FOLDERS:
            path = f'{folder.strip("./").rstrip("/")}/{name}'
            return f'{m.group(1)}../{LITE_NOTEBOOK.format(path)}"'
        return m.group(0)
    return re.sub(r'(href=")((?:\.\./)?(?:\w+/)?|\./)?(\d\d_\w+\.ipynb)"', fix, page)


def page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1.0">'
            f'<title>{html.escape(title)}</title>'
            '<link rel="stylesheet" href="site.css"></head>'
            f'<body class="ipukit-page"><main>{body}</main></body></html>\n')


def build_pages(out: Path, chosen: list[Path]) -> list[dict]:
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="ipukit",
                            extra_template_basedirs=[str(HERE / "templates")])
    (out / "lessons").mkdir(parents=True)
    names = {p.name for p in chosen}
    index = []
    for i, path in enumerate(chosen):
        nb = nbformat.read(path, as_version=4)
        title, goal = title_and_goal(nb)
        prev = chosen[i - 1] if i else None
        nxt = chosen[i + 1] if i + 1 < len(chosen) else None
        resources = {"metadata": {"name": title},
                     "ipukit": {"root": "../", "nav": nav(path, prev, nxt)}}
        body, _ = exporter.from_notebook_node(nb, resources)
        (out / "lessons" / f"{path.stem}.html").write_text(link_targets(body, names))
        index.append({"name": path.stem, "title": title, "goal": goal})
    return index


def build_index(out: Path, index: list[dict]) -> None:
    import mistune

    rows = []
    for e in index:
        name = e["name"]
        exercise = f"exercises/{name}_exercises.ipynb"
        ex = (f' · <a href="{LITE_NOTEBOOK.format(exercise)}">exercises</a>'
              if (ROOT / exercise).exists() else "")
        rows.append(f'<li><a href="lessons/{name}.html"><b>{html.escape(e["title"])}</b></a>'
                    f'{mistune.html(e["goal"])}<p class="ipukit-links">'
                    f'<a href="lessons/{name}.html">read</a> · '
                    f'<a href="{LITE_NOTEBOOK.format(f"notebooks/{name}.ipynb")}">'
                    f'run in the browser</a>{ex}</p></li>')
    body = (
        "<h1>ipukit: the Graphcore IPU programming model, by doing</h1>"
        "<p>A course in thirteen lessons, from one tile to a sharded, pipelined language-model "
        "head, on an emulator of Poplar (the IPU's graph API) written in NumPy. Read a "
        "lesson here (figures and widgets play in the page), or run it, and its graded "
        "exercises, in your browser with JupyterLite: nothing to install. "
        '<a href="browser.html">What works in the browser</a> · '
        '<a href="lite/lab/index.html">JupyterLite (all notebooks)</a></p>'
        "<h2>The learning path</h2><ol class=\"ipukit-path\">" + "".join(rows) + "</ol>"
        "<p>To run the kit on your machine (the command-line grader, a GPU through CuPy): "
        "clone the repository and run <code>make lab</code>.</p>")
    (out / "index.html").write_text(page("ipukit: the IPU programming model", body))


def build_browser_page(out: Path) -> None:
    import mistune

    text = (ROOT / "docs" / "browser.md").read_text()
    (out / "browser.html").write_text(page("ipukit in the browser",
                                           '<p><a href="index.html">← all lessons</a></p>'
                                           + mistune.html(text)))


def build_lite(out: Path, chosen: list[Path], scratch: Path, kit: Path | None = None) -> dict:
    lite_dir, contents = scratch / "lite", scratch / "contents"
    import nbformat

    for folder in FOLDERS:
        (contents / folder).mkdir(parents=True)
        for p in chosen:
            name = in_folder(folder, p)
            if (ROOT / folder / name).exists():
                # as a Jupyter server sends a notebook: each text one string (nbformat's
                # reader joins the lines); JupyterLite shows a list of lines joined by ","
                nb = nbformat.read(ROOT / folder / name, as_version=4)
                (contents / folder / name).write_text(json.dumps(nb, ensure_ascii=False))
    added = assets.stage_pyodide(lite_dir / "static" / "pyodide", scratch / "kit", kit)
    settings = {"@jupyterlite/pyodide-kernel-extension:kernel": {
        "disablePyPIFallback": True, "loadPyodideOptions": {"packages": assets.PRELOAD}}}
    # exposeAppInBrowser: window.jupyterapp, which the browser test and the benchmark drive
    (lite_dir / "jupyter-lite.json").write_text(json.dumps({
        "jupyter-lite-schema-version": 0,
        "jupyter-config-data": {"appName": "ipukit (JupyterLite)", "exposeAppInBrowser": True,
                                "litePluginSettings": settings}}, indent=1))
    # The front ends come from the pinned wheels, not from this environment's JupyterLab.
    federated = [*(assets.extra_wheels()[n] for n in assets.FEDERATED), assets.kernel_extension()]
    config = lite_dir / "jupyter_lite_config.json"
    config.write_text(json.dumps({"LiteBuildConfig": {
        "ignore_sys_prefix": ["federated_extensions"],
        "federated_extensions": [str(p) for p in federated]}}))
    cmd = [sys.executable, "-m", "jupyterlite_core", "build", "--lite-dir", str(lite_dir),
           "--output-dir", str(out / "lite"), "--no-sourcemaps",
           "--no-unused-shared-packages", "--contents", str(contents), "--config", str(config)]
    r = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"error: jupyter lite build failed:\n{(r.stdout + r.stderr)[-3000:]}")
    return added


def prepare(out: Path) -> None:
    if out.exists():
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise SystemExit(f"error: {out} exists and is not a site this command built; "
                             "remove it or choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("built by tools/site/build.py; replaced on every build\n")
    (out / ".nojekyll").write_text("")  # GitHub Pages: serve folders whose name starts with _


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "_site")
    ap.add_argument("--lessons", help="comma-separated lesson numbers, e.g. 01,02 (all)")
    ap.add_argument("--no-lite", action="store_true", help="only the static pages")
    ap.add_argument("--kit-wheel", type=Path, metavar="WHEEL",
                    help="the kit's wheel, already built from this checkout (default: "
                         "build one; the tests build one per run for all)")
    args = ap.parse_args(argv)
    if args.kit_wheel and not (args.kit_wheel.is_file() and args.kit_wheel.suffix == ".whl"):
        ap.error(f"--kit-wheel {args.kit_wheel}: no wheel there (pip wheel --no-deps .)")
    chosen = lessons(args.lessons.split(",") if args.lessons else None)
    out = args.out.resolve()
    t0 = time.perf_counter()
    prepare(out)
    shutil.copy2(HERE / "site.css", out / "site.css")
    build_index(out, build_pages(out, chosen))
    build_browser_page(out)
    if not args.no_lite:
        with tempfile.TemporaryDirectory(prefix="ipukit-site-") as tmp:
            try:
                added = build_lite(out, chosen, Path(tmp), args.kit_wheel)
            except assets.AssetsUnavailable as e:
                print(f"error: the Pyodide assets could not be had: {e}", file=sys.stderr)
                return 3
        print("JupyterLite: Pyodide", assets.PYODIDE_VERSION, "with",
              ", ".join(f"{k} ({v})" for k, v in added.items()))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"built {out} ({len(chosen)} lessons, {size / 2**20:.1f} MiB) "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
