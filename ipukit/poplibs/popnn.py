"""popnn: non-linearities and the loss layer (``popnn::nonLinearity``, ``popnn::calcLoss``).

``non_linearity`` applies RELU, SIGMOID, TANH, HARD_SIGMOID, GELU or SWISH element-wise (a
``popops.map``, with ``popnn/NonLinearityDef.hpp``'s formulas) or a softmax over the
innermost dimension, built from popops ops in the order ``softmaxImpl`` in
``lib/popnn/NonLinearity.cpp`` calls them: SOFTMAX is ``exp``, an ADD reduce of each row
into float, ``invInPlace`` of the row sums and a ``mulInPlace`` of each row by its
inverse sum (no max is subtracted, so large inputs overflow to inf/NaN); SOFTMAX_STABLE
first takes a MAX reduce and subtracts it (``sub``, then ``expInPlace``); SOFTMAX_SCALED
also adds ``log(SOFTMAX_SCALING)`` before the exp and multiplies the inverse sums by
``SOFTMAX_SCALING`` = 62000, so each row sums to 62000 (``NonLinearityInternal.hpp``); a
HALF input's inverse sums are cast to half before the last multiply. Each op is a compute
set of its own (a reduce one or two), all visible in the profile.

``calc_loss`` is the loss layer of Graphcore's MNIST regression demo: from probabilities
and labels it writes the per-sample loss and the gradient ``delta`` and adds the number
of correct predictions (arg-max equals label) to ``num_correct``; a label equal to
``MASKED_LABEL_CODE`` (0xFFFFFFFF; -1 for INT labels) gives no loss, a zero delta and is
not counted, as in PopLibs.

>>> import sys, numpy as np, ipukit as ipu
>>> from ipukit.poplibs import popnn, poputil
>>> dev = ipu.IPUModel(tiles_per_ipu=2).create_device()
>>> g = ipu.Graph(dev.target)
>>> x = g.add_constant(ipu.FLOAT, [1, 3], [[1.0, 2.0, 3.0]], "x")
>>> poputil.map_tensor_linearly(g, x)
>>> prog = ipu.Sequence()
>>> p = popnn.non_linearity(g, popnn.NonLinearityType.SOFTMAX, x, prog)
>>> _ = prog.add(ipu.PrintTensor("p", p))
>>> eng = ipu.Engine(g, prog); eng.load(dev); eng.set_print_tensor_stream(sys.stdout)
>>> eng.run()
p: [
  [0.0900306 0.2447285 0.6652409]
]
"""

from __future__ import annotations

import numpy as np

from ..errors import GraphConnectionError, IpuError
from ..program import Execute, Sequence
from ..tensor import FLOAT, INT, UNSIGNED_INT, Tensor
from ..vertex import InOut, Input, Output, Vector, Vertex
from . import popops, poputil
from .expr import Expr, Max, Min, Sigmoid, Tanh, _1

#: ``popops/EncodingConstants.hpp``: a label with this value is masked (no loss, no delta,
#: not counted by calcLoss / calcAccuracy). For INT labels it reads as -1.
MASKED_LABEL_CODE = 0xFFFFFFFF
#: ``lib/popnn/NonLinearityInternal.hpp``: what each row of SOFTMAX_SCALED sums to.
SOFTMAX_SCALING = 62000.0


class NonLinearityType:
    """``popnn::NonLinearityType``."""

    RELU, SIGMOID, TANH, SOFTMAX = "RELU", "SIGMOID", "TANH", "SOFTMAX"
    SOFTMAX_STABLE, SOFTMAX_SCALED = "SOFTMAX_STABLE", "SOFTMAX_SCALED"
    GELU, SWISH, HARD_SIGMOID = "GELU", "SWISH", "HARD_SIGMOID"


#: Element-wise non-linearities as popops expressions (``NonLinearityDef.hpp``).
ELEMENTWISE = {
    "RELU": Expr("RELU", _1),
    "SIGMOID": Expr("SIGMOID", _1),
    "TANH": Expr("TANH", _1),
    "HARD_SIGMOID": Max(0.0, Min(1.0, _1 * 0.2 + 0.5)),
    "GELU": _1 * 0.5 * (Tanh(_1 * 0.7978845608 * (_1 * _1 * 0.044715 + 1.0)) + 1.0),
    "SWISH": _1 * Sigmoid(_1),
}
SOFTMAXES = ("SOFTMAX", "SOFTMAX_STABLE", "SOFTMAX_SCALED")


