"""Variable liveness: which variables hold memory at each point of the programs, and so the
memory of every tile (IPU Programmer's Guide, "Variable liveness"; PopVision's liveness
report).

Poplar splits memory into *always-live* (an exclusive region for the whole execution, such
as vertex code) and *not-always-live*: "two variables that are not live at the same time can
be allocated to the same location" (PopVision glossary). It finds liveness "using the
standard algorithm" on whole variables: a variable is live from a write to the last read of
that value; it is killed only where one compute set writes all of its elements (Poplar API,
``program::WriteUndef``). A tile's memory is its always-live bytes plus the peak, over the
program points, of its live not-always-live bytes.

Always live here: constants, vertex code and state, variables with a host read or write
handle, and variables live where a program starts (read before they are written: their
value comes from an earlier ``Engine.run`` call). The kit's choices (kit convention): a
variable that no program reads or writes is always live; a program point is a step (a
compute set, a copy, a stream copy) or a read of a predicate or of a ``PrintTensor``; a
variable occupies its memory at a point where it is live before or after it or is written
by it; a compute set's exchange buffers (its remote inputs, and its outputs bound for other
tiles) are live during its step only; a tile's peak holds exactly the bytes live there (no
gaps between allocations).

>>> import ipukit as ipu
>>> t = ipu.IPUModel(tiles_per_ipu=1).create_device().target
>>> g = ipu.Graph(t)
>>> a, b, c = (g.add_variable(ipu.FLOAT, [100], n) for n in "abc")
>>> for v in (a, b, c):
...     g.set_tile_mapping(v, 0)
>>> g.create_host_write("a", a); g.create_host_read("c", c)
>>> mem = ipu.compile_graph(g, [ipu.Sequence(ipu.Copy(a, b), ipu.Copy(b, c))]).memory
>>> [int(mem.categories[k][0]) for k in ("variables", "not-always-live variables")]
[800, 400]
>>> mem.liveness.ranges("b")  # program points 0 (Copy a -> b) to 1 (Copy b -> c)
[(0, 1)]
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from .tensor import steps_past, unique


@dataclass(frozen=True, eq=False)
class Liveness:
    """What :func:`analyse` found, for the liveness report and the memory report.

    ``labels`` names every program point, in program order, and ``steps`` gives the step
    each runs (-1: a read of a predicate or a PrintTensor). ``names`` and ``nbytes`` are the
    not-always-live variables, ``runs`` their live ranges (rows: variable, first point, last
    point) and ``tiles`` their bytes on each tile (rows: variable, tile, bytes). ``buffers``
    are the exchange buffers at each point (bytes, all tiles); ``peak`` is the point where
    each tile's not-always-live memory peaks (-1: it holds none); ``always`` names the
    always-live variables, with why.
    """

    labels: tuple
    steps: np.ndarray
    names: tuple
    nbytes: np.ndarray
    runs: np.ndarray
    tiles: np.ndarray
    buffers: np.ndarray
    peak: np.ndarray
    always: dict

    def ranges(self, name: str) -> list[tuple[int, int]]:
        """The (first, last) program points where variable ``name`` is live."""
        v = self.names.index(name)
        return [(first, last) for w, first, last in self.runs.tolist() if w == v]

    def bytes_of(self, tile: int | None = None) -> np.ndarray:
        """Each not-always-live variable's bytes (all tiles, or on ``tile``)."""
        if tile is None:
            return self.nbytes
        on = self.tiles[self.tiles[:, 1] == tile]
        return np.bincount(on[:, 0], on[:, 2], len(self.names)).astype(np.int64)

    def live_bytes(self, tile: int | None = None) -> np.ndarray:
        """Bytes of not-always-live variables live at each point (all tiles, or ``tile``)."""
        nbytes = self.bytes_of(tile)
        change = np.zeros(len(self.labels) + 1)
        np.add.at(change, self.runs[:, 1], nbytes[self.runs[:, 0]])
        np.add.at(change, self.runs[:, 2] + 1, -nbytes[self.runs[:, 0]])
        return np.cumsum(change)[:-1].astype(np.int64)


