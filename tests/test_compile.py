import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit import compile as compile_module
from ipukit.compile import CODELET_CODE_BYTES, Access, FieldPlan
from ipukit.poplibs import poplin, popops
from ipukit.poplibs.expr import _1, _2
from ipukit.tensor import RegionList, addresses

from .helpers import SumVertex, run, small


def test_unmapped_tensor_and_vertex_are_named():
    _, g = small()
    x = g.add_variable(ipu.FLOAT, [2, 3], "activations")
    g.set_tile_mapping(x[0], 0)
    with pytest.raises(ipu.TileMappingError, match=r"'activations' has 3 unmapped .*\[1, 0\]"):
        ipu.compile_graph(g, [])
    g.set_tile_mapping(x, 1)
    out = g.add_variable(ipu.FLOAT, [1], "out")
    g.set_tile_mapping(out, 0)
    cs = g.add_compute_set("sum")
    g.add_vertex(cs, SumVertex, {"x": x[0], "out": out[0]})
    with pytest.raises(ipu.TileMappingError, match="vertex 0 .SumVertex, compute set 'sum'"):
        ipu.compile_graph(g, [ipu.Execute(cs)])


def test_unconnected_field_is_named_with_the_fix():
    _, g = small()
    x = g.add_variable(ipu.FLOAT, [4], "x")
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("sum")
    g.add_vertex(cs, SumVertex, {"x": x}, tile=0)
    with pytest.raises(ipu.GraphConnectionError, match=r"field 'out'.*graph.connect\(v\['out'\]"):
        ipu.compile_graph(g, [ipu.Execute(cs)])
    # a compute set that no program executes is not compiled (as in Poplar)
    ipu.compile_graph(g, [ipu.Sequence()])


