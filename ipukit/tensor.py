"""Tensors and their views (``poplar::Tensor``).

A tensor is metadata only: a name, a type and a *region* of the graph's storage for that
type (an offset and a stride per dimension, as a NumPy view has), so its size does not grow
with its elements. Views (slice, index, flatten, reshape, transpose, concat) make new
regions and never copy data, so writing through a view writes the original variable, as in
Poplar.

>>> import ipukit as ipu
>>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=4).create_device().target)
>>> v = g.add_variable(ipu.FLOAT, [4, 4], "v")
>>> v.slice([1, 1], [2, 4]).shape, v[2].shape, v.transpose().shape
((1, 3), (4,), (4, 4))
"""

from __future__ import annotations

import math

import numpy as np

from .errors import TYPE_NAMES, GraphConnectionError, IpuError

FLOAT = np.dtype(np.float32)
HALF = np.dtype(np.float16)
INT = np.dtype(np.int32)
UNSIGNED_INT = np.dtype(np.uint32)
BOOL = np.dtype(np.bool_)

_BYTE = np.zeros(1, np.uint8)  # the stand-in storage of Tensor._numpy_view


def as_type(dtype) -> np.dtype:
    """Return one of ipukit's five element types, or raise naming the allowed ones."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in TYPE_NAMES:
        raise IpuError.unsupported_type(dtype)
    return dt


class Tensor:
    """A view of graph storage: element ``i`` (a tuple) lives at address
    ``offset + sum(i * strides)`` of its ``dtype``'s storage, a *region* (O(rank) numbers
    however many elements). Views that no region describes (``concat``, reshaping a
    transpose) hold an explicit address array instead."""

    __slots__ = ("graph", "dtype", "shape", "offset", "strides", "_idx", "_parent", "_what")

    def __init__(self, graph, dtype: np.dtype, layout, name: str, parent=None):
        # layout: (offset, shape, strides) or an explicit address array.
        # A view's name ("v[1:3]") is built only when asked for: views are made often.
        self.graph = graph
        self.dtype = dtype
        self._parent = parent
        self._what = name
        if type(layout) is tuple:
            self.offset, self.shape, self.strides = layout
            self._idx = None
        else:
            self.offset = -1
            self.shape = layout.shape
            self.strides = None
            self._idx = layout

    @property
    def idx(self) -> np.ndarray:
        """Every element's address (np.intp), built on demand: for tests and small tensors."""
        return addresses(self.offset, self.shape, self.strides) if self._idx is None else self._idx

    @property
    def name(self) -> str:
        if self._parent is None:
            return self._what
        what = self._what if isinstance(self._what, str) else _describe(self._what)
        return self._parent.name + what

    rank = property(lambda self: len(self.shape))

    def num_elements(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if self.rank == 0:
            raise TypeError(f"tensor '{self.name}' is a scalar (shape ()); it has no length")
        return self.shape[0]

    def __iter__(self):
        """The tensor's rows, ``t[0], t[1], …`` (so ``a, b = t`` works)."""
        return (self[i] for i in range(len(self)))

    def _view(self, layout, what) -> Tensor:
        return Tensor(self.graph, self.dtype, layout, what, self)

    def __getitem__(self, key) -> Tensor:
        shape = self.shape
        if type(key) is int and self._idx is None and shape and 0 <= key < shape[0]:
            strides = self.strides  # fast path: t[i]
            return Tensor(self.graph, self.dtype, (self.offset + key * strides[0],
                          shape[1:], strides[1:]), key, self)
        if self.rank == 0:
            raise IpuError.scalar_index(self)
        keys = key if isinstance(key, tuple) else (key,)
        for k in keys:
            if not (isinstance(k, int | np.integer | slice) or k is Ellipsis):
                raise IpuError.bad_index(self, k)
            if isinstance(k, slice) and k.step not in (None, 1):
                raise IpuError.stepped_slice(self)
        keys = keys if Ellipsis in keys else keys + (Ellipsis,)  # NumPy then gives a view
        return self._numpy_view(lambda i: i[keys], key)

    def slice(self, begin, end, dim: int = 0) -> Tensor:
        """``Tensor::slice``: half-open ranges; ints slice ``dim``, lists slice every dim."""
        if (type(begin) is int and type(end) is int and dim == 0 and self._idx is None
                and self.shape and 0 <= begin <= end <= self.shape[0]):  # fast path
            return Tensor(self.graph, self.dtype, (self.offset + begin * self.strides[0],
                          (end - begin,) + self.shape[1:], self.strides),
                          (slice(begin, end),), self)
        if np.ndim(begin) == 0:
            if not (isinstance(dim, int | np.integer) and 0 <= dim < self.rank):
                raise IpuError.slice_dim(self, dim)
            key = [slice(None)] * self.rank
            key[dim] = slice(int(begin), int(end))
        else:
            if len(begin) != self.rank or len(end) != self.rank:
                raise IpuError.slice_rank(self, begin, end)
            key = [slice(int(b), int(e)) for b, e in zip(begin, end)]
        for k, size in zip(key, self.shape):
            if k.start is not None and not (0 <= k.start <= k.stop <= size):
                raise IpuError.slice_outside(self, k)
        return self[tuple(key)]

    def flatten(self) -> Tensor:
        return self._reshape((self.num_elements(),), ".flatten()")

    def reshape(self, shape) -> Tensor:
        """``Tensor::reshape`` (one dimension may be -1, as in NumPy)."""
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        n = self.num_elements()
        known = math.prod(s for s in shape if s != -1)
        if shape.count(-1) == 1 and known and n % known == 0:
            shape = tuple(n // known if s == -1 else s for s in shape)
        if any(s < 0 for s in shape) or math.prod(shape) != n:
            raise IpuError.bad_reshape(self, shape)
        return self._reshape(shape, f".reshape({list(shape)})")

    def _reshape(self, shape, what) -> Tensor:
        if self._idx is None:
            strides = reshape_strides(self.shape, self.strides, shape)
            if strides is not None:
                return self._view((self.offset, shape, strides), what)
        return self._view(self.idx.reshape(shape), what)  # no region: explicit addresses

    def transpose(self) -> Tensor:
        """``Tensor::transpose`` of a 2-D tensor (reverses the dimensions)."""
        return self._numpy_view(lambda i: i.T, ".transpose()")

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

    def _numpy_view(self, make, what) -> Tensor:
        """A view by NumPy's own rules (indexing, reordering, adding or repeating
        dimensions), applied to a stand-in array whose strides (in bytes of 1) are the
        region's; no data is ever read, so the stand-in needs only one byte of storage."""
        try:
            if self._idx is not None:
                return self._view(make(self._idx), what)
            view = make(np.lib.stride_tricks.as_strided(_BYTE, self.shape, self.strides))
            moved = view.__array_interface__["data"][0] - _BYTE.__array_interface__["data"][0]
            return self._view((self.offset + moved, view.shape, view.strides), what)
        except (ValueError, IndexError, TypeError) as exc:
            what = what if isinstance(what, str) else _describe(what)
            raise IpuError.bad_view(self, what, exc) from None

    def __repr__(self) -> str:
        return f"Tensor('{self.name}', shape={self.shape}, dtype={TYPE_NAMES[self.dtype]})"


class RegionList(Tensor):
    """The flat concatenation of a few regions, each ``(offset, shape, strides)``: what a
    field of Poplar's ``Vector<Input<Vector<T>>>`` kind is connected to (a list of
    regions, as PopLibs' 2D vertices take a worker's share of a tile's regions). It keeps
    O(regions) numbers; its address array is made each time one is asked for, never kept,
    and every view of it is an ordinary (address-array) Tensor.

    >>> import ipukit as ipu
    >>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=1).create_device().target)
    >>> v = g.add_variable(ipu.FLOAT, [3, 4], "v")
    >>> RegionList(g, ipu.FLOAT, [(2, (2,), (1,)), (8, (2, 2), (4, 1))], "v pieces").idx
    array([ 2,  3,  8,  9, 12, 13])
    """

    __slots__ = ("regions",)

    def __init__(self, graph, dtype: np.dtype, regions: list, name: str):
        self.graph = graph
        self.dtype = dtype
        self._parent = None
        self._what = name
        self.regions = tuple(regions)
        self.offset = -1  # no single region: as a Tensor of an address array
        self.strides = None
        self.shape = (sum(math.prod(shape) for _, shape, _ in self.regions),)

    @property
    def _idx(self) -> np.ndarray:
        return np.concatenate([addresses(*r).reshape(-1) for r in self.regions])


def concat(tensors, dim: int = 0) -> Tensor:
    """``poplar::concat``: join tensors of one type along ``dim`` (a view, no copy)."""
    try:
        tensors = list(tensors)
    except TypeError:
        raise IpuError.concat_not_iterable(tensors) from None
    if not tensors:
        raise IpuError.concat_empty()
    first = tensors[0]
    for t in tensors:
        if not isinstance(t, Tensor):
            raise IpuError.concat_not_tensor(t)
        if t.rank == 0:
            raise IpuError.concat_scalar()
        if t.dtype != first.dtype or t.graph is not first.graph:
            raise GraphConnectionError.concat_types(t, first)
    try:  # no single region describes a concatenation: explicit addresses
        idx = np.concatenate([t.idx for t in tensors], axis=dim)
    except ValueError as exc:
        raise IpuError.concat_shapes(tensors, dim, exc) from None
    return Tensor(first.graph, first.dtype, idx, f"concat({', '.join(t.name for t in tensors)})")


# -- regions: (offset, shape, strides) ----------------------------------------------------
def contiguous_strides(shape) -> tuple:
    """Row-major strides (in elements) of ``shape``."""
    strides = []
    step = 1
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return tuple(reversed(strides))


def addresses(offset: int, shape, strides, dtype=np.intp) -> np.ndarray:
    """The address of every element of a region, shape ``shape``."""
    if len(shape) == 1 and strides[0]:  # (one dimension: one arange, a third of the time)
        return np.arange(offset, offset + shape[0] * strides[0], strides[0], dtype)
    idx = np.full((), offset, dtype)
    for n, st in zip(shape, strides):
        idx = idx[..., None] + np.arange(n, dtype=dtype) * st
    return idx


def reshape_strides(shape, strides, new_shape):
    """Strides that give ``new_shape`` of the same region without copying (NumPy's
    no-copy reshape), or None when no single region can (e.g. flattening a transpose)."""
    new_shape = tuple(new_shape)
    if 0 in shape or 0 in new_shape:
        return contiguous_strides(new_shape)
    chunks = []  # runs of dimensions that step evenly: (elements, innermost stride)
    for n, st in zip(shape, strides):
        if n == 1:
            continue
        if chunks and chunks[-1][1] == n * st:
            chunks[-1] = (chunks[-1][0] * n, st)
        else:
            chunks.append((n, st))
    out = []  # new dimensions fill the chunks from the innermost
    left = 1
    step = 0
    for n in reversed(new_shape):
        if n != 1 and left == 1:
            left, step = chunks.pop()
        if left % n:  # this dimension would span two chunks
            return None
        out.append(0 if n == 1 else step)
        left = left // n
        step = step * n
    return tuple(reversed(out))


def _describe(key) -> str:
    """A view's key as Python writes it: '[1:3, 2]'."""
    def one(k):
        if isinstance(k, slice):
            return f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}"
        return "..." if k is Ellipsis else str(k)

    return "[" + ", ".join(map(one, key if isinstance(key, tuple) else (key,))) + "]"


def inner_dims(shape, strides) -> int:
    """How many trailing dimensions of a region step through consecutive addresses."""
    step = 1
    inner = 0
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1 and st != step:
            break
        step = step * n
        inner = inner + 1
    return inner


def contiguous(shape, strides) -> bool:
    """Whether a region's elements are consecutive addresses, in order."""
    return inner_dims(shape, strides) == len(shape)


def steps_past(shape, strides) -> bool:
    """Whether each dimension of a region steps past all those of smaller steps: then no
    two of its elements share an address (the test needs no address of its own)."""
    reach = 0
    for step, n in sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1):
        if step <= reach:
            return False
        reach += (n - 1) * step
    return True


