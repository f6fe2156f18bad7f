"""Pipeline schedules as data: which IPU runs which stage on which micro-batch, and when.

A model of N stages runs stage k on IPU k. For training every micro-batch m runs the
forward ``F_k(m)`` on stages 0..N-1, then the backward ``B_k(m)`` on stages N-1..0.
:func:`schedule` returns a :class:`Schedule`, a frozen value whose ``ops`` are
``Op(step, ipu, phase, stage, microbatch)`` records, in execution order:

* ``"grouped"`` (TensorFlow-for-IPU's default ``PipelineSchedule.Grouped``): F_k(m) at step
  m+k and B_k(m) at m+2N-1-k, so every IPU runs one F and one B per step in the main
  phase; the count must be a multiple of 2N. FIFO depth 2(N-1-k).
* ``"interleaved"`` (``PipelineSchedule.Interleaved``): stage s of the list
  ``F0..F(N-1), B(N-1)..B0`` runs micro-batch m in column 2m+s, one op per IPU per column;
  the count must be a multiple of N. FIFO depth N-1-k.
* ``"sequential"`` (``PipelineSchedule.Sequential``, PopTorch's ``ShardedExecution``): one
  stage at a time, one micro-batch after another, as if the model were sharded. As
  TensorFlow's ``PipelineStageMerger`` (run for Sequential only), the last forward and
  first backward stage are one stage program: F(N-1) and B(N-1) share a step, so a
  training micro-batch takes 2N-1 steps (21 for N=4 and count 3).
* ``"poptorch"`` (PopART, behind ``PipelinedExecution``): the last forward and first
  backward stage are fused, giving P = 2N-1 pipeline stages; stage s runs micro-batch c-s
  in cycle c, so F_k(m) at m+k and B_k(m) at m+2N-2-k; count >= P, G+P-1 cycles.
* ``"gpipe"`` (all forwards, then all backwards) and ``"1f1b"`` (PipeDream-Flush /
  Megatron: N-1-k warm-up forwards, then one forward one backward): asynchronous, each op
  starts when its IPU is free and its inputs are ready; ``step`` is its start time when
  every op lasts one unit.
* After Graphcore (:mod:`.schedule_orders`, asynchronous too; ``num_stages`` is then the
  number of IPUs p, each holding ``virtual_stages`` chunks, and ``stage`` is the model
  stage): ``"interleaved_1f1b"`` (Megatron, torch's ``ScheduleInterleaved1F1B``: chunk c of
  IPU r is stage c*p + r), ``"zb_h1"`` (zero bubble, ``ScheduleInterleavedZeroBubble``),
  ``"zb_v"`` (``ScheduleZBVZeroBubble``) and ``"dualpipev"`` (DeepSeek,
  ``ScheduleDualPipeV``), the last two with IPU r holding stages r and 2p-1-r. The zero
  bubble ones split each backward into B (the input gradient, on the critical path) and
  W (the weight gradient, needed only by the optimizer step).

Graphcore's schedules (and PopTorch's) run in lock-step: a step ends with a sync of all
IPUs, so a step lasts as long as its busiest IPU. ``timing(t_F, t_B)`` gives every op's
start and end; ``bubble()`` and ``utilisation()`` read it (defaults t_F=1, t_B=2, the
literature's convention; ``t_W`` is 0 unless given, and an unsplit backward takes
t_B + t_W, so every kind does the same work). Each stage keeps one activation in its
output buffer plus a FIFO of ``fifo_depths[k]`` (TensorFlow's ``PipelineFIFOInserter``),
so ``peak_activations()`` never exceeds ``fifo_depths[k] + 1``.

>>> s = schedule("grouped", num_stages=4, gradient_accumulation=8)
>>> s.num_steps, s.fifo_depths, s.peak_activations()
(15, (6, 4, 2, 0), (7, 5, 3, 1))
>>> s.makespan(t_F=1, t_B=2), s.bubble()["total"] == 9 / 33
(33.0, True)
>>> schedule("sequential", 4, 3).num_steps  # pipeline_stage_merger.cc: 7 stages x 3
21
>>> schedule("grouped", 4, 8, recomputation=True).recomputation_mode
'RecomputeThenBackpropagate'
>>> zb = schedule("zb_h1", 4, 8)  # the zero-bubble paper's figure: unit F, B and W
>>> zb.makespan(t_F=1, t_B=1, t_W=1), schedule("1f1b", 4, 8).makespan(1, 1, t_W=1)
(27.0, 33.0)
>>> schedule("interleaved_1f1b", 4, 8, virtual_stages=2).peak_activations()
(5.5, 4.5, 3.5, 2.5)
>>> zb.peak_activations(bytes_per_microbatch=100, w_bytes_per_microbatch=30)
(400, 330, 260, 190)
>>> schedule("grouped", 4, 20)
Traceback (most recent call last):
...
ipukit.errors.PipelineConfigError: The number of iterations of the pipeline must be a \
multiple of 8, but gradient_accumulation_count is 20 (grouped schedule, 4 stages, \
training). Use 16 or 24.
"""

