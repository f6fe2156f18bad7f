"""ipukit: the Graphcore IPU programming model and model parallelism, without an IPU.

>>> import sys, numpy as np, ipukit as ipu
>>> device = ipu.IPUModel("ipu2", tiles_per_ipu=4).create_device()
>>> graph = ipu.Graph(device.target)
>>> v = graph.add_variable(ipu.FLOAT, [4], "v")
>>> for i in range(4):
...     graph.set_tile_mapping(v[i], i)
>>> c = graph.add_constant(ipu.FLOAT, [4], [1.0, 1.5, 2.0, 2.5], "c")
>>> graph.set_tile_mapping(c, 0)
>>> engine = ipu.Engine(graph, ipu.Sequence(ipu.Copy(c, v), ipu.PrintTensor("v", v)))
>>> engine.load(device)
>>> engine.set_print_tensor_stream(sys.stdout)  # Poplar prints to stderr by default
>>> engine.run(0)
v: [1.0000000 1.5000000 2.0000000 2.5000000]
"""

from .compile import Executable, compile_graph
from .engine import Engine
from .errors import (
    CodeletError,
    ComputeSetRaceError,
    GraphConnectionError,
    IpuError,
    OutOfMemoryError,
    OutOfMemoryWarning,
    PipelineConfigError,
    PipelineConfigTypeError,
    ProgramError,
    StreamError,
    TileMappingError,
)
from .graph import ComputeSet, DataStream, Graph, RemoteBuffer, VertexRef
from .print_tensor import format_tensor
from .program import (
    Copy,
    Execute,
    If,
    PrintTensor,
    PrintTensorFmt,
    Program,
    Repeat,
    RepeatWhileTrue,
    Sequence,
)
from .target import Device, IPUModel, Target
from .tensor import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Tensor, concat
from .trace import Event, Step, TileMemory, Trace
from .vertex import InOut, Input, MultiVertex, Output, State, Vector, Vertex

__version__ = "0.1.0"

__all__ = [
    "BOOL", "FLOAT", "HALF", "INT", "UNSIGNED_INT",
    "CodeletError", "ComputeSet", "ComputeSetRaceError", "Copy", "DataStream", "Device",
    "Engine", "Event",
    "Executable", "Execute", "Graph", "GraphConnectionError", "IPUModel", "If", "InOut",
    "Input", "IpuError", "MultiVertex", "OutOfMemoryError", "OutOfMemoryWarning", "Output",
    "PipelineConfigError", "PipelineConfigTypeError", "PrintTensor", "PrintTensorFmt",
    "Program", "ProgramError", "RemoteBuffer", "Repeat", "RepeatWhileTrue", "Sequence",
    "State", "Step",
    "StreamError", "Target", "Tensor", "TileMappingError", "TileMemory", "Trace", "Vector",
    "Vertex", "VertexRef", "compile_graph", "concat", "format_tensor",
]
