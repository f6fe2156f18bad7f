"""Check that compilation gives the same result on two trees (a speed change must not change
what ``compile_graph`` produces): every Step field, the memory tables, the compiled program
tree (vertex groups and every Access) and every compile error with its message.

Record each tree's compiles while running tests (a pytest plugin), in each tree's root (so
that its own ``ipukit`` is imported; BASE is e.g. ``git archive`` of the base commit), then
compare::

    cd BASE && PYTHONPATH=$PWD:/path/to/benchmarks COMPILE_DUMP=/tmp/base.pkl python -m pytest \
        -p check_compile -o addopts="" -q --hypothesis-seed=0 -p no:cacheprovider TESTS
    cd MINE && PYTHONPATH=$PWD:$PWD/benchmarks COMPILE_DUMP=/tmp/mine.pkl python -m pytest ...
    python benchmarks/check_compile.py /tmp/base.pkl /tmp/mine.pkl [--costs-only]

Each compile is recorded under the test's id and its number within the test.
"""

from __future__ import annotations

import os
import pickle
import sys
import types

import numpy as np

_records: dict = {}
_test = ["(outside a test)", 0]


def _value(x):
    """A plain, comparable value: arrays as (dtype, shape, bytes), records field by field."""
    from ipukit import compile as c  # noqa: PLC0415

    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, np.dtype):
        return ("dtype", x.str)
    if isinstance(x, np.generic):
        return ("scalar", x.dtype.str, x.item())
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_value(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple((k if isinstance(k, str) else repr(k), _value(v))
                              for k, v in x.items()))
    if isinstance(x, type):
        return ("class", x.__module__, x.__qualname__)
    if isinstance(x, range):
        return ("range", x.start, x.stop, x.step)
    names = getattr(type(x), "__dataclass_fields__", None)
    if names is not None and type(x).__module__ in (c.__name__, "ipukit.trace",
                                                    "ipukit.liveness"):
        return (type(x).__name__, tuple((n, _value(getattr(x, n))) for n in names
                                        if n != "graph"))
    if isinstance(x, (int, float, str, bool, type(None))):
        return x
    if isinstance(x, types.FunctionType):  # (by name: its repr holds an address)
        return ("function", x.__module__, x.__qualname__)
    return ("other", type(x).__qualname__, repr(x))


def _executable(exe) -> dict:
    mem = exe.memory  # by what it offers (compile may defer its liveness analysis to a read)
    memory = {k: getattr(mem, k) for k in ("categories", "bytes_per_tile", "always_live",
                                           "liveness", "remote")}
    return {"steps": [_value(s) for s in exe.steps], "memory": _value(memory),
            "programs": _value(exe.programs)}


def pytest_configure(config):
    from ipukit import compile as c  # noqa: PLC0415

    run = c._Compiler.run

    def recorded(self, programs):
        key = (_test[0], _test[1])
        _test[1] += 1
        try:
            exe = run(self, programs)
        except Exception as e:
            _records[key] = {"error": (type(e).__name__, str(e))}
            raise
        _records[key] = _executable(exe)
        return exe

    c._Compiler.run = recorded


def pytest_runtest_setup(item):
    _test[0], _test[1] = item.nodeid, 0


def pytest_unconfigure(config):
    with open(os.environ["COMPILE_DUMP"], "wb") as f:
        pickle.dump(_records, f)


def _first_difference(a, b, path="") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {a!r:.200} != {b!r:.200}"
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(a)} != {sorted(b)}"
        return next((d for k in a if (d := _first_difference(a[k], b[k], f"{path}.{k}"))),
                    None)
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b))
                     if (d := _first_difference(x, y, f"{path}[{i}]"))), None)
    return None if a == b else f"{path}: {a!r:.200} != {b!r:.200}"


def main(base: str, mine: str, costs_only: bool = False) -> int:
    """``costs_only`` (``--costs-only``): compare every Step, the memory tables and the
    errors, and only count the compiles whose program tree (vertex groups, Accesses)
    differs: for a change that lays vertex fields out differently (a region instead of an
    index array) but must cost, place and refuse exactly the same."""
    with open(base, "rb") as f:
        a = pickle.load(f)
    with open(mine, "rb") as f:
        b = pickle.load(f)
    bad = programs = 0
    for key in sorted(a.keys() | b.keys()):
        if key not in a or key not in b:
            print("only in", "base" if key in a else "mine", key)
            bad += 1
            continue
        x, y = a[key], b[key]
        if costs_only and "programs" in x and "programs" in y:
            programs += x["programs"] != y["programs"]
            x, y = ({k: v for k, v in r.items() if k != "programs"} for r in (x, y))
        if (d := _first_difference(x, y)) is not None:
            print("DIFFERS", key, d)
            bad += 1
    steps = sum(len(r.get("steps", ())) for r in a.values())
    errors = sum("error" in r for r in a.values())
    print(f"{len(a)} compiles ({steps} steps, {errors} errors) in base, {len(b)} in mine: "
          f"{bad} differ" + (f" (program trees laid out differently: {programs})"
                             if costs_only else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--costs-only"]
    sys.exit(main(*args[:2], costs_only="--costs-only" in sys.argv))
