"""parallel.sharded's ops with ``CollectiveLog(emulate=True)`` against the NumPy path."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit import backend, cost
from ipukit.parallel import sharded
from ipukit.target import IPUModel

CASES = [(2, 3, 4, 6), (3, 5, 6, 9), (4, 2, 8, 4)]  # shards, rows, width per shard, inner


def logs(s, ipus=None):
    n = (max(ipus) + 1) if ipus else s
    target = IPUModel(num_ipus=n, tiles_per_ipu=8).create_device().target
    return (sharded.CollectiveLog(s, target, ipus),
            sharded.CollectiveLog(s, target, ipus, emulate=True))


def both(op, s, ipus=None):
    """``op(log)`` with the NumPy log and the emulated one: (theirs, ours, emulated log)."""
    plain, emu = logs(s, ipus)
    return op(plain), op(emu), emu


def close(a, b):
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y)
    else:
        a, b = backend.to_numpy(a), backend.to_numpy(b)
        assert b.dtype == a.dtype
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def rng_parts(rng, s, shape):
    return [rng.normal(size=shape).astype(np.float32) for _ in range(s)]


def check_records(plain_log, emu_log):
    """Same collectives, same bytes sent per IPU (an all-reduce: both GCL's ring, the
    emulated one's fragments differing by at most an element when the shards do not
    divide the tensor, all of them 2(S-1) x the tensor), durations from the trace."""
    kinds = [(r.ipu, r.kind, r.label) for r in plain_log.records]
    assert [(r.ipu, r.kind, r.label) for r in emu_log.records] == kinds
    for a, b in zip(plain_log.records, emu_log.records):
        if a.kind.startswith("all_reduce"):
            assert abs(a.bytes - b.bytes) <= 2 * 4  # float32 fragments
        else:
            assert a.bytes == b.bytes
        assert b.duration > 0
    assert emu_log.traces and emu_log.now >= sum(
        r.duration for r in emu_log.records if r.ipu == emu_log.ipus[0])


@pytest.mark.parametrize("s, b, k, inner", CASES)
def test_to_all_and_matmul_equal_numpy(s, b, k, inner):
    rng = np.random.default_rng(s)
    x = rng.normal(size=(b, inner)).astype(np.float32)
    w = rng.normal(size=(inner, k * s)).astype(np.float32)
    dy = rng.normal(size=(b, k * s)).astype(np.float32)

    def run(log):
        xs, back_x = sharded.to_all(x, log)
        y, back = sharded.matmul(xs, sharded.shard(w, s, 1), log)
        dx_partials, dw = back(sharded.shard(dy, s, 1))
        return y, dx_partials, dw, back_x(dx_partials)

    theirs, ours, emu = both(run, s)
    close(theirs, ours)
    np.testing.assert_allclose(ours[3], dy @ w.T, rtol=1e-4, atol=1e-5)
    plain, _ = logs(s)
    run(plain)
    check_records(plain, emu)


@pytest.mark.parametrize("s, b, k, inner", CASES)
def test_embedding_equals_numpy(s, b, k, inner):
    rng = np.random.default_rng(10 + s)
    w = rng.normal(size=(k * s, inner)).astype(np.float32)
    idx = rng.integers(0, k * s, size=b + 3).astype(np.int32)
    idx[:2] = idx[2]  # a repeated row: its gradients add up
    g = rng.normal(size=(b + 3, inner)).astype(np.float32)

    def run(log):
        parts, _ = sharded.to_all(idx, log)
        out, back = sharded.embedding(sharded.shard(w, s, 0), parts, log)
        return out, back(g)

    theirs, ours, emu = both(run, s)
    close(theirs, ours)
    np.testing.assert_array_equal(ours[0], w[idx])
    plain, _ = logs(s)
    run(plain)
    check_records(plain, emu)


@pytest.mark.parametrize("s, b, k, inner", CASES)
def test_log_softmax_take_last_and_cross_entropy_equal_numpy(s, b, k, inner):
    rng = np.random.default_rng(20 + s)
    x = (3 * rng.normal(size=(b, k * s))).astype(np.float32)
    labels = rng.integers(0, k * s, size=b).astype(np.int32)
    dy = rng.normal(size=(b, k * s)).astype(np.float32)
    g = rng.normal(size=b).astype(np.float32)

    def run(log):
        xs = sharded.shard(x, s, 1)
        lab, _ = sharded.to_all(labels, log)
        lp, back_lp = sharded.log_softmax(xs, log)
        picked, back_pick = sharded.take_last(xs, lab, log)
        ce, back_ce = sharded.log_softmax_cross_entropy(xs, lab, log)
        return lab, lp, back_lp(sharded.shard(dy, s, 1)), picked, back_pick(g), ce, back_ce(g)

    theirs, ours, emu = both(run, s)
    close(theirs, ours)
    top = x.max(1, keepdims=True)
    ref = x - top - np.log(np.exp(x - top).sum(1, keepdims=True))
    np.testing.assert_allclose(ours[5], -ref[np.arange(b), labels], rtol=1e-4)
    np.testing.assert_allclose(ours[3], x[np.arange(b), labels], rtol=1e-6)
    plain, _ = logs(s)
    run(plain)
    check_records(plain, emu)


def test_shards_run_on_the_log_ipus_with_a_trace_and_timeline():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 8)).astype(np.float32)
    _, emu = logs(2, ipus=[1, 3])
    ce, back = sharded.log_softmax_cross_entropy(sharded.shard(x, 2, 1),
                                                 [np.array([0, 5, 7, 2])] * 2, emu)
    back(np.ones(4, np.float32))
    assert len(emu.traces) == 2 and emu.trace is emu.traces[-1]
    crossing = {st.ipus for st in emu.trace.executed_steps() if st.inter_ipu_bytes}
    assert crossing == {(1, 3)}
    tl = emu.timeline()
    assert {sp.ipu for sp in tl.spans if sp.kind != "host"} == {1, 3}  # host: Engine.run's
    assert {"compute", "allreduce", "reduce"} <= {sp.kind for sp in tl.spans}
    assert {"broadcast"} <= {sp.kind for sp in tl.spans}
    # the backward's spans come after the forward's on the log's clock
    fwd_end = max(sp.end for sp in tl.spans if sp.kind == "reduce")
    assert min(sp.start for sp in tl.spans if sp.kind == "broadcast") >= fwd_end
    pytest.importorskip("anywidget")
    from ipukit.widgets import BSPView

    BSPView(emu.trace)  # the trace opens in the widget


def test_emulated_refuses_float64_and_has_no_trace_before_a_run():
    _, emu = logs(2)
    parts, _ = sharded.to_all(np.array([7, 3]), emu)  # int64 host labels: int32 on the IPU
    assert [p.dtype for p in parts] == [np.int64] * 2 and parts[1].tolist() == [7, 3]
    assert [r.bytes for r in emu.records] == [8, 0]
    with pytest.raises(ipu.IpuError, match="float32.*astype"):
        sharded.log_softmax(sharded.shard(np.ones((2, 4)), 2, 1), emu)
    with pytest.raises(ipu.IpuError, match="emulate=True"):
        assert sharded.CollectiveLog(2).trace is None
    with pytest.raises(ipu.IpuError, match="outside"):
        sharded.log_softmax_cross_entropy(sharded.shard(np.ones((2, 4), np.float32), 2, 1),
                                          [np.array([0, 9])] * 2, emu)


@settings(max_examples=8, deadline=None)
@given(s=st.integers(2, 3), b=st.integers(1, 4), k=st.integers(1, 3), seed=st.integers(0, 99))
def test_cross_entropy_and_its_gradient_match_for_any_split(s, b, k, seed):
    rng = np.random.default_rng(seed)
    x = (4 * rng.normal(size=(b, k * s))).astype(np.float32)
    labels = rng.integers(0, k * s, size=b).astype(np.int32)
    g = rng.normal(size=b).astype(np.float32)

    def run(log):
        ce, back = sharded.log_softmax_cross_entropy(sharded.shard(x, s, 1), [labels] * s, log)
        return ce, back(g)

    theirs, ours, _ = both(run, s)
    close(theirs, ours)


@pytest.mark.parametrize("s, rows", [(2, 6), (3, 7), (4, 8)])
def test_all_reduce_records_are_the_ring_copies_in_the_trace(s, rows):
    """log_softmax's all-reduces (MAX, then ADD of the row sums): each record's bytes are
    what its IPU sends in the ring's copies, 2(S-1) of them per all-reduce; the record's
    span covers those copies and the adds between them."""
    x = np.random.default_rng(s).normal(size=(rows, 2 * s)).astype(np.float32)
    _, emu = logs(s)
    sharded.log_softmax(sharded.shard(x, s, 1), emu)
    trace, tpi = emu.trace, emu.trace.target.tiles_per_ipu
    for label in ("log_softmax max", "log_softmax sum"):
        recs = [r for r in emu.records if r.label == label]
        copies = [step for step in trace.executed_steps()
                  if step.name.startswith(f"Copy {label}/ring ")]
        assert len(copies) == 2 * (s - 1)
        sent = [0] * s
        for step in copies:
            for src, _, n in step.transfers:
                sent[int(src) // tpi] += int(n)
        assert [r.bytes for r in recs] == sent
        assert sum(sent) == 2 * (s - 1) * rows * 4
        if rows % s == 0:
            assert sent == [cost.ring_bytes("allreduce", rows * 4, s)] * s
        cycles = sum(step.cycles for step in trace.executed_steps()
                     if step.name.startswith((f"{label}/ring", f"Copy {label}/ring")))
        assert {r.duration for r in recs} == {cycles}
