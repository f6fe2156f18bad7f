"""Variable liveness (ipukit.liveness): always-live and not-always-live memory, memory reuse,
against hand-computed examples."""

import dataclasses
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit import liveness


class Scale(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    y = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.y[...] = 2 * self.x


class Total(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.sum(axis=-1)


class Add(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    acc = ipu.InOut(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.acc[...] += self.x


N = 56_000  # floats: 224,000 B; three of them (672,000 B) overfill a 638,976-B Mk2 tile
SCALE_STATE, TOTAL_STATE = 4 + 8 + 8, 4 + 8 + 4  # vertex state: 4 B + a field's pointer(s)


def one_tile(tiles=1):
    dev = ipu.IPUModel("ipu2", tiles_per_ipu=tiles).create_device()
    return dev, ipu.Graph(dev.target)


def vertex(g, cls, fields, tile=0):
    cs = g.add_compute_set(f"{cls.__name__} -> {list(fields.values())[-1].name}")
    g.add_vertex(cs, cls, fields, tile=tile)
    return ipu.Execute(cs)


def two_temporaries(order):
    """a -> t1 -> out[0] and a -> t2 -> out[1] on one tile, in ``order`` of the four steps
    ("apart": t1 is dead before t2 is written; "together": both live at once)."""
    dev, g = one_tile()
    a = g.add_variable(ipu.FLOAT, [N], "a")
    t1, t2 = (g.add_variable(ipu.FLOAT, [N], n) for n in ("t1", "t2"))
    out = g.add_variable(ipu.FLOAT, [2], "out")
    for v in (a, t1, t2, out):
        g.set_tile_mapping(v, 0)
    g.create_host_write("a", a)
    g.create_host_read("out", out)
    make = [vertex(g, Scale, {"x": a, "y": t}) for t in (t1, t2)]
    total = [vertex(g, Total, {"x": t, "out": out[i]}) for i, t in enumerate((t1, t2))]
    steps = {"apart": [make[0], total[0], make[1], total[1]],
             "together": [make[0], make[1], total[0], total[1]]}[order]
    return dev, g, ipu.Sequence(*steps)


def test_temporaries_not_live_at_once_share_memory_and_the_graph_fits():
    dev, g, prog = two_temporaries("apart")
    mem = ipu.compile_graph(g, [prog], {"debug.allowOutOfMemory": "false"}).memory
    c = {k: int(v[0]) for k, v in mem.categories.items()}
    # always live: a (host write) and out (host read); t1 then t2, one at a time
    assert c["variables"] == 4 * N + 8
    assert c["not-always-live variables"] == 4 * N
    assert c["exchange buffers"] == 0 and c["constants"] == 0
    assert c["vertex state"] == 2 * SCALE_STATE + 2 * TOTAL_STATE
    assert c["vertex code"] == 2 * 256
    assert int(mem.total[0]) == 8 * N + 8 + 72 + 512 <= dev.target.bytes_per_tile
    live = mem.liveness
    assert live.names == ("t1", "t2")
    assert live.ranges("t1") == [(0, 1)] and live.ranges("t2") == [(2, 3)]
    assert live.live_bytes().tolist() == [4 * N] * 4
    assert live.always == {"a": "host write handle", "out": "host read handle"}
    assert int(live.peak[0]) == 0  # the first point where the peak is reached
    # the values are what they were: t1 and t2 still hold their own results
    eng = ipu.Engine(g, prog, {"debug.allowOutOfMemory": "false"})
    eng.load(dev)
    x = np.arange(N, dtype=np.float32) / N
    eng.write_tensor("a", x)
    eng.run()
    np.testing.assert_allclose(eng.read_tensor("out"), [2 * x.sum()] * 2, rtol=1e-5)


def test_the_same_temporaries_live_at_once_do_not_fit():
    dev, g, prog = two_temporaries("together")
    with pytest.warns(ipu.OutOfMemoryWarning, match="not-always-live variables 448,000"):
        mem = ipu.compile_graph(g, [prog]).memory
    assert int(mem.categories["not-always-live variables"][0]) == 8 * N
    assert mem.liveness.ranges("t1") == [(0, 2)] and mem.liveness.ranges("t2") == [(1, 3)]
    assert int(mem.total[0]) == 12 * N + 8 + 72 + 512 > dev.target.bytes_per_tile
    with pytest.raises(ipu.OutOfMemoryError, match=r"peak at 'Scale -> t2' \(program point 1"):
        ipu.compile_graph(g, [prog], {"debug.allowOutOfMemory": "false"})


def test_a_variable_written_in_two_compute_sets_is_not_killed():
    """Poplar kills a variable only where one compute set writes all its elements
    (``WriteUndef``): written half by half, it is live from the start of the program."""
    dev, g = one_tile()
    a = g.add_variable(ipu.FLOAT, [8], "a")
    halves = g.add_variable(ipu.FLOAT, [8], "halves")
    whole = g.add_variable(ipu.FLOAT, [8], "whole")
    out = g.add_variable(ipu.FLOAT, [2], "out")
    for v in (a, halves, whole, out):
        g.set_tile_mapping(v, 0)
    g.create_host_write("a", a)
    g.create_host_read("out", out)
    prog = ipu.Sequence(vertex(g, Scale, {"x": a[:4], "y": halves[:4]}),
                        vertex(g, Scale, {"x": a[4:], "y": halves[4:]}),
                        vertex(g, Scale, {"x": a, "y": whole}),
                        vertex(g, Total, {"x": halves, "out": out[0]}),
                        vertex(g, Total, {"x": whole, "out": out[1]}))
    live = ipu.compile_graph(g, [prog]).memory.liveness
    assert live.always["halves"] == "live where a program starts"
    assert live.names == ("whole",) and live.ranges("whole") == [(2, 4)]


def test_loops_carry_what_the_next_iteration_reads():
    dev, g = one_tile()
    a, t, carry, out = (g.add_variable(ipu.FLOAT, [4], n) for n in ("a", "t", "carry", "out"))
    for v in (a, t, carry, out):
        g.set_tile_mapping(v, 0)
    g.create_host_write("a", a)
    g.create_host_read("out", out)
    body = ipu.Sequence(vertex(g, Scale, {"x": a, "y": t}),  # t: made and used each time
                        vertex(g, Add, {"x": t, "acc": carry}))  # carry: read, then written
    prog = ipu.Sequence(vertex(g, Scale, {"x": a, "y": carry}), ipu.Repeat(3, body),
                        ipu.Copy(carry, out))
    exe = ipu.compile_graph(g, [prog])
    live = exe.memory.liveness
    assert live.labels == ("Scale -> carry", "Scale -> t", "Add -> carry", "Copy carry -> out")
    assert live.ranges("t") == [(1, 2)]
    assert live.ranges("carry") == [(0, 3)]  # through the whole loop to its last read
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.write_tensor("a", [1, 2, 3, 4])
    eng.run()
    assert eng.read_tensor("out").tolist() == [8, 16, 24, 32]  # 2a + 3 x 2a


def test_a_variable_read_in_one_branch_is_dead_in_the_other():
    dev, g = one_tile()
    a, v, w, out = (g.add_variable(ipu.FLOAT, [4], n) for n in ("a", "v", "w", "out"))
    pred = g.add_variable(ipu.BOOL, [], "pred")
    for x in (a, v, w, out, pred):
        g.set_tile_mapping(x, 0)
    g.create_host_write("a", a)
    g.create_host_write("pred", pred)
    g.create_host_read("out", out)
    then = ipu.Sequence(vertex(g, Scale, {"x": a, "y": w}), ipu.Copy(w, out))
    prog = ipu.Sequence(vertex(g, Scale, {"x": a, "y": v}), ipu.If(pred, then, ipu.Copy(v, out)))
    live = ipu.compile_graph(g, [prog]).memory.liveness
    assert live.labels == ("Scale -> v", "If", "Scale -> w", "Copy w -> out", "Copy v -> out")
    assert live.ranges("v") == [(0, 1), (4, 4)]  # not in the then branch: w may use its bytes
    assert live.ranges("w") == [(2, 3)]
    assert live.live_bytes().tolist() == [16, 16, 16, 16, 16]


def test_what_one_program_leaves_for_another_is_always_live():
    dev, g = one_tile()
    a, kept, out = (g.add_variable(ipu.FLOAT, [4], n) for n in ("a", "kept", "out"))
    for x in (a, kept, out):
        g.set_tile_mapping(x, 0)
    g.create_host_write("a", a)
    g.create_host_read("out", out)
    mem = ipu.compile_graph(g, [vertex(g, Scale, {"x": a, "y": kept}),
                                ipu.Copy(kept, out)]).memory
    assert mem.liveness.always["kept"] == "live where a program starts"
    assert mem.liveness.names == () and int(mem.categories["variables"][0]) == 48


def test_exchange_buffers_count_only_during_their_step():
    """Tile 1 receives x's 400 B in step 0 (exchange buffers) and holds the 800-B temporary
    t in steps 1 and 2: its peak is 800 B of variables (+ s's 4 B), not 800 + 400."""
    dev, g = one_tile(tiles=2)
    x = g.add_variable(ipu.FLOAT, [100], "x")
    y, t = (g.add_variable(ipu.FLOAT, [200], n) for n in ("y", "t"))
    s, out = g.add_variable(ipu.FLOAT, [1], "s"), g.add_variable(ipu.FLOAT, [2], "out")
    g.set_tile_mapping(x, 0)
    for v in (y, t, s, out):
        g.set_tile_mapping(v, 1)
    g.create_host_write("x", x)
    g.create_host_write("y", y)
    g.create_host_read("out", out)
    prog = ipu.Sequence(vertex(g, Total, {"x": x, "out": s[0]}, tile=1),
                        vertex(g, Scale, {"x": y, "y": t}, tile=1),
                        vertex(g, Total, {"x": t, "out": out[0]}, tile=1),
                        ipu.Copy(s, out[1:]))
    mem = ipu.compile_graph(g, [prog]).memory
    assert mem.liveness.buffers.tolist() == [400, 0, 0, 0]
    assert mem.liveness.live_bytes(tile=1).tolist() == [4, 804, 804, 4]
    assert int(mem.liveness.peak[1]) == 1
    assert int(mem.categories["not-always-live variables"][1]) == 804
    assert int(mem.categories["exchange buffers"][1]) == 0
    assert int(mem.categories["variables"][1]) == 800 + 8  # y and out


def test_the_analysis_waits_for_a_read_and_sees_the_graph_as_compiled(monkeypatch):
    """Where every variable live at once fits every tile (``Analysis.bound``), compile
    leaves the analysis to the first read of the memory, once; it sees the graph as it was
    compiled: a tensor mapped elsewhere, a variable added or a host handle made afterwards
    changes nothing."""
    runs = []
    analyse = liveness.Analysis.run
    monkeypatch.setattr(liveness.Analysis, "run", lambda self: runs.append(1) or analyse(self))
    dev, g = one_tile(tiles=2)
    a, t, out = (g.add_variable(ipu.FLOAT, [4], n) for n in ("a", "t", "out"))
    for v in (a, t, out):
        g.set_tile_mapping(v, 0)
    g.create_host_write("a", a)
    g.create_host_read("out", out)
    mem = ipu.compile_graph(g, [ipu.Sequence(vertex(g, Scale, {"x": a, "y": t}),
                                             ipu.Copy(t, out))]).memory
    assert runs == []
    g.set_tile_mapping(t, 1)
    g.set_tile_mapping(g.add_variable(ipu.FLOAT, [100], "late"), 0)
    g.create_host_read("t", t)
    assert mem.categories["variables"].tolist() == [32, 0]  # a and out
    assert mem.categories["not-always-live variables"].tolist() == [16, 0]  # t, on tile 0
    assert mem.liveness.always == {"a": "host write handle", "out": "host read handle"}
    assert mem.liveness.ranges("t") == [(0, 1)]
    assert runs == [1]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_compile_finds_an_overflow_exactly_where_a_tile_holds_more_than_it_has(data):
    """The bound that lets compile defer the analysis never hides an overflow: with tile
    memory set anywhere around a random graph's, compile warns exactly when a tile's memory
    (read afterwards) is more than it has, and the memory is the same whether the analysis
    ran at compile (the bound does not fit) or at the read."""
    sizes = data.draw(st.lists(st.integers(1, 40), min_size=2, max_size=5), "sizes")
    tiles = data.draw(st.lists(st.integers(0, 1), min_size=len(sizes), max_size=len(sizes)))
    cuts = [data.draw(st.integers(0, n // 2)) for n in sizes]
    ops = data.draw(st.lists(st.tuples(st.sampled_from(["copy", "scale"]),
                                       st.integers(0, len(sizes) - 1),
                                       st.integers(0, len(sizes) - 1), st.integers(0, 1)),
                             min_size=1, max_size=6), "ops")
    handles = data.draw(st.sets(st.integers(0, len(sizes) - 1)), "handles")

    def memory(target):
        g = ipu.Graph(target)
        vs = [g.add_variable(ipu.FLOAT, [n], f"v{i}") for i, n in enumerate(sizes)]
        for v, tile, cut in zip(vs, tiles, cuts):  # (a first part of some on the other tile)
            g.set_tile_mapping(v, tile)
            g.set_tile_mapping(v[:cut], 1 - tile)
        g.add_variable(ipu.FLOAT, [0], "empty")
        for i in handles:
            g.create_host_write(f"v{i}", vs[i])
        prog = ipu.Sequence()
        for kind, i, j, tile in ((k, i, j, tile) for k, i, j, tile in ops if i != j):
            m = min(sizes[i], sizes[j])
            prog.add(ipu.Copy(vs[i][:m], vs[j][:m]) if kind == "copy" else
                     vertex(g, Scale, {"x": vs[i][:m], "y": vs[j][:m]}, tile=tile))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mem = ipu.compile_graph(g, [prog]).memory
        warned = any(isinstance(w.message, ipu.OutOfMemoryWarning) for w in caught)
        return warned, {k: v.tolist() for k, v in mem.categories.items()}, mem.total

    target = ipu.IPUModel("ipu2", tiles_per_ipu=2).create_device().target
    _, expected, total = memory(target)
    most = int(total.max())  # (80 B a tile: every variable fits the two tiles)
    limit = data.draw(st.integers(max(most // 2, 80), most + 400), "limit")
    warned, categories, total = memory(dataclasses.replace(target, bytes_per_tile=limit))
    assert warned == bool((total > limit).any())
    assert categories == expected


def test_a_tile_over_full_by_one_byte_of_exchange_buffers_is_found_at_compile():
    """Every variable always live (host handles): a tile's memory is the bound compile
    checks, exchange buffers included; one byte less tile memory and compile finds it."""
    def compile_with(bytes_per_tile):
        t = ipu.IPUModel("ipu2", tiles_per_ipu=2).create_device().target
        g = ipu.Graph(dataclasses.replace(t, bytes_per_tile=bytes_per_tile))
        x, s = g.add_variable(ipu.FLOAT, [100], "x"), g.add_variable(ipu.FLOAT, [1], "s")
        g.set_tile_mapping(x, 0)
        g.set_tile_mapping(s, 1)
        g.create_host_write("x", x)
        g.create_host_read("s", s)
        return ipu.compile_graph(g, [vertex(g, Total, {"x": x, "out": s[0]}, tile=1)],
                                 {"debug.allowOutOfMemory": "false"}).memory

    mem = compile_with(10_000)
    need = 4 + 400 + TOTAL_STATE + 256  # s, x received (exchange buffers), vertex state, code
    assert mem.total.tolist() == [400, need]
    assert int(mem.categories["exchange buffers"][1]) == 400
    assert compile_with(need).total.tolist() == [400, need]
    with pytest.raises(ipu.OutOfMemoryError, match=f"{need:,}"):
        compile_with(need - 1)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_each_variables_bytes_per_tile_are_its_elements_on_each_tile(data):
    """``Analysis.on`` (read in one pass over each type's step function, cut where a
    variable starts or ends) is, variable by variable, the bytes of its elements on each
    tile, counted element by element with NumPy; empty variables hold nothing."""
    dev, g = one_tile(tiles=4)
    variables = []
    for i in range(data.draw(st.integers(1, 6))):
        dtype = data.draw(st.sampled_from([ipu.FLOAT, ipu.INT, ipu.HALF]))
        v = g.add_variable(dtype, [data.draw(st.integers(0, 20))], f"v{i}")
        tiles = data.draw(st.lists(st.integers(0, 3), min_size=v.num_elements(),
                                   max_size=v.num_elements()))
        for j, tile in enumerate(tiles):
            g.set_tile_mapping(v[j:j + 1], tile)
        variables.append((v, np.array(tiles, np.intp)))
    analysis = liveness.Analysis(g, (), (), ipu.compile.Access.of, {})
    want = [(k, tile, int(np.sum(tiles == tile)) * v.dtype.itemsize)
            for k, (v, tiles) in enumerate(sorted(variables, key=lambda x: (
                list(g.pools).index(x[0].dtype), x[0].offset)))
            for tile in range(4) if np.any(tiles == tile)]
    assert analysis.on.tolist() == [list(row) for row in want]
