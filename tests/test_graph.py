import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.graph import Pool, _paint

from .helpers import SumVertex, small


def test_tile_mapping_as_intervals_like_poplar():
    _, g = small(tiles=4)
    v = g.add_variable(ipu.FLOAT, [2, 3], "v")
    g.set_tile_mapping(v, 1)
    g.set_tile_mapping(v[1, 1:], 3)
    assert g.get_tile_mapping(v) == [[], [(0, 4)], [], [(4, 6)]]
    # mapping follows the view's element order
    assert g.get_tile_mapping(v.transpose()) == [[], [(0, 3), (4, 5)], [], [(3, 4), (5, 6)]]


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(0, 12),
                          st.integers(0, 3), st.booleans()), max_size=12),
       st.booleans())
def test_tile_mapping_equals_an_element_by_element_reference(ops, transposed):
    """Mappings interleaved with queries (the pool resolves them incrementally) agree with
    a per-element record where the last mapping of an element wins."""
    _, g = small(tiles=4)
    vs = [g.add_variable(ipu.FLOAT, [3, 4], f"v{i}") for i in range(3)]
    ref = [np.full(12, -1) for _ in vs]
    for var, a, b, tile, query in ops:
        a, b = min(a, b), max(a, b)
        g.set_tile_mapping(vs[var].flatten()[a:b], tile)
        ref[var][a:b] = tile
        if query:  # a query in between: the mapping so far is resolved
            g.get_tile_mapping(vs[var], throw_on_incomplete=False)
    for v, want in zip(vs, ref):
        t = v.transpose() if transposed else v
        want = want.reshape(3, 4).T.reshape(-1) if transposed else want
        got = np.full(12, -1)
        for tile, intervals in enumerate(g.get_tile_mapping(t, throw_on_incomplete=False)):
            for b, e in intervals:
                assert (got[b:e] == -1).all()  # each element on one tile
                got[b:e] = tile
        assert (got == want).all()
        if (want < 0).any():
            with pytest.raises(ipu.TileMappingError, match=re.escape(f"'{t.name}' has "
                               f"{int((want < 0).sum())} unmapped")):
                g.get_tile_mapping(t)


# poplar Graph::getTileMapping(t, throwOnIncompleteMapping = true) throws for a tensor with
# unmapped elements; poplibs lib/popops/ElementWise.cpp calls getTileMapping(t, false) for
# the mapping of what is mapped (tests/poputil/TileMappingTest.cpp: no throw once mapped).
def test_get_tile_mapping_of_an_incomplete_mapping_raises_unless_asked_not_to():
    _, g = small(tiles=4)
    v = g.add_variable(ipu.FLOAT, [2, 3], "half")
    g.set_tile_mapping(v[0], 2)
    with pytest.raises(ipu.TileMappingError, match=r"'half' has 3 unmapped elements "
                                                   r"\(first: \[1, 0\]\)"):
        g.get_tile_mapping(v)
    assert g.get_tile_mapping(v, throw_on_incomplete=False) == [[], [], [(0, 3)], []]
    assert g.get_tile_mapping(v[0]) == [[], [], [(0, 3)], []]  # the mapped part: no error


def test_tile_out_of_range_names_tensor_and_range():
    _, g = small(tiles=4)
    v = g.add_variable(ipu.FLOAT, [2], "weights")
    with pytest.raises(ipu.TileMappingError, match=r"tile 4 for tensor 'weights'.*0\.\.3"):
        g.set_tile_mapping(v, 4)
    cs = g.add_compute_set("cs")
    vx = g.add_vertex(cs, SumVertex)
    with pytest.raises(ipu.TileMappingError, match="SumVertex"):
        g.set_tile_mapping(vx, -1)


