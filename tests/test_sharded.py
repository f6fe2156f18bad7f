"""ipukit.parallel.sharded: sharded ops equal their dense NumPy counterparts, forward and
backward; collectives cost what the ring/broadcast formulas say; bad splits fail clearly."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipukit import backend
from ipukit.errors import IpuError
from ipukit.parallel import sharded
from ipukit.target import IPUModel

# --- dense float64 references, written without the sharded code ------------------------


def dense_log_softmax(x):
    top = x.max(axis=1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=1, keepdims=True))


def dense_log_softmax_grad(x, dy):
    soft = np.exp(dense_log_softmax(x))
    return dy - soft * dy.sum(axis=1, keepdims=True)


def dense_ce_grad(x, labels, g):
    onehot = np.zeros_like(x)
    onehot[np.arange(len(labels)), labels] = 1.0
    return g[:, None] * (np.exp(dense_log_softmax(x)) - onehot)


class SpyLog(sharded.CollectiveLog):
    """A CollectiveLog that also keeps what each all-reduce was given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.inputs = []

    def all_reduce(self, parts, op, label):
        self.inputs.append((op, [backend.to_numpy(p).copy() for p in parts]))
        return super().all_reduce(parts, op, label)


# --- golden case 9: logits [1, 2, 3, 4] over 2 shards, label 2 ----------------------------


def test_hand_checkable_softmax_cross_entropy():
    log = SpyLog(2)
    logits = sharded.shard(np.array([[1.0, 2.0, 3.0, 4.0]]), 2, axis=1)
    labels, _ = sharded.to_all(np.array([2]), log)
    ce, backward = sharded.log_softmax_cross_entropy(logits, labels, log)
    assert ce.shape == (1,)
    assert float(ce[0]) == pytest.approx(1.4401897, abs=1e-7)
    (op_max, maxima), (op_add, denominators) = log.inputs
    assert op_max == "max" and [m[0] for m in maxima] == [2.0, 4.0]
    assert op_add == "add"
    np.testing.assert_allclose([d[0] for d in denominators], [0.1851224, 1.3678794], atol=1e-7)
    grad = backward(np.ones(1))
    np.testing.assert_allclose(grad[0], [[0.0320586, 0.0871443]], atol=1e-7)
    np.testing.assert_allclose(grad[1], [[-0.7631172, 0.6439143]], atol=1e-7)


def test_label_is_owned_by_one_shard_only_unsigned_wrap():
    labels = np.array([2, 0])
    adj0, mask0 = sharded.local_indices(labels, 0, 2)
    adj1, mask1 = sharded.local_indices(labels, 1, 2)
    assert mask0.tolist() == [False, True] and adj0[1] == 0
    # Label 0 on shard 1 adjusts to 0 - 2, which wraps (unsigned) and is masked.
    assert mask1.tolist() == [True, False] and adj1[0] == 0


# --- sharded == dense, float64, random shapes and shard counts ---------------------------

shapes = st.tuples(
    st.integers(2, 5),  # shards
    st.integers(1, 5),  # rows B
    st.integers(1, 4),  # columns per shard
    st.integers(1, 5),  # inner size K
    st.integers(0, 2**32 - 1),  # seed
)
prop = settings(max_examples=40, deadline=None)


@prop
@given(shapes)
def test_to_all_copies_and_sums_back(case):
    s_count, b, _, k, seed = case
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(b, k))
    log = sharded.CollectiveLog(s_count)
    parts, backward = sharded.to_all(x, log)
    assert len(parts) == s_count and all(np.array_equal(p, x) for p in parts)
    grads = [rng.normal(size=(b, k)) for _ in range(s_count)]
    np.testing.assert_allclose(backward(grads), np.sum(grads, axis=0), rtol=1e-12)


@prop
@given(shapes)
def test_matmul_equals_dense(case):
    s_count, b, per, k, seed = case
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=(b, k)), rng.normal(size=(k, per * s_count))
    log = sharded.CollectiveLog(s_count)
    x_all, x_backward = sharded.to_all(x, log)
    y, backward = sharded.matmul(x_all, sharded.shard(w, s_count, axis=1), log)
    np.testing.assert_allclose(sharded.unshard(y, axis=1), x @ w, rtol=1e-12, atol=1e-12)
    dy = rng.normal(size=(b, per * s_count))
    dx_partials, dw = backward(sharded.shard(dy, s_count, axis=1))
    assert len(dx_partials) == s_count  # left unreduced: to_all's backward sums them
    np.testing.assert_allclose(x_backward(dx_partials), dy @ w.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sharded.unshard(dw, axis=1), x.T @ dy, rtol=1e-12, atol=1e-12)


