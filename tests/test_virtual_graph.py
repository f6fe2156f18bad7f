"""``graph.create_virtual_graph``: Poplar's Graph::createVirtualGraph (relative tile ids,
tensors and vertices shared with the parent)."""

import numpy as np
import pytest

import ipukit as ipu
from ipukit.poplibs import poplin, popops, poputil

from .helpers import SumVertex


def two_ipus(tiles=4):
    dev = ipu.IPUModel(num_ipus=2, tiles_per_ipu=tiles).create_device()
    return dev, ipu.Graph(dev.target)


def test_tiles_are_relative_and_tensors_belong_to_the_parent():
    _, g = two_ipus()
    vg = g.create_virtual_graph(4, 8)  # IPU 1
    assert (vg.target.num_ipus, vg.target.num_tiles) == (1, 4)
    v = vg.add_variable(ipu.FLOAT, [3], "v")
    assert v.graph is g
    vg.set_tile_mapping(v[0], 0)
    vg.set_tile_mapping(v[1:], 3)
    assert g.get_tile_mapping(v)[4] == [(0, 1)] and g.get_tile_mapping(v)[7] == [(1, 3)]
    assert vg.get_tile_mapping(v) == [[(0, 1)], [], [], [(1, 3)]]
    w = g.add_variable(ipu.FLOAT, [2], "w")  # made on the parent, mapped by the child
    vg.set_tile_mapping(w, 1)
    assert g.get_tile_mapping(w)[5] == [(0, 2)]


def test_tile_out_of_virtual_range_names_tensor():
    _, g = two_ipus()
    vg = g.create_virtual_graph(0, 4)
    v = vg.add_variable(ipu.FLOAT, [2], "acts")
    with pytest.raises(ipu.TileMappingError, match=r"tile 4 for tensor 'acts'.*0\.\.3"):
        vg.set_tile_mapping(v, 4)
    other = g.add_variable(ipu.FLOAT, [2], "elsewhere")
    g.set_tile_mapping(other, 6)
    with pytest.raises(ipu.TileMappingError, match=r"'elsewhere'.*tile 6.*0\.\.3"):
        vg.get_tile_mapping(other)


@pytest.mark.parametrize("lo, hi", [(2, 6), (0, 9), (3, 3), (-1, 2)])
def test_bad_ranges_are_refused(lo, hi):
    _, g = two_ipus()
    with pytest.raises(ipu.TileMappingError, match="create_virtual_graph"):
        g.create_virtual_graph(lo, hi)


def test_whole_ipus_and_nested_virtual_graphs():
    dev = ipu.IPUModel(num_ipus=4, tiles_per_ipu=2).create_device()
    g = ipu.Graph(dev.target)
    pair = g.create_virtual_graph(4, 8)  # IPUs 2 and 3
    assert (pair.target.num_ipus, pair.target.tiles_per_ipu) == (2, 2)
    inner = pair.create_virtual_graph(2, 4)  # IPU 3 of the parent
    t = inner.add_variable(ipu.INT, [1], "t")
    inner.set_tile_mapping(t, 1)
    assert g.get_tile_mapping(t)[7] == [(0, 1)]


def test_vertices_and_poplibs_on_a_virtual_graph_run_in_the_parent_engine():
    dev, g = two_ipus()
    vg = g.create_virtual_graph(4, 8)
    x = vg.add_variable(ipu.FLOAT, [4], "x")
    vg.set_tile_mapping(x, 2)
    cs = vg.add_compute_set("sum")
    out = vg.add_variable(ipu.FLOAT, [], "out")
    vg.set_tile_mapping(out, 2)
    v = vg.add_vertex(cs, SumVertex, {"x": x, "out": out}, tile=2)
    assert g.v_tile[v.id] == 6
    rng = np.random.default_rng(0)
    a_val, b_val = rng.normal(size=(3, 5)), rng.normal(size=(5, 2))
    a = vg.add_constant(ipu.FLOAT, [3, 5], a_val, "a")
    b = vg.add_constant(ipu.FLOAT, [5, 2], b_val, "b")
    poputil.map_tensor_linearly(vg, a)
    poputil.map_tensor_linearly(vg, b)
    prog = ipu.Sequence()
    c = poplin.mat_mul(vg, a, b, prog, "c")
    d = popops.add(vg, c, 1.0, prog)
    prog.add(ipu.Execute(cs))
    g.create_host_read("d", d)
    g.create_host_read("out", out)
    g.create_host_write("x", x)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.write_tensor("x", np.arange(4.0))
    eng.run()
    np.testing.assert_allclose(eng.read_tensor("d"), a_val @ b_val + 1, rtol=1e-5)
    assert eng.read_tensor("out") == 6.0
    tiles = {int(tile) for tile in poputil.tile_of_elements(g, d)}
    assert tiles and tiles <= {4, 5, 6, 7}  # all on IPU 1
    step = next(s for s in eng.trace.steps if s.kind == "compute")
    assert step.tile_compute_cycles[:4].sum() == 0  # IPU 0 idle
