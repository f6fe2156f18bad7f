"""A tiny neural-network framework with explicit backward passes, on the backend ``xp``.

Every layer is a plain object with ``params`` and ``grads`` (dicts of arrays) and two
methods, micrograd style but with whole arrays:

* ``forward(x) -> (y, cache)``: the cache holds what the backward needs. Nothing is kept
  in the layer, so many micro-batches can be in flight at once (a pipeline stashes the
  caches, exactly what Graphcore's FIFOs hold).
* ``backward(dy, cache) -> dx``: adds this micro-batch's weight gradients into ``grads``.
  It is two halves, which a zero-bubble schedule runs as two ops:
  ``backward_input(dy, cache) -> (dx, saved)`` (B, the input gradient, which the stage
  before waits for) and ``backward_weight(saved)`` (W, the weight gradients, which only
  the optimizer step needs).

``flops(x_shape) -> (forward, backward)``, ``weight_flops(x_shape)`` (W's part of the
backward) and ``out_shape(x_shape)`` feed the cost model.
Layers cover PopTorch's pipelining-tutorial network (Conv2D, MaxPool2D, ReLU, Flatten,
Dense) and :class:`SoftmaxCrossEntropy`. Parameters are float32 by default; pass
``dtype="float64"`` for gradient checks. Initialisation follows PyTorch (uniform in
±1/sqrt(fan_in)) from a NumPy ``rng``, so results do not depend on the backend.

>>> import numpy as np
>>> net = Sequential(Dense(3, 4, rng=0), ReLU(), Dense(4, 2, rng=1))
>>> y, cache = net.forward(np.ones((5, 3), dtype=np.float32))
>>> y.shape, net.backward(np.ones_like(y), cache).shape, sorted(net.grads)
((5, 2), (5, 3), ['0.bias', '0.weight', '2.bias', '2.weight'])
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import backend
from ..errors import IpuError


def is_count(v, low: int = 1) -> bool:
    """``v`` is an integer (Python's or NumPy's, not a bool) of at least ``low``."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= low


def check_size(value, what: str) -> int:
    """``value`` as an int if it is a positive whole number (NumPy ints too), else IpuError."""
    if not is_count(value):
        raise IpuError(f"{what} must be a positive whole number, got {value!r}")
    return int(value)


def check_dtype(dtype, what: str) -> np.dtype:
    """A floating-point parameter dtype, else IpuError (gradients need fractions)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.kind != "f":
        raise IpuError(f"{what}: dtype {dtype!r} is not a floating-point type; use "
                       "'float32' (the default), 'float16' or 'float64'")
    return dt


def _rng(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _uniform(rng, shape, fan_in, dtype):
    bound = 1.0 / math.sqrt(fan_in)
    values = _rng(rng).uniform(-bound, bound, size=shape).astype(dtype)
    return backend.get_xp().asarray(values)


def _dev(a):
    """``a`` on the backend in use (a no-op for an array already there): layers take host
    (NumPy) inputs and gradients on CuPy too, as ``Engine.write_tensor`` does."""
    return backend.get_xp().asarray(a)


class Layer:
    """Base class: no parameters, identity shape, no FLOPs."""

    def __init__(self):
        self.params: dict = {}
        self.grads: dict = {}

    def __call__(self, x):
        """``layer(x)``: the forward's output. On a symbolic tensor (``keras.Input``) the
        call is recorded instead, as Keras's functional API does (see
        :mod:`ipukit.parallel.keras`)."""
        record = getattr(x, "_call_layer", None)
        if record is not None:
            return record(self)
        return self.forward(x)[0]

    def forward(self, x):
        raise NotImplementedError

    def backward(self, dy, cache):
        """The input gradient; adds this micro-batch's weight gradients into ``grads``."""
        dx, saved = self.backward_input(dy, cache)
        self.backward_weight(saved)
        return dx

    def backward_input(self, dy, cache):
        """B of a split backward: ``(dx, saved)``, ``saved`` what :meth:`backward_weight`
        needs of this micro-batch."""
        raise IpuError(
            f"{self!r} has no split backward: a zero-bubble schedule (zb_h1, zb_v, "
            "dualpipev) runs B (the input gradient) and W (the weight gradients) as two ops; "
            "give the layer backward_input(dy, cache) -> (dx, saved) and "
            "backward_weight(saved), or use a schedule that does not split the backward")

    def backward_weight(self, saved) -> None:
        """W of a split backward: adds the weight gradients of ``saved`` into ``grads``
        (a layer without weights has none)."""

    def out_shape(self, shape: tuple) -> tuple:
        return tuple(shape)

    def flops(self, shape: tuple) -> tuple[int, int]:
        return 0, 0

    def weight_flops(self, shape: tuple) -> int:
        """The FLOPs of the weight gradients, part of ``flops(shape)[1]``."""
        return 0

    def zero_grad(self) -> None:
        xp = backend.get_xp()
        self.grads = {k: xp.zeros_like(v) for k, v in self.params.items()}

    def _accumulate(self, name, g):
        if name in self.grads:
            self.grads[name] += g
        else:
            self.grads[name] = g.copy()

    def __repr__(self):
        return f"{type(self).__name__}()"


