"""Plain data: what a learner's kernel may hand to the judge (and the judge to the kernel).

A check's trial runs in the learner's kernel and returns plain data only: ``None``,
booleans, numbers, strings, lists, tuples, dicts with string keys and NumPy arrays of
numbers or booleans. :func:`encode` turns such a value into JSON-ready data (arrays as
base64 ``.npy`` bytes, read back with ``allow_pickle=False``) and :func:`decode` turns it
back; nothing is ever unpickled or evaluated, so what the kernel sends can only be data
(kit convention: the channel between the judge and the kernel).

>>> import numpy as np
>>> v = {"y": np.arange(3, dtype=np.float32), "n": 2, "ok": [True, None]}
>>> w = decode(encode(v))
>>> w["y"].dtype, w["y"].tolist(), w["n"], w["ok"]
(dtype('float32'), [0.0, 1.0, 2.0], 2, [True, None])
>>> try:
...     encode(object())
... except NotPlainData as exc:
...     print(exc)
an object is not plain data: a check's trial may return numbers, strings, lists, dicts and \
NumPy arrays of numbers
"""

from __future__ import annotations

import base64
import io

import numpy as np

#: The key that marks an encoded array.
ARRAY = "__ndarray__"
#: Deepest nesting accepted (a deeper value is refused, not recursed into for ever).
MAX_DEPTH = 32


class NotPlainData(TypeError):
    """A value that cannot cross between the kernel and the judge."""


def encode(value, depth: int = 0):
    """``value`` as JSON-ready data, or :class:`NotPlainData`."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"a value nested deeper than {MAX_DEPTH} levels is not plain data")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise NotPlainData(f"an array of dtype {value.dtype} is not plain data: a check's "
                               "trial may return arrays of numbers or booleans")
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(value), allow_pickle=False)
        return {ARRAY: base64.b64encode(buf.getvalue()).decode("ascii")}
    if isinstance(value, list | tuple):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value) or ARRAY in value:
            raise NotPlainData("a dict is plain data only with string keys")
        return {k: encode(v, depth + 1) for k, v in value.items()}
    raise NotPlainData(f"{_a(type(value).__name__)} is not plain data: a check's trial may "
                       "return numbers, strings, lists, dicts and NumPy arrays of numbers")


def decode(data, depth: int = 0):
    """The value that :func:`encode` encoded (arrays back as NumPy arrays)."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"data nested deeper than {MAX_DEPTH} levels")
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if isinstance(data, list):
        return [decode(v, depth + 1) for v in data]
    if isinstance(data, dict) and set(data) == {ARRAY}:
        raw = base64.b64decode(str(data[ARRAY]), validate=True)
        array = np.load(io.BytesIO(raw), allow_pickle=False)
        if array.dtype.kind not in "biuf":
            raise NotPlainData(f"an array of dtype {array.dtype} is not plain data")
        return array
    if isinstance(data, dict) and all(isinstance(k, str) for k in data):
        return {k: decode(v, depth + 1) for k, v in data.items()}
    raise NotPlainData(f"{_a(type(data).__name__)} is not plain data")


def _a(name: str) -> str:
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name