def test_connect_errors_name_vertex_field_and_tensor():
    _, g = small()
    cs = g.add_compute_set("sums")
    x = g.add_variable(ipu.FLOAT, [4], "x")
    i = g.add_variable(ipu.INT, [4], "ints")
    v = g.add_vertex(cs, SumVertex)
    with pytest.raises(ipu.GraphConnectionError, match="has no field 'y'.*x, out"):
        g.connect(v["y"], x)
    with pytest.raises(ipu.GraphConnectionError, match="'x' of vertex 0 .*'ints' is int"):
        g.connect(v["x"], i)
    with pytest.raises(ipu.GraphConnectionError, match=r"'out'.*scalar.*'x' has shape \(4,\)"):
        g.connect(v["out"], x)
    with pytest.raises(ipu.GraphConnectionError, match="subclass of ipu.Vertex"):
        g.add_vertex(cs, "SumVertex")


def test_state_fields_take_initial_values_only():
    class Counter(ipu.Vertex):
        n = ipu.State(ipu.INT)
        out = ipu.Output(ipu.INT)

    _, g = small()
    cs = g.add_compute_set("c")
    v = g.add_vertex(cs, Counter)
    x = g.add_variable(ipu.INT, [1], "x")
    with pytest.raises(ipu.GraphConnectionError, match="State"):
        g.connect(v["n"], x)
    with pytest.raises(ipu.GraphConnectionError, match="not State"):
        g.set_initial_value(v["out"], 3)
    g.set_initial_value(v["n"], 3)
    assert g.v_state[v.id]["n"] == 3


def test_streams_and_handles():
    _, g = small()
    s = g.add_host_to_device_fifo("in", ipu.FLOAT, 4)
    assert (s.name, s.n, s.to_device) == ("in", 4, True)
    with pytest.raises(ipu.StreamError, match="already exists"):
        g.add_device_to_host_fifo("in", ipu.FLOAT, 4)
    with pytest.raises(ipu.StreamError, match="positive"):
        g.add_device_to_host_fifo("out", ipu.FLOAT, 0)


def test_constants_need_the_right_number_of_values():
    _, g = small()
    with pytest.raises(ipu.IpuError, match="needs 4 values, got 3"):
        g.add_constant(ipu.FLOAT, [4], [1, 2, 3], "c")
    c = g.add_constant(ipu.FLOAT, [2, 2], 7.0, "sevens")
    assert np.array_equal(g.pools[ipu.FLOAT].variables[-1].values, np.full((2, 2), 7.0))
    assert c.shape == (2, 2)


def test_tensor_from_another_graph_is_refused():
    _, g1 = small()
    _, g2 = small()
    v = g1.add_variable(ipu.FLOAT, [1], "v")
    with pytest.raises(ipu.TileMappingError, match="another graph"):
        g2.set_tile_mapping(v, 0)


def test_vertices_and_bad_arguments_from_elsewhere_are_named():
    _, g1 = small()
    _, g2 = small()
    v2 = g2.add_vertex(g2.add_compute_set("cs"), SumVertex)
    with pytest.raises(ipu.GraphConnectionError, match="another graph"):
        g1.set_tile_mapping(v2, 0)
    with pytest.raises(ipu.GraphConnectionError, match="another graph"):
        g1.set_perf_estimate(v2, 3)
    with pytest.raises(ipu.GraphConnectionError, match="needs a vertex"):
        g2.set_perf_estimate("v", 3)
    with pytest.raises(ipu.GraphConnectionError, match=r"v\['name'\]"):
        g2.connect(v2, g2.add_variable(ipu.FLOAT, [1], "o"))
    x = g1.add_variable(ipu.FLOAT, [4], "x")
    with pytest.raises(ipu.IpuError, match="set_initial_value of 'x\\[1:3\\]'"):
        g1.set_initial_value(x[1:3], [1, 2, 3])
    with pytest.raises(ipu.IpuError, match="constant 'c'"):
        g1.add_constant(ipu.INT, [2], ["a", "b"], "c")


