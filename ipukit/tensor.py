"""Tensors and their views (``poplar::Tensor``).

A tensor is metadata only: a name, a type and, for every element, its *address* in the
graph's storage for that type. Views (slice, index, flatten, reshape, transpose, concat)
make new address arrays and never copy data, so writing through a view writes the
original variable, as in Poplar.

>>> import ipukit as ipu
>>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=4).create_device().target)
>>> v = g.add_variable(ipu.FLOAT, [4, 4], "v")
>>> v.slice([1, 1], [2, 4]).shape, v[2].shape, v.transpose().shape
((1, 3), (4,), (4, 4))
"""

from __future__ import annotations

import numpy as np

from .errors import GraphConnectionError, IpuError

FLOAT = np.dtype(np.float32)
HALF = np.dtype(np.float16)
INT = np.dtype(np.int32)
UNSIGNED_INT = np.dtype(np.uint32)
BOOL = np.dtype(np.bool_)

TYPE_NAMES = {FLOAT: "float", HALF: "half", INT: "int", UNSIGNED_INT: "unsigned int",
              BOOL: "bool"}


def as_type(dtype) -> np.dtype:
    """Return one of ipukit's five element types, or raise naming the allowed ones."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in TYPE_NAMES:
        raise IpuError(
            f"unsupported element type {dtype!r}; use ipu.FLOAT, ipu.HALF, ipu.INT, "
            "ipu.UNSIGNED_INT or ipu.BOOL"
        )
    return dt


class Tensor:
    """A view of graph storage: ``idx`` holds each element's address for its ``dtype``."""

    __slots__ = ("graph", "dtype", "idx", "_parent", "_what")

    def __init__(self, graph, dtype: np.dtype, idx: np.ndarray, name: str, parent=None):
        # A view's name ("v[1:3]") is built only when asked for: views are made often.
        self.graph, self.dtype, self.idx = graph, dtype, idx
        self._parent, self._what = parent, name

    @property
    def name(self) -> str:
        if self._parent is None:
            return self._what
        what = self._what if isinstance(self._what, str) else _describe(self._what)
        return self._parent.name + what

    shape = property(lambda self: self.idx.shape)
    rank = property(lambda self: self.idx.ndim)

    def num_elements(self) -> int:
        return int(self.idx.size)

    def __len__(self) -> int:
        if self.rank == 0:
            raise TypeError(f"tensor '{self.name}' is a scalar (shape ()); it has no length")
        return self.idx.shape[0]

    def __iter__(self):
        """The tensor's rows, ``t[0], t[1], …`` (so ``a, b = t`` works)."""
        return (self[i] for i in range(len(self)))

    def _view(self, idx: np.ndarray, what) -> Tensor:
        return Tensor(self.graph, self.dtype, idx, what, self)

    def __getitem__(self, key) -> Tensor:
        if self.rank == 0:
            raise IpuError(f"tensor '{self.name}' is a scalar (shape ()); it has no elements "
                           "to index")
        if type(key) is int and -len(self.idx) <= key < len(self.idx):  # fast path: t[i]
            return Tensor(self.graph, self.dtype, self.idx[key], key, self)
        keys = key if isinstance(key, tuple) else (key,)
        for k in keys:
            if not (isinstance(k, int | np.integer | slice) or k is Ellipsis):
                raise IpuError(
                    f"tensor '{self.name}': index {k!r} is not an int or slice; "
                    "Poplar tensors take ints and slices"
                )
            if isinstance(k, slice) and k.step not in (None, 1):
                raise IpuError(f"tensor '{self.name}': slices with a step are not supported")
        try:
            return self._view(self.idx[key], key)
        except IndexError as exc:
            raise IpuError(f"tensor '{self.name}' of shape {self.shape}: {exc}") from None

    def slice(self, begin, end, dim: int = 0) -> Tensor:
        """``Tensor::slice``: half-open ranges; ints slice ``dim``, lists slice every dim."""
        if np.ndim(begin) == 0:
            if not (isinstance(dim, int | np.integer) and 0 <= dim < self.rank):
                raise IpuError(f"slice of '{self.name}' (shape {self.shape}) along dimension "
                               f"{dim!r}: it has dimensions 0..{self.rank - 1}")
            key = [slice(None)] * self.rank
            key[dim] = slice(int(begin), int(end))
        else:
            if len(begin) != self.rank or len(end) != self.rank:
                raise IpuError(
                    f"slice of '{self.name}' (rank {self.rank}) needs {self.rank} begin and "
                    f"end indices, got {list(begin)} and {list(end)}"
                )
            key = [slice(int(b), int(e)) for b, e in zip(begin, end)]
        for k, size in zip(key, self.shape):
            if k.start is not None and not (0 <= k.start <= k.stop <= size):
                raise IpuError(
                    f"slice [{k.start}, {k.stop}) of '{self.name}' is outside its shape "
                    f"{self.shape}"
                )
        return self[tuple(key)]

    def flatten(self) -> Tensor:
        return self._view(self.idx.reshape(-1), ".flatten()")

    def reshape(self, shape) -> Tensor:
        """``Tensor::reshape`` (one dimension may be -1, as in NumPy)."""
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        try:
            idx = self.idx.reshape(shape)
        except ValueError:
            raise IpuError(f"cannot reshape '{self.name}' of shape {self.shape} "
                           f"({self.idx.size} elements) to {shape}") from None
        return self._view(idx, f".reshape({list(idx.shape)})")

    def transpose(self) -> Tensor:
        """``Tensor::transpose`` of a 2-D tensor (reverses the dimensions)."""
        return self._view(self.idx.T, ".transpose()")

    def dim_shuffle(self, permutation) -> Tensor:
        """``Tensor::dimShuffle``: permute the dimensions."""
        return self._numpy_view(lambda i: i.transpose(permutation),
                                f".dimShuffle({list(permutation)})")

    def expand(self, axis: int) -> Tensor:
        """``Tensor::expand``: insert a dimension of size 1."""
        return self._numpy_view(lambda i: np.expand_dims(i, axis), f".expand({axis})")

    def broadcast(self, shape) -> Tensor:
        """A view that repeats elements to ``shape`` (NumPy broadcasting rules)."""
        return self._numpy_view(lambda i: np.broadcast_to(i, tuple(shape)),
                                f".broadcast({list(shape)})")

    def _numpy_view(self, make, what: str) -> Tensor:
        try:
            return self._view(make(self.idx), what)
        except (ValueError, IndexError, TypeError) as exc:
            raise IpuError(f"'{self.name}' (shape {self.shape}){what}: {exc}") from None

    def __repr__(self) -> str:
        return f"Tensor('{self.name}', shape={self.shape}, dtype={TYPE_NAMES[self.dtype]})"


