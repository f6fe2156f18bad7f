"""cost.py is the one cost model: its constants move the emulator and the runner alike."""

import math

import numpy as np
import pytest

import ipukit as ipu
from ipukit import cost
from ipukit.parallel import nn, optim, pipeline, sharded


def _inter_ipu_copy_cycles() -> int:
    """Exchange cycles of an emulated Copy of 4000 bytes from IPU 0 to IPU 1."""
    t = ipu.IPUModel(num_ipus=2, tiles_per_ipu=1).create_device().target
    g = ipu.Graph(t)
    a, b = g.add_variable(ipu.FLOAT, [1000], "a"), g.add_variable(ipu.FLOAT, [1000], "b")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 1)
    eng = ipu.Engine(g, ipu.Copy(a, b))
    eng.load(ipu.Device(t))
    eng.run()
    return eng.trace.executed_steps()[-1].exchange_cycles


def _runner_link_durations() -> list:
    p = pipeline([[nn.Dense(4, 8, rng=1)], [nn.Dense(8, 3, rng=2)]],
                 gradient_accumulation_count=4, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy())
    rng = np.random.default_rng(0)
    r = p.run(rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20))
    return sorted({(s.bytes, s.duration) for s in r.timeline if s.kind == "link"})


def test_one_constant_moves_the_emulator_and_the_runner(monkeypatch):
    copy_before, links_before = _inter_ipu_copy_cycles(), _runner_link_durations()
    clock = ipu.IPUModel().create_device().target.clock_hz
    # 4000 bytes on one tile: 1000 cycles of exchange, plus the IPU-Link
    assert copy_before == 1000 + math.ceil(4000 / (cost.IPU_LINK_BYTES_PER_SECOND / clock))
    assert links_before and all(d == math.ceil(b / (cost.IPU_LINK_BYTES_PER_SECOND / clock))
                                for b, d in links_before)
    monkeypatch.setattr(cost, "IPU_LINK_BYTES_PER_SECOND", cost.IPU_LINK_BYTES_PER_SECOND / 4)
    copy_after, links_after = _inter_ipu_copy_cycles(), _runner_link_durations()
    assert copy_after == 1000 + math.ceil(4000 / (cost.IPU_LINK_BYTES_PER_SECOND / clock))
    assert copy_after > copy_before
    assert [b for b, _ in links_after] == [b for b, _ in links_before]
    assert all(d == math.ceil(b / (cost.IPU_LINK_BYTES_PER_SECOND / clock))
               for b, d in links_after)
    assert all(a > b for (_, a), (_, b) in zip(links_after, links_before))


def test_target_reads_its_rates_from_cost(monkeypatch):
    t = ipu.IPUModel("ipu2", num_ipus=4).create_device().target
    assert t.global_sync_cycles == cost.global_sync_cycles(t) == math.ceil(15e-9 * 1.33e9 * 4)
    monkeypatch.setattr(cost, "HOST_SYNC_SECONDS", 20e-6)
    assert t.host_sync_cycles == 26_600


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_ring_collectives(ranks):
    n = 1000
    # all-reduce = reduce-scatter + all-gather: 2(R-1) steps of n/R bytes each
    assert cost.ring_steps("allreduce", ranks) == 2 * (ranks - 1)
    assert cost.ring_steps("reducescatter", ranks) == ranks - 1
    assert cost.ring_bytes("allreduce", n, ranks) == math.ceil(2 * (ranks - 1) * n / ranks)
    assert cost.ring_bytes("allgather", n, ranks) == math.ceil((ranks - 1) * n / ranks)


@pytest.mark.parametrize("version", ["ipu1", "ipu2", "bow"])
@pytest.mark.parametrize("kind,steps", [("allreduce", 2), ("reducescatter", 1),
                                        ("allgather", 1)])
