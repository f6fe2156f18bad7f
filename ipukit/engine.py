"""The engine (``poplar::Engine``): load a compiled graph on a device and run programs.

Tensor data lives on the backend (NumPy, or CuPy on a GPU): one flat array per element
type. Each compute set runs as one BSP superstep; all vertices of one class and field
shape run as ONE array operation (``per_vertex=True`` or the option ``"debug.perVertex"``
runs them one at a time, for debugging, with identical results); the first time a group
runs, its first and last vertex also run alone on copies, and a codelet that mixes
vertices (``x.sum()`` without ``axis=-1``) raises ``CodeletError``. The kit's own PopLibs
codelets skip that check, as their ``compute`` is marked ``poputil.vertex_separable`` and
tests/test_poputil.py proves each one separable, batched against one vertex at a time (kit
convention); every other codelet, a learner's, is checked. A group's
fields are worked out once: storage itself where a view of it has the field's shape (read
only for an Input), else a copy each run. A codelet class marked
``strided_fields = True`` (poplin's matmul, popops' Reduce) also gets a region that no
(vertices, elements) view reaches as a strided view of storage, (vertices, ...), not a
copy (kit convention). A gather whose addresses are long runs of consecutive ones (a joined
copy's sides) is read and written a slice per run. Every executed step is appended to
``engine.trace``. One ``run`` emulates at most ``"debug.maxEmulatedSteps"`` steps (default
1,000,000), checked up front for ``Repeat`` (kit convention).

>>> import sys, numpy as np, ipukit as ipu
>>> dev = ipu.IPUModel(tiles_per_ipu=1).create_device()
>>> g = ipu.Graph(dev.target)
>>> v = g.add_variable(ipu.INT, [3], "v")
>>> g.set_tile_mapping(v, 0)
>>> s = g.add_host_to_device_fifo("in", ipu.INT, 3)
>>> eng = ipu.Engine(g, ipu.Sequence(ipu.Copy(s, v), ipu.PrintTensor("v", v)))
>>> eng.load(dev)
>>> eng.connect_stream("in", np.array([4, 5, 6], np.int32))
>>> eng.set_print_tensor_stream(sys.stdout)  # Poplar prints to stderr by default
>>> eng.run(0)
v: [4 5 6]
"""


from __future__ import annotations

import numbers
import sys

import numpy as np

from . import backend
from .compile import (
    Access,
    CopyNode,
    ExecNode,
    Executable,
    IfNode,
    PrintNode,
    RemoteNode,
    RepeatNode,
    SeqNode,
    StreamNode,
    VertexGroup,
    WhileNode,
    compile_graph,
)
from .errors import CodeletError, IpuError, ProgramError, StreamError
from .graph import Graph, out_of_range
from .print_tensor import format_tensor
from .tensor import reshape_strides, steps_past
from .trace import Trace

#: Engine options accepted for Poplar compatibility; profiling is always on here.
PROFILING_OPTIONS = ("autoReport.", "debug.instrument", "debug.retainDebugInformation")
#: ipukit's own options: run vertices one at a time; "true" (default) runs an over-full
#: graph as the IPUModel does, "false" stops it; the most steps one ``run`` emulates.
OPTIONS = ("debug.perVertex", "debug.allowOutOfMemory", "debug.maxEmulatedSteps")
#: Default of ``"debug.maxEmulatedSteps"``: supersteps (compute sets, copies, stream copies)
#: one ``Engine.run`` may emulate, about 10 s at ~10 µs a step. Poplar has no such limit.
MAX_EMULATED_STEPS = 1_000_000
#: Most runs of a vertex group compared with one vertex alone while the outputs are zero.
AXIS_CHECK_RUNS = 8
#: A gather whose addresses are runs of consecutive ones at least this long on average is
#: read and written a slice per run (8192-element runs: ~10x a gather's speed), not gathered.
RUN_ELEMENTS = 1024


