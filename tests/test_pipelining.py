"""The pipeline runner: pipelined training equals plain gradient accumulation."""

import copy

import numpy as np
import pytest

from ipukit.errors import IpuError, OutOfMemoryError, PipelineConfigError, PipelineConfigTypeError
from ipukit.parallel import (
    Block,
    CostModel,
    PipelinedExecution,
    ShardedExecution,
    Stage,
    nn,
    optim,
    pipeline,
    training_model,
)
from ipukit.target import IPUModel

D_IN, CLASSES, MB = 5, 3, 4


def make_stages(n, dtype="float64"):
    widths = [D_IN] + [6 + k for k in range(n - 1)] + [CLASSES]
    stages = []
    for k in range(n):
        layers = [nn.Dense(widths[k], widths[k + 1], rng=10 + k, dtype=dtype)]
        stages.append(layers + ([nn.ReLU()] if k < n - 1 else []))
    return stages


def reference(stages, x, y, g, replicas, reduction, lr):
    """Plain gradient accumulation: the whole model, one micro-batch after another."""
    net = nn.Sequential(*copy.deepcopy([layer for s in stages for layer in s]))
    loss = nn.SoftmaxCrossEntropy()
    xs = x.reshape(replicas, g, MB, -1)
    ys = y.reshape(replicas, g, MB)
    total = {}
    for r in range(replicas):
        acc = {}
        for m in range(g):
            net.zero_grad()
            out, cache = net.forward(xs[r, m])
            _, lcache = loss.forward(out, ys[r, m])
            net.backward(loss.backward(lcache), cache)
            for key, v in net.grads.items():
                if reduction == "RUNNING_MEAN":
                    acc[key] = acc.get(key, 0) * (m / (m + 1)) + v / (m + 1)
                else:
                    acc[key] = acc.get(key, 0) + v
        for key, v in acc.items():
            total[key] = total.get(key, 0) + (v / g if reduction == "MEAN" else v) / replicas
    for key, p in net.params.items():
        p -= lr * total[key]
    return list(net.params.values())


CASES = [(kind, n, g) for kind, pairs in {
    "grouped": [(2, 4), (3, 6), (4, 8)],
    "interleaved": [(2, 2), (3, 6), (4, 4)],
    "sequential": [(2, 1), (3, 4)],
    "poptorch": [(2, 3), (3, 5), (4, 9)],
    "gpipe": [(2, 3), (4, 2)],
    "1f1b": [(3, 2), (4, 7)],
}.items() for n, g in pairs]


@pytest.mark.parametrize("kind,n,g", CASES)
@pytest.mark.parametrize("recomputation,replicas", [(False, 1), (True, 1), (False, 2),
                                                    (True, 3)])
def test_pipelined_weights_equal_gradient_accumulation(kind, n, g, recomputation, replicas):
    rng = np.random.default_rng(n * 100 + g)
    x = rng.normal(size=(replicas * g * MB, D_IN))
    y = rng.integers(0, CLASSES, len(x))
    stages = make_stages(n)
    expected = reference(stages, x, y, g, replicas, "SUM", 0.1)
    p = pipeline(stages, None, g, kind, optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy(),
                 recomputation=recomputation, replication_factor=replicas)
    r = p.run(x, y)
    assert r.losses.shape == (1, replicas, g)
    for got, want in zip(p.params.values(), expected):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    # recomputation runs an R op before each backward, and stashes only stage inputs
    assert any(rec.kind == "R" for rec in r.timeline) == recomputation


#: The schedules after Graphcore's: a model of p*v stages placed as the kind places them.
AFTER_GRAPHCORE = [("interleaved_1f1b", [0, 1, 2, 0, 1, 2], 6),  # chunk c of IPU r: c*p + r
                   ("interleaved_1f1b", [0, 1, 0, 1, 0, 1], 4),
                   ("zb_h1", [0, 1, 2], 5), ("zb_h1", [0, 1, 2, 3], 8),
                   ("zb_v", [0, 1, 2, 2, 1, 0], 4), ("zb_v", [0, 1, 1, 0], 3),  # the V
                   ("dualpipev", [0, 1, 1, 0], 4), ("dualpipev", [0, 1, 2, 2, 1, 0], 7)]