from __future__ import annotations

import enum
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from ..errors import PipelineConfigError, PipelineConfigTypeError
from ..timeline import MemorySample, Span, Timeline
from . import schedule_orders as orders_of
from .nn import is_count

#: Graphcore's schedules, GPipe and 1F1B: one stage per IPU, each backward one op.
KINDS = ("grouped", "interleaved", "sequential", "poptorch", "gpipe", "1f1b")
#: The schedules after Graphcore's (:mod:`.schedule_orders`): several stages (chunks) per
#: IPU, or the backward split into B and W. The runner runs them all.
BEYOND_GRAPHCORE = ("interleaved_1f1b", "zb_h1", "zb_v", "dualpipev")
ALL_KINDS = KINDS + BEYOND_GRAPHCORE
#: Graphcore's lock-step schedules; the others are asynchronous.
LOCKSTEP = ("grouped", "interleaved", "sequential", "poptorch")
#: The schedules whose backward is split into B (input gradient) and W (weight gradient).
SPLIT = ("zb_h1", "zb_v", "dualpipev")


class RecomputationMode(enum.Enum):
    """``pipelining_ops.RecomputationMode``: how a training pipeline recomputes.

    ``Auto`` (the default) is ``RecomputeThenBackpropagate`` for Grouped and Interleaved and
    ``RecomputeAndBackpropagateInterleaved`` for Sequential (``pipeline_util.cc``
    ``GetPipelineRecomputationMode``). ``RecomputeThenBackpropagate`` is supported by
    Grouped and Interleaved, ``RecomputeAndBackpropagateInterleaved`` by Grouped and
    Sequential. (kit convention: both modes run one R op (the stage's whole forward) before
    each B op; TensorFlow's interleaved mode also lowers the peak liveness inside a stage,
    which the kit does not model.) For the PopTorch, GPipe and 1F1B schedules, which TF
    does not have, ``Auto`` is ``RecomputeThenBackpropagate``.
    """

    Auto = "Auto"
    RecomputeThenBackpropagate = "RecomputeThenBackpropagate"
    RecomputeAndBackpropagateInterleaved = "RecomputeAndBackpropagateInterleaved"


#: The schedules each explicit mode supports (``pipeline_util.cc``).
_MODE_SUPPORT = {
    RecomputationMode.RecomputeThenBackpropagate: ("grouped", "interleaved"),
    RecomputationMode.RecomputeAndBackpropagateInterleaved: ("grouped", "sequential"),
}
#: Its name in TensorFlow's error messages (the backend proto's enum names).
_PROTO_NAMES = {
    RecomputationMode.RecomputeThenBackpropagate: "Recompute_then_backpropagate",
    RecomputationMode.RecomputeAndBackpropagateInterleaved:
        "Recompute_and_backpropagate_interleaved",
}


def resolve_recomputation_mode(kind: str, mode=None) -> RecomputationMode:
    """The recomputation mode ``mode`` (``None`` or Auto resolved) for schedule ``kind``.

    Raises TensorFlow's errors: a ``mode`` that is not a :class:`RecomputationMode` (or
    its name), and a mode the schedule does not support.
    """
    if mode is None:
        mode = RecomputationMode.Auto
    if isinstance(mode, str) and mode in RecomputationMode.__members__:
        mode = RecomputationMode[mode]
    if not isinstance(mode, RecomputationMode):
        raise PipelineConfigTypeError(
            "The given recomputation_mode is not a member of the RecomputationMode "
            f"enumeration: got {mode!r}; use one of "
            f"{', '.join(RecomputationMode.__members__)}")
    if mode is RecomputationMode.Auto:
        if kind == "sequential":
            return RecomputationMode.RecomputeAndBackpropagateInterleaved
        return RecomputationMode.RecomputeThenBackpropagate
    if kind in ("grouped", "interleaved", "sequential") and kind not in _MODE_SUPPORT[mode]:
        ok = [m.name for m, kinds in _MODE_SUPPORT.items() if kind in kinds]
        raise PipelineConfigError(
            f"Pipeline schedule {kind.capitalize()} does not support "
            f"'{_PROTO_NAMES[mode]}' recomputation mode. Use RecomputationMode.Auto or "
            f"{ok[0]} with the {kind} schedule.")
    return mode


