"""A tied embedding sharded over IPUs: Graphcore's ``sharded_embedding_tool.py``.

The table W [V, C] is split by rows, V/S per IPU. One pipeline stage on all IPUs looks up
the tokens (masked lookup, partials added), projects back onto the same table
(``x @ Wᵀ``, logits sharded by columns) and takes the softmax cross-entropy without ever
gathering the V logits on one IPU. The loss and the tied gradient (lookup plus projection
contributions) are checked against a dense NumPy reference.

    python -m ipukit.examples.sharded_embedding
    python -m ipukit.examples.sharded_embedding --ipus 4 --vocab-size 8000 \\
        --feature-size 768 --sequence-length 256
    python -m ipukit.examples.sharded_embedding --emulate

``--emulate`` builds the same stage as Poplar programs on the emulator, one virtual graph
per IPU (:mod:`ipukit.parallel.emulated.sharded`), and runs the same checks.

>>> features, indices = make_data(20, 3, 7)
>>> indices.tolist()
[10, 4, 16, 5, 9, 16, 6]
>>> round(sharded_tied_embedding(features, indices, 2).loss, 6)
2.315364
"""

from __future__ import annotations

import gc
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


def make_data(vocab_size: int, feature_size: int, sequence_length: int, seed: int = 284):
    """Graphcore's data: L2-normalised float32 rows [V, C] and int32 token ids [L]."""
    rng = np.random.default_rng(seed=seed)
    features = rng.normal(0, 1, [vocab_size, feature_size]).astype(np.float32)
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    indices = rng.uniform(0, vocab_size, sequence_length).astype(np.int32)
    return features, indices


def reference(features, indices, dtype=np.float64):
    """Dense NumPy (float64 by default): (loss, logits, dloss/dfeatures), labels = indices."""
    w = np.asarray(features, dtype=dtype)
    n, rows = len(indices), np.arange(len(indices))
    x = w[indices]
    logits = x @ w.T
    top = logits.max(axis=1, keepdims=True)
    lse = top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    loss = float(np.mean(lse[:, 0] - logits[rows, indices]))
    dlogits = np.exp(logits - lse)
    dlogits[rows, indices] -= 1.0
    dlogits /= n
    grad = dlogits.T @ x  # projection: logits = x @ w.T
    np.add.at(grad, indices, dlogits @ w)  # lookup: x = w[indices]
    return loss, logits, grad


@dataclass
class ShardedRun:
    """What the sharded stage leaves on the IPUs: one array per IPU in each list."""

    loss: float
    weights: list
    logits: list
    grad: list
    log: sharded.CollectiveLog


def sharded_tied_embedding(features, indices, num_ipus: int) -> ShardedRun:
    """Forward and backward of the tied embedding, sharded over ``num_ipus`` IPUs."""
    xp = backend.get_xp()
    log = sharded.CollectiveLog(num_ipus)
    w_parts = sharded.shard(features, num_ipus, axis=0, name="the embedding table")
    idx_all, _ = sharded.to_all(indices, log, "indices")
    embedded, embedding_backward = sharded.embedding(w_parts, idx_all, log)
    x_all, x_backward = sharded.to_all(embedded, log, "embedded")
    logits, projection_backward = sharded.matmul(x_all, [w.T for w in w_parts], log, "projection")
    ce, ce_backward = sharded.log_softmax_cross_entropy(logits, idx_all, log, "cross_entropy")
    loss = float(ce.astype(xp.float32).mean())  # labels = indices: predict the same token
    # Backward, in reverse: mean, cross-entropy, projection, to_all, lookup.
    dlogits = ce_backward(xp.full(ce.shape, 1.0 / ce.shape[0], dtype=ce.dtype))
    dx_partials, dw_projection = projection_backward(dlogits)
    dw_lookup = embedding_backward(x_backward(dx_partials))
    grad = [a + b.T for a, b in zip(dw_lookup, dw_projection)]  # tied: both uses of W
    return ShardedRun(loss, w_parts, logits, grad, log)


def print_memory(result: ShardedRun) -> None:
    """Bytes per IPU, against gathering the full logits on one IPU."""
    log, s_count = result.log, result.log.num_shards
    seq_len, vocab = result.logits[0].shape[0], result.logits[0].shape[1] * s_count
    print(f"Per IPU: {vocab // s_count} of {vocab} embedding rows, logits "
          f"[{seq_len}, {vocab // s_count}] of [{seq_len}, {vocab}]")
    print("  IPU   weights+grad (B)   logits (B)   sent over IPU-Links (B)")
    for s, sent in enumerate(log.bytes_sent()):
        held = result.weights[s].nbytes + result.grad[s].nbytes
        print(f"  {log.ipus[s]:>3}   {held:>16,}   {result.logits[s].nbytes:>10,}   {sent:>23,}")
    full = result.logits[0].nbytes * s_count
    loss_bytes = max(sum(r.bytes for r in log.records if r.ipu == ipu and
                         r.label.startswith("cross_entropy")) for ipu in log.ipus)
    print(f"Gathering the full logits [{seq_len}, {vocab}] on one IPU instead: it would hold "
          f"{full:,} B of logits and receive {full * (s_count - 1) // s_count:,} B; the "
          f"sharded cross-entropy sends at most {loss_bytes:,} B per IPU (forward and "
          "backward).")
    print_collectives(log)