class Dense(Layer):
    """Fully connected ``y = x @ weight + bias`` (``torch.nn.Linear``, Keras ``Dense``)."""

    def __init__(self, in_features: int, out_features: int, rng=0, dtype="float32"):
        super().__init__()
        in_features = check_size(in_features, "Dense in_features")
        out_features = check_size(out_features, "Dense out_features")
        dtype = check_dtype(dtype, f"Dense({in_features}, {out_features})")
        self.in_features, self.out_features = in_features, out_features
        rng = _rng(rng)
        shape = (in_features, out_features)
        self.params = {
            "weight": _uniform(rng, shape, in_features, dtype),
            "bias": _uniform(rng, (out_features,), in_features, dtype),
        }

    def forward(self, x):
        x = _dev(x)
        return x @ self.params["weight"] + self.params["bias"], x

    def backward_input(self, dy, x):
        dy = _dev(dy)
        return dy @ self.params["weight"].T, (x, dy)

    def backward_weight(self, saved):
        x, dy = saved
        self._accumulate("weight", x.T @ dy)
        self._accumulate("bias", dy.sum(axis=0))

    def out_shape(self, shape):
        if len(shape) != 2 or shape[1] != self.in_features:
            raise IpuError(f"{self!r} expects (batch, {self.in_features}) inputs, got shape "
                           f"{tuple(shape)}")
        return (shape[0], self.out_features)

    def flops(self, shape):
        f = 2 * shape[0] * self.in_features * self.out_features
        return f, 2 * f

    def weight_flops(self, shape):
        return self.flops(shape)[0]  # x.T @ dy, as many as the forward's product

    def __repr__(self):
        return f"Dense({self.in_features}, {self.out_features})"


class ReLU(Layer):
    """``max(x, 0)``."""

    def forward(self, x):
        x = _dev(x)
        mask = x > 0
        return x * mask, mask

    def backward_input(self, dy, mask):
        return _dev(dy) * mask, None

    def flops(self, shape):
        n = math.prod(shape)
        return n, n


class Flatten(Layer):
    """``(B, ...) -> (B, prod(...))``."""

    def forward(self, x):
        x = _dev(x)
        return x.reshape(x.shape[0], -1), x.shape

    def backward_input(self, dy, shape):
        return _dev(dy).reshape(shape), None

    def out_shape(self, shape):
        return (shape[0], math.prod(shape[1:]))


