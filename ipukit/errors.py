"""The exception hierarchy, as Poplar names its graph and program errors, and the wording of
every error the emulator core raises.

Every error derives from :class:`IpuError`, names what is wrong (tensor, vertex, field,
tile, setting) and says how to fix it. The emulator core (``target.py`` to ``trace.py``,
``cost.py``) raises them through the constructors below, each named for what went wrong
and kept beside its class (``raise TileMappingError.unmapped_vertex(...)``), so every
message is written once, here, where it can be read and checked against Poplar's wording.

>>> import ipukit as ipu
>>> issubclass(ipu.OutOfMemoryError, ipu.IpuError)
True
>>> raise ipu.ProgramError.repeat_count(-1)
Traceback (most recent call last):
...
ipukit.errors.ProgramError: Repeat count must be a non-negative int, got -1
"""

from math import prod

import numpy as np

#: How codelets see fields, told with every CodeletError about a codelet's compute.
VERTEX_AXIS = ("every field has a leading vertex axis (scalars (n,), Vectors (n, k)): write "
               "compute for one vertex, reduce with axis=-1 (self.x.sum(axis=-1), not "
               "self.x.sum()) and write outputs with self.field[...] = value")


#: Poplar's names of ipukit's five element types (tensor.py's FLOAT, HALF, INT,
#: UNSIGNED_INT and BOOL).
TYPE_NAMES = {np.dtype(np.float32): "float", np.dtype(np.float16): "half",
              np.dtype(np.int32): "int", np.dtype(np.uint32): "unsigned int",
              np.dtype(np.bool_): "bool"}


def type_name(dtype) -> str:
    """Poplar's name of an element type: "float", "half", "int", "unsigned int", "bool"."""
    return TYPE_NAMES[np.dtype(dtype)]


def vertex_name(vid, codelet, compute_set, tile) -> str:
    """How messages name a vertex: "vertex 3 (Sum, compute set 'cs0', tile 1)"."""
    where = f"tile {tile}" if tile >= 0 else "no tile"
    return f"vertex {vid} ({codelet.__name__}, compute set '{compute_set}', {where})"


def element_name(var, local) -> str:
    """How messages name element ``local`` (flat) of variable ``var``: "element [1, 2] of
    tensor 'v'"."""
    where = _index(local, var.shape) if var.shape else [int(local)]
    return f"element {where} of tensor '{var.name}'"


def _index(flat, shape) -> list[int]:
    """Flat position ``flat`` of an array of ``shape`` as its index: [1, 2] ([] for a
    scalar)."""
    return list(map(int, np.unravel_index(int(flat), shape)))


def outside_range(value, dtype, info) -> str:
    """Why a value does not fit an integer type (``info``: its ``np.iinfo``), the reason
    given inside a larger message."""
    return (f"value {value!r} is outside the range of {type_name(dtype)} "
            f"({info.min:,}..{info.max:,})")