class Analysis:
    """The liveness of ``graph``'s variables over the compiled ``programs`` (their nodes,
    :mod:`ipukit.compile`) and ``steps``; ``access_of`` gives a tensor's elements
    (``compile.Access.of``: passed in, as compile imports this module), ``vertex`` the
    bytes of vertex state and of vertex code on each tile. What it needs of the graph (its
    variables, their tile mapping, the host handles) is read when it is made; :meth:`run`
    may come later (compile defers it where :meth:`bound` fits every tile)."""

    def __init__(self, graph, programs, steps, access_of, vertex: dict):
        self.programs = programs
        self.steps = steps
        self.vertex = vertex
        self.n = graph.target.num_tiles
        self.pools = [p for p in graph.pools.values() if p.variables]
        # per type: its pool's index and where each of its variables starts (array, list)
        self.starts = {p.dtype: (k, np.asarray(p.starts), p.starts[:])
                       for k, p in enumerate(self.pools)}
        self.vars = [v for p in self.pools for v in p.variables]
        self.first = np.cumsum([0] + [len(p.variables) for p in self.pools])  # per pool
        self.size = np.array([v.size for v in self.vars], np.int64)
        self.on = self._bytes_on_tiles(graph)
        self.cut = np.searchsorted(self.on[:, 0], np.arange(len(self.vars) + 1))
        self.handles = {}  # the variables of host handles, with why they are always live
        for verb, handles in (("host write", graph.host_writes),
                              ("host read", graph.host_reads)):
            for t in handles.values():
                for v in self._touch(access_of(t)).tolist():
                    self.handles.setdefault(v, f"{verb} handle")
        self.effects = {}  # id(node) -> (reads, writes, kills)
        self.points = []  # (step, label) of each point, found backwards
        self.occupied = []  # the variables each point holds

    def bound(self) -> np.ndarray:
        """Each tile's bytes if all its variables were live at once, with vertex state and
        code and the largest exchange buffers of any step: never less than its memory."""
        most = np.zeros(self.n, np.int64)
        for step in self.steps:
            np.maximum(most, exchange_buffers(step), out=most)
        on = np.bincount(self.on[:, 1], self.on[:, 2], self.n).astype(np.int64)
        return on + sum(self.vertex.values()) + most

    def _bytes_on_tiles(self, graph) -> np.ndarray:
        """Rows (variable, tile, bytes), by variable then tile, for every variable (read
        from its type's step function: no piece of a variable is copied)."""
        columns = ([], [], [])  # variable, tile, bytes
        for v, var in enumerate(self.vars):
            if var.size:
                cuts, tiles = graph.pools[var.dtype].steps(var.start, var.start + var.size - 1)
                edges = np.concatenate(([var.start], cuts, [var.start + var.size]))
                on = np.bincount(tiles, edges[1:] - edges[:-1], self.n)
                held = np.flatnonzero(on)
                columns[0].append(np.full(held.size, v))
                columns[1].append(held)
                columns[2].append(on[held] * var.dtype.itemsize)
        return np.stack([np.concatenate(c + [np.zeros(0, np.intp)]) for c in columns],
                        axis=1).astype(np.intp)

    # -- what a node reads and writes ------------------------------------------------------
    def _touch(self, access, written: np.ndarray | None = None) -> np.ndarray:
        """The variables ``access`` reaches; adds the elements it writes to ``written``."""
        k, starts, listed = self.starts[access.dtype]
        if access.idx is not None and not access.idx.size:
            return np.zeros(0, np.intp)
        if access.idx is not None:
            lo = int(access.idx.min())
            hi = int(access.idx.max())
        else:
            reach = [(n - 1) * s for n, s in zip(access.rshape, access.rstrides)]
            lo = access.offset + sum(r for r in reach if r < 0)
            hi = access.offset + sum(r for r in reach if r > 0)
        if lo > hi or 0 in access.shape:
            return np.zeros(0, np.intp)
        v_lo = bisect.bisect_right(listed, lo) - 1
        if v_lo == bisect.bisect_right(listed, hi) - 1:
            if written is not None:  # (most accesses: one variable, no addresses needed)
                written[self.first[k] + v_lo] += _count(access)
            return np.array([self.first[k] + v_lo], np.intp)
        if access.idx is not None:  # addresses (a concatenation): each one's variable
            var = self.first[k] + np.searchsorted(starts, access.idx.reshape(-1), "right") - 1
            count = np.bincount(var, minlength=len(self.vars))
            if written is not None:
                written += count
            return np.flatnonzero(count)
        # cut the addresses where a run begins or ends and where a variable starts, and
        # count the runs over each piece
        begins, lengths, _ = access.runs(merged=True)
        ends = begins + lengths
        cuts = np.union1d(np.concatenate([begins, ends]), starts[(starts > lo) & (starts <= hi)])
        opened = np.bincount(np.searchsorted(cuts, begins).astype(np.intp), minlength=cuts.size)
        closed = np.bincount(np.searchsorted(cuts, ends).astype(np.intp), minlength=cuts.size)
        cover = np.cumsum(opened - closed)[:-1]
        var = (self.first[k] + np.searchsorted(starts, cuts[:-1], "right") - 1).astype(np.intp)
        if written is not None:
            written += np.bincount(var, cover * np.diff(cuts), written.size).astype(np.int64)
        return unique(var[cover > 0])

    def _effects(self, node) -> tuple:
        """(reads, writes, kills) of a compiled node, arrays of variables: it kills those it
        writes all of."""
        if id(node) not in self.effects:
            written = np.zeros(len(self.vars), np.int64)
            reads = [np.zeros(0, np.intp)]
            writes = [np.zeros(0, np.intp)]
            for kind, access in _accesses(node):
                if kind != "output":
                    reads.append(self._touch(access))
                if kind != "input":
                    writes.append(self._touch(access, written))
            kills = np.flatnonzero(written >= self.size)
            self.effects[id(node)] = (np.concatenate(reads), np.concatenate(writes), kills)
        return self.effects[id(node)]

    # -- the backward pass over the program tree -------------------------------------------
    def _live(self, node, out: np.ndarray, record: bool) -> np.ndarray:
        """The variables live before ``node``, given those live after it (``out``); records
        each point's occupied variables where ``record``. A loop is passed twice: first to
        find what its start needs (which flows back to its end), then with that added
        (liveness is gen/kill, so a second pass reaches the fixed point)."""
        kind = type(node).__name__
        if kind == "SeqNode":
            for child in reversed(node.children):
                out = self._live(child, out, record)
            return out
        if kind == "RepeatNode":
            back = self._live(node.body, out, False)
            return self._live(node.body, out | back, record)
        if kind == "WhileNode":  # cond, its predicate, then the body (back to cond) or out
            back = self._while(node, np.zeros_like(out), out, False)
            return self._while(node, back, out, record)
        if kind == "IfNode":  # (points are found backwards: the else branch first)
            after = self._live(node.else_, out, record)
            after = after | self._live(node.then, out, record)
            return self._point(node, after, record, "If")
        if kind == "PrintNode":
            return self._point(node, out, record, f"PrintTensor {node.title}")
        return self._point(node, out, record, self.steps[node.step].name)

    def _while(self, node, back, out, record) -> np.ndarray:
        after = self._live(node.body, back, record) | out
        after = self._point(node, after, record, f"RepeatWhileTrue '{node.name}'")
        return self._live(node.cond, after, record)

    def _point(self, node, out, record, label) -> np.ndarray:
        reads, writes, kills = self._effects(node)
        live = out.copy()
        live[kills] = False
        live[reads] = True
        if record:
            self.points.append((getattr(node, "step", -1), label))
            occupied = live | out
            occupied[writes] = True
            self.occupied.append(occupied)
        return live

    # -- memory ----------------------------------------------------------------------------
    def _always(self) -> dict:
        """Each always-live variable (not a constant), with why; records every program's
        points (their order: :attr:`order`)."""
        why = dict(self.handles)
        self.order = []
        for p in self.programs:
            before = len(self.points)
            entry = self._live(p, np.zeros(len(self.vars), bool), True)
            self.order += range(len(self.points) - 1, before - 1, -1)
            for v in np.flatnonzero(entry).tolist():
                why.setdefault(v, "live where a program starts")
        touched = np.zeros(len(self.vars), bool)
        for reads, writes, _ in self.effects.values():
            touched[reads] = True
            touched[writes] = True
        for v in np.flatnonzero(~touched).tolist():
            why.setdefault(v, "no program reads or writes it")
        return {v: w for v, w in why.items() if self.vars[v].values is None}

    def run(self) -> tuple[dict, Liveness]:
        """Per tile the bytes of always-live variables, of constants, of vertex state and
        code and, at the tile's peak, of not-always-live variables and of exchange buffers;
        and the :class:`Liveness`."""
        n = self.n
        always = self._always()
        constant = np.array([v.values is not None for v in self.vars], bool)
        fixed = np.zeros(len(self.vars), bool)
        fixed[list(always)] = True
        nal = np.flatnonzero(~fixed & ~constant)
        occupied = np.zeros((len(self.order), nal.size), bool)
        for row, i in enumerate(self.order):
            occupied[row] = self.occupied[i][nal]
        # live ranges: where a variable's column turns on, and off after its last point
        edges = np.diff(np.pad(occupied.astype(np.int8), ((1, 1), (0, 0))), axis=0).T
        var, first = np.nonzero(edges == 1)
        last = np.nonzero(edges == -1)[1] - 1
        runs = np.stack([var, first, last], axis=1).astype(np.intp)
        rows = [self.on[self.cut[v]:self.cut[v + 1]] for v in nal.tolist()]
        tiles = np.concatenate(rows + [np.zeros((0, 3), np.intp)])
        tiles[:, 0] = np.repeat(np.arange(nal.size), [len(r) for r in rows])
        steps = np.array([self.points[i][0] for i in self.order], np.intp)
        peak, at_vars, at_buffers, buffers = self._peaks(runs, tiles, steps, nal.size)
        tile = self.on[:, 1]
        nbytes = self.on[:, 2]
        categories = {
            "variables": np.bincount(tile, nbytes * fixed[self.on[:, 0]], n).astype(np.int64),
            "constants": np.bincount(tile, nbytes * constant[self.on[:, 0]], n).astype(np.int64),
            **self.vertex,
            "not-always-live variables": at_vars,
            "exchange buffers": at_buffers,
        }
        item = np.array([v.dtype.itemsize for v in self.vars], np.int64)
        live = Liveness(labels=tuple(self.points[i][1] for i in self.order), steps=steps,
                        names=tuple(self.vars[v].name for v in nal.tolist()),
                        nbytes=self.size[nal] * item[nal], runs=runs, tiles=tiles,
                        buffers=buffers, peak=peak,
                        always={self.vars[v].name: w for v, w in always.items()})
        return categories, live

    def _peaks(self, runs, tiles, steps, n_vars) -> tuple:
        """Sweep the points in order, adding a variable's bytes on each tile where its live
        range starts and taking them away after it ends; a compute step adds its exchange
        buffers while it runs. Returns each tile's peak point and its bytes of variables and
        of buffers there, and the buffers (all tiles) at each point."""
        n = self.n
        cut = np.searchsorted(tiles[:, 0], np.arange(n_vars + 1))
        running = np.zeros(n, np.int64)
        best = np.zeros(n, np.int64)
        peak = np.full(n, -1, np.intp)
        at_vars = np.zeros(n, np.int64)
        at_buffers = np.zeros(n, np.int64)
        buffers = np.zeros(steps.size, np.int64)
        starts = runs[np.argsort(runs[:, 1], kind="stable")].tolist()
        ends = runs[np.argsort(runs[:, 2], kind="stable")].tolist()
        i = 0
        j = 0
        for p, s in enumerate(steps.tolist()):
            while i < len(starts) and starts[i][1] == p:
                on = tiles[cut[starts[i][0]]:cut[starts[i][0] + 1]]
                running[on[:, 1]] += on[:, 2]
                i += 1
            buf = exchange_buffers(self.steps[s]) if s >= 0 else np.zeros(n, np.int64)
            better = running + buf > best
            best[better] = running[better] + buf[better]
            peak[better] = p
            at_vars[better] = running[better]
            at_buffers[better] = buf[better]
            buffers[p] = buf.sum()
            while j < len(ends) and ends[j][2] == p:
                on = tiles[cut[ends[j][0]]:cut[ends[j][0] + 1]]
                running[on[:, 1]] -= on[:, 2]
                j += 1
        return peak, at_vars, at_buffers, buffers