@pytest.mark.parametrize("ranks,nbytes", [(2, 8), (4, 1024), (8, 4_000_000), (3, 1001)])
def test_ring_cycles_are_bandwidth_plus_steps_times_latency(version, kind, steps, ranks,
                                                            nbytes):
    t = ipu.IPUModel(version, num_ipus=ranks).create_device().target
    link = cost.IPU_LINK_BYTES_PER_SECOND / t.clock_hz
    latency = math.ceil(2 * 15e-9 * t.clock_hz)  # one hop's sync, there and back
    assert cost.ring_step_cycles(t) == latency == {"ipu1": 48, "ipu2": 40, "bow": 56}[version]
    sent = math.ceil(steps * (ranks - 1) * nbytes / ranks)
    bandwidth = math.ceil(sent / link)
    assert cost.ring_cycles(kind, nbytes, ranks, t) == bandwidth + steps * (ranks - 1) * latency
    assert cost.CostModel.from_target(t).ring(kind, nbytes, ranks) == bandwidth + steps * (
        ranks - 1) * latency
    assert cost.ring_cycles(kind, nbytes, 1, t) == 0


def test_small_collectives_are_latency_bound():
    t = ipu.IPUModel("ipu2", num_ipus=8).create_device().target
    small, large = (cost.ring_cycles("allreduce", n, 8, t) for n in (64, 64_000_000))
    latency = 14 * 40  # 2(R-1) steps of 40 cycles
    assert latency / small > 0.9 and latency / large < 0.001


def test_unknown_ring_collective_is_named():
    with pytest.raises(ipu.IpuError, match="unknown ring collective 'broadcast'"):
        cost.ring_steps("broadcast", 4)


def _replicated_allreduce_spans() -> list:
    p = pipeline([[nn.Dense(4, 8, rng=1)], [nn.Dense(8, 3, rng=2)]],
                 gradient_accumulation_count=4, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), replication_factor=4)
    rng = np.random.default_rng(0)
    r = p.run(rng.normal(size=(32, 4)).astype(np.float32), rng.integers(0, 3, 32))
    return sorted({(s.bytes, s.duration) for s in r.timeline if s.kind == "allreduce"})


def _sharded_allreduce_duration() -> int:
    log = sharded.CollectiveLog(4)
    log.all_reduce([np.zeros(256, np.float32)] * 4, "max", "m")
    assert {r.bytes for r in log.records} == {1536}  # 2(S-1)/S x 1,024 bytes
    return log.records[0].duration


def test_the_ring_step_latency_moves_replicas_and_sharded_collectives(monkeypatch):
    clock = ipu.IPUModel().create_device().target.clock_hz
    link = cost.IPU_LINK_BYTES_PER_SECOND / clock

    def ring(nbytes, ranks, seconds):  # 2(R-1) steps of latency + the bytes, by hand
        return 2 * (ranks - 1) * math.ceil(seconds * clock) + math.ceil(nbytes / link)

    before = (_replicated_allreduce_spans(), _sharded_allreduce_duration())
    assert before[1] == ring(1536, 4, 30e-9) == 6 * 40 + 151
    assert before[0] and all(d == ring(b, 4, 30e-9) for b, d in before[0])
    monkeypatch.setattr(cost, "RING_STEP_SECONDS", 1e-6)  # 1 µs a step
    after = (_replicated_allreduce_spans(), _sharded_allreduce_duration())
    assert after[1] == ring(1536, 4, 1e-6) == 6 * 1330 + 151
    assert [b for b, _ in after[0]] == [b for b, _ in before[0]]
    assert all(d == ring(b, 4, 1e-6) for b, d in after[0])


def test_array_and_scalar_rates_agree():
    t = ipu.IPUModel(tiles_per_ipu=4).create_device().target
    per_tile = np.array([0, 1, 4, 5, 4001])
    assert cost.exchange_cycles(per_tile, t).tolist() == [0, 1, 1, 2, 1001]
    assert [cost.exchange_cycles(int(b), t) for b in per_tile] == [0, 1, 1, 2, 1001]
    assert cost.copy_cycles(np.array([0, 9])).tolist() == [0, 2]
    assert cost.flops_cycles(4 * 32 * 10 + 1, t) == 11