class Op(NamedTuple):
    """One stage running on one micro-batch: phase ``"F"``, ``"B"``, ``"W"`` (the weight
    gradient of a split backward) or ``"R"`` (recompute); ``stage`` is the model stage."""

    step: int
    ipu: int
    phase: str
    stage: int
    microbatch: int


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: ops in execution order, steps, FIFO depths (a plain value).

    ``num_stages`` is the number of IPUs (pipeline ranks); each holds ``virtual_stages``
    chunks, so the model has ``num_model_stages`` stages.
    """

    kind: str
    num_stages: int
    gradient_accumulation: int
    training: bool
    ops: tuple[Op, ...]
    num_steps: int
    fifo_depths: tuple[int, ...]
    recomputation: bool = False
    #: The :class:`RecomputationMode` name in use (``""`` without recomputation).
    recomputation_mode: str = ""
    virtual_stages: int = 1
    #: Ops that run as one unit on their IPU, as ``(phase, stage, microbatch)`` keys: the
    #: unit starts when the inputs of all have arrived and its outputs leave when its last
    #: op ends (DualPipeV's full backwards and overlapped forward-and-backward pairs).
    fused: tuple = ()

    @property
    def lockstep(self) -> bool:
        """True when steps are separated by a sync of all IPUs (Graphcore, PopART)."""
        return self.kind in LOCKSTEP

    @property
    def split(self) -> bool:
        """True when the backward is split into B and W ops (ZB-H1, ZB-V, DualPipeV)."""
        return self.kind in SPLIT

    @property
    def num_model_stages(self) -> int:
        """Stages of the model: ``num_stages * virtual_stages``."""
        return self.num_stages * self.virtual_stages

    def ipu_of(self, stage: int) -> int:
        """The IPU holding model stage ``stage`` (cyclic c*p + r, or a V for ZB-V and
        DualPipeV: IPU r holds r and 2p-1-r)."""
        return orders_of.stage_ipu(self.kind, self.num_stages, stage)

    def chunk(self, stage: int) -> int:
        """Which of its IPU's chunks model stage ``stage`` is (0 for one stage per IPU)."""
        return stage // self.num_stages

    def timing(self, t_F=1.0, t_B=2.0, t_R=None, t_W=None):
        """Start and end time of every op (numpy arrays aligned with ``ops``).

        ``t_F``/``t_B``/``t_R``/``t_W`` are one duration or one per IPU (``t_R`` defaults to
        t_F). (kit convention: ``t_W`` defaults to 0, ``t_B`` being the whole backward.)
        A W op takes ``t_W``; an unsplit schedule's B takes ``t_B + t_W``, so
        every kind does the same work. (kit convention: a chunk of a v-chunk schedule
        takes 1/v of its IPU's times, the chunks being equal.)
        """
        n = self.num_stages
        f, b = _per_stage(t_F, n, "t_F"), _per_stage(t_B, n, "t_B")
        w = np.zeros(n) if t_W is None else _per_stage(t_W, n, "t_W")
        table = {"F": f, "B": b if self.split else b + w, "W": w,
                 "R": f if t_R is None else _per_stage(t_R, n, "t_R")}
        dur = np.array([table[o.phase][o.ipu] for o in self.ops]) / self.virtual_stages
        if not dur.any():
            raise PipelineConfigError(
                f"all durations are 0 (t_F={t_F!r}, t_B={t_B!r}, t_W={t_W!r}): there is "
                "nothing to time; give t_F or t_B > 0")
        return simulate(self, dur)

    def timeline(self, t_F=1.0, t_B=2.0, t_R=None, t_W=None) -> Timeline:
        """The schedule timed with ``t_F``/``t_B``/``t_R``/``t_W`` as the one record of
        time: one span per op (kind F/B/W/R, label like ``"F3"``, ``"F3c1"`` for chunk 1)
        on its IPU, unit clock; memory: the micro-batches each IPU holds, as
        :meth:`peak_activations` counts them."""
        start, end = self.timing(t_F, t_B, t_R, t_W)
        spans = [Span(o.ipu, o.phase, float(a), float(b - a), o.stage, o.microbatch,
                      label=self._label(o)) for o, a, b in zip(self.ops, start, end)]
        changes: list[list] = [[] for _ in range(self.num_stages)]
        for span, d in zip(spans, self._stash_changes()):
            if d:
                changes[span.ipu].append((span.end, d))
        memory = []
        for q, events in enumerate(changes):
            held = Fraction(0)
            memory.append(MemorySample(0.0, q, {"stash": 0}))
            for t, d in sorted(events):
                held += d
                memory.append(MemorySample(t, q, {"stash": _number(held)}))
        return Timeline(spans, memory, 1.0, self.num_stages)

    def makespan(self, t_F=1.0, t_B=2.0, t_R=None, t_W=None) -> float:
        """Time from the first op's start (0) to the last op's end (the last W included)."""
        return float(self.timing(t_F, t_B, t_R, t_W)[1].max())

    def utilisation(self, t_F=1.0, t_B=2.0, t_R=None, t_W=None) -> float:
        """Busy time of all IPUs ÷ (number of IPUs × makespan)."""
        return self.timeline(t_F, t_B, t_R, t_W).measures()["utilisation"]

    def bubble(self, t_F=1.0, t_B=2.0, t_R=None, t_W=None) -> dict:
        """Idle time of the busiest IPU, three ways (:meth:`Timeline.measures`).

        ``total``: bubble ÷ makespan (GPipe: (p-1)/(m+p-1)); ``ideal``: bubble ÷ ideal time
        (Megatron: (p-1)/m); ``span``: the zero-bubble paper's rate, measured on the
        longest per-IPU span from its first op's start to its last op's end.
        """
        m = self.timeline(t_F, t_B, t_R, t_W).measures()
        return {k: m[k] for k in ("total", "ideal", "span")}

    def peak_activations(self, bytes_per_microbatch=None, w_bytes_per_microbatch=None):
        """Most activations each IPU holds at once, in micro-batches of one stage's
        activations (a chunk's count 1/v), or in bytes given ``bytes_per_microbatch``.

        The zero-bubble paper's model: F stashes M_B (``bytes_per_microbatch``), B frees
        all but M_W (``w_bytes_per_microbatch``), which W frees; an unsplit B frees M_B.
        (kit convention: M_W defaults to M_B, W keeping all of the stash until it runs,
        an upper bound; the paper has M_W < M_B.) Counts in micro-batches use M_W = M_B.
        """
        peak = [Fraction(0)] * self.num_stages
        live = [Fraction(0)] * self.num_stages
        for op, d in zip(self.ops, self._stash_changes(bytes_per_microbatch,
                                                       w_bytes_per_microbatch)):
            live[op.ipu] += d
            peak[op.ipu] = max(peak[op.ipu], live[op.ipu])
        return tuple(_number(x) for x in peak)

    def _stash_changes(self, m_b=None, m_w=None) -> list[Fraction]:
        """What each op adds to its IPU's stash (F +M_B, B -(M_B-M_W), W -M_W; per chunk)."""
        m_b = _bytes(1 if m_b is None else m_b, "bytes_per_microbatch")
        m_w = m_b if m_w is None else _bytes(m_w, "w_bytes_per_microbatch")
        if m_w > m_b:
            raise PipelineConfigError(
                f"w_bytes_per_microbatch = {float(m_w):g} is more than bytes_per_microbatch "
                f"= {float(m_b):g}: W keeps part of what F stashed (the zero-bubble paper's "
                "M_W <= M_B); give at most bytes_per_microbatch")
        if not self.training:
            return [Fraction(0)] * len(self.ops)
        v = self.virtual_stages
        change = {"F": m_b / v, "B": (m_w - m_b) / v if self.split else -m_b / v,
                  "W": -m_w / v, "R": Fraction(0)}
        return [change[o.phase] for o in self.ops]

    def _label(self, op: Op) -> str:
        chunk = f"c{self.chunk(op.stage)}" if self.virtual_stages > 1 else ""
        return f"{op.phase}{op.microbatch}{chunk}"

    def columns(self) -> list[list[Op]]:
        """Steps drawn as PopTorch's tutorial figure: each step's F ops, then its B ops."""
        out: list[list[Op]] = []
        for step in self.steps():
            for phases in (("F",), ("R", "B", "W")):
                column = [o for o in step if o.phase in phases]
                if column:
                    out.append(column)
        return out

    def steps(self) -> list[list[Op]]:
        """Ops grouped by step (empty steps included)."""
        out: list[list[Op]] = [[] for _ in range(self.num_steps)]
        for op in self.ops:
            out[op.step].append(op)
        return out

    def table(self) -> str:
        """ASCII drawing: one row per IPU, one column per step, ``F3`` = forward of mb 3
        (``F3c1``: of chunk 1)."""
        cells = [["" for _ in range(self.num_steps)] for _ in range(self.num_stages)]
        for o in self.ops:
            cell = cells[o.ipu][o.step]
            cells[o.ipu][o.step] = (cell + "+" if cell else "") + self._label(o)
        width = max(3, *(len(c) for row in cells for c in row))
        lines = [f"IPU{i}: " + " ".join(c.ljust(width) for c in row).rstrip()
                 for i, row in enumerate(cells)]
        return "\n".join(lines)


