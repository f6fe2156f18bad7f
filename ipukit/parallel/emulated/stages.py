"""Stage building: each stage (or member of a concurrent stage) as Poplar programs on its
IPU's tiles.

:class:`Stage` is one stage on a virtual graph of its IPU (``Graph::createVirtualGraph``):
its weights, gradients and accumulators as tile variables (:mod:`.tensors`), its forward
built from PopLibs ops (:mod:`.layers`; the loss a softmax and ``popnn.calc_loss``), its
backward, and once per run the zeroing of its accumulators and its weight update.
:class:`ConcurrentStage` is a concurrent stage: members side by side on their IPUs, the
collectives between them from :mod:`.collectives` and :mod:`.sharded`.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import IpuError
from ...poplibs import poplin, popnn, popops, poputil
from ...poplibs.expr import _1, _2, _3
from ...program import Copy, Sequence
from ...tensor import FLOAT, INT, UNSIGNED_INT, Tensor
from .. import nn, replication
from . import sharded as es
from .collectives import Shards
from .layers import (
    bias_grad,
    conv_forward,
    conv_input_grad,
    conv_weight_grad,
    layers_of,
    maxpool_backward,
    param_key,
    windows,
)
from .tensors import by_type, flat, joined, linear, map_like, of_type


class Stage:
    """One stage's tensors and programs on its IPU's virtual graph."""

    def __init__(self, emu, stage, in_shape, replica: int = 0, member=None):
        # member: (index s, layer, IPU) of a concurrent stage's member, built as a stage
        # without a loss whose parameters are named "<s>.<name>"
        self.k, self.emu, self.replica = stage.index, emu, replica
        self.net = stage.net if member is None else member[1]
        self.prefix = "" if member is None else f"{member[0]}."
        self.ipu = replica * emu.ipus_per_replica + (stage.ipus[0] if member is None
                                                     else member[2])
        g, tpi = emu.graph, emu.target.tiles_per_ipu
        self.vg = vg = g.create_virtual_graph(self.ipu * tpi, (self.ipu + 1) * tpi)
        p, k = emu.pipeline, self.k
        self.pre = pre = f"replica{replica}/" if replica else ""
        if member is not None:
            self.pre = pre = f"{pre}member{member[0]}/"
        self.last = k == len(p.stages) - 1 and member is None
        self.params: dict[str, Tensor] = {}
        self.accs: dict[str, Tensor] = {}
        values = stage.params if member is None else {
            self.prefix + n: v for n, v in member[1].params.items()}
        for name, value in values.items():
            if np.dtype(value.dtype) != np.float32:
                raise IpuError(
                    f"stage {k} parameter '{name}' is {value.dtype}: the emulator runs "
                    "float32 weights (Poplar's FLOAT); build the layers with dtype='float32' "
                    "or use emulate=False"
                )
        # The weights (and the accumulators of each type) are one variable of the stage,
        # each weight a view of it: joined, they are one region, what the merged updates
        # (PopART's mergeVarUpdate) work on, as Poplar's concatenated views are.
        self.weights = joined(vg, FLOAT, {n: tuple(v.shape) for n, v in values.items()},
                              f"{pre}stage{k}/weights")
        for name, view in self.weights.views.items():
            self.params[name] = view
            handle = f"{self.pre if member is None else pre.rpartition('member')[0]}{k}.{name}"
            g.create_host_write(handle, view)
            g.create_host_read(handle, view)
        self.acc_groups: dict = {}  # type -> its accumulators joined (RUNNING_MEAN's n too)
        if emu.training:
            self._accumulators(values, p.accumulation_dtypes[k])
            # a micro-batch's gradients, written by the backward (mat_mul_with_output)
            # where their weights are, as PopLibs' weight-update pass lays them out: one
            # region, accumulated by one compute set without exchange or index arrays
            self.grads = joined(vg, FLOAT, {n: tuple(v.shape) for n, v in values.items()},
                                f"{pre}stage{k}/gradients")
        self.input = linear(vg, FLOAT, in_shape, f"{pre}stage{k}/input")
        self.forward = Sequence()
        self.saved: list[Tensor] = []  # what the backward reads: the stash of one op
        self.acts = self._build_forward(in_shape)
        self.output = self.result = self.acts[-1]  # result: what goes to the host
        if self.last and emu.scored:
            self._build_loss()
        self.backward = self.first_backward = Sequence()  # (first: a step's first B)
        self.weight = self.first_weight = Sequence()  # W, of a split schedule
        self.wsaved: list[Tensor] = []  # what B leaves for W (split schedules)
        self.written: set = set()  # accumulator types the first gradients write (not zeroed)
        self.dy = self.dx = None
        if emu.training:
            self.dy = None if self.last else linear(vg, FLOAT, self.output.shape,
                                                    f"{pre}stage{k}/output grad")
            self.dx = self._build_backward()

    def _accumulators(self, values: dict, dtypes: dict) -> None:
        """One variable per type holding its gradient accumulators, each mapped like its
        weight; the float one ends with RUNNING_MEAN's n (``self.count``)."""
        types = {n: np.dtype(dtypes[n]) for n in values}
        for name, dt in types.items():
            if dt not in (np.float32, np.float16):
                raise IpuError(
                    f"gradient_accumulation_dtype {dt} for {self.k}.{name}: the emulator "
                    "accumulates in float32 or float16; use emulate=False for others")
        w = self.weights
        size = w.all.num_elements()
        tiles = None  # (each weight element's tile, where the types are mixed)
        for dt in dict.fromkeys([*types.values(), FLOAT]):
            mine = {n: tuple(v.shape) for n, v in values.items() if types[n] == dt}
            if dt == FLOAT:
                mine[None] = (1,)  # n, on the weights' last tile
            acc = joined(self.vg, dt, mine, f"{self.pre}stage{self.k}/accumulators"
                         + of_type(dt), mapped=False)
            if values and list(mine) == [*values, None]:  # the weights' mapping (as runs
                poputil._map_copies(self.vg, acc.all.slice(0, size), w.all, 1)  # of tiles)
                last = poputil.tile_of_elements(self.vg, w.all.slice(size - 1, size))
                poputil._map_elements(self.vg, acc.views[None].flatten(), last)
            else:  # (types mixed: each accumulator mapped like its weight, element-wise)
                if tiles is None:
                    tiles = (poputil.tile_of_elements(self.vg, w.all) if values
                             else np.zeros(1, np.intp))
                poputil._map_elements(self.vg, acc.all, np.concatenate(
                    [tiles[w.bounds[n]] if n is not None else tiles[-1:] for n in mine]))
            self.acc_groups[dt] = acc
            self.accs.update((n, acc.views[n]) for n in mine if n is not None)
        self.count = self.acc_groups[FLOAT].views[None]

    # -- forward ------------------------------------------------------------------------
    def _build_forward(self, shape) -> list[Tensor]:
        vg, prog, k = self.vg, self.forward, self.k
        acts = [self.input]
        for i, layer in enumerate(layers_of(self.net)):
            x, name = acts[-1], f"{self.pre}stage{k}/{i}.{type(layer).__name__}"
            if isinstance(layer, nn.Dense):
                w = self.params[self.prefix + param_key(self.net, i, "weight")]
                b = self.params[self.prefix + param_key(self.net, i, "bias")]
                y = poplin.mat_mul(vg, x, w, prog, name)
                popops.add_in_place(vg, y, b, prog, name + "/bias")
                self._save(x)
            elif isinstance(layer, nn.ReLU):
                y = popnn.non_linearity(vg, popnn.NonLinearityType.RELU, x, prog, name)
                self._save(y)
            elif isinstance(layer, nn.Flatten):
                y = x.reshape([x.shape[0], math.prod(x.shape[1:])])
            elif isinstance(layer, nn.Conv2D):
                w = self.params[self.prefix + param_key(self.net, i, "weight")]
                b = self.params[self.prefix + param_key(self.net, i, "bias")]
                y = conv_forward(vg, layer, x, w, b, prog, name)
                self._save(x)
            elif isinstance(layer, nn.MaxPool2D):
                y = popops.reduce(vg, windows(x), [4], popops.Operation.MAX, prog, name)
                self._save(x)
            else:
                raise IpuError(
                    f"stage {k} layer {i} is {layer!r}: the emulator builds Dense, ReLU, "
                    "Flatten, Conv2D and MaxPool2D from PopLibs ops (poplin.mat_mul, popnn, "
                    "popops); run this model with emulate=False"
                )
            acts.append(y)
        return acts

    def vg_of(self, t: Tensor):
        """The virtual graph holding ``t`` (this stage's)."""
        return self.vg

    def sends(self, dst: Tensor) -> list:
        """Copies of this stage's output into the next stage's inbox slot ``dst``."""
        return [Copy(self.output, dst)]

    def _save(self, t: Tensor) -> None:
        if not any(t is s for s in self.saved):
            self.saved.append(t)

    def _build_loss(self):
        vg, prog, k = self.vg, self.forward, f"{self.pre}stage{self.k}"
        logits = self.output
        if logits.rank != 2:
            raise IpuError(f"the last stage's outputs have shape {logits.shape}; the loss "
                           "takes (micro-batch, classes) logits")
        mb = logits.shape[0]
        self.labels = linear(vg, UNSIGNED_INT, [mb], f"{k}/labels")
        probs = popnn.non_linearity(vg, popnn.NonLinearityType.SOFTMAX, logits, prog,
                                    f"{k}/softmax")
        per_sample = linear(vg, FLOAT, [mb], f"{k}/loss per sample")
        delta = vg.add_variable(FLOAT, logits.shape, f"{k}/delta")
        map_like(vg, delta, logits)
        correct = linear(vg, UNSIGNED_INT, [1], f"{k}/num correct")
        prog.add(popnn.calc_loss(vg, probs, self.labels, per_sample, delta, correct,
                                 popnn.CROSS_ENTROPY_LOSS, f"{k}/calcLoss"))
        total = popops.reduce(vg, per_sample, [0], popops.Operation.ADD, prog,
                              f"{k}/loss sum")
        self.loss = popops.map(vg, _1 * (1.0 / mb), [total.reshape([1])], prog,
                               f"{k}/mean loss")
        if self.emu.training:  # inference scores only
            self.dlogits = popops.map(vg, _1 * (1.0 / mb), [delta], prog, f"{k}/dlogits")
            self._save(self.dlogits)

    # -- backward -----------------------------------------------------------------------
    def _build_backward(self) -> Tensor | None:
        """The backward of one micro-batch, layer by layer from the last: each layer's
        weight gradients (written where the weights are) and its input gradient, then
        the accumulation. A split schedule runs them as two ops: ``backward`` (B) the
        input gradients alone, ``weight`` (W) the weight gradients and the accumulation,
        from what B left in ``wsaved`` (each weighted layer's input and output gradient:
        the zero-bubble paper's M_W)."""
        vg, k, p = self.vg, self.k, self.emu.pipeline
        pre = f"{self.pre}stage{k}"
        dy = self.dlogits if self.last else self.dy
        layers = layers_of(self.net)
        inputs, weights = [], []  # per layer from the last: its B part and its W part
        self.wsaved: list[Tensor] = []
        for i in reversed(range(len(layers))):
            layer, x, y = layers[i], self.acts[i], self.acts[i + 1]
            name = f"{pre}/{i}.{type(layer).__name__}/grad"
            first = i == 0 and k == 0  # nothing to send back: skip the input gradient
            keys = [self.prefix + param_key(self.net, i, s) for s in ("weight", "bias")]
            bp, wp = Sequence(), Sequence()
            inputs.append(bp)
            weights.append(wp)
            if isinstance(layer, (nn.Dense, nn.Conv2D)):
                w, (gw, gb) = self.params[keys[0]], (self.grads.views[n] for n in keys)
                self.wsaved += [t for t in (x, dy) if not any(t is u for u in self.wsaved)]
            if isinstance(layer, nn.Dense):
                poplin.mat_mul_with_output(vg, x.transpose(), dy, gw, wp, name + "/weight")
                bias_grad(vg, dy, [0], gb, wp, name + "/bias")
                dy = None if first else poplin.mat_mul(vg, dy, w.transpose(), bp,
                                                       name + "/input")
            elif isinstance(layer, nn.ReLU):
                dy = popnn.non_linearity_input_gradient(vg, popnn.NonLinearityType.RELU, y,
                                                        dy, bp, name)
            elif isinstance(layer, nn.Conv2D):
                conv_weight_grad(vg, layer, x, dy, (gw, gb), wp, name)
                dy = None if first else conv_input_grad(vg, layer, x, w, dy, bp, name)
            elif isinstance(layer, nn.MaxPool2D):
                dy = None if first else maxpool_backward(vg, x, dy, bp, name)
            else:  # Flatten
                dy = dy.reshape(x.shape)
            if dy is None:
                break
        accumulate, first_accumulate = self._accumulation()
        if p.schedule.split:
            self.backward = self.first_backward = Sequence(*inputs)
            self.weight = Sequence(*weights, accumulate)
            self.first_weight = Sequence(*weights, first_accumulate)
        else:  # each layer's weight gradients, then its input gradient
            both = [q for pair in zip(weights, inputs) for q in pair]
            self.backward = Sequence(*both, accumulate)
            self.first_backward = Sequence(*both, first_accumulate)
        return dy

    def _accumulation(self) -> tuple[Sequence, Sequence]:
        """A micro-batch's gradients added into the accumulators: one op per type over
        every accumulator and (float) gradient (mergeVarUpdate); and the same for a
        step's first gradients, which a lone stage copies to its float accumulators
        (nothing to zero)."""
        vg, p, pre = self.vg, self.emu.pipeline, f"{self.pre}stage{self.k}"
        every, first = Sequence(), Sequence()
        for (dt, _), rows in by_type((self.accs[n], self.grads.views[n])
                                     for n in self.params).items():
            acc, g = flat(a for a, _ in rows), flat(g for _, g in rows)
            name, step = f"{pre}/accumulate{of_type(dt)}", Sequence()
            if dt != FLOAT:
                g = popops.cast(vg, g, dt, step, f"{name}/cast")
            if p.reduction == "RUNNING_MEAN":
                n = self.count if dt == FLOAT else popops.cast(vg, self.count, dt, step,
                                                               f"{name}/n")
                popops.map(vg, _1 * (_3 / (_3 + 1.0)) + _2 * (1.0 / (_3 + 1.0)), [acc, g, n],
                           step, f"{pre}/running mean{of_type(dt)}", inplace=True)
            else:
                popops.add_in_place(vg, acc, g, step, name)
            every.add(step)
            if p.reduction != "RUNNING_MEAN" and dt == FLOAT and not self.prefix:
                first.add(Copy(g, acc))
                self.written.add(dt)
            else:
                first.add(step)
        if p.reduction == "RUNNING_MEAN":  # (after the running means, which read n)
            step = Sequence()
            popops.add_in_place(vg, self.count, 1.0, step, f"{pre}/count")
            every.add(step)
            first.add(step)
        return every, first

    # -- once per run -------------------------------------------------------------------
    def zero_program(self) -> Sequence:
        """The accumulators and RUNNING_MEAN's count zeroed: one op per type (not those
        the first B writes)."""
        prog, pre = Sequence(), f"{self.pre}stage{self.k}"
        for dt, acc in self.acc_groups.items():
            if dt in self.written:
                continue
            popops.zero(self.vg, acc.all, prog, f"{pre}/zero accumulators{of_type(dt)}")
        return prog

    def update_program(self, opt, shards: int = 1) -> Sequence:
        """The optimiser on this replica's weights (its shard of each with RTS): one
        update of them all."""
        k, parts = self.k, []
        for name, w in self.params.items():
            g = self.accs[name]
            if shards == 1:
                parts.append((f"{k}.{name}", w, g))
                continue
            lo, hi = replication.shard_bounds(w.num_elements(), shards)[self.replica]
            if hi > lo:
                parts.append((f"{k}.{name}/rts{self.replica}", w.flatten()[lo:hi],
                              g.flatten()[lo:hi]))
        prog, p = Sequence(), self.emu.pipeline
        if parts:  # MEAN's 1/G folded into the update, as PopART folds it into its scalars
            opt.build(self.vg, parts, prog, self.replica if shards == 1 else 0,
                      f"{self.pre}stage{k}/optimizer",
                      1.0 / p.gradient_accumulation if p.reduction == "MEAN" else 1.0)
        return prog


