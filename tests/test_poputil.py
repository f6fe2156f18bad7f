"""poputil.map_tensor_linearly against poplibs' calcLinearTileMapping rules; the kit's
codelets marked vertex_separable proven so."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.compile import VertexGroup
from ipukit.poplibs import poplin, popnn, popops, poputil
from ipukit.poplibs.expr import Exp, _1, _2


def graph(tiles):
    return ipu.Graph(ipu.IPUModel(tiles_per_ipu=tiles).create_device().target)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 500), tiles=st.integers(1, 9), grain=st.integers(1, 5),
       min_el=st.integers(0, 40))
def test_linear_mapping_covers_in_order_in_grains(n, tiles, grain, min_el):
    g = graph(tiles)
    t = g.add_variable(ipu.FLOAT, [n], "t")
    poputil.map_tensor_linearly(g, t, min_el, grain)
    tile = poputil.tile_of_elements(g, t)
    assert (tile >= 0).all() and (np.diff(tile) >= 0).all()  # every element, tiles in order
    counts = np.bincount(tile, minlength=tiles)
    used = counts[counts > 0]
    # every tile but the last used one holds whole grains, and at most ceil(grains/tiles)+1
    assert all(c % grain == 0 for c in used[:-1])
    grains = -(-n // grain)
    assert used.max() <= (-(-grains // tiles) + 1) * grain or min_el > grain
    if min_el and len(used) > 1:
        assert used[:-1].min() >= min(min_el, n) - grain


def test_default_is_128_bytes_and_vector_width():
    g = graph(1472)
    t = g.add_variable(ipu.FLOAT, [100], "t")
    poputil.map_tensor_linearly(g, t)
    # 100 floats = 50 grains of 2; at least 32 floats (16 grains) per tile: 3 tiles
    assert g.get_tile_mapping(t)[:4] == [[(0, 32)], [(32, 66)], [(66, 100)], []]
    assert poputil.vector_width(ipu.HALF) == 4 and poputil.vector_width(ipu.FLOAT) == 2


def test_check_mapped_names_the_operand():
    g = graph(2)
    t = g.add_variable(ipu.FLOAT, [3], "weights")
    g.set_tile_mapping(t[0], 1)
    with pytest.raises(ipu.TileMappingError, match="'weights'.*2 unmapped"):
        poputil.check_mapped(g, t, "add", "operand 1")


def _per_element(g, t):
    """The tile of each element, read interval by interval from get_tile_mapping."""
    out = np.full(t.num_elements(), -1)
    for tile, intervals in enumerate(g.get_tile_mapping(t, throw_on_incomplete=False)):
        for b, e in intervals:
            out[b:e] = tile
    return out


@settings(max_examples=60, deadline=None)
@given(shape=st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5)),
       maps=st.lists(st.tuples(st.integers(0, 124), st.integers(0, 124), st.integers(0, 7)),
                     max_size=6),
       seed=st.integers(0, 2**16), virtual=st.booleans())
def test_tile_of_elements_of_views_matches_the_mapping(shape, maps, seed, virtual):
    # transposes, broadcasts and gathers are read in address order (a few runs); the tiles
    # must be the ones get_tile_mapping gives element by element, unmapped ones -1
    g = ipu.Graph(ipu.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device().target)
    a, b, c = shape
    v = g.add_variable(ipu.FLOAT, shape, "v")
    g.add_variable(ipu.FLOAT, [7], "after")
    flat = v.flatten()
    for lo, hi, tile in maps:
        lo, hi = sorted((lo % (a * b * c), hi % (a * b * c + 1)))
        g.set_tile_mapping(flat[lo:hi], tile)
    vg = g.create_virtual_graph(0, 8) if virtual else g
    rng = np.random.default_rng(seed)
    views = [v, v.dim_shuffle([2, 0, 1]), v.dim_shuffle([2, 1, 0]), v[0].transpose(),
             v.reshape([a * b, c]).transpose().broadcast([2, c, a * b]),
             v.slice([0, 0, 0], [a, b, max(1, c - 1)]).dim_shuffle([2, 1, 0]),
             v.expand(1).broadcast([a, 3, b, c]),
             poputil.take(flat, rng.permutation(a * b * c)),
             poputil.take(flat, rng.integers(0, a * b * c, 150))]
    for t in views:
        assert np.array_equal(poputil.tile_of_elements(vg, t), _per_element(vg, t)), t.shape


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), maps=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40),
                                                     st.integers(0, 7)), max_size=6),
       lo=st.integers(0, 39), virtual=st.sampled_from([None, 0, 4]))
def test_tile_runs_are_the_firsts_of_the_tile_of_each_element(n, maps, lo, virtual):
    """tile_runs reads a run of addresses' tiles as pieces: where each run of elements on
    one tile begins and that tile, as firsts of tile_of_elements gives them; None for a
    view that is no run, an element unmapped or on another virtual graph's tile."""
    root = ipu.Graph(ipu.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device().target)
    g = root if virtual is None else root.create_virtual_graph(virtual, virtual + 4)
    v = root.add_variable(ipu.FLOAT, [n], "v")
    root.set_tile_mapping(v, 0 if virtual is None else virtual)
    for a, b, tile in maps:
        a, b = sorted((a % n, b % (n + 1)))
        root.set_tile_mapping(v[a:b], tile)
    root.add_variable(ipu.FLOAT, [3], "after")
    reverse = poputil.take(v, np.arange(n)[::-1])  # (no run of addresses when n > 1)
    for t in (v, v[lo % n:], reverse)[:2 + (n > 1)]:
        got = poputil.tile_runs(g, t)
        tiles = _per_element(root, t) - (virtual or 0)
        if t is reverse or not ((tiles >= 0) & (tiles < g.target.num_tiles)).all():
            assert got is None
            continue
        first = poputil.firsts(poputil.tile_of_elements(g, t))
        assert got[0].tolist() == first.tolist()
        assert got[1].tolist() == poputil.tile_of_elements(g, t)[first].tolist()


