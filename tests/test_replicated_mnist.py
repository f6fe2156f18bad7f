"""The replicated MNIST CLI: one throughput table, real replicated training."""

import math

import numpy as np
import pytest

from ipukit.cost import IPU_MODEL_HOST_LINK_BYTES_PER_CYCLE
from ipukit.data import load_mnist
from ipukit.examples import replicated_mnist
from ipukit.examples.pipelined_mnist import prepare


def parse(out: str) -> list[dict]:
    lines = out.splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith("replicas IPUs")) + 1
    rows = []
    for s in lines[start:]:
        if s.startswith("Wall-clock"):
            break
        r, ipus, di, ga, rts, samples, sync, ar, state, _, tput = s.split()
        rows.append(dict(r=int(r), ipus=int(ipus), di=int(di), ga=int(ga), rts=rts == "yes",
                         samples=int(samples.replace(",", "")), sync=float(sync[:-1]),
                         allreduce=float(ar[:-1]), state=int(state.replace(",", "")),
                         tput=float(tput.replace(",", ""))))
    return rows


def test_table_shows_the_trade_offs(capsys):
    assert replicated_mnist.main(["--replicas", "2", "--device-iterations", "10",
                                  "--epochs", "0"]) == 0
    rows = parse(capsys.readouterr().out)
    assert len(rows) == 6
    by = {(r["r"], r["di"], r["ga"], r["rts"]): r for r in rows}
    for r in rows:  # PopTorch's batch arithmetic; 4 IPUs per replica
        assert r["samples"] == 8 * r["ga"] * r["di"] * r["r"] and r["ipus"] == 4 * r["r"]
    one, many = by[(2, 1, 10, False)], by[(2, 10, 10, False)]
    assert many["tput"] > one["tput"] and many["sync"] < one["sync"]  # device iterations
    assert by[(2, 10, 10, False)]["tput"] > by[(1, 10, 10, False)]["tput"]  # replicas
    assert by[(1, 10, 10, False)]["allreduce"] == 0 < many["allreduce"]
    assert by[(2, 10, 20, False)]["allreduce"] < many["allreduce"]  # rarer all-reduces
    # RTS: AdamW's two moments per weight, half of them per IPU with 2 replicas (KiB)
    assert by[(2, 10, 10, True)]["state"] == pytest.approx(many["state"] / 2, abs=1)


def test_table_throughput_matches_a_real_call():
    model = replicated_mnist.build(2, 1, 10, False)
    d = load_mnist()
    x, y = prepare(d.train_images[:160]), d.train_labels[:160]
    result = model.run(x, y)
    t = model.target
    link = IPU_MODEL_HOST_LINK_BYTES_PER_CYCLE  # ipu2's host link, B/cycle (tut6-calibrated)
    io = (math.ceil(80 * (784 * 4 + 4) / link)  # images and labels in
          + math.ceil(4 / link))  # FINAL: one float32 loss per replica out
    seconds = (round(10e-6 * t.clock_hz) + io + result.cycles) / t.clock_hz
    assert replicated_mnist.row(model, 8)["throughput"] == pytest.approx(160 / seconds)
    assert result.outputs.shape == (2,)
    assert np.isfinite(result.losses).all()


def test_cli_trains_two_replicas_to_90_percent(capsys):
    assert replicated_mnist.main(["--replicas", "2", "--device-iterations", "10"]) == 0
    out = capsys.readouterr().out
    assert "5 calls of 1600 (8 x 10 x 10 x 2 replicas) on 8 IPUs" in out
    line = next(s for s in out.splitlines() if s.startswith("Accuracy"))
    assert float(line.split(":")[1].strip().rstrip("%")) >= 90.0
    assert len(parse(out)) == 6


def test_cli_reports_a_call_larger_than_the_dataset(capsys):
    assert replicated_mnist.main(["--batch-size", "1000"]) == 2
    err = capsys.readouterr().err
    assert "has 8000 elements but one step processes 200000" in err
    assert "batch_size 1000 × gradient_accumulation 10" in err


@pytest.mark.parametrize("option, value, message", [
    ("--replicas", "0", "0 must be at least 1"),
    ("--replicas", "-1", "-1 must be at least 1"),
    ("--device-iterations", "0", "0 must be at least 1"),
    ("--gradient-accumulation", "0", "0 must be at least 1"),
    ("--batch-size", "0", "0 must be at least 1"),
    ("--epochs", "-1", "-1 must be at least 0"),
])
def test_cli_rejects_bad_sizes_naming_the_option(option, value, message, capsys):
    with pytest.raises(SystemExit) as exc:
        replicated_mnist.main([option, value])
    assert exc.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err
