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

import numpy as np

from .errors import (
    GraphConnectionError,
    IpuError,
    OutOfMemoryError,
    StreamError,
    TileMappingError,
)
from .target import Device, Target
from .tensor import TYPE_NAMES, Tensor, as_type, contiguous_strides, firsts, runs, single_run
from .vertex import Vertex


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
        self.dtype, self.size = dtype, 0
        self.variables: list[Variable] = []
        self.starts: list[int] = []
        self._new: tuple[list, list, list] = ([], [], [])  # begins, ends, tiles not resolved
        # The mapping as a step function: the addresses where the tile changes, in order,
        # and the tile before the first of them and after each (-1: unmapped).
        self._cuts, self._cut_tiles = np.zeros(0, np.int64), np.full(1, -1, np.int64)

    def alloc(self, name, shape, values=None) -> Variable:
        size = int(np.prod(shape, dtype=np.int64))
        var = Variable(name, self.dtype, shape, self.size, size, values)
        self.size += size
        self.variables.append(var)
        self.starts.append(var.start)
        return var

    def map(self, begins, lengths, tile: int) -> None:
        """Map runs of addresses (one as ints, or arrays) to ``tile``; a later mapping of an
        address wins."""
        b, e, t = self._new
        if isinstance(begins, np.ndarray):
            b.extend(begins.tolist())
            e.extend((begins + lengths).tolist())
            t.extend([tile] * len(begins))
        else:
            b.append(int(begins))
            e.append(int(begins + lengths))
            t.append(tile)

    def _resolve(self) -> None:
        """Paint mappings made since the last call over the resolved ones (never re-read),
        repainting only from the lowest to the highest address they map."""
        if self._new[0]:
            b, e, t = (np.array(x, np.int64) for x in self._new)
            lo, cuts, tiles = int(b.min()), self._cuts, self._cut_tiles
            hi = max(int(e.max()), lo + 1)
            (i, j_s), (i_s, j) = (np.searchsorted(cuts, [lo, hi], s) for s in ("right", "left"))
            inner = np.r_[lo, cuts[i:j], hi]  # the resolved tiles there, then the new ones
            mc, mt = _paint(np.r_[inner[:-1], b], np.r_[inner[1:], e], np.r_[tiles[i:j + 1], t])
            p = np.r_[lo, mc, hi]  # where the tile may change (a repeat is no change)
            f = np.where(p < hi, mt[np.searchsorted(mc, p, "right")], tiles[j_s])
            new = np.flatnonzero(f != np.r_[tiles[i_s], f[:-1]])
            self._cuts = np.r_[cuts[:i_s], p[new], cuts[j_s:]]
            self._cut_tiles = np.r_[tiles[:i_s + 1], f[new], tiles[j_s + 1:]]
            self._new = ([], [], [])

    def pieces(self, begins: np.ndarray, lengths: np.ndarray):
        """Cut address runs where the tile mapping changes: (run, begin, end, tile) of
        every piece, in order; tile -1 where unmapped."""
        self._resolve()
        keep, cuts = np.flatnonzero(lengths > 0), self._cuts
        b = begins[keep].astype(np.int64)
        e = b + lengths[keep]
        lo, hi = np.searchsorted(cuts, b, "right"), np.searchsorted(cuts, e, "left")
        if (hi == lo).all():  # no run crosses a change of tile
            return keep, b, e, self._cut_tiles[lo]
        run = np.repeat(np.arange(b.size), hi - lo + 1)
        at = _ranges(lo, hi + 1)  # piece ``at`` of a run: from cut at - 1 to cut at
        start = np.where(at == lo[run], b[run], cuts[at - 1])
        end = np.where(at == hi[run], e[run], np.r_[cuts, 0][at])
        return keep[run], start, end, self._cut_tiles[at]

    def describe(self, address: int) -> str:
        """'element 5 of tensor v2', for error messages."""
        var = self.variables[int(np.searchsorted(self.starts, address, "right")) - 1]
        local = int(address) - var.start
        where = np.unravel_index(local, var.shape) if len(var.shape) > 1 else (local,)
        return f"element {list(map(int, where))} of tensor '{var.name}'"


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(lo[i], hi[i])``."""
    n = np.maximum(hi - lo, 0)
    return np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))


def _paint(b, e, t):
    """Mapping records (in the order made: a later one wins) as a step function: the cuts
    where the tile changes and the tile before the first cut and after each (-1: none)."""
    cuts = np.sort(np.r_[b, e], kind="stable")  # merges runs already in order
    cuts = cuts[firsts(cuts)]
    lo, hi = np.searchsorted(cuts, b), np.searchsorted(cuts, e)
    tiles = np.full(cuts.size + 1, -1, np.int64)  # tiles[k + 1]: from cuts[k] to cuts[k + 1]
    tiles[1 + _ranges(lo, hi)] = t.repeat(np.maximum(hi - lo, 0))
    change = np.flatnonzero(tiles[1:] != tiles[:-1])
    return cuts[change], np.r_[-1, tiles[change + 1]]


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
        self.graph, self.id, self.name = graph, id_, name

    def __repr__(self):
        return f"ComputeSet('{self.name}')"


class VertexRef:
    """``poplar::VertexRef``; ``v["field"]`` is a field reference for ``connect``."""

    __slots__ = ("graph", "id")

    def __init__(self, graph, id_):
        self.graph, self.id = graph, id_

    def __getitem__(self, field: str) -> FieldRef:
        return FieldRef(self, field)

    def __repr__(self):
        return f"VertexRef({self.graph.describe_vertex(self.id)})"


@dataclass(frozen=True)
class FieldRef:
    vertex: VertexRef
    field: str


@dataclass(frozen=True)
class DataStream:
    """``poplar::DataStream``: a host-to-device or device-to-host FIFO of ``n`` elements."""

    name: str
    dtype: np.dtype
    n: int
    to_device: bool


class Graph:
    """``poplar::Graph(target)``: the program's data and computation, before compilation."""

    def _offset_of(self) -> int:
        return 0

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
        self.host_writes: dict[str, Tensor] = {}
        self.host_reads: dict[str, Tensor] = {}

    # -- data ----------------------------------------------------------------------------
    def _pool(self, dtype) -> Pool:
        dtype = as_type(dtype)
        return self.pools.setdefault(dtype, Pool(dtype))

    def add_variable(self, dtype, shape, name: str = "") -> Tensor:
        """``Graph::addVariable``: zero-initialised storage, to be mapped to tiles."""
        return self._add(dtype, shape, name, "var")

    def add_constant(self, dtype, shape, values, name: str = "") -> Tensor:
        """``Graph::addConstant``: a tensor with fixed values (map it to a tile too)."""
        return self._add(dtype, shape, name, "const", values)

    def _add(self, dtype, shape, name, kind, values=None) -> Tensor:
        shape, pool = _shape(shape, name), self._pool(dtype)
        if values is not None:
            values = _values(values, pool.dtype, None, f"constant '{name}'")
            if values.size == 1:
                values = np.full(shape, values.reshape(()), dtype=pool.dtype)
            if values.size != math.prod(shape):
                raise IpuError(f"constant '{name}' of shape {shape} needs {math.prod(shape)} "
                               f"values, got {values.size}")
            values = values.reshape(shape)
        name = name or f"{kind}{len(pool.variables)}"
        self._check_fits(name, pool.dtype, shape)
        var = pool.alloc(name, shape, values)
        return Tensor(self.root, pool.dtype, (var.start, shape, contiguous_strides(shape)), name)

    def _check_fits(self, name, dtype, shape) -> None:
        """OutOfMemoryError, by arithmetic, for a tensor larger than all tiles together."""
        need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        t = self.target
        have = t.num_tiles * t.bytes_per_tile
        if need > have:
            raise OutOfMemoryError(
                f"Out of memory: tensor '{name}' ({TYPE_NAMES[dtype]} {list(shape)}) needs "
                f"{need:,} bytes but all {t.num_tiles:,} tiles of the {t.version} target hold "
                f"{have:,} bytes ({t.bytes_per_tile:,} per tile); nothing was allocated. Fix: "
                "use a smaller tensor or split it across more IPUs "
                "(ipu.IPUModel(num_ipus=...)).")

    def set_tile_mapping(self, tensor_or_vertex, tile: int) -> None:
        """``Graph::setTileMapping``: put every element of a tensor (or a vertex) on ``tile``."""
        if isinstance(tensor_or_vertex, VertexRef):
            vid = self._vertex(tensor_or_vertex, "set_tile_mapping")
            self.v_tile[vid] = self.target.check_tile(tile, lambda: self.describe_vertex(vid))
            return
        t = tensor_or_vertex
        if not (type(t) is Tensor and t.graph is self):
            t = self._own(t, "set_tile_mapping")
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
            missing = int((end - start)[holes].sum())
            first = np.unravel_index(int(flat[holes[0]]), t.shape) if t.shape else ()
            raise TileMappingError(
                f"get_tile_mapping: tensor '{t.name}' has {missing} unmapped elements "
                f"(first: {list(map(int, first))}); map them with graph.set_tile_mapping, or "
                "pass throw_on_incomplete=False for the mapping of the mapped ones"
            )
        n = self.target.num_tiles
        begins, ends, tiles = _join(flat, flat + end - start, tiles)  # grouped by tile next
        order = np.argsort(tiles, kind="stable")
        pairs = list(zip(begins[order].tolist(), ends[order].tolist()))
        cut = np.searchsorted(tiles[order], np.arange(n + 1)).tolist()
        return [pairs[cut[i]:cut[i + 1]] for i in range(n)]

    def set_initial_value(self, target, value) -> None:
        """``Graph::setInitialValue`` of a vertex State field or of a tensor."""
        if isinstance(target, Tensor):
            t = self._own(target, "set_initial_value")
            value = _values(value, t.dtype, t.shape, f"set_initial_value of '{t.name}'")
            self.initial_values.append((t, value))
            return
        if not isinstance(target, FieldRef):
            raise GraphConnectionError(
                "set_initial_value takes a vertex field (v['name']) or a tensor, "
                f"got {target!r}"
            )
        vid, field = self._vertex(target.vertex, "set_initial_value"), \
            self._field(target, "set_initial_value")
        if field.kind != "state":
            raise GraphConnectionError(
                f"field '{target.field}' of {self.describe_vertex(vid)} is "
                f"{field.kind}, not State; connect a tensor to it with graph.connect"
            )
        value = np.asarray(value, dtype=field.dtype)
        if (value.ndim != 1) if field.vector else (value.size != 1):
            want = "a 1-D array" if field.vector else "one value"
            raise GraphConnectionError(
                f"State field '{target.field}' of {self.describe_vertex(vid)} needs {want}, "
                f"got shape {value.shape}"
            )
        self.v_state[vid][target.field] = value if field.vector else value.reshape(())

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
            raise GraphConnectionError(
                f"add_vertex needs a ComputeSet of this graph (graph.add_compute_set), "
                f"got {cs!r}"
            )
        if not (isinstance(vertex_class, type) and issubclass(vertex_class, Vertex)):
            raise GraphConnectionError(
                f"add_vertex needs a subclass of ipu.Vertex, got {vertex_class!r}"
            )
        vid = len(self.v_cs)
        self.v_cs.append(cs.id)
        self.v_cls.append(vertex_class)
        self.v_conn.append({})
        self.v_tile.append(-1)
        self.v_perf.append(None)
        self.v_state.append({})
        ref = VertexRef(self, vid)
        for field, tensor in (connections or {}).items():
            self._connect(vid, field, tensor)
        if tile is not None:
            self.set_tile_mapping(ref, tile)
        return ref

    def connect(self, field_ref: FieldRef, tensor: Tensor) -> None:
        """``Graph::connect``: connect a tensor to a vertex field (Vector fields flatten it)."""
        if not isinstance(field_ref, FieldRef):
            raise GraphConnectionError(f"connect needs a vertex field, v['name'], got "
                                       f"{field_ref!r}")
        self._connect(self._vertex(field_ref.vertex, "connect"), field_ref.field, tensor)

    def _connect(self, vid: int, name: str, tensor: Tensor) -> None:
        field = (self.v_cls[vid].fields.get(name)
                 or self._field(FieldRef(VertexRef(self, vid), name), "connect"))
        why = None
        if field.kind == "state":
            why = "is State; set it with graph.set_initial_value"
        elif not isinstance(tensor, Tensor):
            why = f"must be connected to a Tensor, got {tensor!r}"
        elif tensor.graph is not self.root:
            self._own(tensor, "connect")
        elif tensor.dtype != field.dtype:
            why = (f"is {field!r} but tensor '{tensor.name}' is {TYPE_NAMES[tensor.dtype]}; "
                   f"connect a tensor of type {TYPE_NAMES[field.dtype]} (popops.cast converts)")
        elif not (field.vector or not tensor.shape or tensor.num_elements() == 1):
            why = (f"is a scalar but tensor '{tensor.name}' has shape {tensor.shape} "
                   f"({tensor.num_elements()} elements); connect one element, e.g. "
                   f"{tensor.name}[i], or declare the field as ipu.Vector")
        elif name in self.v_conn[vid]:
            why = ("is already connected; Poplar allows one edge per field (a second is a "
                   "poplar::graph_connection_error when the Engine is built; kit convention: "
                   "ipukit refuses it at connect): connect it to one tensor (concat views to "
                   "join several)")
        if why:
            raise GraphConnectionError(f"field '{name}' of {self.describe_vertex(vid)} {why}")
        self.v_conn[vid][name] = tensor  # a Vector field sees it flattened

    def set_perf_estimate(self, vertex: VertexRef, cycles: int) -> None:
        """``Graph::setPerfEstimate``: the cycles this vertex takes on one worker."""
        vid = self._vertex(vertex, "set_perf_estimate")
        if not (isinstance(cycles, numbers.Integral) and cycles >= 0):
            raise IpuError(f"perf estimate of {self.describe_vertex(vid)} must be a "
                           f"non-negative int, got {cycles!r}")
        self.v_perf[vid] = int(cycles)

    # -- host ----------------------------------------------------------------------------
    def _add_stream(self, name, dtype, n, to_device) -> DataStream:
        if name in self.streams:
            raise StreamError(f"a stream named '{name}' already exists; use another name")
        if not (isinstance(n, numbers.Integral) and n >= 1):
            raise StreamError(f"stream '{name}' needs a positive element count, got {n!r}")
        self.streams[name] = DataStream(name, as_type(dtype), int(n), to_device)
        return self.streams[name]

    def add_host_to_device_fifo(self, name: str, dtype, n: int) -> DataStream:
        """``Graph::addHostToDeviceFIFO``: a stream the host fills, ``n`` elements a copy."""
        return self._add_stream(name, dtype, n, True)

    def add_device_to_host_fifo(self, name: str, dtype, n: int) -> DataStream:
        """``Graph::addDeviceToHostFIFO``."""
        return self._add_stream(name, dtype, n, False)

    def create_host_write(self, name: str, tensor: Tensor) -> None:
        """``Graph::createHostWrite``: lets ``Engine.write_tensor(name, …)`` set the tensor."""
        self.host_writes[name] = self._new_handle(name, tensor, self.host_writes, "write")

    def create_host_read(self, name: str, tensor: Tensor) -> None:
        """``Graph::createHostRead``: lets ``Engine.read_tensor(name)`` return the tensor."""
        self.host_reads[name] = self._new_handle(name, tensor, self.host_reads, "read")

    def _new_handle(self, name, tensor, handles, verb) -> Tensor:
        tensor = self._own(tensor, f"create_host_{verb}")
        if name in handles:
            raise StreamError(
                f"a host {verb} handle '{name}' already exists (for tensor "
                f"'{handles[name].name}'); give '{tensor.name}' another handle name"
            )
        return tensor

    # -- helpers -------------------------------------------------------------------------
    def _own(self, tensor, what) -> Tensor:
        if not isinstance(tensor, Tensor):
            raise IpuError(f"{what} needs a Tensor, got {tensor!r}")
        if tensor.graph is not self.root:
            raise TileMappingError(f"{what}: tensor '{tensor.name}' belongs to another graph")
        return tensor

    def _vertex(self, ref, what: str) -> int:
        """The id of a VertexRef of this graph, or GraphConnectionError."""
        if not isinstance(ref, VertexRef):
            raise GraphConnectionError(f"{what} needs a vertex (from graph.add_vertex), "
                                       f"got {ref!r}")
        if ref.graph is not self.root:
            raise GraphConnectionError(f"{what}: the vertex belongs to another graph")
        return ref.id

    def _field(self, ref: FieldRef, what: str):
        cls = self.v_cls[ref.vertex.id]
        field = cls.fields.get(ref.field)
        if field is None:
            raise GraphConnectionError(
                f"{what}: {cls.__name__} has no field '{ref.field}'; its fields are "
                f"{', '.join(cls.fields) or 'none'}"
            )
        return field

    def describe_vertex(self, vid: int) -> str:
        tile = self.v_tile[vid]
        cs = self.compute_sets[self.v_cs[vid]].name
        where = f"tile {tile}" if tile >= 0 else "no tile"
        return f"vertex {vid} ({self.v_cls[vid].__name__}, compute set '{cs}', {where})"

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
        from .virtual_graph import VirtualGraph  # noqa: PLC0415 - it subclasses Graph

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
    if not bad.any():
        return None
    return (f"value {raw.reshape(-1)[int(bad.argmax())]!r} is outside the range of "
            f"{TYPE_NAMES[dtype]} ({info.min:,}..{info.max:,})")


def _values(values, dtype, shape, what: str) -> np.ndarray:
    """``values`` as an array of ``dtype`` (broadcast to ``shape``), or IpuError."""
    why = out_of_range(values, dtype)
    if why:
        raise IpuError(f"{what}: {why}; use values that fit the tensor's type")
    try:
        a = np.asarray(values, dtype=dtype)
        return a if shape is None else np.broadcast_to(a, shape)
    except (TypeError, ValueError) as exc:
        raise IpuError(f"{what}: cannot use {values!r} as {TYPE_NAMES[dtype]} values of "
                       f"shape {shape} ({exc})") from None


def _shape(shape, name) -> tuple:
    shape = tuple(np.atleast_1d(shape).tolist()) if not isinstance(shape, tuple) else shape
    if not all(isinstance(s, numbers.Integral) and s >= 0 for s in shape):
        raise IpuError(f"tensor '{name}': shape {shape} must be non-negative ints")
    return tuple(int(s) for s in shape)
