"""Pipelines on the emulator: ``pipeline(..., emulate=True)``.

Every stage becomes Poplar programs on the tiles of its IPU (a virtual graph,
``Graph::createVirtualGraph``) built from PopLibs-style ops: Dense is ``poplin.mat_mul``
plus a bias add, ReLU ``popnn.non_linearity`` (its backward
``popnn.non_linearity_input_gradient``), Flatten a reshape, the loss a softmax and
``popnn.calc_loss``. The stash of each stage is a FIFO of tile variables (one slot per
micro-batch in flight, as TensorFlow's ``PipelineFIFOInserter`` allocates them), so a
stash that does not fit shows up, by name, in the compiler's out-of-memory report.
Activations and gradients cross IPUs as ``Copy`` programs; samples and labels come in
over host streams (infeeds) and the losses go out over one (an outfeed). The ops run in
the schedule's order: one program per op of the schedule, run in one ``Engine.run`` per
pipeline run (so the trace shows, for any F, B or R op, the supersteps that made it:
:meth:`EmulatedRunResult.steps_of`).

Gradients are accumulated on the device (SUM, MEAN, RUNNING_MEAN, in the accumulator
dtype) and the optimiser (SGD with momentum and weight decay, Adam, AdamW) updates the
weights on the device once per run. Losses and weights equal the NumPy runner's to float32
tolerance. PopART's ``SessionOptions.mergeVarUpdate = MergeVarUpdateType::All``
(``willow/src/transforms/mergevarupdates.cpp``) turns the SGD (and copy) weight updates of
one virtual graph and optimiser into one update over the concatenated, flattened weights
and gradients; ipukit does the same for every optimiser (Adam and AdamW too, with a bias
correction per weight): each stage (each member of a concurrent stage) zeroes its
accumulators, accumulates a micro-batch's gradients and runs each optimiser step as ONE
compute set per type (``stage0/zero accumulators``, ``stage0/accumulate``,
``stage0/optimizer/sgd``). Kit convention: the stage's weights, its gradients and its
accumulators of each type are one variable each, each weight's a view of it, so the
concatenation is one region (PopART concatenates separate tensors). The backward writes
the gradients where their weights are (``poplin.mat_mul_with_output``, the layout of
PopLibs' weight-update pass; a bias's reduction copied there), so a micro-batch is
accumulated without exchange. Kit convention, not PopART's (which zeroes its accumulators
after each update): with SUM and MEAN a stage's first B of a step copies its gradients into
its float accumulators, so they need no zeroing. MEAN's 1/G is folded into the optimiser's
step, as PopART folds the accumulation factor into its optimiser scalars.

Replicas are copies of the stages on their own IPUs; their gradients are all-reduced by
inter-IPU copies and adds (with replicated tensor sharding, each replica updates its
shard of every weight and the shards are gathered by copies).

Conv2D is a matrix product with an im2col view of its input (as poplin plans it), its
input gradient a col2im of adds; MaxPool2D a MAX reduce over 2x2 window views, its
gradient a small vertex routing each window's gradient to its first maximum.

A concurrent stage's members run on their own IPUs (:class:`_ConcurrentStage`); as the
last stage, its sharded softmax cross-entropy uses the collectives of
:mod:`.emulated_sharded`.

An inference pipeline (no optimiser) runs its forward stages only, in the schedule's
order, with no stash; the last stage's outputs come back over an outfeed.

The programs are built, compiled and loaded once per micro-batch shape, by the first
``run`` or ahead of it by ``model.compile(x, labels)`` (PopTorch's
``PoplarExecutor.compile``: :func:`compile`), and kept on the pipeline. They hold the
optimiser's settings (learning rate, momentum, betas, eps, weight decay) as constants, so
a change to them (or another optimiser) rebuilds them at the next call, and the run uses
the new values, as the NumPy runner does (see :func:`compile` for PopTorch's way).

Not emulated (a clear :class:`~ipukit.errors.IpuError` says so): concurrent stages in a
replicated pipeline, float64 weights. Offloaded optimiser state
(``offload_optimizer_state``) stays in tile memory here (kit convention: the emulator has
no Streaming Memory); the numbers are the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import backend
from ..engine import Engine
from ..errors import IpuError, type_name
from ..graph import Graph
from ..poplibs import poplin, popnn, popops, poputil
from ..poplibs.expr import Expr, Sqrt, _1, _2, _3, _4
from ..program import Copy, Execute, Program, Sequence
from ..target import Device
from ..tensor import FLOAT, INT, UNSIGNED_INT, Tensor, concat, single_run
from ..timeline import MemorySample, Span, Timeline
from ..trace import Step, Trace
from ..vertex import Input, Output, Vector, Vertex
from . import nn, optim, replication
from .runner import MemoryRecord, RunResult

# Poplar's programs (Copy, Execute, stream copies) each compile to one step; our op
# programs hold nothing else, so counting them tells which trace events an op made.
_LEAVES = (Copy, Execute)
_5 = Expr("ARG", 5)  # popops' placeholders go on: _5 is the fifth operand


def _leaves(prog: Program) -> int:
    if isinstance(prog, Sequence):
        return sum(_leaves(p) for p in prog.programs)
    return 1 if isinstance(prog, _LEAVES) else 0


def _layers(net) -> list:
    return list(net.layers) if isinstance(net, nn.Sequential) else [net]


def _param_key(net, i: int, name: str) -> str:
    return f"{i}.{name}" if isinstance(net, nn.Sequential) else name


def _flat(ts) -> Tensor:
    """Tensors of one type as one flat view: ``poplar::concat`` of the flattened tensors
    (PopART's mergeVarUpdate joins the weights and gradients it updates at once so).
    Views of one variable that follow each other are joined as one region of it (an
    explicit address array otherwise)."""
    ts = [t.flatten() for t in ts]
    if len(ts) == 1:
        return ts[0]
    runs, root = [single_run(t) for t in ts], _root(ts[0])
    if all(r and _root(t) is root for r, t in zip(runs, ts)) and all(
            a[0] + a[1] == b[0] for a, b in zip(runs, runs[1:])):
        start = runs[0][0] - root.offset
        return root.flatten().slice(start, start + sum(r[1] for r in runs))
    return concat(ts)


def _root(t: Tensor) -> Tensor:
    """The variable ``t`` is a view of."""
    while t._parent is not None:
        t = t._parent
    return t


def _by_type(rows) -> dict:
    """``rows`` (tuples of tensors) grouped by their tensors' types, in order."""
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault(tuple(t.dtype for t in row), []).append(row)
    return groups


def _of_type(dtype) -> str:
    """How a compute set's name tells a type other than float: " (half)"."""
    return "" if dtype == FLOAT else f" ({type_name(dtype)})"


@dataclass
class _Joined:
    """Tensors of one type as views of ONE variable, in a row: ``all`` the variable,
    ``views`` name -> view (shaped like its value), ``bounds`` name -> its slice."""

    all: Tensor
    views: dict
    bounds: dict


def _joined(vg: Graph, dtype, shapes: dict, name: str, mapped: bool = True) -> _Joined:
    """One variable holding tensors of ``shapes`` (name -> shape) in a row (mapped
    linearly unless not ``mapped``), and each one's view."""
    sizes = [math.prod(v) for v in shapes.values()]
    t = vg.add_variable(dtype, [sum(sizes)], name)
    if mapped and sum(sizes):
        poputil.map_tensor_linearly(vg, t)
    ends = np.cumsum(sizes).tolist()
    bounds = {n: slice(e - s, e) for n, s, e in zip(shapes, sizes, ends)}
    return _Joined(t, {n: t.slice(b.start, b.stop).reshape(list(v))
                       for (n, v), b in zip(shapes.items(), bounds.values())}, bounds)


def _map_like(vg: Graph, dst: Tensor, src: Tensor) -> None:
    """Map ``dst``'s elements to the tiles of ``src``'s (same number of elements)."""
    poputil._map_copies(vg, dst, src, 1)


def _buffer(vg: Graph, like: Tensor, slots: int, name: str) -> Tensor:
    """``slots`` tile variables shaped and mapped like ``like`` (a FIFO or an inbox)."""
    t = vg.add_variable(like.dtype, (max(slots, 1),) + tuple(like.shape), name)
    poputil._map_copies(vg, t, like, max(slots, 1))  # every slot mapped as ``like``
    return t


def _linear(vg: Graph, dtype, shape, name: str) -> Tensor:
    t = vg.add_variable(dtype, shape, name)
    poputil.map_tensor_linearly(vg, t)
    return t


def _cols(x: Tensor, k: int) -> Tensor:
    """im2col as a view: (C*k*k, B*Ho*Wo), element [c*k*k + i*k + j, (b, h, w)] being
    ``x[b, c, h + i, w + j]`` (the k*k shifted views of nn.Conv2D, no copy)."""
    bsz, c, h, w = x.shape
    ho, wo = h - k + 1, w - k + 1
    idx = np.stack([x.idx[:, :, i:i + ho, j:j + wo] for i in range(k) for j in range(k)],
                   axis=2)  # (B, C, k*k, Ho, Wo)
    idx = idx.transpose(1, 2, 0, 3, 4).reshape(c * k * k, bsz * ho * wo)
    return Tensor(x.graph, x.dtype, idx, f"{x.name}/im2col")


def _conv_forward(vg, layer, x, w, b, prog, name) -> Tensor:
    """nn.Conv2D as poplin does it: a matrix product of the weights and the im2col view."""
    bsz, _, h, wd = x.shape
    k, cout = layer.k, layer.cout
    ho, wo = h - k + 1, wd - k + 1
    y2 = poplin.mat_mul(vg, w.reshape([cout, -1]), _cols(x, k), prog, name)
    y = y2.reshape([cout, bsz, ho, wo]).dim_shuffle([1, 0, 2, 3])
    popops.add_in_place(vg, y, b.reshape([1, cout, 1, 1]), prog, name + "/bias")
    return y


def _conv_backward(vg, layer, x, w, dy, out, prog, name, first):
    """nn.Conv2D's weight and bias gradients into ``out`` (two tensors), and its input
    gradient (None when ``first``)."""
    bsz, c, h, wd = x.shape
    k, cout = layer.k, layer.cout
    ho, wo = h - k + 1, wd - k + 1
    dy2 = dy.dim_shuffle([1, 0, 2, 3]).reshape([cout, bsz * ho * wo])
    poplin.mat_mul_with_output(vg, dy2, _cols(x, k).transpose(), out[0].reshape([cout, -1]),
                               prog, name + "/weight")
    _bias_grad(vg, dy, [0, 2, 3], out[1], prog, name + "/bias")
    if first:
        return None
    dcols = poplin.mat_mul(vg, w.reshape([cout, -1]).transpose(), dy2, prog, name + "/input")
    dcols = dcols.reshape([c, k * k, bsz, ho, wo])
    dx = _linear(vg, FLOAT, x.shape, name + "/input grad")
    popops.zero(vg, dx, prog, name + "/input grad zero")
    for i in range(k):  # col2im: each shifted view's gradient added where it came from
        for j in range(k):
            part = dcols[:, i * k + j].dim_shuffle([1, 0, 2, 3])
            popops.add_in_place(vg, dx.slice([0, 0, i, j], [bsz, c, i + ho, j + wo]), part,
                                prog, f"{name}/col2im {i},{j}")
    return dx


def _bias_grad(vg, dy, dims, out, prog, name) -> None:
    """``dy`` summed over ``dims`` into ``out`` (a bias's slice of the stage's gradients,
    on a tile or two): reduced where the partials lie (``popops.reduce``), then copied,
    so that no single tile combines every partial."""
    prog.add(Copy(popops.reduce(vg, dy, dims, popops.Operation.ADD, prog, name), out))


def _windows(x: Tensor) -> Tensor:
    """The 2x2 windows of nn.MaxPool2D as a view (B, C, H/2, W/2, 4)."""
    bsz, c, h, w = x.shape
    return (x.reshape([bsz, c, h // 2, 2, w // 2, 2]).dim_shuffle([0, 1, 2, 4, 3, 5])
            .reshape([bsz, c, h // 2, w // 2, 4]))


class MaxPoolGrad(Vertex):
    """The gradient of a 2x2 max pool: ``dy`` to the first maximum of each window."""

    win = Input(Vector(FLOAT))
    dy = Input(Vector(FLOAT))
    dx = Output(Vector(FLOAT))

    def compute(self):
        n = self.win.shape[0]
        win = self.win.reshape(n, -1, 4)
        hit = self.xp.arange(4) == win.argmax(axis=-1)[..., None]
        self.dx[...] = (hit * self.dy.reshape(n, -1)[..., None]).reshape(n, -1)


def _maxpool_backward(vg, x, dy, prog, name) -> Tensor:
    dx = vg.add_variable(FLOAT, x.shape, name + "/input grad")
    _map_like(vg, dx, x)
    win, dwin = _windows(x), _windows(dx)
    rows = math.prod(win.shape[:4])
    tiles = poputil.tile_of_elements(vg, dwin).reshape(rows, 4)[:, 0]
    cs = vg.add_compute_set(name)
    popops.add_per_tile_vertices(vg, cs, MaxPoolGrad, {
        "win": win.reshape([rows, 4]), "dy": dy.reshape([rows, 1]),
        "dx": dwin.reshape([rows, 4])}, tiles)
    prog.add(Execute(cs))
    return dx


class _Slots:
    """Which slot of a buffer each micro-batch uses: the lowest free one, in op order."""

    def __init__(self):
        self.held: dict[int, int] = {}
        self.size = 0

    def put(self, m: int) -> int:
        free = sorted(set(range(self.size + 1)) - set(self.held.values()))[0]
        self.held[m] = free
        self.size = max(self.size, free + 1)
        return free

    def take(self, m: int) -> int:
        return self.held.pop(m)


class _Stage:
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
        self.weights = _joined(vg, FLOAT, {n: tuple(v.shape) for n, v in values.items()},
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
            self.grads = _joined(vg, FLOAT, {n: tuple(v.shape) for n, v in values.items()},
                                 f"{pre}stage{k}/gradients")
        self.input = _linear(vg, FLOAT, in_shape, f"{pre}stage{k}/input")
        self.forward = Sequence()
        self.saved: list[Tensor] = []  # what the backward reads: the stash of one op
        self.acts = self._build_forward(in_shape)
        self.output = self.result = self.acts[-1]  # result: what goes to the host
        if self.last and emu.scored:
            self._build_loss()
        self.backward = self.first_backward = Sequence()  # (first: a step's first B)
        self.written: set = set()  # accumulator types the first B writes (not zeroed)
        self.dy = self.dx = None
        if emu.training:
            self.dy = None if self.last else _linear(vg, FLOAT, self.output.shape,
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
        tiles = poputil.tile_of_elements(self.vg, w.all) if values else np.zeros(1, np.intp)
        for dt in dict.fromkeys([*types.values(), FLOAT]):
            mine = {n: tuple(v.shape) for n, v in values.items() if types[n] == dt}
            if dt == FLOAT:
                mine[None] = (1,)  # n, on the weights' last tile
            acc = _joined(self.vg, dt, mine, f"{self.pre}stage{self.k}/accumulators"
                          + _of_type(dt), mapped=False)
            poputil._map_elements(self.vg, acc.all, np.concatenate(
                [tiles[w.bounds[n]] if n is not None else tiles[-1:] for n in mine]))
            self.acc_groups[dt] = acc
            self.accs.update((n, acc.views[n]) for n in mine if n is not None)
        self.count = self.acc_groups[FLOAT].views[None]

    # -- forward ------------------------------------------------------------------------
    def _build_forward(self, shape) -> list[Tensor]:
        vg, prog, k = self.vg, self.forward, self.k
        acts = [self.input]
        for i, layer in enumerate(_layers(self.net)):
            x, name = acts[-1], f"{self.pre}stage{k}/{i}.{type(layer).__name__}"
            if isinstance(layer, nn.Dense):
                w = self.params[self.prefix + _param_key(self.net, i, "weight")]
                b = self.params[self.prefix + _param_key(self.net, i, "bias")]
                y = poplin.mat_mul(vg, x, w, prog, name)
                popops.add_in_place(vg, y, b, prog, name + "/bias")
                self._save(x)
            elif isinstance(layer, nn.ReLU):
                y = popnn.non_linearity(vg, popnn.NonLinearityType.RELU, x, prog, name)
                self._save(y)
            elif isinstance(layer, nn.Flatten):
                y = x.reshape([x.shape[0], math.prod(x.shape[1:])])
            elif isinstance(layer, nn.Conv2D):
                w = self.params[self.prefix + _param_key(self.net, i, "weight")]
                b = self.params[self.prefix + _param_key(self.net, i, "bias")]
                y = _conv_forward(vg, layer, x, w, b, prog, name)
                self._save(x)
            elif isinstance(layer, nn.MaxPool2D):
                y = popops.reduce(vg, _windows(x), [4], popops.Operation.MAX, prog, name)
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
        self.labels = _linear(vg, UNSIGNED_INT, [mb], f"{k}/labels")
        probs = popnn.non_linearity(vg, popnn.NonLinearityType.SOFTMAX, logits, prog,
                                    f"{k}/softmax")
        per_sample = _linear(vg, FLOAT, [mb], f"{k}/loss per sample")
        delta = vg.add_variable(FLOAT, logits.shape, f"{k}/delta")
        _map_like(vg, delta, logits)
        correct = _linear(vg, UNSIGNED_INT, [1], f"{k}/num correct")
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
        vg, prog, k, p = self.vg, Sequence(), self.k, self.emu.pipeline
        pre = f"{self.pre}stage{k}"
        dy = self.dlogits if self.last else self.dy
        layers = _layers(self.net)
        for i in reversed(range(len(layers))):
            layer, x, y = layers[i], self.acts[i], self.acts[i + 1]
            name = f"{pre}/{i}.{type(layer).__name__}/grad"
            first = i == 0 and k == 0  # nothing to send back: skip the input gradient
            keys = [self.prefix + _param_key(self.net, i, s) for s in ("weight", "bias")]
            if isinstance(layer, (nn.Dense, nn.Conv2D)):
                w, (gw, gb) = self.params[keys[0]], (self.grads.views[n] for n in keys)
            if isinstance(layer, nn.Dense):
                poplin.mat_mul_with_output(vg, x.transpose(), dy, gw, prog, name + "/weight")
                _bias_grad(vg, dy, [0], gb, prog, name + "/bias")
                dy = None if first else poplin.mat_mul(vg, dy, w.transpose(), prog,
                                                       name + "/input")
            elif isinstance(layer, nn.ReLU):
                dy = popnn.non_linearity_input_gradient(vg, popnn.NonLinearityType.RELU, y,
                                                        dy, prog, name)
            elif isinstance(layer, nn.Conv2D):
                dy = _conv_backward(vg, layer, x, w, dy, (gw, gb), prog, name, first)
            elif isinstance(layer, nn.MaxPool2D):
                dy = None if first else _maxpool_backward(vg, x, dy, prog, name)
            else:  # Flatten
                dy = dy.reshape(x.shape)
            if dy is None:
                break
        # one op per type over every accumulator and (float) gradient (mergeVarUpdate); a
        # step's first B of a lone stage copies them to float accumulators (nothing to zero)
        self.backward, self.first_backward = Sequence(prog), Sequence(prog)
        for (dt, _), rows in _by_type((self.accs[n], self.grads.views[n])
                                      for n in self.params).items():
            acc, g = _flat(a for a, _ in rows), _flat(g for _, g in rows)
            name, step = f"{pre}/accumulate{_of_type(dt)}", Sequence()
            if dt != FLOAT:
                g = popops.cast(vg, g, dt, step, f"{name}/cast")
            if p.reduction == "RUNNING_MEAN":
                n = self.count if dt == FLOAT else popops.cast(vg, self.count, dt, step,
                                                               f"{name}/n")
                popops.map(vg, _1 * (_3 / (_3 + 1.0)) + _2 * (1.0 / (_3 + 1.0)), [acc, g, n],
                           step, f"{pre}/running mean{_of_type(dt)}", inplace=True)
            else:
                popops.add_in_place(vg, acc, g, step, name)
            self.backward.add(step)
            if p.reduction != "RUNNING_MEAN" and dt == FLOAT and not self.prefix:
                self.first_backward.add(Copy(g, acc))
                self.written.add(dt)
            else:
                self.first_backward.add(step)
        if p.reduction == "RUNNING_MEAN":  # (after the running means, which read n)
            popops.add_in_place(vg, self.count, 1.0, step := Sequence(), f"{pre}/count")
            self.backward.add(step)
            self.first_backward.add(step)
        return dy

    # -- once per run -------------------------------------------------------------------
    def zero_program(self) -> Sequence:
        """The accumulators and RUNNING_MEAN's count zeroed: one op per type (not those
        the first B writes)."""
        prog, pre = Sequence(), f"{self.pre}stage{self.k}"
        for dt, acc in self.acc_groups.items():
            if dt in self.written:
                continue
            popops.zero(self.vg, acc.all, prog, f"{pre}/zero accumulators{_of_type(dt)}")
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


class _ConcurrentStage:
    """A concurrent stage: members side by side on their IPUs (``device_mapping`` entry
    ``[1, 2]``). The input is copied from the first member's IPU to the others (to_all),
    outputs go to the next stage as slices of its inbox (concatenated), the output
    gradient's slices go to the members and their input gradients are added onto the
    first IPU. As the last stage its loss is the sharded softmax cross-entropy (all-reduce
    MAX and ADD as inter-IPU copies and reductions, the logits never gathered)."""

    def __init__(self, emu, stage, in_shape, replica: int = 0):
        from . import emulated_sharded as es  # noqa: PLC0415 - its vertices and collectives

        p = emu.pipeline
        self.emu, self.k, self.replica = emu, stage.index, replica
        self.members = [_Stage(emu, stage, in_shape, replica, (j, m, q))
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
            self.result = _linear(self.vg, FLOAT, shape, f"{pre}/outputs")
            for c in self.sends(self.result):
                self.forward.add(c)
        if self.last and emu.scored:
            self._build_sharded_loss(es, pre)
        elif not self.last and emu.training:
            self.dy = _linear(self.vg, FLOAT, shape, f"{pre}/output grad")
            for m, c0, c1 in zip(self.members, self.bounds, self.bounds[1:]):
                self.backward.add(Copy(self.dy[..., int(c0):int(c1)], m.dy))
        for m in self.members:
            self.backward.add(m.backward)
        self.dx = None
        if self.k > 0 and emu.training:  # to_all's backward: input gradients onto IPU 0
            sh = es._Shards([m.vg for m in self.members], self.backward)
            self.dx = sh.reduce_onto_first([m.dx for m in self.members], f"{pre}/input grad")

    def _build_sharded_loss(self, es, pre):
        """The sharded softmax cross-entropy of :mod:`.emulated_sharded` (the builders the
        tied embedding uses), its fused backward run in the forward and stashed."""
        members, prog = self.members, self.forward
        mb, size = members[0].output.shape
        sh = es._Shards([m.vg for m in members], prog)
        self.labels = _linear(self.vg, UNSIGNED_INT, [mb], f"{pre}/labels")
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


class _Optimizer:
    """The weight update on the device, with the optimiser's state in tile variables.

    Every replica holds its own copy of the state (the same values); with RTS each holds
    the state of its shard only (keys ``"<key>/rts<r>"``, as the NumPy runner's)."""

    def __init__(self, emu, opt):
        self.opt, self.emu = opt, emu
        self.state: dict[tuple[str, int], dict[str, Tensor]] = {}
        self.kind = type(opt)
        if self.kind not in (optim.SGD, optim.Momentum, optim.Adam, optim.AdamW):
            raise IpuError(f"the emulator updates weights with SGD, Momentum, Adam or AdamW, "
                           f"got {opt!r}; use emulate=False")

    @staticmethod
    def handle(key, replica, s) -> str:
        return f"optimizer/{key}/{s}" + (f"@replica{replica}" if replica else "")

    def build(self, vg, parts, prog, replica, name, scale=1.0):
        """ONE update of ``parts`` (``(key, weight, gradient accumulator)`` on one virtual
        graph): each step a compute set over their concatenation, as PopART's
        ``mergeVarUpdate`` does for SGD. Each state (momentum, m, v) is one variable mapped
        like the weights, a view of it per key (its host handle); Adam's bias corrections
        stay one pair per key (its step), each read by its key's elements. The gradients are
        read times ``scale`` (MEAN's 1 / gradient_accumulation)."""
        o, graph = self.opt, self.emu.graph
        parts = sorted(parts, key=lambda q: q[2].dtype != FLOAT)  # float gradients first
        w, grads = _flat(q[1] for q in parts), []
        for (dt,), rows in _by_type((q[2],) for q in parts).items():
            g = _flat(t for t, in rows)
            grads.append(g if dt == FLOAT else popops.cast(vg, g, FLOAT, prog,
                                                            f"{name}/to weight type"))
        g = grads[0] if len(grads) == 1 else concat(grads)
        pre = f"replica{replica}/" if replica else ""
        states = {key: {} for key, _, _ in parts}

        def state(s, what):  # one variable, mapped like the weights: a view per key
            joined = _joined(vg, FLOAT, {key: wk.shape for key, wk, _ in parts},
                             f"{name}/{what}", mapped=False)
            _map_like(vg, joined.all, w)
            for key, t in joined.views.items():
                states[key][s] = t
            return joined.all

        def scaled(e):  # the gradient as read (times scale until a step has scaled it)
            return e if scale == 1.0 else e * scale

        if issubclass(self.kind, optim.SGD):
            if o.weight_decay:
                g = popops.map(vg, scaled(_1) + o.weight_decay * _2, [g, w], prog,
                               name + "/decay")
                scale = 1.0
            if o.momentum:
                buf = state("buf", "momentum")
                popops.map(vg, o.momentum * _1 + scaled(_2), [buf, g], prog,
                           name + "/momentum", inplace=True)
                g, scale = buf, 1.0
            popops.map(vg, _1 - o.lr * scaled(_2), [w, g], prog, name + "/sgd", inplace=True)
        else:
            b1, b2 = o.betas
            if o.weight_decay and o.decoupled:
                popops.map(vg, _1 * (1 - o.lr * o.weight_decay), [w], prog, name + "/decay",
                           inplace=True)
            elif o.weight_decay:
                g = popops.map(vg, scaled(_1) + o.weight_decay * _2, [g, w], prog,
                               name + "/decay")
                scale = 1.0
            m, v = state("m", "m"), state("v", "v")
            corr = []  # per key: [1 - beta1^t, 1 - beta2^t], t the key's step
            for key, wk, _ in parts:
                states[key]["corr"] = c = vg.add_variable(
                    FLOAT, [2], f"{pre}optimizer/{key}/bias correction 1 - beta^t")
                vg.set_tile_mapping(c, int(poputil.tile_of_elements(vg, wk)[0]))
                corr.append(c)
            if len(corr) == 1:
                c1, c2 = corr[0][0:1], corr[0][1:2]
            else:  # each key's pair repeated over its elements
                c1, c2 = (concat([c[i:i + 1].broadcast([wk.num_elements()])
                                  for c, (_, wk, _) in zip(corr, parts)]) for i in (0, 1))
            popops.map(vg, b1 * _1 + (1 - b1) * scaled(_2), [m, g], prog, name + "/m",
                       inplace=True)
            popops.map(vg, b2 * _1 + (1 - b2) * scaled(_2) * scaled(_2), [v, g], prog,
                       name + "/v", inplace=True)
            popops.map(vg, _1 - o.lr * (_2 / _4) / (Sqrt(_3 / _5) + o.eps),
                       [w, m, v, c1, c2], prog, name + "/adam", inplace=True)
        for key, st in states.items():
            self.state[(key, replica)] = st
            for s, t in st.items():
                graph.create_host_write(self.handle(key, replica, s), t)
                graph.create_host_read(self.handle(key, replica, s), t)

    # host <-> device state, so that the optimiser object stays the one truth between calls
    def write(self, eng) -> dict:
        """Write the host state to every replica; returns Adam's step count per key."""
        host, steps = self.opt.state, {}
        for (key, rep), st in self.state.items():
            have = host.get(key)
            if "buf" in st:
                eng.write_tensor(self.handle(key, rep, "buf"),
                                 np.zeros(st["buf"].shape, np.float32) if have is None
                                 else backend.to_numpy(have))
            elif "m" in st:
                steps[key] = 0 if have is None else have["step"]
                for m in ("m", "v"):
                    eng.write_tensor(self.handle(key, rep, m),
                                     np.zeros(st[m].shape, np.float32) if have is None
                                     else backend.to_numpy(have[m]))
        return steps

    def before_update(self, eng, steps: dict, r: int):
        b1, b2 = getattr(self.opt, "betas", (0, 0))
        for (key, rep), st in self.state.items():
            if "corr" in st:
                t = steps[key] + r + 1
                eng.write_tensor(self.handle(key, rep, "corr"),
                                 np.array([1 - b1**t, 1 - b2**t], np.float32))

    def read(self, eng, steps: dict, runs: int):
        xp = backend.get_xp()
        for (key, rep), st in self.state.items():
            if rep:
                continue  # every replica holds the same state: read replica 0's
            if "buf" in st:
                self.opt.state[key] = xp.asarray(eng.read_tensor(self.handle(key, 0, "buf")))
            elif "m" in st:
                self.opt.state[key] = {
                    "step": steps[key] + runs,
                    "m": xp.asarray(eng.read_tensor(self.handle(key, 0, "m"))),
                    "v": xp.asarray(eng.read_tensor(self.handle(key, 0, "v")))}


@dataclass(frozen=True)
class OpSteps:
    """The trace events (``[first, end)`` in ``trace.events``) one schedule op made."""

    run: int  # the pipeline run (repeat) it belongs to
    phase: str
    stage: int
    microbatch: int
    ipu: int
    first: int
    end: int




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
        self.replicas = [[(_ConcurrentStage if len(s.ipus) > 1 else _Stage)(self, s, shape, rep)
                          for s, shape in zip(p.stages, shapes)]
                         for rep in range(p.replication_factor)]
        self.stages = self.replicas[0]
        self.opt = _Optimizer(self, p.optimizer) if self.training else None
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
        self.ops, programs = self._unroll()
        if not self.training:  # program 0 runs every op
            self.counts = [0] + [_leaves(q) for q in programs]
            self.engine = Engine(g, [Sequence(*programs)])
            self.engine.load(self.device)
            return
        zero = Sequence(*(s.zero_program() for st in self.replicas for s in st))
        update = self._all_reduce()
        rts = p.replication_factor if (p.replicated_optimizer_state_sharding
                                       and p.replication_factor > 1) else 1
        update.add(Sequence(*(s.update_program(self.opt, rts)
                              for st in self.replicas for s in st)))
        if rts > 1:
            update.add(self._all_gather())
        self.counts = [_leaves(zero)] + [_leaves(q) for q in programs] + [_leaves(update)]
        # program 0 zeroes the accumulators and runs every op; program 1 updates weights
        self.engine = Engine(g, [Sequence(zero, *programs), update])
        self.engine.load(self.device)

    def _all_reduce(self) -> Sequence:
        """Sum (or average) the replicas' accumulators: GCL's ring all-reduce
        (``allReduceCrossReplica``, :func:`.emulated_sharded.ring_all_reduce`) over every
        stage's accumulators at once, each ring step one inter-IPU ``Copy`` of all of them
        and one in-place add. With RTS only the reduce-scatter (replica r's shard r of each
        accumulator reduced, the shards of :func:`.replication.shard_bounds`): each replica
        then updates its shard and :meth:`_all_gather` sends the shards round."""
        from . import emulated_sharded as es  # noqa: PLC0415 - as in _ConcurrentStage

        p, prog = self.pipeline, Sequence()
        count = p.replication_factor
        if count == 1:
            return prog
        parts = [[acc for s in stages for acc in s.accs.values()] for stages in self.replicas]
        scale = 1.0 / count if p.replica_reduction == "MEAN" else None
        if p.replicated_optimizer_state_sharding:
            es.ring_reduce_scatter(parts, prog, "gradients", bounds=replication.shard_bounds,
                                   scale=scale)
        else:
            es.ring_all_reduce(parts, prog, "gradients", scale=scale)
        return prog

    def _all_gather(self) -> Sequence:
        """RTS: every replica's updated shard of each weight sent round GCL's ring
        (``allGatherCrossReplica``, :func:`.emulated_sharded.ring_all_gather`)."""
        from . import emulated_sharded as es  # noqa: PLC0415 - as in _ConcurrentStage

        prog = Sequence()
        es.ring_all_gather([[w for s in stages for w in s.params.values()]
                            for stages in self.replicas], prog, "weights",
                           bounds=replication.shard_bounds)
        return prog

    def _unroll(self):
        """One program per schedule op, with its FIFO and inbox slots fixed in advance."""
        p, st = self.pipeline, self.stages
        fifo_slots = [_Slots() for _ in st]
        inbox = [_Slots() for _ in st]  # activations waiting for stage k
        gradbox = [_Slots() for _ in st]  # gradients waiting for stage k
        plan, backward = [], set()  # backward: the stages whose first B is planned
        for op in p.schedule.ops:
            plan.append((op, slots := self._plan_op(op, fifo_slots[op.stage], inbox,
                                                    gradbox)))
            if op.phase == "B" and op.stage not in backward:
                backward.add(op.stage)
                slots["first"] = True  # the stage's first B of a step
        for s in (s for stages in self.replicas for s in stages):  # buffers, sizes known
            s.stash = [] if not self.training else (
                [s.input] + ([s.labels] if s.last else []) if p.recomputation else s.saved)
            cap = fifo_slots[s.k].size
            pre = f"{s.pre}stage{s.k}"
            s.fifo = [_buffer(s.vg_of(t), t, cap, f"{pre}/stash FIFO {t.name}")
                      for t in s.stash]
            s.inbox = _buffer(s.vg, s.input, inbox[s.k].size, f"{pre}/inbox") \
                if s.k else None
            s.gradbox = _buffer(s.vg, s.dy, gradbox[s.k].size, f"{pre}/grad inbox") \
                if s.dy is not None else None
        programs = [Sequence(*(self._op_program(op, slots, rep)
                               for rep in range(p.replication_factor)))
                    for op, slots in plan]
        return [op for op, _ in plan], programs

    def _plan_op(self, op, fifo, inbox, gradbox) -> dict:
        k, m, last = op.stage, op.microbatch, len(self.stages) - 1
        slots = {}
        if op.phase == "F":
            if k > 0:
                slots["in"] = inbox[k].take(m)
            if self.training:  # inference stashes nothing
                slots["push"] = fifo.put(m)
            if k < last:
                slots["send"] = inbox[k + 1].put(m)
        elif op.phase == "R":
            slots["pop"] = fifo.take(m)
        else:
            if not self.pipeline.recomputation:
                slots["pop"] = fifo.take(m)
            if k < last:
                slots["dy"] = gradbox[k].take(m)
            if k > 0:
                slots["send"] = gradbox[k - 1].put(m)
        return slots

    def _op_program(self, op, slots, rep) -> Sequence:
        stages = self.replicas[rep]
        s = stages[op.stage]
        x_stream, y_stream, loss_stream, out_stream = self.streams[rep]
        prog = Sequence()
        if "pop" in slots:
            for t, f in zip(s.stash, s.fifo):
                prog.add(Copy(f[slots["pop"]], t))
        if op.phase == "F":
            prog.add(Copy(x_stream, s.input) if s.k == 0
                     else Copy(s.inbox[slots["in"]], s.input))
            if s.last and self.scored:
                prog.add(Copy(y_stream, s.labels))
        if op.phase in ("F", "R"):
            prog.add(s.forward)
            if s.last and op.phase == "F" and self.scored:
                prog.add(Copy(s.loss, loss_stream))
            if s.last and out_stream is not None:
                prog.add(Copy(s.result, out_stream))
        if "push" in slots:
            for t, f in zip(s.stash, s.fifo):
                prog.add(Copy(t, f[slots["push"]]))
        if op.phase == "F" and "send" in slots:
            for c in s.sends(stages[s.k + 1].inbox[slots["send"]]):
                prog.add(c)
        if op.phase == "B":
            if "dy" in slots:
                prog.add(Copy(s.gradbox[slots["dy"]], s.dy))
            prog.add(s.first_backward if slots.get("first") else s.backward)
            if "send" in slots:
                prog.add(Copy(s.dx, stages[s.k - 1].gradbox[slots["send"]]))
        return prog

    # -- running --------------------------------------------------------------------------
    def run(self, xs, ys):
        """Train on ``xs[r, replica, m]`` for every pipeline run ``r``; returns the losses
        ``(repeat, replica, micro-batch)``, per op the trace events it made, and (inference)
        the last stage's outputs ``(repeat, replica, micro-batch, ...)``, else None."""
        p, eng, training = self.pipeline, self.engine, self.training
        for st in self.replicas:
            for s in st:
                for name in s.params:
                    eng.write_tensor(f"{s.pre}{s.k}.{name}",
                                     backend.to_numpy(p.stages[s.k].params[name]))
        steps = self.opt.write(eng) if training else {}
        f0 = [o.microbatch for o in self.ops if o.phase == "F" and o.stage == 0]
        fl = [o.microbatch for o in self.ops if o.phase == "F" and o.stage == len(p.stages) - 1]
        shape = (p.repeat_count, p.replication_factor, p.gradient_accumulation)
        losses = np.zeros(shape if self.scored else shape[:2] + (0,))
        outputs = None if training else np.zeros(shape + self.out_shape, np.float32)
        records = []
        for r in range(p.repeat_count):
            outs, results = [], []
            for rep, st in enumerate(self.replicas):
                pre = st[0].pre
                eng.connect_stream(pre + "samples",
                                   np.ascontiguousarray(xs[r, rep][f0], np.float32))
                if self.scored:
                    eng.connect_stream(pre + "labels",
                                       np.ascontiguousarray(ys[r, rep][fl]).astype(np.uint32))
                    outs.append(np.zeros(len(fl), np.float32))
                    eng.connect_stream(pre + "losses", outs[-1])
                if not training:
                    results.append(np.zeros((len(fl),) + self.out_shape, np.float32))
                    eng.connect_stream(pre + "outputs", results[-1])
            pos = len(eng.trace) + 1 + self.counts[0]  # after the host sync and the zeroing
            eng.run(0)
            if training:
                self.opt.before_update(eng, steps, r)
                eng.run(1)
            for rep, out in enumerate(outs):
                losses[r, rep, fl] = out
            for rep, out in enumerate(results):
                outputs[r, rep, fl] = out
            for i, op in enumerate(self.ops):
                n = self.counts[i + 1]
                records.append(OpSteps(r, op.phase, op.stage, op.microbatch,
                                       self.stages[op.stage].ipu, pos, pos + n))
                pos += n
            if training:
                records.append(OpSteps(r, "optimizer", -1, -1, -1, pos + 1,
                                       pos + 1 + self.counts[-1]))
        if not training:
            return losses, records, outputs
        self.opt.read(eng, steps, p.repeat_count)
        xp = backend.get_xp()
        for s in self.stages:
            for name in s.params:
                p.stages[s.k].params[name][...] = xp.asarray(eng.read_tensor(f"{s.k}.{name}"))
        return losses, records, None



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
        """The supersteps (compute sets, copies, stream copies) of one F, B or R op."""
        for o in self.op_steps:
            if (o.phase, o.stage, o.microbatch, o.run) == (phase, stage, microbatch, run):
                return steps_of(self.trace, o)
        raise IpuError(f"no {phase} op of stage {stage} on micro-batch {microbatch} in run "
                       f"{run}; the schedule's ops are (phase, stage, micro-batch) with phase "
                       "F, B or R")

    def op_of(self, span) -> OpSteps:
        """The schedule op (and its trace events) behind an F, B or R timeline record."""
        op = next((o for o in self.op_steps if o.phase == span.kind and span.kind in "FBR"
                   and o.stage == span.stage and o.microbatch == span.microbatch
                   and self._start(o, span.ipu) == span.start), None)
        if op is None:
            raise IpuError(f"{span!r} is not an F, B or R span of this emulated run; pass "
                           "one of result.timeline's records with kind F, B or R")
        return op

    def span_steps(self, span) -> list[Step]:
        """The supersteps behind a timeline record (an F, B or R span of this run)."""
        return steps_of(self.trace, self.op_of(span))

    def _start(self, o: OpSteps, ipu: int) -> float:
        ext = _extent(self.trace, o, ipu)
        return -1.0 if ext is None else ext[0] - self.origin


def compile(p, x, labels) -> Emulation:  # noqa: A001 - PopTorch's name
    """``Pipeline.compile`` on the emulator: the :class:`Emulation` for inputs shaped like
    ``x`` (and ``labels``), built, compiled and loaded once per micro-batch shape and kept
    on the pipeline, so ``run`` finds it ready (PopTorch's ``PoplarExecutor.compile``).

    The programs hold the optimiser's settings as constants: when they have changed since
    the build (``model.optimizer.lr = 0.01``, or another optimiser), it builds them again.
    Kit convention: PopTorch keeps the learning rate (and every setting passed to the
    optimiser's constructor) in device variables; a change reaches the IPU, without a
    recompile, when the model's ``setOptimizer(optimizer)`` is called, and changing a
    constant setting after compiling is an error. The kit has no ``setOptimizer``: a
    changed setting applies from the next call, on the emulator as in the NumPy runner.

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
    ops = tuple(OpSteps(o.run, o.phase, o.stage, o.microbatch, o.ipu, o.first, o.end)
                for o in ops)
    origin = float(trace._starts[start])  # the host sync of this call
    sizes = [(s.ipu, _bytes(emu, s)) for s in emu.stages]
    timeline = _timeline(emu, trace, ops, origin, sizes)
    memory = tuple(MemoryRecord(0.0, q, *b) for q, b in sizes)
    cycles = float(trace.total_cycles - trace._starts[start]) if len(trace) > start else 0.0
    outputs = results if results is not None else replication.select_outputs(
        losses, p.output_mode, p.output_return_period)
    return EmulatedRunResult(losses, timeline, memory, cycles, 0, p.target.clock_hz, outputs,
                             trace, ops, origin)


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


def _timeline(emu, trace, ops, t0, sizes) -> Timeline:
    """F/B/R spans from the trace events each op made (on its IPU's clock), the IPU-Link
    copies among them, and each IPU's weight update; memory: ``sizes``, each stage's
    ``(ipu, bytes by category)``."""
    spans = []
    ipus = sorted({s.ipu for st in emu.replicas for s in st})
    for o in ops:
        if o.phase == "optimizer":
            for q in ipus:
                ext = _extent(trace, o, q)
                if ext:
                    spans.append(Span(q, "optimizer", ext[0] - t0, ext[1] - ext[0]))
        else:  # one span per IPU of the stage (the members of a concurrent stage)
            for q in _stage_ipus(emu.stages[o.stage]):
                ext = _extent(trace, o, q)
                if ext is not None:
                    spans.append(Span(q, o.phase, ext[0] - t0, ext[1] - ext[0], o.stage,
                                      o.microbatch))
        for i, t in zip(trace._step_ids[o.first:o.end], trace._starts[o.first:o.end]):
            st = trace.steps[i]
            if st.inter_ipu_bytes and (o.ipu in st.ipus or o.phase == "optimizer"):
                spans.append(Span(st.ipus[0] if o.ipu < 0 else o.ipu, "link", float(t - t0),
                                  float(st.cycles), o.stage, o.microbatch,
                                  int(st.inter_ipu_bytes), st.name))
    parts = ("weights", "stash", "gradients", "optimizer")
    memory = [MemorySample(0.0, q, dict(zip(parts, b))) for q, b in sizes]
    return Timeline(spans, memory, emu.target.clock_hz)


def _bytes(emu, s) -> tuple[int, int, int, int]:
    """(weights, stash, gradient accumulators, optimiser state) bytes of stage ``s``."""
    def size(ts):
        return sum(t.num_elements() * t.dtype.itemsize for t in ts)

    bufs = list(s.fifo) + [b for b in (s.inbox, s.gradbox) if b is not None]
    state = [t for (key, rep), st in (emu.opt.state.items() if emu.opt else ())
             if key.startswith(f"{s.k}.") and rep == 0 and key.rpartition("/rts")[2] in ("", "0")
             for t in st.values()]
    return size(s.params.values()), size(bufs), size(s.accs.values()), size(state)
