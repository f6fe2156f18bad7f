"""The host and the IPU: infeed and outfeed queues, on-device loops, dataset benchmarking.

TensorFlow-for-IPU's ``IPUInfeedQueue``, ``IPUOutfeedQueue`` (``IPUOutfeedMode`` ALL and
LAST), ``loops.repeat`` and ``dataset_benchmark``, for explicit Poplar-style graphs:

* ``infeed.bind(graph)`` adds one host-to-device FIFO and one device tensor per
  component of a dataset element; ``infeed.dequeue()`` is the program that copies the
  next batch into those tensors.
* ``outfeed.enqueue(tensors)`` adds device-to-host FIFOs and returns the program that
  sends the tensors' values to the host.
* ``queue.connect(engine)`` feeds the FIFOs through ``Engine.connect_stream_to_callback``.
* ``loops.repeat(n, body, inputs, infeed)`` calls ``body(*inputs, *element)`` once to
  build one iteration's program and returns an on-device ``ipu.Repeat(n, …)`` of it.

Why it matters: every ``Engine.run`` call pays a host synchronisation, ``H =
target.host_sync_cycles`` (``cost.HOST_SYNC_SECONDS``, about 10 µs). A step of ``B``
cycles run N times from Python costs ``N (H + B)``; ``Repeat(N, step)`` in one call costs
``H + N B``. Stream copies are steps of kind "stream" in the Trace, with ``host_bytes``.

>>> import numpy as np, ipukit as ipu
>>> from ipukit import host
>>> class AddSum(ipu.Vertex):
...     x = ipu.Input(ipu.Vector(ipu.FLOAT))
...     total = ipu.InOut(ipu.FLOAT)
...     def compute(self):
...         self.total[...] += self.x.sum(axis=-1)
>>> dev = ipu.IPUModel(tiles_per_ipu=2).create_device()
>>> g = ipu.Graph(dev.target)
>>> total = g.add_variable(ipu.FLOAT, [1], "total")
>>> g.set_tile_mapping(total, 0)
>>> infeed = host.InfeedQueue(np.arange(12, dtype=np.float32), batch_size=4)
>>> outfeed = host.OutfeedQueue()
>>> x = infeed.bind(g, tile=0)                  # a float tensor of shape (4,)
>>> def body(total, x):                         # builds ONE iteration's program
...     cs = g.add_compute_set("accumulate")
...     g.add_vertex(cs, AddSum, {"x": x, "total": total[0]}, tile=0)
...     return ipu.Sequence(ipu.Execute(cs), outfeed.enqueue(total))
>>> eng = ipu.Engine(g, host.loops.repeat(3, body, [total], infeed))
>>> eng.load(dev); infeed.connect(eng); outfeed.connect(eng)
>>> eng.run()
>>> outfeed.dequeue()[:, 0]                     # running totals after each batch
array([ 6., 28., 66.], dtype=float32)
"""

from __future__ import annotations

import functools
import itertools
import json
import numbers
import threading
import time
import types
from dataclasses import dataclass
from enum import Enum

import numpy as np

from . import cost
from .errors import IpuError, ProgramError, StreamError
from .program import Copy, Program, Repeat, Sequence
from .target import Target
from .tensor import TYPE_NAMES, Tensor

__all__ = ["DatasetBenchmark", "InfeedQueue", "OutfeedMode", "OutfeedQueue",
           "benchmark_dataset", "loops", "simulated_throughput"]


# -- element structure: one array, a tuple of arrays, or a dict of arrays ------------------
def _keys(element):
    """None for one array (a list counts as array data), else tuple indices or dict keys."""
    if isinstance(element, dict):
        return tuple(element)
    if isinstance(element, tuple):
        return tuple(range(len(element)))
    return None


def _components(element, keys) -> tuple:
    return (element,) if keys is None else tuple(element[k] for k in keys)


def _pack(keys, components):
    if keys is None:
        return components[0]
    if keys and isinstance(keys[0], str):
        return dict(zip(keys, components))
    return tuple(components)


def _stream_names(name: str, keys) -> list[str]:
    return [name] if keys is None else [f"{name}/{k}" for k in keys]


def _free_names(graph, names: list[str], kind: str) -> list[str]:
    taken = [n for n in names if n in graph.streams]
    if taken:
        raise StreamError(f"the graph already has a stream named '{taken[0]}'; give this "
                          f"{kind} another name ({kind}(..., name='...'))")
    return names