class LossType:
    """``popnn::LossType``."""

    SUM_SQUARED_LOSS, CROSS_ENTROPY_LOSS = "SUM_SQUARED_LOSS", "CROSS_ENTROPY_LOSS"


CROSS_ENTROPY_LOSS = LossType.CROSS_ENTROPY_LOSS
SUM_SQUARED_LOSS = LossType.SUM_SQUARED_LOSS


def non_linearity(graph, nl_type, t: Tensor, prog: Sequence, debug_name: str = "") -> Tensor:
    """``popnn::nonLinearity(graph, type, t, prog)``: a new tensor; softmaxes are over the
    innermost dimension."""
    nl = str(nl_type).upper().removeprefix("NONLINEARITYTYPE.")
    name = debug_name or nl.lower()
    if nl in ELEMENTWISE:
        return popops.map(graph, ELEMENTWISE[nl], [t], prog, name)
    if nl not in SOFTMAXES:
        raise IpuError(f"{name}: unknown non-linearity {nl_type!r}; use one of "
                       f"{', '.join([*ELEMENTWISE, *SOFTMAXES])} (popnn.NonLinearityType)")
    if not isinstance(t, Tensor) or t.rank < 1:
        raise IpuError(f"{name}: softmax needs a tensor of rank >= 1, got {t!r}")
    return _softmax(graph, t, nl, prog, name)


def _softmax(graph, t: Tensor, nl: str, prog: Sequence, name: str) -> Tensor:
    """``softmaxImpl(graph, t, stableAlgo, inPlace=false, scaled, prog)``: popops ops over
    the innermost dimension, in PopLibs' order."""
    last = t.rank - 1
    if nl == "SOFTMAX":  # PopLibs' fast softmax: no max subtracted
        e = popops.exp(graph, t, prog, name + "/exp")
    else:
        m = popops.reduce(graph, t, [last], popops.Operation.MAX, prog, name + "/max")
        e = popops.sub(graph, t, m.expand(last), prog, name + "/sub")
        if nl == "SOFTMAX_SCALED":
            popops.add_in_place(graph, e, float(np.log(SOFTMAX_SCALING)), prog, name + "/add")
        popops.exp_in_place(graph, e, prog, name + "/exp")
    s = popops.reduce(graph, e, [last], popops.Operation.ADD, prog, name + "/sum",
                      out_type=FLOAT)
    popops.inv_in_place(graph, s, prog, name + "/inv")
    if nl == "SOFTMAX_SCALED":
        popops.mul_in_place(graph, s, SOFTMAX_SCALING, prog, name + "/scale")
    if t.dtype != FLOAT:
        s = popops.cast(graph, s, t.dtype, prog, name + "/cast")
    popops.mul_in_place(graph, e, s.expand(last), prog, name + "/invScale")
    return e


class ReluGrad(popops.RowsMultiVertex):
    """``popnn::NonLinearityGrad1D`` for RELU: ``in_grad = out_grad * (out > 0)``; a
    MultiVertex, one on a tile that holds one contiguous region of ``out``, as in PopLibs
    (``NonLinearity.cpp`` ``nonLinearityInputGradient``)."""

    grain = poputil.vector_width(FLOAT)
    out = Input(Vector(FLOAT))
    out_grad = Input(Vector(FLOAT))
    in_grad = Output(Vector(FLOAT))

    @poputil.vertex_separable
    def compute(self):
        self.in_grad[...] = self.out_grad * (self.out > 0)


class ReluGrad2D(Vertex):
    """``popnn::NonLinearityGrad2D`` for RELU: the plain vertices PopLibs puts, at most one
    per worker, on a tile that holds several regions of ``out``."""

    out = Input(Vector(FLOAT))
    out_grad = Input(Vector(FLOAT))
    in_grad = Output(Vector(FLOAT))
    compute = ReluGrad.compute