def test_linear_tiles_are_those_map_tensor_linearly_gives():
    g = graph(6)
    for n, min_el, grain in ((100, None, None), (37, 1, 2), (5, 8, 4), (0, 1, 1)):
        t = g.add_variable(ipu.FLOAT, [n], f"t{n}")
        want = poputil.linear_tiles(g, t, min_el, grain)
        poputil.map_tensor_linearly(g, t, min_el, grain)
        assert np.array_equal(want, _per_element(g, t))


@pytest.mark.parametrize("virtual", [False, True])
def test_map_copies_maps_each_copy_as_like(virtual):
    """_map_copies (the emulator's stash FIFOs) reads like's mapping as runs: each copy is
    mapped as like is, element by element; a view or an unmapped like takes the element
    path, whose errors name the tensor."""
    root = ipu.Graph(ipu.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device().target)
    g = root.create_virtual_graph(4, 8) if virtual else root
    like = g.add_variable(ipu.FLOAT, [3, 5], "like")
    poputil._map_elements(g, like, np.array([0, 0, 1, 3, 3, 2, 2, 2, 1, 1, 0, 3, 3, 3, 1]))
    for src in (like, like.transpose(), like[1:]):
        t = g.add_variable(ipu.FLOAT, (3,) + src.shape, "fifo")
        poputil._map_copies(g, t, src, 3)
        want = np.tile(poputil.tile_of_elements(g, src), 3)
        assert np.array_equal(poputil.tile_of_elements(g, t), want)
    hole = g.add_variable(ipu.FLOAT, [4], "hole")
    g.set_tile_mapping(hole[:2], 1)
    with pytest.raises(ipu.TileMappingError):
        poputil._map_copies(g, g.add_variable(ipu.FLOAT, [2, 4], "fifo2"), hole, 2)


