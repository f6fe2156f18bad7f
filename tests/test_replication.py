"""Replicas, RTS, accumulation dtype, device iterations and output modes in the runner."""

import copy
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipukit.cost import (
    IPU_LINK_BYTES_PER_SECOND,
    IPU_MODEL_HOST_LINK_BYTES_PER_CYCLE,
    STREAMING_MEMORY_BYTES_PER_SECOND,
    STREAMING_MEMORY_LATENCY_SECONDS,
)
from ipukit.errors import PipelineConfigError
from ipukit.parallel import (
    Block,
    DataLoader,
    OutputMode,
    ShardedExecution,
    call_cost,
    combined_batch_size,
    nn,
    optim,
    pipeline,
    replication,
    training_model,
)
from ipukit.target import IPUModel

D_IN, CLASSES, MB = 5, 3, 4


def make_stages(n=2, dtype="float64"):
    widths = [D_IN] + [6 + k for k in range(n - 1)] + [CLASSES]
    return [[nn.Dense(widths[k], widths[k + 1], rng=10 + k, dtype=dtype)]
            + ([nn.ReLU()] if k < n - 1 else []) for k in range(n)]


def data(n, seed=0, dtype="float64"):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, D_IN)).astype(dtype), rng.integers(0, CLASSES, n)


def weights(p):
    return [a.copy() for a in p.params.values()]


@pytest.mark.parametrize("reduction", ["SUM", "MEAN"])
@pytest.mark.parametrize("kind,n,g,replicas", [("grouped", 2, 4, 2), ("poptorch", 3, 5, 3),
                                               ("sequential", 2, 3, 2), ("1f1b", 3, 2, 4)])
def test_replicas_equal_one_replica_on_the_concatenated_batch(reduction, kind, n, g,
                                                               replicas):
    di = 2
    x, y = data(di * replicas * g * MB, seed=n * 10 + g)
    stages = make_stages(n)

    def build(count, **kw):  # each model gets its own optimiser (momentum state)
        return pipeline(copy.deepcopy(stages), None, count, kind, reduction_method=reduction,
                        optimizer=optim.SGD(0.1, momentum=0.9), device_iterations=di,
                        loss=nn.SoftmaxCrossEntropy(), **kw)

    rep = build(g, replication_factor=replicas, replica_reduction=reduction)
    r = rep.run(x, y)
    # one replica, the replicas' micro-batches one after another: R x G micro-batches
    one = build(replicas * g)
    r1 = one.run(x, y)
    for got, want in zip(rep.params.values(), one.params.values()):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    np.testing.assert_allclose(r.losses.reshape(-1), r1.losses.reshape(-1), atol=1e-10)
    if reduction == "MEAN":
        # one replica, micro-batch m = the replicas' micro-batches m side by side
        cat = build(g)
        order = np.arange(len(x)).reshape(di, replicas, g, MB).transpose(0, 2, 1, 3)
        cat.run(x[order.reshape(-1)], y[order.reshape(-1)])
        for got, want in zip(rep.params.values(), cat.params.values()):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    # the weights moved: the test compares real training
    assert not np.allclose(weights(rep)[0], stages[0][0].params["weight"])


def test_replicated_model_needs_replicas_times_its_ipus():
    p = pipeline(make_stages(2), None, 4, replication_factor=3, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy())
    assert p.target.num_ipus == 6  # the default target has R x S IPUs
    small = IPUModel("ipu2", num_ipus=4).create_device().target
    with pytest.raises(PipelineConfigError, match=r"replication_factor 3 × 2 IPU\(s\) per "
                       r"replica needs 6 IPUs but the target has 4.*num_ipus=6"):
        pipeline(make_stages(2), None, 4, replication_factor=3, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), target=small)
    with pytest.raises(PipelineConfigError, match="replica_reduction 'MAX'"):
        pipeline(make_stages(2), None, 4, replication_factor=2, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), replica_reduction="MAX")


def grad_bytes(p, ipu):
    return sum(a.nbytes for k, a in p.params.items() if p.stages[int(k[0])].ipus == (ipu,))


