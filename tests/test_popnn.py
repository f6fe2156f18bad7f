"""popnn.non_linearity and calc_loss against NumPy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.poplibs import popnn, poputil


def make(g, values, name, dtype=ipu.FLOAT):
    values = np.asarray(values, dtype)
    t = g.add_variable(dtype, values.shape, name)
    poputil.map_tensor_linearly(g, t, 1, 1)
    g.set_initial_value(t, values)
    return t


# poplibs include/popnn/NonLinearityDef.hpp gives the formulas; lib/popnn/NonLinearity.cpp
# subtracts the max only for SOFTMAX_STABLE and SOFTMAX_SCALED (isStableAlgorithm), and
# SOFTMAX_SCALED's rows sum to SOFTMAX_SCALING = 62000 (lib/popnn/NonLinearityInternal.hpp).
NON_LINEARITIES = ("RELU", "SIGMOID", "TANH", "HARD_SIGMOID", "GELU", "SWISH", "SOFTMAX",
                   "SOFTMAX_STABLE", "SOFTMAX_SCALED")


def run_non_linearities(x, tiles=3):
    dev = ipu.IPUModel(tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
    t = make(g, x, "x")
    prog = ipu.Sequence()
    outs = {nl: popnn.non_linearity(g, getattr(popnn.NonLinearityType, nl), t, prog)
            for nl in NON_LINEARITIES}
    for nl, o in outs.items():
        g.create_host_read(nl, o)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    return {nl: eng.read_tensor(nl) for nl in outs}


@pytest.mark.parametrize("tiles", [1, 3, 5])
def test_non_linearities(tiles):
    x = np.random.default_rng(tiles).normal(size=(4, 7)).astype(np.float32) * 3
    got = run_non_linearities(x, tiles)
    e = np.exp(x - x.max(1, keepdims=True))
    phi = 0.5 * (1 + np.tanh(x * 0.7978845608 * (1 + 0.044715 * x * x)))
    want = {"RELU": np.maximum(x, 0), "SIGMOID": 1 / (1 + np.exp(-x)), "TANH": np.tanh(x),
            "HARD_SIGMOID": np.maximum(0, np.minimum(1, 0.2 * x + 0.5)), "GELU": x * phi,
            "SWISH": x / (1 + np.exp(-x)), "SOFTMAX": np.exp(x) / np.exp(x).sum(1, keepdims=True),
            "SOFTMAX_STABLE": e / e.sum(1, keepdims=True),
            "SOFTMAX_SCALED": 62000 * e / e.sum(1, keepdims=True)}
    for nl in want:
        np.testing.assert_allclose(got[nl], want[nl], rtol=1e-5, atol=1e-6, err_msg=nl)


def test_plain_softmax_does_not_subtract_the_max():
    x = np.array([[1.0, 2.0, 100.0]], np.float32)  # exp(100) overflows float32
    with np.errstate(over="ignore", invalid="ignore"):
        got = run_non_linearities(x, tiles=2)
    assert np.isnan(got["SOFTMAX"][0, 2])  # inf * (1 / inf), as PopLibs' fast softmax
    e = np.exp(x - 100)
    np.testing.assert_allclose(got["SOFTMAX_STABLE"], e / e.sum(), rtol=1e-6,
                               atol=np.finfo(np.float32).tiny)  # CUDA flushes subnormals
    assert popnn.SOFTMAX_SCALING == 62000.0
    np.testing.assert_allclose(got["SOFTMAX_SCALED"].sum(), 62000.0, rtol=1e-6)


@pytest.mark.parametrize("loss_type", [popnn.CROSS_ENTROPY_LOSS, popnn.SUM_SQUARED_LOSS])
def test_calc_loss_accumulates_num_correct(loss_type):
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(5), size=6).astype(np.float32)
    labels = np.array([0, 1, 2, 3, 4, 0], np.uint32)
    dev = ipu.IPUModel(tiles_per_ipu=3).create_device()
    g = ipu.Graph(dev.target)
    probs, expected = make(g, p, "p"), make(g, labels, "y", ipu.UNSIGNED_INT)
    loss, delta = make(g, np.zeros(6), "loss"), make(g, np.zeros((6, 5)), "delta")
    num_correct = make(g, [3], "n", ipu.UNSIGNED_INT)
    prog = ipu.Sequence(popnn.calc_loss(g, probs, expected, loss, delta, num_correct,
                                        loss_type))
    for name, t in (("loss", loss), ("delta", delta), ("n", num_correct)):
        g.create_host_read(name, t)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    onehot = np.eye(5, dtype=np.float32)[labels]
    np.testing.assert_allclose(eng.read_tensor("delta"), p - onehot, rtol=1e-6)
    want = (-np.log(p[np.arange(6), labels]) if loss_type == popnn.CROSS_ENTROPY_LOSS
            else 0.5 * ((p - onehot) ** 2).sum(1))
    np.testing.assert_allclose(eng.read_tensor("loss"), want, rtol=1e-5)
    assert eng.read_tensor("n")[0] == 3 + (p.argmax(1) == labels).sum()


# poplibs include/popops/EncodingConstants.hpp: MASKED_LABEL_CODE 0xFFFFFFFFU;
# include/popnn/Loss.hpp: masked labels "will not contribute to loss calculation" nor
# accuracy; tests/popnn/LossTest.cpp: a masked row's delta is 0; lib/popnn/codelets/
# CalcAccuracy.cpp skips them and is instantiated for unsigned int and int labels.
@pytest.mark.parametrize("label_type", [ipu.UNSIGNED_INT, ipu.INT])
def test_calc_loss_skips_masked_labels(label_type):
    assert popnn.MASKED_LABEL_CODE == 0xFFFFFFFF
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.3, 0.5]], np.float32)
    masked = np.uint32(popnn.MASKED_LABEL_CODE).astype(np.dtype(label_type))  # -1 as INT
    labels = np.array([0, masked, 2], np.dtype(label_type))
    dev = ipu.IPUModel(tiles_per_ipu=2).create_device()
    g = ipu.Graph(dev.target)
    probs, expected = make(g, p, "p"), make(g, labels, "y", label_type)
    loss, delta = make(g, np.ones(3), "loss"), make(g, np.ones((3, 3)), "delta")
    num_correct = make(g, [0], "n", ipu.UNSIGNED_INT)
    prog = ipu.Sequence(popnn.calc_loss(g, probs, expected, loss, delta, num_correct))
    for name, t in (("loss", loss), ("delta", delta), ("n", num_correct)):
        g.create_host_read(name, t)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    np.testing.assert_allclose(eng.read_tensor("loss"), [-np.log(0.7), 0, -np.log(0.5)],
                               rtol=1e-6)
    want_delta = p - np.eye(3, dtype=np.float32)[[0, 0, 2]]
    want_delta[1] = 0
    np.testing.assert_allclose(eng.read_tensor("delta"), want_delta, rtol=1e-6)
    assert eng.read_tensor("n")[0] == 2  # the masked row (arg-max 1) is not counted


def test_calc_loss_shape_errors_name_tensors():
    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=1).create_device().target)
    probs, y = make(g, np.zeros((2, 3)), "probs"), make(g, [0, 1, 2], "y", ipu.UNSIGNED_INT)
    loss, delta = make(g, np.zeros(2), "loss"), make(g, np.zeros((2, 3)), "delta")
    n = make(g, [0], "n", ipu.UNSIGNED_INT)
    with pytest.raises(ipu.IpuError, match="expected 'y' \\(3,\\)"):
        popnn.calc_loss(g, probs, y, loss, delta, n, popnn.CROSS_ENTROPY_LOSS)
    with pytest.raises(ipu.IpuError, match="unknown non-linearity"):
        popnn.non_linearity(g, "GELU_NOPE", probs, ipu.Sequence())


# poplibs lib/popnn/NonLinearity.cpp softmaxImpl (non-in-place nonLinearity): for the stable
# variants popops::reduce MAX, popops::sub (a new tensor), for SOFTMAX_SCALED
# addInPlace(log(SOFTMAX_SCALING)), then expInPlace (SOFTMAX: popops::exp, a new tensor);
# popops::reduce ADD into FLOAT; invInPlace; for SOFTMAX_SCALED mulInPlace(SOFTMAX_SCALING);
# for HALF a cast of the inverse sums; mulInPlace of the rows ("invScale"). No divide.
SOFTMAX_STEPS = {
    "SOFTMAX": ["UnaryOp EXPONENT", "Reduce ADD", "UnaryOpInPlace INVERSE",
                "BinaryOpInPlace MULTIPLY"],
    "SOFTMAX_STABLE": ["Reduce MAX", "BinaryOp SUBTRACT", "UnaryOpInPlace EXPONENT",
                       "Reduce ADD", "UnaryOpInPlace INVERSE", "BinaryOpInPlace MULTIPLY"],
    "SOFTMAX_SCALED": ["Reduce MAX", "BinaryOp SUBTRACT", "BroadcastScalarInPlace ADD",
                       "UnaryOpInPlace EXPONENT", "Reduce ADD", "UnaryOpInPlace INVERSE",
                       "BroadcastScalarInPlace MULTIPLY", "BinaryOpInPlace MULTIPLY"]}


def _op(vertex_type: str) -> str:
    """'popops::BinaryOp1DInPlace<MULTIPLY,float>' -> 'BinaryOpInPlace MULTIPLY'."""
    kind, args = vertex_type.removeprefix("popops::").split("<", 1)
    for form in ("2DData", "1D", "2D"):
        kind = kind.replace(form, "")
    return f"{kind} {args.split(',')[0]}"


@pytest.mark.parametrize("nl", list(SOFTMAX_STEPS))
@pytest.mark.parametrize("dtype", [ipu.FLOAT, ipu.HALF])
def test_softmax_is_poplibs_sequence_of_popops_ops(nl, dtype):
    # rows of 6 on 4 tiles (each row on one tile: one-stage reduces), so one compute set
    # per op, in softmaxImpl's order; the values are NumPy's softmax
    dev = ipu.IPUModel(tiles_per_ipu=4).create_device()
    g = ipu.Graph(dev.target)
    x = np.random.default_rng(5).normal(size=(8, 6)).astype(np.float32) * 4
    t = g.add_variable(dtype, x.shape, "x")
    poputil.map_tensor_linearly(g, t, 6, 6)
    g.set_initial_value(t, x.astype(dtype))
    prog = ipu.Sequence()
    p = popnn.non_linearity(g, getattr(popnn.NonLinearityType, nl), t, prog, "sm")
    g.create_host_read("p", p)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    steps = [s for s in eng.trace.steps if s.kind == "compute"]
    want = SOFTMAX_STEPS[nl] if dtype == ipu.FLOAT else [
        *SOFTMAX_STEPS[nl][:-1], "Cast float", SOFTMAX_STEPS[nl][-1]]
    assert [_op(next(iter(s.vertex_types))) for s in steps] == want
    assert all(len(s.vertex_types) == 1 for s in steps)
    assert steps[-1].name == "sm/invScale"
    assert not any("DIVIDE" in v for s in steps for v in s.vertex_types)
    sums = next(s for s in steps if s.name == "sm/sum")
    kind = "float" if dtype == ipu.FLOAT else "half"
    assert set(sums.vertex_types) == {f"popops::Reduce<ADD,{kind}>"}  # into float
    xs = x.astype(dtype).astype(np.float64)
    e = np.exp(xs - xs.max(1, keepdims=True))
    scale = 62000.0 if nl == "SOFTMAX_SCALED" else 1.0
    tol = 1e-6 if dtype == ipu.FLOAT else 2e-3
    np.testing.assert_allclose(eng.read_tensor("p") / scale, e / e.sum(1, keepdims=True),
                               rtol=tol * 10, atol=tol)


def test_relu_gradient_is_one_multivertex_on_a_tile_of_one_region():
    # lib/popnn/NonLinearity.cpp nonLinearityInputGradient: NonLinearityGrad1D (a
    # MultiVertex) where a tile holds one contiguous region of out, else NonLinearityGrad2D
    dev = ipu.IPUModel(tiles_per_ipu=3).create_device()
    g = ipu.Graph(dev.target)
    x = np.linspace(-3, 3, 16).astype(np.float32)
    out, dy = make(g, np.maximum(x, 0), "out"), make(g, x * 10, "dy")
    for t in (out, dy):  # tiles 0 and 2 one region each, tile 1 two
        poputil.set_tile_mapping(g, t, [[(0, 6)], [(6, 10), (12, 16)], [(10, 12)]])
    prog = ipu.Sequence()
    first = len(g.v_cs)
    grad = popnn.non_linearity_input_gradient(g, popnn.NonLinearityType.RELU, out, dy, prog)
    on = {t: [c.__name__ for c, tt in zip(g.v_cls[first:], g.v_tile[first:]) if tt == t]
          for t in (0, 1, 2)}
    assert on == {0: ["ReluGrad"], 1: ["ReluGrad2D"] * 2, 2: ["ReluGrad"]}
    assert issubclass(popnn.ReluGrad, ipu.MultiVertex)
    assert not issubclass(popnn.ReluGrad2D, ipu.MultiVertex)
    g.create_host_read("grad", grad)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    np.testing.assert_array_equal(eng.read_tensor("grad"), x * 10 * (x > 0))


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 7), classes=st.integers(1, 5), tiles=st.integers(1, 5),
       virtual=st.booleans(), signed=st.booleans())
def test_calc_loss_adds_the_vertices_that_checked_add_vertex_calls_add(
        batch, classes, tiles, virtual, signed):
    """calc_loss adds its first per-sample vertex checked and the rest in one go, and maps
    the correct flags in one call: the same vertices (class, fields, tile, state) and
    mapping as add_vertex and set_tile_mapping per sample give."""
    def build(bulk: bool):
        root = ipu.Graph(ipu.IPUModel(num_ipus=2, tiles_per_ipu=tiles).create_device().target)
        g = root.create_virtual_graph(tiles, 2 * tiles) if virtual else root
        label_type = ipu.INT if signed else ipu.UNSIGNED_INT
        probs = make(g, np.full((batch, classes), 0.5), "p")
        expected = make(g, np.zeros(batch), "y", label_type)
        n = make(g, [0], "n", ipu.UNSIGNED_INT)
        loss, delta = make(g, np.zeros(batch), "loss"), make(g, np.zeros((batch, classes)), "d")
        if bulk:
            popnn.calc_loss(g, probs, expected, loss, delta, n)
            return root
        cls = popnn.CalcLossInt if signed else popnn.CalcLoss  # (the general path)
        tile = poputil.tile_of_elements(g, delta).reshape(batch, classes)[:, 0]
        correct = g.add_variable(ipu.UNSIGNED_INT, [batch], "calcLoss/correct")
        for b in range(batch):
            g.set_tile_mapping(correct[b], int(tile[b]))
        cs = g.add_compute_set("calcLoss/LossLayer")
        for b in range(batch):
            g.add_vertex(cs, cls, {"probs": probs[b], "label": expected.flatten()[b],
                                   "loss": loss.flatten()[b], "delta": delta[b],
                                   "correct": correct[b]}, tile=int(tile[b]))
        return root

    got, want = build(True), build(False)  # (the sample vertices are the first ones)
    ids = range(batch)
    for column in ("v_cs", "v_cls", "v_tile", "v_perf"):
        assert [getattr(got, column)[i] for i in ids] == [getattr(want, column)[i] for i in ids]
    assert [dict(got.v_state[i]) for i in ids] == [dict(want.v_state[i]) for i in ids]
    for a, b in zip(got.v_conn[:batch], want.v_conn[:batch]):
        assert list(a) == list(b)
        for f in a:
            assert (a[f].shape, a[f].idx.tolist(), a[f].name) == \
                (b[f].shape, b[f].idx.tolist(), b[f].name)
    pools = [g.pools[ipu.UNSIGNED_INT] for g in (got, want)]  # the correct flags' mapping
    for pool in pools:
        pool._resolve()
    assert pools[0]._cuts.tolist() == pools[1]._cuts.tolist()
    assert pools[0]._cut_tiles.tolist() == pools[1]._cut_tiles.tolist()