class Shift(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    by = ipu.State(ipu.Vector(ipu.FLOAT))
    y = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.y[...] = self.x + self.by


@pytest.mark.parametrize("mistakes,error,match", [
    ({"x"}, ipu.GraphConnectionError, r"field 'x' .* of vertex 2 .*Shift.*is not connected"),
    ({"by"}, ipu.GraphConnectionError, r"State field 'by' of vertex 2 .*Shift.*no value"),
    ({"y"}, ipu.GraphConnectionError, r"field 'y' .* of vertex 2 .*Shift.*is not connected"),
    ({"x", "by"}, ipu.GraphConnectionError, r"field 'x' .* of vertex 2 "),  # (field order)
    ({"by", "y"}, ipu.GraphConnectionError, r"State field 'by' of vertex 2 "),
    ({"tile", "x"}, ipu.TileMappingError, r"vertex 2 .*Shift"),  # (the tile first)
])
def test_a_vertex_of_a_compute_set_missing_a_field_is_named_field_by_field(mistakes, error,
                                                                          match):
    """Compile reads each vertex's fields in the class's order (a plan is made per shape of
    fields) and names the first mistake it finds: an unmapped vertex, an unconnected field
    or a State Vector with no value, of the vertex that has it (the third of four)."""
    _, g = small()
    x = g.add_variable(ipu.FLOAT, [4, 2], "x")
    y = g.add_variable(ipu.FLOAT, [4, 2], "y")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(y, 0)
    cs = g.add_compute_set("shift")
    for i in range(4):
        bad = mistakes if i == 2 else set()
        v = g.add_vertex(cs, Shift, {k: t[i] for k, t in (("x", x), ("y", y)) if k not in bad},
                         **({} if "tile" in bad else {"tile": 0}))
        if "by" not in bad:
            g.set_initial_value(v["by"], np.ones(2, np.float32))
    with pytest.raises(error, match=match):
        ipu.compile_graph(g, [ipu.Execute(cs)])


class Copy1(ipu.Vertex):
    a = ipu.Input(ipu.FLOAT)
    b = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.b[...] = self.a


class Scale(ipu.Vertex):
    x = ipu.InOut(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.x[...] *= 2


def race_graph():
    _, g = small()
    v = g.add_variable(ipu.FLOAT, [4], "v")
    g.set_tile_mapping(v, 0)
    return g, v, g.add_compute_set("racy")


def test_two_writers_of_one_element_race():
    g, v, cs = race_graph()
    g.add_vertex(cs, Copy1, {"a": v[0], "b": v[3]}, tile=0)
    g.add_vertex(cs, Copy1, {"a": v[1], "b": v[3]}, tile=1)
    with pytest.raises(ipu.ComputeSetRaceError,
                       match=r"'racy'.*vertex 0.*writes element \[3\] of tensor 'v'.*vertex 1"):
        ipu.compile_graph(g, [ipu.Execute(cs)])


def test_a_writer_and_another_reader_race():
    g, v, cs = race_graph()
    g.add_vertex(cs, Copy1, {"a": v[0], "b": v[1]}, tile=0)
    g.add_vertex(cs, Scale, {"x": v[1:3]}, tile=1)
    with pytest.raises(ipu.ComputeSetRaceError, match="writes element .1. .*reads"):
        ipu.compile_graph(g, [ipu.Execute(cs)])


def test_in_place_and_disjoint_writes_do_not_race():
    g, v, cs = race_graph()
    g.add_vertex(cs, Scale, {"x": v[0:2]}, tile=0)
    g.add_vertex(cs, Scale, {"x": v[2:4]}, tile=1)
    ipu.compile_graph(g, [ipu.Execute(cs)])
    # one vertex reading and writing one element through two fields is a race too
    g2, v2, cs2 = race_graph()
    g2.add_vertex(cs2, Copy1, {"a": v2[0], "b": v2[0]}, tile=0)
    with pytest.raises(ipu.ComputeSetRaceError, match="which its own field 'a' reads"):
        ipu.compile_graph(g2, [ipu.Execute(cs2)])


class CopyVec(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    y = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.y[...] = self.x


def test_a_compute_set_whose_fields_are_all_empty_compiles_and_runs_with_no_exchange():
    """Fields connected to empty slices have no addresses: nothing to fetch, send or race."""
    dev, g = small()
    a = g.add_variable(ipu.FLOAT, [4], "a")
    b = g.add_variable(ipu.FLOAT, [4], "b")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 1)
    only_input = g.add_compute_set("only an empty input")
    g.add_vertex(only_input, ReadSum, {"a": a[0:0], "c": b[0]}, tile=1)  # c is b's, on tile 1
    empty = g.add_compute_set("empty")
    g.add_vertex(empty, CopyVec, {"x": a[0:0], "y": b[2:2]}, tile=2)
    g.create_host_write("b-write", b)
    g.create_host_read("b-read", b)
    exe = ipu.compile_graph(g, [ipu.Execute(only_input), ipu.Execute(empty)])
    for step in exe.steps[1:]:
        assert step.exchange_cycles == 0 and step.transfers.shape == (0, 3)
        assert step.tile_bytes_in.sum() == step.tile_bytes_out.sum() == 0
    assert exe.steps[2].tile_vertices.tolist() == [0, 0, 1, 0]
    eng = ipu.Engine(g, [ipu.Sequence([ipu.Execute(only_input), ipu.Execute(empty)])])
    eng.load(dev)
    eng.write_tensor("b-write", np.arange(4, dtype=np.float32) + 1)
    eng.run(0)
    assert eng.read_tensor("b-read").tolist() == [0, 2, 3, 4]  # the sum of no elements is 0


def test_an_empty_written_field_writes_nothing_that_could_race():
    g, v, cs = race_graph()
    g.add_vertex(cs, CopyVec, {"x": v, "y": v[0:0]}, tile=0)
    ipu.compile_graph(g, [ipu.Execute(cs)])
    g.add_vertex(cs, Copy1, {"a": v[0], "b": v[1]}, tile=1)  # a real writer still races
    with pytest.raises(ipu.ComputeSetRaceError, match=r"writes element \[1\] .*reads"):
        ipu.compile_graph(g, [ipu.Execute(cs)])


def test_compute_cost_is_six_workers_round_robin():
    dev, g = small(tiles=2)
    x = g.add_variable(ipu.FLOAT, [8, 4], "x")
    out = g.add_variable(ipu.FLOAT, [8], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 0)
    cs = g.add_compute_set("sum")
    for i in range(8):
        v = g.add_vertex(cs, SumVertex, {"x": x[i], "out": out[i]}, tile=0)
        g.set_perf_estimate(v, 10 + i)
    step = ipu.compile_graph(g, [ipu.Execute(cs)]).steps[1]
    # workers get vertices (0, 6), (1, 7), 2, 3, 4, 5: the heaviest is 11 + 17 = 28 cycles,
    # and each worker issues every 6th cycle.
    assert step.compute_cycles == 6 * 28
    assert step.vertex_cycles == sum(range(10, 18))
    assert step.exchange_cycles == 0 and step.sync_cycles == dev.target.sync_cycles
    assert step.vertex_types == {"SumVertex": (8, sum(range(10, 18)))}


def test_exchange_counts_remote_bytes_once_per_tile():
    dev, g = small(tiles=3)
    x = g.add_variable(ipu.FLOAT, [4], "x")
    out = g.add_variable(ipu.FLOAT, [2], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 0)
    cs = g.add_compute_set("sum")
    # two vertices on tile 1 read all of x (fetched once: 16 B); one on tile 2 reads x[0:2].
    g.add_vertex(cs, SumVertex, {"x": x, "out": out[0]}, tile=1)
    g.add_vertex(cs, SumVertex, {"x": x[0:2], "out": out[1]}, tile=2)
    step = ipu.compile_graph(g, [ipu.Execute(cs)]).steps[1]
    assert step.tile_bytes_in.tolist() == [4 + 4, 16, 8]  # results come back to tile 0
    # the exchange broadcasts: tile 0 sends each of x's 4 elements once, to both readers
    assert step.tile_bytes_out.tolist() == [16, 4, 4]
    assert sorted(map(tuple, step.transfers.tolist())) == [(0, 1, 16), (0, 2, 8), (1, 0, 4),
                                                           (2, 0, 4)]
    # Exchange in (before compute): tile 0 sends 16 B, tile 1 receives 16 B: 4 cycles.
    # Exchange out (after compute): tiles 1 and 2 send a 4-B result each, tile 0 receives
    # 8 B: 2 cycles. The step: sync, 4, compute, 2.
    assert [b.tolist() for b in step.phase_bytes("exchange")] == [[0, 16, 8], [16, 0, 0]]
    assert [b.tolist() for b in step.phase_bytes("exchange out")] == [[8, 0, 0], [0, 4, 4]]
    assert step.phase_transfers("exchange out").tolist() == [[1, 0, 4], [2, 0, 4]]
    assert (step.phase_cycles("exchange"), step.exchange_out_cycles) == (16 // 4, 8 // 4)
    assert step.exchange_cycles == 16 // 4 + 8 // 4
    assert step.cycles == step.sync_cycles + 6 + step.compute_cycles
    assert step.tile_exchange_cycles(dev.target).tolist() == [4 + 2, 4 + 1, 2 + 1]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_exchange_in_moves_and_sends_each_element_once_however_finely_it_is_mapped(data):
    # x is mapped element by element (a run crosses many tiles, as a matmul's operands do:
    # compile then checks and unions runs rather than pieces, or sums runs alike per set of
    # reader tiles: both ways, MANY_PIECES 0 and never); the reference counts elements
    import ipukit.compile as c

    dev, g = small(tiles=4)
    tile_of = data.draw(st.lists(st.integers(0, 3), min_size=24, max_size=24))
    x = g.add_variable(ipu.FLOAT, [24], "x")
    for i, tile in enumerate(tile_of):
        g.set_tile_mapping(x[i], tile)
    n = data.draw(st.integers(1, 12))  # (one length: the vertices are one group, one field)
    reads = data.draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 24 - n),
                                         st.integers(0, 3)), min_size=1, max_size=8))
    out = g.add_variable(ipu.FLOAT, [len(reads)], "out")
    cs = g.add_compute_set("sum")
    for i, (tile, lo, out_tile) in enumerate(reads):  # (slices may repeat or overlap)
        g.set_tile_mapping(out[i], out_tile)
        g.add_vertex(cs, SumVertex, {"x": x[lo:lo + n], "out": out[i]}, tile=tile)
    read_on = {(e, tile) for tile, lo, _ in reads for e in range(lo, lo + n)}
    moves, results = {}, {}
    for e, tile in read_on:
        if tile_of[e] != tile:
            moves[tile_of[e], tile] = moves.get((tile_of[e], tile), 0) + 4
    for tile, _, out_tile in reads:
        if out_tile != tile:
            results[tile, out_tile] = results.get((tile, out_tile), 0) + 4
    sent = [4 * len({e for e, tile in read_on if tile_of[e] == t != tile}) for t in range(4)]
    many, runs = c.MANY_PIECES, c.MOVES_RUNS
    c.MOVES_RUNS = 0
    try:
        for c.MANY_PIECES in (0, 2**62):
            step = ipu.compile_graph(g, [ipu.Execute(cs)]).steps[1]
            assert sorted(map(tuple, step.phase_transfers("exchange").tolist())) == sorted(
                (a, b, m) for (a, b), m in moves.items())
            assert step.phase_bytes("exchange")[1].tolist() == sent
            assert sorted(map(tuple, step.phase_transfers("exchange out").tolist())) == sorted(
                (a, b, m) for (a, b), m in results.items())
    finally:
        c.MANY_PIECES, c.MOVES_RUNS = many, runs