def _number(x):
    """An exact count as an int when whole, else a float."""
    return int(x) if x == int(x) else float(x)


def _bytes(value, what: str) -> Fraction:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not (
            math.isfinite(value) and value >= 0):
        raise PipelineConfigError(f"{what} = {value!r}: give a number of bytes >= 0")
    return Fraction(value)


def _per_stage(t, n: int, what: str = "duration") -> np.ndarray:
    if isinstance(t, numbers.Real) and not isinstance(t, bool):
        arr = np.full(n, float(t))
    else:
        try:
            arr = np.asarray(t, dtype=np.float64)
        except (TypeError, ValueError):
            arr = None
        if arr is None or arr.shape != (n,) or isinstance(t, str):
            raise PipelineConfigError(f"{what}: expected one duration or {n} (one per stage), "
                                      f"got {t!r}")
    if not (np.isfinite(arr).all() and (arr >= 0).all()):
        raise PipelineConfigError(f"{what} = {t!r}: durations must be finite and >= 0")
    return arr


def simulate(sched: Schedule, dur, ipus=None, send=None, sync=0.0):
    """Start and end of every op given its duration; the engine of ``timing`` and the runner.

    ``ipus[i]`` is the tuple of IPUs op i occupies (default ``(op.ipu,)``). ``send[i]`` is
    the time op i's output spends on the IPU-Links after it ends (its IPU stays busy and
    the ops that use it wait). Lock-step schedules end each step with a ``sync`` of every
    IPU; within a step each IPU runs its ops one after another. Asynchronous schedules
    start an op when its IPUs are free and its inputs have arrived: F of stage s needs F of
    s-1, B of s needs F (or R) of s and B of s+1, W of s needs B of s; the ops of a
    ``fused`` unit start together, one after another, and send when the last ends.
    """
    ops = sched.ops
    dur = np.asarray(dur, dtype=np.float64)
    send = np.zeros(len(ops)) if send is None else np.asarray(send, dtype=np.float64)
    if ipus is None:
        ipus = [(o.ipu,) for o in ops]
    if sched.lockstep:
        return _lockstep(ops, sched.num_steps, dur, ipus, send, sync)
    return _async(ops, dur, ipus, send, sched.fused)


