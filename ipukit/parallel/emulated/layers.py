"""nn's layers as PopLibs ops on a stage's virtual graph (their forward is in
:mod:`.stages`): Dense is ``poplin.mat_mul`` plus a bias add, Conv2D a matrix product
with an im2col view of its input (as poplin plans it), its input gradient a col2im of
adds; MaxPool2D a MAX reduce over 2x2 window views, its gradient a small vertex routing
each window's gradient to its first maximum. A layer's weight gradient is written where
its weights are (``poplin.mat_mul_with_output``, the layout of PopLibs' weight-update
pass; a bias's reduction copied there).
"""

from __future__ import annotations

import math

import numpy as np

from ...poplibs import poplin, popops, poputil
from ...program import Copy, Execute
from ...tensor import FLOAT, Tensor
from ...vertex import Input, Output, Vector, Vertex
from .. import nn
from .tensors import linear, map_like


def layers_of(net) -> list:
    """The layers of a stage (or a concurrent stage's member), in order."""
    return list(net.layers) if isinstance(net, nn.Sequential) else [net]


def param_key(net, i: int, name: str) -> str:
    """The key of parameter ``name`` of layer ``i`` in ``net.params``."""
    return f"{i}.{name}" if isinstance(net, nn.Sequential) else name


def im2col(x: Tensor, k: int) -> Tensor:
    """im2col as a view: (C*k*k, B*Ho*Wo), element [c*k*k + i*k + j, (b, h, w)] being
    ``x[b, c, h + i, w + j]`` (the k*k shifted views of nn.Conv2D, no copy)."""
    bsz, c, h, w = x.shape
    ho, wo = h - k + 1, w - k + 1
    idx = np.stack([x.idx[:, :, i:i + ho, j:j + wo] for i in range(k) for j in range(k)],
                   axis=2)  # (B, C, k*k, Ho, Wo)
    idx = idx.transpose(1, 2, 0, 3, 4).reshape(c * k * k, bsz * ho * wo)
    return Tensor(x.graph, x.dtype, idx, f"{x.name}/im2col")


def conv_forward(vg, layer, x, w, b, prog, name) -> Tensor:
    """nn.Conv2D as poplin does it: a matrix product of the weights and the im2col view."""
    bsz, _, h, wd = x.shape
    k, cout = layer.k, layer.cout
    ho, wo = h - k + 1, wd - k + 1
    y2 = poplin.mat_mul(vg, w.reshape([cout, -1]), im2col(x, k), prog, name)
    y = y2.reshape([cout, bsz, ho, wo]).dim_shuffle([1, 0, 2, 3])
    popops.add_in_place(vg, y, b.reshape([1, cout, 1, 1]), prog, name + "/bias")
    return y


def conv_weight_grad(vg, layer, x, dy, out, prog, name) -> None:
    """nn.Conv2D's weight and bias gradients into ``out`` (two tensors)."""
    bsz, _, h, wd = x.shape
    k, cout = layer.k, layer.cout
    dy2 = dy.dim_shuffle([1, 0, 2, 3]).reshape([cout, bsz * (h - k + 1) * (wd - k + 1)])
    poplin.mat_mul_with_output(vg, dy2, im2col(x, k).transpose(), out[0].reshape([cout, -1]),
                               prog, name + "/weight")
    bias_grad(vg, dy, [0, 2, 3], out[1], prog, name + "/bias")


def conv_input_grad(vg, layer, x, w, dy, prog, name) -> Tensor:
    """nn.Conv2D's input gradient: the weights times ``dy``, then a col2im of adds."""
    bsz, c, h, wd = x.shape
    k, cout = layer.k, layer.cout
    ho, wo = h - k + 1, wd - k + 1
    dy2 = dy.dim_shuffle([1, 0, 2, 3]).reshape([cout, bsz * ho * wo])
    dcols = poplin.mat_mul(vg, w.reshape([cout, -1]).transpose(), dy2, prog, name + "/input")
    dcols = dcols.reshape([c, k * k, bsz, ho, wo])
    dx = linear(vg, FLOAT, x.shape, name + "/input grad")
    popops.zero(vg, dx, prog, name + "/input grad zero")
    for i in range(k):  # col2im: each shifted view's gradient added where it came from
        for j in range(k):
            part = dcols[:, i * k + j].dim_shuffle([1, 0, 2, 3])
            popops.add_in_place(vg, dx.slice([0, 0, i, j], [bsz, c, i + ho, j + wo]), part,
                                prog, f"{name}/col2im {i},{j}")
    return dx


def bias_grad(vg, dy, dims, out, prog, name) -> None:
    """``dy`` summed over ``dims`` into ``out`` (a bias's slice of the stage's gradients,
    on a tile or two): reduced where the partials lie (``popops.reduce``), then copied,
    so that no single tile combines every partial."""
    prog.add(Copy(popops.reduce(vg, dy, dims, popops.Operation.ADD, prog, name), out))


def windows(x: Tensor) -> Tensor:
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


def maxpool_backward(vg, x, dy, prog, name) -> Tensor:
    dx = vg.add_variable(FLOAT, x.shape, name + "/input grad")
    map_like(vg, dx, x)
    win, dwin = windows(x), windows(dx)
    rows = math.prod(win.shape[:4])
    tiles = poputil.tile_of_elements(vg, dwin).reshape(rows, 4)[:, 0]
    cs = vg.add_compute_set(name)
    popops.add_per_tile_vertices(vg, cs, MaxPoolGrad, {
        "win": win.reshape([rows, 4]), "dy": dy.reshape([rows, 1]),
        "dx": dwin.reshape([rows, 4])}, tiles)
    prog.add(Execute(cs))
    return dx
