"""The graph (``poplar::Graph``): variables, constants, tile mapping, compute sets, vertices.

Building a graph records metadata only; nothing is computed until an Engine runs it.

>>> import ipukit as ipu
>>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=4).create_device().target)
>>> v = g.add_variable(ipu.FLOAT, [4], "v")
>>> for i in range(4):
...     g.set_tile_mapping(v[i], i)
>>> g.get_tile_mapping(v)
[[(0, 1)], [(1, 2)], [(2, 3)], [(3, 4)]]
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from .errors import (
    GraphConnectionError,
    IpuError,
    OutOfMemoryError,
    StreamError,
    TileMappingError,
    element_name,
    outside_range,
    vertex_name,
)
from .target import Device, Target
from .tensor import Tensor, as_type, contiguous_strides, firsts, runs, single_run
from .vertex import FieldRef, Vertex, VertexRef
from .virtual_graph import VirtualTiles


@dataclass
class Variable:
    """One allocation: a variable or a constant, at ``start`` in its type's storage."""

    name: str
    dtype: np.dtype
    shape: tuple
    start: int
    size: int
    values: np.ndarray | None = None  # constants' values


class Pool:
    """Storage of one element type: its variables and their tile mapping, kept as
    intervals of addresses (never one entry per element)."""

    def __init__(self, dtype: np.dtype):
        self.dtype = dtype
        self.size = 0
        self.variables = []
        self.starts = []  # where each variable starts
        self._new: list = []  # (begins, ends, tiles) not resolved: arrays, or lists of ints
        # The mapping as a step function: the addresses where the tile changes, in order,
        # and the tile before the first of them and after each (-1: unmapped).
        self._cuts = np.zeros(0, np.intp)
        self._cut_tiles = np.full(1, -1, np.intp)

    def alloc(self, name, shape, values=None) -> Variable:
        var = Variable(name, self.dtype, shape, self.size, math.prod(shape), values)
        self.size += var.size
        self.variables.append(var)
        self.starts.append(var.start)
        return var

    def map(self, begins, lengths, tile) -> None:
        """Map runs of addresses (one as ints, or arrays) to ``tile`` (or to a tile per run);
        a later mapping of an address wins."""
        if isinstance(begins, np.ndarray):  # arrays as given (joined once, when resolved)
            if begins.size:
                self._new.append((begins, begins + lengths, np.full(begins.shape, tile, np.intp)))
        else:  # one run (set_tile_mapping, often in a loop): ints, to lists
            if not self._new or type(self._new[-1]) is not list:
                self._new.append([[], [], []])
            for column, x in zip(self._new[-1], (begins, begins + lengths, tile)):
                column.append(int(x))

    def _resolve(self) -> None:
        """Paint mappings made since the last call over the resolved ones. Only the span
        ``[lo, hi)`` the new records touch is painted again: the resolved tiles there first,
        then the new records; it is spliced between the resolved cuts below ``lo`` and above
        ``hi``, and cuts where the tile does not change are dropped (so the step function
        is the one painting every record at once gives). ``hi > lo`` always (records of no
        length paint nothing). Records that are runs covering ``[lo, hi)`` in order (a
        linear mapping) need no painting; the resolved tile changes at every old cut, so
        only the cuts from ``lo`` to ``hi`` are checked for a change."""
        if self._new:
            b, e, t = [np.concatenate([r[i] for r in self._new], dtype=np.intp) for i in range(3)]
            self._new = []
            if b.size <= _FEW and self._on_top(b.tolist(), e.tolist(), t.tolist()):
                return
            cuts = self._cuts
            tiles = self._cut_tiles
            lo = b.min()
            hi = max(e.max(), lo + 1)
            (i, j2), (i0, j) = (cuts.searchsorted((lo, hi), s) for s in ("right", "left"))
            cat = np.concatenate  # (np.r_ costs tens of µs a call)
            order = None if _covers(b, e) else np.argsort(b, kind="stable")
            if order is not None and _covers(b[order], e[order]):  # such runs, out of order (a
                b = b[order]  # tensor mapped by columns): sorted, not painted
                t = t[order]
            elif order is not None:  # not runs that cover [lo, hi)
                b, t = _paint(cat(([lo], cuts[i:j], b)), cat((cuts[i:j], [hi], e)),
                              cat((tiles[i:j + 1], t)))
                k, k_hi = b.searchsorted((lo, hi - 1), "right")  # the cuts in (lo, hi)
                b = cat(([lo], b[k:k_hi]))
                t = t[k:k_hi + 1]
            mid = cat((tiles[i0:i0 + 1], t, tiles[j2:j2 + 1]))
            change = firsts(mid)[1:] - 1
            self._cuts = _splice(cuts, i0, cat((b, [hi]))[change], cuts[j2:])
            self._cut_tiles = _splice(tiles, i0 + 1, mid[change + 1], tiles[j2 + 1:])

    def _on_top(self, b: list, e: list, t: list) -> bool:
        """:meth:`_resolve` of few records that are runs covering ``[b[0], e[-1])`` in order
        at the top of the mapping (a new variable mapped), in plain Python (NumPy's cost
        per call is most of the work at this size): the cuts where the tile changes are
        appended. False (nothing done) for other records."""
        cuts = self._cuts
        n = cuts.size
        if (n and b[0] < cuts[-1]) or b[1:] != e[:-1] or any(x >= y for x, y in zip(b, e)):
            return False
        i0 = n  # the resolved cut at b[0], if any, is painted over
        if n and b[0] == cuts[-1]:
            i0 = n - 1
        tiles = self._cut_tiles
        before = int(tiles[i0])
        new_cuts = []
        new_tiles = []
        for cut, tile in zip(b + e[-1:], t + [int(tiles[n])]):
            if tile != before:
                new_cuts.append(cut)
                new_tiles.append(tile)
            before = tile
        self._cuts = _splice(cuts, i0, np.array(new_cuts, np.intp), cuts[n:])
        self._cut_tiles = _splice(tiles, i0 + 1, np.array(new_tiles, np.intp), tiles[n + 1:])
        return True

    def pieces(self, begins: np.ndarray, lengths: np.ndarray):
        """Cut address runs where the tile mapping changes: (run, begin, end, tile) of
        every piece, in order; tile -1 where unmapped."""
        self._resolve()
        cuts = self._cuts
        keep = np.flatnonzero(lengths > 0)
        b = begins[keep].astype(np.intp)
        e = b + lengths[keep]
        lo = cuts.searchsorted(b, "right")
        hi = lo.copy()  # a run crosses the next cut (short runs seldom do): searched again
        if cuts.size:
            cross = np.flatnonzero((e > cuts.take(lo, mode="clip")) & (lo < cuts.size))
            hi[cross] = cuts.searchsorted(e[cross], "left")
        if (hi == lo).all():  # no run crosses a change of tile
            return keep, b, e, self._cut_tiles[lo]
        count = hi - lo + 1
        run = np.repeat(np.arange(b.size), count)
        at = _ranges(lo, hi + 1)  # piece ``at`` of a run: from cut at - 1 to cut at,
        start = cuts[at - 1]  # but from b (its first piece) and to e (its last)
        end = cuts.take(at, mode="clip")
        first = np.cumsum(count) - count
        start[first] = b
        end[first + count - 1] = e
        return keep[run], start, end, self._cut_tiles[at]

    def steps(self, lo: int, hi: int) -> tuple:
        """The mapping of addresses ``lo`` to ``hi`` (both included): the cuts in between
        and the tile from each cut on (one more tile than cuts); views, to read before the
        mapping changes (a mapping at the top of the pool is written in place)."""
        self._resolve()
        i, j = self._cuts.searchsorted((lo, hi), "right")  # the cuts in (lo, hi]
        return self._cuts[i:j], self._cut_tiles[i:j + 1]

    def window(self, lo: int, hi: int) -> tuple:
        """:meth:`steps` with the cuts counted from ``lo``, as bytes: equal for spans of one
        length mapped alike at shifted addresses."""
        cuts, tiles = self.steps(lo, hi)
        return (cuts - lo).tobytes(), tiles.tobytes()

    def describe(self, address: int) -> str:
        """"element [5] of tensor 'v2'", for error messages."""
        var = self.variables[int(np.searchsorted(self.starts, address, "right")) - 1]
        return element_name(var, int(address) - var.start)