@pytest.mark.parametrize("kind,mapping,g", AFTER_GRAPHCORE)
@pytest.mark.parametrize("recomputation,replicas", [(False, 1), (True, 2)])
def test_schedules_after_graphcore_equal_gradient_accumulation(kind, mapping, g,
                                                                recomputation, replicas):
    rng = np.random.default_rng(len(mapping) * 10 + g)
    x = rng.normal(size=(replicas * g * MB, D_IN))
    y = rng.integers(0, CLASSES, len(x))
    stages = make_stages(len(mapping))
    expected = reference(stages, x, y, g, replicas, "SUM", 0.1)
    p = pipeline(stages, mapping, g, kind, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), recomputation=recomputation,
                 replication_factor=replicas)
    r = p.run(x, y)
    for got, want in zip(p.params.values(), expected):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    s = p.schedule
    assert s.num_model_stages == len(mapping) and s.num_stages == max(mapping) + 1
    work = [rec for rec in r.timeline if rec.kind in "FBWR"]
    assert {(rec.stage, rec.ipu) for rec in work} == set(enumerate(mapping))
    # split schedules run each backward as B then W, each timed with its own FLOPs
    phases = [rec.kind for rec in work if rec.stage == 1 and rec.microbatch == 0]
    assert phases == ["F"] + ["R"] * recomputation + (["B", "W"] if s.split else ["B"])
    if s.split:
        w = next(rec for rec in work if rec.kind == "W" and rec.stage == 0)
        b = next(rec for rec in work if rec.kind == "B" and rec.stage == 0)
        dense = p.stages[0].net.layers[0]  # stage 0: Dense, ReLU
        product = 2 * MB * dense.in_features * dense.out_features  # x.T @ dy, or dy @ W.T
        assert w.duration == p.cost.compute(product)
        assert b.duration == p.cost.compute(product + MB * dense.out_features)  # and ReLU


def test_zb_h1_idles_less_than_1f1b_on_the_same_model():
    """The bubble from the runner's timeline: the same work, less waiting per IPU."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(8 * 32, 512)).astype(np.float32), rng.integers(0, 10, 8 * 32)
    idle, busy = {}, {}
    for kind in ("1f1b", "zb_h1"):
        stages = [[nn.Dense(512, 512, rng=k), nn.ReLU()] for k in range(3)]
        r = pipeline(stages + [[nn.Dense(512, 10, rng=3)]], None, 8, kind,
                     optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy()).run(x, y)
        m = r.timeline.measures()
        idle[kind] = {q: m["idle"][q].get("dependency", 0) for q in m["idle"]}
        busy[kind] = m["busy"]
    assert busy["1f1b"] == pytest.approx(busy["zb_h1"], rel=1e-2)  # B + W: the backward
    assert all(idle["zb_h1"][q] <= idle["1f1b"][q] for q in range(4))
    assert sum(idle["zb_h1"].values()) < sum(idle["1f1b"].values())


@pytest.mark.parametrize("kind,mapping,message", [
    ("zb_v", None, r"IPU r holds stages r and 2p-1-r.*device_mapping=\[0, 1, 1, 0\]"),
    ("zb_v", [0, 1, 2], r"e.g. 4 stages on 2 IPUs: device_mapping=\[0, 1, 1, 0\]"),
    ("interleaved_1f1b", [0, 1, 2, 3], r"chunk c of IPU r is stage c\*p \+ r.*"
                                       r"device_mapping=\[0, 1, 0, 1\]"),
    ("interleaved_1f1b", [0, 0, 1, 1], r"use device_mapping=\[0, 1, 0, 1\]"),
    ("zb_h1", [0, 0, 1, 1], r"stage k on IPU k.*use device_mapping=\[0, 1, 2, 3\]"),
    ("dualpipev", [0, [1, 2], 0], "with a concurrent stage"),
])
def test_schedules_after_graphcore_place_their_stages(kind, mapping, message):
    from ipukit.parallel.concurrent import split_dense

    stages = make_stages(4 if mapping is None else len(mapping), "float32")
    if mapping and isinstance(mapping[1], list):
        stages[1] = split_dense(nn.Dense(6, 8), 2)
    with pytest.raises(PipelineConfigError, match=message):
        pipeline(stages, mapping, 8, kind, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy())


def test_training_model_runs_another_schedule():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(6 * MB, D_IN)), rng.integers(0, CLASSES, 6 * MB)
    stages = make_stages(3)
    expected = reference(stages, x, y, 6, 1, "MEAN", 0.1)
    blocks = [Block(f"B{k}", *s, ipu_id=k) for k, s in enumerate(stages)]
    m = training_model(blocks, nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                       gradient_accumulation=6, pipeline_schedule="zb_h1")
    m.run(x, y)
    assert m.schedule.kind == "zb_h1"
    for got, want in zip(m.params.values(), expected):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    with pytest.raises(PipelineConfigError, match="ShardedExecution, which runs one stage"):
        training_model(blocks, nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                       ShardedExecution("B0", "B1", "B2"), gradient_accumulation=6,
                       pipeline_schedule="zb_h1")


def test_a_concurrent_stage_gets_the_gradient_of_each_members_shard():
    """Issue 27 point 4: the stage after a concurrent stage sends each member the gradient
    of its own output shard; a member on the sender's IPU gets its shard without a link."""
    from ipukit.parallel.concurrent import split_dense

    rng = np.random.default_rng(8)
    x, y = rng.normal(size=(4 * MB, D_IN)), rng.integers(0, CLASSES, 4 * MB)
    first = split_dense(nn.Dense(D_IN, 6, rng=1), 2)  # shards of 3 columns on IPUs 0, 1
    p = pipeline([first, [nn.ReLU(), nn.Dense(6, CLASSES, rng=2)]], [[0, 1], 1], 4,
                 "1f1b", optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy())
    r = p.run(x, y)
    shard = MB * 3 * 8  # float64
    back = [rec for rec in r.timeline if rec.kind == "link" and rec.stage == 1]
    assert [rec.bytes for rec in back] == [shard] * 4  # to IPU 0 only, not the whole 6 columns
    forward = [rec for rec in r.timeline if rec.kind == "link" and rec.stage == 0]
    assert {(rec.ipu, rec.bytes) for rec in forward} == {(0, shard)}  # IPU 1's stays there