class Engine:
    """``poplar::Engine(graph, programs)``: compile, then ``load``, ``run``, read and write."""

    def __init__(self, graph: Graph | Executable, programs=None, options: dict | None = None,
                 *, per_vertex: bool = False, max_loop_iterations: int = 1_000_000):
        if not isinstance(options, dict | None):
            raise IpuError.bad_options(options)
        options = options or {}
        for key in options:
            if key not in OPTIONS and not key.startswith(PROFILING_OPTIONS):
                raise IpuError.unknown_option(key, OPTIONS)
        steps = options.get("debug.maxEmulatedSteps", MAX_EMULATED_STEPS)
        if isinstance(steps, bool | float) or not str(steps).isdecimal() or int(steps) < 1:
            raise IpuError.bad_max_steps(steps, MAX_EMULATED_STEPS)
        self.max_steps = int(steps)
        if not isinstance(graph, Graph | Executable):
            raise IpuError.not_a_graph(graph)
        self.executable = graph if isinstance(graph, Executable) else compile_graph(
            graph, [] if programs is None else programs, options)
        self.target = self.executable.target
        self.max_loop_iterations = max_loop_iterations
        self.per_vertex = per_vertex or str(options.get("debug.perVertex")).lower() == "true"
        self.trace = Trace(self.target, self.executable.steps, self.executable.memory)
        self.xp = None  # the backend's array module, once loaded
        self._run_start = 0
        self._streams: dict[str, list] = {}
        self._print_stream = None  # sys.stderr at the time of printing, as Poplar's default
        self._needs: dict = {}  # compiled node -> steps it emulates at least
        self._tries: dict = {}  # vertex group -> axis-checked runs (-1: done)
        self._accesses: dict[tuple, Access] = {}  # (id(tensor or access), row) -> Access
        self._run_node = {SeqNode: self._seq, ExecNode: self._execute, CopyNode: self._copy,
                          StreamNode: self._stream, RemoteNode: self._remote_copy,
                          RepeatNode: self._repeat,
                          WhileNode: self._while, IfNode: self._if, PrintNode: self._print}

    # -- device ---------------------------------------------------------------------------
    def load(self, device) -> None:
        """``Engine::load``: allocate (zeroed) tile memory on the backend, set constants."""
        if getattr(device, "target", None) != self.target:
            raise IpuError.wrong_device(self.target, device)
        g = self.executable.graph
        self.xp = xp = backend.get_xp()
        self._plans: dict = {}  # a gather's Access, or a region -> how to reach it
        self._mem = {dt: xp.zeros(p.size, dt) for dt, p in g.pools.items()}
        for dt, pool in g.pools.items():  # constants' values
            for var in (v for v in pool.variables if v.values is not None):
                self._mem[dt][var.start:var.start + var.size] = xp.asarray(var.values.reshape(-1))
        for t, value in g.initial_values:
            self._write(self._access(t), xp.asarray(value))
        # Streaming Memory: each remote buffer as (repeats, num_elements), zeroed (kit
        # convention: Poplar leaves it uninitialised)
        self._remote = {name: np.zeros((b.repeats, b.num_elements), b.dtype)
                        for name, b in g.remote_buffers.items()}
        self._specs = {}  # (vertex group, row) -> its fields and State (see _fields)

    # -- host access ----------------------------------------------------------------------
    def write_tensor(self, name: str, array) -> None:
        """``Engine::writeTensor``: copy host data into a tensor with a host write handle."""
        t = self._handle(name, "write")
        why = out_of_range(array, t.dtype)
        if why:
            raise StreamError.write_out_of_range(name, t, why)
        try:
            data = np.asarray(array, dtype=t.dtype).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise StreamError.write_unconvertible(name, t, exc) from None
        if data.size != t.num_elements():
            raise StreamError.write_size(name, t, data.size)
        self._write(self._access(t), self.xp.asarray(data))

    def read_tensor(self, name: str) -> np.ndarray:
        """``Engine::readTensor``: a NumPy copy of a tensor with a host read handle."""
        t = self._handle(name, "read")
        return backend.to_numpy(self._read(self._access(t))).copy()

    def copy_to_remote_buffer(self, data, name: str, repeat_index: int = 0) -> None:
        """``Engine::copyToRemoteBuffer(data, handle, repeatIndex)``: host data into one
        repeat of a remote buffer.

        >>> import numpy as np, ipukit as ipu
        >>> dev = ipu.IPUModel(tiles_per_ipu=1).create_device()
        >>> g = ipu.Graph(dev.target)
        >>> v = g.add_variable(ipu.FLOAT, [2], "v")
        >>> g.set_tile_mapping(v, 0)
        >>> rb = g.add_remote_buffer("rb", ipu.FLOAT, 2, repeats=3)
        >>> eng = ipu.Engine(g, ipu.Sequence(ipu.Copy(rb, v, 2), ipu.Copy(v, rb, 0)))
        >>> eng.load(dev)
        >>> eng.copy_to_remote_buffer(np.array([1.5, 2.5], np.float32), "rb", 2)
        >>> eng.run()
        >>> eng.copy_from_remote_buffer("rb", np.zeros(2, np.float32), 0)
        array([1.5, 2.5], dtype=float32)
        """
        buf = self._repeat_of(name, repeat_index, "copy_to_remote_buffer")
        data = np.asarray(data)
        if data.size != buf.num_elements:
            raise StreamError.remote_host_size("copy_to_remote_buffer", buf, data.size)
        self._remote[name][repeat_index] = data.reshape(-1)

    def copy_from_remote_buffer(self, name: str, data, repeat_index: int = 0) -> np.ndarray:
        """``Engine::copyFromRemoteBuffer(handle, data, repeatIndex)``: one repeat of a
        remote buffer into the NumPy array ``data`` (returned)."""
        buf = self._repeat_of(name, repeat_index, "copy_from_remote_buffer")
        if not isinstance(data, np.ndarray) or data.size != buf.num_elements:
            raise StreamError.remote_host_size("copy_from_remote_buffer", buf,
                                               getattr(data, "size", data))
        data.reshape(-1)[...] = self._remote[name][repeat_index]
        return data

    def _repeat_of(self, name, repeat_index, where):
        """Remote buffer ``name``, checking ``repeat_index`` is one of its repeats."""
        self._loaded()
        buf = self.executable.graph.remote_buffers.get(name)
        if buf is None:
            raise StreamError.no_remote_buffer(name, self.executable.graph.remote_buffers)
        if isinstance(repeat_index, bool) or not isinstance(repeat_index, numbers.Integral) \
                or not 0 <= repeat_index < buf.repeats:
            raise StreamError.remote_offset(buf, repeat_index, where)
        return buf

    def _loaded(self):
        if self.xp is None:
            raise IpuError.not_loaded()

    def _handle(self, name: str, verb: str):
        """The tensor of host ``verb`` ("read" or "write") handle ``name``."""
        self._loaded()
        return self._lookup(f"host_{verb}s", name, verb)

    def _lookup(self, table: str, name, verb: str | None = None):
        """``graph.<table>[name]``, or a StreamError naming what there is (``verb``: of a
        host handle)."""
        found = getattr(self.executable.graph, table)
        if name not in found:
            raise StreamError.not_found(name, found, verb)
        return found[name]

    def connect_stream(self, name: str, array: np.ndarray) -> None:
        """``Engine::connectStream``: a host buffer used as a circular buffer.

        As in Poplar, a buffer shorter than a copy, or not a multiple of it, wraps round:
        each copy takes the next ``n`` elements modulo the buffer's length. Connecting a
        stream again replaces its previous buffer or callback, as in Poplar.
        """
        stream = self._lookup("streams", name)
        if not isinstance(array, np.ndarray) or array.size == 0:
            raise StreamError.not_an_array(name, array)
        flat = array.reshape(-1)
        if stream.to_device:
            if not np.can_cast(array.dtype, stream.dtype, "same_kind") and not (
                    array.dtype.kind in "iub" and stream.dtype.kind in "iubf"):
                raise StreamError.buffer_cannot_feed(name, array, stream)
        elif not (np.shares_memory(flat, array) and array.flags.writeable):
            raise StreamError.buffer_not_writeable(name)
        elif not np.can_cast(stream.dtype, array.dtype, "same_kind"):
            raise StreamError.buffer_loses_data(name, array, stream)
        self._streams[name] = [flat, 0]

    def connect_stream_to_callback(self, name: str, callback) -> None:
        """``Engine::connectStreamToCallback``: ``callback(buffer)`` fills or consumes data."""
        self._lookup("streams", name)
        if not callable(callback):
            raise StreamError.not_callable(name, callback)
        self._streams[name] = [callback, 0]

    def set_print_tensor_stream(self, stream) -> None:
        """``Engine::setPrintTensorStream``: where PrintTensor writes (default: stderr)."""
        if not callable(getattr(stream, "write", None)):
            raise IpuError.bad_print_stream(stream)
        self._print_stream = stream

    def print_profile_summary(self, file=None) -> None:
        """``Engine::printProfileSummary``: memory and execution of every run so far."""
        self.trace.print_profile_summary(file)

    # -- running --------------------------------------------------------------------------
    def run(self, program: int = 0) -> None:
        """``Engine::run``: execute program number ``program`` (0 by default)."""
        self._loaded()
        programs = self.executable.programs
        if isinstance(program, bool) or not (isinstance(program, numbers.Integral)
                                             and 0 <= program < len(programs)):
            raise ProgramError.bad_program_index(program, len(programs))
        need = self._need(programs[program])
        if need > self.max_steps:  # up front: nothing runs
            raise ProgramError.too_many_steps(f"program {program}", need, self.max_steps)
        self.trace.num_runs += 1
        self.trace.record(0)  # the host synchronisation of this call
        self._run_start = len(self.trace)  # it is not an emulated step
        self._exec(programs[program])

    def _exec(self, node) -> None:
        self._run_node[type(node)](node)

    def _seq(self, node: SeqNode):
        run_node = self._run_node
        for child in node.children:
            run_node[type(child)](child)

    def _need(self, node) -> int:
        """The fewest steps ``node`` emulates (a loop's body counts 0 times)."""
        if node in self._needs:
            return self._needs[node]
        kind = type(node)
        if kind is RepeatNode:
            n = node.count * self._need(node.body)
        elif kind is WhileNode:
            n = self._need(node.cond)
        elif kind is IfNode:
            n = min(self._need(node.then), self._need(node.else_))
        elif kind is SeqNode:
            n = sum(map(self._need, node.children))
        else:  # a compute set, copy or stream copy is one step; a PrintTensor none
            n = int(kind is not PrintNode)
        self._needs[node] = n
        return n

    def _repeat(self, node: RepeatNode):
        need = len(self.trace) - self._run_start + node.count * self._need(node.body)
        if node.count > 1 and need > self.max_steps:  # a Repeat inside a loop
            raise ProgramError.too_many_steps(f"Repeat({node.count:,})", need, self.max_steps)
        for _ in range(node.count):
            self._exec(node.body)

    def _while(self, node: WhileNode):
        self._exec(node.cond)
        count = 0
        while self._predicate(node.predicate):
            steps = len(self.trace) - self._run_start
            if count >= self.max_loop_iterations or steps > self.max_steps:
                raise ProgramError.loop_still_true(count, steps, node.name)
            count += 1
            self._exec(node.body)
            self._exec(node.cond)

    def _if(self, node: IfNode):
        self._exec(node.then if self._predicate(node.predicate) else node.else_)

    def _predicate(self, access: Access) -> bool:
        return bool(backend.to_numpy(self._read(access)).reshape(-1)[0])

    def _print(self, node: PrintNode):
        text = format_tensor(node.title, backend.to_numpy(self._read(node.access)), node.fmt)
        print(text, file=self._print_stream or sys.stderr)

    def _copy(self, node: CopyNode):
        for src, dst in zip(node.src, node.dst):  # (runs paired, none meeting another: each)
            values = self._read(src)
            if self.xp is not np and self._plan(src)[2]:  # CuPy copies may not allow overlap
                values = values.copy()
            self._write(dst, values)
        self.trace.record(node.step)

    def _stream(self, node: StreamNode):
        s = node.stream
        if s.name not in self._streams:
            raise StreamError.not_connected(s)
        buf, pos = conn = self._streams[s.name]
        if callable(buf):
            data = np.zeros(s.n, s.dtype) if s.to_device else backend.to_numpy(
                self._read(node.access)).copy()
            try:
                buf(data)
            except Exception as exc:
                raise StreamError.callback_raised(s, exc) from exc
        else:
            ring = _ring(pos, s.n, buf.size)
            conn[1] = (pos + s.n) % buf.size  # the next copy starts here
            if s.to_device:
                data = buf[ring].astype(s.dtype, copy=False)
            else:
                buf[ring] = backend.to_numpy(self._read(node.access))
        if s.to_device:
            self._write(node.access, self.xp.asarray(data))
        self.trace.record(node.step)

    def _remote_copy(self, node: RemoteNode):
        buf = node.buffer
        offset = node.offset
        rows = [0] if offset is None else [offset] if isinstance(offset, int) else \
            backend.to_numpy(self._read(offset)).reshape(-1).tolist()
        for r in rows:
            if not 0 <= r < buf.repeats:
                raise StreamError.remote_offset(buf, r)
        store = self._remote[buf.name]
        if node.to_remote:
            values = backend.to_numpy(self._read(node.access)).reshape(len(rows), -1)
            store[rows] = values
        else:
            self._write(node.access, self.xp.asarray(store[rows].reshape(-1)))
        self.trace.record(node.step)

    def _execute(self, node: ExecNode):
        for group in node.groups:
            if self.per_vertex:
                for i in range(len(group.vertex_ids)):
                    self._run_group(group, i)
            elif self._tries.get(group) == -1 or getattr(group.cls.compute, "vertex_separable", 0):
                self._run_group(group)
            else:
                self._checked_run(group)
        self.trace.record(node.step)

    def _checked_run(self, gr: VertexGroup) -> None:
        """The first run of a group: also run its first and last vertex alone (on copies)
        and compare, which catches a codelet that mixes vertices (``x.sum()`` without
        ``axis=-1``). A run whose compared outputs are all zero (data not written yet)
        proves little, so the check repeats, up to ``AXIS_CHECK_RUNS`` runs."""
        n = len(gr.vertex_ids)
        names = [fp.name for fp in gr.fields if fp.kind != "input"] + list(gr.state)
        alone = [(i, self._run_group(gr, i, dry=True)) for i in sorted({0, n - 1})]
        batched = self._run_group(gr)
        informative = False
        for i, fields in alone:
            for name in names:
                a = backend.to_numpy(fields[name])[0]
                b = backend.to_numpy(batched[name])[i].reshape(a.shape)  # strided_fields
                informative = informative or bool(np.any(a != 0))
                if not _same(a, b):
                    vertex = self.executable.graph.describe_vertex(int(gr.vertex_ids[i]))
                    raise CodeletError.mixes_vertices(gr.cls, name, vertex, a, b, n)
        tries = self._tries.get(gr, 0) + 1
        self._tries[gr] = -1 if informative or tries >= AXIS_CHECK_RUNS else tries

    def _fields(self, gr: VertexGroup, row: int | None) -> tuple:
        """The fields of group ``gr`` (or of its vertex ``row``), worked out once: (name,
        input, access, bound) each, ``bound`` the array handed to ``compute`` on every run
        where it is storage itself (read only for an Input), else None (a copy per run,
        and an output's scattered back); and the State fields' arrays. A class marked
        ``strided_fields`` gets a region it cannot view as (vertices, elements) as
        (vertices, ...) instead of a copy, the region's first axis split if need be."""
        spec = self._specs.get((gr, row))
        if spec is None:
            fields = []
            strided = gr.cls.strided_fields
            for fp in gr.fields:
                a = fp.access if row is None else self._access(fp.access, row)
                view, idx, in_place = self._plan(a)
                inp = fp.kind == "input"
                view = backend.rows(view, a.shape[0]) if strided else view
                bound = view if in_place or view is not None and (
                    inp and view.shape == a.shape or strided and idx is None
                    and view.shape[:1] == a.shape[:1]) else None
                fields.append((fp.name, inp, a, _read_only(bound) if inp else bound))
            state = ({k: self.xp.asarray(v) for k, v in gr.state.items()} if row is None else
                     {k: v[row:row + 1] for k, v in self._fields(gr, None)[1].items()})
            spec = self._specs[gr, row] = (fields, state)
        return spec

    def _run_group(self, gr: VertexGroup, row: int | None = None, dry: bool = False) -> dict:
        """Run ``compute`` on the group (or on vertex ``row`` alone) and return its fields as
        it left them; ``dry`` works on copies and writes nothing back. Fields reach storage
        in place where they can (compile refuses compute-set races)."""
        inst = object.__new__(gr.cls)
        inst.xp = xp = self.xp
        fields = inst.__dict__
        scatter = []
        outputs = []
        inputs = []
        spec, state = self._fields(gr, row)
        for name, is_input, a, arr in spec:
            if is_input:
                arr = _read_only(self._read(a)) if arr is None else arr
                if dry and xp is not np:  # CuPy has no read-only arrays: compare values
                    arr = arr.copy()
                    inputs.append((name, arr, arr.copy()))
            else:
                if dry:
                    arr = self._read(a).copy()
                elif arr is None:  # a copy: scattered back after compute
                    arr = self._read(a)
                    scatter.append((a, arr))
                outputs.append((name, arr))
            fields[name] = arr
        for name, values in state.items():
            fields[name] = values.copy() if dry else values
        def vertex():  # the vertex named by an error (the first, running them all)
            return self.executable.graph.describe_vertex(int(gr.vertex_ids[row or 0]))

        try:
            gr.cls.compute(inst)
        except (Exception, SystemExit) as exc:
            if "read-only" in str(exc):
                names = [fp.name for fp in gr.fields if fp.kind == "input"]
                raise IpuError.wrote_input(gr.cls, names, vertex()) from exc
            n = len(gr.vertex_ids) if row is None else 1
            raise CodeletError.failed(gr.cls, exc, n) from exc
        for name, arr in outputs:
            if fields[name] is not arr:
                raise IpuError.rebound_field(gr.cls, name)
        written = [name for name, arr, orig in inputs if not xp.array_equal(arr, orig)]
        if written:
            raise IpuError.wrote_input(gr.cls, written, vertex())
        for a, arr in scatter:
            self._write(a, arr)
        return fields

    # -- memory access --------------------------------------------------------------------
    def _access(self, t, row: int | None = None) -> Access:
        """The Access of a tensor the graph holds, or of vertex ``row`` of an access (the
        per-vertex debug mode), made once and cached (see ``_plan`` for how it is reached)."""
        key = (id(t), row)
        if key not in self._accesses:
            a = self._accesses[key] = Access.of(t) if row is None else t.row(row)
            if row is not None and a.idx is not None:  # one vertex of a gather: gathered
                self._plans[a] = (None, a.idx if self.xp is np else self.xp.asarray(a.idx), False)
        return self._accesses[key]

    def _plan(self, a: Access) -> tuple:
        """How ``a`` reaches storage, worked out once per gather or region: (view, index,
        in_place). ``view`` is a slice or strided view of a region, or of a gather whose
        addresses are evenly spaced (in_place: distinct addresses in ``a``'s shape, so
        reading gives storage itself), else None; ``index`` (on the backend) gathers and
        scatters where no view does (a view with repeated addresses only reads), or is the
        list of a gather's runs (see ``_layout``): a slice of storage each."""
        plan = self._plans.get(a)  # an Access hashes by identity: the quickest look-up
        if plan is not None:
            return plan
        key = a if a.idx is not None else (a.dtype, a.offset, a.rshape, a.rstrides, a.shape)
        plan = self._plans.get(key)  # accesses of one region in one shape share a plan
        if plan is None:
            idx = None if a.idx is None else a.idx if self.xp is np else self.xp.asarray(a.idx)
            region = (a.offset, a.rshape, a.rstrides, True) if idx is None else _layout(a.idx)
            view = None
            merged = None
            if type(region) is list:  # long runs of consecutive addresses
                idx = region
            elif region is not None:
                offset, shape, strides, distinct = region
                merged = reshape_strides(shape, strides, a.shape)
                if merged is not None:
                    shape = a.shape
                    strides = merged
                view = backend.strided(self._mem[a.dtype], offset, shape, strides)
                idx = None if distinct else idx
            plan = self._plans[key] = (view, idx, merged is not None and idx is None)
        self._plans[a] = plan
        return plan

    def _read(self, a: Access):
        """``a``'s elements: storage itself where the plan is in place, else a copy."""
        view, idx, in_place = self._plan(a)
        if view is None:
            mem = self._mem[a.dtype]
            if type(idx) is list:  # runs: one slice each, joined
                return self.xp.concatenate([mem[b:e] for b, e, _ in idx]).reshape(a.shape)
            return mem.take(idx)  # (quicker than mem[idx]: lesson 10 study's runs ~18 %)
        if view.shape != a.shape:
            return view.reshape(a.shape)  # a copy: no view has this shape
        return view if in_place else view.copy()

    def _write(self, a: Access, values) -> None:
        view, idx, _ = self._plan(a)
        if type(idx) is list:  # runs: a slice of ``values`` into each
            mem = self._mem[a.dtype]
            flat = values.reshape(-1)
            # (a copy first where ``values`` is storage: a run may overwrite what a later reads)
            flat = flat.copy() if self.xp.may_share_memory(flat, mem) else flat
            for begin, end, at in idx:
                mem[begin:end] = flat[at:at + end - begin]
        elif idx is not None:
            self._mem[a.dtype][idx] = values.reshape(idx.shape)
        else:
            view[...] = values.reshape(view.shape)