def non_linearity_input_gradient(graph, nl_type, out: Tensor, out_gradient: Tensor,
                                 prog: Sequence, debug_name: str = "") -> Tensor:
    """``popnn::nonLinearityInputGradient(graph, type, out, outGradient, prog)``: the
    gradient at the non-linearity's input from its output and the output's gradient
    (RELU: ``outGradient * (out > 0)``); a new tensor mapped like ``out``."""
    nl = str(nl_type).upper().removeprefix("NONLINEARITYTYPE.")
    name = debug_name or nl.lower() + "/grad"
    if nl != "RELU":
        raise IpuError(f"{name}: ipukit has the input gradient of RELU only, got {nl_type!r}")
    tiles = poputil.check_mapped(graph, out, name, "out")
    poputil.check_mapped(graph, out_gradient, name, "outGradient", tiles=False)
    if tuple(out.shape) != tuple(out_gradient.shape) or out.dtype != FLOAT \
            or out_gradient.dtype != FLOAT:
        raise IpuError(f"{name}: out '{out.name}' {out.shape} and outGradient "
                       f"'{out_gradient.name}' {out_gradient.shape} must be float tensors of "
                       "one shape")
    grad = graph.add_variable(FLOAT, out.shape, name)
    poputil._map_elements(graph, grad, tiles)
    cs = graph.add_compute_set(name)
    regions, first = popops.regions_and_runs(graph, out, tiles)
    popops.add_per_tile_vertices(graph, cs, ReluGrad, {
        "out": out.flatten(), "out_grad": out_gradient.flatten(), "in_grad": grad.flatten()},
        tiles, grain=poputil.vector_width(FLOAT), cls_2d=ReluGrad2D, regions=regions,
        first=first)
    prog.add(Execute(cs))
    return grad


class CalcLoss(Vertex):
    """One sample of the loss layer (``popnn::CalcLoss``): loss, delta and correct.

    A masked label (``MASKED_LABEL_CODE``) gives loss 0, delta 0 and is not correct
    (kit convention: PopLibs' LossTest masks only CROSS_ENTROPY_LOSS; ipukit zeroes both)."""

    probs = Input(Vector(FLOAT))
    label = Input(UNSIGNED_INT)
    loss = Output(FLOAT)
    delta = Output(Vector(FLOAT))
    correct = Output(UNSIGNED_INT)
    cross_entropy = True

    @poputil.vertex_separable
    def compute(self):
        xp, p = self.xp, self.probs
        n, c = p.shape
        label = self.label.astype(np.int64)
        masked = label == (-1 if self.label.dtype.kind == "i" else MASKED_LABEL_CODE)
        label = xp.where(masked, 0, label)
        onehot = (xp.arange(c)[None, :] == label[:, None]) & ~masked[:, None]
        delta = p - onehot
        if self.cross_entropy:
            picked = p[xp.arange(n), label]
            loss = -xp.log(xp.maximum(picked, np.finfo(np.float32).tiny))
        else:
            loss = 0.5 * (delta ** 2).sum(axis=-1)
        self.delta[...] = xp.where(masked[:, None], 0, delta)
        self.loss[...] = xp.where(masked, 0, loss)
        self.correct[...] = (p.argmax(axis=-1) == label) & ~masked


class CalcSumSquaredLoss(CalcLoss):
    """``popnn::CalcLoss`` with SUM_SQUARED_LOSS: ``0.5 * sum((p - onehot)^2)``."""

    cross_entropy = False


class CalcLossInt(CalcLoss):
    """CalcLoss with INT labels (PopLibs instantiates both label types)."""

    label = Input(INT)


class CalcSumSquaredLossInt(CalcSumSquaredLoss):
    """CalcSumSquaredLoss with INT labels."""

    label = Input(INT)


class AddCount(Vertex):
    """``numCorrect += sum(correct)`` on the tile of ``numCorrect``."""

    correct = Input(Vector(UNSIGNED_INT))
    total = InOut(UNSIGNED_INT)

    @poputil.vertex_separable
    def compute(self):
        self.total[...] += self.correct.sum(axis=-1).astype(self.total.dtype)