@pytest.mark.parametrize("reduction", ["SUM", "MEAN", "RUNNING_MEAN"])
def test_reduction_methods(reduction):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(6 * MB, D_IN)), rng.integers(0, CLASSES, 6 * MB)
    stages = make_stages(3)
    expected = reference(stages, x, y, 6, 1, reduction, 0.05)
    p = pipeline(stages, None, 6, "grouped", reduction_method=reduction,
                 optimizer=optim.SGD(0.05), loss=nn.SoftmaxCrossEntropy())
    p.run(x, y)
    for got, want in zip(p.params.values(), expected):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def test_repeat_count_applies_the_optimiser_once_per_run():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(3 * 4 * MB, D_IN)), rng.integers(0, CLASSES, 3 * 4 * MB)
    stages = make_stages(2)
    ref_stages = copy.deepcopy(stages)
    p = pipeline(stages, None, 4, "grouped", repeat_count=3, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy())
    r = p.run(x, y)
    assert [rec.kind for rec in r.timeline].count("optimizer") == 3 * 2
    for i in range(3):  # three plain runs, each starting from the previous weights
        chunk = slice(i * 4 * MB, (i + 1) * 4 * MB)
        new = reference(ref_stages, x[chunk], y[chunk], 4, 1, "SUM", 0.1)
        flat = [layer for s in ref_stages for layer in s if layer.params]
        for layer, (w, b) in zip(flat, zip(new[::2], new[1::2])):
            layer.params["weight"][...], layer.params["bias"][...] = w, b
    for got, want in zip(p.params.values(), [a for s in ref_stages for layer in s
                                             for a in layer.params.values()]):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def test_fifo_stash_and_memory_follow_the_schedule():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(8 * MB, D_IN)), rng.integers(0, CLASSES, 8 * MB)
    peaks = {}
    for kind in ("grouped", "interleaved", "gpipe"):
        p = pipeline(make_stages(4), None, 8, kind, optimizer=optim.AdamW(),
                     loss=nn.SoftmaxCrossEntropy(), offload_optimizer_state=False)
        r = p.run(x, y)
        peaks[kind] = max(m.stash for m in r.memory if m.ipu == 0)
        w = sum(a.nbytes for k, a in p.params.items() if k.startswith("0."))
        m0 = [m for m in r.memory if m.ipu == 0]
        assert all(m.weights == m.gradients == w and m.optimizer == 2 * w for m in m0)
        assert m0[0].stash == 0 and m0[-1].stash == 0
    # Stage 0 holds 7 micro-batches when grouped, 4 when interleaved, 8 under GPipe.
    one = peaks["grouped"] / 7
    assert peaks["interleaved"] == pytest.approx(4 * one)
    assert peaks["gpipe"] == pytest.approx(8 * one)


def test_recomputation_and_offload_reduce_ipu_memory():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(8 * 16, D_IN)), rng.integers(0, CLASSES, 8 * 16)

    def peak(**kw):
        p = pipeline(make_stages(4), None, 8, "grouped", optimizer=optim.AdamW(),
                     loss=nn.SoftmaxCrossEntropy(), **kw)
        r = p.run(x, y)
        return max(m.total for m in r.memory if m.ipu == 0), r

    plain, _ = peak(offload_optimizer_state=False)
    recomputed, _ = peak(recomputation=True, offload_optimizer_state=False)
    offloaded, r = peak(offload_optimizer_state=True)
    # TF's offload_weight_update_variables=None offloads a training pipeline's state
    assert peak()[0] == offloaded
    assert recomputed < plain and offloaded < plain
    w0 = D_IN * 6 * 8 + 6 * 8
    assert plain - offloaded == 2 * w0
    assert r.host_bytes == 2 * sum(a.nbytes for a in make_stages_params())


def make_stages_params():
    return [a for s in make_stages(4) for layer in s for a in layer.params.values()]