@pytest.mark.parametrize("g,di,replicas", [(4, 3, 2), (12, 1, 2), (4, 3, 4)])
def test_allreduce_once_per_weight_update_with_ring_bytes_and_cycles(g, di, replicas):
    x, y = data(48 * replicas)  # the same samples per call: G x DI = 12
    p = pipeline(make_stages(2), None, g, device_iterations=di, replication_factor=replicas,
                 optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy())
    r = p.run(x, y)
    for q in (0, 1):
        ar = [rec for rec in r.timeline if rec.kind == "allreduce" and rec.ipu == q]
        assert len(ar) == di  # gradient accumulation makes all-reduces rarer
        sent = math.ceil(2 * (replicas - 1) / replicas * grad_bytes(p, q))
        link = IPU_LINK_BYTES_PER_SECOND / p.target.clock_hz
        assert {rec.bytes for rec in ar} == {sent}
        # 2(R-1) ring steps, each one hop's sync there and back (2 x 15 ns), plus the bytes
        step = math.ceil(2 * 15e-9 * p.target.clock_hz)
        assert {rec.duration for rec in ar} == {2 * (replicas - 1) * step
                                                + math.ceil(sent / link)}


def rts_model(replicas, rts, offload):
    """On-chip RTS is PopTorch's (``useReplicatedTensorSharding`` with the optimiser state on
    chip); TensorFlow shards only offloaded state, so the offloaded case is its pipeline."""
    target = IPUModel(num_ipus=2 * replicas, tiles_per_ipu=1).create_device().target
    if offload:
        return pipeline(make_stages(2), None, 4, device_iterations=2,
                        replication_factor=replicas, optimizer=optim.Adam(0.01),
                        loss=nn.SoftmaxCrossEntropy(), replicated_optimizer_state_sharding=rts,
                        offload_optimizer_state=True, target=target)
    blocks = [Block(f"B{k}", *layers, ipu_id=k) for k, layers in enumerate(make_stages(2))]
    return training_model(blocks, nn.SoftmaxCrossEntropy(), optim.Adam(0.01),
                          gradient_accumulation=4, device_iterations=2,
                          replication_factor=replicas, reduction="SUM", output_mode="all",
                          replicated_tensor_sharding=rts, target=target)