class IpuError(Exception):
    """Base of every ipukit error (``poplar::poplar_error``). Its constructors word the
    errors of targets, element types, tensor views, graph values and engine settings."""

    # -- targets (target.py) and the cost model (cost.py) ----------------------------------
    @classmethod
    def not_positive(cls, name, value):
        return cls(f"{name} must be a positive integer, got {value!r}")

    @classmethod
    def unknown_version(cls, version, presets):
        return cls(f"unknown IPU version {version!r}; use one of {', '.join(presets)}")

    @classmethod
    def unknown_ring(cls, kind, ring):
        return cls(f"unknown ring collective {kind!r}: use one of {sorted(ring)}")

    # -- element types and tensor views (tensor.py) ----------------------------------------
    @classmethod
    def unsupported_type(cls, dtype):
        return cls(f"unsupported element type {dtype!r}; use ipu.FLOAT, ipu.HALF, ipu.INT, "
                   "ipu.UNSIGNED_INT or ipu.BOOL")

    @classmethod
    def scalar_index(cls, t):
        return cls(f"tensor '{t.name}' is a scalar (shape ()); it has no elements to index")

    @classmethod
    def bad_index(cls, t, k):
        return cls(f"tensor '{t.name}': index {k!r} is not an int or slice; "
                   "Poplar tensors take ints and slices")

    @classmethod
    def stepped_slice(cls, t):
        return cls(f"tensor '{t.name}': slices with a step are not supported")

    @classmethod
    def slice_dim(cls, t, dim):
        return cls(f"slice of '{t.name}' (shape {t.shape}) along dimension {dim!r}: it has "
                   f"dimensions 0..{t.rank - 1}")

    @classmethod
    def slice_rank(cls, t, begin, end):
        return cls(f"slice of '{t.name}' (rank {t.rank}) needs {t.rank} begin and end "
                   f"indices, got {list(begin)} and {list(end)}")

    @classmethod
    def slice_outside(cls, t, k):
        return cls(f"slice [{k.start}, {k.stop}) of '{t.name}' is outside its shape {t.shape}")

    @classmethod
    def bad_reshape(cls, t, shape):
        return cls(f"cannot reshape '{t.name}' of shape {t.shape} ({t.num_elements()} "
                   f"elements) to {shape}")

    @classmethod
    def bad_view(cls, t, what, exc):
        """NumPy refused a view (``what``: e.g. ".transpose()") of ``t``."""
        return cls(f"'{t.name}' (shape {t.shape}){what}: {exc}")

    @classmethod
    def concat_not_iterable(cls, tensors):
        return cls(f"concat needs Tensors, a list of them, got {tensors!r}")

    @classmethod
    def concat_empty(cls):
        return cls("concat needs at least one tensor")

    @classmethod
    def concat_not_tensor(cls, t):
        return cls(f"concat needs Tensors (graph.add_variable and its views), got {t!r}")

    @classmethod
    def concat_scalar(cls):
        return cls("concat of single elements: use v[i:i + 1] (a 1-element slice) instead of "
                   "v[i], or concat along a dimension the tensors have")

    @classmethod
    def concat_shapes(cls, tensors, dim, exc):
        shapes = ", ".join(f"'{t.name}' {t.shape}" for t in tensors)
        return cls(f"concat along dim {dim} of {shapes}: {exc}")

    # -- graph data (graph.py) -------------------------------------------------------------
    @classmethod
    def bad_shape(cls, name, shape):
        return cls(f"tensor '{name}': shape {shape} must be non-negative ints")

    @classmethod
    def constant_size(cls, name, shape, got):
        return cls(f"constant '{name}' of shape {shape} needs {prod(shape)} values, got {got}")

    @classmethod
    def values_out_of_range(cls, what, why):
        return cls(f"{what}: {why}; use values that fit the tensor's type")

    @classmethod
    def bad_values(cls, what, values, dtype, shape, exc):
        return cls(f"{what}: cannot use {values!r} as {type_name(dtype)} values of shape "
                   f"{shape} ({exc})")

    @classmethod
    def not_a_tensor(cls, what, tensor):
        return cls(f"{what} needs a Tensor, got {tensor!r}")

    @classmethod
    def tensor_of_other_graph(cls, what, tensor):
        """Raised as TileMappingError by the graph, as ProgramError by compile."""
        return cls(f"{what}: tensor '{tensor.name}' belongs to another graph")

    @classmethod
    def bad_perf_estimate(cls, vertex, cycles):
        return cls(f"perf estimate of {vertex} must be a non-negative int, got {cycles!r}")

    # -- engine options and loading (compile.py, engine.py) --------------------------------
    @classmethod
    def bad_options(cls, options):
        return cls(f"Engine options must be a dict of option name to value, got {options!r}")

    @classmethod
    def unknown_option(cls, key, options):
        return cls(f"unknown engine option '{key}'; ipukit knows "
                   f"{', '.join(map(repr, options))} and ignores Poplar's profiling options")

    @classmethod
    def bad_max_steps(cls, steps, default):
        return cls(f"engine option 'debug.maxEmulatedSteps' must be a positive whole number "
                   f"(e.g. '{default}'), got {steps!r}")

    @classmethod
    def bad_allow_out_of_memory(cls, allow):
        return cls(f"engine option 'debug.allowOutOfMemory' must be \"true\" or \"false\", "
                   f"got {allow!r}")

    @classmethod
    def not_a_graph(cls, graph):
        return cls(f"Engine needs a Graph (ipu.Graph(target)) or an Executable "
                   f"(ipu.compile_graph), got {graph!r}")

    @classmethod
    def wrong_device(cls, target, device):
        return cls(f"the graph was compiled for {target} but load() got {device!r}; load it "
                   "on a device made from the same IPUModel")

    @classmethod
    def not_loaded(cls):
        return cls("the engine is not loaded; call engine.load(device) first")

    @classmethod
    def bad_print_stream(cls, stream):
        return cls(f"set_print_tensor_stream needs a file-like object with write(), got "
                   f"{stream!r}")

    # -- a codelet writing where it may not (engine.py) ------------------------------------
    @classmethod
    def wrote_input(cls, codelet, names, vertex):
        return cls(f"{codelet.__name__}.compute wrote into an Input field ({', '.join(names)}) "
                   f"of {vertex}; declare the field ipu.InOut to update it in place")

    @classmethod
    def rebound_field(cls, codelet, name):
        return cls(f"{codelet.__name__}.compute rebound self.{name}; write into the field with "
                   f"self.{name}[...] = value instead of self.{name} = value")


