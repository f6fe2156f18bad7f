"""What an emulated run returns: the trace events of every schedule op and the timeline
read from them.

:class:`OpSteps` says which trace events one op of the schedule made; the timeline's F,
B, W and R spans are those events on the op's IPU, IPU-Link copies ``"link"`` spans
and each IPU's weight update an ``"optimizer"`` span (:func:`timeline_of`).
:class:`EmulatedRunResult` opens any of them as supersteps.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import IpuError
from ...timeline import MemorySample, Span, Timeline
from ...trace import Step, Trace
from ..runner import RunResult


@dataclass(frozen=True)
class OpSteps:
    """The trace events (``[first, end)`` in ``trace.events``) one schedule op made; phase
    ``"optimizer"``: a run's weight update, ``"copy"``: a pipeline cycle's inter-IPU
    copies (stage, micro-batch and IPU -1)."""

    run: int  # the pipeline run (repeat) it belongs to
    phase: str
    stage: int
    microbatch: int
    ipu: int
    first: int
    end: int
    step: int = -1  # the schedule step (pipeline cycle) of a lock-step schedule's op or copy






def steps_of(trace, op: OpSteps) -> list[Step]:
    """The compiled steps (supersteps and copies) that ``op`` executed, in order."""
    ids = trace._step_ids[op.first:op.end]
    return [trace.steps[i] for i in ids]


@dataclass(frozen=True)
class EmulatedRunResult(RunResult):
    """A :class:`~ipukit.parallel.pipelining.RunResult` with the run's ``trace`` (an
    ``ipu.Trace``: ``BSPView(result.trace)`` works) and, per schedule op, the trace events
    it made (``op_steps``); the timeline's durations are those events' cycles."""

    trace: Trace | None = None
    op_steps: tuple[OpSteps, ...] = ()
    origin: float = 0.0  # the trace cycle where this run's timeline starts

    def steps_of(self, phase: str, stage: int, microbatch: int, run: int = 0) -> list[Step]:
        """The supersteps (compute sets, copies, stream copies) of one F, B, W or R op."""
        for o in self.op_steps:
            if (o.phase, o.stage, o.microbatch, o.run) == (phase, stage, microbatch, run):
                return steps_of(self.trace, o)
        raise IpuError(f"no {phase} op of stage {stage} on micro-batch {microbatch} in run "
                       f"{run}; the schedule's ops are (phase, stage, micro-batch) with phase "
                       "F, B, W or R")

    def op_of(self, span) -> OpSteps:
        """The schedule op (and its trace events) behind an F, B, W or R timeline record."""
        op = next((o for o in self.op_steps if o.phase == span.kind and span.kind in "FBWR"
                   and o.stage == span.stage and o.microbatch == span.microbatch
                   and self._start(o, span.ipu) == span.start), None)
        if op is None:
            raise IpuError(f"{span!r} is not an F, B, W or R span of this emulated run; "
                           "pass one of result.timeline's records with kind F, B, W or R")
        return op

    def span_steps(self, span) -> list[Step]:
        """The supersteps behind a timeline record (an F, B, W or R span of this run)."""
        return steps_of(self.trace, self.op_of(span))

    def _start(self, o: OpSteps, ipu: int) -> float:
        ext = _extent(self.trace, o, ipu)
        return -1.0 if ext is None else ext[0] - self.origin




def _extent(trace, o: OpSteps, ipu: int) -> tuple[float, float] | None:
    """(start, end) on ``ipu``'s clock of the steps of ``o`` that run on ``ipu`` alone (its
    copies to other IPUs are "link" spans: they wait for the receiver)."""
    times = [(t, t + trace.steps[i].cycles) for i, t in
             zip(trace._step_ids[o.first:o.end], trace._starts[o.first:o.end])
             if tuple(trace.steps[i].ipus) == (ipu,)]
    if not times:
        return None
    return float(min(a for a, _ in times)), float(max(b for _, b in times))


def _stage_ipus(stage) -> list[int]:
    return [m.ipu for m in getattr(stage, "members", [stage])]


def timeline_of(emu, trace, ops, t0, sizes, first: int) -> Timeline:
    """The run from its trace events (``first`` on), on each IPU's clock: per op an F, B,
    W or R span on each IPU of its stage (its steps there), each copy between IPUs on
    every IPU it involves (its external ``"sync"``, then the ``"link"``, whose ``bytes``
    the sender's span carries), each IPU's weight update (``"optimizer"``) and the host
    syncs of ``Engine.run`` (``"host"``), so that ``measures()`` says why an IPU was idle;
    memory: ``sizes``, each IPU's ``(ipu, bytes by category)``."""
    spans = []
    ipus = sorted({s.ipu for st in emu.replicas for s in st})
    for i, t in zip(trace._step_ids[first:], trace._starts[first:]):
        st = trace.steps[i]
        if st.kind == "host":
            spans += [Span(q, "host", float(t - t0), float(st.cycles), label=st.name)
                      for q in st.ipus]
    for o in ops:
        if o.phase == "optimizer":
            for q in ipus:
                ext = _extent(trace, o, q)
                if ext:
                    spans.append(Span(q, "optimizer", ext[0] - t0, ext[1] - ext[0]))
        elif o.phase != "copy":  # one span per IPU of its stage (a concurrent stage's)
            for q in _stage_ipus(emu.stages[o.stage]):
                ext = _extent(trace, o, q)
                if ext is not None:
                    spans.append(Span(q, o.phase, ext[0] - t0, ext[1] - ext[0], o.stage,
                                      o.microbatch))
        for i, t in zip(trace._step_ids[o.first:o.end], trace._starts[o.first:o.end]):
            st = trace.steps[i]
            if not st.inter_ipu_bytes or not (o.ipu in st.ipus or o.ipu < 0):
                continue
            sender = o.ipu if o.ipu in st.ipus else st.ipus[0]
            at = float(t - t0)
            for q in st.ipus:
                if st.sync_cycles:
                    spans.append(Span(q, "sync", at, float(st.sync_cycles), o.stage,
                                      o.microbatch, label=st.name))
                spans.append(Span(q, "link", at + st.sync_cycles,
                                  float(st.cycles - st.sync_cycles), o.stage, o.microbatch,
                                  int(st.inter_ipu_bytes) if q == sender else 0, st.name))
    parts = ("weights", "stash", "gradients", "optimizer")
    memory = [MemorySample(0.0, q, dict(zip(parts, b))) for q, b in sizes]
    return Timeline(spans, memory, emu.target.clock_hz)


def bytes_of(emu, s) -> tuple[int, int, int, int]:
    """(weights, stash, gradient accumulators, optimiser state) bytes of stage ``s`` on its
    IPU (offloaded state, in Streaming Memory, is not)."""
    def size(ts):
        return sum(t.num_elements() * t.dtype.itemsize for t in ts)

    bufs = s.fifo + s.wfifo + [b for b in (s.inbox, s.gradbox) if b is not None]
    state = [t for (key, rep), st in (emu.opt.state.items() if emu.opt else ())
             if key.startswith(f"{s.k}.") and rep == 0 and key.partition("/rts")[2] in ("", "0")
             for name, t in st.items()
             if name not in emu.opt.remote.get((key, rep), ())]  # offloaded: not on the IPU
    return size(s.params.values()), size(bufs), size(s.accs.values()), size(state)