@prop
@given(shapes)
def test_embedding_equals_dense(case):
    s_count, n, per, c, seed = case
    rng = np.random.default_rng(seed)
    vocab = per * s_count
    w, idx = rng.normal(size=(vocab, c)), rng.integers(0, vocab, n)
    log = sharded.CollectiveLog(s_count)
    idx_all, _ = sharded.to_all(idx, log)
    out, backward = sharded.embedding(sharded.shard(w, s_count, axis=0), idx_all, log)
    np.testing.assert_array_equal(out, w[idx])
    g = rng.normal(size=(n, c))
    expected = np.zeros_like(w)
    np.add.at(expected, idx, g)
    np.testing.assert_allclose(sharded.unshard(backward(g), axis=0), expected, rtol=1e-12)


@prop
@given(shapes)
def test_log_softmax_equals_dense(case):
    s_count, b, per, _, seed = case
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=5.0, size=(b, per * s_count))
    log = sharded.CollectiveLog(s_count)
    out, backward = sharded.log_softmax(sharded.shard(x, s_count, axis=1), log)
    np.testing.assert_allclose(sharded.unshard(out, axis=1), dense_log_softmax(x), rtol=0,
                               atol=1e-12)
    dy = rng.normal(size=x.shape)
    dx = backward(sharded.shard(dy, s_count, axis=1))
    np.testing.assert_allclose(sharded.unshard(dx, axis=1), dense_log_softmax_grad(x, dy),
                               rtol=0, atol=1e-12)


@prop
@given(shapes)
def test_take_last_equals_dense(case):
    s_count, b, per, _, seed = case
    rng = np.random.default_rng(seed)
    x, idx = rng.normal(size=(b, per * s_count)), rng.integers(0, per * s_count, b)
    log = sharded.CollectiveLog(s_count)
    idx_all, _ = sharded.to_all(idx, log)
    out, backward = sharded.take_last(sharded.shard(x, s_count, axis=1), idx_all, log)
    np.testing.assert_array_equal(out, x[np.arange(b), idx])
    g = rng.normal(size=b)
    expected = np.zeros_like(x)
    expected[np.arange(b), idx] = g
    np.testing.assert_array_equal(sharded.unshard(backward(g), axis=1), expected)


@prop
@given(shapes)
def test_log_softmax_cross_entropy_equals_dense(case):
    s_count, b, per, _, seed = case
    rng = np.random.default_rng(seed)
    vocab = per * s_count
    x, labels = rng.normal(scale=3.0, size=(b, vocab)), rng.integers(0, vocab, b)
    log = sharded.CollectiveLog(s_count)
    labels_all, _ = sharded.to_all(labels, log)
    start = len(log.records)
    ce, backward = sharded.log_softmax_cross_entropy(
        sharded.shard(x, s_count, axis=1), labels_all, log)
    np.testing.assert_allclose(ce, -dense_log_softmax(x)[np.arange(b), labels], atol=1e-12)
    g = rng.normal(size=b)
    dx = sharded.unshard(backward(g), axis=1)
    np.testing.assert_allclose(dx, dense_ce_grad(x, labels, g), rtol=0, atol=1e-12)
    # Only per-row numbers crossed between IPUs, never a vocabulary-sized row.
    assert max(r.bytes for r in log.records[start:]) <= (s_count - 1) * b * 8


# --- collective costs ----------------------------------------------------------------------


def test_collective_records_count_ring_bytes_and_cycles():
    target = IPUModel(num_ipus=4).create_device().target
    log = sharded.CollectiveLog(4, target=target)
    log.now = 1000
    parts = [np.full(300, float(s)) for s in range(4)]  # 2,400 bytes each
    result = log.all_reduce(parts, "add", "sum")
    assert all(np.array_equal(r, np.full(300, 6.0)) for r in result)
    ring = math.ceil(2 * 3 / 4 * 2400)  # 3,600 bytes per shard
    # GCL's ring: 2(S-1) = 6 steps of one hop's sync there and back (2 x 15 ns), plus bytes
    step = math.ceil(2 * 15e-9 * target.clock_hz)
    cycles = 6 * step + math.ceil(ring / target.ipu_link_bytes_per_cycle)
    assert [(r.ipu, r.kind, r.start, r.duration, r.bytes) for r in log.records] == [
        (s, "all_reduce_add", 1000, cycles, ring) for s in range(4)
    ]
    assert log.now == 1000 + cycles
    copies = log.broadcast(np.zeros(10), "b")  # 80 bytes to 3 others from shard 0
    assert len(copies) == 4
    assert [r.bytes for r in log.records[4:]] == [240, 0, 0, 0]
    assert log.records[4].duration == target.global_sync_cycles + math.ceil(
        240 / target.ipu_link_bytes_per_cycle)
    assert log.bytes_sent() == [ring + 240, ring, ring, ring]
    assert log.cycles() == log.now - 1000


