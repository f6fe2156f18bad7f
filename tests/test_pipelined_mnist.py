"""PopTorch's pipelining tutorial on the bundled MNIST: accuracy, strategies, CLI."""

import argparse

import numpy as np
import pytest

from ipukit.data import load_mnist
from ipukit.examples import pipelined_mnist


def args(**kw):
    base = dict(strategy="pipelined", offload_optimiser=False, gradient_accumulation=10,
                device_iterations=2, batch_size=8, epochs=1, lr=0.001, seed=0)
    base.update(kw)
    return argparse.Namespace(**base)


def test_both_strategies_give_the_same_weights_pipelined_is_faster():
    d = load_mnist()
    x, y = pipelined_mnist.prepare(d.train_images[:320]), d.train_labels[:320]
    models = {}
    for strategy in ("pipelined", "sharded"):
        m = pipelined_mnist.build(strategy, args(strategy=strategy))
        models[strategy] = (m, m.run(x, y))
    (mp, rp), (ms, rs) = models["pipelined"], models["sharded"]
    for a, b in zip(mp.params.values(), ms.params.values()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(rp.losses, rs.losses)
    assert rp.cycles < rs.cycles
    assert rp.cycles == mp.cycles_per_run((1, 28, 28), 16) * 2  # 320 = 16 x 10 x 2
    assert mp.schedule.kind == "poptorch" and ms.schedule.kind == "sequential"
    # AdamW's state is on the IPUs unless offloaded
    assert rp.host_bytes == 0
    off = pipelined_mnist.build("pipelined", args(offload_optimiser=True))
    r = off.run(x, y)
    w = sum(a.nbytes for a in off.params.values())
    assert r.host_bytes == 2 * w
    assert max(m.optimizer for m in r.memory) == 0


def test_cli_reaches_90_percent_after_one_epoch(capsys):
    assert pipelined_mnist.main([]) == 0
    out = capsys.readouterr().out
    assert "10/10 [" in out
    line = next(s for s in out.splitlines() if s.startswith("Accuracy on 2000"))
    accuracy = float(line.split(":")[1].strip().rstrip("%"))
    assert accuracy >= 90.0
    times = {}
    for s in out.splitlines():
        if s.startswith("Simulated time per step"):
            times[s.split("(")[1].split(")")[0]] = float(s.split(":")[1].split()[0]
                                                          .replace(",", ""))
    assert times["pipelined"] < times["sharded"]


def test_cli_rejects_a_step_larger_than_the_data():
    with pytest.raises(SystemExit, match="one step takes"):
        pipelined_mnist.train(args(batch_size=1000, device_iterations=10))


@pytest.mark.parametrize("option, value, message", [
    ("--batch-size", "0", "0 must be at least 1"),
    ("--batch-size", "-1", "-1 must be at least 1"),
    ("--device-iterations", "0", "0 must be at least 1"),
    ("--gradient-accumulation", "-2", "-2 must be at least 1"),
    ("--epochs", "0", "0 must be at least 1"),
    ("--epochs", "1.5", "'1.5' is not an integer"),
])
def test_cli_rejects_bad_sizes(option, value, message, capsys):
    with pytest.raises(SystemExit) as exc:
        pipelined_mnist.main([option, value])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {option}: {message}" in err


@pytest.mark.parametrize("strategy", ["pipelined", "sharded"])
def test_cli_reports_a_count_poptorch_rejects_before_training(strategy, capsys):
    # Both strategies are timed, so PopTorch's rule (>= 2N-1 = 7) applies to both.
    rc = pipelined_mnist.main(["--strategy", strategy, "--gradient-accumulation", "3"])
    out, err = capsys.readouterr()
    assert rc == 2 and "Training on" not in out and "Traceback" not in err
    assert err.startswith("python -m ipukit.examples.pipelined_mnist: error: "
                          "poptorch.Options().Training.gradientAccumulation must be greater "
                          "than or equal to the number of pipeline stages (7)")