def test_out_of_memory_names_the_ipu_and_keeps_the_weights():
    target = IPUModel("ipu2", num_ipus=2, tiles_per_ipu=1).create_device().target
    stages = [[nn.Dense(8, 400, rng=0), nn.ReLU()], [nn.Dense(400, 3, rng=1)]]
    before = [a.copy() for s in stages for layer in s for a in layer.params.values()]
    p = pipeline(stages, None, 4, "grouped", optimizer=optim.AdamW(),
                 loss=nn.SoftmaxCrossEntropy(), target=target)
    x = np.ones((4 * 512, 8), dtype=np.float32)
    # stage 1 stashes its input, the log-probabilities and the int64 labels of a micro-batch
    stash = 512 * 400 * 4 + 512 * 3 * 4 + 512 * 8
    with pytest.raises(OutOfMemoryError,
                       match=rf"Out of memory on IPU 1: .* stashed activations {stash:,}"):
        p.run(x, np.zeros(len(x), dtype=int))
    for a, b in zip(p.params.values(), before):
        np.testing.assert_array_equal(a, b)
    # TF's default offloads the optimiser state: the message says where it is, and does not
    # suggest offloading it again
    state = 2 * sum(a.nbytes for a in before)
    with pytest.raises(OutOfMemoryError, match="The optimiser state is offloaded: "
                       rf"{state:,} bytes in Streaming Memory") as err:
        p.run(x, np.zeros(len(x), dtype=int))
    assert "offload_optimizer_state=True" not in str(err.value)


def test_out_of_memory_suggests_offloading_only_where_it_makes_the_ipus_fit():
    """Offloading the optimiser state (TF's offload_weight_update_variables, PopTorch's
    useOnChipStorage(False)) is suggested where the IPUs would fit without it; the model
    then indeed runs offloaded."""
    target = IPUModel("ipu2", num_ipus=2, tiles_per_ipu=1).create_device().target

    def model(width, offload):  # AdamW: weights, accumulators and 2 x weights of state
        stages = [[nn.Dense(100, width, rng=0), nn.ReLU()], [nn.Dense(width, 3, rng=1)]]
        return pipeline(stages, None, 4, "grouped", optimizer=optim.AdamW(),
                        loss=nn.SoftmaxCrossEntropy(), target=target,
                        offload_optimizer_state=offload)

    x, y = np.ones((4 * 8, 100), dtype=np.float32), np.zeros(4 * 8, dtype=int)
    weights = 4 * (100 * 400 + 400)  # stage 0: 4 x weights on chip > 638,976 B > 2 x
    assert 4 * weights > target.bytes_per_ipu > 2 * weights + 8 * 100 * 4 * 8
    with pytest.raises(OutOfMemoryError, match=r"Offloading the optimiser state to "
                       r"Streaming Memory .* makes every IPU fit\. Use recomputation=True, "
                       "offload_optimizer_state=True"):
        model(400, False).run(x, y)
    assert model(400, True).run(x, y).host_bytes == 2 * (weights + 4 * (400 * 3 + 3))
    with pytest.raises(OutOfMemoryError) as err:  # too big even without its state
        model(900, False).run(x, y)
    assert "Offloading the optimiser state" not in str(err.value)
    assert "offload_optimizer_state=True" in str(err.value)  # still one of the fixes


def test_timeline_records():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(4 * MB, D_IN)), rng.integers(0, CLASSES, 4 * MB)
    p = pipeline(make_stages(2), [0, 1], 4, "grouped", optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), replication_factor=2)
    r = p.run(np.concatenate([x, x]), np.concatenate([y, y]))
    kinds = {rec.kind for rec in r.timeline}
    assert kinds == {"F", "B", "link", "sync", "allreduce", "optimizer"}
    links = [rec for rec in r.timeline if rec.kind == "link"]
    assert {rec.bytes for rec in links} == {MB * 6 * 8}  # activations and their gradients
    for q in (0, 1):  # nothing overlaps on one IPU
        spans = sorted((rec.start, rec.start + rec.duration) for rec in r.timeline
                       if rec.ipu == q and rec.kind not in ("sync",))
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert r.cycles == max(rec.start + rec.duration for rec in r.timeline)
    assert r.seconds == pytest.approx(r.cycles / p.target.clock_hz)
    # both replicas saw the same data, so the losses agree
    np.testing.assert_array_equal(r.losses[0, 0], r.losses[0, 1])


class Fixed(nn.Layer):
    """Identity with a fixed cost: makes stage times exact for the formula test."""

    def __init__(self, fwd, bwd):
        super().__init__()
        self.cost = (fwd, bwd)

    def forward(self, x):
        return x, None

    def backward(self, dy, cache):
        return dy

    def flops(self, shape):
        return self.cost


class FreeLoss(nn.SoftmaxCrossEntropy):
    def flops(self, shape):
        return 0, 0


@pytest.mark.parametrize("n,g", [(2, 3), (4, 10), (3, 8)])
def test_sharded_slower_pipelined_faster_as_the_formulas_say(n, g):
    t_f, t_b, sync = 300, 700, 40
    blocks = [Block(f"B{k}", Fixed(t_f, t_b), ipu_id=k) for k in range(n)]
    names = [b.name for b in blocks]
    times = {}
    for strategy in (PipelinedExecution(*names), ShardedExecution(*names)):
        m = training_model(blocks, FreeLoss(), optim.SGD(0.1), strategy,
                           gradient_accumulation=g)
        m.cost = CostModel(flops_per_cycle=1, link_bytes_per_cycle=float("inf"),
                           host_bytes_per_cycle=1, sync_cycles=sync)
        times[type(strategy).__name__] = m.cycles_per_run((4,), 2)
    # PopART: G + 2N - 2 cycles, each ends with a sync; (G + N - 1)(t_F + t_B) of work.
    assert times["PipelinedExecution"] == (g + n - 1) * (t_f + t_b) + (g + 2 * n - 2) * sync
    # Sharded: one stage at a time, 2N - 1 steps per micro-batch (TF's PipelineStageMerger:
    # the last stage's forward and backward are one stage program).
    assert times["ShardedExecution"] == g * n * (t_f + t_b) + (2 * n - 1) * g * sync