class GraphConnectionError(IpuError):
    """A vertex field is unconnected, or connected to a tensor of the wrong shape/type."""

    # -- vertices, fields and tensors of one type (tensor.py, graph.py) --------------------
    @classmethod
    def concat_types(cls, t, first):
        return cls(f"concat: '{t.name}' is {type_name(t.dtype)} but '{first.name}' is "
                   f"{type_name(first.dtype)}; concatenate tensors of one type and graph")

    @classmethod
    def not_a_compute_set(cls, cs):
        return cls(f"add_vertex needs a ComputeSet of this graph (graph.add_compute_set), "
                   f"got {cs!r}")

    @classmethod
    def not_a_codelet(cls, vertex_class):
        return cls(f"add_vertex needs a subclass of ipu.Vertex, got {vertex_class!r}")

    @classmethod
    def not_a_vertex(cls, what, ref):
        return cls(f"{what} needs a vertex (from graph.add_vertex), got {ref!r}")

    @classmethod
    def vertex_of_other_graph(cls, what):
        return cls(f"{what}: the vertex belongs to another graph")

    @classmethod
    def not_a_field(cls, field_ref):
        return cls(f"connect needs a vertex field, v['name'], got {field_ref!r}")

    @classmethod
    def no_field(cls, what, codelet, field):
        return cls(f"{what}: {codelet.__name__} has no field '{field}'; its fields are "
                   f"{', '.join(codelet.fields) or 'none'}")

    # -- connect (graph.py) and unconnected fields (compile.py) ----------------------------
    @classmethod
    def connect_state(cls, name, vertex):
        return cls(f"field '{name}' of {vertex} is State; set it with graph.set_initial_value")

    @classmethod
    def connect_non_tensor(cls, name, vertex, tensor):
        return cls(f"field '{name}' of {vertex} must be connected to a Tensor, got {tensor!r}")

    @classmethod
    def connect_type(cls, name, vertex, field, tensor):
        return cls(f"field '{name}' of {vertex} is {field!r} but tensor '{tensor.name}' is "
                   f"{type_name(tensor.dtype)}; connect a tensor of type "
                   f"{type_name(field.dtype)} (popops.cast converts)")

    @classmethod
    def connect_scalar(cls, name, vertex, tensor):
        return cls(f"field '{name}' of {vertex} is a scalar but tensor '{tensor.name}' has "
                   f"shape {tensor.shape} ({tensor.num_elements()} elements); connect one "
                   f"element, e.g. {tensor.name}[i], or declare the field as ipu.Vector")

    @classmethod
    def connected_twice(cls, name, vertex):
        return cls(f"field '{name}' of {vertex} is already connected; Poplar allows one edge "
                   "per field (a second is a poplar::graph_connection_error when the Engine is "
                   "built); ipukit refuses it at connect (kit convention): connect it to one "
                   "tensor (concat views to join several)")

    @classmethod
    def unconnected(cls, name, field, vertex):
        return cls(f"field '{name}' ({field!r}) of {vertex} is not connected; connect a tensor "
                   f"with graph.connect(v['{name}'], tensor)")

    # -- State fields (graph.py, compile.py) -----------------------------------------------
    @classmethod
    def initial_value_target(cls, target):
        return cls(f"set_initial_value takes a vertex field (v['name']) or a tensor, "
                   f"got {target!r}")

    @classmethod
    def not_state(cls, ref, vertex, field):
        """``set_initial_value(ref, ...)`` of a field that is not State."""
        return cls(f"field '{ref.field}' of {vertex} is {field.kind}, not State; connect a "
                   "tensor to it with graph.connect")

    @classmethod
    def state_shape(cls, ref, vertex, field, value):
        want = "a 1-D array" if field.vector else "one value"
        return cls(f"State field '{ref.field}' of {vertex} needs {want}, got shape {value.shape}")

    @classmethod
    def state_unset(cls, name, vertex):
        return cls(f"State field '{name}' of {vertex} is a Vector with no value; set it with "
                   "graph.set_initial_value")


