"""Issue 12: every learner mistake in the emulator gets a clear IpuError (regression tests)."""

import time

import numpy as np
import pytest

import ipukit as ipu
from tests.helpers import SumVertex, small


def loaded(dtype=ipu.INT, n=4):
    dev, g = small(tiles=2)
    v = g.add_variable(dtype, [n], "v")
    g.set_tile_mapping(v, 0)
    g.create_host_write("w", v)
    g.create_host_read("r", v)
    eng = ipu.Engine(g, ipu.Sequence())
    eng.load(dev)
    return eng


@pytest.mark.parametrize("dtype, value", [
    (ipu.INT, np.inf), (ipu.INT, -np.inf), (ipu.INT, np.nan), (ipu.INT, 2**31),
    (ipu.INT, -2**31 - 1), (ipu.UNSIGNED_INT, -1), (ipu.UNSIGNED_INT, 2**32),
    (ipu.INT, 2**80),
])
def test_add_constant_out_of_range_names_the_constant(dtype, value):
    _, g = small()
    with pytest.raises(ipu.IpuError, match=r"constant 'c'.*range"):
        g.add_constant(dtype, [1], [value], "c")


def test_add_constant_at_the_edges_of_the_range_is_exact():
    _, g = small()
    c = g.add_constant(ipu.INT, [2], [2**31 - 1, -2**31], "c")
    u = g.add_constant(ipu.UNSIGNED_INT, [1], [2**32 - 1], "u")
    assert g.pools[ipu.INT].variables[0].values.tolist() == [2**31 - 1, -2**31]
    assert c.shape == (2,) and u.shape == (1,)
    assert g.pools[ipu.UNSIGNED_INT].variables[0].values.tolist() == [2**32 - 1]


@pytest.mark.parametrize("value", [np.inf, 2**40, np.array([2**40] * 4), -2**33])
def test_write_tensor_out_of_range_is_a_stream_error(value):
    eng = loaded()
    with pytest.raises(ipu.StreamError, match=r"write_tensor\('w'\).*'v'.*range"):
        eng.write_tensor("w", np.broadcast_to(value, (4,)))


def test_write_tensor_in_range_round_trips():
    eng = loaded()
    eng.write_tensor("w", [2**31 - 1, -2**31, 0, 7])
    assert eng.read_tensor("r").tolist() == [2**31 - 1, -2**31, 0, 7]


def test_connecting_a_field_twice_is_refused():
    _, g = small()
    x = g.add_variable(ipu.FLOAT, [2, 4], "x")
    out = g.add_variable(ipu.FLOAT, [2], "out")
    cs = g.add_compute_set("cs")
    v = g.add_vertex(cs, SumVertex, {"x": x[0], "out": out[0]})
    with pytest.raises(ipu.GraphConnectionError, match=r"field 'x' of vertex 0.*already.*"
                       r"graph_connection_error.*[Kk]it convention"):
        g.connect(v["x"], x[1])


@pytest.mark.parametrize("how", ["create_host_write", "create_host_read"])
def test_two_host_handles_with_one_name_are_refused(how):
    _, g = small()
    a = g.add_variable(ipu.FLOAT, [2], "a")
    b = g.add_variable(ipu.FLOAT, [2], "b")
    getattr(g, how)("h", a)
    with pytest.raises(ipu.StreamError, match=r"'h'.*already.*'a'"):
        getattr(g, how)("h", b)


def stream_engine(to_device, dtype=ipu.FLOAT):
    dev, g = small(tiles=1)
    v = g.add_variable(dtype, [4], "v")
    g.set_tile_mapping(v, 0)
    if to_device:
        s = g.add_host_to_device_fifo("s", dtype, 4)
        prog = ipu.Copy(s, v)
    else:
        s = g.add_device_to_host_fifo("s", dtype, 4)
        prog = ipu.Copy(v, s)
    g.create_host_write("w", v)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    return eng