def test_cycles_per_run_matches_a_real_run():
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(6 * MB, D_IN)), rng.integers(0, CLASSES, 6 * MB)
    p = pipeline(make_stages(3, "float32"), None, 6, "grouped", optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy())
    assert p.run(x.astype(np.float32), y).cycles == p.cycles_per_run((D_IN,), MB)


def test_poptorch_front_end_stages_and_errors():
    def blocks():
        return [Block("A", nn.Dense(4, 5, rng=0), ipu_id=0), Block("B", nn.ReLU(), ipu_id=0),
                Block("C", nn.Dense(5, 3, rng=1), ipu_id=1)]

    m = training_model(blocks(), nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                       gradient_accumulation=3)
    assert [s.ipus for s in m.stages] == [(0,), (1,)] and m.schedule.kind == "poptorch"
    assert m.reduction == "MEAN"
    m = training_model(blocks(), nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                       PipelinedExecution(Stage("A", "B").ipu(1), Stage("C").ipu(2)),
                       gradient_accumulation=3)
    assert [s.ipus for s in m.stages] == [(1,), (2,)]
    with pytest.raises(PipelineConfigError, match="names block"):
        training_model(blocks(), nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                       PipelinedExecution("A", "X"), gradient_accumulation=3)
    with pytest.raises(PipelineConfigError, match="greater than or equal to the number of "
                                                  r"pipeline stages \(5\)"):
        training_model(blocks(), nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                       PipelinedExecution("A", "B", "C"), gradient_accumulation=4)


def test_tensorflow_front_end_errors():
    opt, loss = optim.SGD(0.1), nn.SoftmaxCrossEntropy()
    with pytest.raises(PipelineConfigError, match="at least two computational stages"):
        pipeline(make_stages(1), None, 2, optimizer=opt, loss=loss)
    with pytest.raises(PipelineConfigError, match="device_mapping has 3 entries for 2"):
        pipeline(make_stages(2), [0, 1, 2], 4, optimizer=opt, loss=loss)
    with pytest.raises(PipelineConfigError, match="concurrent stages"):
        pipeline(make_stages(2), [0, [1, 2]], 4, optimizer=opt, loss=loss)
    with pytest.raises(PipelineConfigError, match="same IPU"):
        pipeline(make_stages(2), [0, 0], 2, "interleaved", optimizer=opt, loss=loss)
    with pytest.raises(PipelineConfigError, match="multiple of 4"):
        pipeline(make_stages(2), None, 6, optimizer=opt, loss=loss)
    with pytest.raises(PipelineConfigError, match="reduction_method"):
        pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss, reduction_method="MAX")
    with pytest.raises(PipelineConfigError, match="needs an optimizer"):
        pipeline(make_stages(2), None, 4, loss=loss)
    target = IPUModel("ipu2", num_ipus=2).create_device().target
    with pytest.raises(PipelineConfigError, match="uses IPU 2"):
        pipeline(make_stages(2), [0, 2], 4, optimizer=opt, loss=loss, target=target)
    p = pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss)
    with pytest.raises(PipelineConfigError, match="multiple of"):
        p.run(np.ones((6, D_IN)), np.zeros(6, dtype=int))


def test_tensorflow_argument_order_gets_a_hint():
    # TF: pipeline(stages, gradient_accumulation_count, ...); here device_mapping is 2nd.
    opt, loss = optim.SGD(0.1), nn.SoftmaxCrossEntropy()
    with pytest.raises(PipelineConfigError, match="gradient_accumulation_count is required.*"
                       "takes device_mapping second"):
        pipeline(make_stages(2), 4, optimizer=opt, loss=loss)
    # TF: TypeError("device_mapping argument needs to be a list or a tuple.")
    with pytest.raises(TypeError, match=r"device_mapping argument needs to be a list or a "
                       r"tuple\. Got int 4.*pass gradient_accumulation_count="):
        pipeline(make_stages(2), 4, 2, optimizer=opt, loss=loss)


