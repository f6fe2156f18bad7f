"""The Poplar tutorial ports print what Graphcore's C++ tutorials print (golden cases)."""

import subprocess
import sys

import numpy as np
import pytest

import ipukit as ipu
from ipukit.tutorials import mnist_regression, tut1, tut2, tut3, tut4, tut5, tut6


def test_tut1(capsys):
    assert tut1.main([]) == 0
    out = capsys.readouterr()  # PrintTensor writes to stderr, as Poplar does
    assert out.out == (
        "Running program\n"
        "Program complete\n\nh3 data:\n  0 0 0 0 \n  0 1 1.5 2 \n  0 0 0 0 \n  0 0 0 0 \n")
    assert out.err == (
        "v1-debug: [1.0000000 1.5000000 2.0000000 2.5000000]\n"
        "v2-debug: [1.0000000 1.5000000 2.0000000 2.5000000]\n"
        "v4-0: [0 1 2 3 4 5 6 7 8 9]\n"
        "v4-1: [10 11 12 13 14 15 16 17 18 19]\n")


def test_tut2(capsys):
    assert tut2.main([]) == 0
    out = capsys.readouterr().err
    for name, rows in (("v3", [[5, 4.5], [4, 3.5]]), ("v4", [[9, 7.5], [6, 4.5]]),
                       ("v5", [[5, 3.5], [5, 3.5]])):
        text = "\n".join(f"  [{a:.7f} {b:.7f}]" for a, b in rows)
        assert f"{name}: [\n{text}\n]\n" in out


def test_tut3(capsys):
    assert tut3.main([]) == 0
    assert "v2: [7.0000000 6.0000000 4.5000000 2.5000000]" in capsys.readouterr().err


def test_tut4_builds_two_matmuls_on_mk2():
    device = ipu.IPUModel().create_device()
    graph, prog, m5 = tut4.build(device)
    assert m5.shape == (900, 200) and device.target.num_tiles == 1472
    assert [cs.name for cs in graph.compute_sets] == ["m4/MatMul", "m4/Reduce",
                                                      "m5/MatMul", "m5/Reduce"]


def test_tut4_runs_and_prints_the_profile(capsys):
    # Graphcore's test asserts "Program complete" and "Memory Usage:"
    assert tut4.main([]) == 0
    out = capsys.readouterr().out
    assert "Program complete" in out and "Memory Usage:" in out
    assert all(name in out for name in ("m4/MatMul", "m4/Reduce", "m5/MatMul", "m5/Reduce"))
    # instances add up over the two matmuls' compute sets (each ran once)
    device = ipu.IPUModel().create_device()
    graph, _, _ = tut4.build(device)
    matmul_vertices = sum(c is not None and c.__name__.startswith("MatMulPartial")
                          for c in graph.v_cls)
    assert f"MatMulPartial ({matmul_vertices:,} instances)" in out


def test_tut5(capsys):
    assert tut5.main(["40", "50"]) == 0
    out = capsys.readouterr().out
    assert "Multiplying matrix of size 40x50 by vector of size 50\n" in out
    assert out.endswith("Multiplication result OK\n")


@pytest.mark.parametrize("version,split,line,worst", [
    ("ipu2", 7, "colsAxisSplit=7, total cost=3996 (compute cost=3696, exchange cost=143, "
     "reduce exchange cost=49, reduce compute cost=108)", 53807),
    ("ipu1", 5, "colsAxisSplit=5, total cost=4751 (compute cost=4410, exchange cost=200, "
     "reduce exchange cost=45, reduce compute cost=96)", 64373),
])
def test_tut6_split_estimate_golden(capsys, version, split, line, worst):
    target = ipu.IPUModel(version).create_device().target
    assert tut6.calc_optimal_col_axis_split(target, 10000, 1000) == split
    out = capsys.readouterr().out
    assert out == f"Best split chosen:\n{line}\nWorst cost seen: {worst}\n"
    assert tut6.estimate_cycles(target, 10000, 1000, 1) == {"ipu2": 7139, "ipu1": 7141}[version]