def _to_array(value) -> np.ndarray:
    """NumPy data keeps its type; Python numbers become int32 / float32, as in TensorFlow."""
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    a = np.asarray(value)
    if a.dtype == np.int64 and a.size and np.abs(a).max() < 2**31:
        return a.astype(np.int32)
    if a.dtype == np.float64:
        return a.astype(np.float32)
    return a


def _check_type(a: np.ndarray, what: str) -> None:
    if a.dtype not in TYPE_NAMES:
        raise IpuError(
            f"{what} has type {a.dtype}, which the IPU does not have; convert the dataset to "
            "float32, float16, int32, uint32 or bool first (e.g. a.astype(np.float32))"
        )


def _remainder_message(n: int, batch_size: int) -> str:
    r = n % batch_size
    return (f"the dataset has {n} elements, which batch_size {batch_size} does not divide "
            f"({n} = {n // batch_size} x {batch_size} + {r}): an IPU program needs every "
            f"batch to have the same shape. Pass drop_remainder=True to drop the last {r} "
            f"element(s), or use a batch size that divides {n}")


# -- infeed ----------------------------------------------------------------------------------
class InfeedQueue:
    """``IPUInfeedQueue``: feeds a dataset to the device through host-to-device FIFOs.

    ``dataset`` is a NumPy array, or a tuple or dict of arrays with equal first axes (their
    slices are the elements, as ``tf.data.Dataset.from_tensor_slices``), or any other
    Python iterable of elements (each an array, a number or a list, or a tuple or dict of
    those; Python numbers become int32 or float32, as in TensorFlow). With
    ``batch_size`` consecutive elements are stacked into batches; a short last batch is
    an error unless ``drop_remainder=True`` drops it. ``repeat=True`` starts a new pass
    when the data run out (``Dataset.repeat()``). One device element is one batch.
    """

    def __init__(self, dataset, batch_size: int | None = None, drop_remainder: bool = False,
                 repeat: bool = False, name: str = "infeed"):
        if batch_size is not None and not (isinstance(batch_size, numbers.Integral)
                                           and not isinstance(batch_size, bool)
                                           and batch_size >= 1):
            raise IpuError(f"infeed '{name}': batch_size must be a positive int or None, "
                           f"got {batch_size!r}")
        self.name, self.batch_size = name, None if batch_size is None else int(batch_size)
        self.drop_remainder, self.repeat = drop_remainder, repeat
        self._dataset, self._arrays, self._keys = dataset, None, None
        length = None
        values = dataset.values() if isinstance(dataset, dict) else dataset
        if isinstance(dataset, np.ndarray) or (
                isinstance(dataset, tuple | dict) and dataset
                and all(isinstance(a, np.ndarray) for a in values)):
            self._keys = _keys(dataset)
            self._arrays = _components(dataset, self._keys)
            lengths = {a.shape[0] if a.ndim else None for a in self._arrays}
            if len(lengths) != 1 or None in lengths:
                raise IpuError(f"infeed '{name}': the dataset's arrays need one common first "
                               f"axis (the elements), got shapes "
                               f"{[a.shape for a in self._arrays]}")
            length = lengths.pop()
        elif isinstance(dataset, dict) or not hasattr(dataset, "__iter__"):
            raise IpuError(f"infeed '{name}' needs a NumPy array, a tuple or dict of arrays "
                           f"or an iterable of elements, got {type(dataset).__name__}")
        elif hasattr(dataset, "__len__"):
            length = len(dataset)
        if repeat and self._arrays is None and iter(dataset) is dataset:
            raise IpuError(f"infeed '{name}': repeat=True needs a dataset that can be read "
                           "again (NumPy arrays, a list); an iterator or generator is read once")
        if length is not None and batch_size is not None:
            if length % batch_size and not drop_remainder:
                raise IpuError(f"infeed '{name}': " + _remainder_message(length, batch_size))
            if length < batch_size:
                raise IpuError(f"infeed '{name}': the dataset has {length} elements, fewer "
                               f"than one batch of {batch_size}")
        #: how many elements (batches) the device has dequeued so far
        self.num_dequeued = 0
        self.tensors = None
        self._graph, self._flat, self._program = None, (), None
        self._iterator, self._current = None, ()

    # -- reading the dataset on the host ---------------------------------------------------
    def _element(self, element, index: int) -> tuple:
        keys = _keys(element)
        if index == 0 and self._keys is None:
            self._keys = keys
        if keys != self._keys:
            raise IpuError(f"element {index} of infeed '{self.name}' has components {keys}, "
                           f"but the first element had {self._keys}; every element needs "
                           "the same structure")
        return tuple(_to_array(c) for c in _components(element, keys))

    def _one_pass(self):
        """Batches (tuples of arrays, one per component) of one pass over the dataset."""
        bs = self.batch_size
        if self._arrays is not None:
            step = bs or 1
            for i in range(0, self._arrays[0].shape[0] - step + 1, step):
                yield tuple(a[i:i + bs] if bs else a[i] for a in self._arrays)
            return
        batch, count = [], 0
        for element in self._dataset:
            parts = self._element(element, count)
            count += 1
            if bs is None:
                yield parts
                continue
            batch.append(parts)
            if len(batch) == bs:
                yield self._stack(batch, count - bs)
                batch = []
        if batch and not self.drop_remainder:
            raise IpuError(f"infeed '{self.name}': " + _remainder_message(count, bs))

    def _stack(self, batch: list, first: int) -> tuple:
        try:
            return tuple(np.stack(c) for c in zip(*batch))
        except ValueError:
            shapes = [[a.shape for a in parts] for parts in batch]
            raise IpuError(f"elements {first}..{first + len(batch) - 1} of infeed "
                           f"'{self.name}' cannot form one batch: their shapes differ "
                           f"({shapes}); every element needs the same shape") from None

    def _batches(self):
        """All batches the infeed delivers: one pass, or passes forever with ``repeat``."""
        while True:
            empty = True
            for b in self._one_pass():
                empty = False
                yield b
            if empty or not self.repeat:
                return

    def _next(self) -> tuple:
        if self._iterator is None:
            self._iterator = self._batches()
        try:
            return next(self._iterator)
        except StopIteration:
            raise StreamError(
                f"infeed '{self.name}' ran out of data after {self.num_dequeued} batch(es): "
                "the program dequeues more elements than the dataset holds. Run fewer "
                "iterations, or pass repeat=True to start a new pass over the data"
            ) from None

    # -- the device side -------------------------------------------------------------------
    def bind(self, graph, tile: int | None = None):
        """Add a FIFO and a tensor per component to ``graph``; returns the tensor(s).

        The tensors are mapped to ``tile``, or spread in contiguous runs over all tiles
        (as ``poputil::mapTensorLinearly``); remap them with ``graph.set_tile_mapping``.
        The result has the element's structure: a Tensor, a tuple or a dict of Tensors.
        """
        if self._graph is not None:
            if graph is not self._graph:
                raise IpuError(f"infeed '{self.name}' is already bound to another graph; "
                               "make one InfeedQueue per graph")
            return self.tensors
        first = self._next()
        self._iterator = itertools.chain([first], self._iterator)  # peeked, not consumed
        names = _free_names(graph, _stream_names(self.name, self._keys), "InfeedQueue")
        for sname, a in zip(names, first):
            _check_type(a, f"component '{sname}' of infeed '{self.name}'")
            if a.size == 0:
                raise IpuError(f"component '{sname}' of infeed '{self.name}' is empty "
                               f"(shape {a.shape})")
        tensors, copies = [], []
        for sname, a in zip(names, first):
            stream = graph.add_host_to_device_fifo(sname, a.dtype, a.size)
            t = graph.add_variable(a.dtype, a.shape, sname)
            _map(graph, t, tile)
            tensors.append(t)
            copies.append(Copy(stream, t))
        self._graph, self._flat = graph, tuple(tensors)
        self._program = Sequence(*copies)
        self.tensors = _pack(self._keys, self._flat)
        return self.tensors

    def dequeue(self) -> Program:
        """The program that copies the next element (batch) from the host into the tensors."""
        if self._program is None:
            raise IpuError(f"infeed '{self.name}' is not bound to a graph; call "
                           "infeed.bind(graph) first (loops.repeat binds it for you)")
        return self._program

    def connect(self, engine) -> None:
        """Feed this infeed's FIFOs in ``engine`` (``Engine.connect_stream_to_callback``)."""
        self.dequeue()
        for k, sname in enumerate(_stream_names(self.name, self._keys)):
            engine.connect_stream_to_callback(sname, functools.partial(self._fill, k))

    def _fill(self, k: int, buffer: np.ndarray) -> None:
        if k == 0:
            self._current = self._next()
            self.num_dequeued += 1
        a, t = self._current[k], self._flat[k]
        if a.shape != t.shape or a.dtype != t.dtype:
            raise StreamError(
                f"batch {self.num_dequeued - 1} of infeed '{self.name}': '{t.name}' has "
                f"shape {a.shape} and type {a.dtype}, but the device tensor is "
                f"{TYPE_NAMES[t.dtype]} {t.shape}; every element needs the same shape and type"
            )
        buffer[...] = a.reshape(-1)


