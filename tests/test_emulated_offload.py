"""Offloaded optimiser state on the emulator: with ``emulate=True`` it lives in remote
buffers (Streaming Memory) and is copied in before the weight update and back after it.

Graphcore's behaviour tested here:
* TF's ``offload_weight_update_variables`` (tensorflow/python/ipu/ops/pipelining_ops.py,
  docstring): "any tf.Variables which are only used by the weight update of the pipeline
  (for example the accumulator variable when using the tf.MomentumOptimizer) will be stored
  in the remote memory. During the weight update this variable will be streamed onto the
  device and then streamed back to the remote memory after it has been updated"; ``None``
  (the default) offloads automatically. The kit's TF front end (``offload_optimizer_state``)
  maps ``None`` to offloaded in a training pipeline.
* PopTorch's ``options.TensorLocations.setOptimizerLocation(useOnChipStorage(False))``: the
  optimiser state in Streaming Memory (``offload_optimizer_state=True`` in the kit's
  PopTorch front end).
* Offloading moves data, not arithmetic: the trained weights and losses are the same.
"""

import numpy as np
import pytest

import ipukit as ipu
from ipukit import cost
from ipukit.parallel import nn, optim
from ipukit.parallel.pipelining import Block, pipeline, training_model

TARGET = ipu.IPUModel(num_ipus=3, tiles_per_ipu=4).create_device().target
#: floats of each stage's weights and biases: Dense(6, 8), Dense(8, 8), Dense(8, 3)
STAGE_FLOATS = [6 * 8 + 8, 8 * 8 + 8, 8 * 3 + 3]


def stages():
    return [[nn.Dense(6, 8, rng=1), nn.ReLU()], [nn.Dense(8, 8, rng=2), nn.ReLU()],
            [nn.Dense(8, 3, rng=3)]]


def data(n=72, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 6)).astype("float32"), rng.integers(0, 3, n)


def run(make_opt, emulate, offload, **kw):
    p = pipeline(stages(), None, gradient_accumulation_count=6, optimizer=make_opt(),
                 loss=nn.SoftmaxCrossEntropy(), target=TARGET, repeat_count=2,
                 emulate=emulate, offload_optimizer_state=offload, **kw)
    return p, p.run(*data())


def emulation(p):
    (emu,) = p._emulations.values()
    return emu


def update_steps(result):
    """The steps of each weight update (one per pipeline run), as executed."""
    trace = result.trace
    return [[trace.steps[trace._step_ids[i]] for i in range(o.first, o.end)]
            for o in result.op_steps if o.phase == "optimizer"]


OPTIMIZERS = {"momentum": (lambda: optim.SGD(0.1, momentum=0.9), 1),
              "adam": (lambda: optim.Adam(0.01), 2)}  # states per weight: buf; m and v


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_offloaded_state_is_in_streaming_memory_and_tile_memory_falls(name):
    make, states = OPTIMIZERS[name]
    on, _ = run(make, True, False)
    off, _ = run(make, True, True)
    state_bytes = 4 * states * sum(STAGE_FLOATS)
    mem_on, mem_off = (emulation(p).engine.trace.memory for p in (on, off))
    g = emulation(off).graph
    assert len(g.remote_buffers) == 3 * states  # one per stage and state
    assert mem_on.streaming_memory == 0
    assert mem_off.streaming_memory == state_bytes
    # the state is no longer always live on the tiles: exactly its bytes fewer
    on_vars, off_vars = (int(m.categories["variables"].sum()) for m in (mem_on, mem_off))
    assert on_vars - off_vars == state_bytes
    # it is still on the tiles during the update (not-always-live), so the total falls by
    # its bytes where the tiles' peaks are elsewhere (momentum here), else by less
    fall = int(mem_on.total.sum() - mem_off.total.sum())
    assert 0 < fall <= state_bytes
    if name == "momentum":
        assert fall == state_bytes
    # the pipeline's memory records: no optimiser state on the IPUs (Adam's bias
    # corrections, 2 floats per weight, stay on the tiles: kit convention)
    for rec in off.run(*data()).memory:
        assert rec.optimizer == (0 if name == "momentum" else 2 * 2 * 4)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_the_update_takes_longer_by_exactly_the_remote_copies_cost(name):
    make, states = OPTIMIZERS[name]
    (_, r_on), (_, r_off) = run(make, True, False), run(make, True, True)
    t = TARGET
    expected = sum(2 * states * (cost.sync_cycles(t) + cost.remote_cycles(4 * n, t))
                   for n in STAGE_FLOATS)  # each state in and out, every stage
    for on, off in zip(update_steps(r_on), update_steps(r_off)):
        remote = [s for s in off if s.kind == "remote"]
        assert len(remote) == 2 * states * 3
        assert sorted(s.remote_bytes for s in remote) == sorted(
            4 * n for n in STAGE_FLOATS for _ in range(2 * states))
        assert sum(s.cycles for s in off) - sum(s.cycles for s in on) == expected
        assert [s.name for s in off if s.kind != "remote"] == [s.name for s in on]


def optimizer_cycles(result, ipu_id):
    """The duration of IPU ``ipu_id``'s first weight update (the "optimizer" span)."""
    return next(s.duration for s in result.timeline if s.kind == "optimizer"
                and s.ipu == ipu_id)