def _layout(idx: np.ndarray):
    """How storage holds the addresses ``idx``, in order: a region (see ``_spacing``), else,
    where they are runs of consecutive addresses at least ``RUN_ELEMENTS`` long on average
    and none repeats, those runs as a list of (begin, end, position in ``idx``) (a slice
    each: cheaper than a gather), else None (a gather)."""
    flat = idx.reshape(-1)
    if flat.size < RUN_ELEMENTS or flat[1] - flat[0] != 1:
        return _spacing(flat)
    breaks = np.flatnonzero(flat[1:] - flat[:-1] != 1)  # where a run (not the last) ends
    region = _spacing(flat, breaks)  # (its first level: these runs)
    if region is not None or breaks.size >= flat.size // RUN_ELEMENTS:
        return region  # a region, or short runs (a gather)
    first = [0, *(breaks + 1).tolist()]
    begins = flat[first].tolist()
    ends = [b + e - f for b, f, e in zip(begins, first, [*first[1:], flat.size])]
    spans = sorted(zip(begins, ends))
    if any(b < e for (_, e), (b, _) in zip(spans, spans[1:])):
        return None  # two runs share addresses: a gather writes them in order
    return list(zip(begins, ends, first))


def _spacing(idx: np.ndarray, breaks=None):
    """(offset, shape, strides, distinct) of a region holding the addresses ``idx`` in order
    (evenly spaced in every dimension, strides >= 0), else None. Each level's first run of
    one step gives that dimension; every run of the level must then be as long. ``breaks``:
    the first level's, where known (the positions after which its step changes)."""
    shape = []
    strides = []
    starts = idx.reshape(-1)
    while 1 < starts.size and len(shape) < 8:
        step = int(starts[1]) - int(starts[0])
        if breaks is None or shape:  # (a level after the first)
            breaks = ((starts[1:] - starts[:-1]) != step).nonzero()[0]
        n = int(breaks[0]) + 1 if breaks.size else starts.size
        if step < 0 or starts.size % n or breaks.size and ((breaks + 1) % n).any():
            return None
        shape = [n, *shape]
        strides = [step, *strides]
        starts = starts[::n]
    if idx.size < 2 or starts.size > 1:
        return None
    return int(starts[0]), tuple(shape), tuple(strides), steps_past(shape, strides)


def _read_only(arr):
    """A read-only view of a NumPy ``arr`` (an Input is read-only, as in Poplar); CuPy has
    no read-only arrays (a checked run compares an Input's values instead)."""
    if type(arr) is np.ndarray:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def _ring(pos: int, n: int, size: int):
    """Positions pos, pos+1, … (n of them) in a circular buffer of ``size``: a slice when
    they do not wrap round (no index array)."""
    return slice(pos, pos + n) if pos + n <= size else (pos + np.arange(n)) % size


def _same(a, b) -> bool:
    """Equal, or for floating point close (batching may reorder sums)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape or a.dtype.kind != "f" or np.array_equal(a, b):
        return a.shape == b.shape and bool(np.array_equal(a, b))
    tol = 1e-2 if a.dtype == np.float16 else 1e-4
    with np.errstate(invalid="ignore", over="ignore"):
        scale = 1.0 + float(np.nanmax(np.abs(np.concatenate([a.ravel(), b.ravel()])),
                                      initial=0.0))
    return bool(np.allclose(a, b, rtol=tol, atol=tol * 1e-2 * min(scale, 1e30),
                            equal_nan=True))