def single_run(t: Tensor):
    """(offset, length) when ``t``'s elements are one run of consecutive addresses."""
    if t._idx is not None:
        return None
    if len(t.shape) < 2:  # fast path: a scalar or a 1-D view
        return (t.offset, t.shape[0] if t.shape else 1) if not t.shape or t.strides[0] == 1 \
            or t.shape[0] <= 1 else None
    return (t.offset, math.prod(t.shape)) if contiguous(t.shape, t.strides) else None


def address_span(t: Tensor) -> tuple[int, int]:
    """The lowest and the highest address of ``t``'s elements (``t`` not empty)."""
    if t._idx is not None:
        return int(t._idx.min()), int(t._idx.max())
    reach = [(n - 1) * s for n, s in zip(t.shape, t.strides)]
    return t.offset + sum(r for r in reach if r < 0), t.offset + sum(r for r in reach if r > 0)


def runs(t: Tensor, keep: int = 0):
    """``t``'s elements in flat order as runs of consecutive addresses: (begins, lengths).
    The first ``keep`` dimensions are never merged into one run (one run per vertex)."""
    if isinstance(t, RegionList) and not keep:  # its regions' runs, those that meet joined
        if all(len(shape) == 1 and strides == (1,) for _, shape, strides in t.regions):
            return _joined_runs(t.regions)  # (each region one run: plain Python)
        parts = [runs(Tensor(None, t.dtype, r, "")) for r in t.regions]
        begins = np.concatenate([b for b, _ in parts])
        lengths = np.concatenate([n for _, n in parts])
        new = np.ones(begins.size, bool)
        new[1:] = begins[1:] != (begins + lengths)[:-1]
        first = np.flatnonzero(new)
        return begins[first], np.add.reduceat(lengths, first)
    if t._idx is not None:
        return index_runs(t._idx.reshape(-1), math.prod(t.shape[keep:]))[:2]
    shape = t.shape
    strides = t.strides
    outer = len(shape) - inner_dims(shape[keep:], strides[keep:])  # 0: one run
    begins = addresses(t.offset, shape[:outer], strides[:outer]).reshape(-1)
    length = math.prod(shape[outer:])
    if length == 0:
        begins = begins[:0]
    return begins, np.full(begins.size, length, np.intp)


