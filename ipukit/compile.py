"""Compilation (``poplar::compileGraph``): validate, freeze and plan a graph and programs.

The result, an :class:`Executable`, is plain data: the program tree with, for every
compute set, its vertices grouped by class and field shape (one array operation each;
the Engine plans at ``load`` how to reach each field), every superstep's BSP cost per tile (a
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
from dataclasses import dataclass, make_dataclass
from math import prod

import numpy as np

from . import cost, liveness
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
from .graph import DataStream, Graph, RemoteBuffer
from .memory_report import out_of_memory
from .program import Copy, Execute, If, PrintTensor, Program, Repeat, RepeatWhileTrue, Sequence
from .tensor import (
    RegionList,
    Tensor,
    address_span,
    addresses,
    firsts,
    index_runs,
    runs,
    steps_past,
    unique,
)
from .trace import Step, TileMemory
from .vertex import MultiVertex

#: Bytes of vertex state per field: a pointer (scalar) or pointer and size (Vector).
SCALAR_FIELD_BYTES = 4
VECTOR_FIELD_BYTES = 8
#: Bytes of code per codelet class on each tile that runs it, however many compute sets
#: use it there (kit convention: an approximation).
CODELET_CODE_BYTES = 256
#: A compute set's vertices of one class and field shape run as one array operation per
#: run of vertices whose fields step evenly through storage (a region: no index array)
#: where runs average at least this many elements; otherwise as one gather.
GATHER_ELEMENTS = 4096
#: A compute set of at least this many field elements is compared with those planned
#: before it (:meth:`_Compiler._alike`); a smaller one is planned (as cheap as comparing).
ALIKE_ELEMENTS = 1 << 12
#: Pieces a run, on average, from which compile sums a compute set of at least
#: ``MOVES_RUNS`` runs' moves per set of reader tiles (:meth:`_Compiler._moves`) instead
#: of one move per piece (fewer runs: sorting them into sets costs more than it saves).
MANY_PIECES = 4
MOVES_RUNS = 1024


def _record(name: str, fields: str) -> type:
    """A frozen record of plain data, compared and hashed by identity (as the Engine's
    caches need)."""
    return make_dataclass(name, fields.split(), namespace={"__module__": __name__},
                          frozen=True, eq=False)


@dataclass(frozen=True, eq=False)
class Access:
    """How the engine reaches some elements, seen with ``shape``: a *region* of the storage
    (``offset`` and a stride per dimension of ``rshape``: the engine views it, nothing
    copied, where ``shape`` is a no-copy reshape of it) or, where no region describes them,
    an ``idx`` array of addresses (int32 where it fits: a gather and scatter)."""

    dtype: np.dtype
    shape: tuple
    offset: int = -1  # >= 0: a region
    rshape: tuple = ()
    rstrides: tuple = ()
    idx: np.ndarray | None = None
    gather_runs: object = None  # makes runs() of a gather without scanning idx (not kept)

    @staticmethod
    def gather(dtype, idx: np.ndarray, gather_runs=None) -> Access:
        small = idx.dtype == np.int32 or idx.size == 0 or int(idx.max()) < 2**31
        return Access(dtype, idx.shape, idx=idx.astype(np.int32 if small else np.int64,
                                                          copy=False), gather_runs=gather_runs)

    @staticmethod
    def of(t: Tensor, shape=None) -> Access:
        """The access of a tensor's elements (flat when ``shape`` is ``(n,)``)."""
        shape = t.shape if shape is None else tuple(shape)
        idx = t._idx  # (once: a RegionList makes its array at each read)
        if idx is not None:
            return Access.gather(t.dtype, idx.reshape(shape))
        return Access(t.dtype, shape, t.offset, t.shape, t.strides)

    def row(self, i: int) -> Access:
        """Vertex ``i``'s elements only (per-vertex debug mode)."""
        shape = (1,) + self.shape[1:]
        if self.idx is not None:
            return Access(self.dtype, shape, idx=self.idx[i:i + 1])
        return Access(self.dtype, shape, self.offset + i * self.rstrides[0],
                      (1,) + self.rshape[1:], self.rstrides)

    def runs(self, merged: bool = False, once: bool = False):
        """Runs of consecutive addresses, in order, and the vertex (row) of each; ``merged``:
        each vertex's addresses as a set, in fewer runs (dimensions by stride, or sorted);
        ``once`` (merged): a gather's repeated addresses once (read: the same bytes)."""
        if self.gather_runs is not None:
            return self.gather_runs()
        dims = sorted(range(len(self.rshape)), key=lambda d: (d > 0, -self.rstrides[d] * merged))
        layout = (self.offset, *([x[d] for d in dims] for x in (self.rshape, self.rstrides)))
        k = max(prod(self.shape[1:]), 1)  # elements per vertex
        x = self.idx
        if x is not None:  # each vertex's addresses sorted (unless they are)
            x = np.sort(x, -1) if merged and x.ndim > 1 and (x[..., 1:] < x[..., :-1]).any() else x
            begins, lengths, first = index_runs(x.reshape(-1), k, once)
            return begins, lengths, first // k
        begins, lengths = runs(Tensor(None, self.dtype, layout, ""), keep=1)
        return begins, lengths, (np.cumsum(lengths) - lengths) // k


FieldPlan = _record("FieldPlan", "name kind access")  # a connected field of a group


#: Vertices of one class and field shape in one compute set, run as one array operation:
#: their ids, tiles and cycle estimates, FieldPlans, and each State field's initial values.
VertexGroup = _record("VertexGroup", "cls vertex_ids tiles estimates fields state")


# -- the compiled program tree: the Engine runs each kind of node ------------------------
ExecNode = _record("ExecNode", "step groups")  # a compute set: its step, vertex groups
CopyNode = _record("CopyNode", "step src dst")  # tuples of Accesses (runs paired: one a run)
StreamNode = _record("StreamNode", "step stream access")
#: a copy to (``to_remote``) or from a remote buffer; offset: an int or the offset's Access
RemoteNode = _record("RemoteNode", "step buffer access offset to_remote")
SeqNode = _record("SeqNode", "children")
RepeatNode = _record("RepeatNode", "count body")
WhileNode = _record("WhileNode", "cond predicate body name")  # name: the predicate's
IfNode = _record("IfNode", "predicate then else_")
PrintNode = _record("PrintNode", "title access fmt")  # fmt: a PrintTensorFmt


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
        raise IpuError.bad_allow_out_of_memory(allow)
    return _Compiler(getattr(graph, "root", graph), allow == "true").run(programs)