def test_outputs_mapped_element_by_element_are_sent_once_after_compute():
    class Fill(ipu.Vertex):
        out = ipu.Output(ipu.Vector(ipu.FLOAT))

        def compute(self):
            self.out[...] = 1.0

    dev, g = small(tiles=4)
    y = g.add_variable(ipu.FLOAT, [24], "y")
    for i in range(24):  # (each run of 12 crosses 12 tiles: more remote pieces than runs)
        g.set_tile_mapping(y[i], i % 4)
    cs = g.add_compute_set("fill")
    g.add_vertex(cs, Fill, {"out": y[0:12]}, tile=0)
    g.add_vertex(cs, Fill, {"out": y[12:24]}, tile=1)
    step = ipu.compile_graph(g, [ipu.Execute(cs)]).steps[1]
    # each vertex sends the 9 of its 12 elements held on the 3 other tiles; nothing comes in
    assert step.phase_bytes("exchange out")[1].tolist() == [36, 36, 0, 0]
    assert step.phase_bytes("exchange")[1].tolist() == [0, 0, 0, 0]


def test_a_step_without_remote_outputs_has_no_exchange_out():
    dev, g = small(tiles=2)
    x = g.add_variable(ipu.FLOAT, [4], "x")
    out = g.add_variable(ipu.FLOAT, [1], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 1)
    cs = g.add_compute_set("sum")
    g.add_vertex(cs, SumVertex, {"x": x, "out": out[0]}, tile=1)  # the output is local
    step = ipu.compile_graph(g, [ipu.Execute(cs)]).steps[1]
    assert step.exchange_out_cycles == 0 and step.tile_result_bytes_in is None
    assert step.phase_bytes("exchange out")[0].tolist() == [0, 0]
    assert step.exchange_cycles == step.phase_cycles("exchange") == 16 // 4


def test_remote_outputs_cross_ipus_after_compute():
    dev, g = small(tiles=2, num_ipus=2)  # tiles 0-1 on IPU 0, 2-3 on IPU 1
    x = g.add_variable(ipu.FLOAT, [1000], "x")
    out = g.add_variable(ipu.FLOAT, [1000], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 3)
    cs = g.add_compute_set("copy")
    g.add_vertex(cs, CopyVec, {"x": x, "y": out}, tile=0)  # local in, remote out
    step = ipu.compile_graph(g, [ipu.Execute(cs)]).steps[1]
    t = dev.target
    assert step.phase_cycles("exchange") == 0
    assert step.exchange_out_cycles == 4000 // 4 + math.ceil(4000 / t.ipu_link_bytes_per_cycle)
    assert step.inter_ipu_bytes == 4000 and step.sync_cycles == t.global_sync_cycles