@pytest.mark.parametrize("replicas,offload", [(2, False), (3, False), (4, True)])
def test_rts_changes_memory_and_communication_not_one_weight(replicas, offload):
    x, y = data(2 * replicas * 4 * MB, seed=replicas)
    runs = {}
    for rts in (False, True):
        p = rts_model(replicas, rts, offload)
        runs[rts] = (p, p.run(x, y))
    (p0, r0), (p1, r1) = runs[False], runs[True]
    for a, b in zip(p0.params.values(), p1.params.values()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(r0.losses, r1.losses)
    for q in (0, 1):
        params = [a for k, a in p0.params.items() if p0.stages[int(k[0])].ipus == (q,)]
        state = sum(2 * a.nbytes for a in params)  # Adam: two moments per weight
        shard = sum(2 * math.ceil(a.size / replicas) * a.itemsize for a in params)
        opt0 = {m.optimizer for m in r0.memory if m.ipu == q}
        opt1 = {m.optimizer for m in r1.memory if m.ipu == q}
        assert (opt0, opt1) == (({0}, {0}) if offload else ({state}, {shard}))
        peak0 = max(m.total for m in r0.memory if m.ipu == q)
        peak1 = max(m.total for m in r1.memory if m.ipu == q)
        assert peak0 - peak1 == (0 if offload else state - shard)
        kinds0 = [rec.kind for rec in r0.timeline if rec.ipu == q and rec.stage == -1]
        kinds1 = [rec.kind for rec in r1.timeline if rec.ipu == q and rec.stage == -1]
        assert "allreduce" in kinds0 and "allreduce" not in kinds1
        assert kinds1.count("reducescatter") == kinds1.count("allgather") == 2
        w = sum(a.nbytes for a in params)
        ring = [rec.bytes for rec in r0.timeline if rec.ipu == q and rec.kind == "allreduce"]
        rs_ag = [rec.bytes for rec in r1.timeline if rec.ipu == q
                 and rec.kind in ("reducescatter", "allgather")]
        assert ring == [math.ceil(2 * (replicas - 1) / replicas * w)] * 2
        assert rs_ag == [math.ceil((replicas - 1) / replicas * w)] * 4
        upd0 = [rec for rec in r0.timeline if rec.ipu == q and rec.kind == "optimizer"]
        upd1 = [rec for rec in r1.timeline if rec.ipu == q and rec.kind == "optimizer"]
        # Adam: 12 FLOPs per element, 32 per cycle on one tile; 1/R of them with RTS, and
        # each replica copies only its shard of an offloaded state (m and v: one remote
        # buffer each), in and out, at Streaming Memory's latency and rate
        clock = p0.target.clock_hz
        for recs, n, nbytes in ((upd0, sum(a.size for a in params), state),
                                (upd1, sum(math.ceil(a.size / replicas) for a in params),
                                 shard)):
            nbytes = nbytes if offload else 0
            copy = (math.ceil(STREAMING_MEMORY_LATENCY_SECONDS * clock)
                    + math.ceil(nbytes / 2 / (STREAMING_MEMORY_BYTES_PER_SECOND / clock)))
            assert {(rec.duration, rec.bytes) for rec in recs} == {
                (math.ceil(12 * n / 32) + (2 * 2 * copy if nbytes else 0), nbytes)}


def test_rts_shards_cover_every_element_once():
    for size in range(1, 30):
        for r in range(1, 6):
            bounds = replication.shard_bounds(size, r)
            covered = np.concatenate([np.arange(lo, hi) for lo, hi in bounds])
            np.testing.assert_array_equal(covered, np.arange(size))
            assert max(hi - lo for lo, hi in bounds) == math.ceil(size / r)


def test_float16_accumulation_loses_what_float32_keeps():
    g, lr = 512, 1.0
    stages = [[nn.Dense(D_IN, 4, rng=3, dtype="float16"), nn.ReLU()],
              [nn.Dense(4, CLASSES, rng=4, dtype="float16")]]
    x1, y1 = data(MB, seed=7, dtype="float16")
    x, y = np.tile(x1, (g, 1)), np.tile(y1, g)  # the same micro-batch G times
    # reference: one micro-batch's float16 gradient, summed G times in float64
    net = nn.Sequential(*copy.deepcopy([layer for s in stages for layer in s]))
    loss = nn.SoftmaxCrossEntropy()
    out, cache = net.forward(x1)
    net.backward(loss.backward(loss.forward(out, y1)[1]), cache)
    exact = {k: g * v.astype(np.float64) for k, v in net.grads.items()}
    errors = {}
    for acc in ("float16", "float32"):
        p = pipeline(copy.deepcopy(stages), None, g, "sequential", optimizer=optim.SGD(lr),
                     loss=nn.SoftmaxCrossEntropy(), gradient_accumulation_dtype=acc)
        before = {k: v.astype(np.float64) for k, v in p.params.items()}
        r = p.run(x, y)
        assert {m.gradients for m in r.memory if m.ipu == 0} == {
            sum(v.size for k, v in p.params.items() if k[0] == "0") * np.dtype(acc).itemsize}
        step = {k: (before[k] - v.astype(np.float64)) / lr for k, v in p.params.items()}
        # runner keys "0.0.weight" ... "1.bias" in the reference's order "0.weight" ...
        errors[acc] = max(np.abs(step[key] - exact[name]).max() / np.abs(exact[name]).max()
                          for key, name in zip(step, exact))
    assert errors["float32"] < 2e-3  # one float16 rounding of the sum, and of the update
    assert errors["float16"] > 1e-2 and errors["float16"] > 10 * errors["float32"]


class RecordingSGD(optim.SGD):
    """SGD that records the dtype of every gradient it is handed."""

    def step(self, params, grads):
        self.seen = {k: g.dtype.name for k, g in grads.items()}
        super().step(params, grads)


def test_accumulation_dtype_per_variable_and_errors():
    # graphcore/tensorflow tensorflow/python/ipu/ops/pipelining_ops.py, pipeline():
    # gradient_accumulation_dtype may be "A callable that takes the variable and returns a
    # DType"; "The gradients passed to Optimizer.apply_gradients will have the dtype
    # requested here. If that dtype is different from the variable dtype a cast is needed".
    seen = []

    def choose(var):
        seen.append((var.name, var.dtype.name, var.shape))
        return "float64" if var.name.endswith("bias") else None  # None: the variable's dtype

    opt = RecordingSGD(0.1)
    p = pipeline(make_stages(2, "float32"), None, 4, optimizer=opt,
                 loss=nn.SoftmaxCrossEntropy(), gradient_accumulation_dtype=choose)
    assert seen == [("0.0.weight", "float32", (D_IN, 6)), ("0.0.bias", "float32", (6,)),
                    ("1.weight", "float32", (6, CLASSES)), ("1.bias", "float32", (CLASSES,))]
    assert [{k: d.name for k, d in s.items()} for s in p.accumulation_dtypes] == [
        {"0.weight": "float32", "0.bias": "float64"}, {"weight": "float32", "bias": "float64"}]
    before = {k: v.copy() for k, v in p.params.items()}
    r = p.run(*data(4 * MB, dtype="float32"))
    w0 = D_IN * 6
    assert {m.gradients for m in r.memory if m.ipu == 0} == {w0 * 4 + 6 * 8}
    # the optimiser is handed the sums in the accumulator dtype; it casts them itself
    assert opt.seen == {"0.0.weight": "float32", "0.0.bias": "float64",
                        "1.weight": "float32", "1.bias": "float64"}
    assert all(v.dtype == np.float32 for v in p.params.values())
    assert all(not np.array_equal(before[k], v) for k, v in p.params.items())
    with pytest.raises(PipelineConfigError, match="gradient_accumulation_dtype gave 'fp99'"):
        pipeline(make_stages(2), None, 4, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), gradient_accumulation_dtype="fp99")


