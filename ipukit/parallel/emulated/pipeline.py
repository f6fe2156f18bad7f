"""A pipeline built once as Poplar programs and run on the emulator:
``pipeline(..., emulate=True)``.

:class:`Emulation` builds the stages (:mod:`.stages`) on one graph, unrolls the
schedule into one program per op (its FIFO and inbox slots fixed in advance; a lock-step
schedule's steps as PopART's pipeline cycles: the ops, then one ``Copy`` of all the
step's inter-IPU sends, ``popprograms.cpp`` ``addPipelineCycle``), adds the
replicas' all-reduce (:mod:`.collectives`) and the optimizer step (:mod:`.optimizer`),
compiles and loads it; :class:`EmulatedPipeline` is the runner's
:class:`~ipukit.parallel.runner.Pipeline` whose ``compile`` and ``run`` do this.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ... import backend
from ...engine import MAX_EMULATED_STEPS, Engine
from ...errors import IpuError, PipelineConfigError
from ...graph import Graph
from ...poplibs import popops, poputil
from ...poplibs.expr import _1
from ...program import Copy, Repeat, Sequence
from ...target import Device, Target
from ...tensor import FLOAT, UNSIGNED_INT, Tensor, concat
from .. import optim, replication
from ..runner import MemoryRecord, Pipeline, PipelineOptions
from . import collectives
from .optimizer import Optimizer
from .results import EmulatedRunResult, OpSteps, bytes_of, timeline_of
from .stages import ConcurrentStage, Stage
from .tensors import Slots, buffer, by_type, flat, leaves, root_of


class Emulation:
    """A pipeline built once as Poplar programs for one micro-batch shape; ``run`` trains.

    With replication every replica is a copy of the stages on its own IPUs; each op runs
    on every replica, and the accumulated gradients are all-reduced by inter-IPU copies
    and adds before the weight update (with RTS: reduced, updated and gathered by shard).
    An inference pipeline (``training=False``) builds the forward stages only: its F ops
    run in the schedule's order, nothing is stashed, the last stage's outputs go to the
    host over an outfeed (and its losses too when ``scored``: a loss and labels).
    """

    def __init__(self, pipeline, micro_batch: int, sample_shape: tuple, scored: bool = True):
        p = self.pipeline = pipeline
        self.key = (micro_batch, tuple(sample_shape), scored)  # what compile() built it for
        self.settings = _settings(p.optimizer) if p.options.training else None
        self.training = p.options.training
        self.scored = self.training or scored
        if p.replication_factor > 1 and any(len(s.ipus) > 1 for s in p.stages):
            raise IpuError("replicated pipelines with a concurrent stage are not emulated "
                           "yet; use emulate=False, or replication_factor=1")
        self.target = p.target
        self.ipus_per_replica = max(q for s in p.stages for q in s.ipus) + 1
        self.device = Device(p.target)
        self.graph = g = Graph(p.target)
        shapes = p._shapes((micro_batch,) + tuple(sample_shape))
        self.replicas = [[(ConcurrentStage if len(s.ipus) > 1 else Stage)(self, s, shape, rep)
                          for s, shape in zip(p.stages, shapes)]
                         for rep in range(p.replication_factor)]
        self.stages = self.replicas[0]
        self.opt = Optimizer(self, p.optimizer) if self.training else None
        n_in = math.prod(self.stages[0].input.shape)
        self.out_shape = () if self.training else tuple(self.stages[-1].result.shape)
        self.streams = []
        for rep in range(p.replication_factor):
            pre = self.replicas[rep][0].pre
            self.streams.append((
                g.add_host_to_device_fifo(pre + "samples", FLOAT, n_in),
                g.add_host_to_device_fifo(pre + "labels", UNSIGNED_INT, micro_batch),
                g.add_device_to_host_fifo(pre + "losses", FLOAT, 1),
                None if self.training else g.add_device_to_host_fifo(
                    pre + "outputs", FLOAT, math.prod(self.out_shape))))
        for s in (s for stages in self.replicas for s in stages):  # what each F stashes
            s.stash = [] if not self.training else (
                [s.input] + ([s.labels] if s.last else []) if p.recomputation else s.saved)
        #: Lock-step schedules (PopART's, TensorFlow's) run a pipeline cycle's inter-IPU
        #: copies together after its compute (:meth:`_unroll`); the others op by op.
        self.grouped = p.schedule.lockstep
        self.ops = _cycle_order(p.schedule, self._late) if self.grouped else p.schedule.ops
        firsts = self._firsts()
        zero = Sequence(*(s.zero_program() for st in self.replicas for s in st))
        #: The steps program 0 emulates in one pipeline run, counted before it is built.
        kinds = Counter((op.phase, op.stage, i in firsts) for i, op in enumerate(self.ops))
        copies = len({op.step for op in self.ops if self._sends(op)}) if self.grouped else 0
        self.steps = leaves(zero) + p.replication_factor * (copies + sum(
            n * self._op_steps(*kind) for kind, n in kinds.items()))
        if self.steps > MAX_EMULATED_STEPS:
            per = (self.steps - leaves(zero)) / p.gradient_accumulation
            raise PipelineConfigError(
                f"gradient_accumulation_count={p.gradient_accumulation} with emulate=True "
                f"would emulate {self.steps:,} steps (compute sets, copies and stream copies) "
                f"in each pipeline run, about {per:,.0f} per micro-batch; the emulator stops "
                f"at {MAX_EMULATED_STEPS:,} a run (debug.maxEmulatedSteps, about 10 us a "
                "step). Use a gradient_accumulation_count of at most "
                f"{int((MAX_EMULATED_STEPS - leaves(zero)) // per):,} with emulate=True, or "
                "emulate=False (the NumPy runner)")
        self.reused = {}  # the views and programs the ops share (_reused)
        programs = self._unroll(firsts)
        if not self.training:  # program 0 runs every op
            self.counts = [0] + [leaves(q) for q in programs]
            self.engine = Engine(g, [Repeat(p.repeat_count, Sequence(*programs))])
            self.engine.load(self.device)
            return
        rts = p.replication_factor if (p.replicated_optimizer_state_sharding
                                       and p.replication_factor > 1) else 1
        steps = Sequence(*(s.update_program(self.opt, rts) for st in self.replicas for s in st))
        update = Sequence(self._bias_corrections(), self._all_reduce(), steps)
        if rts > 1:
            update.add(self._all_gather())
        self.counts = [leaves(zero)] + [leaves(q) for q in programs] + [leaves(update)]
        # one program, one Engine.run per call, as PopART's: the device iterations are a
        # Repeat on the device, each zeroing, running every op and updating the weights
        self.engine = Engine(g, [Repeat(p.repeat_count, Sequence(zero, *programs, update))])
        self.engine.load(self.device)

    def _bias_corrections(self) -> Sequence:
        """Adam's bias corrections ``1 - beta^t`` stepped on the device before each update
        (``c <- (1 - beta) + beta * c``), one compute set per beta and IPU, so the device
        iterations of a call need no host between them."""
        prog = Sequence()
        if self.opt is None or not issubclass(self.opt.kind, optim.Adam):
            return prog
        vgs = {m.ipu: m.vg for st in self.replicas for s in st
               for m in getattr(s, "members", [s])}
        tpi, on = self.target.tiles_per_ipu, {}
        for st in self.opt.state.values():
            tile = int(poputil.tile_of_elements(self.graph, st["corr"])[0])
            on.setdefault(tile // tpi, []).append(st["corr"])
        for q, cs in on.items():
            for i, beta in enumerate(self.opt.opt.betas):
                popops.map(vgs[q], (1 - beta) + beta * _1, [concat([c[i:i + 1] for c in cs])],
                           prog, f"ipu{q}/optimizer/bias correction {i + 1}", inplace=True)
        return prog

    def _write_bias_corrections(self, eng, steps: dict) -> None:
        """Adam's ``1 - beta^t`` at the step each weight has reached (``t`` = its updates
        so far); :meth:`_bias_corrections` steps them on the device before each update."""
        b1, b2 = getattr(self.opt.opt, "betas", (0, 0))
        for (key, rep), st in self.opt.state.items():
            if "corr" in st:
                t = steps[key]
                eng.write_tensor(self.opt.handle(key, rep, "corr"),
                                 np.array([1 - b1**t, 1 - b2**t], np.float32))

    def _all_reduce(self) -> Sequence:
        """Sum (or average) the replicas' accumulators: GCL's ring all-reduce
        (``allReduceCrossReplica``, :func:`.collectives.ring_all_reduce`) over every
        stage's accumulators at once, each ring step one inter-IPU ``Copy`` of all of them
        and one in-place add. With RTS only the reduce-scatter (replica r's shard r of each
        accumulator reduced, the shards of :func:`.replication.shard_bounds`): each replica
        then updates its shard and :meth:`_all_gather` sends the shards round."""
        p, prog = self.pipeline, Sequence()
        count = p.replication_factor
        if count == 1:
            return prog
        parts = [[acc for s in stages for acc in s.accs.values()] for stages in self.replicas]
        scale = 1.0 / count if p.replica_reduction == "MEAN" else None
        if p.replicated_optimizer_state_sharding:
            collectives.ring_reduce_scatter(parts, prog, "gradients",
                                            bounds=replication.shard_bounds, scale=scale)
        else:
            collectives.ring_all_reduce(parts, prog, "gradients", scale=scale)
        return prog

    def _all_gather(self) -> Sequence:
        """RTS: every replica's updated shard of each weight sent round GCL's ring
        (``allGatherCrossReplica``, :func:`.collectives.ring_all_gather`)."""
        prog = Sequence()
        collectives.ring_all_gather([[w for s in stages for w in s.params.values()]
                                     for stages in self.replicas], prog, "weights",
                                    bounds=replication.shard_bounds)
        return prog

    def _firsts(self) -> set[int]:
        """The ops that write a stage's accumulators first in a step (its first B, or its
        first W in a split schedule): they copy instead of adding."""
        phase = "W" if self.pipeline.schedule.split else "B"
        out, seen = set(), set()
        for i, op in enumerate(self.ops):
            if self.training and op.phase == phase and op.stage not in seen:
                seen.add(op.stage)
                out.add(i)
        return out

    def _unroll(self, firsts: set[int]) -> list[Sequence]:
        """One program per schedule op, with its FIFO and inbox slots fixed in advance."""
        p, st = self.pipeline, self.stages
        fifo_slots = [Slots() for _ in st]
        wfifo_slots = [Slots() for _ in st]  # what W needs, from B to W (split schedules)
        inbox = [Slots() for _ in st]  # activations waiting for stage k
        gradbox = [Slots() for _ in st]  # gradients waiting for stage k
        plan, puts = [], []  # grouped: the sends of a step fill their slots at its end
        for i, op in enumerate(self.ops):
            slots = self._plan_op(op, fifo_slots[op.stage], wfifo_slots[op.stage], inbox,
                                  gradbox, puts if self.grouped else None)
            slots["first"] = i in firsts
            plan.append(slots)
            if i + 1 == len(self.ops) or self.ops[i + 1].step != op.step:
                for slots, box, m in puts:
                    slots["send"] = box.put(m)
                puts.clear()
        for s in (s for stages in self.replicas for s in stages):  # buffers, sizes known
            pre = f"{s.pre}stage{s.k}"
            s.fifo = [buffer(s.vg_of(t), t, fifo_slots[s.k].size, f"{pre}/stash FIFO {t.name}")
                      for t in s.stash]
            s.wfifo = [buffer(s.vg, t, wfifo_slots[s.k].size, f"{pre}/W stash {t.name}")
                       for t in s.wsaved] if p.schedule.split else []
            s.inbox = buffer(s.vg, s.input, inbox[s.k].size, f"{pre}/inbox") \
                if s.k else None
            s.gradbox = buffer(s.vg, s.dy, gradbox[s.k].size, f"{pre}/grad inbox") \
                if s.dy is not None else None
        reps = range(p.replication_factor)
        if not self.grouped:
            self.entries = list(self.ops)
            return [Sequence(*(self._op_program(op, slots, rep) for rep in reps))
                    for op, slots in zip(self.ops, plan)]
        # PopART's pipeline cycle (popprograms.cpp, addPipelineCycle): each stage's
        # program, then one fragment of every inter-IPU copy of the cycle; here one Copy
        # of each replica's sends, flattened and joined (kit convention: only the copies
        # of the stages that ran; PopART copies every stage's output in every cycle)
        self.entries, programs = [], []
        sends = [[] for _ in reps]  # each replica's (source, destination) of this cycle
        for i, op in enumerate(self.ops):
            programs.append(Sequence(*(self._op_program(op, plan[i], rep, sends[rep])
                                       for rep in reps)))
            self.entries.append(op)
            if (i + 1 == len(self.ops) or self.ops[i + 1].step != op.step) and sends[0]:
                programs.append(Sequence(*(self._joined_copy(pairs) for pairs in sends)))
                self.entries.append(None)  # the cycle's inter-IPU copies
                sends = [[] for _ in reps]
        return programs

    def _plan_op(self, op, fifo, wfifo, inbox, gradbox, puts=None) -> dict:
        """The FIFO and inbox slots ``op`` uses; its send's slot is put at once, or with
        ``puts`` given, left for the caller, as (slots, buffer, micro-batch)."""
        k, m, last = op.stage, op.microbatch, len(self.stages) - 1
        slots = {}

        def send(box):
            if puts is None:
                slots["send"] = box.put(m)
            else:
                puts.append((slots, box, m))

        if op.phase == "F":
            if k > 0:
                slots["in"] = inbox[k].take(m)
            if self.training:  # inference stashes nothing
                slots["push"] = fifo.put(m)
            if k < last:
                send(inbox[k + 1])
        elif op.phase == "R":
            slots["pop"] = fifo.take(m)
        elif op.phase == "W":
            slots["wpop"] = wfifo.take(m)
        else:
            if not self.pipeline.recomputation:
                slots["pop"] = fifo.take(m)
            if k < last:
                slots["dy"] = gradbox[k].take(m)
            if k > 0:
                send(gradbox[k - 1])
            if self.pipeline.schedule.split:
                slots["wpush"] = wfifo.put(m)
        return slots

    def _op_program(self, op, slots, rep, sends=None) -> Sequence:
        """The program of ``op`` on replica ``rep``; its copies to the next or previous
        stage are added to ``sends`` (a list of (source, destination)) when given."""
        stages = self.replicas[rep]
        s = stages[op.stage]
        x_stream, y_stream, loss_stream, out_stream = self.streams[rep]
        prog = Sequence()
        if "pop" in slots:
            for t, f in zip(s.stash, s.fifo):
                prog.add(self._copy(self._slot(f, slots["pop"]), t))
        if op.phase == "F":
            prog.add(self._copy(x_stream, s.input) if s.k == 0
                     else self._copy(self._slot(s.inbox, slots["in"]), s.input))
            if s.last and self.scored:
                prog.add(self._copy(y_stream, s.labels))
        if op.phase in ("F", "R"):
            prog.add(s.forward)
            if s.last and op.phase == "F" and self.scored:
                prog.add(self._copy(s.loss, loss_stream))
            if s.last and out_stream is not None:
                prog.add(self._copy(s.result, out_stream))
        if "push" in slots:
            for t, f in zip(s.stash, s.fifo):
                prog.add(self._copy(t, self._slot(f, slots["push"])))
        out = []  # (source, destination) to the next or previous stage
        if op.phase == "F" and "send" in slots:
            inbox = self._slot(stages[s.k + 1].inbox, slots["send"])
            out += [(c.src, c.dst) for c in s.sends(inbox)]
        if op.phase == "B":
            if "dy" in slots:
                prog.add(self._copy(self._slot(s.gradbox, slots["dy"]), s.dy))
            prog.add(s.first_backward if slots["first"] else s.backward)
            for t, f in zip(s.wsaved, s.wfifo):  # what the W needs, kept till it runs
                prog.add(self._copy(t, self._slot(f, slots["wpush"])))
            if "send" in slots:
                out.append((s.dx, self._slot(stages[s.k - 1].gradbox, slots["send"])))
        if sends is None:
            for src, dst in out:
                prog.add(self._copy(src, dst))
        else:
            sends += out
        if op.phase == "W":
            for t, f in zip(s.wsaved, s.wfifo):
                prog.add(self._copy(self._slot(f, slots["wpop"]), t))
            prog.add(s.first_weight if slots["first"] else s.weight)
        return prog

    # A later micro-batch's op that uses the same slots adds the same programs again (each
    # compiles once, as the stage's compute sets do): one view per slot, one Copy per pair.
    def _reused(self, key: tuple, make):
        """What ``make()`` gives, made once per ``key`` (a kind, then tensors and slots; a
        tensor is equal only to itself, and the dict keeps it: no id of a freed one)."""
        if key not in self.reused:
            self.reused[key] = make()
        return self.reused[key]

    def _slot(self, buf: Tensor, i: int) -> Tensor:
        """``buf[i]``, slot ``i`` of a FIFO or an inbox."""
        return self._reused(("slot", buf, i), lambda: buf[i])

    def _copy(self, src, dst) -> Copy:
        """``Copy(src, dst)``."""
        return self._reused(("copy", src, dst), lambda: Copy(src, dst))

    def _joined_copy(self, pairs: list) -> Sequence:
        """One ``Copy`` of every (source, destination) in ``pairs``, each side flattened and
        joined (``poplar::concat``), one per type: one exchange of all of them."""
        return self._reused(("joined",) + tuple(t for pair in pairs for t in pair),
                            lambda: Sequence(*(Copy(flat(a for a, _ in rows),
                                                    flat(b for _, b in rows))
                                               for rows in by_type(pairs).values())))

    def _late(self, op) -> bool:
        """Whether ``op`` runs after its stage's other ops of its step: a forward that
        sends (a backward's stash restore or a recomputation rewrites its output), or the
        backward of a last stage whose input gradient is a tensor the forward writes (a
        loss stage without layers: the loss's gradient), with its recomputation."""
        s = self.stages[op.stage]
        if op.phase == "F":
            return self._sends(op)
        return (op.phase in "BR" and s.last and s.dx is not None
                and any(root_of(s.dx) is root_of(t) for t in s.saved))

    def _sends(self, op) -> bool:
        """Whether ``op`` copies to another stage: a forward to the next, a backward to
        the previous (training)."""
        return (op.phase == "F" and op.stage < len(self.stages) - 1
                or op.phase == "B" and op.stage > 0)

    def _op_steps(self, phase: str, k: int, first: bool) -> int:
        """The steps (copies, compute sets) of the program of an op of ``phase`` on stage
        ``k`` on one replica, counted as :meth:`_op_program` builds it, from the stage's
        programs alone (its sends too when they are not grouped by cycle)."""
        s, last = self.stages[k], len(self.stages) - 1
        split, inline = self.pipeline.schedule.split, not self.grouped  # (its sends)
        if phase == "W":
            return len(s.wsaved) + leaves(s.first_weight if first else s.weight)
        pops = len(s.stash) if phase == "R" or (
            phase == "B" and not self.pipeline.recomputation) else 0
        if phase == "B":
            return (pops + (k < last) + leaves(s.first_backward if first else s.backward)
                    + (len(s.wsaved) if split else 0) + (k > 0 and inline))
        n = pops + leaves(s.forward) + (s.last and not self.training)  # R, or F: and
        if phase == "F":  # its input, the labels and the loss, its stash, its sends
            n += 1 + 2 * (s.last and self.scored) + len(s.stash)
            n += len(s.sends(self.stages[k + 1].input)) if k < last and inline else 0
        return n

    # -- running --------------------------------------------------------------------------
    def run(self, xs, ys):
        """Train on ``xs[r, replica, m]`` for every pipeline run (device iteration) ``r``,
        all of them in ONE ``Engine.run``: each replica's samples and labels for the whole
        call stream in over its host streams, a micro-batch per F of its first (last)
        stage, as PopTorch's host streams feed a call. Returns the losses ``(repeat,
        replica, micro-batch)``, per op the trace events it made, and (inference) the last
        stage's outputs ``(repeat, replica, micro-batch, ...)``, else None."""
        p, eng, training = self.pipeline, self.engine, self.training
        for st in self.replicas:
            for s in st:
                for name in s.params:
                    eng.write_tensor(f"{s.pre}{s.k}.{name}",
                                     backend.to_numpy(p.stages[s.k].params[name]))
        steps = self.opt.write(eng) if training else {}
        if training:
            self._write_bias_corrections(eng, steps)
        f0 = [o.microbatch for o in self.ops if o.phase == "F" and o.stage == 0]
        fl = [o.microbatch for o in self.ops if o.phase == "F" and o.stage == len(p.stages) - 1]
        runs = p.repeat_count
        shape = (runs, p.replication_factor, p.gradient_accumulation)
        outs, results = [], []
        for rep, st in enumerate(self.replicas):
            pre = st[0].pre
            eng.connect_stream(pre + "samples", np.ascontiguousarray(xs[:, rep][:, f0],
                                                                     np.float32))
            if self.scored:
                eng.connect_stream(pre + "labels",
                                   np.ascontiguousarray(ys[:, rep][:, fl]).astype(np.uint32))
                outs.append(np.zeros((runs, len(fl)), np.float32))
                eng.connect_stream(pre + "losses", outs[-1])
            if not training:
                results.append(np.zeros((runs, len(fl)) + self.out_shape, np.float32))
                eng.connect_stream(pre + "outputs", results[-1])
        pos = len(eng.trace) + 1  # after the host sync
        eng.run(0)
        losses = np.zeros(shape if self.scored else shape[:2] + (0,))
        outputs = None if training else np.zeros(shape + self.out_shape, np.float32)
        for rep, out in enumerate(outs):
            losses[:, rep, fl] = out
        for rep, out in enumerate(results):
            outputs[:, rep, fl] = out
        records = []
        for r in range(runs):
            pos += self.counts[0]  # the zeroing
            step = -1  # (a copy record follows the ops of its step)
            for i, op in enumerate(self.entries):
                n = self.counts[i + 1]
                records.append(OpSteps(r, "copy", -1, -1, -1, pos, pos + n, step)
                               if op is None else
                               OpSteps(r, op.phase, op.stage, op.microbatch,
                                       self.stages[op.stage].ipu, pos, pos + n, op.step))
                step = -1 if op is None else op.step
                pos += n
            if training:
                records.append(OpSteps(r, "optimizer", -1, -1, -1, pos, pos + self.counts[-1]))
                pos += self.counts[-1]
        if not training:
            return losses, records, outputs
        self.opt.read(eng, steps, runs)
        xp = backend.get_xp()
        for s in self.stages:
            for name in s.params:
                p.stages[s.k].params[name][...] = xp.asarray(eng.read_tensor(f"{s.k}.{name}"))
        return losses, records, None





def _cycle_order(sched, late) -> tuple:
    """The ops of a lock-step schedule in the order the emulator runs them: the
    schedule's, but an op ``late(op)`` says must run last among its stage's ops of its
    step (its send's source would be overwritten by them) moves there, with the others
    so moved in their order (kit convention: the kit restores a stash into the stage's
    own tensors, where PopART's restore ops write new ones; a stage's ops of one step
    are independent but for the last stage's F, R and B of one micro-batch, which keep
    their order)."""
    ops = sched.ops
    at = {(o.step, o.stage): i for i, o in enumerate(ops)}  # a stage's last op in a step
    keys = [(at[o.step, o.stage] + 0.5 if late(o) else i, i) for i, o in enumerate(ops)]
    return tuple(ops[i] for i in sorted(range(len(ops)), key=keys.__getitem__))


def compile(p, x, labels) -> Emulation:  # noqa: A001 - PopTorch's name
    """``Pipeline.compile`` on the emulator: the :class:`Emulation` for inputs shaped like
    ``x`` (and ``labels``), built, compiled and loaded once per micro-batch shape and kept
    on the pipeline, so ``run`` finds it ready (PopTorch's ``PoplarExecutor.compile``).

    The programs hold the optimiser's settings as constants: when they have changed since
    the build (``model.optimizer.lr = 0.01``, or another optimiser), it builds them again.
    (kit convention: PopTorch keeps the learning rate (and every setting passed to the
    optimiser's constructor) in device variables; a change reaches the IPU, without a
    recompile, when the model's ``setOptimizer(optimizer)`` is called, and changing a
    constant setting after compiling is an error. The kit has no ``setOptimizer``: a
    changed setting applies from the next call, on the emulator as in the NumPy runner.)

    >>> from ipukit.parallel import nn, optim, training_model, Block
    >>> m = training_model([Block("A", nn.Dense(4, 3, rng=1), ipu_id=0)],
    ...                    nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
    ...                    gradient_accumulation=2, emulate=True)
    >>> x, y = np.ones((4, 4), np.float32), np.arange(4) % 3
    >>> emu = compile(m, x, y)
    >>> emu.key, compile(m, x, y) is emu  # (micro-batch, sample shape, scored): kept
    ((2, (4,), True), True)
    >>> m.optimizer.lr = 0.01
    >>> compile(m, x, y) is emu  # a new learning rate: built again
    False
    """
    x, labels, mb = p._inputs(x, labels)
    scored = p.options.training or (p.loss is not None and labels is not None)
    key = (mb, tuple(np.shape(x)[1:]), scored)
    cache = p.__dict__.setdefault("_emulations", {})
    if key not in cache or (p.options.training
                            and cache[key].settings != _settings(p.optimizer)):
        cache[key] = Emulation(p, *key)
    return cache[key]


def _settings(opt) -> tuple:
    """What the programs bake in of an optimiser: which one it is and every setting (its
    ``lr``, ``momentum``, ``betas``, ...), not its state (that goes to the device at every
    call)."""
    return (id(opt), type(opt), {k: v for k, v in vars(opt).items() if k != "state"})


def run(p, x, labels) -> EmulatedRunResult:
    """``Pipeline.run`` on the emulator (``pipeline(..., emulate=True)``); an inference
    pipeline's scores ``labels`` when it has a loss (``labels`` may be None)."""
    emu = compile(p, x, labels)
    mb, sample_shape, scored = emu.key
    shape = (p.repeat_count, p.replication_factor, p.gradient_accumulation, mb)
    xs = np.asarray(x).reshape(shape + sample_shape)
    ys = np.asarray(labels).reshape(shape) if scored else None
    start = len(emu.engine.trace)
    losses, ops, results = emu.run(xs, ys)
    trace = emu.engine.trace
    ops = tuple(OpSteps(o.run, o.phase, o.stage, o.microbatch, o.ipu, o.first, o.end,
                        o.step) for o in ops)
    origin = float(trace._starts[start])  # the host sync of this call
    per_ipu: dict[int, tuple] = {}  # the stages on each IPU (chunks share one)
    for s in emu.stages:
        per_ipu[s.ipu] = tuple(a + b for a, b in zip(per_ipu.get(s.ipu, (0,) * 4),
                                                     bytes_of(emu, s)))
    sizes = list(per_ipu.items())
    timeline = timeline_of(emu, trace, ops, origin, sizes, start)
    memory = tuple(MemoryRecord(0.0, q, *b) for q, b in sizes)
    cycles = float(trace.total_cycles - trace._starts[start]) if len(trace) > start else 0.0
    outputs = results if results is not None else replication.select_outputs(
        losses, p.output_mode, p.output_return_period)
    return EmulatedRunResult(losses, timeline, memory, cycles, 0, p.target.clock_hz, outputs,
                             trace, ops, origin)


class EmulatedPipeline(Pipeline):
    """A :class:`~ipukit.parallel.runner.Pipeline` whose ``compile`` and ``run`` build its
    stages as Poplar programs and run them on the emulator (``PipelineOptions(emulate=True)``:
    ``pipeline(..., emulate=True)``, ``training_model(..., emulate=True)``). The result is
    an :class:`~.results.EmulatedRunResult`; ``predict`` and ``cycles_per_run`` are the
    runner's."""

    emulates = True

    def compile(self, x, labels=None) -> None:  # noqa: A003 - PopTorch's name
        compile(self, x, labels)

    compile.__doc__ = Pipeline.compile.__doc__

    def run(self, x, labels=None) -> EmulatedRunResult:
        """``Pipeline.run`` on the emulator; an inference pipeline scores ``labels`` when
        it has a loss (``labels`` may be None)."""
        return run(self, x, labels)


def build(stages, device_mapping, options: PipelineOptions, optimizer, loss,
          target: Target | None = None) -> Pipeline:
    """The runner's :class:`Pipeline` for ``options`` (NumPy arithmetic), or with
    ``options.emulate`` its :class:`EmulatedPipeline` (Poplar programs)."""
    kind = EmulatedPipeline if options.emulate else Pipeline
    return kind(stages, device_mapping, options, optimizer, loss, target)