_FEW = 64  # (records up to this many runs resolved in plain Python when at the top)


def _covers(b: np.ndarray, e: np.ndarray) -> bool:
    """Whether intervals ``[b, e)`` are runs, in order, each beginning where the one before
    ends (they cover ``[b[0], e[-1])`` once)."""
    return bool((e > b).all() and (b[1:] == e[:-1]).all())


def _splice(a: np.ndarray, i: int, new: np.ndarray, rest: np.ndarray) -> np.ndarray:
    """``concatenate((a[:i], new, rest))``; with no ``rest`` (a new variable mapped: the top
    of the mapping) written into ``a``'s buffer, grown by doubling: a pool of millions of
    cuts is not copied at every change."""
    if rest.size:
        return np.concatenate((a[:i], new, rest))
    buf = a if a.base is None else a.base
    n = i + new.size
    if buf.size < n:  # (its top not written: memory untouched until it is)
        grown = np.empty(max(n, 2 * buf.size), a.dtype)
        grown[:i] = a[:i]
        buf = grown
    buf[i:n] = new
    return buf[:n]


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(lo[i], hi[i])``."""
    n = np.maximum(hi - lo, 0)
    return np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))


def _paint(b, e, t):
    """Mapping records (in the order made: a later one wins) as a step function: the cuts
    where the tile changes and the tile before the first cut and after each (-1: none)."""
    cuts = np.sort(np.concatenate((b, e)), kind="stable")  # merges runs already in order
    cuts = cuts[firsts(cuts)]  # (np.unique hashes first: slower on these sorted runs)
    lo = cuts.searchsorted(b)
    hi = cuts.searchsorted(e)
    tiles = np.full(cuts.size + 1, -1, np.intp)  # tiles[k + 1]: from cuts[k] to cuts[k + 1]
    tiles[1 + _ranges(lo, hi)] = t.repeat(np.maximum(hi - lo, 0))
    change = np.flatnonzero(tiles[1:] != tiles[:-1])
    return cuts[change], np.concatenate(([-1], tiles[change + 1]))


def _join(b, e, t):
    """Sorted, disjoint intervals with those that continue each other on one tile joined."""
    if not b.size:
        return b, e, t
    first = np.flatnonzero(np.r_[True, (b[1:] != e[:-1]) | (t[1:] != t[:-1])])
    return b[first], e[np.r_[first[1:] - 1, b.size - 1]], t[first]


class ComputeSet:
    """``poplar::ComputeSet``: vertices that run in parallel in one BSP superstep."""

    __slots__ = ("graph", "id", "name")

    def __init__(self, graph, id_, name):
        self.graph = graph
        self.id = id_
        self.name = name

    def __repr__(self):
        return f"ComputeSet('{self.name}')"


@dataclass(frozen=True)
class DataStream:
    """``poplar::DataStream``: a host-to-device or device-to-host FIFO of ``n`` elements."""

    name: str
    dtype: np.dtype
    n: int
    to_device: bool


@dataclass(frozen=True)
class RemoteBuffer:
    """``poplar::RemoteBuffer``: ``repeats`` slots of ``num_elements`` elements each in
    Streaming Memory (remote: not on the IPU), which programs copy to and from with
    ``Copy(tensor, buffer[, offset])`` and ``Copy(buffer, tensor[, offset])``; the offset
    picks the slot (repeat). Poplar: "a region of remote (meaning not on the IPU) memory
    that is used as a cache"."""

    name: str
    dtype: np.dtype
    num_elements: int
    repeats: int = 1
    rearrange_on_host: bool = False
    optimise_memory: bool = False

    @property
    def nbytes(self) -> int:
        """Bytes of Streaming Memory the buffer holds (all its repeats)."""
        return self.num_elements * self.repeats * self.dtype.itemsize