def test_a_broadcast_copy_sends_each_element_once():
    dev, g = small(tiles=3)
    a = g.add_variable(ipu.FLOAT, [1], "a")
    b = g.add_variable(ipu.FLOAT, [2, 3], "b")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b[0], 1)
    g.set_tile_mapping(b[1], 2)
    step = ipu.compile_graph(g, [ipu.Copy(a.broadcast([6]), b.flatten())]).steps[1]
    assert step.tile_bytes_out.tolist() == [4, 0, 0]
    assert step.tile_bytes_in.tolist() == [0, 12, 12]
    assert step.exchange_cycles == 3


def test_inter_ipu_copy_pays_global_sync_and_link_time():
    dev, g = small(tiles=2, num_ipus=2)
    a = g.add_variable(ipu.FLOAT, [1000], "a")
    b = g.add_variable(ipu.FLOAT, [1000], "b")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 3)
    step = ipu.compile_graph(g, [ipu.Copy(a, b)]).steps[1]
    t = dev.target
    assert step.inter_ipu_bytes == 4000
    assert step.sync_cycles == t.global_sync_cycles
    assert step.exchange_cycles == 4000 // 4 + math.ceil(4000 / t.ipu_link_bytes_per_cycle)


def test_memory_per_tile_by_category():
    dev, g = small(tiles=2)
    x = g.add_variable(ipu.FLOAT, [10, 4], "x")
    out = g.add_variable(ipu.FLOAT, [10], "out")
    c = g.add_constant(ipu.HALF, [6], 1.0, "halves")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 1)
    g.set_tile_mapping(c, 1)
    cs = g.add_compute_set("sum")
    for i in range(10):
        g.add_vertex(cs, SumVertex, {"x": x[i], "out": out[i]}, tile=1)
    mem = ipu.compile_graph(g, [ipu.Execute(cs)]).memory
    # x is read before any write (live where the program starts): always live; out is
    # written and never read: live at that one step only (not always live)
    assert mem.categories["variables"].tolist() == [160, 0]
    assert mem.categories["not-always-live variables"].tolist() == [0, 40]
    assert mem.categories["constants"].tolist() == [0, 12]
    assert mem.categories["exchange buffers"].tolist() == [0, 160]  # x fetched to tile 1
    assert mem.categories["vertex state"][0] == 0 and mem.categories["vertex state"][1] > 0
    assert mem.worst(1)[0][0] == 1


def test_a_codelets_code_is_held_once_per_tile():
    """Poplar loads a codelet's code once on each tile that runs it; compute sets (and
    vertex groups of other field shapes) on that tile share it."""
    dev, g = small(tiles=2)
    x = g.add_variable(ipu.FLOAT, [4, 4], "x")
    out = g.add_variable(ipu.FLOAT, [4], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 0)
    one, two = g.add_compute_set("one"), g.add_compute_set("two")
    g.add_vertex(one, SumVertex, {"x": x[0], "out": out[0]}, tile=0)
    g.add_vertex(two, SumVertex, {"x": x[1], "out": out[1]}, tile=0)
    g.add_vertex(two, SumVertex, {"x": x[2, :2], "out": out[2]}, tile=0)  # another shape
    g.add_vertex(two, SumVertex, {"x": x[3], "out": out[3]}, tile=1)
    code = ipu.compile_graph(g, [ipu.Execute(one), ipu.Execute(two)]).memory.categories
    assert code["vertex code"].tolist() == [CODELET_CODE_BYTES, CODELET_CODE_BYTES]


def oom_graph():
    _, g = small(tiles=4, version="ipu1")  # 256 KiB per tile
    big = g.add_variable(ipu.FLOAT, [70_000], "embedding")
    small_t = g.add_variable(ipu.FLOAT, [10], "bias")
    g.set_tile_mapping(big, 2)
    g.set_tile_mapping(small_t, 1)
    return g


def test_out_of_memory_raises_with_allow_out_of_memory_false():
    # Graphcore's memory guide ("Debugging an out-of-memory exception"): "Out of memory on
    # tile 0: 876476 bytes used but tiles only have 638976 bytes of memory".
    with pytest.raises(ipu.OutOfMemoryError) as err:
        ipu.compile_graph(oom_graph(), [], {"debug.allowOutOfMemory": "false"})
    msg = str(err.value)
    assert msg.startswith("Memory allocation error : Out of memory on tile 2: 280,")
    assert "bytes used but tiles only have 262,144 bytes of memory" in msg
    assert "1 of 4 tiles" in msg and "tile 2: 280,000 B" in msg and "'embedding'" in msg
    assert msg.index("tile 2") < msg.index("tile 1")
    assert "tile 0" not in msg and "tile 3" not in msg  # empty tiles are not listed


def test_the_ipu_model_runs_an_out_of_memory_graph_and_reports_it(capsys):
    # Poplar tutorial 4 README: "the IPUModel is designed not to stop for OOM errors"; the
    # memory guide: with debug.allowOutOfMemory "Out of memory: Cannot fit all variable
    # data onto one or more tiles." is reported and compilation continues.
    g = oom_graph()
    with pytest.warns(ipu.OutOfMemoryWarning,
                      match="Cannot fit all variable data onto one or more tiles"):
        eng = ipu.Engine(g, ipu.Sequence())
    eng.load(ipu.Device(g.target))
    eng.run()  # and it runs
    assert eng.trace.memory.over_full() == [(2, 280_000)]
    eng.print_profile_summary()
    out = capsys.readouterr().out
    assert "Out of memory (the IPUModel runs on):" in out and "tile 2: 280,000 B" in out
    with pytest.raises(ipu.IpuError, match="must be \"true\" or \"false\""):
        ipu.compile_graph(g, [], {"debug.allowOutOfMemory": "maybe"})


