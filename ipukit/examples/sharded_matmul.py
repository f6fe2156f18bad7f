"""A classifier sharded by output columns: Graphcore's ``sharded_matmul_tool.py``.

The input [rows, cols] is copied to every IPU (``to_all``), each IPU multiplies it by its
own outsize/S columns of the weights, and the softmax cross-entropy runs on the sharded
logits. Loss, logits and both gradients are checked against a dense NumPy reference.

    python -m ipukit.examples.sharded_matmul [--rows 32] [--cols 512] [--outsize 100]

>>> lhs, rhs, labels = make_data(32, 512, 100)
>>> labels[:8].tolist()
[69, 71, 81, 20, 88, 42, 40, 72]
>>> round(sharded_classifier(lhs, rhs, labels, 2).loss, 5)
5.85173
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from .. import backend
from ..parallel import sharded
from ..target import IPUModel
from ._cli import (
    Parser,
    add_common_options,
    check_fits,
    close,
    positive_int,
    print_collectives,
    run,
)


def make_data(rows: int, cols: int, outsize: int, seed: int = 101):
    """Graphcore's data: normal input, Glorot-uniform weights, int32 labels."""
    rng = np.random.default_rng(seed=seed)
    lhs = rng.normal(0, 1, [rows, cols]).astype(np.float32)
    limit = np.sqrt(6.0 / (cols + outsize))
    rhs = rng.uniform(-limit, limit, [cols, outsize]).astype(np.float32)
    labels = rng.uniform(0, outsize, rows).astype(np.int32)
    return lhs, rhs, labels


def reference(lhs, rhs, labels):
    """Dense float64 NumPy: (loss, logits, dloss/dlhs, dloss/drhs) of mean cross-entropy."""
    x, w = np.asarray(lhs, dtype=np.float64), np.asarray(rhs, dtype=np.float64)
    rows = np.arange(len(labels))
    logits = x @ w
    top = logits.max(axis=1, keepdims=True)
    lse = top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    loss = float(np.mean(lse[:, 0] - logits[rows, labels]))
    dlogits = np.exp(logits - lse)
    dlogits[rows, labels] -= 1.0
    dlogits /= len(labels)
    return loss, logits, dlogits @ w.T, x.T @ dlogits


@dataclass
class ShardedRun:
    """Results on the IPUs: ``dlhs`` on IPU 0, the others one array per IPU."""

    loss: float
    logits: list
    dlhs: object
    drhs: list
    log: sharded.CollectiveLog


def sharded_classifier(lhs, rhs, labels, num_ipus: int) -> ShardedRun:
    """Forward and backward of ``mean(CE(lhs @ rhs, labels))`` with rhs sharded by columns."""
    xp = backend.get_xp()
    log = sharded.CollectiveLog(num_ipus)
    w_parts = sharded.shard(rhs, num_ipus, axis=1, name="the weights")
    x_all, x_backward = sharded.to_all(lhs, log, "input")
    labels_all, _ = sharded.to_all(labels, log, "labels")
    logits, matmul_backward = sharded.matmul(x_all, w_parts, log)
    ce, ce_backward = sharded.log_softmax_cross_entropy(logits, labels_all, log)
    loss = float(ce.astype(xp.float32).mean())
    dlogits = ce_backward(xp.full(ce.shape, 1.0 / ce.shape[0], dtype=ce.dtype))
    dx_partials, drhs = matmul_backward(dlogits)
    return ShardedRun(loss, logits, x_backward(dx_partials), drhs, log)


def check_sizes(args, dtype) -> None:
    """Say what the sizes would need before allocating anything (issue 12)."""
    r, c, o, s = args.rows, args.cols, args.outsize, args.ipus
    sharded.check_even(o, s, f"the weights [{c}, {o}] along dimension 1")
    item = np.dtype(dtype).itemsize
    per_ipu = item * (2 * r * c + 2 * c * (o // s) + 3 * r * (o // s))
    host = 4 * (r * c + c * o) + (0 if args.no_checks else 8 * (2 * r * c + 2 * c * o
                                                                 + 3 * r * o))
    check_fits(f"a [{r:,}, {c:,}] x [{c:,}, {o:,}] classifier over {s} IPUs",
               IPUModel("ipu2").create_device().target, per_ipu, host)


def _main(args) -> int:
    dtype = np.float16 if args.fp16 else np.float32
    check_sizes(args, dtype)
    lhs, rhs, labels = make_data(args.rows, args.cols, args.outsize)
    lhs, rhs = lhs.astype(dtype), rhs.astype(dtype)
    result = sharded_classifier(lhs, rhs, labels, args.ipus)
    per = args.outsize // args.ipus
    for s in range(args.ipus):
        print(f"IPU {s}: weight columns {s * per}..{(s + 1) * per - 1}, "
              f"logits [{args.rows}, {per}]")
    print_collectives(result.log)
    if args.no_checks:
        print(f"Our loss: {result.loss}")
        return 0
    ref_loss, ref_logits, ref_dlhs, ref_drhs = reference(lhs, rhs, labels)
    print(f"Reference loss: {ref_loss}")
    print(f"Our loss: {result.loss}")
    rtol, atol = (1e-3, 1e-2) if args.fp16 else (1e-5, 1e-4)
    checks = [
        ("Loss", result.loss, ref_loss),
        ("Logits", sharded.unshard(result.logits, axis=1), ref_logits),
        ("Input gradient", result.dlhs, ref_dlhs),
        ("Weight gradient", sharded.unshard(result.drhs, axis=1), ref_drhs),
    ]
    if not all(close(what, ours, ref, rtol, atol) for what, ours, ref in checks):
        return 1
    print("Results match.")
    return 0


def main(argv=None) -> int:
    parser = Parser(
        prog="python -m ipukit.examples.sharded_matmul",
        description="A matmul sharded by output columns, with a sharded softmax cross-entropy.",
    )
    add_common_options(parser)
    parser.add_argument("--rows", type=positive_int, default=32)
    parser.add_argument("--cols", type=positive_int, default=512)
    parser.add_argument("--outsize", type=positive_int, default=100)
    return run(_main, argv, parser)


if __name__ == "__main__":
    sys.exit(main())