def test_tensorflow_defaults_and_loose_types():
    opt, loss = optim.SGD(0.1), nn.SoftmaxCrossEntropy()
    # pipeline_schedule=None is TF's default and resolves to Grouped
    assert pipeline(make_stages(2), None, 4, None, optimizer=opt,
                    loss=loss).schedule.kind == "grouped"
    with pytest.raises(PipelineConfigError, match="reduction_method '0' is not one of"):
        pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss, reduction_method=0)
    # NumPy integers are integers; the mapping itself must be a list or a tuple, as in TF
    with pytest.raises(PipelineConfigTypeError,
                       match="device_mapping argument needs to be a list"):
        pipeline(make_stages(2), np.array([1, 0]), 4, optimizer=opt, loss=loss)
    p = pipeline(make_stages(2), list(np.array([1, 0])), np.int64(4), optimizer=opt, loss=loss,
                 replication_factor=np.int64(2), repeat_count=np.int32(3))
    assert [s.ipus for s in p.stages] == [(1,), (0,)] and p.samples_per_run == 3 * 2 * 4
    assert type(p.stages[0].ipus[0]) is int and type(p.replication_factor) is int
    with pytest.raises(PipelineConfigError, match="replication_factor must be a positive"):
        pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss, replication_factor=True)


def test_device_iterations_is_checked_against_repeat_count():
    opt, loss = optim.SGD(0.1), nn.SoftmaxCrossEntropy()
    assert pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss,
                    device_iterations=3).repeat_count == 3
    assert pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss, repeat_count=3,
                    device_iterations=3).repeat_count == 3
    with pytest.raises(PipelineConfigError, match="device_iterations must be a positive"):
        pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss, device_iterations=0)
    with pytest.raises(PipelineConfigError, match="device_iterations 2 and repeat_count 3"):
        pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss, repeat_count=3,
                 device_iterations=2)


def test_mismatched_shapes_and_non_layers_are_named_before_any_arithmetic():
    opt, loss = optim.SGD(0.1), nn.SoftmaxCrossEntropy()
    stages = [[nn.Dense(4, 8, rng=1)], [nn.Dense(7, 3, rng=2)]]
    p = pipeline(stages, None, 4, optimizer=opt, loss=loss)
    before = {k: v.copy() for k, v in p.params.items()}
    with pytest.raises(PipelineConfigError, match=r"stage 1, fed stage 0's outputs of shape "
                       r"\(2, 8\): Dense\(7, 3\) expects \(batch, 7\)"):
        p.run(np.ones((8, 4)), np.zeros(8, dtype=int))
    assert all(np.array_equal(before[k], v) for k, v in p.params.items())
    good = pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss)
    with pytest.raises(PipelineConfigError, match=r"stage 0, fed the samples of shape"):
        good.cycles_per_run((D_IN + 1,), 4)
    with pytest.raises(PipelineConfigError, match="stage 0: a stage .* is a layer"):
        pipeline([[lambda a: a], [nn.Dense(4, 3)]], None, 4, optimizer=opt, loss=loss)


@pytest.mark.parametrize("labels, message", [
    ([0, 1, 2, 0, -1, 0, 1, 2], "labels hold -1, outside 0..2"),
    ([0, 1, 2, 0, 3, 0, 1, 2], "labels hold 3, outside 0..2"),
    (np.zeros(8), "integer class indices.*float64"),
])
def test_bad_labels_are_named(labels, message):
    p = pipeline(make_stages(2), None, 4, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy())
    with pytest.raises(IpuError, match=message):
        p.run(np.ones((8, D_IN)), np.asarray(labels))


def test_two_stages_on_one_ipu_share_it():
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(6 * MB, D_IN)), rng.integers(0, CLASSES, 6 * MB)
    stages = make_stages(3)
    expected = reference(stages, x, y, 6, 1, "SUM", 0.1)
    p = pipeline(stages, [0, 0, 1], 6, "grouped", optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy())
    r = p.run(x, y)
    for got, want in zip(p.params.values(), expected):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert {rec.ipu for rec in r.timeline} == {0, 1}
    # stages 0 and 1 share IPU 0: nothing crosses a link between them
    assert {rec.stage for rec in r.timeline if rec.kind == "link"} == {1, 2}


def test_docstring_examples_run():
    import doctest
    import importlib

    for name in ("schedule", "nn", "optim", "pipelining"):
        module = importlib.import_module(f"ipukit.parallel.{name}")
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, name


# --- issue 18: TensorFlow's and PopTorch's pipeline behaviour --------------------------------


def test_recomputation_mode_reaches_the_schedule_with_tensorflows_rules():
    # graphcore/tensorflow tensorflow/compiler/plugin/poplar/driver/tools/pipeline_util.cc
    # (GetPipelineRecomputationMode): Sequential does not support RecomputeThenBackpropagate
    from ipukit.parallel import RecomputationMode

    opt, loss = optim.SGD(0.1), nn.SoftmaxCrossEntropy()
    p = pipeline(make_stages(2), None, 3, "Sequential", recomputation=True,
                 optimizer=opt, loss=loss)
    assert p.schedule.recomputation_mode == "RecomputeAndBackpropagateInterleaved"  # Auto
    with pytest.raises(PipelineConfigError, match="Pipeline schedule Sequential does not "
                       "support 'Recompute_then_backpropagate' recomputation mode"):
        pipeline(make_stages(2), None, 3, "sequential", recomputation=True, optimizer=opt,
                 loss=loss, recomputation_mode=RecomputationMode.RecomputeThenBackpropagate)
    with pytest.raises(TypeError, match="not a member of the RecomputationMode enumeration"):
        pipeline(make_stages(2), None, 4, recomputation=True, optimizer=opt, loss=loss,
                 recomputation_mode=3)