def test_steps_are_shared_when_a_compute_set_runs_twice():
    dev, g = small()
    x = g.add_variable(ipu.FLOAT, [4], "x")
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("scale")
    g.add_vertex(cs, Scale, {"x": x}, tile=0)
    exe = ipu.compile_graph(g, [ipu.Sequence(ipu.Execute(cs), ipu.Execute(cs))])
    assert [s.name for s in exe.steps] == ["host sync (Engine.run)", "scale"]
    assert isinstance(exe.memory.total, np.ndarray)


def test_a_race_names_poplars_graph_cycle_error():
    """Poplar's graph compiler refuses two writers in one compute set with
    poplar::graph_cycle_error ('... written to elsewhere in same compute set'); one vertex
    reading and writing through two fields is a kit convention."""
    g, v, cs = race_graph()
    g.add_vertex(cs, Copy1, {"a": v[0], "b": v[3]}, tile=0)
    g.add_vertex(cs, Copy1, {"a": v[1], "b": v[3]}, tile=0)
    with pytest.raises(ipu.ComputeSetRaceError, match=r"poplar::graph_cycle_error"):
        ipu.compile_graph(g, [ipu.Execute(cs)])
    g2, v2, cs2 = race_graph()
    g2.add_vertex(cs2, Copy1, {"a": v2[0], "b": v2[0]}, tile=0)
    with pytest.raises(ipu.ComputeSetRaceError, match=r"[Kk]it convention"):
        ipu.compile_graph(g2, [ipu.Execute(cs2)])


class CopyVector(ipu.Vertex):
    a = ipu.Input(ipu.Vector(ipu.FLOAT))
    b = ipu.InOut(ipu.Vector(ipu.FLOAT))
    c = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.c[...] = self.a + self.b


class ReadSum(ipu.Vertex):
    a = ipu.Input(ipu.Vector(ipu.FLOAT))
    c = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.c[...] = self.a.sum(axis=-1)


def test_a_race_names_the_first_element_in_the_fields_order():
    """A transposed read meets another vertex's write at v[1, 0] (its 2nd element) and at
    v[0, 1] (its 3rd, but a lower address): the race names v[1, 0], as the field reads."""
    _, g = small(tiles=2)
    v = g.add_variable(ipu.FLOAT, [2, 8], "v")
    out = g.add_variable(ipu.FLOAT, [1], "out")
    g.set_tile_mapping(v, 0)
    g.set_tile_mapping(out, 1)
    cs = g.add_compute_set("cs")
    g.add_vertex(cs, ReadSum, {"a": v[:, :2].transpose().flatten(), "c": out[0]}, tile=1)
    g.add_vertex(cs, Scale, {"x": v.flatten()[1:9]}, tile=0)
    with pytest.raises(ipu.ComputeSetRaceError, match=r"writes element \[1, 0\] of tensor 'v'"):
        ipu.compile_graph(g, [ipu.Execute(cs)])


def _random_copies(data):
    """Compiling 1-4 CopyVectors of random slices of one tensor (regions, transposed,
    gathers, flat) in one compute set: the outcome (its race message, or its costs)."""
    _, g = small(tiles=4)
    v = g.add_variable(ipu.FLOAT, [6, 8], "v")
    for r in range(6):  # rows, or half rows, on random tiles
        for half in (v[r, :4], v[r, 4:]):
            g.set_tile_mapping(half, data.draw(st.integers(0, 3)))
    cs = g.add_compute_set("cs")

    def part():
        r0, c0 = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 6))
        t = v[r0:data.draw(st.integers(r0 + 1, 6)), c0:data.draw(st.integers(c0 + 1, 8))]
        how = data.draw(st.sampled_from(["region", "transposed", "gather", "flat"]))
        if how == "flat":
            return v.flatten()[r0 * 8 + c0:r0 * 8 + c0 + data.draw(st.integers(1, 12))]
        t = t.transpose() if how == "transposed" else t
        return ipu.concat([t.flatten(), v[5, 7:]]) if how == "gather" else t.flatten()

    out = g.add_variable(ipu.FLOAT, [4, 48], "out")
    g.set_tile_mapping(out, 3)
    for i in range(data.draw(st.integers(1, 4))):  # writers of v: InOut b, sometimes c
        c = part() if data.draw(st.booleans()) else out[i]
        g.add_vertex(cs, CopyVector, {"a": part(), "b": part(), "c": c},
                     tile=data.draw(st.integers(0, 3)))

    def outcome():
        try:
            exe = ipu.compile_graph(g, [ipu.Execute(cs)])
        except ipu.ComputeSetRaceError as exc:
            return str(exc)
        s = exe.steps[1]
        return (s.cycles, s.tile_bytes_in.tolist(), s.tile_bytes_out.tolist(),
                s.transfers.tolist(), {k: m.tolist() for k, m in exe.memory.categories.items()})

    return outcome


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_merged_runs_cost_and_race_as_the_runs_in_order(data):
    """Compile costs a compute set's exchange and finds its races on each vertex's
    addresses merged by stride (a transposed slice is a few runs, not one per element):
    the same steps, memory and race messages as the runs in flat order."""
    outcome = _random_copies(data)
    merged = outcome()
    runs = Access.runs
    try:  # the reference: every field's runs in flat order
        Access.runs = lambda self, merged=False, once=False: runs(self)
        assert outcome() == merged
    finally:
        Access.runs = runs


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_fields_apart_race_and_cost_as_the_runs_check_alone(data):
    """Fields found apart in plain Python (_apart) skip the check of their runs for races:
    the same race messages and costs as that check alone."""
    outcome = _random_copies(data)
    found = outcome()
    apart = compile_module._apart
    try:
        compile_module._apart = lambda fps: False
        assert outcome() == found
    finally:
        compile_module._apart = apart


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(-5, 5)), min_size=1, max_size=4),
       st.integers(0, 99))