def _map(graph, t: Tensor, tile: int | None) -> None:
    if tile is not None:
        graph.set_tile_mapping(t, tile)
        return
    flat, n = t.flatten(), t.num_elements()
    chunk = -(-n // graph.target.num_tiles)  # ceil: tile i holds [i chunk, (i + 1) chunk)
    for i, begin in enumerate(range(0, n, chunk)):
        graph.set_tile_mapping(flat[begin:begin + chunk], i)


# -- outfeed ---------------------------------------------------------------------------------
class OutfeedMode(Enum):
    """``IPUOutfeedMode``: ALL keeps every enqueued element, LAST only the latest one."""

    ALL = "all"
    LAST = "get_last"


class OutfeedQueue:
    """``IPUOutfeedQueue``: brings tensors' values back to the host, one element a time.

    ``enqueue(tensors)`` (a Tensor, a tuple or a dict of them) returns the program that
    sends them; ``dequeue()`` returns what arrived: in ALL mode every element since the
    last read, stacked on a new first axis; in LAST mode the latest element. Iterating
    (``for x in outfeed``) yields the elements enqueued so far, also while a run is in
    progress in another thread, as TensorFlow's outfeed does.
    """

    def __init__(self, outfeed_mode: OutfeedMode | None = None, name: str = "outfeed"):
        self.outfeed_mode = OutfeedMode.ALL if outfeed_mode is None else outfeed_mode
        if not isinstance(self.outfeed_mode, OutfeedMode):
            raise IpuError(f"outfeed '{name}': outfeed_mode must be OutfeedMode.ALL or "
                           f"OutfeedMode.LAST, got {outfeed_mode!r}")
        self.name = name
        #: how many elements the device has enqueued in all
        self.num_enqueued = 0
        self._program, self._keys, self._shapes, self._dtypes = None, None, (), ()
        self._pending: list = []
        self._elements: list = []
        self._lock = threading.Lock()

    def enqueue(self, tensors) -> Program:
        """Add device-to-host FIFOs for ``tensors``; the program that sends their values."""
        if self._program is not None:
            raise IpuError(f"outfeed '{self.name}' is already enqueued: an outfeed can only "
                           "be enqueued once; reuse the program enqueue() returned")
        keys = _keys(tensors)
        flat = _components(tensors, keys)
        if not flat or not all(isinstance(t, Tensor) for t in flat):
            raise IpuError(f"outfeed '{self.name}'.enqueue needs a Tensor, or a tuple or dict "
                           f"of Tensors, got {tensors!r}")
        graph = flat[0].graph
        if any(t.graph is not graph for t in flat):
            raise IpuError(f"outfeed '{self.name}': the enqueued tensors belong to different "
                           "graphs")
        copies = []
        names = _free_names(graph, _stream_names(self.name, keys), "OutfeedQueue")
        for sname, t in zip(names, flat):
            copies.append(Copy(t, graph.add_device_to_host_fifo(sname, t.dtype,
                                                                t.num_elements())))
        self._keys, self._shapes = keys, tuple(t.shape for t in flat)
        self._dtypes = tuple(t.dtype for t in flat)
        self._program = Sequence(*copies)
        return self._program

    def connect(self, engine) -> None:
        """Receive this outfeed's FIFOs from ``engine`` (``connect_stream_to_callback``)."""
        if self._program is None:
            raise IpuError(f"outfeed '{self.name}' has nothing to connect: call "
                           "outfeed.enqueue(tensors) and compile its program first")
        for k, sname in enumerate(_stream_names(self.name, self._keys)):
            engine.connect_stream_to_callback(sname, functools.partial(self._receive, k))

    def _receive(self, k: int, data: np.ndarray) -> None:
        if k == 0:  # a new element starts (drops the rest of one a failed run cut short)
            self._pending = []
        self._pending.append(data.reshape(self._shapes[k]))
        if k < len(self._shapes) - 1:
            return
        element, self._pending = _pack(self._keys, self._pending), []
        with self._lock:
            if self.outfeed_mode is OutfeedMode.ALL:
                self._elements.append(element)
            else:
                self._elements = [element]
            self.num_enqueued += 1

    def __len__(self) -> int:
        """Elements waiting to be read (ALL), or 1 once one arrived (LAST)."""
        return len(self._elements)

    def _take(self) -> list:
        if self._program is None or self.num_enqueued == 0:
            why = ("no program enqueues to it: build one with outfeed.enqueue(tensors)"
                   if self._program is None else
                   "nothing has been enqueued yet: connect it with outfeed.connect(engine) "
                   "and run a program that contains outfeed.enqueue(...)")
            raise StreamError(f"outfeed '{self.name}' was read before any enqueue; {why}")
        with self._lock:
            elements = self._elements
            if self.outfeed_mode is OutfeedMode.ALL:
                self._elements = []
        return elements

    def dequeue(self):
        """ALL: the elements since the last read, stacked (first axis = count); LAST: the
        latest element. Raises StreamError if nothing was ever enqueued."""
        elements = self._take()
        if self.outfeed_mode is OutfeedMode.LAST:
            return elements[-1]
        columns = zip(*(_components(e, self._keys) for e in elements))
        stacked = [np.stack(c) for c in columns] if elements else [
            np.zeros((0,) + s, dt) for s, dt in zip(self._shapes, self._dtypes)]
        return _pack(self._keys, stacked)

    def __iter__(self):
        return iter(self._take())


# -- on-device loops -------------------------------------------------------------------------
def repeat(n: int, body, inputs=None, infeed_queue: InfeedQueue | None = None) -> Repeat:
    """``loops.repeat``: ``ipu.Repeat(n, …)`` of one iteration built by ``body``.

    ``body(*inputs, *element)`` is called once; ``element`` is the infeed's tensors (a dict
    element is passed as keyword arguments). Tensors are device variables updated in
    place, so ``body`` returns the iteration's Program (or a list of programs), not new
    tensors. With an infeed, each iteration first dequeues the next element.
    """
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs or [])
    args, kwargs = list(inputs), {}
    if infeed_queue is not None:
        if infeed_queue.tensors is None:
            graph = next((t.graph for t in inputs if isinstance(t, Tensor)), None)
            if graph is None:
                raise IpuError(f"loops.repeat cannot tell which graph infeed "
                               f"'{infeed_queue.name}' belongs to: call "
                               "infeed.bind(graph) first, or pass a tensor in inputs")
            infeed_queue.bind(graph)
        element = infeed_queue.tensors
        if isinstance(element, dict):
            kwargs = element
        elif isinstance(element, tuple):
            args += element
        else:
            args.append(element)
    program = body(*args, **kwargs)
    if isinstance(program, list | tuple):
        program = Sequence(*program)
    if not isinstance(program, Program):
        raise ProgramError(
            f"loops.repeat: body must return the Program of one iteration (e.g. "
            f"ipu.Sequence(...)), got {program!r}; ipukit tensors are variables the body "
            "updates in place, so it returns a program rather than new tensors"
        )
    if infeed_queue is not None:
        program = Sequence(infeed_queue.dequeue(), program)
    return Repeat(n, program)