class _Compiler:
    def __init__(self, graph: Graph, allow_out_of_memory: bool = True):
        self.g = graph
        self.t = graph.target
        self.allow_out_of_memory = allow_out_of_memory
        self.steps: list[Step] = []
        # id(program) or compute set -> compiled node; a copy's elements -> step, its
        # layouts (_copy_key) -> {first tile: step}
        self.done = {}
        self.copies = {}
        self.copy_pairs = {}  # a run's copy to a run: moves (_paired_moves)
        self.layout_runs = {}  # _merged_runs
        self.alike = {}  # compute sets planned, by what _alike compares
        v_cs = np.array(graph.v_cs, np.intp)  # each compute set's vertices, in order added
        self.by_cs = np.split(np.argsort(v_cs, kind="stable"), np.cumsum(
            np.bincount(v_cs, minlength=len(graph.compute_sets)))[:-1])
        self.memory = {k: np.zeros(self.t.num_tiles, np.int64)  # added to as compute sets
                       for k in ("vertex state", "vertex code")}  # compile
        self.code_on: dict[type, np.ndarray] = {}  # codelet -> tiles holding its code

    def run(self, programs) -> Executable:
        programs = [programs] if isinstance(programs, Program) else programs
        self._check_mapped()
        self._step("host sync (Engine.run)", "host", sync=cost.host_sync_cycles(self.t))  # step 0
        nodes = tuple(self.node(p) for p in programs)
        return Executable(self.g, nodes, tuple(self.steps), self._memory(nodes))

    # -- program tree ---------------------------------------------------------------------
    def node(self, p):
        key = p.cs if isinstance(p, Execute) else id(p)  # a compute set is compiled once
        if key not in self.done:
            self.done[key] = self._node(p)
        return self.done[key]

    def _node(self, p):
        if isinstance(p, Sequence):
            return SeqNode(tuple(self.node(c) for c in p.programs))
        if isinstance(p, Execute):
            if p.cs.graph is not self.g:
                raise ProgramError.compute_set_of_other_graph(p.cs)
            return self._compute_set(p.cs)
        if isinstance(p, Copy):
            if isinstance(p.src, RemoteBuffer) or isinstance(p.dst, RemoteBuffer):
                return self._remote_copy(p.src, p.dst, p.offset)
            return self._copy(p.src, p.dst)
        if isinstance(p, Repeat):
            return RepeatNode(p.count, self.node(p.body))
        if isinstance(p, RepeatWhileTrue):
            return WhileNode(self.node(p.cond), self._access(p.predicate, "RepeatWhileTrue"),
                             self.node(p.body), p.predicate.name)
        if isinstance(p, If):
            return IfNode(self._access(p.predicate, "If"), self.node(p.then), self.node(p.else_))
        if isinstance(p, PrintTensor):
            return PrintNode(p.title, self._access(p.tensor, "PrintTensor"), p.fmt)
        raise ProgramError.cannot_compile(p)

    def _access(self, t: Tensor, what: str, flat: bool = False) -> Access:
        if t.graph is not self.g:
            raise ProgramError.tensor_of_other_graph(what, t)
        return Access.of(t, (t.num_elements(),) if flat else None)

    # -- checks ---------------------------------------------------------------------------
    def _check_mapped(self):
        """Every element is on a tile (read from each type's step function, not cut into
        pieces per variable)."""
        for pool in (p for p in self.g.pools.values() if p.size):
            cuts, tiles = pool.steps(0, pool.size - 1)
            lengths = np.diff(np.concatenate(([0], cuts, [pool.size])))
            if ((tiles < 0) & (lengths > 0)).any():
                first = int(np.concatenate(([0], cuts))[np.argmax((tiles < 0) & (lengths > 0))])
                var = pool.variables[int(np.searchsorted(pool.starts, first, "right")) - 1]
                _, start, end, tile = pool.pieces(np.array([var.start]), np.array([var.size]))
                missing = int((end - start)[tile < 0].sum())
                raise TileMappingError.unmapped(var, missing, first - var.start)

    # -- steps ----------------------------------------------------------------------------
    def _step(self, name, kind, sync=0, compute=None, transfers=None, host_bytes=0,
              tile_in=0, tile_out=0, tiles=(), results=None, remote_bytes=0, **extra) -> int:
        """Record a superstep: sync, exchange in, compute, then, given ``results`` (a
        compute set's outputs held on other tiles: moves as ``transfers``), exchange out
        (Graphcore: "Exchange inputs, Compute, Exchange outputs"). Bytes in per tile:
        ``transfers`` (element moves: source tiles, destination tiles, bytes; the step
        keeps their sums per pair of tiles) plus ``tile_in``; bytes out: ``tile_out``, what
        each tile sends (the exchange broadcasts: an element read by many tiles is sent
        once). ``tiles`` and the transfers' ends are the tiles taking part: the step
        involves (and syncs) their IPUs only; every IPU when there are none (IPU-level task
        parallelism). ``host_bytes`` (a stream copy) and ``remote_bytes`` (a remote-buffer
        copy) cross the host link or the Streaming Memory link while the tiles exchange."""
        t = self.t
        n = t.num_tiles
        per = t.tiles_per_ipu
        compute = np.zeros(n, np.int64) if compute is None else compute
        pairs, b_in, b_out, exch, inter = self._exchange(transfers, tile_in, tile_out)
        out = (np.zeros((0, 3), np.int64), None, None, 0, 0)
        if results is not None and results[0].size:  # each result is sent once, by its vertex
            out = self._exchange(results, 0, np.bincount(results[0], results[2], n))
        tiles = np.concatenate([np.asarray(tiles, np.intp).reshape(-1), pairs[:, 0],
                                pairs[:, 1], out[0][:, 0], out[0][:, 1]]).astype(np.intp)
        ipus = tuple(np.flatnonzero(np.bincount(tiles // per, minlength=t.num_ipus)).tolist()
                     if tiles.size else range(t.num_ipus))
        if inter or out[4]:  # an external sync of the IPUs the step joins
            sync = max(sync, cost.global_sync_cycles(t, len(ipus)))
        exch = max(exch, cost.host_cycles(int(host_bytes), self.t)) if host_bytes else exch
        exch = max(exch, cost.remote_cycles(int(remote_bytes), self.t))
        step = Step(index=len(self.steps), name=name, kind=kind, sync_cycles=int(sync),
                    exchange_cycles=exch + out[3], compute_cycles=int(compute.max(initial=0)),
                    tile_compute_cycles=compute, tile_bytes_in=b_in if out[1] is None
                    else b_in + out[1], tile_bytes_out=b_out if out[2] is None
                    else b_out + out[2], transfers=np.concatenate([pairs, out[0]]),
                    inter_ipu_bytes=inter + out[4], host_bytes=int(host_bytes), ipus=ipus,
                    remote_bytes=int(remote_bytes),
                    exchange_out_cycles=out[3], tile_result_bytes_in=out[1],
                    tile_result_bytes_out=out[2], result_transfers=out[0],
                    result_inter_ipu_bytes=out[4], **extra)
        self.steps.append(step)
        return step.index

    def _exchange(self, transfers, tile_in=0, tile_out=0) -> tuple:
        """One exchange phase: the moves ``transfers`` summed per pair of tiles, the bytes
        each tile receives (theirs plus ``tile_in``) and sends (``tile_out``), the phase's
        cycles (the busiest tile's bytes, :func:`cost.exchange_cycles`, plus the busiest
        pair of IPUs' over an IPU-Link) and the bytes that cross IPUs."""
        t = self.t
        n = t.num_tiles
        per = t.tiles_per_ipu
        b_in = np.full(n, tile_in, np.int64)  # (a float array's values cut, as astype cuts)
        b_out = np.full(n, tile_out, np.int64)
        pairs = np.zeros((0, 3), np.int64)
        inter = 0
        link = 0
        if transfers is not None and transfers[0].size:  # (np.unique, and its inverse: slow)
            src, dst, nbytes = transfers
            key = np.asarray(src, np.int64) * n + dst
            if n * n <= 4 * key.size:  # many moves: counted per pair of tiles, no sort
                sums = np.bincount(key.astype(np.intp), weights=nbytes, minlength=n * n)
                pair = np.flatnonzero(sums)  # (moves of no bytes: none)
            else:
                pair = np.sort(key)
                pair = pair[np.concatenate(([True], pair[1:] != pair[:-1]))]  # each pair once
                sums = np.bincount(np.searchsorted(pair, key), weights=nbytes, minlength=pair.size)
                pair = pair[sums > 0]  # (moves of no bytes: none)
            pairs = np.empty((pair.size, 3), np.int64)  # (np.stack: ~1.5x the time)
            pairs[:, 0] = pair // n
            pairs[:, 1] = pair % n
            pairs[:, 2] = sums[sums > 0]
            b_in += np.bincount(dst, weights=nbytes, minlength=n).astype(np.int64)
            src, dst, nbytes = pairs.T  # (the rest: per pair)
            cross = src // per != dst // per
            if cross.any():  # bytes between IPUs
                inter = int(nbytes[cross].sum())
                pair = (src[cross] // per * t.num_ipus + dst[cross] // per).astype(np.intp)
                link = cost.link_cycles(int(np.bincount(pair, weights=nbytes[cross]).max()), t)
        exch = int(cost.exchange_cycles(int(np.maximum(b_in, b_out).max(initial=0)), t))
        return pairs, b_in, b_out, exch + link, inter

    # -- copies ---------------------------------------------------------------------------
    def _copy(self, src, dst):
        if isinstance(src, DataStream) or isinstance(dst, DataStream):
            return self._stream_copy(src, dst)
        pairs = _paired_runs(src, dst)
        if pairs is None:
            a_src = (self._access(src, "Copy", flat=True),)
            a_dst = (self._access(dst, "Copy", flat=True),)
        else:  # run by run (no address arrays): regions
            a_src = tuple(self._access(Tensor(src.graph, src.dtype, s, src.name), "Copy")
                          for s, _ in pairs)
            a_dst = tuple(self._access(Tensor(dst.graph, dst.dtype, d, dst.name), "Copy")
                          for _, d in pairs)
        if src.num_elements() != dst.num_elements() or src.dtype != dst.dtype:
            raise ProgramError.copy_mismatch(src, dst)
        name = f"Copy {src.name} -> {dst.name}"
        same = (src.dtype, *((t.offset, t.shape, t.strides, _elements(t)) for t in (src, dst)))
        if same in self.copies:  # the same elements again (an unrolled loop): renamed
            return CopyNode(self._again(self.copies[same], name), a_src, a_dst)
        key, first = self._copy_key(src, dst)
        plans = self.copies.setdefault(key, {})  # first tile -> step
        if first in plans:  # sides alike and mapped alike, at shifted addresses (a FIFO's
            step = self._again(plans[first], name)  # slots): the earlier plan, renamed
        elif plans:  # also whole IPUs on (the next stage's): the earlier plan, moved
            was, index = next(iter(plans.items()))
            step = self._moved_step(index, first - was, name)
        else:
            if pairs is None:
                moves = self._copy_moves(src, dst)
            else:
                moves = self._paired_moves(src.dtype, pairs)
            transfers, sent, local, tiles = moves
            compute = cost.copy_cycles(local.astype(np.int64)).astype(np.int64)
            step = self._step(name, "copy", cost.sync_cycles(self.t), compute, transfers,
                              tile_out=sent, tiles=tiles)
        self.copies[same] = plans[first] = step
        return CopyNode(step, a_src, a_dst)

    def _copy_key(self, src, dst) -> tuple:
        """What a copy's plan depends on: each side's shape and elements (an index array:
        the array itself, its own addresses) and, for a region, its tile mapping from its
        first address, tiles counted from the first tile of the IPU of the source's first
        address; and that tile (0 where a side is an index array or none is copied: not
        moved)."""
        moved = src.strides is not None and dst.strides is not None and src.num_elements() > 0
        first = 0
        key = [src.dtype]
        for t in (src, dst):
            mapping = False
            if t.strides is not None:
                lo, hi = address_span(t)
                cuts, tiles = self.g.pools[t.dtype].steps(lo, hi)
                if moved and t is src:
                    first = int(tiles[0]) // self.t.tiles_per_ipu * self.t.tiles_per_ipu
                mapping = ((cuts - lo).tobytes(), (tiles - first).tobytes())
            key.append((t.shape, t.strides, _elements(t), mapping))
        return tuple(key), first

    def _copy_moves(self, src, dst) -> tuple:
        """A copy's moves between tiles (source tiles, destination tiles, bytes), the bytes
        each tile sends (an element once, however many tiles receive it) and copies on its
        own tile, and the tiles taking part."""
        n_tiles = self.t.num_tiles
        size = src.dtype.itemsize
        sb, sn = runs(src)
        db, dn = runs(dst)
        if int(_union_lengths(np.zeros(db.size, np.int64), db, db + dn)[1].sum()) != dn.sum():
            raise ProgramError.copy_aliased(dst)
        # Cut each side where its tile changes, then pair the pieces by flat position:
        # pieces of (source address, source tile, destination tile, length).
        sides = []
        for t, b, k in ((src, sb, sn), (dst, db, dn)):
            run, start, _, tile = self.g.pools[t.dtype].pieces(b, k)
            sides.append(((np.cumsum(k) - k)[run] + start - b[run], start, tile))
        (sp, ss, s_tile), (dp, _, d_tile) = sides
        pos = unique(np.concatenate((sp, dp)))
        i = np.searchsorted(sp, pos, "right") - 1
        j = np.searchsorted(dp, pos, "right") - 1
        s_start = ss[i] + pos - sp[i]
        s_tile = s_tile[i]
        d_tile = d_tile[j]
        length = np.diff(pos, append=src.num_elements())
        remote = s_tile != d_tile
        transfers = (s_tile[remote], d_tile[remote], length[remote] * size)
        order, once = _union_lengths(np.zeros(int(remote.sum()), np.int64), s_start[remote],
                                     s_start[remote] + length[remote])  # each element once
        sent = np.bincount(s_tile[remote][order], weights=once, minlength=n_tiles) * size
        local = np.bincount(d_tile[~remote], weights=length[~remote], minlength=n_tiles) * size
        return transfers, sent, local, np.append(s_tile, d_tile)

    def _paired_moves(self, dtype, pairs) -> tuple:
        """:meth:`_copy_moves` of runs paired (:func:`_paired_runs`): each pair's moves,
        planned once, summed."""
        parts = []
        for pair in pairs:
            key = (dtype, *pair)
            if key not in self.copy_pairs:
                sides = [Tensor(None, dtype, region, "") for region in pair]
                self.copy_pairs[key] = self._copy_moves(*sides)
            parts.append(self.copy_pairs[key])
        transfers = tuple(np.concatenate([p[0][i] for p in parts]) for i in range(3))
        return (transfers, sum(p[1] for p in parts), sum(p[2] for p in parts),
                np.concatenate([p[3] for p in parts]))

    def _stream_copy(self, src, dst):
        stream, tensor = (src, dst) if isinstance(src, DataStream) else (dst, src)
        if self.g.streams.get(stream.name) is not stream:
            raise StreamError.stream_of_other_graph(stream)
        access = self._access(tensor, "Copy", flat=True)
        if tensor.num_elements() != stream.n or tensor.dtype != stream.dtype:
            raise StreamError.stream_copy_size(stream, tensor)
        name = f"StreamCopy {stream.name} {'->' if stream.to_device else '<-'} {tensor.name}"
        key = (id(stream), tensor.offset, tensor.shape, tensor.strides, _elements(tensor))
        if key in self.copies:  # the same elements again (an unrolled loop): renamed
            return StreamNode(self._again(self.copies[key], name), stream, access)
        run, start, end, tile = self.g.pools[tensor.dtype].pieces(*runs(tensor))
        nbytes = tensor.num_elements() * tensor.dtype.itemsize
        per_tile = (np.bincount(tile, weights=end - start, minlength=self.t.num_tiles)
                    * tensor.dtype.itemsize).astype(np.int64)
        step = self.copies[key] = self._step(
            name, "stream", sync=cost.sync_cycles(self.t), host_bytes=nbytes, tiles=tile,
            **{"tile_in" if stream.to_device else "tile_out": per_tile})
        return StreamNode(step, stream, access)

    def _remote_copy(self, src, dst, offset):
        """A copy between a tensor and a remote buffer (``Copy(buffer, tensor[, offset])``
        or back): a "remote" step, its tiles' bytes over the exchange and the Streaming
        Memory link (:func:`cost.remote_cycles`), one offset per repeat copied."""
        to_remote = isinstance(dst, RemoteBuffer)
        buf, tensor = (dst, src) if to_remote else (src, dst)
        if self.g.remote_buffers.get(buf.name) is not buf:
            raise StreamError.remote_buffer_of_other_graph(buf)
        access = self._access(tensor, "Copy", flat=True)
        rows = offset.num_elements() if isinstance(offset, Tensor) else 1
        if tensor.num_elements() != buf.num_elements * rows or tensor.dtype != buf.dtype:
            raise StreamError.remote_copy_mismatch(buf, tensor, rows)
        if isinstance(offset, Tensor):
            offset = self._access(offset, "Copy offset", flat=True)
        elif offset is not None:
            offset = int(offset)
        name = f"RemoteCopy {tensor.name} {'->' if to_remote else '<-'} {buf.name}"
        key = (id(buf), to_remote, tensor.offset, tensor.shape, tensor.strides,
               _elements(tensor))
        if key in self.copies:  # the same elements again: renamed
            return RemoteNode(self._again(self.copies[key], name), buf, access, offset,
                              to_remote)
        run, start, end, tile = self.g.pools[tensor.dtype].pieces(*runs(tensor))
        nbytes = tensor.num_elements() * tensor.dtype.itemsize
        per_tile = (np.bincount(tile, weights=end - start, minlength=self.t.num_tiles)
                    * tensor.dtype.itemsize).astype(np.int64)
        step = self.copies[key] = self._step(
            name, "remote", sync=cost.sync_cycles(self.t), remote_bytes=nbytes, tiles=tile,
            **{"tile_out" if to_remote else "tile_in": per_tile})
        return RemoteNode(step, buf, access, offset, to_remote)

    def _moved_step(self, index: int, shift: int, name: str) -> int:
        """Step ``index`` again, renamed, ``shift`` tiles (whole IPUs) on."""
        old = self.steps[index]
        per = self.t.tiles_per_ipu
        step = object.__new__(Step)
        self.steps.append(step)
        step.__dict__.update(old.__dict__, index=len(self.steps) - 1, name=name,
                             ipus=tuple(i + shift // per for i in old.ipus),
                             **{k: getattr(old, k) + np.array([shift, shift, 0])
                                for k in ("transfers", "result_transfers")}, **{
                                 k: _rolled(getattr(old, k), shift) for k in (
                                     "tile_compute_cycles", "tile_bytes_in", "tile_bytes_out",
                                     "tile_vertices", "tile_result_bytes_in",
                                     "tile_result_bytes_out") if getattr(old, k) is not None})
        return step.index

    def _again(self, index: int, name: str) -> int:
        """Step ``index`` again, renamed (``dataclasses.replace`` without its checks: µs)."""
        step = object.__new__(Step)
        self.steps.append(step)
        step.__dict__.update(self.steps[index].__dict__, index=len(self.steps) - 1, name=name)
        return step.index

    # -- compute sets ---------------------------------------------------------------------
    def _compute_set(self, cs):
        g = self.g
        vids = self.by_cs[cs.id].tolist()
        buckets: dict[tuple, list[int]] = {}
        for v in vids:
            cls = g.v_cls[v]
            conn = g.v_conn[v]
            state = g.v_state[v]
            if g.v_tile[v] < 0:
                raise TileMappingError.unmapped_vertex(g.describe_vertex(v))
            shape = [cls]  # vertices whose fields have the same region shape share one plan
            for name, f in cls.fields.items():
                if f.kind != "state":
                    t = conn.get(name)
                    if t is None:
                        raise GraphConnectionError.unconnected(name, f, g.describe_vertex(v))
                    shape += [t.shape if t.strides is not None else t.num_elements(), t.strides]
                elif not f.vector:
                    shape.append(0)
                elif name not in state:
                    raise GraphConnectionError.state_unset(name, g.describe_vertex(v))
                else:
                    shape.append(state[name].size)
            buckets.setdefault(tuple(shape), []).append(v)
        groups = tuple(self._group(key[0], run) for key, vs in buckets.items()
                       for run in self._regular_runs(key[0], vs))
        like, kept = self._alike(groups)
        if like is not None:  # its races, exchange and costs are an earlier one's, moved
            return ExecNode(self._compute_step(cs, groups, None, None, like), groups)
        fields = [(gr, fp, self._merged_runs(fp)) for gr in groups for fp in gr.fields]
        cat = _runs(fields)
        self._check_races(cs, fields, cat)
        return ExecNode(self._compute_step(cs, groups, fields, cat, kept=kept), groups)

    def _alike(self, groups):
        """An earlier compute set that is this one on tiles whole IPUs away and, field by
        field, at shifted addresses over the same (moved) tile mapping, where fields moved
        by different amounts touch addresses apart: (its step, the tile shift) (a model
        repeated on every IPU, a stage on each shard: planned once), or
        None and the list to keep this one in (None for a small compute set: checking
        would cost what planning does)."""
        key = tuple((gr.cls, gr.estimates.tobytes(), tuple((fp.name, fp.kind, fp.access.shape,
                     fp.access.rshape, fp.access.rstrides, fp.access.idx is None)
                     for fp in gr.fields)) for gr in groups)
        if sum(prod(fp.access.shape) for gr in groups for fp in gr.fields) < ALIKE_ELEMENTS:
            return None, None
        for earlier, index in self.alike.setdefault(key, []):
            shift = int(groups[0].tiles[0] - earlier[0].tiles[0]) if groups else 0
            if shift % self.t.tiles_per_ipu or not all(np.array_equal(
                    gr.tiles, e.tiles + shift) for gr, e in zip(groups, earlier)) or not (
                    all(issubclass(gr.cls, MultiVertex) for gr in groups) or np.array_equal(
                    *(np.argsort(np.concatenate([gr.vertex_ids for gr in x]), kind="stable")
                      for x in (groups, earlier)))):  # (the same order of vertices per tile)
                continue
            spans = {}  # (type, address shift) -> each field's lowest and highest address
            for fa, fb in ((fa, fb) for gr, e in zip(groups, earlier)
                           for fa, fb in zip(e.fields, gr.fields)):
                lo, hi = _span(fa.access)
                lo_b = _span(fb.access)[0]
                if fa.access.idx is not None and not np.array_equal(
                        fb.access.idx, fa.access.idx + (lo_b - lo)):
                    break
                if lo <= hi:  # (no addresses: nothing to compare)
                    spans.setdefault((fa.access.dtype, lo_b - lo), []).append((lo, hi))
            else:
                if self._moved(spans, shift):
                    return (index, shift), None
        return None, self.alike[key]

    def _moved(self, spans: dict, shift: int) -> bool:
        """Whether the fields' spans (per type and address shift; those that meet joined) are
        mapped as before, ``shift`` tiles on, and spans of one type moved by different
        amounts are apart, before and now. Field by field, not one hull per shift: a hull
        of fields allocated apart takes in other shards' tensors, mapped otherwise."""
        joined = []  # (type, shift, lowest, highest)
        for (dtype, d), found in spans.items():
            pool = self.g.pools[dtype]
            for lo, hi in _joined(found):
                ca, ta = pool.steps(lo, hi)
                cb, tb = pool.steps(lo + d, hi + d)
                if not (np.array_equal(cb - d, ca) and np.array_equal(tb, ta + shift)):
                    return False
                joined.append((dtype.str, d, lo, hi))  # (str(dtype): ~20x the time)
        for now in (0, 1):
            reach = {}  # type -> the highest address of the spans before (which never meet
            for t, lo, hi in sorted((t, lo + d * now, hi + d * now)  # spans of their shift)
                                    for t, d, lo, hi in joined):
                if lo <= reach.get(t, lo - 1):
                    return False
                reach[t] = max(reach.get(t, hi), hi)
        return True

    def _merged_runs(self, fp) -> tuple:
        """``fp.access.runs(merged=True)``; a region's are its layout's at offset 0, moved
        (kept: the same layout recurs in many compute sets). A gather only read (an input)
        reads each address once (a broadcast operand: far fewer runs, the same bytes)."""
        a = fp.access
        if a.idx is not None:
            return a.runs(merged=True, once=fp.kind == "input")
        key = (a.shape, a.rshape, a.rstrides)
        begins, lengths, rows = self.layout_runs.get(key) \
            or self.layout_runs.setdefault(key, Access(a.dtype, *key[:1], 0, *key[1:]).runs(True))
        return begins + a.offset, lengths, rows

    def _regular_runs(self, cls, vids: list[int]) -> list[list[int]]:
        """Split vertices into runs whose fields' offsets step evenly (each field is then
        one region: no index array), unless that makes many small array operations."""
        names = [n for n, f in cls.fields.items() if f.kind != "state"]
        conns = [self.g.v_conn[v] for v in vids]
        if len(vids) <= 2 or any(conns[0][n].strides is None for n in names):
            return [vids]
        offsets = np.array([[c[n].offset for n in names] for c in conns], np.int64)
        step = offsets[1:] - offsets[:-1]  # (np.diff and np.flatnonzero: ~4x the time)
        change = (step[1:] != step[:-1]).any(axis=1).nonzero()[0] + 1
        elements = len(vids) * sum(conns[0][n].num_elements() for n in names)
        if elements < GATHER_ELEMENTS * (change.size + 1):
            return [vids]  # small runs: one gather beats many array operations
        for p in range(2, (change.size + 1) // 2 + 1):  # or at most half as many interleaved
            apart = offsets[p:] - offsets[:-p]  # (vertex i to i + p: one step for each i)
            if (apart[p:] == apart[:-p]).all():
                return [vids[r::p] for r in range(p)]  # (a k-split matmul's: p = 2)
        cuts = [0]
        for c in change.tolist():  # vertices cuts[-1]..c step evenly
            if c > cuts[-1]:
                cuts.append(c + 1)
        return [vids[a:b] for a, b in zip(cuts, cuts[1:] + [len(vids)])]

    def _group(self, cls, vids: list[int]) -> VertexGroup:
        g = self.g
        fields = []
        state = {}
        sizes = {}
        for name, f in cls.fields.items():
            if f.kind == "state":
                vals = [g.v_state[v].get(name, np.zeros((), f.dtype)) for v in vids]
                state[name] = np.array(vals, dtype=f.dtype)  # (np.stack: ~8x slower)
                sizes[name] = int(state[name][0].size)
                continue
            access = _field_access(f.dtype, [g.v_conn[v][name] for v in vids], f.vector,
                                   g.pools[f.dtype].size <= 2**31)
            sizes[name] = access.shape[1] if f.vector else 1
            fields.append(FieldPlan(name, f.kind, access))
        w = (self.t.num_worker_contexts,) if issubclass(cls, MultiVertex) else ()
        default = cls.cycle_estimate(sizes, *w)  # a MultiVertex: the target's W
        estimates = np.array([default if g.v_perf[v] is None else g.v_perf[v] for v in vids],
                             np.int64)
        tiles = np.array([g.v_tile[v] for v in vids], np.intp)
        return VertexGroup(cls, np.array(vids), tiles, estimates, tuple(fields), state)

    def _check_races(self, cs, fields, cat, exact=False):
        """No vertex may write what another vertex (or field) of the compute set touches
        (``cat``: the fields' runs, :func:`_runs`)."""
        if all(fp.kind == "input" or not b.size for _, fp, (b, _, _) in fields):
            return  # nothing is written (an empty field writes nothing)
        if _apart([fp for _, fp, _ in fields]):
            return  # (most compute sets: found in plain Python, not ~40 NumPy calls)
        # every field's runs of addresses (types apart: each type's storage starts at a
        # multiple of span), "who" = vertex id and field slot (a vertex's own InOut is no
        # race), and whether it writes and reads
        dtypes = list(self.g.pools)
        span = max(p.size for p in self.g.pools.values()) + 1
        f, vid, _, b, n = cat
        at = np.array([dtypes.index(fp.access.dtype) * span for _, fp, _ in fields], np.int64)
        b = b + at[f] if at.any() else b  # (one type: as they are)
        e = b + n
        w = np.array([fp.kind != "input" for _, fp, _ in fields])[f]
        r = np.array([fp.kind != "output" for _, fp, _ in fields])[f]
        o = np.argsort(b, kind="stable")  # (runs mostly in order already: timsort)
        bs = b[o]  # by begin: does a run begin before
        es = e[o]
        ws = w[o]
        if not (ws[1:] & (bs[1:] < np.maximum.accumulate(es)[:-1])  # an earlier one ends?
                | (bs[1:] < np.maximum.accumulate(np.where(ws, es, 0))[:-1])).any():
            return  # no run written meets another run
        who = vid * len(fields) + f
        order = np.flatnonzero(w)[np.argsort(b[w], kind="stable")]
        wb = b[order]
        we = e[order]
        wo = who[order]
        reach = np.maximum.accumulate(we)
        holder = np.maximum.accumulate(np.where(we == reach, np.arange(we.size), 0))
        clash = np.flatnonzero((wb[1:] < reach[:-1]) & (wo[1:] != wo[holder[:-1]]))
        if clash.size:  # two writers of one element
            i = order[clash[0] + 1]
            j = order[holder[clash[0]]]
            first, later = (i, j) if i < j else (j, i)
            self._race(cs, fields, span, b[i], who[first], who[later], "also writes", exact)
        # writes merged into disjoint runs, one writer each; then every read or in-out run
        # may only meet writes of its own vertex and field
        first = np.flatnonzero(np.concatenate(([True], wb[1:] >= reach[:-1])))
        we = reach[np.concatenate((first[1:], [wb.size])) - 1]
        wb = wb[first]
        wo = wo[first]
        lo = np.searchsorted(we, b, "right")
        hi = np.searchsorted(wb, e, "left")
        changes = np.concatenate(([0], np.cumsum(wo[1:] != wo[:-1])))
        lo_c = np.minimum(lo, wo.size - 1)
        bad = r & (hi > lo) & ((wo[lo_c] != who) | (changes[np.maximum(hi - 1, 0)]
                                                    != changes[lo_c]))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            m = int(lo[k]) + int(np.flatnonzero(wo[lo[k]:hi[k]] != who[k])[0])
            self._race(cs, fields, span, max(b[k], wb[m]), wo[m], who[k], "reads", exact)

    def _race(self, cs, fields, span, addr, writer, other, verb, exact):
        """``writer`` writes element ``addr`` (of the storage of type ``addr // span``),
        which ``other`` also writes or reads (codes: vertex id x len(fields) + field). Found
        on merged runs (not ``exact``): named as the fields' runs in order find it."""
        if not exact:
            exact = [(g, f, f.access.runs()) for g, f, _ in fields]
            self._check_races(cs, exact, _runs(exact), True)
        (w_vid, w_slot), (o_vid, o_slot) = (divmod(int(c), len(fields)) for c in (writer, other))
        pool, addr = divmod(int(addr), span)
        raise ComputeSetRaceError.race(cs, self.g.describe_vertex(w_vid), fields[w_slot][1].name,
                                       list(self.g.pools.values())[pool].describe(addr),
                                       None if w_vid == o_vid else self.g.describe_vertex(o_vid),
                                       fields[o_slot][1].name, verb)

    def _compute_step(self, cs, groups, fields, cat, like=None, kept=None) -> int:
        t = self.t
        n_tiles = t.num_tiles
        W = t.num_worker_contexts
        if like is not None:  # (an earlier compute set's step, moved: see _alike)
            index, shift = like
            self._vertex_memory(groups)
            return self._moved_step(index, shift, cs.name)
        # Vertices on a tile go round-robin to its 6 workers, a MultiVertex to all W of them
        # (r = W copies, each 1/W of its estimate); each worker issues every 6th cycle, so
        # the tile is busy W x the heaviest worker's load (loads here in 1/W cycles: exact).
        tiles, est, vids = (np.concatenate([np.zeros(0, np.intp)] + [getattr(gr, a) for gr
                            in groups]) for a in ("tiles", "estimates", "vertex_ids"))
        if all(issubclass(gr.cls, MultiVertex) for gr in groups):  # every worker: the sum
            compute = np.bincount(tiles, est, n_tiles).astype(np.int64)
        else:
            r = np.concatenate([np.zeros(0, np.intp)] + [np.full(gr.tiles.size, W if issubclass(
                gr.cls, MultiVertex) else 1) for gr in groups])
            order = np.lexsort((vids, tiles))
            r = r[order]
            st = np.repeat(tiles[order], r)
            worker = (np.arange(st.size) - np.searchsorted(st, st)) % W
            load = np.bincount(st * W + worker, np.repeat(est[order] * W // r, r), n_tiles * W)
            compute = load.reshape(n_tiles, W).max(axis=1).astype(np.int64)
        # Exchange in: a vertex's data on another tile is fetched before compute (once per
        # tile; the exchange broadcasts: a tile sends an element once, however many tiles
        # receive it). Exchange out: what it writes to another tile is sent after compute.
        sent = np.zeros(n_tiles)
        transfers = None
        results = None
        code, size, kind, runs = self._field_runs(fields, cat)
        moves = self._moves(code, kind, *runs) if runs[0].size else None
        pieces = None
        if moves is None and runs[0].size:
            pieces = self._remote_pieces(code, kind, runs)
        if moves is not None:  # (runs cut into many pieces: summed per set of readers)
            transfers, results, sent = moves
        elif pieces:
            (f, vt, start, end, et), runs = pieces  # (not all local)
            # a vertex's tile sends what it writes elsewhere (pieces of no length are on their
            # vertex's tile, see _remote_pieces)
            w = np.flatnonzero((kind != "input")[f] & (end > start))
            results = (vt[w], et[w], (end - start)[w] * size[f[w]])
            # a tile receives each element a field reads once, however many vertices read it
            # (pieces only written read nothing)
            rd = (kind != "output")[f]
            end = end if rd.all() else np.where(rd, end, start)
            if runs is not None and _disjoint(kind, n_tiles, *runs):
                once = (end - start) * size[f]  # (pieces that do not overlap: no union)
            else:  # (in the order _union_lengths sorts them)
                order, once = _union_lengths(f * n_tiles + vt, start, end)
                f, vt, start, end, et = (x[order] for x in (f, vt, start, end, et))
                once *= size[f]
            # and it sends each element read from it once (per type: the pieces' addresses are
            # in their type's storage)
            if runs is not None:
                o, first, _, cut = self._alike_cut(code, kind, *runs)
                sent = self._sent(runs[1], o, first, cut)
            else:
                order, read_from = _union_lengths(code[f], start, end)
                sent = np.bincount(et[order], read_from * size[f[order]], n_tiles)
            transfers = (et, vt, once)
        index = self._step(cs.name, "compute", sync=cost.sync_cycles(t), compute=compute,
                           transfers=transfers, tile_out=sent.astype(np.int64), results=results,
                           vertex_cycles=int(est.sum()), vertex_types=self._vertex_memory(
                               groups), tiles=tiles, tile_vertices=np.bincount(tiles,
                                                                               minlength=n_tiles))
        if kept is not None:  # (for compute sets alike to come)
            kept.append((groups, index))
        return index

    def _vertex_memory(self, groups) -> dict:
        """Vertex state and code on every tile that has vertices; the vertex types (class
        name -> instances, cycles)."""
        kinds = {}
        mem = self.memory
        n_tiles = self.t.num_tiles
        for gr in groups:
            on = np.bincount(gr.tiles, minlength=n_tiles)
            per_vertex = 4 + sum(VECTOR_FIELD_BYTES if gr.cls.fields[fp.name].vector
                                 else SCALAR_FIELD_BYTES for fp in gr.fields)
            mem["vertex state"] += on * (per_vertex + sum(v[0].nbytes for v in gr.state.values()))
            code_on = self.code_on.setdefault(gr.cls, np.zeros(n_tiles, bool))
            mem["vertex code"] += ((on > 0) & ~code_on) * CODELET_CODE_BYTES  # once per tile
            code_on |= on > 0
            inst, cyc = kinds.get(gr.cls.__name__, (0, 0))
            kinds[gr.cls.__name__] = (inst + len(gr.vertex_ids), cyc + int(gr.estimates.sum()))
        return kinds

    def _moves(self, code, kind, f, vt, b, n):
        """The exchange of a compute set whose runs are cut into many pieces (a matmul's
        operands), without a move per piece: (moves read, summed per pair of tiles; moves of
        results; bytes each tile sends), or None (few pieces, or runs one tile reads through
        one field that overlap: then :meth:`_remote_pieces`) of the runs (field, vertex
        tile, begin, length: :meth:`_field_runs`). Runs alike (type, begin, length) are cut
        once, and those read by the same tiles (a set of readers, as the tiles of one block
        of a matmul's output read one block of its operand) are summed per source tile
        before they are counted per reader: the same sums."""
        n_tiles = self.t.num_tiles
        if n.size < MOVES_RUNS or int(n.sum()) < MANY_PIECES * n.size:  # (a piece holds
            return None  # an element at least)
        rd = np.flatnonzero((kind[f] != "output") & (n > 0))
        pick = rd[::max(1, rd.size // 4096)]  # (at most 4,096 runs, evenly spaced)
        if not (rd.size and self._many_pieces(code[f[pick]], b[pick], n[pick])):
            return None
        if not _disjoint(kind, n_tiles, f, vt, b, n):
            return None
        o, first, alike, cut = self._alike_cut(code, kind, f, vt, b, n)
        readers = np.bincount(alike)
        if first.size * int(readers.max()) > 4 * o.size:
            return None  # (sets of very different sizes: their rows would be mostly padding)
        group = np.concatenate([x[1] for x in cut])  # each piece's group, tile and bytes
        tile = np.concatenate([x[4] for x in cut])
        nbytes = np.concatenate([(x[3] - x[2]) * x[0] for x in cut])
        # each group's reader tiles as a row (-1 beyond them): groups with equal rows share
        # a set of readers
        rows = np.full((first.size, int(readers.max())), -1, np.intp)
        rows[alike, np.arange(o.size) - first[alike]] = vt[o]
        sets, set_of = np.unique(rows, axis=0, return_inverse=True)
        key = set_of.reshape(-1)[group] * n_tiles + tile
        if sets.shape[0] * n_tiles <= 4 * key.size:  # (few sets: summed per (set, tile))
            sums = np.bincount(key, nbytes, sets.shape[0] * n_tiles)
            pair = np.flatnonzero(sums)
            sums = sums[pair]
        else:
            pair = unique(key)
            sums = np.bincount(np.searchsorted(pair, key), nbytes, pair.size)
        src = np.repeat(pair % n_tiles, sets.shape[1])
        dst = sets[pair // n_tiles].reshape(-1)
        moved = np.repeat(sums, sets.shape[1])
        away = (dst >= 0) & (dst != src)  # (a reader's own tile sends it nothing)
        transfers = (src[away], dst[away], moved[away].astype(np.int64))
        out = []  # what vertices write on other tiles, sent after compute
        for k, pool in enumerate(self.g.pools.values()):
            mine = np.flatnonzero((kind[f] != "input") & (code[f] == k))
            run, start, end, tile = pool.pieces(b[mine], n[mine])
            far = np.flatnonzero(tile != vt[mine][run])
            out.append((vt[mine][run][far], tile[far], (end - start)[far] * pool.dtype.itemsize))
        results = tuple(np.concatenate(x) for x in zip(*out))
        return transfers, results, self._sent(vt, o, first, cut)

    def _many_pieces(self, code, b, n) -> bool:
        """Whether runs (type, begin, length; a sample: a choice of method, not of result)
        are cut into ``MANY_PIECES`` pieces a run or more, on average."""
        count = 0
        for k, pool in enumerate(self.g.pools.values()):
            mine = np.flatnonzero(code == k)
            if mine.size:
                count += pool.pieces(b[mine], n[mine])[0].size
        return count >= MANY_PIECES * n.size

    def _field_runs(self, fields, cat) -> tuple:
        """Per field (its type's pool index, item size, kind) and the runs (field, vertex
        tile, begin, length) a compute set's vertices read and write."""
        f, _, vt, b, n = cat
        codes = [list(self.g.pools).index(fp.access.dtype) for _, fp, _ in fields]
        code = np.array(codes)
        size = np.array([fp.access.dtype.itemsize for _, fp, _ in fields])
        kind = np.array([fp.kind for _, fp, _ in fields])
        # A tile fetches once what its vertices read through one Input: a run equal to the
        # previous vertex's (a region: k runs a vertex) is left out before cutting (tut6:
        # each tile's ~100 rows read one slice of the vector; the same bytes, far fewer pieces)
        lag = np.repeat([r[0].size // len(gr.vertex_ids) if r[0].size % len(gr.vertex_ids)
                         == 0 and r[0].size else 1 for gr, _, r in fields],
                        [r[0].size for _, _, r in fields])
        prev = np.arange(f.size) - lag
        p = np.maximum(prev, 0)
        again = (prev >= 0) & (kind == "input")[f] & (f[p] == f) & (vt[p] == vt) & (b[p] == b)
        again = again & (n[p] == n)
        if again.any():
            return code, size, kind, (f[~again], vt[~again], b[~again], n[~again])
        return code, size, kind, (f, vt, b, n)

    def _remote_pieces(self, code, kind, runs):
        """The runs (field, vertex tile, begin, length: :meth:`_field_runs`) cut where the
        tile changes, keeping the pieces held on another tile than their vertex's. Returns
        per piece (field, vertex tile, start, end, the tile holding it) and, when there are
        more remote pieces than runs, the runs (see :meth:`_sent`)."""
        f, vt, b, n = runs
        codes = code.tolist()
        pieces = []  # each type's runs are cut by that type's tile mapping
        for c, pool in enumerate(self.g.pools.values()):
            if c in codes:  # (one type: every run, no selection)
                sel = slice(None) if codes.count(c) == len(codes) else np.flatnonzero(code[f] == c)
                run, start, end, tile = pool.pieces(b[sel], n[sel])
                pieces.append((f[sel][run], vt[sel][run], start, end, tile))
        f, vt, start, end, tile = pieces[0] if len(pieces) == 1 else (
            np.concatenate(x) for x in zip(*pieces))
        remote = tile != vt
        # (a matmul's operand: far more remote pieces than runs; then _compute_step checks
        # the runs for overlaps and _sent cuts runs alike once, instead of sorting the
        # pieces: the CI-size embedding's first projection, 3.1 million of 64,768 runs)
        n_remote = np.count_nonzero(remote)
        runs = runs if n_remote > runs[0].size else None
        if 2 * n_remote >= remote.size:  # mostly remote (a matmul's operands):
            end[~remote] = start[~remote]  # the others given no length (no copy of every piece)
            return (f, vt, start, end, tile), runs
        if remote.any():  # (None when every piece is on its vertex's tile)
            remote = np.flatnonzero(remote)
            return tuple(x[remote] for x in (f, vt, start, end, tile)), runs

    def _alike_cut(self, code, kind, f, vt, b, n) -> tuple:
        """The runs (field slot, vertex tile, begin, length) read, in an order that puts
        runs alike (type, begin, length) together, by tile: (that order, each group of
        runs alike's first run, each run's group) and, per type, its groups' pieces (item
        size, group, start, end, the tile holding it): runs alike are cut once."""
        rd = np.flatnonzero((kind[f] != "output") & (n > 0))
        o = rd[np.lexsort((vt[rd], n[rd], b[rd], code[f[rd]]))]
        first = firsts(code[f[o]], b[o], n[o])
        head = o[first]  # each group's first run
        cut = []
        for k, pool in enumerate(self.g.pools.values()):
            groups = np.flatnonzero(code[f[head]] == k)
            if groups.size:
                run, start, end, tile = pool.pieces(b[head[groups]], n[head[groups]])
                cut.append((pool.dtype.itemsize, groups[run], start, end, tile))
        return o, first, np.repeat(np.arange(first.size), np.diff(first, append=o.size)), cut

    def _sent(self, vt, o, first, cut) -> np.ndarray:
        """The bytes each tile sends of the runs read from it by a vertex on another tile
        (:meth:`_alike_cut`), each element once: the whole run is sent when two tiles or
        more read it (one at most holds a piece), otherwise its pieces away from its
        reader's tile."""
        sent = np.zeros(self.t.num_tiles)
        if not o.size:  # (only outputs are remote)
            return sent
        reader = vt[o[first]]
        many = reader != vt[o[np.append(first[1:], o.size) - 1]]  # (read by 2 tiles or more)
        for item, group, start, end, tile in cut:
            keep = np.flatnonzero(many[group] | (tile != reader[group]))
            order, once = _union_lengths(np.zeros(keep.size, np.int64), start[keep], end[keep])
            sent += np.bincount(tile[keep][order], once * item, self.t.num_tiles)
        return sent

    # -- memory ---------------------------------------------------------------------------
    def _memory(self, nodes) -> TileMemory:
        """Each tile's memory: always live (variables, constants, vertex state and code)
        plus, at its peak, not-always-live variables and exchange buffers
        (:mod:`ipukit.liveness`). Compile decides here whether it fits, as Poplar does; the
        liveness analysis waits for the first read of the memory where a bound (every
        variable live at once) proves that every tile fits."""
        analysis = liveness.Analysis(self.g, nodes, tuple(self.steps), Access.of, self.memory)
        mem = TileMemory(analysis.run, self.t.bytes_per_tile,
                         remote={k: b.nbytes for k, b in self.g.remote_buffers.items()})
        fits = (analysis.bound() <= self.t.bytes_per_tile).all()
        if not fits and (mem.total > self.t.bytes_per_tile).any():
            text = out_of_memory(self.g, mem, error=not self.allow_out_of_memory)
            if not self.allow_out_of_memory:
                raise OutOfMemoryError(text)
            warnings.warn(OutOfMemoryWarning(text), stacklevel=4)
        return mem


def _paired_runs(src, dst) -> list | None:
    """The pairs of regions of a copy between RegionLists of runs (1-D, stride 1) that pair
    up, none meeting another (a pipeline cycle's joined sends: each stage's output to the
    next stage's inbox): planned pair by pair and copied run by run; else None."""
    if not (isinstance(src, RegionList) and isinstance(dst, RegionList)) or len(
            src.regions) != len(dst.regions):
        return None
    pairs = list(zip(src.regions, dst.regions))
    if any(a[1:] != b[1:] or len(a[1]) != 1 or a[2] != (1,) for a, b in pairs):
        return None  # (not runs of one length each)
    spans = sorted((b, b + n) for b, (n,), _ in src.regions + dst.regions)
    if any(b < e for (_, e), (b, _) in zip(spans, spans[1:])):
        return None  # (runs that meet: planned and copied whole)
    return pairs


def _elements(t: Tensor):
    """What tells apart the elements of tensors of one shape in a copy plan's key: an index
    array by its id (the program tree holds every Tensor, and so its array, while compiling),
    a RegionList by its regions (its index array is made anew at each read)."""
    if isinstance(t, RegionList):
        return t.regions
    return id(t._idx)


def _field_access(dtype, tensors: list[Tensor], vector: bool, small: bool) -> Access:
    """One field of n vertices, shape (n, k) or (n,): a region when the vertices' regions
    step evenly through storage, otherwise a gather (an int32 index array; ``small``: every
    address of the type fits in one)."""
    n = len(tensors)
    t0 = tensors[0]
    shape = (n, t0.num_elements()) if vector else (n,)
    if t0.strides is None:  # a gather: RegionLists by their layouts, the rest by address
        idx = np.empty((n, prod(shape[1:])), np.int32 if small else np.int64)
        rows = [i for i, t in enumerate(tensors) if isinstance(t, RegionList)]
        rest = [i for i, t in enumerate(tensors) if not isinstance(t, RegionList)]
        if rows:
            idx[rows] = _region_lists([tensors[i] for i in rows], idx.dtype)
        if rest:
            idx[rest] = np.concatenate([tensors[i].idx.reshape(-1) for i in rest]).reshape(
                len(rest), idx.shape[1])
        return Access.gather(dtype, idx.reshape(shape))
    offsets = [t.offset for t in tensors]
    step = int(offsets[1] - offsets[0]) if n > 1 else 0
    if offsets == (list(range(offsets[0], offsets[0] + n * step, step)) if step
                   else [offsets[0]] * n):  # (the offsets step evenly)
        return Access(dtype, shape, int(offsets[0]), (n,) + t0.shape, (step,) + t0.strides)
    dt = np.int32 if small else np.int64
    inner = addresses(0, t0.shape, t0.strides, dt).reshape(1, -1)
    begins, lengths = runs(t0)  # every vertex's runs: t0's, moved (made when asked for:
    moved = np.array(offsets, np.int64)[:, None] - t0.offset  # 8 bytes an element kept)

    def vruns():
        return ((moved + begins).reshape(-1), np.tile(lengths, n),
                np.repeat(np.arange(n), begins.size))

    return Access.gather(dtype, (np.array(offsets, dt)[:, None] + inner).reshape(shape), vruns)


def _region_lists(lists: list, dt) -> np.ndarray:
    """The addresses of RegionLists of one length, one row each: those whose regions have
    the same shapes and strides share one pattern, moved by each one's offsets."""
    out = np.empty((len(lists), lists[0].shape[0]), dt)
    alike: dict[tuple, list[int]] = {}
    for i, t in enumerate(lists):
        alike.setdefault(tuple((shape, strides) for _, shape, strides in t.regions), []).append(i)
    for layout, rows in alike.items():
        pattern = np.concatenate([addresses(0, *r, dt).reshape(-1) for r in layout])
        offsets = np.array([[r[0] for r in lists[i].regions] for i in rows], dt)
        out[rows] = np.repeat(offsets, [prod(shape) for shape, _ in layout], axis=1) + pattern
    return out


def _runs(fields) -> tuple:
    """Every field's runs of addresses (``Access.runs``) in one list: the field's slot,
    vertex id and tile, begin and length of each."""
    return tuple(np.concatenate(x) for x in zip(*((np.full(b.size, s), gr.vertex_ids[row],
                 gr.tiles[row], b, n) for s, (gr, _, (b, n, row)) in enumerate(fields))))


def _rolled(a: np.ndarray, shift: int) -> np.ndarray:
    """``np.roll(a, shift)`` of a per-tile array (np.roll's generality costs ~8x)."""
    cut = a.size - shift % max(a.size, 1)
    return np.concatenate((a[cut:], a[:cut]))


def _span(a: Access) -> tuple[int, int]:
    """The lowest and the highest address ``a`` reaches (lowest > highest: none)."""
    if a.idx is not None:
        return (int(a.idx.min()), int(a.idx.max())) if a.idx.size else (0, -1)
    if 0 in a.rshape:
        return 0, -1
    lo = a.offset
    hi = a.offset
    for n, step in zip(a.rshape, a.rstrides):  # (a loop, not sums of min and max: ~4x)
        if step < 0:
            lo += (n - 1) * step
        else:
            hi += (n - 1) * step
    return lo, hi


def _apart(fps) -> bool:
    """Whether no field (FieldPlan) written reaches an address twice (a region stepping past
    itself) or meets another field's span of addresses: then no vertex races another."""
    spans = []  # (type, lowest, highest address, written)
    for fp in fps:
        a = fp.access
        written = fp.kind != "input"
        if written and (a.idx is not None or not steps_past(a.rshape, a.rstrides)):
            return False
        lo, hi = _span(a)
        if lo <= hi:
            spans.append((a.dtype, lo, hi, written))
    return not any(x[3] or y[3] for i, x in enumerate(spans) for y in spans[:i]
                   if x[0] == y[0] and x[1] <= y[2] and y[1] <= x[2])


def _joined(spans: list) -> list:
    """Spans (lowest, highest address) with those that meet joined, in order."""
    out = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _disjoint(kind, n_tiles: int, f, vt, b, n) -> bool:
    """Whether no two runs (field slot, vertex tile, begin, length) that one tile reads
    through one field share an address."""
    reads = np.where(kind[f] != "output", n, 0)
    _, once = _union_lengths(f * n_tiles + vt, b, b + reads)
    return int(once.sum()) == int(reads.sum())


def _union_lengths(key: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> tuple:
    """Intervals grouped by ``key``, sorted by key and begin (``order``), and how much of
    each no earlier interval of its group covers: their sum is the size of each group's
    union (in sorted order: putting them back in given order cost an argsort)."""
    span = int(ends.max(initial=0)) + 1
    b = key * span + begins  # by key, then begin (often already: no argsort, no gathers)
    order = np.argsort(b, kind="stable") if (b[1:] < b[:-1]).any() else slice(None)
    e = (key * span + ends)[order]
    b = b[order]
    covered = np.maximum.accumulate(np.concatenate(([-2**63], e[:-1])))  # the furthest end before
    return order, np.maximum(e - np.maximum(b, covered), 0)