def test_a_regions_span_is_its_lowest_and_highest_address(dims, offset):
    shape = tuple(n for n, _ in dims)
    strides = tuple(s for _, s in dims)
    x = addresses(offset, shape, strides)
    expected = (int(x.min()), int(x.max())) if x.size else (0, -1)
    assert compile_module._span(Access(np.dtype(np.float32), shape, offset, shape, strides)) \
        == expected


def test_fields_apart_need_no_race_check_on_runs():
    """_apart: fields whose spans do not meet, each written one a region stepping past
    itself, cannot race (the runs' check is skipped); anything else is left to it."""
    _, g = small()
    v = g.add_variable(ipu.FLOAT, [4, 4], "v")
    g.set_tile_mapping(v, 0)

    def fields(*pairs):
        return [FieldPlan(k, kind, Access.of(t)) for k, (kind, t) in enumerate(pairs)]

    assert compile_module._apart(fields(("input", v[0]), ("output", v[1]), ("input", v[0])))
    assert compile_module._apart(fields(("inout", v[:2].transpose()), ("input", v[2:])))
    assert not compile_module._apart(fields(("input", v[0]), ("output", v[0, 3:])))
    assert not compile_module._apart(fields(("inout", v[0, :2].broadcast([3, 2]))))  # twice
    assert not compile_module._apart(fields(("output", ipu.concat([v[1], v[3]]))))  # gather


def _steps(exe) -> list:
    """Every field of every Step, arrays as lists (to compare two compiles)."""
    return [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(s).items()}
            for s in exe.steps]


def _per_ipu(twist=None, overlap=False, interleaved=False):
    """The same map, and the same matmul, on each of 3 IPUs of 8 tiles (one virtual graph
    each); ``twist``: IPU 2's operand has one element on another tile; ``overlap``: IPU 2's
    operands are two views of one variable; ``interleaved``: every IPU's ``a`` allocated
    before the ``b`` s (between an IPU's two operands lie the other IPUs')."""
    dev = ipu.IPUModel(num_ipus=3, tiles_per_ipu=8).create_device()
    g, prog = ipu.Graph(dev.target), ipu.Sequence()
    vgs = [g.create_virtual_graph(8 * s, 8 * (s + 1)) for s in range(3)]
    order = [(n, s) for n in "ab" for s in range(3)] if interleaved else [
        (n, s) for s in range(3) for n in "ab"]
    made = {(n, s): vgs[s].add_variable(ipu.FLOAT, [24, 16], f"{n}{s}") for n, s in order}
    for s, vg in enumerate(vgs):
        a, b = made["a", s], made["b", s]
        for t in (a, b):
            popops.poputil.map_tensor_linearly(vg, t)
        if twist and s == 2:
            vg.set_tile_mapping(b[3][5], 7)
        if overlap and s == 2:
            b = a.slice([0, 0], [24, 16])
        popops.map(vg, _1 * _2 + _1, [a, b], prog, f"map {s}")
        poplin.mat_mul(vg, a, b.transpose(), prog, f"matmul {s}")
    return dev, g, prog


@pytest.mark.parametrize("case", [{}, {"interleaved": True}, {"twist": True},
                                  {"overlap": True}])
def test_compute_sets_alike_take_an_earlier_ones_step_moved(monkeypatch, case):
    # the step of a compute set planned once and moved (whole IPUs on, every field at
    # shifted addresses over the same moved mapping, whatever lies between the fields)
    # equals planning it; a different mapping or fields that now overlap are planned
    import ipukit.compile as c

    _, g, prog = _per_ipu(**case)
    monkeypatch.setattr(c, "ALIKE_ELEMENTS", 1)
    reused = []
    alike = c._Compiler._alike
    monkeypatch.setattr(c._Compiler, "_alike",
                        lambda self, groups: reused.append(alike(self, groups)[0]) or
                        alike(self, groups))
    moved = ipu.compile_graph(g, [prog])
    monkeypatch.setattr(c, "ALIKE_ELEMENTS", 2**62)
    planned = ipu.compile_graph(g, [prog])
    assert _steps(moved) == _steps(planned)
    assert all(np.array_equal(moved.memory.categories[k], planned.memory.categories[k])
               for k in planned.memory.categories)
    per_ipu = sum(s.kind == "compute" for s in planned.steps) // 3  # the map, the matmul
    again = 1 if case.get("twist") or case.get("overlap") else 2  # IPUs 1 and 2, or IPU 1
    assert per_ipu == 2 and sum(r is not None for r in reused) == per_ipu * again
    assert {s.ipus for s in moved.steps if s.name.startswith("map")} == {(0,), (1,), (2,)}


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 70), st.integers(-150, 150))
def test_a_moved_steps_per_tile_arrays_are_rolled_as_np_roll_rolls(n, shift):
    from ipukit.compile import _rolled

    a = np.arange(n, dtype=np.int64) * 3
    got = _rolled(a, shift)
    assert got.dtype == a.dtype and np.array_equal(got, np.roll(a, shift))
    assert got is not a