#: TensorFlow's ``ipu.loops`` namespace: ``loops.repeat(n, body, inputs, infeed_queue)``.
loops = types.SimpleNamespace(repeat=repeat)


# -- dataset benchmarking --------------------------------------------------------------------
def simulated_throughput(trace, elements: int) -> float:
    """Elements per simulated second of a run: ``elements`` ÷ (Trace cycles ÷ clock)."""
    if not trace.total_cycles:
        raise IpuError("simulated_throughput: the trace has no cycles yet; run the engine")
    return elements * trace.target.clock_hz / trace.total_cycles


@dataclass(frozen=True)
class DatasetBenchmark:
    """What ``benchmark_dataset`` measured: per epoch (TensorFlow's keys) and in total."""

    epochs: tuple[dict, ...]
    bytes_per_element: int
    ipu_elements_per_second: float | None = None
    #: The host link's bytes per second, one way (``benchmark_dataset``'s ``target``).
    host_link_bytes_per_second: float = cost.HOST_LINK_BYTES_PER_SECOND

    elements = property(lambda self: sum(e["elements_processed"] for e in self.epochs))
    seconds = property(lambda self: sum(e["time_elapsed"] for e in self.epochs))

    @property
    def elements_per_second(self) -> float:
        return self.elements / max(self.seconds, 1e-12)

    @property
    def bytes_per_second(self) -> float:
        return self.elements_per_second * self.bytes_per_element

    @property
    def rates(self) -> dict[str, float]:
        """Elements/s each part could sustain: the input pipeline (measured), the host link
        (``host_link_bytes_per_second``) and, if given, the emulated IPU."""
        r = {"input pipeline": self.elements_per_second,
             "host link": self.host_link_bytes_per_second / max(self.bytes_per_element, 1)}
        if self.ipu_elements_per_second is not None:
            r["IPU"] = self.ipu_elements_per_second
        return r

    @property
    def bottleneck(self) -> str:
        """The slowest of ``rates``: "input pipeline", "host link" or "IPU"."""
        rates = self.rates
        return min(rates, key=rates.get)

    def to_json(self) -> str:
        """TensorFlow's ``dataset_benchmark`` result: ``{"epochs": [...]}``."""
        return json.dumps({"epochs": list(self.epochs)})

    def __str__(self) -> str:
        lines = [f"{'epoch':>5} {'elements':>10} {'seconds':>10} {'elements/s':>14} "
                 f"{'GB/s':>8}"]
        for i, e in enumerate(self.epochs):
            lines.append(f"{i:>5} {e['elements_processed']:>10,} {e['time_elapsed']:>10.4f} "
                         f"{e['elements_per_second']:>14,.1f} {e['bandwidth']:>8.3f}")
        lines += [f"{name}: {rate:,.1f} elements/s" for name, rate in self.rates.items()]
        lines.append(f"bottleneck: {self.bottleneck}")
        return "\n".join(lines)


