"""Run inside Pyodide by precompile.mjs: bytecode for every ``.py`` of the wheels and the
standard library in /in, written to /out, and Matplotlib's font list.

Pyodide's wheels and ``python_stdlib.zip`` hold sources only, so every import in the browser
compiles them again. Here each ``.py`` gets an unchecked-hash ``.pyc`` (PEP 552: Python
reads it without looking at the source, which stays for tracebacks and completion): in a
wheel at ``__pycache__/NAME.cpython-312.pyc``, in the standard library's zip beside the
source (where ``zipimport`` looks). Matplotlib's wheel also gets a new
``matplotlib/fontlist.json``: Pyodide's Matplotlib keeps its font list there (not in a cache
folder), but the one in Pyodide 0.27.7's wheel says ``"_version": 390`` where that
Matplotlib expects 330, so every new kernel builds the list again; here the same Matplotlib
builds it once.
"""

import importlib.util
import marshal
import os
import sys
import zipfile

SITE = f"/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages/"
STDLIB = f"/lib/python{sys.version_info.major}{sys.version_info.minor}.zip/"
FIXED = (1980, 1, 1, 0, 0, 0)  # a fixed date: the same input gives the same bytes


def pyc(source: bytes, filename: str) -> bytes | None:
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None  # (a test file written for another Python, a template)
    return (importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little")  # hash-based, unchecked
            + importlib.util.source_hash(source) + marshal.dumps(code))


def rewrite(src: str, dst: str, where, prefix: str, extra=None) -> int:
    n = 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        names = set(zin.namelist())
        for name, data in (extra or {}).items():
            zout.writestr(zipfile.ZipInfo(name, FIXED), data, zipfile.ZIP_DEFLATED)
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename not in (extra or {}):
                zout.writestr(info, data)
            if not info.filename.endswith(".py") or where(info.filename) in names:
                continue
            code = pyc(data, prefix + info.filename)
            if code is not None:
                zout.writestr(zipfile.ZipInfo(where(info.filename), FIXED), code,
                              zipfile.ZIP_DEFLATED)
                n += 1
    return n


font_manager = importlib.import_module("matplotlib.font_manager")  # builds fontlist.json
with open(os.path.join(os.path.dirname(font_manager.__file__), "fontlist.json"), "rb") as f:
    FONTLIST = {"matplotlib/fontlist.json": f.read()}

for name in sorted(os.listdir("/in")):
    if name.endswith(".whl"):
        n = rewrite(f"/in/{name}", f"/out/{name}", importlib.util.cache_from_source, SITE,
                    FONTLIST if name.startswith("matplotlib-") else None)
    elif name == "python_stdlib.zip":
        n = rewrite(f"/in/{name}", f"/out/{name}", lambda f: f[:-3] + ".pyc", STDLIB)
    else:
        continue
    print(f"{name}: {n} .pyc")

