"""Layers with explicit backward: gradients checked against finite differences (float64)."""

import numpy as np
import pytest

from ipukit import backend
from ipukit.errors import IpuError
from ipukit.parallel import nn


def numeric_grad(f, x, eps=1e-6):
    """Central differences of f() in every element of x (a host or device array), on the host."""
    g = np.zeros(x.shape)
    for i in np.ndindex(x.shape):
        old = float(x[i])
        x[i] = old + eps
        up = f()
        x[i] = old - eps
        down = f()
        x[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


def check_layer(layer, x, rtol=1e-6, atol=1e-8):
    """Loss = sum(y * w) for a fixed random w; compare dx and every weight gradient."""
    rng = np.random.default_rng(7)
    y, _ = layer.forward(x)
    w = rng.normal(size=y.shape)

    def loss():
        return float((backend.to_numpy(layer.forward(x)[0]) * w).sum())

    layer.zero_grad()
    _, cache = layer.forward(x)
    dx = layer.backward(w, cache)
    np.testing.assert_allclose(dx, numeric_grad(loss, x), rtol=rtol, atol=atol)
    for name, p in layer.params.items():
        np.testing.assert_allclose(layer.grads[name], numeric_grad(loss, p), rtol=rtol,
                                   atol=atol, err_msg=name)


def test_dense_gradients():
    check_layer(nn.Dense(4, 3, rng=1, dtype="float64"),
                np.random.default_rng(0).normal(size=(5, 4)))


def test_relu_gradients_away_from_zero():
    x = np.random.default_rng(0).normal(size=(3, 4))
    x[np.abs(x) < 0.1] = 0.5
    check_layer(nn.ReLU(), x)


def test_conv_gradients():
    check_layer(nn.Conv2D(2, 3, 3, rng=1, dtype="float64"),
                np.random.default_rng(0).normal(size=(2, 2, 6, 5)))


def test_maxpool_and_flatten_gradients():
    x = np.random.default_rng(0).normal(size=(2, 3, 4, 6))
    check_layer(nn.MaxPool2D(), x)
    check_layer(nn.Flatten(), x)


def test_sequential_gradients_and_names():
    net = nn.Sequential(nn.Conv2D(1, 2, 3, rng=1, dtype="float64"), nn.MaxPool2D(), nn.ReLU(),
                        nn.Flatten(), nn.Dense(8, 3, rng=2, dtype="float64"))
    check_layer(net, np.random.default_rng(0).normal(size=(2, 1, 6, 6)))
    assert list(net.params) == ["0.weight", "0.bias", "4.weight", "4.bias"]


def test_conv_matches_direct_loops():
    conv = nn.Conv2D(2, 3, 3, rng=3, dtype="float64")
    x = np.random.default_rng(1).normal(size=(2, 2, 5, 6))
    w, b = (backend.to_numpy(conv.params[k]) for k in ("weight", "bias"))
    ref = np.zeros((2, 3, 3, 4))
    for n in range(2):
        for o in range(3):
            for i in range(3):
                for j in range(4):
                    ref[n, o, i, j] = (x[n, :, i:i + 3, j:j + 3] * w[o]).sum() + b[o]
    np.testing.assert_allclose(conv.forward(x)[0], ref, rtol=1e-12)
    assert conv.out_shape(x.shape) == ref.shape


def test_maxpool_matches_direct_max():
    x = np.random.default_rng(2).normal(size=(2, 3, 4, 6))
    ref = np.array([[[[x[n, c, 2 * i:2 * i + 2, 2 * j:2 * j + 2].max() for j in range(3)]
                      for i in range(2)] for c in range(3)] for n in range(2)])
    np.testing.assert_array_equal(nn.MaxPool2D().forward(x)[0], ref)


def test_softmax_cross_entropy_value_and_gradient():
    loss = nn.SoftmaxCrossEntropy()
    logits = np.array([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]])
    labels = np.array([2, 1])
    value, cache = loss.forward(logits, labels)
    # -log softmax([1,2,3,4])[2] = 1.4401897 (golden case 9), and log(4) for uniform logits
    assert float(value) == pytest.approx((1.4401897 + np.log(4)) / 2, abs=1e-7)
    d = loss.backward(cache)

    def f():
        return float(loss.forward(logits, labels)[0])

    np.testing.assert_allclose(d, numeric_grad(f, logits), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("labels, message", [
    (np.array([0, -1]), "labels hold -1, outside 0..3"),  # -1 would pick the last class
    (np.array([4, 0]), "labels hold 4, outside 0..3"),
    (np.array([0.0, 1.0]), "integer class indices.*float64"),
    (np.array([True, False]), "integer class indices.*bool"),
    (np.array([0, 1, 2]), r"labels must be 2 integer class indices .*got \(3,\)"),
])
def test_softmax_cross_entropy_rejects_bad_labels(labels, message):
    with pytest.raises(IpuError, match=message):
        nn.SoftmaxCrossEntropy().forward(np.zeros((2, 4)), labels)


def test_out_shape_checks_the_input_width():
    assert nn.Dense(4, 3).out_shape((5, 4)) == (5, 3)
    with pytest.raises(IpuError, match=r"Dense\(4, 3\) expects \(batch, 4\) inputs, got "
                       r"shape \(5, 7\)"):
        nn.Dense(4, 3).out_shape((5, 7))
    assert nn.Conv2D(2, 3, 3).out_shape((1, 2, 6, 5)) == (1, 3, 4, 3)
    with pytest.raises(IpuError, match=r"Conv2D\(2, 3, 3\) expects \(batch, 2, H, W\)"):
        nn.Conv2D(2, 3, 3).out_shape((1, 1, 6, 6))
    with pytest.raises(IpuError, match="H, W >= 3"):
        nn.Conv2D(2, 3, 3).out_shape((1, 2, 2, 6))


def test_gradients_accumulate_across_backward_calls():
    layer = nn.Dense(3, 2, rng=0, dtype="float64")
    x = np.ones((4, 3))
    _, cache = layer.forward(x)
    layer.backward(np.ones((4, 2)), cache)
    layer.backward(np.ones((4, 2)), cache)
    np.testing.assert_array_equal(layer.grads["bias"], [8.0, 8.0])
    layer.zero_grad()
    np.testing.assert_array_equal(layer.grads["bias"], [0.0, 0.0])


def test_defaults_float32_pytorch_init_and_flops():
    d = nn.Dense(100, 10, rng=0)
    assert d.params["weight"].dtype == np.float32
    assert np.abs(d.params["weight"]).max() <= 0.1  # U(-1/sqrt(100), 1/sqrt(100))
    assert np.abs(d.params["weight"]).max() > 0.09
    assert d.flops((8, 100)) == (2 * 8 * 100 * 10, 4 * 8 * 100 * 10)
    conv = nn.Conv2D(1, 10, 5)
    assert conv.flops((4, 1, 28, 28))[0] == 2 * 4 * 10 * 24 * 24 * 25
    net = nn.Sequential(conv, nn.MaxPool2D(), nn.ReLU(), nn.Flatten())
    assert net.out_shape((4, 1, 28, 28)) == (4, 1440)
    n = 4 * 10 * 24 * 24  # max-pool reads n values, ReLU n / 4
    assert net.flops((4, 1, 28, 28))[0] == conv.flops((4, 1, 28, 28))[0] + n + n // 4


def test_runs_on_cupy():
    pytest.importorskip("cupy")
    if not backend.cupy_available():
        pytest.skip("no CUDA GPU")
    backend.use("cupy")
    try:
        net = nn.Sequential(nn.Conv2D(1, 2, 3, rng=1), nn.MaxPool2D(), nn.Flatten(),
                            nn.Dense(8, 3, rng=2))
        x = backend.asarray(np.ones((2, 1, 6, 6), dtype=np.float32))
        y, cache = net.forward(x)
        dx = net.backward(y, cache)
        assert type(dx).__module__.startswith("cupy")
    finally:
        backend.use("numpy")


def test_calling_a_layer_is_its_forward_output():
    # Keras and PyTorch layers are called: layer(x); here the forward's output, no cache
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    net = nn.Sequential(nn.Dense(3, 4, rng=0), nn.ReLU(), nn.Dense(4, 2, rng=1))
    np.testing.assert_array_equal(net(x), net.forward(x)[0])
    np.testing.assert_array_equal(nn.ReLU()(x), np.maximum(x, 0))