class TileMappingError(IpuError):
    """A tensor or vertex is not mapped to a tile, or a tile index is out of range."""

    @classmethod
    def tile_out_of_range(cls, tile, what, target):
        n = target.num_tiles
        return cls(f"tile {tile!r} for {what} is out of range: this target has {n} tiles "
                   f"(0..{n - 1}, {target.num_ipus} IPU(s) x {target.tiles_per_ipu} tiles). "
                   "Map it to a tile in that range.")

    @classmethod
    def incomplete(cls, t, missing, first):
        """``get_tile_mapping`` of a tensor with ``missing`` unmapped elements, the first at
        flat position ``first``."""
        return cls(f"get_tile_mapping: tensor '{t.name}' has {missing} unmapped elements "
                   f"(first: {_index(first, t.shape)}); map them with graph.set_tile_mapping, "
                   "or pass throw_on_incomplete=False for the mapping of the mapped ones")

    @classmethod
    def unmapped(cls, var, missing, first):
        """Compiling a graph whose variable ``var`` has ``missing`` unmapped elements, the
        first at flat position ``first``."""
        return cls(f"tensor '{var.name}' has {missing} unmapped elements (first: "
                   f"{_index(first, var.shape)}); map every element with graph.set_tile_mapping "
                   "(or poputil.map_tensor_linearly) before compiling")

    @classmethod
    def unmapped_vertex(cls, vertex):
        return cls(f"{vertex} is not mapped to a tile; call graph.set_tile_mapping(vertex, "
                   "tile)")


class ComputeSetRaceError(IpuError):
    """Two vertices of one compute set write, or write and read, the same elements.

    Poplar refuses these when the Engine is built (``poplar::graph_cycle_error``, e.g. "Field
    V.f writes to elements [0:4) of variable 'v' that are written to elsewhere in same
    compute set"). ipukit also refuses one vertex that reads and writes an element through
    two different fields (kit convention: an ``InOut`` field, which reads and writes in
    place, is one field).
    """

    @classmethod
    def race(cls, cs, writer, field, element, other, other_field, verb):
        """``writer``'s ``field`` writes ``element``, which ``other``'s ``other_field``
        also writes or reads (``verb``); ``other`` None: the writer's own other field."""
        other = (f"its own field '{other_field}' {verb} (kit convention: Poplar checks "
                 "between vertices)") if other is None else f"{other} field '{other_field}' {verb}"
        return cls(
            f"race in compute set '{cs.name}': {writer} field '{field}' writes {element}, which "
            f"{other}. Vertices of one compute set run in parallel, in no promised order; "
            "Poplar's graph compiler refuses this when the Engine is built "
            "(poplar::graph_cycle_error: '... written to elsewhere in same compute set'). "
            "Fix: write to separate tensors, or put the two vertices in different compute "
            "sets executed one after the other (an InOut field reads and writes in place).")