def test_float_device_to_host_stream_into_int_buffer_is_refused():
    eng = stream_engine(False)
    with pytest.raises(ipu.StreamError, match=r"'s'.*float.*int32"):
        eng.connect_stream("s", np.zeros(4, np.int32))


def test_float_device_to_host_stream_into_float64_buffer_works():
    eng = stream_engine(False)
    eng.write_tensor("w", [1.5, 2.5, -3.25, 4.0])
    buf = np.zeros(4, np.float64)
    eng.connect_stream("s", buf)
    eng.run()
    assert buf.tolist() == [1.5, 2.5, -3.25, 4.0]


def test_short_stream_buffer_is_circular_as_in_poplar():
    dev, g = small(tiles=1)
    v = g.add_variable(ipu.FLOAT, [4], "v")
    g.set_tile_mapping(v, 0)
    s = g.add_host_to_device_fifo("s", ipu.FLOAT, 4)
    g.create_host_read("r", v)
    eng = ipu.Engine(g, ipu.Copy(s, v))
    eng.load(dev)
    eng.connect_stream("s", np.array([1.0, 2.0, 3.0], np.float32))  # shorter than a copy
    eng.run()
    assert eng.read_tensor("r").tolist() == [1, 2, 3, 1]  # it wraps round, as in Poplar
    eng.run()
    assert eng.read_tensor("r").tolist() == [2, 3, 1, 2]


def test_many_readers_of_one_element_are_no_race():
    # Poplar compiles vertices of one compute set that only read a common region (the fix of
    # UoB-HPC/ipu-hpc-cookbook issue 2 turned overlapping InOut fields, a graph_cycle_error,
    # into Input fields); only a write meeting another vertex's access is refused.
    dev, g = small(tiles=2)
    x = g.add_variable(ipu.FLOAT, [4], "x")
    out = g.add_variable(ipu.FLOAT, [2], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 1)
    g.create_host_write("w", x)
    g.create_host_read("r", out)
    cs = g.add_compute_set("both read x")
    g.add_vertex(cs, SumVertex, {"x": x, "out": out[0]}, tile=0)
    g.add_vertex(cs, SumVertex, {"x": x[1:], "out": out[1]}, tile=1)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    eng.write_tensor("w", [1.0, 2.0, 4.0, 8.0])
    eng.run()
    assert eng.read_tensor("r").tolist() == [15.0, 14.0]


def test_connecting_a_stream_again_replaces_its_buffer_as_in_poplar():
    # Poplar accepts a second Engine::connectStream/connectStreamToCallback for one handle and
    # uses the new connection: PopART's Devicex::reconnectInputStreams re-connects every input
    # stream before each run (graphcore/popart willow/src/popx/devicex.cpp).
    dev, g = small(tiles=1)
    v = g.add_variable(ipu.FLOAT, [2], "v")
    g.set_tile_mapping(v, 0)
    s = g.add_host_to_device_fifo("s", ipu.FLOAT, 2)
    g.create_host_read("r", v)
    eng = ipu.Engine(g, ipu.Copy(s, v))
    eng.load(dev)
    eng.connect_stream("s", np.array([1.0, 2.0, 3.0, 4.0], np.float32))
    eng.run()
    assert eng.read_tensor("r").tolist() == [1, 2]
    eng.connect_stream("s", np.array([7.0, 8.0, 9.0, 10.0], np.float32))
    eng.run()  # the new buffer, from its start: not [3, 4], not [9, 10]
    assert eng.read_tensor("r").tolist() == [7, 8]
    eng.connect_stream_to_callback("s", lambda buf: buf.__setitem__(slice(None), [5.0, 6.0]))
    eng.run()
    assert eng.read_tensor("r").tolist() == [5, 6]


def test_a_stream_callback_that_raises_names_the_stream():
    eng = stream_engine(True)

    def cb(buf):
        raise ValueError("no more data")

    eng.connect_stream_to_callback("s", cb)
    with pytest.raises(ipu.StreamError, match=r"callback of stream 's'.*no more data"):
        eng.run()