def test_copies_from_region_lists_each_get_their_own_exchange_plan():
    """A Copy's plan is reused for the same elements (an unrolled loop); a RegionList makes
    its index array anew at each read, so its regions, not that array's id, name its
    elements (by id, freed arrays' reused ids gave 12 of these 64 copies another copy's
    source tile)."""
    n = 16
    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=n + 1).create_device().target)
    a = g.add_variable(ipu.FLOAT, [4 * n], "a")
    for k in range(n):
        g.set_tile_mapping(a[4 * k:4 * k + 4], k)
    progs = []
    for rep in range(4):
        for k in range(n):
            b = g.add_variable(ipu.FLOAT, [4], f"b{rep}_{k}")
            g.set_tile_mapping(b, n)
            r = RegionList(g, ipu.FLOAT, [(4 * k, (2,), (1,)), (4 * k + 2, (2,), (1,))], "r")
            progs.append(ipu.Copy(r, b))
    steps = [s for s in ipu.compile_graph(g, [ipu.Sequence(*progs)]).steps if s.kind == "copy"]
    assert [s.transfers.tolist() for s in steps] == [[[k, n, 16]] for _ in range(4)
                                                     for k in range(n)]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 2)), min_size=1,
                max_size=8))
def test_a_field_mixing_region_lists_and_address_arrays_gathers_each_vertex_s_addresses(kinds):
    """Vertices of one class whose field is a RegionList on some and an address array (a
    concat) on others are one gather: each row is that vertex's addresses, whichever it is,
    and the run reads them (compile gathers the RegionLists by their layouts)."""
    dev, g = small(tiles=2)
    x = g.add_variable(ipu.FLOAT, [72], "x")  # (vertex 7 reads up to x[66])
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("sums")
    want = []
    for i, (as_list, start, gap) in enumerate(kinds):
        parts = [(8 * i + start, (2,), (1,)), (8 * i + start + 2 + gap, (2,), (1,))]
        t = (RegionList(g, ipu.FLOAT, parts, f"r{i}") if as_list else
             ipu.concat([x[p:p + 2] for p, _, _ in parts]))
        out = g.add_variable(ipu.FLOAT, [], f"out{i}")
        g.set_tile_mapping(out, 1)
        g.create_host_read(f"out{i}", out)
        g.add_vertex(cs, SumVertex, {"x": t, "out": out}, tile=1)
        want.append(t.idx.reshape(-1))
    (node,) = ipu.compile_graph(g, [ipu.Execute(cs)]).programs
    (group,) = node.groups
    (field,) = [fp for fp in group.fields if fp.name == "x"]
    assert np.array_equal(field.access.idx, np.stack(want))
    g.create_host_write("x", x)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    data = np.arange(72, dtype=np.float32) ** 1.5
    eng.write_tensor("x", data)
    eng.run()
    for i, idx in enumerate(want):
        assert eng.read_tensor(f"out{i}") == pytest.approx(data[idx].sum(), rel=1e-6)