def test_vertex_fields_lists_what_each_vertex_on_a_tile_connects():
    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=2).create_device().target)
    x = g.add_variable(ipu.FLOAT, [10], "x")
    out = g.add_variable(ipu.FLOAT, [3], "out")
    for t in (x, out):
        g.set_tile_mapping(t, 0)
    cs = g.add_compute_set("cs")
    for (lo, hi), tile in (((0, 4), 1), ((4, 10), 1), ((0, 1), 0)):
        v = g.add_vertex(cs, SumVertex, {"x": x[lo:hi], "out": out[tile + (lo > 0)]})
        g.set_tile_mapping(v, tile)
    assert g.vertex_fields(1) == [{"x": 4, "out": 1}, {"x": 6, "out": 1}]
    assert g.vertex_fields(0) == [{"x": 1, "out": 1}]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 3)),
                         min_size=1, max_size=4), min_size=1, max_size=6))
def test_resolving_in_steps_gives_the_step_function_of_all_records_at_once(batches):
    """The pool repaints only the span that new mappings touch; between any batches the
    result is the step function one painting of every record so far gives (the same cuts,
    no cut where the tile does not change)."""
    pool, records = Pool(np.dtype(np.float32)), []
    for batch in batches:
        for a, b, tile in batch:
            a, b = min(a, b), max(a, b)
            pool.map(a, b - a, tile)
            records.append((a, b, tile))
        pool._resolve()
        cuts, tiles = _paint(*(np.array(r, np.int64) for r in zip(*records)))
        assert pool._cuts.tolist() == cuts.tolist()
        assert pool._cut_tiles.tolist() == tiles.tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3)), min_size=1,
                                   max_size=8), st.randoms(use_true_random=False),
                          st.integers(0, 30), st.booleans()), min_size=1, max_size=6))
def test_runs_covering_a_span_out_of_order_and_a_growing_top_resolve_as_painting(batches):
    """A tensor mapped by columns maps runs that cover its span out of order (sorted, not
    painted); a new variable's mapping at the top of the pool is written into the step
    function's buffer (not copied): both give the step function one painting gives."""
    pool, records, top = Pool(np.dtype(np.float32)), [], 0
    for runs, rng, at, on_top in batches:
        start = top if on_top else at
        begins = start + np.cumsum([0] + [n for n, _ in runs[:-1]])
        order = list(range(len(runs)))
        rng.shuffle(order)
        for i in order:
            pool.map(np.array([begins[i]]), np.array([runs[i][0]]), runs[i][1])
            records.append((int(begins[i]), int(begins[i]) + runs[i][0], runs[i][1]))
        pool._resolve()
        top = max(top, int(begins[-1]) + runs[-1][0])
        cuts, tiles = _paint(*(np.array(r, np.int64) for r in zip(*records)))
        assert pool._cuts.tolist() == cuts.tolist()
        assert pool._cut_tiles.tolist() == tiles.tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 3)),
                min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 45), st.integers(0, 12)), min_size=1, max_size=8))
def test_pieces_cut_runs_where_the_tile_changes(records, asked):
    # every address of every run asked about, in order, with its tile (-1: unmapped)
    pool, tile_of = Pool(np.dtype(np.float32)), np.full(64, -1)
    for a, b, tile in records:
        a, b = min(a, b), max(a, b)
        pool.map(a, b - a, tile)
        tile_of[a:b] = tile
    begins, lengths = (np.array(x, np.int64) for x in zip(*asked))
    run, start, end, tile = pool.pieces(begins, lengths)
    got = [(int(r), a, int(t)) for r, s, e, t in zip(run, start, end, tile) for a in range(s, e)]
    want = [(r, a, int(tile_of[a])) for r, (b, n) in enumerate(asked) for a in range(b, b + n)]
    assert got == want
    assert (end > start).all()  # no empty piece, and a run is cut only where the tile changes
    assert (tile[1:] != tile[:-1])[run[1:] == run[:-1]].all()
