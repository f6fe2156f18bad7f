import io
import math

import numpy as np

import ipukit as ipu

from .helpers import SumVertex, small


def two_step_run():
    dev, g = small(tiles=4)
    x = g.add_variable(ipu.FLOAT, [8, 4], "x")
    out = g.add_variable(ipu.FLOAT, [8], "out")
    for i in range(8):
        g.set_tile_mapping(x[i], i % 4)
        g.set_tile_mapping(out[i], 0)
    cs = g.add_compute_set("sum")
    for i in range(8):
        v = g.add_vertex(cs, SumVertex, {"x": x[i], "out": out[i]}, tile=i % 4)
        g.set_perf_estimate(v, 7 + i)
    eng = ipu.Engine(g, ipu.Repeat(3, ipu.Execute(cs)))
    eng.load(dev)
    eng.run()
    eng.run()
    return dev, eng


def test_trace_records_each_executed_step_in_time_order():
    dev, eng = two_step_run()
    tr = eng.trace
    assert tr.num_runs == 2 and len(tr) == 2 * (1 + 3)
    starts = [e.start for e in tr.events]
    assert starts == sorted(starts) and starts[0] == 0
    cycles = [tr.steps[e.step].cycles for e in tr.events]
    assert np.array_equal(np.diff(starts), cycles[:-1])
    assert tr.total_cycles == sum(cycles)
    assert [e.run for e in tr.events] == [0] * 4 + [1] * 4


def test_summary_numbers_are_consistent_with_the_steps():
    dev, eng = two_step_run()
    s = eng.trace.summary()
    assert s["compute_cycles_excluding_idle"] == 6 * sum(range(7, 15))  # 6 executions
    assert s["total_cycles"] == s["sync_cycles"] + s["exchange_cycles"] + s["compute_cycles"]
    assert s["host_sync_cycles"] == 2 * dev.target.host_sync_cycles
    assert s["total_us"] == dev.target.cycles_to_us(s["total_cycles"])
    # tile t runs vertices t and t+4 on two workers: 6 x the larger estimate
    step = eng.trace.steps[1]
    assert step.tile_compute_cycles.tolist() == [6 * (7 + i + 4) for i in range(4)]
    assert s["tile_average_including_idle"] == 6 * step.tile_compute_cycles.sum() / 4
    assert s["vertex_types"] == {"SumVertex": (8, 6 * sum(range(7, 15)))}


def test_vertex_types_count_only_compute_sets_that_ran():
    dev, g = small(tiles=2)
    x = g.add_variable(ipu.FLOAT, [2, 4], "x")
    out = g.add_variable(ipu.FLOAT, [2], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 1)
    ran, idle = g.add_compute_set("ran"), g.add_compute_set("never run")
    g.add_vertex(ran, SumVertex, {"x": x[0], "out": out[0]}, tile=0)
    for i in range(2):
        g.add_vertex(idle, SumVertex, {"x": x[i], "out": out[i]}, tile=i)
    eng = ipu.Engine(g, [ipu.Execute(ran), ipu.Execute(idle)])
    eng.load(dev)
    eng.run(0)
    step = next(s for s in eng.trace.steps if s.name == "ran")
    assert step.vertex_types["SumVertex"][0] == 1
    assert eng.trace.summary()["vertex_types"] == {"SumVertex": step.vertex_types["SumVertex"]}


def test_print_profile_summary_has_poplars_headings():
    _, eng = two_step_run()
    out = io.StringIO()
    eng.print_profile_summary(out)
    text = out.getvalue()
    for heading in ("Target:", "Memory Usage:", "Execution:", "Total cycles:",
                    "Total compute cycles (excluding idle threads):", "SumVertex (8 instances)"):
        assert heading in text
    assert eng.trace.step_table()[1]["executions"] == 6


class _Add(ipu.Vertex):
    x = ipu.InOut(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.x[...] = self.x + 1


def _two_ipu_engine(copy: bool):
    """A compute set on IPU 0 and one on IPU 1 (no data between them), maybe a copy."""
    t = ipu.IPUModel(num_ipus=2, tiles_per_ipu=2).create_device().target
    g = ipu.Graph(t)
    a, b = g.add_variable(ipu.FLOAT, [64], "a"), g.add_variable(ipu.FLOAT, [640], "b")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 2)
    progs = []
    for name, x, tile in (("cs0", a, 0), ("cs1", b, 2)):
        cs = g.add_compute_set(name)
        v = g.add_vertex(cs, _Add, {"x": x})
        g.set_tile_mapping(v, tile)
        progs.append(ipu.Execute(cs))
    if copy:
        progs.append(ipu.Copy(a, b[:64]))
    eng = ipu.Engine(g, ipu.Sequence(*progs))
    eng.load(ipu.Device(t))
    eng.run()
    return eng


def test_compute_sets_on_different_ipus_overlap():
    eng = _two_ipu_engine(copy=False)
    host, cs0, cs1 = eng.trace.executed_steps()
    assert (cs0.ipus, cs1.ipus, host.ipus) == ((0,), (1,), (0, 1))
    starts = [e.start for e in eng.trace.events]
    assert starts == [0, host.cycles, host.cycles]  # cs1 does not wait for cs0
    assert eng.trace.total_cycles == host.cycles + max(cs0.cycles, cs1.cycles)
    assert eng.trace.total_cycles < sum(s.cycles for s in (host, cs0, cs1))
    tl = eng.trace.timeline()
    comp = {s.ipu: s for s in tl.spans if s.kind == "compute"}
    assert comp[0].start == comp[1].start == host.cycles + cs0.sync_cycles
    assert tl.makespan == eng.trace.total_cycles