def _same_steps(a, b):
    """Two compiles' steps, every field equal (arrays by value)."""
    import dataclasses  # noqa: PLC0415

    assert len(a.steps) == len(b.steps)
    for x, y in zip(a.steps, b.steps):
        for f in dataclasses.fields(x):
            u, v = getattr(x, f.name), getattr(y, f.name)
            same = np.array_equal(u, v) if isinstance(u, np.ndarray) else u == v
            assert same, (x.name, f.name, u, v)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_copy_alike_whole_ipus_on_takes_the_earlier_plan_moved(data):
    """A copy whose sides are an earlier copy's shapes mapped alike whole IPUs on (a pipeline
    stage's copies, the next stage's) takes the earlier plan, moved (``_moved_step``): every
    Step field is what planning it gives, also where one IPU's mapping differs, the sides
    lie on two IPUs (the last one's reaching round to IPU 0) or a side is an index array."""
    import ipukit.compile as c

    dev, g = small(tiles=4, num_ipus=3)
    cuts = sorted(data.draw(st.sets(st.integers(1, 23), max_size=5)))
    pieces = list(zip([0, *cuts], [*cuts, 24]))
    tiles = [data.draw(st.integers(0, 3)) for _ in pieces]  # one mapping on every IPU
    twist = data.draw(st.booleans())  # IPU 2's first piece on another tile
    a, b = {}, {}
    for s in range(3):
        for name, made in (("a", a), ("b", b)):
            made[s] = g.add_variable(ipu.INT, [24], f"{name}{s}")
            for (lo, hi), tile in zip(pieces, tiles):
                turn = twist and s == 2 and lo == 0
                g.set_tile_mapping(made[s][lo:hi], 4 * s + (tile + turn) % 4)
    n = data.draw(st.integers(1, 12))
    at, to = data.draw(st.integers(0, 24 - n)), data.draw(st.integers(0, 24 - n))
    across = data.draw(st.integers(0, 1))  # the destination on the next IPU
    gather = data.draw(st.booleans())  # IPU 1's source a concat (an index array)
    programs = []
    order = data.draw(st.permutations(range(3)))  # (a later IPU's first: moved back)
    for s in order:
        src = a[s][at:at + n]
        if gather and s == 1:
            src = ipu.concat([a[s][at:at + 1], a[s][at + 1:at + n]])
        programs.append(ipu.Copy(src, b[(s + across) % 3][to:to + n]))
    moved = []
    with pytest.MonkeyPatch.context() as mp:
        step = c._Compiler._moved_step
        mp.setattr(c._Compiler, "_moved_step",
                   lambda self, *x: moved.append(x) or step(self, *x))
        got = ipu.compile_graph(g, programs)
    with pytest.MonkeyPatch.context() as mp:  # (tiles as they are: the same tiles only)
        key = c._Compiler._copy_key
        mp.setattr(c._Compiler, "_copy_key", lambda self, s, d: (key(self, s, d), 0))
        want = ipu.compile_graph(g, programs)
    _same_steps(got, want)
    plain = [not (gather and s == 1) and not (twist and 2 in (s, (s + across) % 3))
             and not (across and s == 2) for s in range(3)]  # (IPU 2 -> IPU 0: not alike)
    assert len(moved) >= sum(plain) - 1


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_joined_copy_is_planned_and_run_pair_by_pair_as_it_is_whole(data):
    """A copy between two RegionLists of runs that pair up, none meeting another (a
    pipeline cycle's joined sends), is planned pair by pair, each pair once, and run run by
    run: every Step field is what planning it whole gives (also where a source is read
    twice: a broadcast, each element sent once), the same error where a destination is
    aliased, and the run moves what NumPy moves, reading every source before writing (also
    where sources and destinations meet: then it is planned and run whole)."""
    dev, g = small(tiles=4, num_ipus=2)
    a = g.add_variable(ipu.INT, [48], "a")
    b = g.add_variable(ipu.INT, [48], "b")
    for v in (a, b):  # random tile mappings, in pieces
        cuts = sorted(data.draw(st.sets(st.integers(1, 47), max_size=6)))
        for lo, hi in zip([0, *cuts], [*cuts, 48]):
            g.set_tile_mapping(v[lo:hi], data.draw(st.integers(0, 7)))
    lengths = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=5))
    source = data.draw(st.sampled_from([a, b]))  # (b: sources may meet destinations)
    starts = [data.draw(st.integers(0, 48 - n)) for n in lengths]
    overlap = data.draw(st.booleans())  # destinations that meet: an aliased copy
    at, d_starts = 0, []
    for n in lengths:
        d_starts.append(at)
        at += n + data.draw(st.integers(0, 3)) - (n if overlap else 0)
    src = RegionList(g, ipu.INT, [(source.offset + s, (n,), (1,)) for s, n in
                                  zip(starts, lengths)], "sends")  # (as tensors.flat joins)
    dst = RegionList(g, ipu.INT, [(b.offset + d, (n,), (1,)) for d, n in
                                  zip(d_starts, lengths)], "inboxes")
    programs = [ipu.Copy(a[:8], b[40:]), ipu.Copy(src, dst)]  # (and a plain copy first)
    results = []
    for paired in (True, False):
        with pytest.MonkeyPatch.context() as whole:
            if not paired:
                whole.setattr("ipukit.compile._paired_runs", lambda s, d: None)
            try:
                results.append(ipu.compile_graph(g, programs))
            except ipu.IpuError as exc:
                results.append(exc)
    if isinstance(results[1], Exception):
        assert type(results[0]) is type(results[1]) and "aliased" in str(results[0])
        return
    _same_steps(*results)
    g.create_host_write("a", a)
    g.create_host_write("b", b)
    g.create_host_read("b", b)
    values = {"a": np.arange(48, dtype=np.int32) * 5 + 1, "b": np.arange(48, dtype=np.int32) - 90}
    for paired in (True, False):
        with pytest.MonkeyPatch.context() as whole:
            if not paired:
                whole.setattr("ipukit.compile._paired_runs", lambda s, d: None)
            eng = run(g, ipu.Sequence(*programs), dev)
        for name, v in values.items():
            eng.write_tensor(name, v)
        eng.run()
        want = values["b"].copy()
        want[40:] = values["a"][:8]
        read = want.copy() if source is b else values["a"]  # (read before any write)
        for s, d, n in zip(starts, d_starts, lengths):
            want[d:d + n] = read[s:s + n]
        assert np.array_equal(eng.read_tensor("b"), want)


@pytest.mark.parametrize("period", [2, 3])
def test_interleaved_vertices_run_as_one_region_per_residue(period):
    """Vertices whose fields step evenly only every ``period``-th vertex (a k-split matmul's
    partials alternate between the two halves of k), too large for one gather, run as
    ``period`` groups of regions, not as many short runs, and compute what NumPy
    computes."""
    dev, g = small(tiles=4)
    n = 8  # vertices per residue
    x = g.add_variable(ipu.FLOAT, [period, n, 4096], "x")
    y = g.add_variable(ipu.FLOAT, [period * n, 4096], "y")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(y, 1)
    cs = g.add_compute_set("interleaved")
    for j in range(period * n):
        g.add_vertex(cs, CopyVec, {"x": x[j % period, j // period], "y": y[j]}, tile=j % 4)
    (node,) = ipu.compile_graph(g, [ipu.Execute(cs)]).programs
    assert [gr.vertex_ids.tolist() for gr in node.groups] == [
        list(range(r, period * n, period)) for r in range(period)]
    assert all(fp.access.idx is None for gr in node.groups for fp in gr.fields)
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    eng = run(g, ipu.Execute(cs), dev)
    values = np.arange(x.num_elements(), dtype=np.float32).reshape(period, n, 4096)
    eng.write_tensor("x", values)
    eng.run()
    want = np.stack([values[j % period, j // period] for j in range(period * n)])
    assert np.array_equal(eng.read_tensor("y"), want)
