"""Codelets: ``poplar::Vertex``, ``poplar::MultiVertex``, their fields ``Input``, ``Output``,
``InOut`` and ``State``.

A codelet is written once, "for one vertex", but ``compute`` sees every field with a
leading vertex axis: a scalar field has shape ``(n,)`` and a ``Vector`` field ``(n, k)``.
The engine runs all vertices of one class and field shape in a compute set as ONE array
operation (n = 1 per call in the per-vertex debug mode). Write with ``[...]`` and reduce
with ``axis=-1``; ``self.xp`` is the array module (NumPy or CuPy).

>>> import ipukit as ipu
>>> class SumVertex(ipu.Vertex):
...     x = ipu.Input(ipu.Vector(ipu.FLOAT))
...     out = ipu.Output(ipu.FLOAT)
...     def compute(self):
...         self.out[...] = self.x.sum(axis=-1)
>>> list(SumVertex.fields)
['x', 'out']
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from .errors import CodeletError
from .tensor import as_type


class Vector:
    """``poplar::Vector<T>``: a field connected to a 1-D run of elements."""

    def __init__(self, dtype):
        self.dtype = as_type(dtype)


class Field:
    """A vertex field; ``kind`` is "input", "output", "inout" or "state"."""

    def __init__(self, kind: str, dtype):
        self.kind = kind
        self.vector = isinstance(dtype, Vector)
        self.dtype = dtype.dtype if self.vector else as_type(dtype)

    #: Whether a vertex reads (Input, InOut) or writes (Output, InOut) the field.
    reads = property(lambda self: self.kind in ("input", "inout"))
    writes = property(lambda self: self.kind in ("output", "inout"))

    def __repr__(self) -> str:
        return f"{self.kind.title()}({f'Vector({self.dtype})' if self.vector else self.dtype})"


def Input(dtype) -> Field:  # noqa: N802 - Poplar's name
    """``poplar::Input<T>``: read-only data."""
    return Field("input", dtype)


def Output(dtype) -> Field:  # noqa: N802
    """``poplar::Output<T>``: written by the vertex."""
    return Field("output", dtype)


def InOut(dtype) -> Field:  # noqa: N802
    """``poplar::InOut<T>``: read and written in place."""
    return Field("inout", dtype)


def State(dtype) -> Field:  # noqa: N802
    """Vertex state held in the vertex itself; set with ``graph.set_initial_value``.

    It persists between executions of the compute set.
    """
    return Field("state", dtype)


class Vertex:
    """Base class of codelets (``poplar::Vertex``); subclass it and write ``compute``."""

    fields: dict[str, Field] = {}
    #: (kit convention: see ``engine``) True lets the Engine hand a field it cannot view as
    #: (vertices, elements) as a strided (vertices, ...) view of storage, not a copy.
    strided_fields = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.fields = {k: v for klass in reversed(cls.__mro__) for k, v in vars(klass).items()
                      if isinstance(v, Field)}  # a subclass's field replaces its base's

    def compute(self):
        raise NotImplementedError(f"{type(self).__name__}.compute is not written yet")

    @classmethod
    def cycle_estimate(cls, sizes: dict[str, int]) -> int:
        """Cycles one vertex takes, given each field's element count (approximate).

        Used when ``graph.set_perf_estimate`` was not called: 10 cycles of overhead
        plus one per element read or written. Override it in a codelet to model it.
        """
        return 10 + sum(sizes[f] for f, fld in cls.fields.items() if fld.kind != "state")


class MultiVertex(Vertex):
    """Base class of codelets that all of a tile's workers run (``poplar::MultiVertex``).

    In Poplar, ``MultiVertex::compute(unsigned workerId)`` runs in every worker thread of
    its tile (``MultiVertex::numWorkers()`` of them) and each worker takes its share of
    the work, as PopLibs' element-wise ``BinaryOp1D``, ``UnaryOp1D``, ``Cast1D`` and
    popnn's ``NonLinearity1D`` do: one vertex per tile instead of one per worker
    (kit convention: ``compute(self)`` takes no worker id and does every worker's share at
    once; the shares are disjoint, so the result is the same).

    Its cycle estimate is the tile's busy time, as PopLibs' estimators give it
    (``numWorkers * workerCycles``): the compile step spreads it evenly over the tile's
    W workers, so the tile takes W x its heaviest worker, as with one vertex per worker.
    An override takes ``(sizes, workers)``.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "workers" not in inspect.signature(cls.cycle_estimate).parameters:
            raise CodeletError.multivertex_estimate(cls)

    @classmethod
    def cycle_estimate(cls, sizes: dict[str, int], workers: int = 6) -> int:
        """W x one worker's cycles when each field's elements are split evenly over the
        ``workers`` (``Target::getNumWorkerContexts()``, which compile passes: 6 on every
        IPU preset): the :class:`Vertex` default applied to a share of ceil(n / W)
        elements per field."""
        return workers * super().cycle_estimate({f: -(-n // workers) for f, n in sizes.items()})


class VertexRef:
    """``poplar::VertexRef``; ``v["field"]`` is a field reference for ``connect``."""

    __slots__ = ("graph", "id")

    def __init__(self, graph, id_):
        self.graph = graph
        self.id = id_

    def __getitem__(self, field: str) -> FieldRef:
        return FieldRef(self, field)

    def __repr__(self):
        return f"VertexRef({self.graph.describe_vertex(self.id)})"


@dataclass(frozen=True)
class FieldRef:
    vertex: VertexRef
    field: str