def concat(tensors, dim: int = 0) -> Tensor:
    """``poplar::concat``: join tensors of one type along ``dim`` (a view, no copy)."""
    try:
        tensors = list(tensors)
    except TypeError:
        raise IpuError(f"concat needs Tensors, a list of them, got {tensors!r}") from None
    if not tensors:
        raise IpuError("concat needs at least one tensor")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise IpuError(f"concat needs Tensors (graph.add_variable and its views), got "
                           f"{t!r}")
    first = tensors[0]
    if any(t.rank == 0 for t in tensors):
        raise IpuError("concat of single elements: use v[i:i + 1] (a 1-element slice) "
                       "instead of v[i], or concat along a dimension the tensors have")
    for t in tensors[1:]:
        if t.dtype != first.dtype or t.graph is not first.graph:
            raise GraphConnectionError(
                f"concat: '{t.name}' is {TYPE_NAMES[t.dtype]} but '{first.name}' is "
                f"{TYPE_NAMES[first.dtype]}; concatenate tensors of one type and graph"
            )
    try:
        idx = np.concatenate([t.idx for t in tensors], axis=dim)
    except ValueError as exc:
        shapes = ", ".join(f"'{t.name}' {t.shape}" for t in tensors)
        raise IpuError(f"concat along dim {dim} of {shapes}: {exc}") from None
    return Tensor(first.graph, first.dtype, idx, "concat(" + ", ".join(t.name for t in tensors)
                  + ")")


def _describe(key) -> str:
    keys = key if isinstance(key, tuple) else (key,)
    parts = []
    for k in keys:
        if isinstance(k, slice):
            start, stop = ("" if x is None else x for x in (k.start, k.stop))
            parts.append(f"{start}:{stop}")
        else:
            parts.append("..." if k is Ellipsis else str(k))
    return "[" + ", ".join(parts) + "]"