def benchmark_dataset(dataset, number_of_epochs: int, elements_per_epoch: int, *,
                      ipu_elements_per_second: float | None = None, target=None,
                      print_stats: bool = True, do_memcpy: bool = True) -> DatasetBenchmark:
    """``ipu.dataset_benchmark``: how fast the host delivers a dataset's elements.

    ``dataset`` is an InfeedQueue (its batches are the elements, as TensorFlow's
    ``infeed_benchmark``) or anything an InfeedQueue takes. Each epoch reads
    ``elements_per_epoch`` elements (a re-readable dataset starts a new pass each epoch)
    and, with ``do_memcpy``, copies them into a buffer as Poplar would. Give
    ``ipu_elements_per_second`` (e.g. ``simulated_throughput(engine.trace, n)``) to learn
    whether the input pipeline, the host link or the emulated IPU is the bottleneck. The
    host link is ``target``'s (``target.host_link_bytes_per_cycle`` at its clock: pass the
    IPU's, e.g. ``engine.trace.target``); without one, a Bow IPU's share of its Bow-2000's
    100 GbE (``cost.HOST_LINK_BYTES_PER_SECOND``, 3.125 GB/s) (kit convention).
    """
    for what, v in (("number_of_epochs", number_of_epochs),
                    ("elements_per_epoch", elements_per_epoch)):
        if not (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1):
            raise IpuError(f"benchmark_dataset: {what} must be a positive int, got {v!r}")
    queue = dataset if isinstance(dataset, InfeedQueue) else InfeedQueue(dataset)
    epochs, nbytes, buffers = [], 0, None
    for epoch in range(number_of_epochs):
        count, start = 0, time.perf_counter()
        for batch in itertools.islice(queue._batches(), elements_per_epoch):
            if buffers is None:
                nbytes = sum(a.nbytes for a in batch)
                buffers = [np.empty_like(a) for a in batch]
            if do_memcpy:
                for buf, a in zip(buffers, batch):
                    np.copyto(buf, a)
            count += 1
        seconds = time.perf_counter() - start
        if count < elements_per_epoch:
            raise IpuError(
                f"benchmark_dataset: epoch {epoch} got only {count} of elements_per_epoch="
                f"{elements_per_epoch} elements before the dataset ran out; use a smaller "
                "elements_per_epoch, or a dataset that can be read again each epoch"
            )
        rate = count / max(seconds, 1e-12)
        epochs.append({"elements_processed": count, "total_bytes_processed": count * nbytes,
                       "time_elapsed": seconds, "elements_per_second": rate,
                       "bandwidth": rate * nbytes / 1e9})
    if target is not None and not isinstance(target, Target):
        raise IpuError(f"benchmark_dataset: target must be an ipu Target (e.g. "
                       f"engine.trace.target or device.target), got {target!r}")
    link = (cost.HOST_LINK_BYTES_PER_SECOND if target is None
            else target.host_link_bytes_per_cycle * target.clock_hz)
    result = DatasetBenchmark(tuple(epochs), nbytes, ipu_elements_per_second, link)
    if print_stats:
        print(result)
    return result