def _count(access) -> int:
    """How many elements a write through ``access`` reaches (each once: no two vertices of
    a compute set write one element, a Copy's destination has no repeated address)."""
    if access.idx is not None:
        return int(access.idx.size)
    if steps_past(access.rshape, access.rstrides):
        return int(np.prod(access.shape))
    return int(access.runs(merged=True)[1].sum())


def exchange_buffers(step) -> np.ndarray:
    """A step's exchange buffers per tile: for a compute set, the remote inputs its tiles
    receive and the results they send to other tiles; none for other steps."""
    if step.kind != "compute":
        return np.zeros_like(step.tile_bytes_in)
    return step.phase_bytes("exchange")[0] + step.phase_bytes("exchange out")[1]


def _accesses(node) -> list:
    """(field kind, Access) of everything a compiled node reads or writes."""
    kind = type(node).__name__
    if kind == "ExecNode":
        return [(fp.kind, fp.access) for gr in node.groups for fp in gr.fields]
    if kind == "CopyNode":  # (runs paired: each run)
        return [("input", a) for a in node.src] + [("output", a) for a in node.dst]
    if kind == "StreamNode":
        return [("output" if node.stream.to_device else "input", node.access)]
    if kind == "RemoteNode":  # (an int offset reads nothing)
        offset = [("input", node.offset)] if hasattr(node.offset, "dtype") else []
        return [("input" if node.to_remote else "output", node.access)] + offset
    if kind in ("WhileNode", "IfNode"):
        return [("input", node.predicate)]
    return [("input", node.access)]  # PrintNode