def test_a_non_callable_stream_callback_is_refused():
    eng = stream_engine(True)
    with pytest.raises(ipu.StreamError, match=r"stream 's'.*callable"):
        eng.connect_stream_to_callback("s", np.zeros(4, np.float32))


def test_engine_of_none_is_an_ipu_error():
    with pytest.raises(ipu.IpuError, match="Engine needs a Graph"):
        ipu.Engine(None, [])


@pytest.mark.parametrize("bad", [[1, 2], [None], ["v"]])
def test_concat_of_non_tensors_is_an_ipu_error(bad):
    with pytest.raises(ipu.IpuError, match="concat needs Tensors"):
        ipu.concat(bad)


class Quitter(ipu.Vertex):
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        raise SystemExit(3)


def test_a_codelet_raising_system_exit_does_not_end_the_process():
    dev, g = small(tiles=1)
    out = g.add_variable(ipu.FLOAT, [1], "out")
    g.set_tile_mapping(out, 0)
    cs = g.add_compute_set("cs")
    g.add_vertex(cs, Quitter, {"out": out[0]}, tile=0)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    with pytest.raises(ipu.IpuError, match=r"Quitter.compute.*SystemExit"):
        eng.run()


class WholeSum(ipu.Vertex):
    """The mistake of issue 12: sums every vertex's x, not its own (no axis=-1)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.sum()


def sums_graph(cls, n=4, k=3):
    dev, g = small(tiles=n)
    x = g.add_constant(ipu.FLOAT, [n, k], np.arange(n * k), "x")
    out = g.add_variable(ipu.FLOAT, [n], "out")
    cs = g.add_compute_set("sums")
    for i in range(n):
        g.set_tile_mapping(x[i], i)
        g.set_tile_mapping(out[i], i)
        g.add_vertex(cs, cls, {"x": x[i], "out": out[i]}, tile=i)
    g.create_host_read("out", out)
    return dev, g, cs


def test_codelet_without_axis_is_detected_naming_codelet_and_field():
    dev, g, cs = sums_graph(WholeSum)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    with pytest.raises(ipu.CodeletError, match=r"WholeSum.*field 'out'.*axis=-1"):
        eng.run()


def test_the_axis_check_waits_for_data_that_tells():
    dev, g = small(tiles=4)
    x = g.add_variable(ipu.FLOAT, [4, 3], "x")
    out = g.add_variable(ipu.FLOAT, [4], "out")
    cs = g.add_compute_set("sums")
    for i in range(4):
        g.set_tile_mapping(x[i], i)
        g.set_tile_mapping(out[i], i)
        g.add_vertex(cs, WholeSum, {"x": x[i], "out": out[i]}, tile=i)
    g.create_host_write("x", x)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    eng.run()  # x is all zeros: alone and batched agree (0), which proves nothing
    eng.write_tensor("x", np.arange(12).reshape(4, 3))
    with pytest.raises(ipu.CodeletError, match="WholeSum"):
        eng.run()


def test_correct_codelet_passes_the_axis_check_and_gives_per_vertex_sums():
    dev, g, cs = sums_graph(SumVertex)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    eng.run()
    eng.run()
    assert eng.read_tensor("out").tolist() == [3, 12, 21, 30]


def counting_graph(count):
    dev, g = small(tiles=1)
    out = g.add_variable(ipu.FLOAT, [4], "out")
    g.set_tile_mapping(out, 0)
    cs = g.add_compute_set("cs")
    x = g.add_constant(ipu.FLOAT, [4], 1.0, "x")
    g.set_tile_mapping(x, 0)
    g.add_vertex(cs, SumVertex, {"x": x, "out": out[0]}, tile=0)
    return dev, g, ipu.Repeat(count, ipu.Execute(cs))


def test_a_huge_repeat_is_refused_up_front_with_the_option_to_allow_it():
    dev, g, prog = counting_graph(10**9)
    eng = ipu.Engine(g, prog)  # Poplar accepts the program; so does compile
    eng.load(dev)
    t0 = time.perf_counter()
    with pytest.raises(ipu.ProgramError,
                       match=r"1,000,000,000 steps.*debug.maxEmulatedSteps"):
        eng.run()
    assert time.perf_counter() - t0 < 5


def test_repeats_that_fit_alone_but_not_together_are_refused_before_anything_runs():
    dev, g, one = counting_graph(30)
    eng = ipu.Engine(g, ipu.Sequence(one, one), {"debug.maxEmulatedSteps": "40"})
    eng.load(dev)
    with pytest.raises(ipu.ProgramError, match=r"program 0 would emulate 60 steps.*'60'"):
        eng.run()
    assert eng.trace.num_runs == 0 and len(eng.trace) == 0


def test_the_step_option_lets_a_repeat_through():
    dev, g, prog = counting_graph(50)
    eng = ipu.Engine(g, prog, {"debug.maxEmulatedSteps": "40"})
    eng.load(dev)
    with pytest.raises(ipu.ProgramError, match="50 steps"):
        eng.run()
    eng = ipu.Engine(g, prog, {"debug.maxEmulatedSteps": 50})
    eng.load(dev)
    eng.run()
    assert eng.trace.num_runs == 1


@pytest.mark.parametrize("value", ["abc", "-1", 0, 2.5])
def test_a_bad_step_option_is_refused(value):
    _, g, prog = counting_graph(1)
    with pytest.raises(ipu.IpuError, match="debug.maxEmulatedSteps"):
        ipu.Engine(g, prog, {"debug.maxEmulatedSteps": value})


@pytest.mark.parametrize("body_steps, inner_repeat", [(1000, True), (5, False)])
def test_repeat_while_true_guard_counts_emulated_steps_not_iterations(body_steps,
                                                                     inner_repeat):
    dev, g = small(tiles=1)
    always = g.add_constant(ipu.BOOL, [1], [True], "always")
    g.set_tile_mapping(always, 0)
    out = g.add_variable(ipu.FLOAT, [4], "out")
    g.set_tile_mapping(out, 0)
    x = g.add_constant(ipu.FLOAT, [4], 1.0, "x")
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("cs")
    g.add_vertex(cs, SumVertex, {"x": x, "out": out[0]}, tile=0)
    heavy = (ipu.Repeat(body_steps, ipu.Execute(cs)) if inner_repeat
             else ipu.Sequence(*[ipu.Execute(cs)] * body_steps))
    eng = ipu.Engine(g, ipu.RepeatWhileTrue(ipu.Sequence(), always, heavy),
                     {"debug.maxEmulatedSteps": 20_000})
    eng.load(dev)
    t0 = time.perf_counter()
    with pytest.raises(ipu.ProgramError, match=r"2\d,\d{3}.*steps.*debug.maxEmulatedSteps"):
        eng.run()
    assert time.perf_counter() - t0 < 10
    assert 20_000 - body_steps <= len(eng.trace) - 1 <= 20_000 + body_steps


def test_numpy_ints_are_taken_wherever_a_count_is():
    from ipukit import host
    _, g = small()
    v = g.add_variable(ipu.FLOAT, [4, 4], "v")
    assert v.slice(1, 3, dim=np.int64(1)).shape == (4, 2)
    assert ipu.Repeat(np.int32(3), ipu.Sequence()).count == 3
    q = host.InfeedQueue({"x": np.arange(8.0)}, batch_size=np.int64(2))
    assert q.batch_size == 2 and type(q.batch_size) is int
    stats = host.benchmark_dataset(q, number_of_epochs=np.int64(1),
                                   elements_per_epoch=np.int64(2), print_stats=False)
    assert len(stats.epochs) == 1 and stats.elements == 2