def calc_loss(graph, model_outputs: Tensor, expected: Tensor, loss: Tensor, delta: Tensor,
              num_correct: Tensor, loss_type=CROSS_ENTROPY_LOSS,
              debug_name: str = "") -> Sequence:
    """``popnn::calcLoss(graph, modelOutputs, expected, loss, deltas, numCorrect, lossType)``.

    ``model_outputs`` (batch, classes) are probabilities (a softmax), ``expected``
    (batch,) UNSIGNED_INT or INT labels; a label equal to ``MASKED_LABEL_CODE`` (-1 as INT)
    is skipped: no loss, a zero delta, not counted (``Loss.hpp``). Writes ``loss``
    (batch,) and ``delta`` (batch, classes) = probabilities - one-hot, and adds the number
    of correct predictions to the one-element ``num_correct`` (zero it before a loop, as
    the MNIST demo does). Like Poplar's, it returns a Program for the caller to add.
    """
    name = debug_name or "calcLoss"
    lt = str(loss_type).upper().removeprefix("LOSSTYPE.")
    if lt not in (CROSS_ENTROPY_LOSS, SUM_SQUARED_LOSS):
        raise IpuError(f"{name}: unknown loss type {loss_type!r}; use CROSS_ENTROPY_LOSS or "
                       "SUM_SQUARED_LOSS")
    outs = model_outputs
    for role, t in (("modelOutputs", outs), ("expected", expected), ("loss", loss),
                    ("deltas", delta), ("numCorrect", num_correct)):
        poputil.check_mapped(graph, t, name, role, tiles=False)
    if outs.rank != 2:
        raise IpuError(f"{name}: modelOutputs '{outs.name}' must be (batch, classes), got "
                       f"{outs.shape}")
    batch = outs.shape[0]
    if (expected.num_elements() != batch or loss.num_elements() != batch
            or tuple(delta.shape) != tuple(outs.shape) or num_correct.num_elements() != 1):
        raise IpuError(
            f"{name}: shapes do not fit: modelOutputs '{outs.name}' {outs.shape}, expected "
            f"'{expected.name}' {expected.shape}, loss '{loss.name}' {loss.shape}, deltas "
            f"'{delta.name}' {delta.shape}, numCorrect '{num_correct.name}' "
            f"{num_correct.shape}; want (B, C), (B,), (B,), (B, C) and (1,)"
        )
    if expected.dtype not in (UNSIGNED_INT, INT) or num_correct.dtype != UNSIGNED_INT:
        raise GraphConnectionError(f"{name}: expected '{expected.name}' must be UNSIGNED_INT "
                                   f"or INT and numCorrect '{num_correct.name}' UNSIGNED_INT")
    signed = expected.dtype == INT
    cls = {(True, False): CalcLoss, (False, False): CalcSumSquaredLoss,
           (True, True): CalcLossInt, (False, True): CalcSumSquaredLossInt}[
        (lt == CROSS_ENTROPY_LOSS, signed)]
    delta_tiles = poputil.tile_of_elements(graph, delta).reshape(outs.shape)[:, 0]
    correct = graph.add_variable(UNSIGNED_INT, [batch], name + "/correct")
    poputil._map_elements(graph, correct, delta_tiles)  # each sample's where its deltas are
    cs = graph.add_compute_set(name + "/LossLayer")
    labels, losses = expected.flatten(), loss.flatten()
    # one vertex per sample (its scalar fields hold one element): the first added (and
    # checked) as any, the rest (rows of the same tensors, on mapped tiles) in one go
    conns = [{"probs": outs[b], "label": labels[b], "loss": losses[b], "delta": delta[b],
              "correct": correct[b]} for b in range(batch)]
    tiles = delta_tiles.tolist()
    if batch:
        graph.add_vertex(cs, cls, conns[0], tile=tiles[0])
        poputil.add_vertices_alike(graph, cs, cls, conns[1:], tiles[1:])
    count = graph.add_compute_set(name + "/NumCorrect")
    tile = int(poputil.tile_of_elements(graph, num_correct)[0])
    graph.add_vertex(count, AddCount, {"correct": correct, "total": num_correct.reshape(())},
                     tile=tile)
    return Sequence(Execute(cs), Execute(count))
