"""Optimisers: SGD (with momentum), Adam and AdamW, as PyTorch defines them.

``opt.step(params, grads)`` updates every array of ``params`` in place from the array of
``grads`` with the same key; state (momentum buffers, Adam moments) lives in
``opt.state[key]``. ``state_bytes(params)`` and ``flops(params)`` feed the pipeline
runner's memory record and cost model. The runner applies the optimiser once per pipeline
run (TensorFlow's "resource update", PopTorch's weight update); with
``offload_optimizer_state`` the state lives in Streaming Memory (remote buffers) and
streams in and out (kit convention: counted as ``RunResult.host_bytes``, at the host
link's bandwidth).

>>> import numpy as np
>>> p = {"w": np.array([1.0, -2.0])}
>>> opt = AdamW(lr=0.1, weight_decay=0.0)
>>> opt.step(p, {"w": np.array([0.5, -3.0])})   # Adam's first step: lr * sign(g)
>>> np.round(p["w"], 6).tolist()
[0.9, -1.9]
"""

from __future__ import annotations

import math
import numbers

from .. import backend
from ..errors import IpuError


def _check(value, what: str, low: float = 0.0, below: float | None = None) -> float:
    """PyTorch's checks: ``Invalid learning rate: -1.0`` for a value outside its range."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and value >= low and (below is None or value < below)
    if not ok:
        want = f"in [{low}, {below})" if below is not None else f">= {low}"
        raise IpuError(f"Invalid {what}: {value!r} (it must be a number {want}, as in "
                       "torch.optim)")
    return float(value)


class Optimizer:
    """Base class: ``lr`` and per-parameter ``state``."""

    #: arrays of state per parameter, and FLOPs per parameter element per step
    slots = 0
    flops_per_element = 2

    def __init__(self, lr: float):
        self.lr = _check(lr, "learning rate")
        self.state: dict = {}

    def step(self, params: dict, grads: dict) -> None:
        """Update ``params`` in place from ``grads``. A gradient in another dtype than its
        parameter (a ``gradient_accumulation_dtype`` accumulator) is cast to the
        parameter's dtype first: TensorFlow leaves that cast to the optimiser (wrap it in
        ``MapGradientOptimizer`` with ``tf.cast``); the kit's optimisers make it (kit
        convention)."""
        for key, p in params.items():  # host parameters stay on the host, device ones there
            g = backend.like(grads[key], p)
            self._update(key, p, g if g.dtype == p.dtype else g.astype(p.dtype))

    def _update(self, key, p, g):
        raise NotImplementedError

    def state_bytes(self, params: dict) -> int:
        return self.slots * sum(int(p.nbytes) for p in params.values())

    def flops(self, params: dict) -> int:
        return self.flops_per_element * sum(int(p.size) for p in params.values())


class SGD(Optimizer):
    """``torch.optim.SGD``: ``buf = momentum*buf + g`` (``buf = g`` at first), ``p -= lr*buf``.

    ``weight_decay`` adds ``weight_decay * p`` to the gradient (L2).
    """

    def __init__(self, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(lr)
        momentum = _check(momentum, "momentum value")
        weight_decay = _check(weight_decay, "weight_decay value")
        self.momentum, self.weight_decay = momentum, weight_decay
        self.slots = 1 if momentum else 0
        self.flops_per_element = 4 if momentum else 2

    def _update(self, key, p, g):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = self.state.get(key)
            buf = g.copy() if buf is None else self.momentum * buf + g
            self.state[key] = buf
            g = buf
        p -= self.lr * g


class Momentum(SGD):
    """SGD with momentum 0.9 by default (TensorFlow's ``MomentumOptimizer``)."""

    def __init__(self, lr: float = 0.01, momentum: float = 0.9, weight_decay: float = 0.0):
        super().__init__(lr, momentum, weight_decay)


class Adam(Optimizer):
    """``torch.optim.Adam``: bias-corrected moments; ``weight_decay`` is L2 on the gradient."""

    slots = 2
    flops_per_element = 12
    decoupled = False

    def __init__(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(lr)
        if not (isinstance(betas, tuple | list) and len(betas) == 2):
            raise IpuError(f"Adam betas must be a pair (beta1, beta2), e.g. (0.9, 0.999), got "
                           f"{betas!r}")
        betas = tuple(_check(b, f"beta parameter at index {i}", 0.0, 1.0)
                      for i, b in enumerate(betas))
        eps = _check(eps, "epsilon value")
        weight_decay = _check(weight_decay, "weight_decay value")
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay

    def _update(self, key, p, g):
        xp = backend.module_of(p)
        b1, b2 = self.betas
        if self.weight_decay and self.decoupled:
            p *= 1 - self.lr * self.weight_decay
        elif self.weight_decay:
            g = g + self.weight_decay * p
        st = self.state.setdefault(key, {"step": 0, "m": xp.zeros_like(p),
                                         "v": xp.zeros_like(p)})
        st["step"] += 1
        t = st["step"]
        st["m"] = b1 * st["m"] + (1 - b1) * g
        st["v"] = b2 * st["v"] + (1 - b2) * g * g
        m_hat = st["m"] / (1 - b1**t)
        v_hat = st["v"] / (1 - b2**t)
        p -= self.lr * m_hat / (xp.sqrt(v_hat) + self.eps)


class AdamW(Adam):
    """``torch.optim.AdamW``: Adam with decoupled weight decay ``p *= 1 - lr*wd`` (0.01)."""

    decoupled = True

    def __init__(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(lr, betas, eps, weight_decay)
