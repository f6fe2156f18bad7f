"""poputil.map_tensor_linearly against poplibs' calcLinearTileMapping rules."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.poplibs import poputil


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


def test_linear_tiles_are_those_map_tensor_linearly_gives():
    g = graph(6)
    for n, min_el, grain in ((100, None, None), (37, 1, 2), (5, 8, 4), (0, 1, 1)):
        t = g.add_variable(ipu.FLOAT, [n], f"t{n}")
        want = poputil.linear_tiles(g, t, min_el, grain)
        poputil.map_tensor_linearly(g, t, min_el, grain)
        assert np.array_equal(want, _per_element(g, t))


def test_tile_of_elements_of_another_graphs_tensor_raises():
    dev = ipu.IPUModel(tiles_per_ipu=4).create_device()
    g, other = ipu.Graph(dev.target), ipu.Graph(dev.target)
    mine, theirs = (x.add_variable(ipu.FLOAT, [4], n) for x, n in ((g, "mine"), (other, "t")))
    g.set_tile_mapping(mine, 1)
    other.set_tile_mapping(theirs, 2)
    with pytest.raises(ipu.TileMappingError, match="'t' belongs to another graph"):
        poputil.tile_of_elements(g, theirs)
    assert poputil.tile_of_elements(g, mine).tolist() == [1, 1, 1, 1]
