"""Concurrent pipeline stages: members side by side equal the dense model, and the
timeline and memory show each IPU's part and the stage's collectives."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipukit import backend
from ipukit.errors import IpuError, PipelineConfigError
from ipukit.parallel import nn, optim, pipeline
from ipukit.parallel.concurrent import (
    Concurrent,
    ShardedSoftmaxCrossEntropy,
    join,
    split_dense,
)
from ipukit.target import IPUModel

LR = 0.1


def reference(layers, x, y, g, lr=LR):
    """Plain gradient accumulation (SUM) then one SGD step of an MLP, in NumPy.

    ``layers`` is a list of (weight, bias, relu). Returns (losses, updated layers).
    """
    xs, ys = x.reshape(g, -1, x.shape[-1]), y.reshape(g, -1)
    grads = [(np.zeros_like(w), np.zeros_like(b)) for w, b, _ in layers]
    losses = []
    for m in range(g):
        acts, pre = [xs[m]], []
        for w, b, relu in layers:
            pre.append(acts[-1] @ w + b)
            acts.append(np.maximum(pre[-1], 0) if relu else pre[-1])
        logits, rows = acts[-1], np.arange(len(ys[m]))
        top = logits.max(axis=1, keepdims=True)
        lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
        losses.append(np.mean(lse - logits[rows, ys[m]]))
        d = np.exp(logits - lse[:, None])
        d[rows, ys[m]] -= 1
        d /= len(rows)
        for i in reversed(range(len(layers))):
            w, _, relu = layers[i]
            if relu:
                d = d * (pre[i] > 0)
            grads[i][0][...] += acts[i].T @ d
            grads[i][1][...] += d.sum(axis=0)
            d = d @ w.T
    new = [(w - lr * gw, b - lr * gb, relu) for (w, b, relu), (gw, gb) in zip(layers, grads)]
    return np.array(losses), new


def dense(a, b, seed):
    return nn.Dense(a, b, rng=seed, dtype="float64")


def wb(layer):  # host copies (on CuPy the parameters live on the GPU)
    return backend.to_numpy(layer.params["weight"]).copy(), \
        backend.to_numpy(layer.params["bias"]).copy()


def joined(members):
    """The members' weights and biases side by side (what the dense layer holds)."""
    ws, bs = zip(*(wb(m) for m in members))
    return np.concatenate(ws, axis=1), np.concatenate(bs)


