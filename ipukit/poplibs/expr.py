"""Element-wise expressions for ``popops.map`` (Poplar's ``popops::expr``).

``_1``, ``_2``, ... stand for the tensors given to ``map``; numbers become constants;
Python operators and the functions below build the tree (``Exp(_1) * 2 + _2``). A vertex
evaluates the whole tree on its elements in one go, as Poplar's generated map codelets do.

>>> from ipukit.poplibs.expr import _1, _2, Exp
>>> e = Exp(_1) * 2 + _2
>>> str(e), e.num_args()
('ADD(MULTIPLY(EXPONENT(_1), 2), _2)', 2)
"""

from __future__ import annotations

import numbers

from ..errors import IpuError


class Expr:
    """A node: a placeholder (``ARG``), a constant (``CONST``) or an operation."""

    def __init__(self, op: str, *args):
        self.op, self.args = op, args

    def _bin(self, op, other, swap=False):
        other = lift(other)
        return Expr(op, other, self) if swap else Expr(op, self, other)

    def __add__(self, o):
        return self._bin("ADD", o)

    def __radd__(self, o):
        return self._bin("ADD", o, True)

    def __sub__(self, o):
        return self._bin("SUBTRACT", o)

    def __rsub__(self, o):
        return self._bin("SUBTRACT", o, True)

    def __mul__(self, o):
        return self._bin("MULTIPLY", o)

    def __rmul__(self, o):
        return self._bin("MULTIPLY", o, True)

    def __truediv__(self, o):
        return self._bin("DIVIDE", o)

    def __rtruediv__(self, o):
        return self._bin("DIVIDE", o, True)

    def __neg__(self):
        return Expr("NEGATE", self)

    def num_args(self) -> int:
        """The highest placeholder used (``_2`` -> 2)."""
        if self.op == "ARG":
            return self.args[0]
        return max((a.num_args() for a in self.args if isinstance(a, Expr)), default=0)

    def count_ops(self) -> int:
        """Operations in the tree (a vertex's work per element)."""
        if self.op in ("ARG", "CONST"):
            return 0
        return 1 + sum(a.count_ops() for a in self.args)

    def evaluate(self, xp, inputs):
        """The value of the tree with ``_i`` = ``inputs[i-1]`` (arrays of module ``xp``)."""
        if self.op == "ARG":
            return inputs[self.args[0] - 1]
        if self.op == "CONST":
            return self.args[0]
        vals = [a.evaluate(xp, inputs) for a in self.args]
        if self.op in UNARY:
            return UNARY[self.op](xp, vals[0])
        return BINARY[self.op](xp, vals[0], vals[1])

    def __str__(self):
        if self.op == "ARG":
            return f"_{self.args[0]}"
        if self.op == "CONST":
            return repr(self.args[0])
        return f"{self.op}({', '.join(map(str, self.args))})"

    __repr__ = __str__


def lift(x) -> Expr:
    """``Const(x)`` for a number; an Expr stays as it is."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, numbers.Number) and not isinstance(x, bool):
        return Expr("CONST", x)
    raise IpuError(f"popops expressions take numbers and placeholders (_1, _2, ...), got {x!r}")


def _div(xp, a, b):
    if getattr(a, "dtype", None) is not None and a.dtype.kind in "iu":
        return xp.trunc(a / b).astype(a.dtype)  # C integer division truncates towards zero
    return a / b


UNARY = {
    "NEGATE": lambda xp, a: -a,
    "ABSOLUTE": lambda xp, a: xp.abs(a),
    "EXPONENT": lambda xp, a: xp.exp(a),
    "LOGARITHM": lambda xp, a: xp.log(a),
    "INVERSE": lambda xp, a: 1 / a,
    "SQRT": lambda xp, a: xp.sqrt(a),
    "SQUARE": lambda xp, a: a * a,
    "TANH": lambda xp, a: xp.tanh(a),
    "SIGMOID": lambda xp, a: 1 / (1 + xp.exp(-a)),
    "RELU": lambda xp, a: xp.maximum(a, 0),
}
BINARY = {
    "ADD": lambda xp, a, b: a + b,
    "SUBTRACT": lambda xp, a, b: a - b,
    "MULTIPLY": lambda xp, a, b: a * b,
    "DIVIDE": _div,
    "MAXIMUM": lambda xp, a, b: xp.maximum(a, b),
    "MINIMUM": lambda xp, a, b: xp.minimum(a, b),
}

_1, _2, _3, _4 = (Expr("ARG", i) for i in range(1, 5))


def Const(x) -> Expr:  # noqa: N802 - Poplar's names
    return lift(x)


def _unary(op):
    return lambda x: Expr(op, lift(x))


def _binary(op):
    return lambda a, b: Expr(op, lift(a), lift(b))


Neg, Abs, Exp, Log, Inv, Sqrt, Square, Tanh, Sigmoid, Relu = (
    _unary(op) for op in ("NEGATE", "ABSOLUTE", "EXPONENT", "LOGARITHM", "INVERSE", "SQRT",
                          "SQUARE", "TANH", "SIGMOID", "RELU"))
Add, Sub, Mul, Divide, Max, Min = (
    _binary(op) for op in ("ADD", "SUBTRACT", "MULTIPLY", "DIVIDE", "MAXIMUM", "MINIMUM"))