def test_tensorflow_refuses_rts_of_on_chip_optimiser_state():
    # graphcore/tensorflow tensorflow/python/ipu/tests/pipelining_test.py,
    # testRTSButNoOffloading: replicated_optimizer_state_sharding=True with
    # offload_weight_update_variables=False raises ValueError "optimizer state must be
    # offloaded". PopTorch shards on-chip state (useReplicatedTensorSharding).
    def tf(**kw):
        return pipeline(make_stages(2), None, 4, replication_factor=2, optimizer=optim.Adam(),
                        loss=nn.SoftmaxCrossEntropy(), replicated_optimizer_state_sharding=True,
                        **kw)

    with pytest.raises(PipelineConfigError, match="optimizer state must be offloaded.*"
                       "offload_optimizer_state at None"):
        tf(offload_optimizer_state=False)
    assert tf().options.offload_optimizer_state  # None: offloaded, as TensorFlow
    assert tf(offload_optimizer_state=True).options.replicated_optimizer_state_sharding
    assert rts_model(2, True, offload=False).options.replicated_optimizer_state_sharding
    # an inference pipeline has no optimiser state: the option has no effect
    pipeline(make_stages(2), None, 4, replicated_optimizer_state_sharding=True,
             offload_optimizer_state=False)


@pytest.mark.parametrize("mode,period,count", [
    # PopART's numOutFetchesPerRepl x replicas: DI=4, G=6, R=2
    ("all", 1, 4 * 6 * 2), (OutputMode.EVERY_N, 2, 2 * 6 * 2), ("every_n", 4, 1 * 6 * 2),
    ("final", 1, 2), (OutputMode.SUM, 1, 2)])
def test_output_modes_return_the_documented_number_of_results(mode, period, count):
    di, g, replicas = 4, 6, 2
    x, y = data(di * g * replicas * MB, seed=3)
    p = pipeline(make_stages(3), None, g, "poptorch", device_iterations=di,
                 replication_factor=replicas, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), output_mode=mode, output_return_period=period)
    r = p.run(x, y)
    assert r.outputs.size == count == replication.outputs_per_call(p.output_mode, di, g,
                                                                   replicas, period)
    losses = r.losses  # (device iteration, replica, micro-batch)
    expected = {OutputMode.ALL: losses, OutputMode.EVERY_N: losses[period - 1::period],
                OutputMode.FINAL: losses[-1, :, -1],
                OutputMode.SUM: losses.sum(axis=(0, 2))}[p.output_mode]
    np.testing.assert_array_equal(r.outputs, expected)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 6), st.integers(1, 4), st.sampled_from(OutputMode),
       st.data())
def test_output_counts_property(di, g, replicas, mode, draw):
    period = draw.draw(st.sampled_from([n for n in range(1, di + 1) if di % n == 0]))
    losses = np.random.default_rng(di).normal(size=(di, replicas, g))
    got = replication.select_outputs(losses, mode, period)
    assert got.size == replication.outputs_per_call(mode, di, g, replicas, period)
    # every returned loss is one of the call's, and SUM keeps the total
    if mode is OutputMode.SUM:
        assert got.sum() == pytest.approx(losses.sum())
    else:
        assert np.isin(got, losses).all()


