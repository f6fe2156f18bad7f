"""NumPy as it treats index arrays on 32-bit WebAssembly (Pyodide), on a 64-bit machine.

On wasm32, ``np.intp`` (NumPy's index type, and its default integer) is int32. NumPy casts
an index, count or repeat array to ``intp`` with the 'safe' rule in ``np.bincount``,
``np.repeat``, ``np.put``, ``np.choose`` and ``ufunc.reduceat`` (NumPy 2.0.2, Pyodide 0.27's;
``np.take`` and fancy indexing cast with 'same_kind' and accept int64). So an explicit
``np.int64`` array there raises ``TypeError: Cannot cast array data from dtype('int64') to
dtype('int32') according to the rule 'safe'`` where a 64-bit machine casts it silently.

:func:`strict_ints` makes this machine refuse the same arrays. On 64-bit Linux ``np.intp``
and ``np.int64`` are one type, so the shim tells them apart by name: while it is on,
``np.int64`` is NumPy's ``longlong`` (the same 64-bit integer under another type code, 'q',
kept through arithmetic as int64 is kept on wasm32), and those functions refuse an array
whose type would not cast safely to int32 on wasm32: 'q' (explicit int64), any uint32 or
uint64. The default integer and ``np.intp`` (type code 'l') pass, as they are int32 there.

Not seen: ndarray methods (``a.repeat(r)``, ``a.put``; NumPy's types cannot be patched) and
int64 arrays that NumPy itself makes (``Generator.integers``' default dtype).
"""

import contextlib
import functools
import sys

import numpy as np

#: Type codes of integer arrays that wasm32 NumPy does not cast to its intp (int32) with
#: the 'safe' rule: longlong (the shim's int64), uint32, and unsigned long/longlong.
_WIDE = {"q": "int64", "Q": "uint64", "L": "uint32", "I": "uint32"}


#: Where refused arrays were met, when :func:`strict_ints` collects instead of raising.
_SEEN: list | None = None


def _check(name, value):
    if isinstance(value, np.ndarray | np.generic) and value.dtype.char in _WIDE:
        if _SEEN is not None:
            f = sys._getframe(2)
            _SEEN.append(f"{f.f_code.co_filename}:{f.f_lineno} np.{name}")
            return
        raise TypeError(f"Cannot cast array data from dtype('{_WIDE[value.dtype.char]}') to "
                        f"dtype('int32') according to the rule 'safe' (np.{name} on wasm32: "
                        "make this index array np.intp)")


def _strict(name, func, *positions):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        for i in positions:
            if isinstance(i, int) and i < len(args):
                _check(name, args[i])
            elif isinstance(i, str) and i in kwargs:
                _check(name, kwargs[i])
        return func(*args, **kwargs)
    return wrapper


#: Each function, and where its index argument is (position, keyword).
STRICT = {"bincount": (0,), "repeat": (1, "repeats"), "put": (1, "ind"),
          "choose": (0, "a")}


@contextlib.contextmanager
def strict_ints(collect: list | None = None):
    """While on, NumPy refuses index arrays that wasm32's NumPy refuses (module doc); with
    a list ``collect``, it lists where instead ("file:line np.name") and goes on."""
    global _SEEN
    _SEEN = collect
    saved = {name: getattr(np, name) for name in [*STRICT, "int64"]}
    try:
        for name, where in STRICT.items():
            setattr(np, name, _strict(name, saved[name], *where))
        np.int64 = np.longlong
        yield
    finally:
        _SEEN = None
        for name, value in saved.items():
            setattr(np, name, value)