def test_device_mapping_may_be_a_tuple_but_nothing_else():
    # tensorflow/python/ipu/ops/pipelining_ops.py raises TypeError("device_mapping argument
    # needs to be a list or a tuple."); pipelining_grouped_test.py passes e.g. device_mapping=2
    opt, loss = optim.SGD(0.1), nn.SoftmaxCrossEntropy()
    assert [s.ipus for s in pipeline(make_stages(2), (1, 0), 4, optimizer=opt,
                                     loss=loss).stages] == [(1,), (0,)]
    for bad in (range(2), "01", {0: 0, 1: 1}):
        with pytest.raises(PipelineConfigTypeError,
                           match=r"^device_mapping argument needs to be a list or a tuple\."):
            pipeline(make_stages(2), bad, 4, optimizer=opt, loss=loss)


def _sharded_mnist_stages(seed=0):
    from ipukit.examples import sharded_mnist

    mlp, classifier = sharded_mnist.model([16, 8], seed)
    return mlp, classifier


def test_all_devices_stages_run_the_concurrent_pipeline_example_as_written():
    # graphcore/examples v2.5.0 code_examples/tensorflow/concurrent_pipeline/
    # run_sharded_mnist.py on 2 IPUs: basic [mlp, classifier, loss] on [0, _ALL_DEVICES, 1],
    # concurrent [mlp, sharded classifier-and-loss] on [1, _ALL_DEVICES].
    from ipukit.parallel import _ALL_DEVICES
    from ipukit.parallel.concurrent import ShardedSoftmaxCrossEntropy, split_dense

    assert _ALL_DEVICES == -1  # pipelining_ops.py
    rng = np.random.default_rng(5)
    x = rng.random((6 * 4, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 6 * 4)
    two = IPUModel("ipu2", num_ipus=2).create_device().target
    losses = {}
    for layout in ("original", "port"):
        mlp, classifier = _sharded_mnist_stages()
        mapping = [0, _ALL_DEVICES, 1] if layout == "original" else [0, 1, 2]
        p = pipeline([mlp, [classifier], []], mapping, 6, optimizer=optim.SGD(0.01),
                     loss=nn.SoftmaxCrossEntropy(),
                     target=two if layout == "original" else None)
        losses["basic", layout] = p.run(x, y).losses
        if layout == "original":
            assert [s.ipus for s in p.stages] == [(0,), (0,), (1,)]  # kit convention
            assert p.replication_factor == 1 and p.ipus == [0, 1]
        mlp, classifier = _sharded_mnist_stages()
        halves = split_dense(classifier, 2)
        stages = [mlp, [[h] for h in halves]] if layout == "original" else [mlp, halves]
        mapping = [1, _ALL_DEVICES] if layout == "original" else [0, [1, 2]]
        p = pipeline(stages, mapping, 4, optimizer=optim.SGD(0.01),
                     loss=ShardedSoftmaxCrossEntropy(),
                     target=two if layout == "original" else None)
        losses["concurrent", layout] = p.run(x[:16], y[:16]).losses
        if layout == "original":
            assert [s.ipus for s in p.stages] == [(1,), (0, 1)]
    for mode in ("basic", "concurrent"):
        np.testing.assert_allclose(losses[mode, "original"], losses[mode, "port"], rtol=1e-6)
    # TF checks Interleaved's "multiple stages on the same device" on the flat mapping as
    # given, where _ALL_DEVICES is one more device: [0, -1, 1] is accepted
    mlp, classifier = _sharded_mnist_stages()
    pipeline([mlp, [classifier], []], [0, _ALL_DEVICES, 1], 3, "Interleaved",
             optimizer=optim.SGD(0.01), loss=nn.SoftmaxCrossEntropy(), target=two)


def test_tensorflow_offloads_optimiser_state_by_default_and_poptorch_does_not():
    # graphcore/tensorflow tensorflow/compiler/plugin/poplar/docs/perf_training.rst,
    # "Optimizer state offloading": "This feature is enabled by default for both pipelining
    # and when GradientAccumulationOptimizerV2 is used" (remote memory = Streaming Memory);
    # PopTorch keeps the optimiser state on chip unless
    # TensorLocationSettings().useOnChipStorage(False) (poptorch docs, options).
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(4 * MB, D_IN)), rng.integers(0, CLASSES, 4 * MB)
    state = 2 * sum(a.nbytes for s in make_stages(2) for layer in s
                    for a in layer.params.values())  # Adam: two slots per weight
    tf = pipeline(make_stages(2), None, 4, optimizer=optim.Adam(), loss=nn.SoftmaxCrossEntropy())
    r = tf.run(x, y)
    assert r.host_bytes == state and all(m.optimizer == 0 for m in r.memory)
    on_chip = pipeline(make_stages(2), None, 4, optimizer=optim.Adam(),
                       loss=nn.SoftmaxCrossEntropy(), offload_optimizer_state=False).run(x, y)
    assert on_chip.host_bytes == 0 and sum(max(m.optimizer for m in on_chip.memory
                                               if m.ipu == q) for q in (0, 1)) == state
    blocks = [Block(f"B{k}", *layers) for k, layers in enumerate(make_stages(2))]
    pt = training_model(blocks, nn.SoftmaxCrossEntropy(), optim.Adam(),
                        PipelinedExecution("B0", "B1"), gradient_accumulation=4)
    assert pt.run(x, y).host_bytes == 0