def test_tile_of_elements_of_another_graphs_tensor_raises():
    dev = ipu.IPUModel(tiles_per_ipu=4).create_device()
    g, other = ipu.Graph(dev.target), ipu.Graph(dev.target)
    mine, theirs = (x.add_variable(ipu.FLOAT, [4], n) for x, n in ((g, "mine"), (other, "t")))
    g.set_tile_mapping(mine, 1)
    other.set_tile_mapping(theirs, 2)
    with pytest.raises(ipu.TileMappingError, match="'t' belongs to another graph"):
        poputil.tile_of_elements(g, theirs)
    assert poputil.tile_of_elements(g, mine).tolist() == [1, 1, 1, 1]


# -- vertex_separable: the kit's codelets that skip the engine's first-run check -----------
def _groups(node):
    """The VertexGroups of a compiled program tree."""
    if isinstance(node, VertexGroup):
        yield node
    elif isinstance(node, tuple | list):
        for child in node:
            yield from _groups(child)
    elif dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            yield from _groups(getattr(node, f.name))


def _separable_battery(g, prog, rng):
    """Every marked codelet, through the PopLibs op that adds it, on random data spread
    over the tiles (several vertices of one class and shape in a compute set)."""
    def const(shape, dtype=ipu.FLOAT, low=-2, high=2):
        t = g.add_constant(dtype, shape, rng.uniform(low, high, shape).astype(dtype))
        poputil.map_tensor_linearly(g, t, 1, 1)
        return t

    a, b, c = const([6, 10]), const([10, 7]), const([6, 7])
    out = {"matmul": poplin.mat_mul(g, a, b, prog),
           "matmul half": poplin.mat_mul(g, const([6, 10], ipu.HALF), const([10, 7], ipu.HALF),
                                         prog),
           "add": popops.map(g, _1 + _2, [a, a], prog),
           "exp": popops.map(g, Exp(_1) * _2 - 0.5, [c, c], prog),
           "cast": popops.cast(g, c, ipu.INT, prog),
           "sum rows": popops.reduce(g, c, [1], popops.Operation.ADD, prog),
           "max cols": popops.reduce(g, c, [0], popops.Operation.MAX, prog),
           "relu grad": popnn.non_linearity_input_gradient(g, popnn.NonLinearityType.RELU,
                                                           c, const([6, 7]), prog)}
    inplace, acc = const([6, 7]), const([7])
    popops.map(g, _1 * _2, [inplace, c], prog, inplace=True)
    popops.reduce_with_output(g, c, acc, [0], popops.Operation.ADD, prog, update=True)
    zeroed = const([5, 3])
    popops.zero(g, zeroed, prog)
    out.update({"inplace": inplace, "update": acc, "zeroed": zeroed})
    for lt, dtype in ((popnn.CROSS_ENTROPY_LOSS, ipu.UNSIGNED_INT), (popnn.SUM_SQUARED_LOSS,
                                                                     ipu.INT)):
        probs = popnn.non_linearity(g, popnn.NonLinearityType.SOFTMAX, c, prog)
        labels = g.add_constant(dtype, [6], rng.integers(0, 7, 6))
        poputil.map_tensor_linearly(g, labels, 1, 1)
        loss, delta = (g.add_variable(ipu.FLOAT, s, lt) for s in ([6], [6, 7]))
        correct = g.add_variable(ipu.UNSIGNED_INT, [1], lt + " correct")
        for t in (loss, delta, correct):
            poputil.map_tensor_linearly(g, t, 1, 1)
        prog.add(popnn.calc_loss(g, probs, labels, loss, delta, correct, lt))
        out.update({f"{lt} loss": loss, f"{lt} delta": delta})
    # AddCount: calc_loss adds one per call, so two side by side here
    flags = g.add_constant(ipu.UNSIGNED_INT, [2, 5], rng.integers(0, 2, (2, 5)))
    totals = g.add_constant(ipu.UNSIGNED_INT, [2], [3, 4])
    cs = g.add_compute_set("counts")
    for i in range(2):
        g.set_tile_mapping(flags[i], i)
        g.set_tile_mapping(totals[i], i)
        g.add_vertex(cs, popnn.AddCount, {"correct": flags[i], "total": totals[i]}, tile=i)
    prog.add(ipu.Execute(cs))
    return {**out, "counts": totals}