class OutOfMemoryError(IpuError):
    """Data and code do not fit in the memory of one or more tiles (or an IPU)."""

    @classmethod
    def tensor_too_big(cls, name, dtype, shape, need, t):
        """A tensor larger than all tiles together (the over-full tiles of a compiled
        graph are worded by :mod:`ipukit.memory_report`)."""
        return cls(
            f"Out of memory: tensor '{name}' ({type_name(dtype)} {list(shape)}) needs "
            f"{need:,} bytes but all {t.num_tiles:,} tiles of the {t.version} target hold "
            f"{t.num_tiles * t.bytes_per_tile:,} bytes ({t.bytes_per_tile:,} per tile); "
            "nothing was allocated. Fix: use a smaller tensor or split it across more IPUs "
            "(ipu.IPUModel(num_ipus=...)).")


class OutOfMemoryWarning(UserWarning):
    """The graph does not fit, but the IPUModel runs on (``debug.allowOutOfMemory``)."""


class StreamError(IpuError):
    """A host stream or host read/write handle is missing, unconnected or the wrong size."""

    # -- making streams and handles (graph.py) ---------------------------------------------
    @classmethod
    def stream_exists(cls, name):
        return cls(f"a stream named '{name}' already exists; use another name")

    @classmethod
    def stream_size(cls, name, n):
        return cls(f"stream '{name}' needs a positive element count, got {n!r}")

    @classmethod
    def remote_buffer_size(cls, name, what, n):
        return cls(f"add_remote_buffer('{name}'): {what} must be a positive int, got {n!r}")

    @classmethod
    def handle_exists(cls, verb, name, old, tensor):
        return cls(f"a host {verb} handle '{name}' already exists (for tensor '{old.name}'); "
                   f"give '{tensor.name}' another handle name")

    # -- copies to and from streams (program.py, compile.py) -------------------------------
    @classmethod
    def copy_from_device_to_host(cls, src):
        return cls(f"Copy from stream '{src.name}': it is a device-to-host FIFO, so it can only "
                   "be a destination: Copy(tensor, stream)")

    @classmethod
    def copy_to_host_to_device(cls, dst):
        return cls(f"Copy to stream '{dst.name}': it is a host-to-device FIFO, so it can only "
                   "be a source: Copy(stream, tensor)")

    @classmethod
    def stream_of_other_graph(cls, stream):
        return cls(f"stream '{stream.name}' was not created by this graph")

    @classmethod
    def stream_copy_size(cls, stream, tensor):
        return cls(f"Copy between stream '{stream.name}' ({type_name(stream.dtype)}, "
                   f"{stream.n} elements) and tensor '{tensor.name}' "
                   f"({type_name(tensor.dtype)}, {tensor.num_elements()} elements): they must "
                   "have the same type and size")

    @classmethod
    def remote_copy_mismatch(cls, buf, tensor, rows):
        need = buf.num_elements * rows
        per = f"{rows} offsets x {buf.num_elements} = " if rows > 1 else ""
        return cls(f"Copy between remote buffer '{buf.name}' ({type_name(buf.dtype)}, "
                   f"{buf.num_elements} elements a repeat) and tensor '{tensor.name}' "
                   f"({type_name(tensor.dtype)}, {tensor.num_elements()} elements): the tensor "
                   f"must be {type_name(buf.dtype)} with {per}{need} elements (one "
                   "repeat per offset); reshape or slice the tensor, or make the buffer "
                   "match it")

    @classmethod
    def remote_offset(cls, buf, offset, where="Copy"):
        return cls(f"{where}: offset {offset} is out of range for remote buffer '{buf.name}', "
                   f"which has {buf.repeats} repeats (offsets 0 to {buf.repeats - 1}); use a "
                   "smaller offset or add the buffer with more repeats")

    @classmethod
    def remote_offset_type(cls, buf, offset):
        what = (f"tensor '{offset.name}' ({type_name(offset.dtype)}, "
                f"{offset.num_elements()} elements)" if hasattr(offset, "num_elements")
                else repr(offset))
        return cls(f"Copy with remote buffer '{buf.name}': the offset must be an integer "
                   f"tensor of 1 or more elements (one repeat index each), or an int, got "
                   f"{what}")

    @classmethod
    def remote_buffer_of_other_graph(cls, buf):
        return cls(f"remote buffer '{buf.name}' was not created by this graph")

    @classmethod
    def no_remote_buffer(cls, name, found):
        return cls(f"no remote buffer named '{name}' (remote buffers: "
                   f"{', '.join(found) or 'none'}); add one with graph.add_remote_buffer("
                   f"'{name}', dtype, num_elements, repeats) before compiling")

    @classmethod
    def remote_host_size(cls, verb, buf, size):
        return cls(f"{verb}('{buf.name}'): one repeat of the remote buffer holds "
                   f"{buf.num_elements} elements of {type_name(buf.dtype)} but the host "
                   f"array has {size}; pass an array of exactly that size")

    # -- the engine's host access (engine.py) ----------------------------------------------
    @classmethod
    def not_found(cls, name, found, verb=None):
        """No stream ``name`` or, given ``verb`` ("read", "write"), no host handle."""
        have = ", ".join(found) or "none"
        if verb is None:
            return cls(f"no stream named '{name}' (streams: {have})")
        return cls(f"no host {verb} handle '{name}' (handles: {have}); create one with "
                   f"graph.create_host_{verb}('{name}', tensor) before compiling")

    @classmethod
    def write_out_of_range(cls, name, t, why):
        return cls(f"write_tensor('{name}'): for tensor '{t.name}', {why}")

    @classmethod
    def write_unconvertible(cls, name, t, exc):
        return cls(f"write_tensor('{name}'): cannot convert the data to {t.dtype} for tensor "
                   f"'{t.name}' ({exc})")

    @classmethod
    def write_size(cls, name, t, size):
        return cls(f"write_tensor('{name}'): tensor '{t.name}' has {t.num_elements()} "
                   f"elements but the data has {size}")

    @classmethod
    def not_an_array(cls, name, array):
        return cls(f"connect_stream('{name}') needs a non-empty NumPy array, got "
                   f"{type(array).__name__}")

    @classmethod
    def buffer_cannot_feed(cls, name, array, stream):
        return cls(f"connect_stream('{name}'): a {array.dtype} buffer cannot feed a stream of "
                   f"{stream.dtype}")

    @classmethod
    def buffer_not_writeable(cls, name):
        return cls(f"connect_stream('{name}'): the buffer of a device-to-host stream must be "
                   "a writeable, contiguous array")

    @classmethod
    def buffer_loses_data(cls, name, array, stream):
        return cls(f"connect_stream('{name}'): a device-to-host stream of "
                   f"{type_name(stream.dtype)} cannot be written into a {array.dtype} buffer "
                   f"without losing data; use a {stream.dtype} buffer")

    @classmethod
    def not_callable(cls, name, callback):
        return cls(f"connect_stream_to_callback('{name}'): the callback of stream '{name}' "
                   "must be callable (a function taking the buffer), got "
                   f"{type(callback).__name__}; connect_stream takes arrays")

    @classmethod
    def not_connected(cls, s):
        return cls(f"stream '{s.name}' is not connected; call "
                   f"engine.connect_stream('{s.name}', array) before run")

    @classmethod
    def callback_raised(cls, s, exc):
        return cls(f"the callback of stream '{s.name}' raised {type(exc).__name__}: {exc}")