class Conv2D(Layer):
    """2-D convolution, stride 1, no padding, NCHW (``torch.nn.Conv2d(cin, cout, k)``).

    Written as im2col: the k*k shifted views of the input become a matrix, so forward and
    backward are matrix products (what poplin's convolution planner does on tiles).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, rng=0,
                 dtype="float32"):
        super().__init__()
        in_channels, out_channels, kernel_size = (
            check_size(v, f"Conv2D {w}") for v, w in ((in_channels, "in_channels"),
                                                      (out_channels, "out_channels"),
                                                      (kernel_size, "kernel_size")))
        dtype = check_dtype(dtype, f"Conv2D({in_channels}, {out_channels}, {kernel_size})")
        self.cin, self.cout, self.k = in_channels, out_channels, kernel_size
        rng = _rng(rng)
        fan_in = in_channels * kernel_size * kernel_size
        shape = (out_channels, in_channels, kernel_size, kernel_size)
        self.params = {
            "weight": _uniform(rng, shape, fan_in, dtype),
            "bias": _uniform(rng, (out_channels,), fan_in, dtype),
        }

    def _cols(self, x):
        xp = backend.get_xp()
        b, c, h, w = x.shape
        ho, wo, k = h - self.k + 1, w - self.k + 1, self.k
        cols = xp.stack([x[:, :, i:i + ho, j:j + wo] for i in range(k) for j in range(k)],
                        axis=2)  # (B, C, k*k, Ho, Wo)
        return cols.reshape(b, c * k * k, ho * wo), (ho, wo)

    def forward(self, x):
        x = _dev(x)
        cols, (ho, wo) = self._cols(x)
        w2 = self.params["weight"].reshape(self.cout, -1)
        y = (w2 @ cols).reshape(x.shape[0], self.cout, ho, wo)
        return y + self.params["bias"][None, :, None, None], (cols, x.shape)

    def backward_input(self, dy, cache):
        xp = backend.get_xp()
        cols, shape = cache
        dy = _dev(dy)
        b, c, h, w = shape
        k, ho, wo = self.k, dy.shape[2], dy.shape[3]
        dy2 = dy.reshape(b, self.cout, ho * wo)
        w2 = self.params["weight"].reshape(self.cout, -1)
        dcols = (w2.T @ dy2).reshape(b, c, k * k, ho, wo)
        dx = xp.zeros(shape, dtype=dy.dtype)
        for i in range(k):
            for j in range(k):
                dx[:, :, i:i + ho, j:j + wo] += dcols[:, :, i * k + j]
        return dx, (cols, dy2)

    def backward_weight(self, saved):
        cols, dy2 = saved
        dw = (dy2 @ cols.transpose(0, 2, 1)).sum(axis=0)  # batched matmul, then sum
        self._accumulate("weight", dw.reshape(self.params["weight"].shape))
        self._accumulate("bias", dy2.sum(axis=(0, 2)))

    def out_shape(self, shape):
        if len(shape) != 4 or shape[1] != self.cin or min(shape[2:]) < self.k:
            raise IpuError(f"{self!r} expects (batch, {self.cin}, H, W) inputs with H, W >= "
                           f"{self.k}, got shape {tuple(shape)}")
        return (shape[0], self.cout, shape[2] - self.k + 1, shape[3] - self.k + 1)

    def flops(self, shape):
        _, _, ho, wo = self.out_shape(shape)
        f = 2 * shape[0] * self.cout * ho * wo * self.cin * self.k * self.k
        return f, 2 * f

    def weight_flops(self, shape):
        return self.flops(shape)[0]  # dy2 @ cols.T, as many as the forward's product

    def __repr__(self):
        return f"Conv2D({self.cin}, {self.cout}, {self.k})"


class MaxPool2D(Layer):
    """Max over non-overlapping 2x2 windows (``torch.nn.MaxPool2d(2)``); H and W even."""

    def forward(self, x):
        xp = backend.get_xp()
        x = _dev(x)
        b, c, h, w = x.shape
        win = (x.reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5)
               .reshape(b, c, h // 2, w // 2, 4))
        idx = win.argmax(axis=-1)
        y = xp.take_along_axis(win, idx[..., None], axis=-1)[..., 0]
        return y, (idx, x.shape)

    def backward_input(self, dy, cache):
        xp = backend.get_xp()
        idx, (b, c, h, w) = cache
        win = (xp.arange(4) == idx[..., None]) * _dev(dy)[..., None]
        return (win.reshape(b, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
                .reshape(b, c, h, w)), None

    def out_shape(self, shape):
        return (shape[0], shape[1], shape[2] // 2, shape[3] // 2)

    def flops(self, shape):
        n = math.prod(shape)
        return n, n


class Sequential(Layer):
    """Layers applied in order; parameters are named ``"<index>.<name>"``."""

    def __init__(self, *layers: Layer):  # no Layer.__init__: parameters live in the layers
        self.layers = list(layers)

    @property
    def params(self):
        return {f"{i}.{k}": v for i, layer in enumerate(self.layers)
                for k, v in layer.params.items()}

    @property
    def grads(self):
        return {f"{i}.{k}": v for i, layer in enumerate(self.layers)
                for k, v in layer.grads.items()}

    def forward(self, x):
        caches = []
        for layer in self.layers:
            x, cache = layer.forward(x)
            caches.append(cache)
        return x, caches

    def backward(self, dy, caches):  # each layer's own backward (split or not)
        for layer, cache in zip(reversed(self.layers), reversed(caches)):
            dy = layer.backward(dy, cache)
        return dy

    def backward_input(self, dy, caches):
        saved = []
        for layer, cache in zip(reversed(self.layers), reversed(caches)):
            dy, s = layer.backward_input(dy, cache)
            saved.append(s)
        return dy, saved[::-1]

    def backward_weight(self, saved):
        for layer, s in zip(self.layers, saved):
            layer.backward_weight(s)

    def zero_grad(self):
        for layer in self.layers:
            layer.zero_grad()

    def out_shape(self, shape):
        for layer in self.layers:
            shape = layer.out_shape(shape)
        return shape

    def flops(self, shape):
        fwd = bwd = 0
        for layer in self.layers:
            f, b = layer.flops(shape)
            fwd, bwd, shape = fwd + f, bwd + b, layer.out_shape(shape)
        return fwd, bwd

    def weight_flops(self, shape):
        total = 0
        for layer in self.layers:
            total += layer.weight_flops(shape)
            shape = layer.out_shape(shape)
        return total

    def __repr__(self):
        return f"Sequential({', '.join(map(repr, self.layers))})"


class SoftmaxCrossEntropy:
    """Mean softmax cross-entropy of logits ``(B, C)`` against integer labels ``(B,)``.

    ``forward(logits, labels) -> (loss, cache)``; ``backward(cache, scale=1.0)`` returns
    ``scale * (softmax - onehot) / B`` (``torch.nn.CrossEntropyLoss``,
    ``tf.nn.sparse_softmax_cross_entropy_with_logits`` + ``reduce_mean``).
    """

    def forward(self, logits, labels):
        xp = backend.get_xp()
        check_labels(labels, logits.shape)
        logits, labels = _dev(logits), _dev(labels)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_z = xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
        logp = shifted - log_z
        rows = xp.arange(logits.shape[0])
        loss = -logp[rows, labels].mean()
        return loss, (logp, labels)

    def backward(self, cache, scale=1.0):
        xp = backend.get_xp()
        logp, labels = cache
        d = xp.exp(logp)
        d[xp.arange(d.shape[0]), labels] -= 1
        return d * (scale / d.shape[0])

    def flops(self, shape):
        n = math.prod(shape)
        return 5 * n, 2 * n


def check_labels(labels, logits_shape) -> None:
    """IpuError unless ``labels`` holds one integer class in 0..C-1 per row of the logits."""
    b, classes = logits_shape
    dtype = getattr(labels, "dtype", None)
    if dtype is None or dtype.kind not in "iu" or tuple(labels.shape) != (b,):
        raise IpuError(
            f"labels must be {b} integer class indices (one per row of the {b}x{classes} "
            f"logits), got {getattr(labels, 'shape', ())} of {dtype or type(labels).__name__}"
        )
    lo, hi = (int(labels.min()), int(labels.max())) if b else (0, 0)
    if lo < 0 or hi >= classes:
        raise IpuError(f"labels hold {lo if lo < 0 else hi}, outside 0..{classes - 1} (the "
                       f"{classes} classes of the logits)")