def _marked_codes():
    """The code of every marked ``compute`` of the codelets defined so far."""
    todo, codes = [ipu.Vertex], set()
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if getattr(cls.compute, "vertex_separable", False):
            codes.add(cls.compute.__code__)
    return codes


def test_every_separable_codelet_gives_one_vertex_alone_what_it_gives_batched():
    # the proof behind the engine skipping its axis check for marked codelets: each runs
    # batched (its group of several vertices as one array operation) and one vertex at a
    # time (per_vertex=True), on random data, and every output agrees
    results, batched = [], set()
    for per_vertex in (False, True):
        dev = ipu.IPUModel(tiles_per_ipu=4).create_device()
        g, prog = ipu.Graph(dev.target), ipu.Sequence()
        outs = _separable_battery(g, prog, np.random.default_rng(7))
        for name, t in outs.items():
            g.create_host_read(name, t)
        eng = ipu.Engine(g, prog, per_vertex=per_vertex)
        eng.load(dev)
        eng.run()
        results.append({name: eng.read_tensor(name) for name in outs})
        batched |= {gr.cls.compute.__code__ for gr in _groups(eng.executable.programs)
                    if len(gr.vertex_ids) > 1}
    for name, value in results[0].items():
        assert np.any(value != 0) or name == "zeroed", name  # data that tells
        np.testing.assert_allclose(value, results[1][name], rtol=1e-3 if "half" in name
                                   else 1e-6, err_msg=name)
    assert _marked_codes() <= batched  # every marked codelet, several vertices at once
    assert len(batched) >= 6  # MatMulPartial, map, reduce, ReluGrad, CalcLoss, AddCount


def test_a_learner_codelet_overriding_a_separable_one_is_still_checked():
    class SummedReluGrad(popnn.ReluGrad):  # x.sum() without axis=-1: mixes vertices
        def compute(self):
            self.in_grad[...] = self.out_grad.sum() * (self.out > 0)

    dev = ipu.IPUModel(tiles_per_ipu=4).create_device()
    g = ipu.Graph(dev.target)
    x = g.add_constant(ipu.FLOAT, [4, 3], np.arange(1.0, 13.0).reshape(4, 3), "x")
    y = g.add_variable(ipu.FLOAT, [4, 3], "y")
    cs = g.add_compute_set("grad")
    for i in range(4):
        for t in (x, y):
            g.set_tile_mapping(t[i], i)
        g.add_vertex(cs, SummedReluGrad, {"out": x[i], "out_grad": x[i], "in_grad": y[i]},
                     tile=i)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    assert getattr(popnn.ReluGrad.compute, "vertex_separable", False)
    with pytest.raises(ipu.CodeletError, match=r"SummedReluGrad.*field 'in_grad'.*axis=-1"):
        eng.run()  # caught on the first run


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 59), st.integers(0, 59),
                                st.integers(0, 7)), min_size=1, max_size=12),
       virtual=st.booleans())