def _lockstep(ops, num_steps, dur, ipus, send, sync):
    start = np.empty(len(ops))
    free: dict[tuple[int, int], float] = {}  # (step, ipu) -> time its queue is free
    step_len = np.zeros(num_steps)
    for i, op in enumerate(ops):
        t = max(free.get((op.step, q), 0.0) for q in ipus[i])
        start[i] = t
        done = t + dur[i] + send[i]
        for q in ipus[i]:
            free[(op.step, q)] = done
        step_len[op.step] = max(step_len[op.step], done)
    offset = np.concatenate(([0.0], np.cumsum(step_len + sync)))[:-1]
    steps = np.fromiter((o.step for o in ops), dtype=np.int64, count=len(ops))
    start = start + offset[steps]
    return start, start + dur


def _async(ops, dur, ipus, send, fused=()):
    n = max(o.stage for o in ops) + 1
    g = max(o.microbatch for o in ops) + 1
    end = {ph: [0.0] * (n * g) for ph in "FRBW"}  # when the op ends, per stage * g + mb
    ready = {ph: [0.0] * (n * g) for ph in "FB"}  # when its output has arrived
    free: dict[int, float] = {}
    start = np.empty(len(ops))
    dur, send = dur.tolist(), send.tolist()
    unit = _units_of(ops, fused)
    timed = [False] * len(ops)
    for i in range(len(ops)):  # ops are in a dependency-respecting order
        if timed[i]:
            continue
        members = unit.get(i, (i,))
        t = max(free.get(q, 0.0) for j in members for q in ipus[j])
        for j in members:  # the inputs from outside the unit (those inside are 0 yet)
            _, _, phase, k, m = ops[j]
            jj = k * g + m
            if phase == "F" and k > 0:
                t = max(t, ready["F"][jj - g])
            elif phase == "B":
                t = max(t, end["R"][jj] or end["F"][jj])
                if k < n - 1:
                    t = max(t, ready["B"][jj + g])
            elif phase == "W":  # the weight gradient needs its B
                t = max(t, end["B"][jj])
        for j in members:  # one after another
            _, _, phase, k, m = ops[j]
            start[j] = t
            t += dur[j]
            end[phase][k * g + m] = t
            timed[j] = True
        for j in members:  # the outputs leave when the unit ends
            _, _, phase, k, m = ops[j]
            if phase in ready:
                ready[phase][k * g + m] = t + send[j]
        for q in {q for j in members for q in ipus[j]}:
            free[q] = t + max(send[j] for j in members)
    return start, start + np.asarray(dur)


def _units_of(ops, fused) -> dict[int, tuple[int, ...]]:
    """Op index -> the indices of its fused unit, in order (ops not fused are absent)."""
    if not fused:
        return {}
    index = {(o.phase, o.stage, o.microbatch): i for i, o in enumerate(ops)}
    out = {}
    for keys in fused:
        members = tuple(sorted(index[key] for key in keys))
        for i in members:
            out[i] = members
    return out


# ---------------------------------------------------------------------------------------
# building schedules


