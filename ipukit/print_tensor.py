"""Poplar's PrintTensor text (``poplar/PrintTensor.hpp``): :class:`PrintTensorFmt` and
:func:`format_tensor`, which ``PrintTensor`` programs print through.

>>> import numpy as np
>>> format_tensor("v", np.array([6, 9, 12], np.int32))
'v: [ 6  9 12]'
>>> format_tensor("f", np.array([1.0, 2.5], np.float32))
'f: [1.0000000 2.5000000]'
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .errors import ProgramError


@dataclass(frozen=True)
class PrintTensorFmt:
    """``poplar::PrintTensorFmt``: how PrintTensor lays a tensor out (Poplar's defaults).

    Over ``summarise_threshold`` elements (0: never) only ``edge_items`` at each end of
    every dimension are shown, with ``...`` between; rows longer than ``max_line_width``
    characters (0: never) are split; elements are padded to a common width. Floats show
    ``digits`` significant digits (0: each element unaligned, as it comes);
    ``float_format`` is ``"auto"``, ``"fixed"``, ``"scientific"`` or ``"none"``.
    (kit convention: Poplar does not publish its "auto" analysis; ipukit uses fixed
    notation, scientific when the largest magnitude reaches 1e8 or the smallest non-zero
    one is under 1e-4.)
    """

    summarise_threshold: int = 1000
    edge_items: int = 3
    max_line_width: int = 75
    digits: int = 8
    float_format: str = "auto"
    separator: str = " "
    open_bracket: str = "["
    close_bracket: str = "]"

    def __post_init__(self):
        for name in ("summarise_threshold", "edge_items", "max_line_width", "digits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, numbers.Integral)
                                               and value >= 0):
                raise ProgramError(f"PrintTensorFmt: {name} must be a non-negative int, got "
                                   f"{value!r}")
        if self.float_format not in ("auto", "fixed", "scientific", "none"):
            raise ProgramError(f"PrintTensorFmt: float_format must be 'auto', 'fixed', "
                               f"'scientific' or 'none', got {self.float_format!r}")



def format_tensor(title: str, values: np.ndarray, fmt: PrintTensorFmt | None = None) -> str:
    """Poplar's PrintTensor text with ``fmt`` (default ``PrintTensorFmt()``): ``v: [5 7 9]``,
    ``v: [ 6  9 12]``, ``v: [1.0000000 2.5000000]``; 2-D and more one row per line."""
    fmt = fmt or PrintTensorFmt()
    values = np.asarray(values)
    summarise = 0 < fmt.summarise_threshold < values.size
    edge = fmt.edge_items if summarise else None
    shown = _edges(values, edge)
    item = _element_format(shown, values.dtype, fmt)

    def row(a, indent):
        parts = _items(a, edge, item)
        lines, line = [], " " * indent + fmt.open_bracket
        for k, part in enumerate(parts):
            piece = (fmt.separator if k else "") + part
            if (fmt.max_line_width and k and len(line) + len(piece) + 1 > fmt.max_line_width):
                lines.append(line)
                line = " " * (indent + 1) + part
            else:
                line += piece
        return "\n".join([*lines, line + fmt.close_bracket])

    def block(a, indent):
        if a.ndim == 1:
            return row(a, indent)
        pad = " " * indent
        inner = []
        for i in _indices(len(a), edge):
            inner.append(pad + "  ..." if i is None else block(a[i], indent + 2))
        return pad + fmt.open_bracket + "\n" + "\n".join(inner) + "\n" + pad + \
            fmt.close_bracket

    if values.ndim == 0:
        return f"{title}: {item(values)}"
    return f"{title}: {block(values, 0).lstrip()}"


def _indices(n: int, edge: int | None) -> list:
    """The indices shown along a dimension of ``n``; None marks the ``...``."""
    if edge is None or n <= 2 * edge:
        return list(range(n))
    return [*range(edge), None, *range(n - edge, n)]


def _edges(a: np.ndarray, edge: int | None) -> np.ndarray:
    """The elements a summary shows (all of them when not summarised), flat."""
    for axis in range(a.ndim):
        keep = [i for i in _indices(a.shape[axis], edge) if i is not None]
        a = np.take(a, keep, axis=axis)
    return a.reshape(-1)


def _items(a: np.ndarray, edge, item) -> list[str]:
    return ["..." if i is None else item(a[i]) for i in _indices(len(a), edge)]


def _element_format(shown: np.ndarray, dtype, fmt: PrintTensorFmt):
    """A function from one element to its text, padded to the width of the widest."""
    if dtype.kind != "f":
        def text(x):
            return str(int(x))
    else:
        finite = np.abs(shown[np.isfinite(shown)]).astype(np.float64)
        style = fmt.float_format if fmt.digits else "none"
        big = float(finite.max()) if finite.size else 0.0
        nonzero = finite[finite > 0]
        if style == "auto":
            small = float(nonzero.min()) if nonzero.size else 1.0
            style = "scientific" if big >= 1e8 or small < 1e-4 else "fixed"
        int_digits = len(str(int(big))) if big >= 1 else 1
        decimals = max(fmt.digits - int_digits, 0)

        def text(x):
            x = float(x)
            if not np.isfinite(x):
                return str(x)
            if style == "fixed":
                return f"{x:.{decimals}f}"
            if style == "scientific":
                return f"{x:.{max(fmt.digits - 1, 0)}e}"
            return f"{x:g}"
    if not fmt.digits or shown.size == 0:
        return text
    width = max(len(text(x)) for x in shown)
    return lambda x: text(x).rjust(width)