#: The State of a vertex added in bulk without any: one shared, read-only mapping (an empty
#: dict of its own is 64 bytes a vertex, and PopLibs adds hundreds of thousands).
_NO_STATE = MappingProxyType({})


class Graph:
    """``poplar::Graph(target)``: the program's data and computation, before compilation."""

    _offset = 0  # where a virtual graph's tile 0 is in its root graph (virtual_graph.py)

    def __init__(self, target: Target | Device):
        self.target = target.target if isinstance(target, Device) else target
        self.pools: dict[np.dtype, Pool] = {}
        self.compute_sets: list[ComputeSet] = []
        # Vertices, one entry per vertex id (lists keep add_vertex cheap).
        self.v_cs: list[int] = []
        self.v_cls: list[type] = []
        self.v_conn: list[dict] = []  # field name -> connected Tensor
        self.v_tile: list[int] = []
        self.v_perf: list[int | None] = []
        self.v_state: list[dict] = []
        self.initial_values: list[tuple[Tensor, np.ndarray]] = []
        self.streams: dict[str, DataStream] = {}
        self.remote_buffers: dict[str, RemoteBuffer] = {}
        self.host_writes: dict[str, Tensor] = {}
        self.host_reads: dict[str, Tensor] = {}

    # -- data ----------------------------------------------------------------------------
    def _pool(self, dtype) -> Pool:
        dtype = as_type(dtype)
        return self.pools.get(dtype) or self.pools.setdefault(dtype, Pool(dtype))

    def add_variable(self, dtype, shape, name: str = "") -> Tensor:
        """``Graph::addVariable``: zero-initialised storage, to be mapped to tiles."""
        return self._add(dtype, shape, name, "var")

    def add_constant(self, dtype, shape, values, name: str = "") -> Tensor:
        """``Graph::addConstant``: a tensor with fixed values (map it to a tile too)."""
        return self._add(dtype, shape, name, "const", values)

    def _add(self, dtype, shape, name, kind, values=None) -> Tensor:
        shape = _shape(shape, name)
        pool = self._pool(dtype)
        if values is not None:
            values = _values(values, pool.dtype, None, f"constant '{name}'")
            if values.size == 1:
                values = np.full(shape, values.reshape(()), dtype=pool.dtype)
            if values.size != math.prod(shape):
                raise IpuError.constant_size(name, shape, values.size)
            values = values.reshape(shape)
        name = name or f"{kind}{len(pool.variables)}"
        need = math.prod(shape) * pool.dtype.itemsize
        t = self.target
        if need > t.num_tiles * t.bytes_per_tile:  # larger than all tiles together
            raise OutOfMemoryError.tensor_too_big(name, pool.dtype, shape, need, t)
        var = pool.alloc(name, shape, values)
        return Tensor(self.root, pool.dtype, (var.start, shape, contiguous_strides(shape)), name)

    def set_tile_mapping(self, tensor_or_vertex, tile: int) -> None:
        """``Graph::setTileMapping``: put every element of a tensor (or a vertex) on ``tile``."""
        if isinstance(tensor_or_vertex, VertexRef):
            vid = self._vertex(tensor_or_vertex, "set_tile_mapping")
            self.v_tile[vid] = self.target.check_tile(tile, lambda: self.describe_vertex(vid))
            return
        t = tensor_or_vertex
        t = t if type(t) is Tensor and t.graph is self else self._own(t, "set_tile_mapping")
        if not (type(tile) is int and 0 <= tile < self.target.num_tiles):
            tile = self.target.check_tile(tile, lambda: f"tensor '{t.name}'")
        self.pools[t.dtype].map(*(single_run(t) or runs(t)), tile)

    def get_tile_mapping(self, tensor: Tensor, throw_on_incomplete: bool = True
                         ) -> list[list[tuple[int, int]]]:
        """``Graph::getTileMapping(t, throwOnIncompleteMapping=true)``: per tile, the
        intervals of the tensor's flat elements. An element mapped to no tile raises
        TileMappingError, unless ``throw_on_incomplete=False`` (then it is in no list)."""
        t = self._own(tensor, "get_tile_mapping")
        begins, lengths = runs(t)
        run, start, end, tiles = self.pools[t.dtype].pieces(begins, lengths)
        flat = (np.cumsum(lengths) - lengths)[run] + start - begins[run]  # flat positions
        if throw_on_incomplete and (tiles < 0).any():
            holes = np.flatnonzero(tiles < 0)
            raise TileMappingError.incomplete(t, int((end - start)[holes].sum()), flat[holes[0]])
        begins, ends, tiles = _join(flat, flat + end - start, tiles)  # grouped by tile next
        order = np.argsort(tiles, kind="stable")
        pairs = list(zip(begins[order].tolist(), ends[order].tolist()))
        cut = np.searchsorted(tiles[order], np.arange(self.target.num_tiles + 1)).tolist()
        return [pairs[cut[i]:cut[i + 1]] for i in range(len(cut) - 1)]

    def set_initial_value(self, target, value) -> None:
        """``Graph::setInitialValue`` of a vertex State field or of a tensor."""
        if isinstance(target, Tensor):
            t = self._own(target, "set_initial_value")
            value = _values(value, t.dtype, t.shape, f"set_initial_value of '{t.name}'")
            self.initial_values.append((t, value))
            return
        if not isinstance(target, FieldRef):
            raise GraphConnectionError.initial_value_target(target)
        vid = self._vertex(target.vertex, "set_initial_value")
        field = self._field(target, "set_initial_value")
        if field.kind != "state":
            raise GraphConnectionError.not_state(target, self.describe_vertex(vid), field)
        value = np.asarray(value, dtype=field.dtype)
        if (value.ndim != 1) if field.vector else (value.size != 1):
            raise GraphConnectionError.state_shape(target, self.describe_vertex(vid), field, value)
        self.v_state[vid] = {**self.v_state[vid],  # (a new dict: bulk vertices share one)
                             target.field: value if field.vector else value.reshape(())}

    # -- computation ---------------------------------------------------------------------
    def add_compute_set(self, name: str = "") -> ComputeSet:
        """``Graph::addComputeSet``."""
        cs = ComputeSet(self, len(self.compute_sets), name or f"cs{len(self.compute_sets)}")
        self.compute_sets.append(cs)
        return cs

    def add_vertex(self, cs: ComputeSet, vertex_class, connections: dict | None = None,
                   tile: int | None = None) -> VertexRef:
        """``Graph::addVertex(cs, "Name", {{field, tensor}})``: a vertex in a compute set."""
        if not (isinstance(cs, ComputeSet) and cs.graph is self.root):
            raise GraphConnectionError.not_a_compute_set(cs)
        if not (isinstance(vertex_class, type) and issubclass(vertex_class, Vertex)):
            raise GraphConnectionError.not_a_codelet(vertex_class)
        vid = self._add_vertices(cs, vertex_class, [{}], [-1])
        ref = VertexRef(self, vid)
        for field, tensor in (connections or {}).items():
            self._connect(vid, field, tensor)
        if tile is not None:
            self.set_tile_mapping(ref, tile)
        return ref

    def _add_vertices(self, cs, cls, connections: list, tiles: list, perf=None, state=None):
        """Vertices of one class, connected and on (root) tiles as given (and with estimates
        and State values, if given), without the checks of add_vertex (PopLibs adds many
        alike: the caller checked one); the first's id."""
        vid = len(self.v_cs)
        n = len(tiles)
        for column, add in zip((self.v_cs, self.v_cls, self.v_conn, self.v_tile, self.v_perf,
                                self.v_state), ([cs.id] * n, [cls] * n, connections, tiles,
                                perf or [None] * n, state or [_NO_STATE] * n)):
            column.extend(add)
        return vid

    def connect(self, field_ref: FieldRef, tensor: Tensor) -> None:
        """``Graph::connect``: connect a tensor to a vertex field (Vector fields flatten it)."""
        if not isinstance(field_ref, FieldRef):
            raise GraphConnectionError.not_a_field(field_ref)
        self._connect(self._vertex(field_ref.vertex, "connect"), field_ref.field, tensor)

    def _connect(self, vid: int, name: str, tensor: Tensor) -> None:
        field = (self.v_cls[vid].fields.get(name)
                 or self._field(FieldRef(VertexRef(self, vid), name), "connect"))
        if field.kind == "state":
            raise GraphConnectionError.connect_state(name, self.describe_vertex(vid))
        if not isinstance(tensor, Tensor):
            raise GraphConnectionError.connect_non_tensor(name, self.describe_vertex(vid), tensor)
        if tensor.graph is not self.root:
            self._own(tensor, "connect")
        if tensor.dtype != field.dtype:
            raise GraphConnectionError.connect_type(name, self.describe_vertex(vid), field, tensor)
        if not (field.vector or not tensor.shape or tensor.num_elements() == 1):
            raise GraphConnectionError.connect_scalar(name, self.describe_vertex(vid), tensor)
        if name in self.v_conn[vid]:
            raise GraphConnectionError.connected_twice(name, self.describe_vertex(vid))
        self.v_conn[vid][name] = tensor  # a Vector field sees it flattened

    def set_perf_estimate(self, vertex: VertexRef, cycles: int) -> None:
        """``Graph::setPerfEstimate``: the cycles this vertex takes on one worker."""
        vid = self._vertex(vertex, "set_perf_estimate")
        if not (isinstance(cycles, numbers.Integral) and cycles >= 0):
            raise IpuError.bad_perf_estimate(self.describe_vertex(vid), cycles)
        self.v_perf[vid] = int(cycles)

    # -- host ----------------------------------------------------------------------------
    def _add_stream(self, name, dtype, n, to_device) -> DataStream:
        if name in self.streams:
            raise StreamError.stream_exists(name)
        if not (isinstance(n, numbers.Integral) and n >= 1):
            raise StreamError.stream_size(name, n)
        self.streams[name] = DataStream(name, as_type(dtype), int(n), to_device)
        return self.streams[name]

    def add_host_to_device_fifo(self, name: str, dtype, n: int) -> DataStream:
        """``Graph::addHostToDeviceFIFO``: a stream the host fills, ``n`` elements a copy."""
        return self._add_stream(name, dtype, n, True)

    def add_device_to_host_fifo(self, name: str, dtype, n: int) -> DataStream:
        """``Graph::addDeviceToHostFIFO``."""
        return self._add_stream(name, dtype, n, False)

    def add_remote_buffer(self, name: str, dtype, num_elements: int, repeats: int = 1,
                          rearrange_on_host: bool = False,
                          optimise_memory: bool = False) -> RemoteBuffer:
        """``Graph::addRemoteBuffer(handle, elementType, numElements, repeats,
        rearrangeOnHost, optimiseMemory)``: ``repeats`` slots of ``num_elements`` elements in
        Streaming Memory, not in tile memory (the memory report counts them apart). The two
        flags are kept for Poplar's signature; they change no result here.

        >>> import ipukit as ipu
        >>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=1).create_device().target)
        >>> rb = g.add_remote_buffer("state", ipu.FLOAT, 4, repeats=2)
        >>> rb.nbytes
        32
        """
        if name in self.remote_buffers or name in self.streams:
            raise StreamError.stream_exists(name)
        for what, n in (("num_elements", num_elements), ("repeats", repeats)):
            if isinstance(n, bool) or not (isinstance(n, numbers.Integral) and n >= 1):
                raise StreamError.remote_buffer_size(name, what, n)
        self.remote_buffers[name] = RemoteBuffer(name, as_type(dtype), int(num_elements),
                                                 int(repeats), bool(rearrange_on_host),
                                                 bool(optimise_memory))
        return self.remote_buffers[name]

    def create_host_write(self, name: str, tensor: Tensor) -> None:
        """``Graph::createHostWrite``: lets ``Engine.write_tensor(name, …)`` set the tensor."""
        self.host_writes[name] = self._new_handle(name, tensor, self.host_writes, "write")

    def create_host_read(self, name: str, tensor: Tensor) -> None:
        """``Graph::createHostRead``: lets ``Engine.read_tensor(name)`` return the tensor."""
        self.host_reads[name] = self._new_handle(name, tensor, self.host_reads, "read")

    def _new_handle(self, name, tensor, handles, verb) -> Tensor:
        tensor = self._own(tensor, f"create_host_{verb}")
        if name in handles:
            raise StreamError.handle_exists(verb, name, handles[name], tensor)
        return tensor

    # -- helpers -------------------------------------------------------------------------
    def _own(self, tensor, what) -> Tensor:
        if not isinstance(tensor, Tensor):
            raise IpuError.not_a_tensor(what, tensor)
        if tensor.graph is not self.root:
            raise TileMappingError.tensor_of_other_graph(what, tensor)
        return tensor

    def _vertex(self, ref, what: str) -> int:
        """The id of a VertexRef of this graph, or GraphConnectionError."""
        if not isinstance(ref, VertexRef):
            raise GraphConnectionError.not_a_vertex(what, ref)
        if ref.graph is not self.root:
            raise GraphConnectionError.vertex_of_other_graph(what)
        return ref.id

    def _field(self, ref: FieldRef, what: str):
        cls = self.v_cls[ref.vertex.id]
        field = cls.fields.get(ref.field)
        if field is None:
            raise GraphConnectionError.no_field(what, cls, ref.field)
        return field

    def describe_vertex(self, vid: int) -> str:
        """"vertex 3 (Sum, compute set 'cs0', tile 1)", for error messages."""
        return vertex_name(vid, self.v_cls[vid], self.compute_sets[self.v_cs[vid]].name,
                           self.v_tile[vid])

    @property
    def num_vertices(self) -> int:
        return len(self.v_cs)

    def vertex_fields(self, tile: int) -> list[dict[str, int]]:
        """Per vertex on ``tile`` (in the order added): elements connected to each field."""
        return [{f: t.num_elements() for f, t in self.v_conn[v].items()}
                for v in range(self.num_vertices) if self.v_tile[v] == tile]

    # -- virtual graphs ------------------------------------------------------------------
    @property
    def root(self) -> Graph:
        """The top-level graph that holds every tensor and vertex (``self`` here)."""
        return self

    def create_virtual_graph(self, lower_tile: int, upper_tile: int):
        """``Graph::createVirtualGraph(lowerTile, upperTile)``: this graph's tiles
        ``[lower_tile, upper_tile)`` seen as a graph of their own, numbered from 0.

        Tensors, compute sets and vertices made on it belong to this (the parent) graph,
        so programs and Copies mix them freely; only tile numbers are relative. One
        virtual graph per IPU (``lower = ipu * tiles_per_ipu``) is how TensorFlow's IPU
        backend builds its shards.
        """
        return VirtualGraph(self, lower_tile, upper_tile)