def schedule(kind: str, num_stages: int, gradient_accumulation: int, training: bool = True,
             recomputation: bool = False, recomputation_mode=None,
             virtual_stages: int | None = None) -> Schedule:
    """The schedule of ``kind`` for ``num_stages`` IPUs (stage k on IPU k, or the chunks
    as :meth:`Schedule.ipu_of` places them).

    ``gradient_accumulation`` is the number of micro-batches per pipeline run
    (TensorFlow's ``gradient_accumulation_count``, PopTorch's ``gradientAccumulation``;
    for inference, ``device_iterations``). With ``recomputation`` every backward
    ``B_k(m)`` is preceded, on its IPU and step, by ``R_k(m)``, which recomputes the stage's
    forward from its stashed input; ``recomputation_mode`` (a :class:`RecomputationMode`,
    default Auto) is checked against the schedule as TensorFlow does.
    ``virtual_stages`` is the number of chunks per IPU: at least 2 for
    ``"interleaved_1f1b"`` (required), 2 for ``"zb_v"`` and ``"dualpipev"`` (the default),
    1 for the others. ZB-H1 and ZB-V need two IPUs or more (the zero-bubble runtime
    refuses one). An inference schedule of these four runs their forwards in the
    training order, as their authors' code does without a backward.
    """
    kind = kind.lower() if isinstance(kind, str) else kind
    if kind not in ALL_KINDS:
        raise PipelineConfigError(
            f"unknown pipeline schedule {kind!r}; use one of {', '.join(ALL_KINDS)}"
        )
    n, g = num_stages, gradient_accumulation
    for name, v in (("num_stages", n), ("gradient_accumulation_count", g)):
        if not is_count(v):
            raise PipelineConfigError(f"{name} must be a positive integer, got {v!r}")
    n, g = int(n), int(g)
    v = _check_virtual_stages(kind, n, g, virtual_stages)
    _check_count(kind, n, g, training)
    mode = resolve_recomputation_mode(kind, recomputation_mode)
    fused: tuple = ()
    if kind in BEYOND_GRAPHCORE:
        ops, fused = _timed(kind, orders_of.units(kind, n, g, v), training)
    else:
        ops = _BUILDERS[kind](n, g) if training else _inference(kind, n, g)
    if recomputation and training:
        ops = _with_recomputation(ops)
        fused = tuple(sum(((("R",) + op[1:], op) if op[0] == "B" else (op,) for op in u), ())
                      for u in fused)
    return Schedule(
        kind=kind,
        num_stages=n,
        gradient_accumulation=g,
        training=bool(training),
        ops=tuple(ops),
        num_steps=max(o.step for o in ops) + 1,
        fifo_depths=_fifo_depths(kind, n, g, ops) if training else (0,) * (n * v),
        recomputation=bool(recomputation and training),
        recomputation_mode=mode.name if recomputation and training else "",
        virtual_stages=v,
        fused=fused,
    )


def _check_virtual_stages(kind, n, g, v) -> int:
    """The number of chunks per IPU, refused where the kind's authors refuse it."""
    where = f"({kind} schedule, {n} IPUs, gradient_accumulation {g})"
    if v is not None and not is_count(v):
        raise PipelineConfigError(f"virtual_stages must be a positive integer, got {v!r}")
    if kind in ("zb_h1", "zb_v") and n < 2:  # sail-sg zerobubble/runtime.py
        raise PipelineConfigError(
            f"zero bubble must be enabled with pipeline parallelism: num_stages is {n} "
            f"{where}. Use num_stages=2 or more.")
    if kind == "interleaved_1f1b":
        if v is None or v < 2:
            raise PipelineConfigError(
                f"virtual_stages is {'not given' if v is None else v}, but the interleaved "
                "1F1B schedule holds several model chunks per IPU (Megatron's "
                f"--virtual-pipeline-model-parallel-size) {where}. Use virtual_stages=2 or "
                "more.")
        if n < 2:  # Megatron parallel_state.initialize_model_parallel
            raise PipelineConfigError(
                "pipeline-model-parallel size should be greater than 1 with interleaved "
                f"schedule: num_stages is {n} {where}. Use num_stages=2 or more.")
        if g % n:  # Megatron schedules.py, forward_backward_pipelining_with_interleaving
            lo, hi = g // n * n, (g // n + 1) * n
            raise PipelineConfigError(
                f"number of microbatches ({g}) is not divisible by pipeline-model-parallel-"
                f"size ({n}) when using interleaved schedule {where}: micro-batches go "
                f"through the chunks in groups of {n}. Use gradient_accumulation "
                + (f"{lo} or {hi}." if lo else f"{hi}."))
        return v
    if kind in orders_of.V_SHAPED:
        if v not in (None, 2):  # torch ScheduleZBVZeroBubble, ScheduleDualPipeV
            raise PipelineConfigError(
                f"ZBV requires exactly 2 stages per rank, but got {v}: the {kind} schedule "
                f"puts two chunks on each IPU in a V {where}. Use virtual_stages=2.")
        if kind == "dualpipev" and g < 2 * n:  # DualPipeV.step, ScheduleDualPipeV
            raise PipelineConfigError(
                "DualPipeV requires at least as many microbatches as stages, but got "
                f"{g} microbatches and {2 * n} stages {where}. Use gradient_accumulation "
                f"{2 * n} or more.")
        return 2
    if v not in (None, 1):
        raise PipelineConfigError(
            f"virtual_stages is {v}, but the {kind} schedule runs one model stage per IPU "
            f"{where}. Use virtual_stages=1, or interleaved_1f1b for several chunks per IPU.")
    return 1