class ProgramError(IpuError):
    """A program is malformed: a copy between tensors of different sizes, a bad predicate."""

    # -- building programs (program.py) ----------------------------------------------------
    @classmethod
    def not_a_program(cls, where, p):
        return cls(f"{where} expects a program (Sequence, Execute, Copy, ...), got {p!r}")

    @classmethod
    def execute_needs_compute_set(cls, cs):
        return cls(f"Execute expects a ComputeSet, got {cs!r}")

    @classmethod
    def copy_side(cls, what, t):
        return cls(f"Copy {what} must be a Tensor, a stream or a remote buffer, got {t!r}")

    @classmethod
    def stream_to_stream(cls, src, dst):
        return cls(f"Copy from '{src.name}' to '{dst.name}' (streams or remote buffers): one "
                   "side must be a tensor")

    @classmethod
    def copy_offset_without_buffer(cls, offset):
        return cls(f"Copy got an offset ({offset!r}) but neither side is a remote buffer; "
                   "an offset picks a remote buffer's repeat: Copy(tensor, buffer, offset)")

    @classmethod
    def repeat_count(cls, count):
        return cls(f"Repeat count must be a non-negative int, got {count!r}")

    @classmethod
    def print_needs_tensor(cls, tensor):
        return cls(f"PrintTensor expects a Tensor, got {tensor!r}")

    @classmethod
    def print_fmt(cls, fmt):
        return cls(f"PrintTensor: fmt must be an ipu.PrintTensorFmt, got {fmt!r}")

    @classmethod
    def bad_predicate(cls, where, t):
        name, shape = getattr(t, "name", None), getattr(t, "shape", None)  # a Tensor's
        got = f"{name} of shape {shape}" if isinstance(name, str) and shape is not None \
            else repr(t)
        return cls(f"{where} predicate must be a one-element tensor, got {got}")

    # -- compiling programs (compile.py) ---------------------------------------------------
    @classmethod
    def cannot_compile(cls, p):
        return cls(f"cannot compile program {p!r}")

    @classmethod
    def compute_set_of_other_graph(cls, cs):
        return cls(f"Execute({cs!r}): the compute set is from another graph")

    @classmethod
    def copy_mismatch(cls, src, dst):
        return cls(f"Copy from '{src.name}' ({type_name(src.dtype)} {src.shape}) to "
                   f"'{dst.name}' ({type_name(dst.dtype)} {dst.shape}): source and "
                   "destination need the same type and number of elements")

    @classmethod
    def copy_aliased(cls, dst):
        return cls(f"Copy destination '{dst.name}' has aliased elements (it names some element "
                   "twice, e.g. a broadcast view); copy to a tensor whose elements are distinct")

    # -- running programs (engine.py) ------------------------------------------------------
    @classmethod
    def bad_program_index(cls, program, n):
        return cls(f"run({program!r}): the engine has {n} program(s), numbered 0..{n - 1}")

    @classmethod
    def too_many_steps(cls, what, need, max_steps):
        """One run emulates at most ``debug.maxEmulatedSteps`` steps (kit convention)."""
        return cls(f"{what} would emulate {need:,} steps (compute sets, copies and stream "
                   f"copies) in one run; Poplar runs it, but the emulator stops at "
                   f"{max_steps:,} (about 10 us a step). Use a smaller count, or allow it "
                   f"with Engine(..., options={{'debug.maxEmulatedSteps': '{need}'}})")

    @classmethod
    def loop_still_true(cls, count, steps, name):
        return cls(f"RepeatWhileTrue ran {count:,} iterations ({steps:,} emulated steps) and "
                   f"predicate '{name}' is still true; check that the condition program "
                   "updates it, or allow more with Engine(..., max_loop_iterations=...) or "
                   "Engine(..., options={'debug.maxEmulatedSteps': ...})")


