"""Issue 12's property: a random small graph and program with ONE injected learner mistake
gives an ``IpuError`` subclass whose message names the culprit; with no mistake, or one
Poplar accepts (a circular stream buffer, a codelet that is right for one vertex alone),
it gives NumPy's answer. The same for pipeline and sharding settings.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.parallel import nn, optim, pipeline, schedule, sharded


class Sum(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.sum(axis=-1)


class NoAxis(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.sum()  # the mistake: every vertex's x


class Quits(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        raise SystemExit(1)


class Case:
    """A graph of ``n`` Sum vertices (vertex i: out[i] = sum(x[i])) over ``tiles`` tiles."""

    def __init__(self, n, k, tiles, data):
        self.n, self.k, self.tiles, self.data = n, k, tiles, data
        self.dev = ipu.IPUModel(tiles_per_ipu=tiles).create_device()
        self.g = ipu.Graph(self.dev.target)
        self.cls, self.skip_map, self.skip_connect, self.vertex_tile = Sum, None, None, {}
        self.stream_buf = data.reshape(-1)
        self.prog_extra = []

    def build(self):
        g, n, k = self.g, self.n, self.k
        self.x = g.add_variable(ipu.FLOAT, [n, k], "x")
        self.out = g.add_variable(ipu.FLOAT, [n], "out")
        self.cs = g.add_compute_set("sums")
        for i in range(n):
            tile = i % self.tiles
            if self.skip_map != ("x", i):
                g.set_tile_mapping(self.x[i], tile)
            g.set_tile_mapping(self.out[i], tile)
            conn = {"x": self.x[i], "out": self.out[i]}
            if self.skip_connect == i:
                del conn["out"]
            v = g.add_vertex(self.cs, self.cls, conn)
            if self.vertex_tile.get(i, tile) is not None:
                g.set_tile_mapping(v, self.vertex_tile.get(i, tile))
        self.s_in = g.add_host_to_device_fifo("in", ipu.FLOAT, n * k)
        self.s_out = g.add_device_to_host_fifo("result", ipu.FLOAT, n)
        return ipu.Sequence(ipu.Copy(self.s_in, self.x), ipu.Execute(self.cs),
                            ipu.Copy(self.out, self.s_out), *self.prog_extra)

    def run(self, prog, options=None):
        eng = ipu.Engine(self.g, prog, options)
        eng.load(self.dev)
        eng.connect_stream("in", self.stream_buf)
        result = np.zeros(self.n, np.float32)
        eng.connect_stream("result", result)
        eng.run()
        return eng, result


def expect(error, *names):
    return error, names


# -- the mistakes: each takes the case and returns (error class, names) or None (no error)
def no_mistake(c, d):
    return None


def circular_buffer(c, d):  # Poplar: a shorter buffer wraps round
    cut = d.draw(st.integers(1, c.n * c.k))
    c.stream_buf = c.data.reshape(-1)[:cut].copy()
    idx = np.arange(c.n * c.k) % cut
    c.data = c.stream_buf[idx].reshape(c.n, c.k)
    return None


def no_axis(c, d):
    c.cls = NoAxis
    return None if c.n == 1 else expect(ipu.CodeletError, "NoAxis", "'out'", "axis=-1")


def unconnected(c, d):
    c.skip_connect = d.draw(st.integers(0, c.n - 1))
    return expect(ipu.GraphConnectionError, "'out'", f"vertex {c.skip_connect} ")


def unmapped_tensor(c, d):
    c.skip_map = ("x", d.draw(st.integers(0, c.n - 1)))
    return expect(ipu.TileMappingError, "'x'", "unmapped")


def unmapped_vertex(c, d):
    i = d.draw(st.integers(0, c.n - 1))
    c.vertex_tile[i] = None
    return expect(ipu.TileMappingError, f"vertex {i} ", "not mapped")


def tile_out_of_range(c, d):
    i = d.draw(st.integers(0, c.n - 1))
    c.vertex_tile[i] = c.tiles + d.draw(st.integers(0, 5))
    return expect(ipu.TileMappingError, f"tile {c.vertex_tile[i]}", "out of range")


def systemexit(c, d):
    c.cls = Quits
    return expect(ipu.CodeletError, "Quits", "SystemExit")


BUILD_MISTAKES = [no_mistake, no_mistake, circular_buffer, no_axis, unconnected,
                  unmapped_tensor, unmapped_vertex, tile_out_of_range, systemexit]


# -- mistakes made after the graph is built
def after_build(kind, c, d):
    g = c.g
    if kind == "mis-shaped":
        wide = g.add_variable(ipu.FLOAT, [d.draw(st.integers(2, 5))], "wide")
        v = g.add_vertex(c.cs, Sum, {"x": c.x[0]})
        return lambda: g.connect(v["out"], wide), expect(ipu.GraphConnectionError,
                                                         "'out'", "'wide'")
    if kind == "mis-typed":
        t = g.add_variable(ipu.INT, [1], "ints")
        v = g.add_vertex(c.cs, Sum, {"x": c.x[0]})
        return lambda: g.connect(v["out"], t[0]), expect(ipu.GraphConnectionError, "'out'", "ints")
    if kind == "connect twice":
        v = g.add_vertex(c.cs, Sum, {"x": c.x[0], "out": c.out[0]})
        return lambda: g.connect(v["x"], c.x[-1]), expect(ipu.GraphConnectionError,
                                                          "'x'", "already connected")
    if kind == "mixed graphs":
        other = ipu.Graph(c.dev.target).add_variable(ipu.FLOAT, [1], "alien")
        v = g.add_vertex(c.cs, Sum, {"x": c.x[0]})
        return (lambda: g.connect(v["out"], other[0]),
                expect(ipu.IpuError, "alien", "another graph"))
    if kind == "duplicate handle":
        g.create_host_read("h", c.out)
        return lambda: g.create_host_read("h", c.x), expect(ipu.StreamError, "'h'")
    if kind == "int constant":
        value = d.draw(st.sampled_from([np.inf, -np.inf, np.nan, 2**31, -2**31 - 1, 2**70]))
        return (lambda: g.add_constant(ipu.INT, [1], [value], "k"),
                expect(ipu.IpuError, "'k'", "range"))
    if kind == "stream direction":
        return lambda: ipu.Copy(c.s_out, c.x), expect(ipu.StreamError, "'result'")
    if kind == "concat":
        return lambda: ipu.concat([c.x, 3]), expect(ipu.IpuError, "concat", "3")
    if kind == "engine of None":
        return lambda: ipu.Engine(None, []), expect(ipu.IpuError, "Graph", "None")
    if kind == "race":
        g.add_vertex(c.cs, Sum, {"x": c.x[0], "out": c.out[0]}, tile=0)
        prog = ipu.Execute(c.cs)
        return lambda: ipu.Engine(g, prog), expect(ipu.ComputeSetRaceError, "'sums'",
                                                   "'out'")
    if kind == "out of memory":
        # each fits the chip (add_variable checks that by arithmetic), not both on tile 0
        big = g.add_variable(ipu.FLOAT, [c.dev.target.bytes_per_tile // 4 - 64], "big")
        extra = g.add_variable(ipu.FLOAT, [128], "extra")
        g.set_tile_mapping(big, 0)
        g.set_tile_mapping(extra, 0)
        prog = ipu.Sequence()
        strict = {"debug.allowOutOfMemory": "false"}  # the IPUModel runs on by default
        return lambda: ipu.Engine(g, prog, strict), expect(ipu.OutOfMemoryError, "tile 0",
                                                           "'big'")
    raise AssertionError(kind)


AFTER = ["mis-shaped", "mis-typed", "connect twice", "mixed graphs", "duplicate handle",
         "int constant", "stream direction", "concat", "engine of None", "race",
         "out of memory"]


# -- mistakes made with the loaded engine
def engine_mistake(kind, c, d, prog):
    if kind == "missing handle":
        eng = ipu.Engine(c.g, prog)
        eng.load(c.dev)
        return lambda: eng.read_tensor("nope"), expect(ipu.StreamError, "'nope'")
    if kind == "use before load":
        eng = ipu.Engine(c.g, prog)
        return lambda: eng.run(), expect(ipu.IpuError, "load")
    if kind == "int buffer":
        eng = ipu.Engine(c.g, prog)
        eng.load(c.dev)
        return (lambda: eng.connect_stream("result", np.zeros(c.n, np.int32)),
                expect(ipu.StreamError, "'result'", "int32"))
    if kind == "callback raises":
        eng = ipu.Engine(c.g, prog)
        eng.load(c.dev)
        eng.connect_stream("result", np.zeros(c.n, np.float32))

        def cb(buf):
            raise KeyError("oops")

        eng.connect_stream_to_callback("in", cb)
        return lambda: eng.run(), expect(ipu.StreamError, "'in'", "KeyError")
    if kind == "not callable":
        eng = ipu.Engine(c.g, prog)
        eng.load(c.dev)
        return (lambda: eng.connect_stream_to_callback("in", [1.0]),
                expect(ipu.StreamError, "'in'", "callable"))
    if kind == "huge repeat":
        count = d.draw(st.integers(10**7, 10**12))
        eng = ipu.Engine(c.g, ipu.Sequence(prog, ipu.Repeat(count, ipu.Execute(c.cs))))
        eng.load(c.dev)
        eng.connect_stream("in", c.stream_buf)
        eng.connect_stream("result", np.zeros(c.n, np.float32))
        return lambda: eng.run(), expect(ipu.ProgramError, "program 0 would emulate",
                                         "debug.maxEmulatedSteps")
    if kind == "write out of range":
        t = c.g.add_variable(ipu.INT, [2], "ints")
        c.g.set_tile_mapping(t, 0)
        c.g.create_host_write("w", t)
        eng = ipu.Engine(c.g, prog)
        eng.load(c.dev)
        value = d.draw(st.sampled_from([np.inf, 2**40, -2**33]))
        return lambda: eng.write_tensor("w", [value, 0]), expect(ipu.StreamError, "'ints'",
                                                                 "range")
    raise AssertionError(kind)


ENGINE = ["missing handle", "use before load", "int buffer", "callback raises",
          "not callable", "huge repeat", "write out of range"]


def check_error(action, error, names):
    t0 = time.perf_counter()
    with pytest.raises(error) as info:
        action()
    msg = str(info.value)
    assert all(name in msg for name in names), (names, msg)
    assert time.perf_counter() - t0 < 5


@settings(max_examples=150)
@given(st.data())
def test_one_mistake_is_named_or_the_answer_is_right(data):
    n = data.draw(st.integers(1, 6), label="vertices")
    k = data.draw(st.integers(1, 5), label="elements per vertex")
    tiles = data.draw(st.integers(1, 4), label="tiles")
    values = np.asarray(data.draw(st.lists(st.integers(-50, 50), min_size=n * k,
                                           max_size=n * k)), np.float32).reshape(n, k)
    c = Case(n, k, tiles, values)
    stage = data.draw(st.sampled_from(["build", "after", "engine"]), label="stage")
    if stage == "build":
        mistake = data.draw(st.sampled_from(BUILD_MISTAKES), label="mistake")
        outcome = mistake(c, data)
        if outcome is None:
            _, result = c.run(c.build())
            assert np.array_equal(result, c.data.sum(axis=-1)), (result, c.data)
            return
        error, names = outcome
        check_error(lambda: c.run(c.build()), error, names)
    elif stage == "after":
        c.build()
        kind = data.draw(st.sampled_from(AFTER), label="mistake")
        action, (error, names) = after_build(kind, c, data)
        check_error(action, error, names)
    else:
        prog = c.build()
        kind = data.draw(st.sampled_from(ENGINE), label="mistake")
        action, (error, names) = engine_mistake(kind, c, data, prog)
        check_error(action, error, names)


# -- model parallelism ----------------------------------------------------------------------
def bad_size():
    return st.one_of(st.integers(-5, 0), st.floats(0.5, 9.5).filter(lambda f: f % 1),
                     st.sampled_from(["4", None, True]))


SETTINGS = {
    "dense in": (bad_size(), lambda v: nn.Dense(v, 3), "in_features"),
    "dense out": (bad_size(), lambda v: nn.Dense(3, v), "out_features"),
    "conv kernel": (bad_size(), lambda v: nn.Conv2D(1, 2, v), "kernel_size"),
    "dtype": (st.sampled_from(["int8", "int32", "bool", "uint8"]),
              lambda v: nn.Dense(3, 3, dtype=v), "dtype"),
    "beta": (st.one_of(st.floats(1.0, 10.0), st.floats(-10.0, -1e-6)),
             lambda v: optim.Adam(betas=(v, 0.9)), "beta"),
    "lr": (st.one_of(st.floats(-10.0, -1e-6), st.just(float("nan"))),
           lambda v: optim.SGD(lr=v), "learning rate"),
    "optimizer": (st.sampled_from(["sgd", None, 0.1, optim.SGD]),
                  lambda v: tf(optimizer=v), "optimizer"),
    "loss": (st.sampled_from([nn.Dense(3, 3), nn.ReLU(), "ce"]),
             lambda v: tf(loss=v), "loss"),
    "device_mapping": (st.sampled_from([{0: 0, 1: 1}, {0, 1}, "01", 7.5]),
                       lambda v: tf(device_mapping=v), "device_mapping"),
    "accumulation dtype": (st.sampled_from(["int32", "bool", "int8"]),
                           lambda v: tf(gradient_accumulation_dtype=v),
                           "gradient_accumulation_dtype"),
    "accumulation count": (st.integers(1, 50).filter(lambda g: g % 4),
                           lambda v: tf(gradient_accumulation_count=v), "multiple of 4"),
    "schedule": (st.sampled_from(["zigzag", "", "pipedream"]),
                 lambda v: tf(pipeline_schedule=v), "schedule"),
    "duration": (st.floats(-100, -1e-3), lambda v: schedule("grouped", 2, 4).makespan(t_F=v),
                 "t_F"),
    "shard axis": (st.integers(2, 9), lambda v: sharded.shard(np.ones((4, 4)), 2, axis=v),
                   "axis"),
    "shards": (st.integers(-3, 1), lambda v: sharded.CollectiveLog(v), "at least 2"),
}


def tf(**kw):
    args = dict(device_mapping=[0, 1], gradient_accumulation_count=4,
                optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy())
    args.update(kw)
    return pipeline([[nn.Dense(4, 4)], [nn.Dense(4, 3, rng=1)]], **args)


@settings(max_examples=120)
@given(st.data())
def test_one_bad_model_parallel_setting_is_named(data):
    name = data.draw(st.sampled_from(sorted(SETTINGS)), label="setting")
    values, make, culprit = SETTINGS[name]
    value = data.draw(values, label="value")
    with pytest.raises(ipu.IpuError) as info:
        make(value)
    assert culprit in str(info.value), str(info.value)


@settings(max_examples=40)
@given(st.data())
def test_valid_model_parallel_settings_are_taken(data):
    """NumPy ints, any case of the schedule kind, tuples: Graphcore takes them, so do we."""
    cast = data.draw(st.sampled_from([int, np.int32, np.int64, np.uint8]))
    kind = data.draw(st.sampled_from(["grouped", "Grouped", "GROUPED", "sequential"]))
    g = 4 * data.draw(st.integers(1, 3))
    p = tf(device_mapping=data.draw(st.sampled_from([[0, 1], (0, 1), [cast(0), cast(1)]])),
           gradient_accumulation_count=cast(g), pipeline_schedule=kind)
    assert p.gradient_accumulation == g and p.schedule.kind == kind.lower()
    assert sharded.CollectiveLog(cast(2)).num_shards == 2
    assert nn.Dense(cast(4), cast(3)).params["weight"].shape == (4, 3)
    x = np.random.default_rng(0).standard_normal((2 * g, 4)).astype(np.float32)
    result = p.run(x, np.arange(2 * g) % 3)
    assert np.isfinite(result.losses).all()