def out_of_range(values, dtype) -> str | None:
    """Why ``values`` do not fit integer ``dtype`` (inf, NaN, too big), or None if they do."""
    try:
        raw = np.asarray(values)
        if (dtype.kind not in "iu" or raw.size == 0 or raw.dtype.kind not in "iufO"
                or np.can_cast(raw.dtype, dtype)):
            return None
        f = raw.astype(np.float64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        return None  # not numbers: the conversion itself will say what is wrong
    info = np.iinfo(dtype)
    bad = ~np.isfinite(f) | (f < info.min) | (f > info.max)
    return outside_range(raw.reshape(-1)[int(bad.argmax())], dtype, info) if bad.any() else None


def _values(values, dtype, shape, what: str) -> np.ndarray:
    """``values`` as an array of ``dtype`` (broadcast to ``shape``), or IpuError."""
    why = out_of_range(values, dtype)
    if why:
        raise IpuError.values_out_of_range(what, why)
    try:
        a = np.asarray(values, dtype=dtype)
        return a if shape is None else np.broadcast_to(a, shape)
    except (TypeError, ValueError) as exc:
        raise IpuError.bad_values(what, values, dtype, shape, exc) from None


def _shape(shape, name) -> tuple:
    shape = tuple(np.atleast_1d(shape).tolist()) if not isinstance(shape, tuple) else shape
    if not all(isinstance(s, numbers.Integral) and s >= 0 for s in shape):
        raise IpuError.bad_shape(name, shape)
    return tuple(int(s) for s in shape)


class VirtualGraph(VirtualTiles, Graph):
    """A :class:`Graph` over a range of its parent's tiles (``Graph::createVirtualGraph``):
    :class:`~ipukit.virtual_graph.VirtualTiles` over the parent's storage."""
