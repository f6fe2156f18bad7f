import os
import subprocess
import sys

import numpy as np
import pytest

import ipukit as ipu
from ipukit import backend

from .helpers import SumVertex, small


def python_with(env_value, code="import ipukit"):
    env = {**os.environ, "IPUKIT_BACKEND": env_value}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)


def test_numpy_is_the_default_and_to_numpy_passes_arrays_through():
    if os.environ.get("IPUKIT_BACKEND", "numpy") == "numpy":
        assert backend.name() == "numpy"
    a = np.arange(3)
    assert backend.to_numpy(a) is a


def test_an_unknown_backend_is_named():
    r = python_with("tpu")
    assert r.returncode != 0 and "IPUKIT_BACKEND='tpu' is not a backend" in r.stderr


@pytest.mark.skipif(backend.cupy_available(), reason="CuPy is usable here")
def test_asking_for_cupy_without_a_gpu_explains_why():
    r = python_with("cupy")
    assert r.returncode != 0 and "IPUKIT_BACKEND=cupy was requested but" in r.stderr
    assert "IPUKIT_BACKEND=numpy" in r.stderr
    r = python_with("auto", "from ipukit import backend; print(backend.name())")
    assert r.returncode == 0 and r.stdout.strip() == "numpy"


@pytest.mark.skipif(not backend.cupy_available(), reason="needs CuPy and a CUDA GPU")
def test_cupy_backend_gives_numpy_results():
    backend.use("cupy")
    try:
        dev, g = small(tiles=4)
        x = g.add_variable(ipu.FLOAT, [8, 16], "x")
        out = g.add_variable(ipu.FLOAT, [8], "out")
        g.set_tile_mapping(x, 0)
        g.set_tile_mapping(out, 1)
        cs = g.add_compute_set("sum")
        for i in range(8):
            g.add_vertex(cs, SumVertex, {"x": x[i], "out": out[i]}, tile=i % 4)
        g.create_host_write("x", x)
        g.create_host_read("out", out)
        eng = ipu.Engine(g, ipu.Execute(cs))
        eng.load(dev)
        data = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
        eng.write_tensor("x", data)
        eng.run()
        got = eng.read_tensor("out")
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, data.sum(-1), rtol=1e-5, atol=1e-5)
    finally:
        backend.use("numpy")


# -- host inputs on a device backend: a fake CuPy that, like CuPy, refuses NumPy operands ----
class Dev(np.ndarray):
    """A 'device' array: ufuncs (``@``, ``+``, ``exp``...) refuse a host ndarray operand,
    as CuPy does ("Argument 'a' has incorrect type ... got numpy.ndarray")."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(type(a) is np.ndarray and a.ndim for a in inputs):
            raise TypeError(f"{ufunc.__name__}: got numpy.ndarray (host) with a device array")
        plain = [a.view(np.ndarray) if isinstance(a, Dev) else a for a in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(o.view(np.ndarray) for o in kwargs["out"])
        r = getattr(ufunc, method)(*plain, **kwargs)
        return r.view(Dev) if isinstance(r, np.ndarray) else r


class FakeCupy:
    """NumPy's functions on Dev arrays; a host ndarray argument is refused, as in CuPy
    ("Unsupported type <class 'numpy.ndarray'>"), except by ``asarray``."""

    def __getattr__(self, name):
        f = getattr(np, name)
        if isinstance(f, (type, np.ufunc)) or not callable(f):
            return f

        def call(*args, **kwargs):
            if name != "asarray" and any(type(a) is np.ndarray for a in args):
                raise TypeError(f"{name}: unsupported type numpy.ndarray")
            r = f(*args, **kwargs)
            return r.view(Dev) if isinstance(r, np.ndarray) else r
        return call


def test_layers_optimisers_and_sharded_ops_take_host_arrays_on_a_device_backend(monkeypatch):
    """Found on an H100 (issue 17's GPU check): nn layers, the optimisers and the sharded
    ops are documented with NumPy inputs, which CuPy refused. They now move host inputs to
    the backend (nn, sharded) or keep host parameters on the host (optim)."""
    from ipukit.parallel import nn, optim, sharded  # noqa: PLC0415

    monkeypatch.setattr(backend, "xp", FakeCupy())
    with pytest.raises(TypeError):  # the fake refuses mixing, as CuPy does
        backend.xp.asarray(np.ones(2)) + np.ones(2)
    net = nn.Sequential(nn.Dense(3, 4, rng=0), nn.ReLU(), nn.Dense(4, 2, rng=1))
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)
    y, cache = net.forward(x)
    loss, _ = nn.SoftmaxCrossEntropy().forward(y, np.array([0, 1, 1, 0, 1]))
    dx = net.backward(np.ones((5, 2), np.float32), cache)  # a host gradient too
    assert type(y) is Dev and type(dx) is Dev and dx.shape == (5, 3)
    w0, b0, w1, b1 = (net.params[k].view(np.ndarray) for k in
                      ("0.weight", "0.bias", "2.weight", "2.bias"))
    np.testing.assert_allclose(y.view(np.ndarray), np.maximum(x @ w0 + b0, 0) @ w1 + b1,
                               rtol=1e-6)
    assert np.isfinite(float(loss))
    p = {"w": np.array([1.0, -2.0])}  # host parameters stay host arrays, updated in place
    optim.Adam(lr=0.1).step(p, {"w": backend.xp.asarray(np.array([0.5, -3.0]))})
    assert type(p["w"]) is np.ndarray and np.allclose(p["w"], [0.9, -1.9])
    adj, mask = sharded.local_indices(np.array([0, 3, 5]), 1, 3)
    assert type(adj) is Dev and adj.tolist() == [0, 0, 2] and mask.tolist() == [0, 1, 1]
    log = sharded.CollectiveLog(2)
    parts = log.broadcast(np.array([1.0, 2.0]), "host gradient")
    assert all(type(q) is Dev for q in parts)