def test_replicas_follow_from_the_ipus_and_the_shards():
    # graphcore/tensorflow tensorflow/compiler/plugin/poplar/docs/perf_training.rst,
    # "Selecting the number of replicas": "you must specify a
    # multiple of the number of shards used by the graph ... sharded over two IPUs ... eight
    # IPUs, then the graph will be replicated four times."
    opt, loss = optim.SGD(0.1), nn.SoftmaxCrossEntropy()
    eight = IPUModel("ipu2", num_ipus=8).create_device().target
    assert pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss,
                    target=eight).replication_factor == 4
    three = IPUModel("ipu2", num_ipus=3).create_device().target
    with pytest.raises(PipelineConfigError, match="must specify a multiple of the number of "
                       "shards used by the graph"):
        pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss, target=three)
    assert pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss, target=three,
                    replication_factor=1).replication_factor == 1  # explicit wins
    assert pipeline(make_stages(2), None, 4, optimizer=opt, loss=loss).replication_factor == 1


def test_tensorflow_inference_pipeline_runs_forward_stages_only():
    # pipelining_ops.py: no optimizer_function -> an inference pipeline; graphcore-sources
    # §3b: Grouped inference overlaps N, so 3 stages and count 10 give "must be a multiple of
    # 3" (the verified inference test).
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(6 * MB, D_IN)), rng.integers(0, CLASSES, 6 * MB)
    p = pipeline(make_stages(3), None, 6, repeat_count=1)
    r = p.run(x)
    assert {rec.kind for rec in r.timeline} <= {"F", "link", "sync"}
    assert r.outputs.shape == (1, 1, 6, MB, CLASSES)
    np.testing.assert_allclose(r.outputs.reshape(-1, CLASSES), p.predict(x), rtol=1e-12)
    assert p.schedule.num_steps == 6 + 3 - 1 and r.host_bytes == 0
    with pytest.raises(PipelineConfigError, match="must be a multiple of 3"):
        pipeline(make_stages(3), None, 10)
    scored = pipeline(make_stages(3), None, 6, loss=None).run(x, y)
    assert scored.losses.shape == (1, 1, 0)
    assert p.cycles_per_run((D_IN,), MB, dtype="float64") == pytest.approx(r.cycles)


def test_poptorch_inference_model():
    # poptorch docs overview.rst / pipelining tutorial: inferenceModel pipelines the forward
    # stages; Compiler.cpp: "poptorch.Options().deviceIterations must be greater than or
    # equal to the number of pipeline stages (3) when using PopTorch.PipelinedExecution."
    from ipukit.parallel import inference_model

    rng = np.random.default_rng(8)
    x = rng.normal(size=(4 * MB, D_IN))
    blocks = [Block(f"B{k}", *layers) for k, layers in enumerate(make_stages(3))]
    m = inference_model(blocks, PipelinedExecution("B0", "B1", "B2"), device_iterations=4)
    r = m.run(x)
    assert m.schedule.kind == "poptorch" and not m.schedule.training
    assert m.schedule.num_steps == 4 + 3 - 1
    np.testing.assert_allclose(r.outputs.reshape(-1, CLASSES), m.predict(x), rtol=1e-12)
    with pytest.raises(PipelineConfigError, match=r"deviceIterations must be greater than or "
                       r"equal to the number of pipeline stages \(3\)"):
        inference_model(blocks, PipelinedExecution("B0", "B1", "B2"), device_iterations=2)


def test_front_ends_build_one_frozen_options_object():
    import dataclasses

    from ipukit.parallel import PipelineOptions

    tf = pipeline(make_stages(2), None, gradient_accumulation_count=4,
                  pipeline_schedule="Sequential", reduction_method="mean", device_iterations=2,
                  optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy())
    pt = training_model([Block("A", *make_stages(2)[0]), Block("B", *make_stages(2)[1])],
                        nn.SoftmaxCrossEntropy(), optim.SGD(0.1), ShardedExecution("A", "B"),
                        gradient_accumulation=4, device_iterations=2, output_mode="all")
    # TF offloads optimiser state by default, PopTorch keeps it on chip; the rest agrees
    assert tf.options.offload_optimizer_state and not pt.options.offload_optimizer_state
    tf_on_chip = dataclasses.replace(tf.options, offload_optimizer_state=False)
    assert tf_on_chip == pt.options == PipelineOptions(4, "sequential", "MEAN", repeat_count=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tf.options.repeat_count = 3
    assert (tf.repeat_count, tf.reduction, tf.schedule.kind) == (2, "MEAN", "sequential")