def test_shards_map_to_given_ipus():
    log = sharded.CollectiveLog(2, ipus=[1, 2])
    assert log.target.num_ipus == 3
    total = log.reduce_add([np.ones(4), np.ones(4)], "r")
    np.testing.assert_array_equal(total, np.full(4, 2.0))
    assert [(r.ipu, r.bytes) for r in log.records] == [(1, 0), (2, 32)]


def test_half_matmul_stays_half():
    log = sharded.CollectiveLog(2)
    x_all, _ = sharded.to_all(np.ones((2, 3), np.float16), log)
    y, _ = sharded.matmul(x_all, sharded.shard(np.ones((3, 4), np.float16), 2, axis=1), log)
    assert y[0].dtype == np.float16 and y[0][0, 0] == 3.0


# --- errors --------------------------------------------------------------------------------


def test_uneven_split_names_the_sizes():
    with pytest.raises(IpuError, match=r"size 10 over 3 IPUs: 10 is not a multiple of 3"):
        sharded.shard(np.zeros((4, 10)), 3, axis=1, name="weights")


@pytest.mark.parametrize("count", [0, 1, 2.0])
def test_needs_at_least_two_ipus(count):
    with pytest.raises(IpuError, match="at least 2 IPUs"):
        sharded.CollectiveLog(count)


def test_wrong_shard_lists_and_indices_raise():
    log = sharded.CollectiveLog(2)
    w = sharded.shard(np.zeros((4, 3)), 2, axis=0)
    with pytest.raises(IpuError, match="expected a list of 2 shards"):
        sharded.embedding(w + w, [np.zeros(1, int)] * 2, log)
    with pytest.raises(IpuError, match="holds 4, outside 0..3"):
        sharded.embedding(w, [np.array([0, 4])] * 2, log)
    with pytest.raises(IpuError, match="inner sizes differ"):
        sharded.matmul([np.zeros((2, 5))] * 2, w, log)
    with pytest.raises(IpuError, match="out of range"):
        sharded.CollectiveLog(2, target=IPUModel(num_ipus=2).create_device().target,
                              ipus=[1, 2])


def test_runs_on_cupy():
    if not backend.cupy_available():
        pytest.skip("CuPy with a CUDA GPU is not available here")
    backend.use("cupy")
    try:
        xp = backend.get_xp()
        log = sharded.CollectiveLog(2)
        logits = sharded.shard(np.array([[1.0, 2.0, 3.0, 4.0]]), 2, axis=1)
        labels, _ = sharded.to_all(np.array([2]), log)
        ce, backward = sharded.log_softmax_cross_entropy(logits, labels, log)
        grad = backward(xp.ones(1))
        assert float(ce[0]) == pytest.approx(1.4401897, abs=1e-7)
        np.testing.assert_allclose(backend.to_numpy(sharded.unshard(grad, axis=1)),
                                   [[0.0320586, 0.0871443, -0.7631172, 0.6439143]], atol=1e-7)
        w = sharded.shard(np.arange(8.0).reshape(4, 2), 2, axis=0)
        out, emb_backward = sharded.embedding(w, sharded.to_all(np.array([3, 3]), log)[0], log)
        np.testing.assert_array_equal(backend.to_numpy(out), [[6, 7], [6, 7]])
        dw = backend.to_numpy(sharded.unshard(emb_backward(xp.ones((2, 2))), axis=0))
        np.testing.assert_array_equal(dw[3], [2, 2])
    finally:
        backend.use("numpy")


def test_collective_log_gives_the_one_timeline():
    log = sharded.CollectiveLog(2)
    parts = sharded.to_all(np.ones(4, np.float32), log, "x")[0]
    log.all_reduce(parts, "max", "m")
    tl = log.timeline()
    assert [(s.ipu, s.kind, s.label) for s in tl] == [
        (0, "broadcast", "broadcast x"), (1, "broadcast", "broadcast x"),
        (0, "allreduce", "all_reduce_max m"), (1, "allreduce", "all_reduce_max m")]
    assert [s.start for s in tl] == [r.start for r in log.records]
    assert tl.makespan == log.cycles() and tl.clock_hz == log.target.clock_hz
    assert tl.measures()["idle"][1] == {"collective": float(log.cycles())}