def copies_agree(numpy_on, numpy_off, emulated_off, ipus, target):
    """Each IPU's update in the NumPy runner grows by exactly its remote copies' Streaming
    Memory time on the emulator (``cost.remote_cycles`` of each "remote" superstep's
    bytes); the emulator's supersteps also pay their internal sync, one per copy."""
    remote = [s for s in update_steps(emulated_off)[0] if s.kind == "remote"]
    for q in ipus:
        mine = [s for s in remote if s.ipus == (q,)]
        link = sum(cost.remote_cycles(s.remote_bytes, target) for s in mine)
        assert mine and optimizer_cycles(numpy_off, q) - optimizer_cycles(numpy_on, q) == link
        assert sum(s.cycles for s in mine) == link + len(mine) * cost.sync_cycles(target)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_both_runners_cost_the_offloaded_state_at_streaming_memory_s_rate(name):
    make, states = OPTIMIZERS[name]
    (_, np_on), (_, np_off), (_, emu_off) = (
        run(make, e, o) for e, o in ((False, False), (False, True), (True, True)))
    copies_agree(np_on, np_off, emu_off, range(3), TARGET)
    assert np_off.host_bytes == 4 * states * sum(STAGE_FLOATS)  # still counted off chip


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_losses_weights_and_state_equal_on_chip_and_offloaded(name):
    make, _ = OPTIMIZERS[name]
    (p_np, r_np), (p_on, r_on), (p_off, r_off) = (
        run(make, e, o) for e, o in ((False, True), (True, False), (True, True)))
    np.testing.assert_array_equal(r_off.losses, r_on.losses)  # bit for bit
    for k in p_on.params:
        np.testing.assert_array_equal(p_off.params[k], p_on.params[k], err_msg=k)
        np.testing.assert_allclose(p_off.params[k], p_np.params[k], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(r_off.losses, r_np.losses, rtol=1e-4, atol=1e-6)
    for key, st in p_on.optimizer.state.items():  # the state read back from Streaming Memory
        got = p_off.optimizer.state[key]
        for s in (("buf",) if name == "momentum" else ("m", "v")):
            a, b = (st, got) if name == "momentum" else (st[s], got[s])
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a), err_msg=f"{key} {s}")


def test_front_ends_offload_as_graphcore_defaults_say():
    """TF's default (None) offloads a training pipeline; PopTorch's is on chip unless
    ``useOnChipStorage(False)`` (``offload_optimizer_state=True``)."""
    make = OPTIMIZERS["momentum"][0]
    tf_default, _ = run(make, True, None)
    assert len(emulation(tf_default).graph.remote_buffers) == 3

    def torch(offload):
        blocks = [Block("a", nn.Dense(6, 8, rng=1), nn.ReLU(), ipu_id=0),
                  Block("b", nn.Dense(8, 8, rng=2), nn.ReLU(), ipu_id=1),
                  Block("c", nn.Dense(8, 3, rng=3), ipu_id=2)]
        m = training_model(blocks, nn.SoftmaxCrossEntropy(), make(), gradient_accumulation=6,
                           target=TARGET, emulate=True, **offload)
        m.run(*data(12))
        return emulation(m).graph.remote_buffers

    assert torch({}) == {}
    assert len(torch({"offload_optimizer_state": True})) == 3


def test_replicated_sharded_offloaded_state_trains_as_the_numpy_runner():
    """RTS shards only offloaded state (TF): each replica's shard in its own buffers."""
    target = ipu.IPUModel(num_ipus=6, tiles_per_ipu=4).create_device().target
    x, y = data(144)
    out = []
    for emulate in (False, True):
        p = pipeline(stages(), None, gradient_accumulation_count=6,
                     optimizer=optim.Adam(0.01), loss=nn.SoftmaxCrossEntropy(),
                     target=target, repeat_count=2, replication_factor=2,
                     replicated_optimizer_state_sharding=True, emulate=emulate)
        out.append((p, p.run(x, y)))
    (pa, a), (pb, b) = out
    remote = [s for s in update_steps(b)[0] if s.kind == "remote"]
    for q in range(3):  # replica 0's shards: the same buffers in both runners
        mine = [s for s in remote if s.ipus == (q,)]
        span = next(s for s in a.timeline if s.kind == "optimizer" and s.ipu == q)
        assert span.bytes == sum(s.remote_bytes for s in mine) // 2  # each in, then out
    np.testing.assert_allclose(b.losses, a.losses, rtol=1e-4, atol=1e-6)
    for k in pa.params:
        np.testing.assert_allclose(pb.params[k], pa.params[k], rtol=1e-4, atol=1e-6)
    assert emulation(pb).engine.trace.memory.streaming_memory == 4 * 2 * sum(STAGE_FLOATS)


def test_keras_offloads_by_default_in_a_pipeline():
    """A pipelined Keras model passes ``offload_weight_update_variables`` (default None) to
    ``pipelining_ops.pipeline``, which then offloads: the emulated fit copies the Momentum
    state to and from Streaming Memory at every update."""
    from tests.test_keras import MB, data, sequential  # noqa: PLC0415

    m = sequential(emulate=True)
    m.fit(*data(8 * MB, seed=11), batch_size=MB, epochs=1, verbose=0)
    remote = [s for s in m.last_result.trace.executed_steps() if s.kind == "remote"]
    assert remote and all(s.remote_bytes > 0 for s in remote)
    assert m.last_result.trace.memory.streaming_memory > 0