def data(n, d, classes, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.integers(0, classes, n)


# --- numerics: concurrent equals dense ----------------------------------------------------


@pytest.mark.parametrize("kind, g, shards, recompute", [
    ("grouped", 4, 2, False), ("interleaved", 4, 3, False), ("sequential", 3, 2, True),
    ("1f1b", 4, 6, False), ("grouped", 8, 2, True),
])
def test_sharded_classifier_equals_dense_training(kind, g, shards, recompute):
    mb, d, h, classes = 3, 5, 7, 6
    first, classifier = dense(d, h, 1), dense(h, classes, 2)
    layers = [(*wb(first), True), (*wb(classifier), False)]
    x, y = data(g * mb, d, classes)
    p = pipeline([[first, nn.ReLU()], split_dense(classifier, shards)],
                 [0, list(range(1, shards + 1))], g, kind, recomputation=recompute,
                 optimizer=optim.SGD(LR), loss=ShardedSoftmaxCrossEntropy())
    r = p.run(x, y)
    recomputed = {rec.ipu for rec in r.timeline if rec.kind == "R" and rec.stage == 1}
    assert recomputed == (set(range(1, shards + 1)) if recompute else set())
    losses, new = reference(layers, x, y, g)
    np.testing.assert_allclose(r.losses[0, 0], losses, rtol=1e-12)
    np.testing.assert_allclose(first.params["weight"], new[0][0], rtol=1e-12, atol=1e-14)
    w, b = joined(p.stages[1].net.members)
    np.testing.assert_allclose(w, new[1][0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(b, new[1][1], rtol=1e-12, atol=1e-14)
    hidden = np.maximum(x @ new[0][0] + new[0][1], 0)
    np.testing.assert_allclose(p.predict(x), hidden @ new[1][0] + new[1][1], rtol=1e-12)


def middle_model():
    """Graphcore's figure: A@0, B@1, [C0@1, C1@2] concurrent, D@2... here as
    ``device_mapping=[0, [1, 2], 2, 3]`` with members of different widths."""
    a = dense(4, 6, 1)
    c0, c1 = dense(6, 3, 2), dense(6, 5, 3)
    d, e = dense(8, 7, 4), dense(7, 3, 5)
    layers = [(*wb(a), True),
              (np.concatenate([wb(c0)[0], wb(c1)[0]], 1),
               np.concatenate([wb(c0)[1], wb(c1)[1]]), True),
              (*wb(d), True), (*wb(e), False)]
    stages = [[a, nn.ReLU()], [[c0, nn.ReLU()], [c1, nn.ReLU()]], [d, nn.ReLU()], [e]]
    return stages, layers


def test_concurrent_stage_in_the_middle_equals_dense_training():
    stages, layers = middle_model()
    g, mb = 8, 2
    x, y = data(g * mb, 4, 3, seed=1)
    p = pipeline(stages, [0, [1, 2], 2, 3], g, optimizer=optim.SGD(LR),
                 loss=nn.SoftmaxCrossEntropy())
    r = p.run(x, y)
    losses, new = reference(layers, x, y, g)
    np.testing.assert_allclose(r.losses[0, 0], losses, rtol=1e-12)
    c0, c1 = (m.layers[0] for m in p.stages[1].net.members)
    np.testing.assert_allclose(joined([c0, c1])[0], new[1][0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(stages[3][0].params["weight"], new[3][0], rtol=1e-12,
                               atol=1e-14)
    assert sorted(p.params) == sorted(
        ["0.0.weight", "0.0.bias", "1.0.0.weight", "1.0.0.bias", "1.1.0.weight",
         "1.1.0.bias", "2.0.weight", "2.0.bias", "3.weight", "3.bias"])


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(2, 4), st.integers(1, 3),
       st.integers(0, 2**31))
def test_concurrent_stage_and_sharded_loss_equal_dense(batch, d, shards, per, seed):
    """Forward and backward of split_dense + ShardedSoftmaxCrossEntropy, float64."""
    classes = shards * per
    layer = dense(d, classes, seed % 1000)
    x, y = data(batch, d, classes, seed)
    stage = Concurrent(split_dense(layer, shards), range(shards))
    loss = ShardedSoftmaxCrossEntropy()
    out, cache = stage.forward(x)
    value, lcache = loss.forward(out, y)
    dx = stage.backward(loss.backward(lcache, scale=2.0), cache)

    w, b = wb(layer)
    logits = x @ w + b
    np.testing.assert_allclose(join(out), logits, rtol=1e-12, atol=1e-12)
    assert len(out) == shards and all(o.shape == (batch, per) for o in out)
    top = logits.max(axis=1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    assert float(value) == pytest.approx(-logp[np.arange(batch), y].mean(), rel=1e-12)
    dlogits = np.exp(logp)
    dlogits[np.arange(batch), y] -= 1
    dlogits *= 2.0 / batch
    np.testing.assert_allclose(dx, dlogits @ w.T, rtol=1e-10,
                               atol=1e-12)
    w, b = joined([m for m in stage.members])
    g = np.concatenate([m.grads["weight"] for m in stage.members], axis=1)
    np.testing.assert_allclose(g, x.T @ dlogits, rtol=1e-10, atol=1e-12)
    assert w.shape == layer.params["weight"].shape and b.shape == (classes,)


# --- timeline and memory -------------------------------------------------------------------


def test_members_run_side_by_side_with_their_own_durations():
    stages, _ = middle_model()
    g, mb = 8, 2
    x, y = data(g * mb, 4, 3, seed=1)
    small = IPUModel("ipu2", num_ipus=4, tiles_per_ipu=1).create_device().target
    p = pipeline(stages, [0, [1, 2], 2, 3], g, optimizer=optim.SGD(LR),
                 loss=nn.SoftmaxCrossEntropy(), target=small)
    r = p.run(x, y)
    fpc = small.flops_per_cycle
    for m in range(g):
        f = {rec.ipu: rec for rec in r.timeline
             if rec.stage == 1 and rec.microbatch == m and rec.kind == "F"}
        assert sorted(f) == [1, 2]  # one record per IPU
        assert f[1].start == f[2].start
        # Dense(6, w) + ReLU on 2 rows: 2*2*6*w + 2*w FLOPs, w = 3 and 5.
        assert f[1].duration == math.ceil((2 * 2 * 6 * 3 + 2 * 3) / fpc)
        assert f[2].duration == math.ceil((2 * 2 * 6 * 5 + 2 * 5) / fpc)
        # Its outputs go to stage 2 on IPU 2: only IPU 1's 2x3 float64 part moves.
        links = [(rec.ipu, rec.bytes) for rec in r.timeline
                 if rec.stage == 1 and rec.microbatch == m and rec.kind == "link"]
        # forward: IPU 1 sends its part; backward: the summed 2x6 input gradient, from
        # IPU 1 to stage 0 on IPU 0.
        assert links == [(1, 2 * 3 * 8), (1, 2 * 6 * 8)]
    # Stage 2 (on IPU 2, which also holds member 1) sends its 2x7 output to stage 3, and of
    # its 2x8 input gradient only member 0's 2x3 part to IPU 1 (member 1's stays on IPU 2).
    back = [rec for rec in r.timeline if rec.stage == 2 and rec.kind == "link"
            and rec.ipu == 2]
    assert {rec.bytes for rec in back} == {2 * 7 * 8, 2 * 3 * 8}
    weights = {rec.ipu: rec.weights for rec in r.memory}
    assert weights[1] == (6 * 3 + 3) * 8
    assert weights[2] == (6 * 5 + 5) * 8 + (8 * 7 + 7) * 8  # member 1 and stage 2


def test_collectives_are_in_the_timeline_with_bytes_and_cycles():
    mb, g, h, classes = 4, 4, 6, 8
    first, classifier = dense(3, h, 1), dense(h, classes, 2)
    target = IPUModel("ipu2", num_ipus=3).create_device().target
    p = pipeline([[first, nn.ReLU()], split_dense(classifier, 2)], [0, [1, 2]], g,
                 optimizer=optim.SGD(LR), loss=ShardedSoftmaxCrossEntropy(), target=target)
    x, y = data(g * mb, 3, classes)
    r = p.run(x, y)

    def cost(nbytes):
        return target.global_sync_cycles + math.ceil(nbytes / target.ipu_link_bytes_per_cycle)

    ops = {(o.stage, o.microbatch, o.phase) for o in p.schedule.ops}
    assert len(ops) == 2 * 2 * g
    for m in range(g):
        recs = [rec for rec in r.timeline if rec.stage == 1 and rec.microbatch == m]
        coll = [(rec.ipu, rec.kind, rec.label, rec.bytes, rec.duration) for rec in recs
                if rec.kind in ("broadcast", "reduce", "allreduce")]
        act, ring = mb * h * 8, math.ceil(2 * 1 * mb * 8 / 2)
        expected = [
            ("broadcast", "stage input", act, 0, act),
            ("broadcast", "labels", mb * 4, 0, mb * 4),
            ("allreduce", "cross_entropy max", ring, ring, ring),
            ("allreduce", "cross_entropy sum", ring, ring, ring),
            ("reduce", "cross_entropy", 0, mb * 8, mb * 8),
            ("broadcast", "cross_entropy grad", mb * 8, 0, mb * 8),
            ("reduce", "stage input grad", 0, act, act),
        ]
        want = []
        for kind, label, b1, b2, busiest in expected:
            # ring all-reduce: 2(S-1) = 2 steps of one hop's sync there and back (2 x 15 ns),
            # then 2(S-1)/S of the bytes; others: one sync, then the max of sent and received
            cycles = (2 * math.ceil(2 * 15e-9 * target.clock_hz) + cost(busiest)
                      - target.global_sync_cycles if kind == "allreduce" else cost(busiest))
            want += [(1, kind, label, b1, cycles), (2, kind, label, b2, cycles)]
        assert coll == want
        # every record of the op lies within the op, one after another on each IPU
        for q in (1, 2):
            mine = sorted((rec.start, rec.duration) for rec in recs
                          if rec.ipu == q and rec.kind != "link")
            assert all(a[0] + a[1] <= b[0] for a, b in zip(mine, mine[1:]))
        f = [rec for rec in recs if rec.kind == "F" and rec.ipu == 1]
        assert f[0].start - act_start(recs) == cost(act)  # compute after the broadcast
    assert r.peak_memory()[1] == r.peak_memory()[2]


def act_start(recs):
    return min(rec.start for rec in recs if rec.label == "stage input")


def test_cycles_per_run_times_the_collectives_without_training():
    first, classifier = dense(3, 6, 1), dense(6, 4, 2)
    p = pipeline([[first, nn.ReLU()], split_dense(classifier, 2)], [0, [1, 2]], 4,
                 optimizer=optim.SGD(LR), loss=ShardedSoftmaxCrossEntropy())
    before = first.params["weight"].copy()
    x, y = data(8, 3, 4)
    assert p.cycles_per_run((3,), 2, "float64") == p.run(x, y).cycles
    assert not np.array_equal(first.params["weight"], before)  # run() trained


# --- errors ------------------------------------------------------------------------------------


def test_mismatched_lists_and_losses_raise_clear_errors():
    opt = optim.SGD(LR)
    a, c = [dense(3, 4, 1)], split_dense(dense(4, 6, 2), 3)
    with pytest.raises(PipelineConfigError, match=r"mapped to IPUs \[1, 2\] but has 3"):
        pipeline([a, c], [0, [1, 2]], 4, optimizer=opt, loss=ShardedSoftmaxCrossEntropy())
    with pytest.raises(PipelineConfigError, match="2 or more different IPUs"):
        pipeline([a, c[:1]], [0, [1]], 4, optimizer=opt, loss=ShardedSoftmaxCrossEntropy())
    with pytest.raises(PipelineConfigError, match="2 or more different IPUs"):
        pipeline([a, c[:2]], [0, [1, 1]], 4, optimizer=opt,
                 loss=ShardedSoftmaxCrossEntropy())
    with pytest.raises(PipelineConfigError, match="use ShardedSoftmaxCrossEntropy"):
        pipeline([a, c], [0, [1, 2, 3]], 4, optimizer=opt, loss=nn.SoftmaxCrossEntropy())
    with pytest.raises(PipelineConfigError, match="not a concurrent stage"):
        pipeline([a, [dense(4, 6, 2)]], [0, 1], 4, optimizer=opt,
                 loss=ShardedSoftmaxCrossEntropy())
    with pytest.raises(PipelineConfigError, match=r"member\) is a layer or a list of layers"):
        pipeline([a, [print, print]], [0, [1, 2]], 4, optimizer=opt,
                 loss=ShardedSoftmaxCrossEntropy())
    with pytest.raises(PipelineConfigError, match="same IPU"):
        pipeline([a, c[:2]], [1, [0, 1]], 4, "interleaved", optimizer=opt,
                 loss=ShardedSoftmaxCrossEntropy())
    with pytest.raises(IpuError, match=r"Dense\(4, 6\)'s output columns of size 6 over 4"):
        split_dense(dense(4, 6, 2), 4)
