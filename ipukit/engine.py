"""The engine (``poplar::Engine``): load a compiled graph on a device and run programs.

Tensor data lives on the backend (NumPy, or CuPy on a GPU): one flat array per element
type. Each compute set runs as one BSP superstep; all vertices of one class and field
shape run as ONE array operation (``per_vertex=True`` runs them one at a time, for
debugging, with identical results). Every executed step is appended to ``engine.trace``.

>>> import numpy as np, ipukit as ipu
>>> dev = ipu.IPUModel(tiles_per_ipu=1).create_device()
>>> g = ipu.Graph(dev.target)
>>> v = g.add_variable(ipu.INT, [3], "v")
>>> g.set_tile_mapping(v, 0)
>>> s = g.add_host_to_device_fifo("in", ipu.INT, 3)
>>> eng = ipu.Engine(g, ipu.Sequence(ipu.Copy(s, v), ipu.PrintTensor("v", v)))
>>> eng.load(dev)
>>> eng.connect_stream("in", np.array([4, 5, 6], np.int32))
>>> eng.run(0)
v: [4 5 6]
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import backend
from .compile import (
    Access,
    CopyNode,
    ExecNode,
    Executable,
    IfNode,
    PrintNode,
    RepeatNode,
    SeqNode,
    StreamNode,
    VertexGroup,
    WhileNode,
    compile_graph,
)
from .errors import IpuError, ProgramError, StreamError
from .graph import Graph
from .tensor import contiguous
from .trace import Trace

#: Engine options accepted for Poplar compatibility; profiling is always on here.
PROFILING_OPTIONS = ("autoReport.", "debug.instrument", "debug.retainDebugInformation")


class Engine:
    """``poplar::Engine(graph, programs)``: compile, then ``load``, ``run``, read and write."""

    def __init__(self, graph: Graph | Executable, programs=None, options: dict | None = None,
                 *, per_vertex: bool = False, max_loop_iterations: int = 1_000_000):
        for key in options or {}:
            if key != "debug.perVertex" and not key.startswith(PROFILING_OPTIONS):
                raise IpuError(f"unknown engine option '{key}'; ipukit knows "
                               "'debug.perVertex' and ignores Poplar's profiling options")
        if str((options or {}).get("debug.perVertex", "false")).lower() == "true":
            per_vertex = True
        if isinstance(graph, Executable):
            self.executable = graph
        else:
            self.executable = compile_graph(graph, [] if programs is None else programs)
        self.target = self.executable.target
        self.per_vertex, self.max_loop_iterations = per_vertex, max_loop_iterations
        self.trace = Trace(self.target, self.executable.steps, self.executable.memory)
        self.xp = None
        self._streams: dict[str, list] = {}
        self._run_node = {SeqNode: self._seq, ExecNode: self._execute, CopyNode: self._copy,
                          StreamNode: self._stream, RepeatNode: self._repeat,
                          WhileNode: self._while, IfNode: self._if, PrintNode: self._print}

    # -- device ---------------------------------------------------------------------------
    def load(self, device) -> None:
        """``Engine::load``: allocate (zeroed) tile memory on the backend, set constants."""
        target = getattr(device, "target", None)
        if target != self.target:
            raise IpuError(f"the graph was compiled for {self.target} but load() got "
                           f"{device!r}; load it on a device made from the same IPUModel")
        g = self.executable.graph
        self.xp = xp = backend.get_xp()
        self._dev: dict[int, object] = {}
        self._rows: dict[tuple, Access] = {}
        self._mem = {dt: xp.zeros(p.size, dt) for dt, p in g.pools.items()}
        for dt, pool in g.pools.items():
            for var in pool.variables:
                if var.values is not None:
                    self._mem[dt][var.start:var.start + var.size] = xp.asarray(
                        var.values.reshape(-1))
        for t, value in g.initial_values:
            self._write(Access.of(t), xp.asarray(value))
        self._state = {}

    def _loaded(self):
        if self.xp is None:
            raise IpuError("the engine is not loaded; call engine.load(device) first")

    # -- host access ----------------------------------------------------------------------
    def write_tensor(self, name: str, array) -> None:
        """``Engine::writeTensor``: copy host data into a tensor with a host write handle."""
        t = self._handle(name, self.executable.graph.host_writes, "write",
                         "create_host_write")
        try:
            data = np.asarray(array, dtype=t.dtype).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise StreamError(f"write_tensor('{name}'): cannot convert the data to "
                              f"{t.dtype} for tensor '{t.name}' ({exc})") from None
        if data.size != t.num_elements():
            raise StreamError(f"write_tensor('{name}'): tensor '{t.name}' has "
                              f"{t.num_elements()} elements but the data has {data.size}")
        self._write(Access.of(t), self.xp.asarray(data))

    def read_tensor(self, name: str) -> np.ndarray:
        """``Engine::readTensor``: a NumPy copy of a tensor with a host read handle."""
        t = self._handle(name, self.executable.graph.host_reads, "read", "create_host_read")
        return backend.to_numpy(self._read(Access.of(t))).copy()

    def _handle(self, name, handles, verb, how):
        self._loaded()
        if name not in handles:
            raise StreamError(
                f"no host {verb} handle '{name}' (handles: {', '.join(handles) or 'none'}); "
                f"create one with graph.{how}('{name}', tensor) before compiling"
            )
        return handles[name]

    def connect_stream(self, name: str, array: np.ndarray) -> None:
        """``Engine::connectStream``: a host buffer used as a circular buffer."""
        stream = self._stream_named(name)
        if not isinstance(array, np.ndarray) or array.size == 0:
            raise StreamError(f"connect_stream('{name}') needs a non-empty NumPy array, "
                              f"got {type(array).__name__}")
        flat = array.reshape(-1)
        if not stream.to_device and not (np.shares_memory(flat, array)
                                         and array.flags.writeable):
            raise StreamError(f"connect_stream('{name}'): the buffer of a device-to-host "
                              "stream must be a writeable, contiguous array")
        if not np.can_cast(array.dtype, stream.dtype, "same_kind") and not (
                array.dtype.kind in "iub" and stream.dtype.kind in "iubf"):
            raise StreamError(f"connect_stream('{name}'): a {array.dtype} buffer cannot feed "
                              f"a stream of {stream.dtype}")
        self._streams[name] = [flat, 0]

    def connect_stream_to_callback(self, name: str, callback) -> None:
        """``Engine::connectStreamToCallback``: ``callback(buffer)`` fills or consumes data."""
        self._stream_named(name)
        self._streams[name] = [callback, 0]

    def _stream_named(self, name):
        streams = self.executable.graph.streams
        if name not in streams:
            raise StreamError(f"no stream named '{name}' (streams: "
                              f"{', '.join(streams) or 'none'})")
        return streams[name]

    # -- running --------------------------------------------------------------------------
    def run(self, program: int = 0) -> None:
        """``Engine::run``: execute program number ``program`` (0 by default)."""
        self._loaded()
        programs = self.executable.programs
        if isinstance(program, bool) or not (isinstance(program, numbers.Integral)
                                             and 0 <= program < len(programs)):
            raise ProgramError(f"run({program!r}): the engine has {len(programs)} program(s), "
                               f"numbered 0..{len(programs) - 1}")
        self.trace.num_runs += 1
        self.trace.record(0)  # the host synchronisation of this call
        self._exec(programs[program])

    def print_profile_summary(self, file=None) -> None:
        """``Engine::printProfileSummary``: memory and execution of every run so far."""
        self.trace.print_profile_summary(file)

    def _exec(self, node) -> None:
        self._run_node[type(node)](node)

    def _seq(self, node: SeqNode):
        for child in node.children:
            self._exec(child)

    def _repeat(self, node: RepeatNode):
        for _ in range(node.count):
            self._exec(node.body)

    def _while(self, node: WhileNode):
        self._exec(node.cond)
        count = 0
        while self._predicate(node.predicate):
            count += 1
            if count > self.max_loop_iterations:
                raise ProgramError(
                    f"RepeatWhileTrue ran {self.max_loop_iterations:,} iterations and "
                    f"predicate '{node.name}' is still true; check that the condition program "
                    "updates it (or raise max_loop_iterations in Engine(...))"
                )
            self._exec(node.body)
            self._exec(node.cond)

    def _if(self, node: IfNode):
        self._exec(node.then if self._predicate(node.predicate) else node.else_)

    def _predicate(self, access: Access) -> bool:
        return bool(backend.to_numpy(self._read(access)).reshape(-1)[0])

    def _print(self, node: PrintNode):
        print(format_tensor(node.title, backend.to_numpy(self._read(node.access))))

    def _copy(self, node: CopyNode):
        values = self._read(node.src)
        if node.src.view and self.xp is not np:  # CuPy copies may not allow overlap
            values = values.copy()
        self._write(node.dst, values)
        self.trace.record(node.step)

    def _stream(self, node: StreamNode):
        s = node.stream
        if s.name not in self._streams:
            raise StreamError(f"stream '{s.name}' is not connected; call "
                              f"engine.connect_stream('{s.name}', array) before run")
        conn = self._streams[s.name]
        buf, pos = conn
        if s.to_device:
            if callable(buf):
                data = np.zeros(s.n, s.dtype)
                buf(data)
            else:
                data = buf[_ring(pos, s.n, buf.size)].astype(s.dtype, copy=False)
            self._write(node.access, self.xp.asarray(data))
        else:
            data = backend.to_numpy(self._read(node.access))
            if callable(buf):
                buf(data.copy())
            else:
                buf[_ring(pos, s.n, buf.size)] = data
        if not callable(buf):
            conn[1] = (pos + s.n) % buf.size
        self.trace.record(node.step)

    def _execute(self, node: ExecNode):
        for group in node.groups:
            if self.per_vertex:
                for i in range(len(group.vertex_ids)):
                    self._run_group(group, slice(i, i + 1))
            else:
                self._run_group(group, None)
        self.trace.record(node.step)

    def _run_group(self, gr: VertexGroup, rows: slice | None) -> None:
        inst = object.__new__(gr.cls)
        inst.xp = self.xp
        fields, scatter = inst.__dict__, []
        for fp in gr.fields:
            a = fp.access
            if rows is not None:  # debug mode: one vertex's elements (planned once)
                key = (id(a), rows.start)
                if key not in self._rows:
                    self._rows[key] = a.row(rows.start)
                a = self._rows[key]
            arr = self._read(a)
            if fp.kind != "input" and not a.view:
                scatter.append((fp.name, a, arr))
            elif fp.kind == "input" and isinstance(arr, np.ndarray):
                arr = arr.view()
                arr.flags.writeable = False  # an Input is read-only, as in Poplar
            fields[fp.name] = arr
        state = self._state.get(id(gr))
        if state is None:
            state = self._state[id(gr)] = {k: self.xp.asarray(v) for k, v in gr.state.items()}
        for name, values in state.items():
            fields[name] = values if rows is None else values[rows]
        outputs = {fp.name: fields[fp.name] for fp in gr.fields if fp.kind != "input"}
        try:
            gr.cls.compute(inst)
        except Exception as exc:
            if "read-only" in str(exc):
                raise IpuError(f"{gr.cls.__name__}.compute wrote into an Input field; declare "
                               "the field ipu.InOut to update it in place") from exc
            raise IpuError(
                f"{gr.cls.__name__}.compute failed ({type(exc).__name__}: {exc}) while "
                f"running {len(gr.vertex_ids) if rows is None else 1} vertices at once; "
                "fields have a leading vertex axis (scalars (n,), Vectors (n, k)): reduce "
                "with axis=-1 and write outputs with self.field[...] = value"
            ) from exc
        for name, arr in outputs.items():
            if fields[name] is not arr:
                raise IpuError(
                    f"{gr.cls.__name__}.compute rebound self.{name}; write into the field "
                    f"with self.{name}[...] = value instead of self.{name} = value"
                )
        for _, a, arr in scatter:
            self._write(a, arr)

    # -- memory access --------------------------------------------------------------------
    def _device(self, idx: np.ndarray):
        if self.xp is np:
            return idx
        key = id(idx)
        if key not in self._dev:
            self._dev[key] = (idx, self.xp.asarray(idx))  # keep idx alive: ids stay unique
        return self._dev[key][1]

    def _region(self, a: Access):
        """A view of storage (nothing copied): a slice where the region is contiguous."""
        pool = self._mem[a.dtype]
        size = math.prod(a.rshape)
        if contiguous(a.rshape, a.rstrides):
            return pool[a.offset:a.offset + size].reshape(a.rshape)
        return self.xp.lib.stride_tricks.as_strided(
            pool[a.offset:], a.rshape, tuple(st * pool.itemsize for st in a.rstrides))

    def _read(self, a: Access):
        if a.idx is not None:
            return self._mem[a.dtype][self._device(a.idx)]
        region = self._region(a)
        return region if a.view else region.reshape(a.shape)

    def _write(self, a: Access, values) -> None:
        if a.idx is not None:
            self._mem[a.dtype][self._device(a.idx)] = values.reshape(a.idx.shape)
        else:
            self._region(a)[...] = values.reshape(a.rshape)


def _ring(pos: int, n: int, size: int):
    """Positions pos, pos+1, … (n of them) in a circular buffer of ``size``: a slice when
    they do not wrap round (no index array)."""
    return slice(pos, pos + n) if pos + n <= size else (pos + np.arange(n)) % size


def format_tensor(title: str, values: np.ndarray) -> str:
    """Poplar's PrintTensor text: ``v: [1.0000000 2.0000000]``; 2-D one row per line."""

    def item(x):
        if values.dtype.kind == "f":
            return f"{x:.7f}"
        return str(int(x))

    def block(a, indent):
        if a.ndim == 1:
            return " " * indent + "[" + " ".join(item(x) for x in a) + "]"
        inner = "\n".join(block(row, indent + 2) for row in a)
        return " " * indent + "[\n" + inner + "\n" + " " * indent + "]"

    if values.ndim == 0:
        return f"{title}: {item(values)}"
    return f"{title}: {block(values, 0).lstrip()}"