def auto_tiles(vocab: int, channels: int, length: int, ipus: int, bytes_per_tile: int) -> int:
    """Tiles per emulated IPU for ``--emulate``: a power of two from 16 with room for the
    shard's tensors (table, gradients, logits and their softmax temporaries) and the
    exchange buffers of its matrix products (about 4x the tensors) (kit convention)."""
    rows = vocab // ipus
    need = 4 * 4 * (3 * rows * channels + 7 * length * rows + 4 * length * channels)
    tiles = 16
    while tiles * bytes_per_tile < need and tiles < 1024:
        tiles *= 2
    return tiles


def print_emulation(result, ipus: int) -> None:
    """What the emulator ran: supersteps, cycles, inter-IPU bytes, the fullest tile."""
    trace, t = result.trace, result.trace.target
    summary = trace.summary()
    cross = sum(s.inter_ipu_bytes for s in trace.executed_steps())
    print(f"Emulated on {ipus} IPUs x {t.tiles_per_ipu} tiles ({t.version}): "
          f"{len(trace) - 1} supersteps and copies, {trace.total_cycles:,} cycles "
          f"({t.cycles_to_us(trace.total_cycles):,.1f} us), {cross:,} B between IPUs; "
          f"fullest tile {summary['memory_max']:,} of {t.bytes_per_tile:,} B")


def check_sizes(args, dtype) -> None:
    """Say what the sizes would need before allocating anything (issue 12)."""
    v, c, n, s = args.vocab_size, args.feature_size, args.sequence_length, args.ipus
    sharded.check_even(v, s, f"the embedding table [{v}, {c}] along dimension 0")
    item = np.dtype(dtype).itemsize
    per_ipu = item * (2 * (v // s) * c + 3 * n * (v // s))  # rows + gradient, logits
    host = 4 * v * c + (0 if args.no_checks else 8 * 4 * n * v + 16 * v * c)
    check_fits(f"a tied embedding of {v:,} x {c:,} over {s} IPUs with {n:,} tokens",
               IPUModel("ipu2").create_device().target, per_ipu, host)


def _main(args) -> int:
    dtype = np.float16 if args.fp16 else np.float32
    check_sizes(args, dtype)
    features, indices = make_data(args.vocab_size, args.feature_size, args.sequence_length)
    features = features.astype(dtype)
    if args.emulate:
        from ..parallel.emulated import sharded as emulated_sharded  # noqa: PLC0415 - --emulate

        tiles = args.tiles_per_ipu or auto_tiles(args.vocab_size, args.feature_size,
                                                 args.sequence_length, args.ipus,
                                                 IPUModel("ipu2").create_device()
                                                 .target.bytes_per_tile)
        result = emulated_sharded.tied_embedding(features, indices, args.ipus,
                                                 tiles_per_ipu=tiles)
        print_emulation(result, args.ipus)
        result.graph = result.trace = None  # the checks read its arrays: the graph's memory
        gc.collect()  # goes (its tensors and virtual graphs refer to it: cycles)
    else:
        result = sharded_tied_embedding(features, indices, args.ipus)
        print_memory(result)
    if args.no_checks:
        print(f"Our loss: {result.loss}")
        return 0
    ref_loss, ref_logits, ref_grad = reference(features, indices)
    ours_argmax = backend.to_numpy(sharded.unshard(result.logits, axis=1)).argmax(axis=1)
    if not (np.array_equal(ref_logits.argmax(axis=1), indices)
            and np.array_equal(ours_argmax, indices)):
        print("The argmax of the tied projection does not reproduce the inputs.")
        return 1
    print(f"Reference loss: {ref_loss}")
    print(f"Our loss: {result.loss}")
    rtol, atol = (1e-3, 1e-2) if args.fp16 else (1e-6, 1e-5)
    ours_grad = sharded.unshard(result.grad, axis=0)
    if not (close("Loss", result.loss, ref_loss, rtol, atol)
            and close("Embedding gradient", ours_grad, ref_grad, rtol, atol)):
        return 1
    print("Results match.")
    return 0


def main(argv=None) -> int:
    parser = Parser(
        prog="python -m ipukit.examples.sharded_embedding",
        description="Tied embedding, projection and softmax cross-entropy sharded over IPUs.",
    )
    add_common_options(parser)
    parser.add_argument("--vocab-size", type=positive_int, default=20)
    parser.add_argument("--feature-size", type=positive_int, default=3)
    parser.add_argument("--sequence-length", type=positive_int, default=7)
    parser.add_argument("--emulate", action="store_true",
                        help="run as Poplar programs on the IPU emulator")
    parser.add_argument("--tiles-per-ipu", type=positive_int, default=None,
                        help="tiles of each emulated IPU (default: enough for the shard)")
    return run(_main, argv, parser)


if __name__ == "__main__":
    sys.exit(main())