def test_tut6_runs_and_profile_counts_vertex_estimates(capsys):
    assert tut6.main(["1000", "100", "--device", "model-ipu1"]) == 0
    out = capsys.readouterr().out
    assert "colsAxisSplit=7, total cost=154" in out and "Multiplication result OK" in out
    assert "Total compute cycles (excluding idle threads):" in out
    device, graph, prog = tut6.build(300, 40)
    capsys.readouterr()
    engine = ipu.Engine(graph, prog)
    engine.load(device)
    for name, n in (("inputVector", 40), ("inputMatrix", 12000)):
        engine.connect_stream(name, np.ones(n, np.float32))
    engine.connect_stream("out", np.zeros(300, np.float32))
    engine.run()
    split = tut6.calc_optimal_col_axis_split(device.target, 300, 40)
    bounds = [i * 40 // split for i in range(split + 1)]
    estimates = sum(300 * (5 + (e - b + 1) // 2) for b, e in zip(bounds, bounds[1:]) if e > b)
    estimates += 300 * (5 + (split + 1) // 2)  # the reduce vertices
    assert engine.trace.summary()["compute_cycles_excluding_idle"] == estimates


def _run_tut6(rows, cols, split, rng):
    device, graph, prog = tut6.build(rows, cols, split=split)
    matrix = rng.normal(size=(rows, cols)).astype(np.float32)
    vector = rng.normal(size=cols).astype(np.float32)
    out = np.zeros(rows, np.float32)
    engine = ipu.Engine(graph, prog)
    engine.load(device)
    for name, data in (("inputVector", vector), ("inputMatrix", matrix), ("out", out)):
        engine.connect_stream(name, data)
    engine.run()
    return out, matrix.astype(np.float64) @ vector, engine.trace


@pytest.mark.parametrize("split", [1, 3, 7, 40])  # 3 and 7 give pieces of unequal widths
def test_tut6_any_split_multiplies_correctly(capsys, split):
    out, expected, trace = _run_tut6(60, 40, split, np.random.default_rng(split))
    assert capsys.readouterr().out == ""  # a given split skips the search and its printout
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    bounds = [i * 40 // split for i in range(split + 1)]
    mul = next(s for s in trace.steps if s.name == "mulCS")
    assert mul.vertex_types["DotProductVertex"] == (
        60 * split, sum(60 * (5 + (e - b + 1) // 2) for b, e in zip(bounds, bounds[1:])))


def test_tut6_split_none_is_the_estimated_best(capsys):
    graphs = {}
    for split in (None, 8):
        _, graph, prog = tut6.build(1000, 100, split=split)
        steps = ipu.compile_graph(graph, [prog]).steps
        graphs[split] = [(s.name, s.cycles, s.vertex_types) for s in steps]
    assert "colsAxisSplit=8, total cost=147" in capsys.readouterr().out  # Mk2 1000x100
    assert graphs[None] == graphs[8]


@pytest.mark.parametrize("split", [0, 41, 2.5, "4"])
def test_tut6_bad_split_is_named(split):
    with pytest.raises(ipu.IpuError, match=f"colsAxisSplit={split!r} must be a whole number "
                                           "from 1 to the matrix's 40 columns"):
        tut6.build(10, 40, split=split)


def test_tut6_estimate_parts_sum_to_the_golden_line(capsys):
    target = ipu.IPUModel("ipu2").create_device().target
    parts = tut6.estimate_parts(target, 10000, 1000, 7)
    assert parts == {"compute": 3696, "exchange": 143, "reduce_exchange": 49,
                     "reduce_compute": 108}
    assert tut6.estimate_cycles(target, 10000, 1000, 7) == sum(parts.values()) == 3996


def numpy_sgd_correct(steps, num_images):
    """The demo's per-sample SGD in NumPy, cycling over the first ``num_images`` images:
    how many of the ``steps`` predictions (made before each update) are right."""
    data, labels = mnist_regression.load_images()
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1, (10, 784)).astype(np.float32)
    b = rng.normal(0, 1, (10, 1)).astype(np.float32)
    correct = 0
    for i in range(steps):
        x, label = data[i % num_images][:, None], labels[i % num_images]
        y = w @ x + b
        p = np.exp(y - y.max())
        p /= p.sum()
        correct += int(p.argmax() == label)
        p[label] -= 1
        b -= mnist_regression.ETA * p
        w -= mnist_regression.ETA * (p @ x.T)
    return correct


def test_mnist_regression_learns_like_numpy(capsys):
    lines = mnist_regression.train(epochs=1, percent=30)
    out = capsys.readouterr().out
    assert out.startswith("Epoch 1 (10%), accuracy ") and "Epoch 1 (100%), accuracy" in out
    ours = sum(acc for _, _, acc in lines) * 3  # each line covers 300 samples
    assert abs(ours - numpy_sgd_correct(3000, 3000)) <= 30  # within 1 point (floor of %)


def test_mnist_regression_cli_as_graphcores_test(monkeypatch, tmp_path):
    """Graphcore's test runs ``regression-demo 1 1.0`` (stderr merged) and expects
    ``Epoch`` and ``100%``. 1% of the bundled split is 100 images, under one batch of
    300: one run cycles the circular stream buffers three times."""
    monkeypatch.setenv("IPUKIT_DATA", str(tmp_path))  # no cached training set: the bundled
    assert len(mnist_regression.load_images()[0]) == 10_000  # 10,000-image test split
    run = subprocess.run(
        [sys.executable, "-m", "ipukit.tutorials.mnist_regression", "1", "1.0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert run.returncode == 0, run.stdout
    assert run.stdout.startswith("Using the IPU Model\nEpoch 1 (100%), accuracy ")
    accuracy = int(run.stdout.split("accuracy ")[1].split("%")[0])
    assert abs(accuracy - numpy_sgd_correct(300, 100) * 100 // 300) <= 1


@pytest.mark.parametrize("args, message", [(["1", "0.001"], "gives 0 images"),
                                           (["1", "200"], "percent from 0.01 to 100"),
                                           (["1", "abc"], "invalid float value")])
def test_mnist_regression_bad_arguments_are_named(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        mnist_regression.main(args)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_tut6_profile_matches_graphcores_ipu_model_within_10_percent(capsys):
    # graphcore/tutorials tutorials/poplar/tut6_matrix_vector_opt/README.md, `./tut6 10000
    # 1000` on the default model-ipu2 IPUModel, "Execution" section:
    #   Total cycles: 6,681,766; Tile average compute cycles (including idle threads):
    #   3,801.8; (excluding idle threads): 3,717.6; host exchange cycles: 6,663,550.8
    #   (99.7% of total)
    assert tut6.main(["10000", "1000"]) == 0
    out = capsys.readouterr().out
    lines = {line.split(":")[0].strip(): line.split(":", 1)[1].strip()
             for line in out.splitlines() if line.startswith("  ") and ":" in line}

    def value(label):
        return float(lines[label].split()[0].replace(",", ""))

    for label, published in (("Total cycles", 6_681_766),
                             ("Tile average host exchange cycles", 6_663_550.8),
                             ("Tile average compute cycles (including idle threads)", 3_801.8),
                             ("Tile average compute cycles (excluding idle threads)", 3_717.6)):
        assert abs(value(label) / published - 1) < 0.10, (label, value(label), published)
    assert lines["Tile average host exchange cycles"].endswith("(99.7% of total)")
    for label in ("IPU exchange", "global exchange", "sync"):
        assert f"Tile average {label} cycles" in lines
    assert lines["Tile average global exchange cycles"] == "0.0 (0.0% of total)"  # one IPU


def test_host_link_presets():
    # ipu1/ipu2 model the IPUModel (about 6 B/cycle, tut6 README); a Bow-2000's 4 IPUs
    # share its 100 GbE RoCE link to the host (Bow-2000 datasheet, Host-Link; Bow Pod DA
    # build guide: a 100GbE RoCEv2 NIC): 100e9 / 8 / 4 B/s each when all 4 stream.
    for version in ("ipu1", "ipu2"):
        assert ipu.IPUModel(version).create_device().target.host_link_bytes_per_cycle == 6.0
    bow = ipu.IPUModel("bow").create_device().target
    assert bow.host_link_bytes_per_cycle == pytest.approx(100e9 / 8 / 4 / 1.85e9)
    assert 1.68 < bow.host_link_bytes_per_cycle < 1.69
