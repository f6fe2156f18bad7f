"""ipukit.host: infeed/outfeed queues, on-device loops, the host-link cost, benchmarking."""

import doctest
import json
import math
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit import host
from ipukit.cost import (
    HOST_LINK_BYTES_PER_CYCLE,
    HOST_LINK_BYTES_PER_SECOND,
    HOST_SYNC_SECONDS,
    SYNC_CYCLES,
)
from ipukit.host import InfeedQueue, OutfeedMode, OutfeedQueue, loops
from ipukit.target import PRESETS


class AddSum(ipu.Vertex):
    """total += sum(x)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    total = ipu.InOut(ipu.FLOAT)

    def compute(self):
        self.total[...] += self.x.sum(axis=-1)


def graph(tiles=4, version="ipu2"):
    dev = ipu.IPUModel(version, tiles_per_ipu=tiles).create_device()
    return dev, ipu.Graph(dev.target)


def engine(g, prog, dev, *queues):
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    for q in queues:
        q.connect(eng)
    return eng


def accumulator(data, iterations, runs, *, tiles=4, version="ipu2", spread=False,
                mode=None):
    """Sum each row of ``data`` into ``total`` and outfeed the running total: ``runs``
    Engine.run calls of ``loops.repeat(iterations, ...)``."""
    dev, g = graph(tiles, version)
    infeed, outfeed = InfeedQueue(data), OutfeedQueue(mode)
    total = g.add_variable(ipu.FLOAT, [1], "total")
    g.set_tile_mapping(total, 0)
    infeed.bind(g, tile=None if spread else 0)

    def body(total, x):
        cs = g.add_compute_set("accumulate")
        g.add_vertex(cs, AddSum, {"x": x, "total": total[0]}, tile=0)
        return [ipu.Execute(cs), outfeed.enqueue(total)]

    eng = engine(g, loops.repeat(iterations, body, [total], infeed), dev, infeed, outfeed)
    for _ in range(runs):
        eng.run()
    return eng, infeed, outfeed


def test_docstring_example_runs():
    assert doctest.testmod(host).failed == 0


# -- the host link in the cost model ---------------------------------------------------------
def model_cycles(version, k, tiles, spread):
    """H (one Engine.run's host sync, the target's named constant, checked by hand below)
    and B (one accumulator step, from the constants)."""
    clock = PRESETS[version][2]
    # bytes per cycle, host -> IPU: 6 on ipu1/ipu2 (the IPUModel's), a quarter of a
    # Bow-2000's 100 GbE on bow
    link = HOST_LINK_BYTES_PER_CYCLE[version] or HOST_LINK_BYTES_PER_SECOND / clock
    H = ipu.IPUModel(version).create_device().target.host_sync_cycles
    per_tile = k // tiles if spread else k  # floats of x each tile receives from the host
    stream_in = SYNC_CYCLES + max(per_tile, math.ceil(4 * k / link))  # 4 B/cycle per tile
    fetch = k - per_tile if spread else 0  # floats of x tile 0 fetches from other tiles
    compute = SYNC_CYCLES + fetch + 6 * (10 + k + 1)  # 1 vertex: 6 x (10 + one per element)
    stream_out = SYNC_CYCLES + max(1, math.ceil(4 / link))
    return H, stream_in + compute + stream_out


@pytest.mark.parametrize("tiles, spread, step", [
    (4, False, (20 + 64) + (20 + 6 * 75) + 21),  # 64 floats to tile 0 at 4 B/cycle: 64
    # Spread over 16 tiles the PCIe link (6 B/cycle on ipu2) limits: ceil(256 / 6) = 43,
    # and tile 0 fetches the 60 floats the other tiles received.
    (16, True, (20 + 43) + (20 + 60 + 450) + 21)])
def test_one_step_costs_the_hand_computed_cycles(tiles, spread, step):
    """ipu2, one Engine.run of one accumulator step of 64 floats: the host sync (10 us at
    1.33 GHz) plus stream in, compute (6 workers x (10 + 64 + 1)) and stream out."""
    eng = accumulator(np.ones((1, 64), np.float32), 1, 1, tiles=tiles, spread=spread)[0]
    assert eng.trace.total_cycles == 13_300 + step
    assert model_cycles("ipu2", 64, tiles, spread) == (13_300, step)


def test_host_sync_cycles_by_hand():
    # HOST_SYNC_SECONDS = 10 us at 1.6, 1.33 and 1.85 GHz.
    assert HOST_SYNC_SECONDS == 10e-6
    assert {v: ipu.IPUModel(v).create_device().target.host_sync_cycles for v in PRESETS} == {
        "ipu1": 16_000, "ipu2": 13_300, "bow": 18_500}


@pytest.mark.parametrize("spread", [False, True])
def test_device_loop_vs_host_loop_ratio(spread):
    N, k, tiles = 100, 64, 16
    data = np.arange(N * k, dtype=np.float32).reshape(N, k)
    dev_eng, _, dev_out = accumulator(data, N, 1, tiles=tiles, spread=spread)
    host_eng, _, host_out = accumulator(data, 1, N, tiles=tiles, spread=spread)
    H, B = model_cycles("ipu2", k, tiles, spread)
    assert dev_eng.trace.total_cycles == H + N * B
    assert host_eng.trace.total_cycles == N * (H + B)
    ratio = host_eng.trace.total_cycles / dev_eng.trace.total_cycles
    assert ratio == pytest.approx(N * (H + B) / (H + N * B), rel=1e-15)
    assert ratio > 18  # about 1,387,500 / 70,800 cycles on one tile: far less on device
    # Same arithmetic either way: running totals of the row sums.
    expected = np.cumsum(data.sum(axis=1)).reshape(N, 1)
    np.testing.assert_array_equal(dev_out.dequeue(), expected)
    np.testing.assert_array_equal(host_out.dequeue(), expected)
    assert dev_eng.trace.num_runs == 1 and host_eng.trace.num_runs == N


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 12), per_tile=st.integers(1, 40),
       version=st.sampled_from(sorted(PRESETS)), spread=st.booleans())
def test_loop_cost_formula_property(n, per_tile, version, spread):
    tiles = 4
    k = per_tile * tiles
    data = np.ones((n, k), np.float32)
    H, B = model_cycles(version, k, tiles, spread)
    dev_eng = accumulator(data, n, 1, tiles=tiles, version=version, spread=spread)[0]
    host_eng = accumulator(data, 1, n, tiles=tiles, version=version, spread=spread)[0]
    assert (dev_eng.trace.total_cycles, host_eng.trace.total_cycles) == (H + n * B,
                                                                        n * (H + B))


def test_stream_copies_are_host_exchange_in_the_trace():
    eng = accumulator(np.ones((3, 8), np.float32), 3, 1, tiles=4, spread=True)[0]
    streams = [s for s in eng.trace.executed_steps() if s.kind == "stream"]
    assert [s.name for s in streams] == ["StreamCopy infeed -> infeed",
                                         "StreamCopy outfeed <- total"] * 3
    assert [s.host_bytes for s in streams[:2]] == [32, 4]
    np.testing.assert_array_equal(streams[0].tile_bytes_in, [8, 8, 8, 8])
    np.testing.assert_array_equal(streams[1].tile_bytes_out, [4, 0, 0, 0])
    kinds = [s.kind for s in eng.trace.executed_steps()]
    assert kinds.count("host") == 1 and eng.trace.executed_steps()[0].kind == "host"


# -- infeed ----------------------------------------------------------------------------------
def round_trip(dataset, iterations, **kw):
    """Infeed elements straight back out: what the device received, per iteration."""
    dev, g = graph()
    infeed, outfeed = InfeedQueue(dataset, **kw), OutfeedQueue()

    def body(*args, **kwargs):
        return outfeed.enqueue(kwargs if kwargs else args if len(args) > 1 else args[0])

    infeed.bind(g)
    eng = engine(g, loops.repeat(iterations, body, None, infeed), dev, infeed, outfeed)
    eng.run()
    return infeed, outfeed.dequeue()


def test_infeed_numpy_tuple_batched_drop_remainder():
    images = np.random.default_rng(0).random((10, 3, 2)).astype(np.float32)
    labels = np.arange(10, dtype=np.int32)
    infeed, (x, y) = round_trip((images, labels), 2, batch_size=4, drop_remainder=True)
    assert [t.shape for t in infeed.tensors] == [(4, 3, 2), (4,)]
    np.testing.assert_array_equal(x, images[:8].reshape(2, 4, 3, 2))
    np.testing.assert_array_equal(y, labels[:8].reshape(2, 4))
    assert infeed.num_dequeued == 2


def test_infeed_dict_elements_are_keyword_arguments():
    data = {"image": np.arange(12, dtype=np.float32).reshape(6, 2),
            "label": np.arange(6, dtype=np.int32)}
    seen = {}
    dev, g = graph()
    infeed, outfeed = InfeedQueue(data, batch_size=3), OutfeedQueue()
    infeed.bind(g)

    def body(image, label):
        seen.update(image=image.shape, label=label.shape)
        return outfeed.enqueue({"label": label, "image": image})

    engine(g, loops.repeat(2, body, [], infeed), dev, infeed, outfeed).run()
    assert seen == {"image": (3, 2), "label": (3,)}
    out = outfeed.dequeue()
    np.testing.assert_array_equal(out["image"], data["image"].reshape(2, 3, 2))
    np.testing.assert_array_equal(out["label"], data["label"].reshape(2, 3))


def test_infeed_python_iterable_types_as_tensorflow():
    def gen():
        for i in range(6):
            yield [float(i), 0.5], i  # Python floats -> float32, ints -> int32

    infeed, (x, y) = round_trip(gen(), 3, batch_size=2)
    assert [t.dtype for t in infeed.tensors] == [ipu.FLOAT, ipu.INT]
    np.testing.assert_array_equal(x[:, :, 0], [[0, 1], [2, 3], [4, 5]])
    np.testing.assert_array_equal(y, [[0, 1], [2, 3], [4, 5]])


def test_infeed_repeat_starts_new_passes():
    _, out = round_trip(np.array([1, 2, 3], np.int32), 7, repeat=True)
    np.testing.assert_array_equal(out, [1, 2, 3, 1, 2, 3, 1])


def test_infeed_spreads_over_tiles_or_one_tile():
    dev, g = graph(tiles=4)
    a = InfeedQueue(np.zeros((2, 8), np.float32), name="a").bind(g)
    b = InfeedQueue(np.zeros((2, 3), np.float32), name="b").bind(g, tile=2)
    assert [len(m) for m in g.get_tile_mapping(a)] == [1, 1, 1, 1]
    assert g.get_tile_mapping(b) == [[], [], [(0, 3)], []]


# -- outfeed ---------------------------------------------------------------------------------
def test_outfeed_all_returns_exactly_the_elements_since_the_last_read():
    data = np.arange(12, dtype=np.float32).reshape(6, 2)
    eng, _, out = accumulator(data, 3, 1)
    assert len(out) == 3 and out.num_enqueued == 3
    np.testing.assert_array_equal(out.dequeue(), [[1], [6], [15]])
    empty = out.dequeue()
    assert empty.shape == (0, 1) and empty.dtype == np.float32
    eng.run()
    assert [float(e[0]) for e in out] == [28, 45, 66]  # iteration consumes too
    assert len(out) == 0 and out.num_enqueued == 6


def test_outfeed_last_returns_only_the_latest_element():
    data = np.arange(12, dtype=np.float32).reshape(6, 2)
    eng, _, out = accumulator(data, 3, 1, mode=OutfeedMode.LAST)
    np.testing.assert_array_equal(out.dequeue(), [15])
    np.testing.assert_array_equal(out.dequeue(), [15])  # LAST keeps it
    eng.run()
    assert len(out) == 1 and [e.tolist() for e in out] == [[66.0]]


def test_outfeed_readable_while_a_run_is_in_progress():
    """A reader thread sees the elements enqueued so far while Engine.run is mid-loop."""
    reached, go = threading.Event(), threading.Event()

    def rows():
        for i in range(4):
            if i == 2:  # the device asks for batch 2: two results are out already
                reached.set()
                assert go.wait(10)
            yield np.full(2, i, np.float32)

    dev, g = graph()
    total = g.add_variable(ipu.FLOAT, [1], "total")
    g.set_tile_mapping(total, 0)
    infeed, outfeed = InfeedQueue(rows()), OutfeedQueue()
    infeed.bind(g, tile=0)

    def body(total, x):
        cs = g.add_compute_set("accumulate")
        g.add_vertex(cs, AddSum, {"x": x, "total": total[0]}, tile=0)
        return [ipu.Execute(cs), outfeed.enqueue(total)]

    eng = engine(g, loops.repeat(4, body, [total], infeed), dev, infeed, outfeed)
    run = threading.Thread(target=eng.run)
    run.start()
    try:
        assert reached.wait(10)
        so_far = [float(e[0]) for e in outfeed]
        assert run.is_alive()
    finally:
        go.set()
        run.join(10)
    assert so_far == [0.0, 2.0]
    assert [float(e[0]) for e in outfeed] == [6.0, 12.0]


# -- errors ----------------------------------------------------------------------------------
def test_non_dividing_numpy_dataset_names_the_numbers():
    with pytest.raises(ipu.IpuError, match=r"10 elements.*batch_size 4.*10 = 2 x 4 \+ 2.*"
                                           r"drop_remainder=True.*last 2"):
        InfeedQueue(np.zeros((10, 3), np.float32), batch_size=4)
    with pytest.raises(ipu.IpuError, match="7 elements, which batch_size 2"):
        InfeedQueue([np.float32(i) for i in range(7)], batch_size=2)
    with pytest.raises(ipu.IpuError, match="fewer than one batch of 8"):
        InfeedQueue(np.zeros((5, 3), np.float32), batch_size=8, drop_remainder=True)


def test_non_dividing_generator_fails_at_the_short_batch():
    infeed = InfeedQueue((np.float32(i) for i in range(5)), batch_size=2)
    dev, g = graph()
    outfeed = OutfeedQueue()
    infeed.bind(g)
    eng = engine(g, loops.repeat(3, outfeed.enqueue, None, infeed), dev, infeed, outfeed)
    with pytest.raises(ipu.IpuError, match=r"5 elements.*5 = 2 x 2 \+ 1"):
        eng.run()
    np.testing.assert_array_equal(outfeed.dequeue(), [[0, 1], [2, 3]])


def test_dataset_running_out():
    infeed = InfeedQueue(np.zeros((10, 2), np.float32), batch_size=4, drop_remainder=True)
    dev, g = graph()
    infeed.bind(g)
    eng = engine(g, ipu.Repeat(3, infeed.dequeue()), dev, infeed)
    with pytest.raises(ipu.StreamError, match="ran out of data after 2 batch"):
        eng.run()
    with pytest.raises(ipu.IpuError, match="can be read again"):
        InfeedQueue(iter([1, 2]), repeat=True)


def test_outfeed_read_before_any_enqueue():
    out = OutfeedQueue(name="losses")
    with pytest.raises(ipu.StreamError, match="'losses' was read before any enqueue.*"
                                              "outfeed.enqueue"):
        out.dequeue()
    dev, g = graph()
    v = g.add_variable(ipu.FLOAT, [2], "v")
    g.set_tile_mapping(v, 0)
    prog = out.enqueue(v)
    engine(g, [prog, ipu.Sequence()], dev, out).run(1)  # ran, but not the enqueue
    for read in (out.dequeue, lambda: list(out)):
        with pytest.raises(ipu.StreamError, match="nothing has been enqueued yet"):
            read()
    with pytest.raises(ipu.IpuError, match="only be enqueued once"):
        out.enqueue(v)


def test_bad_arguments():
    with pytest.raises(ipu.IpuError, match="outfeed_mode must be"):
        OutfeedQueue("all")
    with pytest.raises(ipu.IpuError, match="batch_size must be a positive int"):
        InfeedQueue(np.zeros(4, np.float32), batch_size=0)
    with pytest.raises(ipu.IpuError, match="common first axis"):
        InfeedQueue((np.zeros(4, np.float32), np.zeros(5, np.int32)))
    with pytest.raises(ipu.IpuError, match="needs a NumPy array"):
        InfeedQueue(3)
    _, g = graph()
    with pytest.raises(ipu.IpuError, match="'infeed/0' of infeed 'infeed' has type float64"):
        InfeedQueue((np.zeros(4), np.zeros(4, np.int32))).bind(g)
    with pytest.raises(ipu.IpuError, match="enqueue needs a Tensor"):
        OutfeedQueue().enqueue([np.zeros(3)])
    with pytest.raises(ipu.IpuError, match="not bound to a graph"):
        InfeedQueue(np.zeros(4, np.float32)).dequeue()
    InfeedQueue(np.zeros(4, np.float32)).bind(g)
    with pytest.raises(ipu.StreamError, match="already has a stream named 'infeed'.*name="):
        InfeedQueue(np.zeros(4, np.float32)).bind(g)


def test_inconsistent_elements():
    for elements, match in (
            ([(np.float32(1), np.int32(2)), np.float32(3)],
             r"element 1 of infeed 'infeed' has components None, but the first .* \(0, 1\)"),
            ([np.zeros(2, np.float32), np.zeros(3, np.float32)],
             r"batch 1 .* shape \(3,\) and type float32, but the device tensor is float \(2,\)")):
        dev, g = graph()
        infeed = InfeedQueue(iter(elements))
        infeed.bind(g)
        eng = engine(g, ipu.Repeat(2, infeed.dequeue()), dev, infeed)
        with pytest.raises(ipu.IpuError, match=match):
            eng.run()
    ragged = InfeedQueue(iter([np.zeros(2, np.float32), np.zeros(3, np.float32)]), 2)
    with pytest.raises(ipu.IpuError, match=r"elements 0..1 .* cannot form one batch.*"
                                           r"\(2,\).*\(3,\)"):
        ragged.bind(graph()[1])


def test_loops_repeat_errors():
    _, g = graph()
    v = g.add_variable(ipu.FLOAT, [2], "v")
    with pytest.raises(ipu.ProgramError, match="body must return the Program"):
        loops.repeat(2, lambda v: None, [v])
    with pytest.raises(ipu.IpuError, match="cannot tell which graph"):
        loops.repeat(2, lambda x: ipu.Sequence(), None, InfeedQueue(np.zeros(4, np.float32)))
    with pytest.raises(ipu.ProgramError, match="non-negative"):
        loops.repeat(-1, lambda v: ipu.Sequence(), v)


def test_loops_repeat_binds_the_infeed_to_the_inputs_graph():
    _, g = graph()
    v = g.add_variable(ipu.FLOAT, [2], "v")
    infeed = InfeedQueue(np.zeros((3, 2), np.float32))
    prog = loops.repeat(5, lambda v, x: ipu.Copy(x, v), v, infeed)
    assert isinstance(prog, ipu.Repeat) and prog.count == 5
    assert infeed.tensors.graph is g and infeed.tensors.shape == (2,)


# -- dataset benchmarking ---------------------------------------------------------------------
def test_benchmark_dataset_counts_elements_and_bytes():
    images = np.zeros((100, 28, 28), np.float32)
    labels = np.zeros(100, np.int32)
    infeed = InfeedQueue((images, labels), batch_size=10)
    r = host.benchmark_dataset(infeed, 3, 10, print_stats=False)
    assert r.bytes_per_element == 10 * (28 * 28 * 4 + 4)
    assert [e["elements_processed"] for e in r.epochs] == [10, 10, 10]
    assert [e["total_bytes_processed"] for e in r.epochs] == [10 * r.bytes_per_element] * 3
    assert r.elements == 30
    e = r.epochs[0]
    assert e["elements_per_second"] == pytest.approx(10 / e["time_elapsed"])
    assert e["bandwidth"] == pytest.approx(e["elements_per_second"] * r.bytes_per_element / 1e9)
    assert json.loads(r.to_json())["epochs"][2]["elements_processed"] == 10
    assert r.bytes_per_second == pytest.approx(r.elements_per_second * r.bytes_per_element)
    assert set(r.rates) == {"input pipeline", "host link"}
    assert r.rates["host link"] == HOST_LINK_BYTES_PER_SECOND / r.bytes_per_element
    assert HOST_LINK_BYTES_PER_SECOND == 100e9 / 8 / 4  # a Bow IPU's share of 100 GbE


def test_benchmark_dataset_charges_the_host_link_of_the_target_given():
    # the ipu2 preset's host link: the IPUModel's 6 B/cycle at 1.33 GHz, 7.98 GB/s
    t = ipu.IPUModel("ipu2", tiles_per_ipu=4).create_device().target
    r = host.benchmark_dataset(np.zeros((8, 100), np.float32), 1, 4, target=t,
                               print_stats=False)
    assert r.bytes_per_element == 400
    assert r.rates["host link"] == pytest.approx(6.0 * 1.33e9 / 400)
    with pytest.raises(ipu.IpuError, match="target must be an ipu Target"):
        host.benchmark_dataset(np.zeros((8, 100), np.float32), 1, 4, target="ipu2")


def test_benchmark_dataset_finds_the_bottleneck(capsys):
    def slow():
        while True:
            time.sleep(0.002)  # an input pipeline of at most 500 elements/s
            yield np.zeros(4, np.float32)

    r = host.benchmark_dataset(slow(), 2, 5, ipu_elements_per_second=1e6)
    assert r.elements_per_second < 500 and r.bottleneck == "input pipeline"
    assert "bottleneck: input pipeline" in capsys.readouterr().out
    fast = host.benchmark_dataset(np.zeros((50, 4), np.float32), 2, 50,
                                  ipu_elements_per_second=1.0, print_stats=False)
    assert fast.bottleneck == "IPU"
    # A pipeline at 10^6 elements/s of 1 MB each outruns a Bow IPU's share of 100 GbE
    # (3.125 GB/s: 3,125 elements/s).
    link = host.DatasetBenchmark(({"elements_processed": 1000, "time_elapsed": 1e-3},),
                                 10**6, ipu_elements_per_second=1e5)
    assert link.rates["host link"] == 3_125 and link.bottleneck == "host link"


def test_benchmark_with_the_simulated_ipu_rate():
    data = np.ones((20, 64), np.float32)
    eng = accumulator(data, 20, 1, tiles=16)[0]
    rate = host.simulated_throughput(eng.trace, 20)
    assert rate == 20 * PRESETS["ipu2"][2] / eng.trace.total_cycles
    r = host.benchmark_dataset(data, 1, 20, ipu_elements_per_second=rate, print_stats=False)
    assert r.rates["IPU"] == rate


def test_benchmark_dataset_errors():
    with pytest.raises(ipu.IpuError, match="epoch 1 got only 2 of elements_per_epoch=3"):
        host.benchmark_dataset(iter(np.zeros((5, 2), np.float32)), 2, 3, print_stats=False)
    with pytest.raises(ipu.IpuError, match="number_of_epochs must be a positive int"):
        host.benchmark_dataset(np.zeros(3, np.float32), 0, 1)