def _timed(kind, units, training) -> tuple[list[Op], tuple]:
    """Per-IPU units (:func:`.schedule_orders.units`) as ops in a dependency-respecting
    order, ``step`` being each op's start when every op lasts one unit of time (each IPU
    starts its next unit as soon as the inputs of all its ops have arrived), and the
    fused units of several ops."""
    if not training:
        units = [[tuple(op for op in u if op[0] == "F") for u in ipu] for ipu in units]
        units = [[u for u in ipu if u] for ipu in units]
    last = max(op[1] for ipu in units for u in ipu for op in u)
    done: dict[tuple, int] = {}  # op -> the step its unit ends (its outputs sent)
    heads, busy = [0] * len(units), [0] * len(units)
    ops: list[Op] = []
    t = 0
    left = sum(map(len, units))
    while left:
        for q, ipu in enumerate(units):
            if heads[q] == len(ipu) or busy[q] > t:
                continue
            unit = ipu[heads[q]]
            if all(_arrived(op, unit, last, done, t) for op in unit):
                busy[q] = t + len(unit)
                for i, op in enumerate(unit):
                    ops.append(Op(t + i, q, *op))
                    done[op] = busy[q]
                heads[q] += 1
                left -= 1
        if max(busy) <= t:  # nothing started or runs, so nothing ever will
            stuck = [f"IPU{q} at {ipu[heads[q]][0][0]}{ipu[heads[q]][0][2]} of stage "
                     f"{ipu[heads[q]][0][1]}" for q, ipu in enumerate(units)
                     if heads[q] < len(ipu)]
            raise PipelineConfigError(f"the {kind} schedule deadlocks at step {t}: "
                                      + ", ".join(stuck))
        t += 1
    fused = tuple(u for ipu in units for u in ipu if len(u) > 1)
    if fused:  # a unit's later ops were listed when it started
        ops.sort(key=lambda o: (o.step, o.ipu))
    return ops, fused


def _arrived(op, unit, last, done, t) -> bool:
    """The inputs of ``op`` from outside its unit have arrived by step ``t``."""
    phase, k, m = op
    if phase == "F":
        return k == 0 or done.get(("F", k - 1, m), t + 1) <= t or ("F", k - 1, m) in unit
    if phase == "B":
        return (done.get(("F", k, m), t + 1) <= t or ("F", k, m) in unit) and (
            k == last or done.get(("B", k + 1, m), t + 1) <= t or ("B", k + 1, m) in unit)
    return done.get(("B", k, m), t + 1) <= t or ("B", k, m) in unit


