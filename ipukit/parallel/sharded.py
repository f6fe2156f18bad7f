"""Sharded (tensor-parallel) ops: one tensor split over the IPUs of a pipeline stage.

This ports the custom ops of Graphcore's "Sharding pipeline stages using concurrent
pipelines" example (graphcore/examples v2.5.0,
``code_examples/tensorflow/concurrent_pipeline/custom_ops/sharded.py``). A sharded tensor is
a plain list of arrays, ``parts[s]`` living on shard s (IPU ``log.ipus[s]``). Every op
returns its result and a ``backward`` closure (micrograd style); the only data that crosses
between IPUs goes through the collectives of :class:`CollectiveLog` (broadcast, reduce,
all-reduce), which count bytes and cycles and record them. A vocabulary sharded by
columns is never gathered on one IPU: the softmax needs only each row's max and sum.

>>> import numpy as np
>>> from ipukit.parallel import sharded
>>> log = sharded.CollectiveLog(num_shards=2)
>>> logits = sharded.shard(np.array([[1.0, 2.0, 3.0, 4.0]]), 2, axis=1, name="logits")
>>> labels = sharded.to_all(np.array([2]), log)[0]
>>> ce, backward = sharded.log_softmax_cross_entropy(logits, labels, log)
>>> print(np.round(ce, 7))
[1.4401897]
>>> [np.round(g, 7).tolist() for g in backward(np.ones(1))]
[[[0.0320586, 0.0871443]], [[-0.7631172, 0.6439143]]]
>>> [r.kind for r in log.records if r.ipu == 0]
['broadcast', 'all_reduce_max', 'all_reduce_add', 'reduce_add', 'broadcast']
"""

from __future__ import annotations

from ..errors import IpuError
from . import collectives
from .collectives import (
    TIMELINE_KINDS,
    CollectiveLog,
    _check_indices,
    _check_parts,
    _check_range,
    check_even,
    local_indices,
    shard,
    unshard,
)
from .emulated import sharded_ops


def to_all(x, log: CollectiveLog, name: str = "to_all"):
    """Copy ``x`` from shard 0 to every shard (``copy_to_all``).

    Backward: the shards' gradients are summed back onto shard 0.
    """
    return _ops(log).to_all(x, log, name)


def matmul(x_parts: list, w_parts: list, log: CollectiveLog, name: str = "matmul"):
    """``x @ w`` with ``w`` [K, M] sharded by columns (``sharded_matmul``).

    ``x_parts`` is ``x`` [B, K] on every shard (from :func:`to_all`); shard s computes its
    own columns ``y_s = x @ w_s``, so the output [B, M] stays sharded by columns. Backward
    is local: ``dw_s = xᵀ @ dy_s`` and the input gradient is left as unreduced partials
    ``dy_s @ w_sᵀ``, summed by the backward of the :func:`to_all` that made ``x_parts``.
    """
    _check_parts(x_parts, log, f"{name} input", 2)
    _check_parts(w_parts, log, f"{name} weights", 2)
    if x_parts[0].shape[1] != w_parts[0].shape[0]:
        raise IpuError(
            f"{name}: input {tuple(x_parts[0].shape)} cannot multiply weight shards "
            f"{tuple(w_parts[0].shape)}: inner sizes differ"
        )
    return _ops(log).matmul(x_parts, w_parts, log, name)


def embedding(w_parts: list, idx_parts: list, log: CollectiveLog, name: str = "embedding"):
    """Look up rows ``w[idx]`` of a table [V, C] sharded by rows (``embedding``).

    Each shard looks up the indices it owns (masked ``multiSlice``), writes zeros for the
    others, and the partial results are added onto shard 0: out [N, C] on shard 0.
    Backward: the gradient is broadcast and each shard scatter-adds the rows it owns
    (``multiUpdateAdd``), ``dw[v] = sum of g[n] over idx[n] == v``.
    """
    _check_parts(w_parts, log, f"{name} weights", 2)
    _check_parts(idx_parts, log, f"{name} indices", 1)
    _check_indices(idx_parts, f"{name} indices")
    size = w_parts[0].shape[0]
    _check_range(idx_parts[0], size * log.num_shards, f"{name} indices")
    return _ops(log).embedding(w_parts, idx_parts, log, name)


def log_softmax(x_parts: list, log: CollectiveLog, name: str = "log_softmax"):
    """Log-softmax over the last axis of ``x`` [B, V] sharded by columns.

    All-reduce MAX of the shards' row maxima, then all-reduce ADD of their partial sums
    ``sum(exp(x_s - max))``: only [B] numbers cross between IPUs, never the V columns.
    Backward: ``dx = dy - softmax * sum(dy)``, the row sum again by all-reduce ADD.
    """
    _check_parts(x_parts, log, f"{name} input", 2)
    return _ops(log).log_softmax(x_parts, log, name)


def take_last(x_parts: list, idx_parts: list, log: CollectiveLog, name: str = "take_last"):
    """``x[b, idx[b]]`` for ``x`` [B, V] sharded by columns (``sharded_take_last``).

    The shard owning column ``idx[b]`` supplies it, the others zero; the partials are added
    onto shard 0: out [B] on shard 0. Backward puts ``g[b]`` at ``[b, idx[b]]`` on the
    owning shard and zero elsewhere.
    """
    _check_parts(x_parts, log, f"{name} input", 2)
    _check_parts(idx_parts, log, f"{name} indices", 1)
    _check_indices(idx_parts, f"{name} indices", x_parts[0].shape[0])
    size = x_parts[0].shape[1]
    _check_range(idx_parts[0], size * log.num_shards, f"{name} indices")
    return _ops(log).take_last(x_parts, idx_parts, log, name)


def log_softmax_cross_entropy(
    logits_parts: list, label_parts: list, log: CollectiveLog, name: str = "cross_entropy"
):
    """Per-row ``-log_softmax(logits)[b, labels[b]]``, logits sharded by columns.

    The fused op ``sharded_log_softmax_cross_entropy``: forward is :func:`log_softmax`
    then :func:`take_last`, out [B] on shard 0. The fused backward broadcasts ``g`` [B]
    and computes ``g * (softmax - onehot(label))`` where each shard subtracts ``g`` only at
    the labels it owns, so no vocabulary-sized tensor ever crosses between IPUs.
    """
    _check_parts(logits_parts, log, f"{name} logits", 2)
    _check_parts(label_parts, log, f"{name} labels", 1)
    _check_indices(label_parts, f"{name} labels", logits_parts[0].shape[0])
    _check_range(label_parts[0], logits_parts[0].shape[1] * log.num_shards,
                 f"{name} labels")
    return _ops(log).log_softmax_cross_entropy(logits_parts, label_parts, log, name)


def _ops(log: CollectiveLog):
    """Where ``log``'s ops run: on the emulator (``emulate=True``) or in NumPy."""
    return sharded_ops if log.emulate else collectives


__all__ = [
    "TIMELINE_KINDS",
    "CollectiveLog",
    "check_even",
    "embedding",
    "local_indices",
    "log_softmax",
    "log_softmax_cross_entropy",
    "matmul",
    "shard",
    "take_last",
    "to_all",
    "unshard",
]
