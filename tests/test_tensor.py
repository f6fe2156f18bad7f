import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.tensor import RegionList, index_runs, runs

from .helpers import small


def addresses(shape):
    """A fresh graph's first variable has addresses 0..n-1: the NumPy reference."""
    _, g = small()
    t = g.add_variable(ipu.FLOAT, shape, "t")
    return t, np.arange(int(np.prod(shape))).reshape(shape)


@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data())
def test_views_select_the_same_elements_as_numpy(shape, data):
    t, ref = addresses(tuple(shape))
    i = data.draw(st.integers(0, shape[0] - 1))
    b = data.draw(st.integers(0, shape[0]))
    e = data.draw(st.integers(b, shape[0]))
    assert np.array_equal(t[i].idx, ref[i])
    assert np.array_equal(t.slice(b, e).idx, ref[b:e])
    assert np.array_equal(t.flatten().idx, ref.reshape(-1))
    assert np.array_equal(t.reshape([-1, shape[-1]]).idx, ref.reshape(-1, shape[-1]))
    assert np.array_equal(t.dim_shuffle(list(reversed(range(len(shape))))).idx, ref.T)
    assert np.array_equal(ipu.concat([t, t[b:e]]).idx, np.concatenate([ref, ref[b:e]]))


def test_tensors_iterate_over_their_rows():
    t, ref = addresses((2, 3))
    a, b = t.transpose()[:2]
    assert len(t) == 2 and np.array_equal(b.idx, ref.T[1])
    assert [row.name for row in t] == ["t[0]", "t[1]"]


def test_per_dimension_slice_as_tut1():
    t, ref = addresses((4, 4))
    s = t.slice([1, 1], [2, 4])
    assert s.shape == (1, 3) and np.array_equal(s.idx, ref[1:2, 1:4])
    assert t.transpose().shape == (4, 4)


def test_views_are_named_after_their_source():
    t, _ = addresses((4, 4))
    assert t[1].name == "t[1]"
    assert t.slice([1, 1], [2, 4]).name == "t[1:2, 1:4]"
    assert t.transpose().flatten().name == "t.transpose().flatten()"


@pytest.mark.parametrize("make, word", [
    (lambda t: t.slice(2, 9), "outside"),
    (lambda t: t.slice([0], [1]), "needs 2"),
    (lambda t: t.reshape([5]), "reshape"),
    (lambda t: t[::2], "step"),
    (lambda t: t[7], "shape"),
    (lambda t: t.slice(0, 1, dim=3), "dimensions 0..1"),
    (lambda t: t.dim_shuffle([0, 0]), "dimShuffle"),
    (lambda t: t.expand(5), "expand"),
    (lambda t: t.broadcast([3, 3]), "broadcast"),
    (lambda t: t[0][0][0], "scalar"),
])
def test_bad_views_name_the_tensor(make, word):
    t, _ = addresses((4, 4))
    with pytest.raises(ipu.IpuError, match=word):
        make(t)


def test_concat_of_different_types_is_refused():
    _, g = small()
    a = g.add_variable(ipu.FLOAT, [2], "a")
    b = g.add_variable(ipu.INT, [2], "b")
    with pytest.raises(ipu.GraphConnectionError, match="'b' is int"):
        ipu.concat([a, b])


def test_concat_of_single_elements_says_to_slice():
    t, _ = addresses((4,))
    with pytest.raises(ipu.IpuError, match=r"v\[i:i \+ 1\]"):
        ipu.concat([t[0], t[1]])


def test_unsupported_type():
    _, g = small()
    with pytest.raises(ipu.IpuError, match="unsupported element type"):
        g.add_variable(np.float64, [2], "d")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), st.integers(1, 5),
                          st.integers(1, 8), st.integers(0, 2)), min_size=1, max_size=6))
def test_a_region_lists_runs_are_those_of_its_addresses(regions):
    """``runs`` of a RegionList from its regions (no address array) equals the runs of its
    addresses: regions that meet joined into one run, empty ones left out."""
    _, g = small()
    rl = RegionList(g, ipu.FLOAT, [(o, (a, b), (c, 1)) if d else (o, (a * b,), (1,))
                                   for o, a, b, c, d in regions], "r")
    want = index_runs(rl.idx.reshape(-1), rl.num_elements())[:2]
    got = runs(rl)
    assert [x.tolist() for x in got] == [x.tolist() for x in want]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6)), min_size=1, max_size=8))
def test_a_region_list_of_1d_runs_gives_the_runs_of_its_addresses(regions):
    """A RegionList of 1-D regions of stride 1 (a pipeline cycle's joined sends), whose runs
    ``runs`` reads in plain Python: the runs of its addresses, those that meet joined (in
    order only: a region that meets an earlier one further back starts a run), empty ones
    left out, as the address arrays' runs and their types."""
    _, g = small()
    rl = RegionList(g, ipu.FLOAT, [(o, (n,), (1,)) for o, n in regions], "r")
    want = index_runs(rl.idx.reshape(-1), rl.num_elements())[:2]
    got = runs(rl)
    assert [x.tolist() for x in got] == [x.tolist() for x in want]
    assert [x.dtype for x in got] == [np.dtype(np.intp)] * 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40) | st.just(2**31 - 9), st.integers(1, 6)),
                max_size=8), st.integers(0, 9), st.sampled_from([np.int32, np.int64]))
def test_index_runs_are_the_runs_of_consecutive_addresses_within_rows(pieces, row, dtype):
    """index_runs against a loop: a run ends where the next address is not one more, or
    where a row of ``row`` positions ends."""
    addrs = [a for start, n in pieces for a in range(start, start + n)]
    begins, lengths, firsts_ = [], [], []
    for i, a in enumerate(addrs):
        if i and a == addrs[i - 1] + 1 and i % max(row, 1):
            lengths[-1] += 1
        else:
            begins.append(a), lengths.append(1), firsts_.append(i)
    b, n, f = index_runs(np.array(addrs, dtype), row)
    assert (b.tolist(), n.tolist(), f.tolist()) == (begins, lengths, firsts_)
    assert b.dtype == np.int64


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=60),
       st.sampled_from([np.int32, np.int64, np.intp]))
def test_unique_is_numpys_unique_by_a_sort(values, dtype):
    from ipukit.tensor import unique

    x = np.array(values, dtype)
    got, want = unique(x), np.unique(x)
    assert got.dtype == want.dtype and np.array_equal(got, want)