class PipelineConfigError(IpuError):
    """A pipeline setting is invalid (gradient accumulation count, stages, device mapping)."""


class PipelineConfigTypeError(PipelineConfigError, TypeError):
    """A pipeline setting of the wrong type (TensorFlow raises ``TypeError`` for these)."""


class CodeletError(IpuError):
    """A codelet's ``compute`` fails or gives different results batched and one vertex alone."""

    @classmethod
    def failed(cls, codelet, exc, n):
        return cls(f"{codelet.__name__}.compute failed ({type(exc).__name__}: {exc}) while "
                   f"running {n} vertices at once; {VERTEX_AXIS}")

    @classmethod
    def multivertex_estimate(cls, codelet):
        return cls(f"{codelet.__name__}.cycle_estimate must take (sizes, workers): a "
                   "MultiVertex's estimate is the tile's busy time with its work split over "
                   "the target's workers (compile passes Target.num_worker_contexts); write "
                   "def cycle_estimate(cls, sizes, workers=6)")

    @classmethod
    def mixes_vertices(cls, codelet, name, vertex, a, b, n):
        """Field ``name`` of ``vertex`` is ``a`` run alone, ``b`` run with its group of n."""
        return cls(f"{codelet.__name__}.compute gives field '{name}' of {vertex} the value {a} "
                   f"when the vertex runs alone but {b} when it runs with the {n - 1} other "
                   f"vertices of its group: compute mixes vertices; {VERTEX_AXIS}")
