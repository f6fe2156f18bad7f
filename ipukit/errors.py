"""The exception hierarchy, as Poplar names its graph and program errors.

Every error derives from :class:`IpuError`, names what is wrong (tensor, vertex, field,
tile, setting) and says how to fix it.

>>> import ipukit as ipu
>>> issubclass(ipu.OutOfMemoryError, ipu.IpuError)
True
"""


class IpuError(Exception):
    """Base of every ipukit error (``poplar::poplar_error``)."""


class GraphConnectionError(IpuError):
    """A vertex field is unconnected, or connected to a tensor of the wrong shape/type."""


class TileMappingError(IpuError):
    """A tensor or vertex is not mapped to a tile, or a tile index is out of range."""


class ComputeSetRaceError(IpuError):
    """Two vertices of one compute set write, or write and read, the same elements.

    Poplar refuses these when the Engine is built (``poplar::graph_cycle_error``, e.g. "Field
    V.f writes to elements [0:4) of variable 'v' that are written to elsewhere in same
    compute set"). Kit convention: ipukit also refuses one vertex that reads and writes an
    element through two different fields (an ``InOut`` field reads and writes in place).
    """


class OutOfMemoryError(IpuError):
    """Data and code do not fit in the memory of one or more tiles (or an IPU)."""


class OutOfMemoryWarning(UserWarning):
    """The graph does not fit, but the IPUModel runs on (``debug.allowOutOfMemory``)."""


class StreamError(IpuError):
    """A host stream or host read/write handle is missing, unconnected or the wrong size."""


class ProgramError(IpuError):
    """A program is malformed: a copy between tensors of different sizes, a bad predicate."""


class PipelineConfigError(IpuError):
    """A pipeline setting is invalid (gradient accumulation count, stages, device mapping)."""


class PipelineConfigTypeError(PipelineConfigError, TypeError):
    """A pipeline setting of the wrong type (TensorFlow raises ``TypeError`` for these)."""


class CodeletError(IpuError):
    """A codelet's ``compute`` fails or gives different results batched and one vertex alone."""