def test_kept_tiles_follow_every_change_of_the_mapping(steps, virtual):
    # tile_of_elements keeps its answers; after any mapping (of the tensor, of its
    # neighbours, of a new variable) each answer must still be what the mapping says
    g = ipu.Graph(ipu.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device().target)
    vg = g.create_virtual_graph(0, 8) if virtual else g
    v = g.add_variable(ipu.FLOAT, [6, 10], "v")
    w = g.add_variable(ipu.FLOAT, [60], "w")
    g.set_tile_mapping(v, 0)
    views = [v, v.transpose(), v[2:4], v.broadcast([2, 6, 10]), w[10:50],
             poputil.take(w, np.arange(59, -1, -3))]
    for kind, lo, hi, tile in steps:
        lo, hi = sorted((lo, hi + 1))
        if kind == 0:
            g.set_tile_mapping(v.flatten()[lo:hi], tile)
        elif kind == 1:
            g.set_tile_mapping(w[lo:hi], tile)
        elif kind == 2:  # a new variable, mapped: nothing asked about changes
            g.set_tile_mapping(g.add_variable(ipu.FLOAT, [hi - lo]), tile)
        for t in views + [v.transpose(), w[10:50]]:  # the same views, and new objects
            got = poputil.tile_of_elements(vg, t)
            assert np.array_equal(got, _per_element(vg, t)), (t.name, kind)
            assert not got.flags.writeable


def test_kept_tile_answers_do_not_keep_old_mappings_alive():
    # tile_of_elements keeps its answers per pool, but not the step function each was read
    # from: every mapping change makes a new one, and keeping them all cost 550 MiB at the
    # emulated embedding's CI size
    import gc
    import weakref

    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=4).create_device().target)
    pool, olds = None, []
    for i in range(6):
        t = g.add_variable(ipu.FLOAT, [64], f"t{i}")
        poputil.map_tensor_linearly(g, t)
        assert (poputil.tile_of_elements(g, t) >= 0).all()  # an answer kept
        g.set_tile_mapping(t[:8], 3)  # a new step function, painted
        assert (poputil.tile_of_elements(g, t)[:8] == 3).all()  # the answer is not stale
        pool = g.pools[t.dtype]
        olds.append(weakref.ref(pool._cut_tiles))  # (what that answer was read from)
    gc.collect()
    assert sum(r() is not None for r in olds) <= 1  # only the one in use may live


def test_paused_gc_pauses_the_collector_only_while_building_and_restores_it():
    import gc

    seen = []
    build = poputil.paused_gc(lambda: seen.append(gc.isenabled()))
    assert gc.isenabled()
    build()
    assert seen == [False] and gc.isenabled()
    with pytest.raises(ZeroDivisionError):  # restored when the build raises
        poputil.paused_gc(lambda: 1 / 0)()
    assert gc.isenabled()
    gc.disable()  # a caller that paused it keeps it paused
    try:
        build()
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()
    # PopLibs' bulk vertex builders pause it
    assert popops.add_per_tile_vertices.__wrapped__ and poplin._add_blocks.__wrapped__


@settings(max_examples=80, deadline=None)
@given(tiles=st.lists(st.integers(-1, 9), min_size=1, max_size=2 * poputil.FEW_TILES + 2),
       virtual=st.sampled_from([None, 0, 4]))
def test_on_graph_in_python_is_numpys_answer(tiles, virtual):
    """_on_graph looks at a few tiles in plain Python, at many with NumPy: both say whether
    every tile (-1: unmapped) is one of the graph's."""
    root = ipu.Graph(ipu.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device().target)
    g = root if virtual is None else root.create_virtual_graph(virtual, virtual + 4)
    lo, hi = g._offset, g._offset + g.target.num_tiles
    arr = np.array(tiles, np.intp)
    want = bool(((arr >= lo) & (arr < hi)).all())
    assert poputil._on_graph(g, arr) is want
    wide = np.tile(arr, poputil.FEW_TILES // arr.size + 1)  # the same tiles, NumPy's path
    assert wide.size > poputil.FEW_TILES and poputil._on_graph(g, wide) is want


@given(begins=st.lists(st.integers(0, 50), min_size=1, max_size=20), extra=st.integers(0, 9))
def test_run_lengths_are_numpys_diff_with_the_end_appended(begins, extra):
    begins = np.array(sorted(begins), np.intp)
    end = int(begins[-1]) + extra
    got = poputil.run_lengths(begins, end)
    want = np.diff(begins, append=end)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
