"""popnn.non_linearity and calc_loss against NumPy."""

import numpy as np
import pytest

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