def test_output_mode_defaults_and_errors():
    blocks = [Block("A", nn.Dense(D_IN, 4, rng=0), ipu_id=0),
              Block("B", nn.Dense(4, CLASSES, rng=1), ipu_id=1)]
    m = training_model(blocks, nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                       ShardedExecution("A", "B"), gradient_accumulation=2, device_iterations=3)
    assert m.output_mode is OutputMode.FINAL and m.device_iterations == 3
    assert m.run(*data(6 * 2, dtype="float32")).outputs.shape == (1,)
    p = pipeline(make_stages(2), None, 4, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy())
    assert p.output_mode is OutputMode.ALL
    kw = dict(optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy(), device_iterations=6)
    with pytest.raises(PipelineConfigError, match="Return period must be a factor of the "
                       "number of batches per step: output_return_period 4 does not divide "
                       "device_iterations 6"):
        pipeline(make_stages(2), None, 4, output_mode="every_n", output_return_period=4, **kw)
    with pytest.raises(PipelineConfigError, match="output_mode 'last' is not one of ALL, "
                       "FINAL, EVERY_N, SUM"):
        pipeline(make_stages(2), None, 4, output_mode="last", **kw)


def test_batch_arithmetic_and_the_data_loader():
    assert combined_batch_size(40, 10, 10, 1) == 4000  # PopTorch's MNIST tutorial
    p = pipeline(make_stages(2), None, 4, device_iterations=3, replication_factor=2,
                 optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy())
    x, y = data(100)
    loader = DataLoader(p, x, y, batch_size=2, shuffle=True, seed=1)
    assert loader.combined_batch_size == 2 * 4 * 3 * 2 == 48 and len(loader) == 2
    seen = []
    for xb, yb in loader:
        assert len(xb) == len(yb) == 48
        assert p.run(xb, yb).losses.shape == (3, 2, 4)
        seen.extend(map(tuple, xb))
    assert len(set(seen)) == 96  # no sample twice; the 4 left over are dropped
    with pytest.raises(PipelineConfigError, match=r"The number of elements in the dataset "
                       r"\(100\) is not divisible by the number of elements processed per "
                       r"step \(48 = batch_size 2 × gradient_accumulation 4 × "
                       r"device_iterations 3 × replication_factor 2\) and drop_last=False. "
                       "Switch to drop_last=True."):
        DataLoader(p, x, y, batch_size=2, drop_last=False)
    with pytest.raises(PipelineConfigError, match="has 40 elements but one step processes 48"):
        DataLoader(p, x[:40], y[:40], batch_size=2)
    with pytest.raises(PipelineConfigError, match=r"got 30 samples and 30 labels; a call "
                       r"takes a multiple of gradient_accumulation 4 × device_iterations 3 × "
                       r"replication_factor 2 = 24 samples"):
        p.run(x[:30], y[:30])


def test_device_iterations_pay_the_host_sync_once_per_call():
    cost, sync, io = {}, {}, {}
    for di in (1, 10):
        p = pipeline(make_stages(2, "float32"), None, 4, device_iterations=di,
                     replication_factor=2, optimizer=optim.SGD(0.1),
                     loss=nn.SoftmaxCrossEntropy())
        c = call_cost(p, (D_IN,), MB)
        x, y = data(c.samples, dtype="float32")
        assert c.device == p.run(x, y).cycles  # the cost model is the run's timeline
        sync[di] = round(10e-6 * p.target.clock_hz)  # HOST_SYNC_SECONDS: 13,300 on ipu2
        host_bytes_per_cycle = IPU_MODEL_HOST_LINK_BYTES_PER_CYCLE  # ipu2, tut6-calibrated
        per_replica = di * 4 * MB  # samples each replica streams in
        io[di] = (math.ceil(per_replica * (D_IN * 4 + 4) / host_bytes_per_cycle)
                  + math.ceil(di * 4 * 4 / host_bytes_per_cycle))  # ALL: DI x G losses
        assert (c.host_sync, c.host_io) == (sync[di], io[di])
        assert c.cycles == sync[di] + io[di] + c.device and c.samples == 2 * per_replica
        cost[di] = c
    assert cost[10].device == 10 * cost[1].device
    # ten calls of one iteration pay nine more host syncs than one call of ten
    assert 10 * cost[1].cycles - cost[10].cycles == 9 * sync[1] + 10 * io[1] - io[10]
    assert cost[10].samples_per_second > 2 * cost[1].samples_per_second


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(replication)
    assert result.failed == 0 and result.attempted > 0
