"""Plain data: what a learner's kernel may hand to the judge (and the judge to the kernel).

A check's trial runs in the learner's kernel and returns plain data only: ``None``,
booleans, numbers, strings, lists, tuples, dicts with string keys and NumPy arrays of
numbers or booleans. :func:`encode` turns such a value into JSON-ready data (arrays as
base64 ``.npy`` bytes, read back with ``allow_pickle=False``) and :func:`decode` turns it
back; nothing is ever unpickled or evaluated, so what the kernel sends can only be data
(kit convention: the channel between the judge and the kernel).

>>> import numpy as np
>>> v = {"y": np.arange(3, dtype=np.float32), "n": 2, "ok": [True, None], "x": np.nan}
>>> w = decode(encode(v))
>>> w["y"].dtype, w["y"].tolist(), w["n"], w["ok"], w["x"]
(dtype('float32'), [0.0, 1.0, 2.0], 2, [True, None], nan)
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
import math

import numpy as np

#: The key that marks an encoded array.
ARRAY = "__ndarray__"
#: The key that marks a float JSON cannot hold (nan, inf, -inf: Jupyter's messages refuse
#: them as numbers).
FLOAT = "__float__"
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
        value = float(value)
        return value if math.isfinite(value) else {FLOAT: repr(value)}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise NotPlainData(f"an array of dtype {value.dtype} is not plain data: a check's "
                               "trial may return arrays of numbers or booleans")
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)  # 0-d stays 0-d; any strides
        return {ARRAY: base64.b64encode(buf.getvalue()).decode("ascii")}
    if isinstance(value, list | tuple):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value) or ARRAY in value or FLOAT in value:
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
        return _array(data[ARRAY])
    if isinstance(data, dict) and set(data) == {FLOAT}:
        if data[FLOAT] not in ("nan", "inf", "-inf"):
            raise NotPlainData(f"{data[FLOAT]!r} is not an encoded float")
        return float(data[FLOAT])
    if isinstance(data, dict) and all(isinstance(k, str) for k in data):
        return {k: decode(v, depth + 1) for k, v in data.items()}
    raise NotPlainData(f"{_a(type(data).__name__)} is not plain data")


def _array(text) -> np.ndarray:
    """The array of an encoded ``.npy``, read only once its header says it holds numbers
    or booleans and exactly as many bytes as follow (a header that claims more data than
    it carries is refused before anything is allocated for it)."""
    if not isinstance(text, str):
        raise NotPlainData("an encoded array must be a base64 string")
    try:
        buf = io.BytesIO(base64.b64decode(text, validate=True))
        version = np.lib.format.read_magic(buf)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                       np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(buf)
    except (ValueError, TypeError) as exc:
        raise NotPlainData(f"an encoded array that cannot be read: {exc}") from None
    if dtype.kind not in "biuf" or dtype.hasobject or dtype.fields is not None:
        raise NotPlainData(f"an array of dtype {dtype} is not plain data")
    count = int(np.prod(shape, dtype=object))
    body = buf.getbuffer()[buf.tell():]
    if count * dtype.itemsize != len(body):
        raise NotPlainData(f"an encoded array of shape {shape} and dtype {dtype} that holds "
                           f"{len(body):,} bytes instead of {count * dtype.itemsize:,}")
    array = np.frombuffer(body, dtype=dtype, count=count).copy()
    return array.reshape(shape, order="F" if fortran else "C")


def _a(name: str) -> str:
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name