def _check_count(kind, n, g, training):
    where = f"({kind} schedule, {n} stages, {'training' if training else 'inference'})"
    if kind in ("grouped", "interleaved"):
        overlap = 2 * n if (kind == "grouped" and training) else n
        if g % overlap:
            lo, hi = (g // overlap) * overlap, (g // overlap + 1) * overlap
            use = f"{lo} or {hi}" if lo else f"{hi}"
            raise PipelineConfigError(
                "The number of iterations of the pipeline must be a multiple of "
                f"{overlap}, but gradient_accumulation_count is {g} {where}. Use {use}."
            )
    elif kind == "poptorch" and training and g < 2 * n - 1:
        # PopTorch's Compiler.cpp (its check before PopART's accumulationFactor check)
        raise PipelineConfigError(
            "poptorch.Options().Training.gradientAccumulation must be greater than or equal "
            f"to the number of pipeline stages ({2 * n - 1}) when using "
            f"poptorch.PipelinedExecution. Please note that a model with {n} pipeline "
            f"stages in PopTorch will have an additional {n - 1} stages when training. "
            f"It is {g} {where}: set it to at least {2 * n - 1}."
        )
    elif kind == "poptorch" and g < n:
        raise PipelineConfigError(
            "poptorch.Options().deviceIterations must be greater than or equal to the number "
            f"of pipeline stages ({n}) when using PopTorch.PipelinedExecution. It is {g} "
            f"{where}: set it to at least {n}."
        )


def _grid(n, g):
    """Micro-batch and stage index of every (m, k) pair, stage fastest."""
    m, k = np.divmod(np.arange(n * g), n)
    return m, k


def _ops(step, phase, stage, mb, order):
    """Op records (stage k on IPU k) sorted by (step, order); ``phase`` 0 is F, 1 is B."""
    idx = np.lexsort((order, step))
    names = np.array(["F", "B"])[phase[idx]].tolist()
    stages = stage[idx].tolist()
    return list(map(Op._make, zip(step[idx].tolist(), stages, names, stages,
                                  mb[idx].tolist())))


def _training(n, g, f_step, b_step, f_order, b_order):
    m, k = _grid(n, g)
    cat = np.concatenate
    phase = cat((np.zeros(n * g, np.int64), np.ones(n * g, np.int64)))
    return _ops(cat((f_step(m, k), b_step(m, k))), phase, cat((k, k)), cat((m, m)),
                cat((f_order(m, k), b_order(m, k))))


def _grouped(n, g):
    # Within a timestep TensorFlow runs the stage list in reverse: B0..B(N-1), F(N-1)..F0.
    return _training(n, g, lambda m, k: m + k, lambda m, k: m + 2 * n - 1 - k,
                     lambda m, k: -k, lambda m, k: k - 2 * n + 1)


def _interleaved(n, g):
    # Stage s of F0..F(N-1), B(N-1)..B0 runs micro-batch m in column 2m + s. Micro-batch m
    # is on row m mod N of CircularUnion's offsets, and a column runs its rows in order.
    return _training(n, g, lambda m, k: 2 * m + k, lambda m, k: 2 * m + 2 * n - 1 - k,
                     lambda m, k: m % n, lambda m, k: m % n)


def _sequential(n, g):
    # Each micro-batch runs F0..F(N-1), B(N-1)..B0, one stage per step, except that
    # PipelineStageMerger makes F(N-1) and B(N-1) one stage: 2N-1 steps per micro-batch.
    p = 2 * n - 1
    return _training(n, g, lambda m, k: p * m + k, lambda m, k: p * m + 2 * n - 2 - k,
                     lambda m, k: k, lambda m, k: 2 * n - 1 - k)


def _poptorch(n, g):
    # PopART pipeline stage s (0..2N-2) runs micro-batch c-s in cycle c, stages in order.
    return _training(n, g, lambda m, k: m + k, lambda m, k: m + 2 * n - 2 - k,
                     lambda m, k: k, lambda m, k: 2 * n - 1 - k)


def _gpipe(n, g):
    return _training(n, g, lambda m, k: m + k, lambda m, k: g + 2 * n - 2 + m - k,
                     lambda m, k: k, lambda m, k: k)


def _1f1b(n, g):
    # PipeDream-Flush: stage k runs N-1-k warm-up forwards, then one forward, one backward.
    # With unit times F_k(m) starts at k+m during warm-up, else 2m+k; B_k(m) at 2N-1-k+2m.
    return _training(n, g, lambda m, k: np.where(m < n - k, m + k, 2 * m + k),
                     lambda m, k: 2 * n - 1 - k + 2 * m, lambda m, k: k, lambda m, k: k)


_BUILDERS = {
    "grouped": _grouped,
    "interleaved": _interleaved,
    "sequential": _sequential,
    "poptorch": _poptorch,
    "gpipe": _gpipe,
    "1f1b": _1f1b,
}


def _inference(kind, n, g):
    m, k = _grid(n, g)
    step = n * m + k if kind == "sequential" else m + k
    return _ops(step, np.zeros(n * g, np.int64), k, m, k)


def _with_recomputation(ops):
    out = []
    for o in ops:
        if o.phase == "B":
            out.append(o._replace(phase="R"))
        out.append(o)
    return out


def _fifo_depths(kind, n, g, ops):
    if kind == "grouped" or kind == "poptorch":
        return tuple(2 * (n - 1 - k) for k in range(n))
    if kind == "interleaved":
        return tuple(n - 1 - k for k in range(n))
    if kind == "gpipe":
        return (g - 1,) * n
    if kind == "1f1b":
        return tuple(min(n - k, g) - 1 for k in range(n))
    if kind in BEYOND_GRAPHCORE:  # held from F until the stage's last backward op (B or W)
        last = "W" if kind in SPLIT else "B"
        stages = max(o.stage for o in ops) + 1
        live, most = [0] * stages, [0] * stages
        for o in ops:
            live[o.stage] += {"F": 1, last: -1}.get(o.phase, 0)
            most[o.stage] = max(most[o.stage], live[o.stage])
        return tuple(d - 1 for d in most)
    return (0,) * n
