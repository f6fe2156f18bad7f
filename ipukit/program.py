"""Control programs (``poplar::program``): what the IPU executes, in order.

Programs are plain descriptions; ``compile`` checks them and the Engine runs them.

>>> import ipukit as ipu
>>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=1).create_device().target)
>>> v = g.add_variable(ipu.INT, [3], "v")
>>> g.set_tile_mapping(v, 0)
>>> prog = ipu.Sequence(ipu.Repeat(2, ipu.PrintTensor("v", v)))
>>> len(prog.programs)
1
"""

from __future__ import annotations

import numbers

from .errors import ProgramError, StreamError
from .graph import ComputeSet, DataStream, RemoteBuffer
from .print_tensor import PrintTensorFmt
from .tensor import Tensor


class Program:
    """Base of every control program (``poplar::program::Program``)."""


def _program(p, where: str) -> Program:
    if not isinstance(p, Program):
        raise ProgramError.not_a_program(where, p)
    return p


class Sequence(Program):
    """``Sequence``: run programs one after another; ``add`` appends one."""

    def __init__(self, *programs):
        if len(programs) == 1 and isinstance(programs[0], list | tuple):
            programs = tuple(programs[0])
        self.programs = [_program(p, "Sequence") for p in programs]

    def add(self, program: Program) -> Sequence:
        self.programs.append(_program(program, "Sequence.add"))
        return self


class Execute(Program):
    """``Execute(cs)``: one BSP superstep (sync, exchange, compute) for a compute set."""

    def __init__(self, cs: ComputeSet):
        if not isinstance(cs, ComputeSet):
            raise ProgramError.execute_needs_compute_set(cs)
        self.cs = cs


class Copy(Program):
    """``Copy(src, dst[, offset])``: tensor to tensor, stream to tensor, tensor to stream, or
    between a tensor and a remote buffer (Streaming Memory). With a remote buffer,
    ``offset`` picks the repeat: an integer tensor (Poplar's), read when the copy runs, or
    an int (kit convention: a fixed offset); an offset tensor of k elements copies k
    repeats, one after another in the tensor. Without one, repeat 0 (kit convention)."""

    def __init__(self, src, dst, offset=None):
        for what, t in (("source", src), ("destination", dst)):
            if not isinstance(t, Tensor | DataStream | RemoteBuffer):
                raise ProgramError.copy_side(what, t)
        if not isinstance(src, Tensor) and not isinstance(dst, Tensor):
            raise ProgramError.stream_to_stream(src, dst)
        if isinstance(src, DataStream) and not src.to_device:
            raise StreamError.copy_from_device_to_host(src)
        if isinstance(dst, DataStream) and dst.to_device:
            raise StreamError.copy_to_host_to_device(dst)
        buf = src if isinstance(src, RemoteBuffer) else dst
        if isinstance(buf, RemoteBuffer):
            _remote_offset(buf, offset)
        elif offset is not None:
            raise ProgramError.copy_offset_without_buffer(offset)
        self.src = src
        self.dst = dst
        self.offset = offset


def _remote_offset(buf: RemoteBuffer, offset) -> None:
    """An offset (None, an int in range, or an integer tensor) for remote buffer ``buf``."""
    if offset is None:
        return
    if isinstance(offset, Tensor):
        if offset.dtype.kind not in "iu" or offset.num_elements() < 1:
            raise StreamError.remote_offset_type(buf, offset)
    elif isinstance(offset, bool) or not isinstance(offset, numbers.Integral):
        raise StreamError.remote_offset_type(buf, offset)
    elif not 0 <= offset < buf.repeats:
        raise StreamError.remote_offset(buf, offset)


class Repeat(Program):
    """``Repeat(count, body)``: run ``body`` a fixed number of times on the device."""

    def __init__(self, count: int, body: Program):
        if not (isinstance(count, numbers.Integral) and count >= 0):
            raise ProgramError.repeat_count(count)
        self.count = int(count)
        self.body = _program(body, "Repeat")


class RepeatWhileTrue(Program):
    """``RepeatWhileTrue(cond, predicate, body)``: run cond; while predicate ≠ 0, body, cond."""

    def __init__(self, cond: Program, predicate: Tensor, body: Program):
        self.cond = _program(cond, "RepeatWhileTrue")
        self.body = _program(body, "RepeatWhileTrue")
        self.predicate = _predicate(predicate, "RepeatWhileTrue")


class If(Program):
    """``If(predicate, then, else)``: ``then`` when the scalar predicate is non-zero."""

    def __init__(self, predicate: Tensor, then: Program, else_: Program | None = None):
        self.predicate = _predicate(predicate, "If")
        self.then = _program(then, "If")
        self.else_ = Sequence() if else_ is None else _program(else_, "If")


class PrintTensor(Program):
    """``PrintTensor(title, tensor[, fmt])``: print a tensor as Poplar does, e.g.
    ``v: [ 6  9 12]``, to standard error (``Engine.set_print_tensor_stream`` changes it)."""

    def __init__(self, title, tensor: Tensor | None = None, fmt: PrintTensorFmt | None = None):
        if tensor is None or isinstance(tensor, PrintTensorFmt):
            fmt = tensor or fmt  # PrintTensor(tensor[, fmt]): titled by its name
            tensor = title
            title = getattr(tensor, "name", "")
        if not isinstance(tensor, Tensor):
            raise ProgramError.print_needs_tensor(tensor)
        if fmt is not None and not isinstance(fmt, PrintTensorFmt):
            raise ProgramError.print_fmt(fmt)
        self.title = str(title)
        self.tensor = tensor
        self.fmt = fmt or PrintTensorFmt()


def _predicate(t, where) -> Tensor:
    if not isinstance(t, Tensor) or t.num_elements() != 1:
        raise ProgramError.bad_predicate(where, t)
    return t