def test_a_copy_between_ipus_is_an_external_sync_of_both():
    eng = _two_ipu_engine(copy=True)
    host, cs0, cs1, cp = eng.trace.executed_steps()
    assert cp.ipus == (0, 1) and cp.sync_cycles == eng.target.global_sync_cycles
    assert eng.trace.events[-1].start == host.cycles + max(cs0.cycles, cs1.cycles)
    tl = eng.trace.timeline()
    assert {s.ipu for s in tl.spans if s.label.startswith("Copy")} == {0, 1}
    # IPU 0 (the lighter compute set) waits for IPU 1 before the copy: a dependency
    m = tl.measures()
    assert cs1.cycles > cs0.cycles
    assert m["idle"][0]["dependency"] == cs1.cycles - cs0.cycles
    assert "dependency" not in m["idle"][1]
    assert m["idle"][0]["host"] == host.cycles and m["idle"][0]["sync"] == (
        cs0.sync_cycles + cp.sync_cycles)


def test_one_ipu_steps_follow_each_other():
    t = ipu.IPUModel(tiles_per_ipu=2).create_device().target
    g = ipu.Graph(t)
    v = g.add_variable(ipu.FLOAT, [4], "v")
    g.set_tile_mapping(v, 0)
    eng = ipu.Engine(g, ipu.Repeat(3, ipu.Copy(v[:2], v[2:])))
    eng.load(ipu.Device(t))
    eng.run()
    eng.run()
    steps = eng.trace.executed_steps()
    assert eng.trace.total_cycles == sum(s.cycles for s in steps)
    assert [e.start for e in eng.trace.events] == list(np.cumsum([0] + [s.cycles for s in
                                                                         steps])[:-1])


def test_execution_lines_split_ipu_global_and_host_exchange():
    # Poplar's profile (tut6 README) lists tile average IPU, global (between IPUs) and host
    # exchange and sync cycles, each with its % of the total.
    dev, g = small(tiles=2, num_ipus=2)
    a = g.add_variable(ipu.FLOAT, [8], "a")
    b = g.add_variable(ipu.FLOAT, [8], "b")
    c = g.add_variable(ipu.FLOAT, [8], "c")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 1)  # same IPU as a
    g.set_tile_mapping(c, 2)  # the other IPU
    s = g.add_host_to_device_fifo("in", ipu.FLOAT, 8)
    eng = ipu.Engine(g, ipu.Sequence(ipu.Copy(s, a), ipu.Copy(a, b), ipu.Copy(a, c)))
    eng.load(dev)
    eng.connect_stream("in", np.ones(8, np.float32))
    eng.run()
    steps = {st.name: st for st in eng.trace.steps}
    summary = eng.trace.summary()
    assert summary["host_exchange_cycles"] == steps["StreamCopy in -> a"].exchange_cycles
    assert summary["ipu_exchange_cycles"] == steps["Copy a -> b"].exchange_cycles > 0
    assert summary["global_exchange_cycles"] == steps["Copy a -> c"].exchange_cycles > 0
    out = io.StringIO()
    eng.print_profile_summary(out)
    total = summary["total_cycles"]
    line = next(x for x in out.getvalue().splitlines() if "global exchange cycles" in x)
    g_cycles = summary["global_exchange_cycles"]
    assert line.split(":")[1].split() == [f"{g_cycles:,.1f}", f"({100 * g_cycles / total:.1f}%",
                                          "of", "total)"]


def test_the_external_sync_is_of_the_ipus_a_copy_joins():
    from ipukit import cost

    t = ipu.IPUModel(num_ipus=8, tiles_per_ipu=1).create_device().target
    g = ipu.Graph(t)
    v = g.add_variable(ipu.FLOAT, [8], "v")
    for q in range(8):
        g.set_tile_mapping(v[q], q)
    near = ipu.Copy(v[0], v[1])  # joins IPUs 0 and 1
    wide = ipu.Copy(v[:4], v[4:])  # joins all 8
    eng = ipu.Engine(g, ipu.Sequence(near, wide))
    eng.load(ipu.Device(t))
    eng.run()
    _, a, b = eng.trace.executed_steps()
    assert a.ipus == (0, 1) and b.ipus == tuple(range(8))
    # 15 ns per hop, there and back, at 1.33 GHz: 1 hop for 2 IPUs, 3 hops for 8
    assert a.sync_cycles == cost.global_sync_cycles(t, 2) == math.ceil(15e-9 * 1.33e9 * 2)
    assert b.sync_cycles == t.global_sync_cycles == math.ceil(15e-9 * 1.33e9 * 3 * 2)


def test_a_tile_memory_given_a_function_calls_it_once_when_first_read():
    """compile's deferred liveness analysis: the categories and the liveness come from one
    call, made at the first read of either, never at construction."""
    calls = []

    def analyse():
        calls.append(1)
        return {"variables": np.array([3, 4]), "vertex code": np.array([0, 8])}, "live"

    mem = ipu.TileMemory(analyse, 10, remote={"b": 5})
    assert calls == [] and mem.streaming_memory == 5
    assert mem.total.tolist() == [3, 12] and mem.over_full() == [(1, 12)]
    assert mem.liveness == "live" and mem.worst(1, "variables") == [(1, 4)]
    assert calls == [1]
    given = ipu.TileMemory({"variables": np.array([7])}, 10)  # categories given: no call
    assert given.total.tolist() == [7] and given.liveness is None