class ConcurrentStage:
    """A concurrent stage: members side by side on their IPUs (``device_mapping`` entry
    ``[1, 2]``). The input is copied from the first member's IPU to the others (to_all),
    outputs go to the next stage as slices of its inbox (concatenated), the output
    gradient's slices go to the members and their input gradients are added onto the
    first IPU. As the last stage its loss is the sharded softmax cross-entropy (all-reduce
    MAX and ADD as inter-IPU copies and reductions, the logits never gathered)."""

    def __init__(self, emu, stage, in_shape, replica: int = 0):
        p = emu.pipeline
        self.emu, self.k, self.replica = emu, stage.index, replica
        self.members = [Stage(emu, stage, in_shape, replica, (j, m, q))
                        for j, (m, q) in enumerate(zip(stage.net.members, stage.ipus))]
        first = self.members[0]
        self.vg, self.ipu, self.pre = first.vg, first.ipu, first.pre.rpartition("member")[0]
        self.last = self.k == len(p.stages) - 1
        self.params = {n: t for m in self.members for n, t in m.params.items()}
        self.accs = {n: t for m in self.members for n, t in m.accs.items()}
        self.input = first.input
        pre = f"{self.pre}stage{self.k}"
        self.forward, self.backward = Sequence(), Sequence()
        self.first_backward = self.backward  # (its members zero their accumulators)
        self.wsaved: list[Tensor] = []  # (the runner splits no concurrent backward)
        for m in self.members[1:]:
            self.forward.add(Copy(self.input, m.input))  # to_all
        for m in self.members:
            self.forward.add(m.forward)
        self.saved = [t for m in self.members for t in m.saved]
        self.dy = None
        widths = [m.output.shape[-1] for m in self.members]
        self.bounds = np.cumsum([0] + widths)
        shape = self.members[0].output.shape[:-1] + (int(self.bounds[-1]),)
        self.output = self.result = None
        if self.last and not emu.training:  # inference: the outputs joined on IPU 0
            self.result = linear(self.vg, FLOAT, shape, f"{pre}/outputs")
            for c in self.sends(self.result):
                self.forward.add(c)
        if self.last and emu.scored:
            self._build_sharded_loss(pre)
        elif not self.last and emu.training:
            self.dy = linear(self.vg, FLOAT, shape, f"{pre}/output grad")
            for m, c0, c1 in zip(self.members, self.bounds, self.bounds[1:]):
                self.backward.add(Copy(self.dy[..., int(c0):int(c1)], m.dy))
        for m in self.members:
            self.backward.add(m.backward)
        self.dx = None
        if self.k > 0 and emu.training:  # to_all's backward: input gradients onto IPU 0
            sh = Shards([m.vg for m in self.members], self.backward)
            self.dx = sh.reduce_onto_first([m.dx for m in self.members], f"{pre}/input grad")

    def _build_sharded_loss(self, pre):
        """The sharded softmax cross-entropy of :mod:`.emulated_sharded` (the builders the
        tied embedding uses), its fused backward run in the forward and stashed."""
        members, prog = self.members, self.forward
        mb, size = members[0].output.shape
        sh = Shards([m.vg for m in members], prog)
        self.labels = linear(self.vg, UNSIGNED_INT, [mb], f"{pre}/labels")
        labels = popops.cast(self.vg, self.labels, INT, prog, f"{pre}/labels as int")
        offs = es.local_offsets(sh, sh.broadcast(labels, f"{pre}/labels"), size,
                                f"{pre}/local labels")
        name = f"{pre}/cross_entropy"
        logp, ce_parts = es.cross_entropy(sh, [m.output for m in members], offs, name)
        g_parts = []  # d(mean loss)/d(per-row loss) = 1/micro-batch, on each member
        for j, m in enumerate(members):
            g = m.vg.add_constant(FLOAT, [mb], np.full(mb, 1.0 / mb, np.float32),
                                  f"{pre}/dce {j}")
            poputil.map_tensor_linearly(m.vg, g)
            g_parts.append(g)
        self.dlogits = es.cross_entropy_grad(sh, logp, offs, g_parts, name)
        for m, d in zip(members, self.dlogits):
            m._save(d)
            if m.dy is not None:  # training
                self.backward.add(Copy(d, m.dy))
        ce = sh.reduce_onto_first(ce_parts, name)
        total = popops.reduce(self.vg, ce, [0], popops.Operation.ADD, prog, f"{pre}/loss sum")
        self.loss = popops.map(self.vg, _1 * (1.0 / mb), [total.reshape([1])], prog,
                               f"{pre}/mean loss")
        self.saved = [t for m in members for t in m.saved]

    def vg_of(self, t: Tensor):
        for m in self.members:
            if any(t is u for u in m.saved) or t is m.input:
                return m.vg
        return self.vg

    def sends(self, dst: Tensor) -> list:
        return [Copy(m.output, dst[..., int(c0):int(c1)])
                for m, c0, c1 in zip(self.members, self.bounds, self.bounds[1:])]

    def zero_program(self) -> Sequence:
        return Sequence(*(m.zero_program() for m in self.members))

    def update_program(self, opt, shards: int = 1) -> Sequence:
        return Sequence(*(m.update_program(opt, shards) for m in self.members))