def _joined_runs(regions) -> tuple:
    """:func:`runs` of a RegionList of 1-D regions of stride 1, each one run (none when
    empty): those that meet joined."""
    begins = []
    lengths = []
    for offset, (n,), _ in regions:
        if n and begins and begins[-1] + lengths[-1] == offset:
            lengths[-1] += n
        elif n:
            begins.append(offset)
            lengths.append(n)
    return np.array(begins, np.intp), np.array(lengths, np.intp)


def index_runs(flat: np.ndarray, row: int, once: bool = False):
    """Runs of consecutive addresses in an address array, never across a multiple of
    ``row`` positions: (begins, lengths, positions). ``once`` (each row's addresses in
    order): an address repeated stays in its run, so a run holds each address once."""
    new = np.ones(flat.size + 1, bool)  # a run starts where the step is not 1 (once: 0 or
    step = flat[1:] - flat[:-1]  # 1), or a row starts; and the end
    new[1:-1] = step > 1 if once else step != 1
    new[::max(row, 1)] = True
    first = np.flatnonzero(new)  # 1 (once: 0 or 1), or a row starts; and the end
    begins = flat[first[:-1]].astype(np.intp)
    return begins, flat[first[1:] - 1] - begins + 1, first[:-1]


def unique(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` of a 1-D array, by a sort: NumPy 2's ``np.unique`` hashes, which
    takes 10-45x as long on the address and position arrays compile works on.

    >>> unique(np.array([7, 3, 7, 5, 3]))
    array([3, 5, 7])
    """
    x = np.sort(x, kind="stable")  # (sorted runs, e.g. two joined: merged, not re-sorted)
    return x[firsts(x)]


def firsts(*keys: np.ndarray) -> np.ndarray:
    """Where each run of equal values (equal in every key) begins."""
    new = np.zeros(keys[0].size, bool)
    new[:1] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(new)
