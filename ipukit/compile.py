"""Compilation (``poplar::compileGraph``): validate, freeze and plan a graph and programs.

The result, an :class:`Executable`, is plain data: the program tree with, for every
compute set, its vertices grouped by class and field shape (one array operation each,
with gathers and scatters planned here once), every superstep's BSP cost per tile (a
:class:`~ipukit.trace.Step`), and the memory of every tile. Mistakes found here raise
the errors of :mod:`ipukit.errors`, naming the tensor, vertex, field and tile.

>>> import ipukit as ipu
>>> t = ipu.IPUModel(tiles_per_ipu=2).create_device().target
>>> g = ipu.Graph(t)
>>> v = g.add_variable(ipu.FLOAT, [4], "v")
>>> ipu.compile_graph(g, [ipu.Sequence()])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ipukit.errors.TileMappingError: tensor 'v' has 4 unmapped elements (first: [0]); map ...
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from . import cost
from .cost import COPY_BYTES_PER_CYCLE  # noqa: F401  (re-exported)
from .errors import (
    ComputeSetRaceError,
    GraphConnectionError,
    IpuError,
    OutOfMemoryError,
    OutOfMemoryWarning,
    ProgramError,
    StreamError,
    TileMappingError,
)
from .graph import DataStream, Graph
from .program import Copy, Execute, If, PrintTensor, Program, Repeat, RepeatWhileTrue, Sequence
from .tensor import TYPE_NAMES, Tensor
from .trace import Step, TileMemory

#: Bytes of vertex state per field: a pointer (scalar) or pointer and size (Vector).
SCALAR_FIELD_BYTES, VECTOR_FIELD_BYTES = 4, 8
#: Bytes of code per codelet class on each tile that runs it (approximate).
CODELET_CODE_BYTES = 256


@dataclass(frozen=True, eq=False)
class Access:
    """How to reach a set of addresses: a contiguous run (a view), one row shared by all
    vertices (a broadcast), or an index array (a gather / scatter)."""

    dtype: np.dtype
    idx: np.ndarray  # addresses, shape (n,) or (n, k)
    start: int = -1  # >= 0: contiguous from start
    row: np.ndarray | None = None  # every vertex reads this same row

    @staticmethod
    def of(dtype, idx: np.ndarray) -> Access:
        flat = idx.reshape(-1)
        if flat.size and flat[-1] - flat[0] == flat.size - 1 and (
                flat.size == 1 or bool((np.diff(flat) == 1).all())):
            return Access(dtype, idx, start=int(flat[0]))
        if idx.ndim == 2 and idx.shape[0] > 1 and bool((idx == idx[0]).all()):
            return Access(dtype, idx, row=idx[0].copy())
        return Access(dtype, idx)

    @property
    def shape(self) -> tuple:
        return self.idx.shape


@dataclass(frozen=True, eq=False)
class FieldPlan:
    name: str
    kind: str
    access: Access | None  # None for State fields


@dataclass(frozen=True, eq=False)
class VertexGroup:
    """Vertices of one class and field shape in one compute set: one array operation."""

    cls: type
    vertex_ids: np.ndarray
    tiles: np.ndarray
    estimates: np.ndarray
    fields: tuple[FieldPlan, ...]
    state: dict  # State field name -> initial values, shape (n,) or (n, k)


# -- the compiled program tree ------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class ExecNode:
    step: int
    groups: tuple[VertexGroup, ...]


@dataclass(frozen=True, eq=False)
class CopyNode:
    step: int
    src: Access
    dst: Access


@dataclass(frozen=True, eq=False)
class StreamNode:
    step: int
    stream: DataStream
    access: Access


@dataclass(frozen=True, eq=False)
class SeqNode:
    children: tuple


@dataclass(frozen=True, eq=False)
class RepeatNode:
    count: int
    body: object


@dataclass(frozen=True, eq=False)
class WhileNode:
    cond: object
    predicate: Access
    body: object
    name: str


@dataclass(frozen=True, eq=False)
class IfNode:
    predicate: Access
    then: object
    else_: object


@dataclass(frozen=True, eq=False)
class PrintNode:
    title: str
    access: Access
    fmt: object = None  # a PrintTensorFmt


@dataclass(frozen=True, eq=False)
class Executable:
    """A compiled graph and programs (``poplar::Executable``): plain data for the Engine."""

    graph: Graph
    programs: tuple
    steps: tuple[Step, ...]
    memory: TileMemory

    @property
    def target(self):
        return self.graph.target


def compile_graph(graph: Graph, programs, options: dict | None = None) -> Executable:
    """``poplar::compileGraph(graph, programs, options)``: check the graph and programs and
    plan their execution.

    A graph that does not fit in tile memory gives an :class:`OutOfMemoryWarning` and
    compiles anyway, as the IPUModel does ("designed not to stop for OOM errors", Poplar
    tutorial 4; Poplar turns ``debug.allowOutOfMemory`` on when profiling, and ipukit
    always profiles): the profile and memory map show the over-full tiles. The option
    ``{"debug.allowOutOfMemory": "false"}`` raises :class:`OutOfMemoryError` instead, as
    compiling for hardware does. A virtual graph compiles its whole parent (they share
    every tensor and vertex).
    """
    allow = str((options or {}).get("debug.allowOutOfMemory", "true")).lower()
    if allow not in ("true", "false"):
        raise IpuError(f"engine option 'debug.allowOutOfMemory' must be \"true\" or "
                       f"\"false\", got {allow!r}")
    return _Compiler(getattr(graph, "root", graph),
                     allow_out_of_memory=allow == "true").run(programs)


class _Compiler:
    def __init__(self, graph: Graph, allow_out_of_memory: bool = True):
        self.g, self.t = graph, graph.target
        self.allow_out_of_memory = allow_out_of_memory
        self.steps: list[Step] = []
        self.done: dict[int, object] = {}  # id(program) or cs -> compiled node
        self.tile_of = {dt: p.tiles() for dt, p in graph.pools.items()}
        self.exchange_buffers = np.zeros(self.t.num_tiles, np.int64)
        self.vertex_state = np.zeros(self.t.num_tiles, np.int64)
        self.vertex_code = np.zeros(self.t.num_tiles, np.int64)

    def run(self, programs) -> Executable:
        if isinstance(programs, Program):
            programs = [programs]
        self._check_mapped()
        self._step("host sync (Engine.run)", "host", sync=cost.host_sync_cycles(self.t))  # step 0
        nodes = tuple(self.node(p) for p in programs)
        memory = self._memory()
        return Executable(self.g, nodes, tuple(self.steps), memory)

    # -- program tree ---------------------------------------------------------------------
    def node(self, p):
        key = id(p)
        if key not in self.done:
            self.done[key] = self._node(p)
        return self.done[key]

    def _node(self, p):
        if isinstance(p, Sequence):
            return SeqNode(tuple(self.node(c) for c in p.programs))
        if isinstance(p, Execute):
            if p.cs.graph is not self.g:
                raise ProgramError(f"Execute({p.cs!r}): the compute set is from another graph")
            return self._compute_set(p.cs)
        if isinstance(p, Copy):
            return self._copy(p.src, p.dst)
        if isinstance(p, Repeat):
            return RepeatNode(p.count, self.node(p.body))
        if isinstance(p, RepeatWhileTrue):
            return WhileNode(self.node(p.cond), self._access(p.predicate, "RepeatWhileTrue"),
                             self.node(p.body), p.predicate.name)
        if isinstance(p, If):
            return IfNode(self._access(p.predicate, "If"), self.node(p.then),
                          self.node(p.else_))
        if isinstance(p, PrintTensor):
            return PrintNode(p.title, self._access(p.tensor, "PrintTensor"), p.fmt)
        raise ProgramError(f"cannot compile program {p!r}")

    def _access(self, t: Tensor, what: str) -> Access:
        if t.graph is not self.g:
            raise ProgramError(f"{what}: tensor '{t.name}' belongs to another graph")
        return Access.of(t.dtype, t.idx)

    # -- checks ---------------------------------------------------------------------------
    def _check_mapped(self):
        for pool in self.g.pools.values():
            unmapped = np.flatnonzero(pool.tiles() < 0)
            if unmapped.size:
                var = pool.variable_at(unmapped[0])
                mine = unmapped[(unmapped >= var.start) & (unmapped < var.start + var.size)]
                first = np.unravel_index(int(mine[0]) - var.start, var.shape)
                raise TileMappingError(
                    f"tensor '{var.name}' has {mine.size} unmapped elements (first: "
                    f"{list(map(int, first))}); map every element with graph.set_tile_mapping"
                    " (or poputil.map_tensor_linearly) before compiling"
                )

    # -- steps ----------------------------------------------------------------------------
    def _step(self, name, kind, sync=0, compute=None, transfers=None, host_bytes=0,
              host_in=None, host_out=None, tile_out=None, tiles=None, **extra) -> int:
        """Record a superstep. Bytes in and out per tile come from ``transfers`` (rows of
        source tile, destination tile, bytes) unless ``tile_out`` gives what each tile
        sends (the exchange broadcasts: an element read by many tiles is sent once).
        ``tiles`` are the tiles taking part: the step involves (and syncs) their IPUs
        only; every IPU when None or empty (IPU-level task parallelism)."""
        n = self.t.num_tiles
        compute = np.zeros(n, np.int64) if compute is None else compute
        transfers = np.zeros((0, 3), np.int64) if transfers is None else transfers
        src, dst, nbytes = transfers.T if transfers.size else (np.zeros(0, np.int64),) * 3
        b_in = np.bincount(dst, weights=nbytes, minlength=n).astype(np.int64)
        b_out = (np.bincount(src, weights=nbytes, minlength=n).astype(np.int64)
                 if tile_out is None else tile_out.astype(np.int64))
        if host_in is not None:
            b_in += host_in
        if host_out is not None:
            b_out += host_out
        exch = int(cost.exchange_cycles(int(np.maximum(b_in, b_out).max(initial=0)), self.t))
        ipus = tuple(range(self.t.num_ipus))
        if tiles is not None and transfers.size:
            tiles = np.concatenate([np.asarray(tiles, np.int64).reshape(-1),
                                    transfers[:, 0], transfers[:, 1]])
        if tiles is not None and np.size(tiles):
            ipus = tuple(int(q) for q in np.unique(np.asarray(tiles) // self.t.tiles_per_ipu))
        inter = 0
        if transfers.size and self.t.num_ipus > 1:
            ends = transfers[:, :2] // self.t.tiles_per_ipu
            cross = ends[:, 0] != ends[:, 1]
            if cross.any():  # an external sync of the IPUs the step joins, and IPU-Links
                inter = int(nbytes[cross].sum())
                pair = ends[cross, 0] * self.t.num_ipus + ends[cross, 1]
                busiest_link = np.bincount(pair, weights=nbytes[cross]).max()
                exch += cost.link_cycles(int(busiest_link), self.t)
                sync = max(sync, cost.global_sync_cycles(self.t, len(ipus)))
        if host_bytes:
            exch = max(exch, cost.host_cycles(int(host_bytes), self.t))
        step = Step(index=len(self.steps), name=name, kind=kind, sync_cycles=int(sync),
                    exchange_cycles=exch, compute_cycles=int(compute.max(initial=0)),
                    tile_compute_cycles=compute, tile_bytes_in=b_in, tile_bytes_out=b_out,
                    transfers=transfers, inter_ipu_bytes=inter, host_bytes=int(host_bytes),
                    ipus=ipus, **extra)
        self.steps.append(step)
        return step.index

    def _transfers(self, src_tiles, dst_tiles, nbytes) -> np.ndarray:
        """Aggregate element moves into (source tile, destination tile, bytes) rows."""
        if src_tiles.size == 0:
            return np.zeros((0, 3), np.int64)
        n = self.t.num_tiles
        key = src_tiles.astype(np.int64) * n + dst_tiles
        if n * n <= 1 << 23:  # a table of all tile pairs is small: count in one pass
            total = np.bincount(key, weights=nbytes, minlength=n * n).astype(np.int64)
            pairs = np.flatnonzero(total)
            return np.stack([pairs // n, pairs % n, total[pairs]], axis=1)
        order = np.argsort(key, kind="stable")
        key, nbytes = key[order], np.asarray(nbytes, np.int64)[order]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        pairs, total = key[first], np.add.reduceat(nbytes, first)
        return np.stack([pairs // self.t.num_tiles, pairs % self.t.num_tiles, total], axis=1)

    # -- copies ---------------------------------------------------------------------------
    def _copy(self, src, dst):
        if isinstance(src, DataStream) or isinstance(dst, DataStream):
            return self._stream_copy(src, dst)
        for t in (src, dst):
            self._access(t, "Copy")
        if src.num_elements() != dst.num_elements() or src.dtype != dst.dtype:
            raise ProgramError(
                f"Copy from '{src.name}' ({TYPE_NAMES[src.dtype]} {src.shape}) to "
                f"'{dst.name}' ({TYPE_NAMES[dst.dtype]} {dst.shape}): source and destination "
                "need the same type and number of elements"
            )
        s_idx, d_idx = src.idx.reshape(-1), dst.idx.reshape(-1)
        if _distinct(d_idx).size != d_idx.size:
            raise ProgramError(f"Copy destination '{dst.name}' has aliased elements (it names "
                               "some element twice, e.g. a broadcast view); copy to a tensor "
                               "whose elements are distinct")
        s_tile, d_tile = self.tile_of[src.dtype][s_idx], self.tile_of[dst.dtype][d_idx]
        size = src.dtype.itemsize
        remote = s_tile != d_tile
        transfers = self._transfers(s_tile[remote], d_tile[remote],
                                    np.full(int(remote.sum()), size))
        sent = np.bincount(self.tile_of[src.dtype][_distinct(s_idx[remote])],
                           minlength=self.t.num_tiles) * size  # each element sent once
        local = np.bincount(d_tile[~remote], minlength=self.t.num_tiles) * size
        compute = cost.copy_cycles(local)
        step = self._step(f"Copy {src.name} -> {dst.name}", "copy", sync=cost.sync_cycles(self.t),
                          compute=compute.astype(np.int64), transfers=transfers,
                          tile_out=sent, tiles=np.concatenate([s_tile, d_tile]))
        return CopyNode(step, Access.of(src.dtype, s_idx), Access.of(dst.dtype, d_idx))

    def _stream_copy(self, src, dst):
        stream, tensor = (src, dst) if isinstance(src, DataStream) else (dst, src)
        if self.g.streams.get(stream.name) is not stream:
            raise StreamError(f"stream '{stream.name}' was not created by this graph")
        self._access(tensor, "Copy")
        if tensor.num_elements() != stream.n or tensor.dtype != stream.dtype:
            raise StreamError(
                f"Copy between stream '{stream.name}' ({TYPE_NAMES[stream.dtype]}, {stream.n} "
                f"elements) and tensor '{tensor.name}' ({TYPE_NAMES[tensor.dtype]}, "
                f"{tensor.num_elements()} elements): they must have the same type and size"
            )
        idx = tensor.idx.reshape(-1)
        per_tile = np.bincount(self.tile_of[tensor.dtype][idx], minlength=self.t.num_tiles)
        nbytes = idx.size * tensor.dtype.itemsize
        per_tile = (per_tile * tensor.dtype.itemsize).astype(np.int64)
        arrow = "->" if stream.to_device else "<-"
        step = self._step(f"StreamCopy {stream.name} {arrow} {tensor.name}", "stream",
                          sync=cost.sync_cycles(self.t), host_bytes=nbytes,
                          tiles=self.tile_of[tensor.dtype][idx],
                          **{"host_in" if stream.to_device else "host_out": per_tile})
        return StreamNode(step, stream, Access.of(tensor.dtype, idx))

    # -- compute sets ---------------------------------------------------------------------
    def _compute_set(self, cs):
        key = ("cs", cs.id)
        if key in self.done:
            return self.done[key]
        g = self.g
        vids = [v for v, c in enumerate(g.v_cs) if c == cs.id]
        buckets: dict[tuple, list[int]] = {}
        for v in vids:
            cls, conn = g.v_cls[v], g.v_conn[v]
            if g.v_tile[v] < 0:
                raise TileMappingError(
                    f"{g.describe_vertex(v)} is not mapped to a tile; call "
                    "graph.set_tile_mapping(vertex, tile)"
                )
            shape = []
            for name, f in cls.fields.items():
                if f.kind == "state":
                    if f.vector:
                        if name not in g.v_state[v]:
                            raise GraphConnectionError(
                                f"State field '{name}' of {g.describe_vertex(v)} is a Vector "
                                "with no value; set it with graph.set_initial_value"
                            )
                        shape.append(g.v_state[v][name].size)
                elif name not in conn:
                    raise GraphConnectionError(
                        f"field '{name}' ({f!r}) of {g.describe_vertex(v)} is not connected; "
                        f"connect a tensor with graph.connect(v['{name}'], tensor)"
                    )
                elif f.vector:
                    shape.append(conn[name].size)
            buckets.setdefault((cls, tuple(shape)), []).append(v)
        groups = tuple(self._group(cls, np.array(vs)) for (cls, _), vs in buckets.items())
        self._check_races(cs, groups)
        step = self._compute_step(cs, groups)
        self.done[key] = ExecNode(step, groups)
        return self.done[key]

    def _group(self, cls, vids: np.ndarray) -> VertexGroup:
        g, n = self.g, len(vids)
        fields, state, sizes = [], {}, {}
        for name, f in cls.fields.items():
            if f.kind == "state":
                vals = [g.v_state[v].get(name, np.zeros((), f.dtype)) for v in vids]
                state[name] = np.stack(vals).astype(f.dtype)
                sizes[name] = int(state[name][0].size)
                continue
            idx = np.concatenate([g.v_conn[v][name] for v in vids])
            idx = idx.reshape((n, -1) if f.vector else (n,))
            sizes[name] = idx.shape[1] if f.vector else 1
            fields.append(FieldPlan(name, f.kind, Access.of(f.dtype, idx)))
        default = cls.cycle_estimate(sizes)
        estimates = np.array([default if g.v_perf[v] is None else g.v_perf[v] for v in vids],
                             np.int64)
        tiles = np.array([g.v_tile[v] for v in vids], np.int64)
        return VertexGroup(cls, vids, tiles, estimates, tuple(fields), state)

    def _check_races(self, cs, groups):
        """No vertex may write what another vertex (or field) of the compute set touches."""
        slots = [(gr, fp) for gr in groups for fp in gr.fields]
        n_slots = len(slots)
        for dtype in {fp.access.dtype for _, fp in slots}:
            mine = [(s, gr, fp) for s, (gr, fp) in enumerate(slots) if fp.access.dtype == dtype]
            writes = [(s, gr, fp) for s, gr, fp in mine if fp.kind != "input"]
            if not writes:
                continue
            # owner[address] = who writes it ("who" = vertex id and field slot, so that a
            # vertex's own InOut is no race)
            wa = np.concatenate([fp.access.idx.reshape(-1) for _, _, fp in writes])
            ww = np.concatenate([np.repeat(gr.vertex_ids * n_slots + s,
                                           fp.access.idx.size // len(gr.vertex_ids))
                                 for s, gr, fp in writes])
            owner = np.full(self.g.pools[dtype].size, -1, np.int64)
            owner[wa] = ww
            clash = np.flatnonzero(owner[wa] != ww)  # a later write took the element over
            if clash.size:
                addr = wa[clash[0]]
                first = ww[np.flatnonzero(wa == addr)[0]]
                self._race(cs, slots, dtype, addr, first, owner[addr], "also writes")
            written = owner >= 0
            for s, gr, fp in mine:
                if fp.kind == "output":
                    continue
                a, n = fp.access, len(gr.vertex_ids)
                hit = (written[a.start:a.start + a.idx.size] if a.start >= 0
                       else written[a.idx]).reshape(n, -1)
                if not hit.any():
                    continue
                rows, cols = np.nonzero(hit)
                addr = a.idx.reshape(n, -1)[rows, cols]
                who = gr.vertex_ids[rows] * n_slots + s
                bad = np.flatnonzero(owner[addr] != who)
                if bad.size:
                    i = bad[0]
                    self._race(cs, slots, dtype, addr[i], owner[addr[i]], who[i], "reads")

    def _race(self, cs, slots, dtype, addr, writer, other, verb):
        def who(code):
            vid, s = divmod(int(code), len(slots))
            return f"{self.g.describe_vertex(vid)} field '{slots[s][1].name}'"

        other_text = who(other)
        if divmod(int(writer), len(slots))[0] == divmod(int(other), len(slots))[0]:
            other_text = f"its own field '{slots[divmod(int(other), len(slots))[1]][1].name}'"
        raise ComputeSetRaceError(
            f"race in compute set '{cs.name}': {who(writer)} writes "
            f"{self.g.pools[dtype].describe(addr)}, which {other_text} {verb}. Vertices of "
            "one compute set run in parallel in no order the programming model promises, "
            "so Poplar too refuses a compute set with a data race. Fix: "
            "write to separate tensors, or put the two vertices in different compute sets "
            "executed one after the other (an InOut field reads and writes in place)."
        )

    def _compute_step(self, cs, groups) -> int:
        t, n_tiles, W = self.t, self.t.num_tiles, self.t.num_worker_contexts
        if groups:
            tiles = np.concatenate([gr.tiles for gr in groups])
            est = np.concatenate([gr.estimates for gr in groups])
            vids = np.concatenate([gr.vertex_ids for gr in groups])
        else:
            tiles = est = vids = np.zeros(0, np.int64)
        # Vertices on a tile go round-robin to its 6 workers; each worker issues every
        # 6th cycle, so the tile is busy W x the heaviest worker's load.
        order = np.lexsort((vids, tiles))
        st = tiles[order]
        first = np.searchsorted(st, st)  # index of the first vertex on the same tile
        worker = (np.arange(st.size) - first) % W
        load = np.bincount(st * W + worker, weights=est[order], minlength=n_tiles * W)
        compute = (load.reshape(n_tiles, W).max(axis=1) * W).astype(np.int64)
        # Exchange: a vertex's data on another tile is fetched before compute (once per
        # tile); what it writes to another tile is sent after. The exchange broadcasts: a
        # tile sends an element once, however many tiles receive it.
        srcs, dsts, sizes, read_remote = [], [], [], {}
        received = np.zeros(n_tiles, np.int64)
        sent = np.zeros(n_tiles, np.int64)
        for gr in groups:
            for fp in gr.fields:
                a = fp.access
                et = self.tile_of[a.dtype][a.idx]
                vt = gr.tiles.reshape((-1,) + (1,) * (a.idx.ndim - 1))
                remote = et != vt
                if not remote.any():
                    continue
                vt_b = np.broadcast_to(vt, et.shape)[remote]
                addr, et_r = a.idx[remote], et[remote]
                size = a.dtype.itemsize
                if fp.kind in ("input", "inout"):
                    uniq = _distinct(vt_b * (1 << 40) + addr)
                    u_dst, u_addr = uniq >> 40, uniq & ((1 << 40) - 1)
                    u_src = self.tile_of[a.dtype][u_addr]
                    srcs.append(u_src)
                    dsts.append(u_dst)
                    sizes.append(np.full(u_src.size, size))
                    received += np.bincount(u_dst, minlength=n_tiles) * size
                    read_remote.setdefault(a.dtype, []).append(u_addr)
                if fp.kind in ("output", "inout"):
                    srcs.append(vt_b)
                    dsts.append(et_r)
                    sizes.append(np.full(vt_b.size, size))
                    sent += np.bincount(vt_b, minlength=n_tiles) * size
        for dtype, addrs in read_remote.items():
            owners = self.tile_of[dtype][_distinct(np.concatenate(addrs))]
            sent += np.bincount(owners, minlength=n_tiles) * dtype.itemsize
        self.exchange_buffers = np.maximum(self.exchange_buffers, received)
        transfers = (self._transfers(np.concatenate(srcs), np.concatenate(dsts),
                                     np.concatenate(sizes)) if srcs else None)
        # Memory: vertex state and code on every tile that has vertices.
        kinds = {}
        for gr in groups:
            per_vertex = 4 + sum(VECTOR_FIELD_BYTES if gr.cls.fields[fp.name].vector
                                 else SCALAR_FIELD_BYTES for fp in gr.fields)
            per_vertex += sum(v[0].nbytes for v in gr.state.values())
            self.vertex_state += np.bincount(gr.tiles, minlength=n_tiles) * per_vertex
            self.vertex_code += (np.bincount(gr.tiles, minlength=n_tiles) > 0) * \
                CODELET_CODE_BYTES
            inst, cyc = kinds.get(gr.cls.__name__, (0, 0))
            kinds[gr.cls.__name__] = (inst + len(gr.vertex_ids), cyc + int(gr.estimates.sum()))
        per_tile = sum((np.bincount(gr.tiles, minlength=n_tiles) for gr in groups),
                       np.zeros(n_tiles, np.int64))
        return self._step(cs.name, "compute", sync=cost.sync_cycles(t), compute=compute,
                          transfers=transfers, tile_out=sent, vertex_cycles=int(est.sum()),
                          vertex_types=kinds, tiles=tiles, tile_vertices=per_tile)

    # -- memory ---------------------------------------------------------------------------
    def _memory(self) -> TileMemory:
        n = self.t.num_tiles
        variables, constants = np.zeros(n, np.int64), np.zeros(n, np.int64)
        for pool in self.g.pools.values():
            is_const = np.zeros(pool.size, bool)
            for var in pool.variables:
                if var.values is not None:
                    is_const[var.start:var.start + var.size] = True
            tiles = pool.tiles()
            size = pool.dtype.itemsize
            variables += np.bincount(tiles[~is_const], minlength=n) * size
            constants += np.bincount(tiles[is_const], minlength=n) * size
        mem = TileMemory({"variables": variables, "constants": constants,
                          "vertex state": self.vertex_state, "vertex code": self.vertex_code,
                          "exchange buffers": self.exchange_buffers},
                         self.t.bytes_per_tile)
        total = mem.total
        over = np.flatnonzero(total > self.t.bytes_per_tile)
        if over.size:
            worst = "; ".join(self._tile_report(mem, tile) for tile, used in mem.worst(3)
                              if used)
            detail = (
                f"cannot fit all data onto {over.size} of {n} tiles "
                f"({self.t.bytes_per_tile:,} bytes per tile on {self.t.version}). Worst "
                f"tiles: {worst}. Fix: spread tensors over more tiles "
                "(poputil.map_tensor_linearly), split the work across more vertices or "
                "IPUs, or use smaller tensors."
            )
            first = int(mem.worst(1)[0][0])
            if not self.allow_out_of_memory:
                raise OutOfMemoryError(
                    f"Memory allocation error : Out of memory on tile {first}: "
                    f"{int(total[first]):,} bytes used but tiles only have "
                    f"{self.t.bytes_per_tile:,} bytes of memory ({detail})"
                )
            warnings.warn(OutOfMemoryWarning(
                f"Out of memory: Cannot fit all variable data onto one or more tiles: "
                f"{detail} The IPUModel runs on (debug.allowOutOfMemory is true); on an IPU "
                "this graph would not compile. Engine options "
                "{'debug.allowOutOfMemory': 'false'} make this an OutOfMemoryError."
            ), stacklevel=4)
        return mem

    def _tile_report(self, mem: TileMemory, tile: int) -> str:
        parts = [f"{k} {int(v[tile]):,}" for k, v in mem.categories.items() if v[tile]]
        biggest = []
        for pool in self.g.pools.values():
            addrs = np.flatnonzero(pool.tiles() == tile)
            if addrs.size:
                owner = np.searchsorted(pool.starts, addrs, "right") - 1
                for vi, count in zip(*np.unique(owner, return_counts=True)):
                    biggest.append((int(count) * pool.dtype.itemsize, pool.variables[vi].name))
        names = ", ".join(f"'{name}' {b:,} B" for b, name in sorted(biggest, reverse=True)[:3])
        return (f"tile {tile}: {int(mem.total[tile]):,} B ({', '.join(parts)}"
                f"{'; largest tensors ' + names if names else ''})")


def _distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values (``np.unique`` by sorting: NumPy 2's hashing is slower here)."""
    a = np.sort(a, axis=None)
    return a[np.r_[True, a[1:] != a[:-1]]] if a.size else a
