"""No import circle anywhere in ipukit, and ``ipukit.parallel`` in one-way layers.

Every ``import`` statement of every module counts, at the top or inside a function (a
deferred import does not hide a circle). DESIGN.md, "Layout"; issue 27 point 5.
"""

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: ``ipukit.parallel``'s layers, bottom first: a module imports only from its own layer
#: and those below it (``ipukit.parallel.emulated`` covers the package and its modules).
LAYERS = {
    "the model": ("nn", "optim"),
    "schedules": ("schedule", "schedule_orders"),
    "the NumPy runner": ("checks", "replication", "collectives", "concurrent", "runner",
                         "pipeline_data"),
    "the emulated runner": ("emulated",),
    "the front ends": ("sharded", "frontend_tf", "frontend_poptorch", "keras", "pipelining",
                       ""),  # "": the package's __init__, which gathers them
}


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of the package under ``root`` by dotted name: (file, is a package)."""
    out = {}
    for path in sorted((root / "ipukit").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def imports_of(name: str, source: str, package: bool, known) -> set[str]:
    """The ipukit modules that ``source`` (module ``name``) imports, anywhere in it:
    ``from . import x`` of a submodule is that submodule, of a name the package."""
    here = name if package else name.rpartition(".")[0]
    found = set()

    def nearest(dotted):  # the module an import names (a name in it: the module itself)
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {nearest(a.name) for a in node.names if a.name.startswith("ipukit")}
        elif isinstance(node, ast.ImportFrom):
            base = (importlib.util.resolve_name("." * node.level + (node.module or ""), here)
                    if node.level else node.module or "")
            if base.startswith("ipukit"):
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.add(sub if sub in known else nearest(base))
    found.discard(name)
    found.discard("")
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(name, path.read_text(), package, known)
            for name, (path, package) in known.items()}


def circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle (``[a, b, ..., a]``) if there is one, else None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def layer_of(name: str) -> int | None:
    """The index in :data:`LAYERS` of an ``ipukit.parallel`` module, else None."""
    if name != "ipukit.parallel" and not name.startswith("ipukit.parallel."):
        return None
    rest = name[len("ipukit.parallel."):] if name != "ipukit.parallel" else ""
    top = rest.split(".")[0]
    for i, members in enumerate(LAYERS.values()):
        if top in members:
            return i
    raise AssertionError(f"{name} is in none of parallel's layers: add it to LAYERS "
                         "(and to the layers DESIGN.md and ipukit/parallel/__init__.py name)")


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Imports in ipukit.parallel from a higher layer into a lower one."""
    names = list(LAYERS)
    bad = []
    for src, deps in sorted(edges.items()):
        low = layer_of(src)
        for dst in sorted(deps):
            high = layer_of(dst)
            if low is not None and high is not None and high > low:
                bad.append(f"{src} ({names[low]}) imports {dst} ({names[high]})")
    return bad


def test_no_import_circle_anywhere_in_ipukit():
    found = circle(graph())
    assert found is None, "import circle: " + " -> ".join(found)


def test_parallel_imports_one_way_through_its_layers():
    edges = graph()
    assert {layer_of(n) for n in edges if n.startswith("ipukit.parallel")} == set(
        range(len(LAYERS)))  # every module has a layer, every layer a module
    assert upward(edges) == []


def test_the_checks_can_fail(tmp_path):
    """A circle hidden in a function, and an import against the layers, are found."""
    pkg = tmp_path / "ipukit" / "parallel"
    (pkg / "emulated").mkdir(parents=True)
    files = {"ipukit/__init__.py": "", "ipukit/parallel/__init__.py": "",
             "ipukit/parallel/nn.py": "from .schedule import is_count\n",
             "ipukit/parallel/schedule.py": "def f():\n    from . import runner\n",
             "ipukit/parallel/runner.py": "import ipukit.parallel.schedule\n",
             "ipukit/parallel/emulated/__init__.py": "from .stages import Stage\n",
             "ipukit/parallel/emulated/stages.py": "from ..nn import Dense\n"
                                                   "from .. import sharded\n",
             "ipukit/parallel/sharded.py": "import numpy\n"}
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    edges = graph(tmp_path)
    assert edges["ipukit.parallel.schedule"] == {"ipukit.parallel.runner"}  # deferred
    assert edges["ipukit.parallel.emulated"] == {"ipukit.parallel.emulated.stages"}
    assert edges["ipukit.parallel.emulated.stages"] == {"ipukit.parallel.nn",
                                                        "ipukit.parallel.sharded"}
    assert circle(edges) in (["ipukit.parallel.runner", "ipukit.parallel.schedule",
                              "ipukit.parallel.runner"],
                             ["ipukit.parallel.schedule", "ipukit.parallel.runner",
                              "ipukit.parallel.schedule"])
    assert upward(edges) == [
        "ipukit.parallel.emulated.stages (the emulated runner) imports "
        "ipukit.parallel.sharded (the front ends)",
        "ipukit.parallel.nn (the model) imports ipukit.parallel.schedule (schedules)",
        "ipukit.parallel.schedule (schedules) imports ipukit.parallel.runner "
        "(the NumPy runner)"]
    (tmp_path / "ipukit/parallel/extra.py").write_text("")
    with pytest.raises(AssertionError, match="extra is in none of parallel's layers"):
        upward(graph(tmp_path))
