"""The throughput study of PopTorch's pipelined MNIST against what Graphcore documents, with
every number computed here from the layers' shapes, PopART's pipeline cycles and cost.py.

Sources: graphcore/examples ``tutorials/tutorials/pytorch/pipelining/README.md`` (the
model, blocks B1-B4 on IPUs 0-3; images per call = batch size x gradientAccumulation x
deviceIterations; "increasing deviceIterations improves efficiency by reducing the number of
interactions between the host CPU and the IPU"), ``efficient_data_loading/README.md``
(throughput = images per call / seconds; replication "can give large improvements in
throughput"), graphcore/popart ``willow/src/transforms/pipeline.cpp`` (P = 2N - 1 pipeline
stages; stage s runs in cycle c iff s <= c < s + G; G + P - 1 cycles: the ramp-up and
ramp-down, the bubble, are paid once per run).
"""

import re

import numpy as np
import pytest

from ipukit import cost
from ipukit.examples import pipelining_throughput as study
from ipukit.target import IPUModel

N = 4  # IPUs per replica, one block each
IMAGE = 28 * 28 * 4 + 4  # float32 pixels and an int32 label per image


def stages(mb):
    """Per block: forward FLOPs, backward FLOPs, bytes its forward sends on, bytes its
    backward sends back, parameters; from the tutorial's layer shapes."""
    conv1, pool1, relu1 = 2 * mb * 10 * 24 * 24 * 1 * 25, mb * 10 * 24 * 24, mb * 10 * 12 * 12
    conv2, pool2, relu2 = 2 * mb * 20 * 8 * 8 * 10 * 25, mb * 20 * 8 * 8, mb * 20 * 4 * 4
    dense3, relu3 = 2 * mb * 320 * 256, mb * 256
    dense4, logits = 2 * mb * 256 * 10, mb * 10
    fwd = [conv1 + pool1 + relu1, conv2 + pool2 + relu2, dense3 + relu3,
           dense4 + 5 * logits]  # softmax cross-entropy: 5 FLOPs per logit forward
    bwd = [2 * conv1 + pool1 + relu1, 2 * conv2 + pool2 + relu2, 2 * dense3 + relu3,
           2 * dense4 + 2 * logits]  # ... and 2 backward
    sends = [4 * relu1, 4 * relu2, 4 * relu3, 0]
    backs = [0, 4 * relu1, 4 * relu2, 4 * relu3]
    params = [10 * 25 + 10, 20 * 10 * 25 + 20, 320 * 256 + 256, 256 * 10 + 10]
    return fwd, bwd, sends, backs, params


def device_cycles(mb, g, target, replicas=1):
    """One pipeline run: PopART's G + 2N - 2 lock-step cycles (IPU k runs F of micro-batch
    c - k and B of c - (2N - 2 - k) in cycle c, each followed by its IPU-Link copy), a sync
    ending each, then the all-reduce (ring) and AdamW's update on every IPU."""
    fwd, bwd, sends, backs, params = stages(mb)
    comp = [(cost.flops_cycles(f, target) + cost.link_cycles(s, target),
             cost.flops_cycles(b, target) + cost.link_cycles(k, target))
            for f, b, s, k in zip(fwd, bwd, sends, backs)]
    total = 0
    for c in range(g + 2 * N - 2):
        total += max(comp[k][0] * (0 <= c - k < g) + comp[k][1] * (0 <= c - (2 * N - 2 - k) < g)
                     for k in range(N)) + cost.global_sync_cycles(target)
    update = max(cost.flops_cycles(12 * p, target)  # AdamW: 12 FLOPs per weight
                 + (cost.ring_cycles("allreduce", 4 * p, replicas, target) if replicas > 1
                    else 0) for p in params)
    return total + update


def call_cycles(mb, g, di, replicas=1):
    """One call: the host sync, one replica's images and labels in and its last loss out
    (the replicas stream side by side), then the device iterations."""
    t = IPUModel("ipu2", num_ipus=N * replicas).create_device().target
    io = cost.host_cycles(di * g * mb * IMAGE, t) + cost.host_cycles(4, t)
    return cost.host_sync_cycles(t) + io + di * device_cycles(mb, g, t, replicas), t


@pytest.mark.parametrize("mb,g,di", [(40, 7, 10), (40, 10, 1), (8, 14, 3), (1, 56, 100)])
def test_each_setting_is_timed_as_the_formulas_say(mb, g, di):
    row = study.measure(mb, g, di, 1)
    cycles, t = call_cycles(mb, g, di)
    assert row["samples"] == mb * g * di  # the tutorial's images per call
    assert row["cycles"] == cycles
    assert row["throughput"] == pytest.approx(mb * g * di * t.clock_hz / cycles, rel=1e-12)
    assert row["seconds"] == pytest.approx(cycles / 1.33e9, rel=1e-12)  # ipu2's clock


def test_more_accumulation_approaches_a_plateau_set_by_the_bubble():
    mb, di = 40, 10
    t = IPUModel("ipu2", num_ipus=N).create_device().target
    fwd, bwd, sends, backs, _ = stages(mb)
    step = max(cost.flops_cycles(f, t) + cost.flops_cycles(b, t) + cost.link_cycles(s, t)
               + cost.link_cycles(k, t) for f, b, s, k in zip(fwd, bwd, sends, backs))
    step += cost.global_sync_cycles(t)  # the steady state: every IPU runs one F and one B
    plateau = mb * t.clock_hz / (step + mb * IMAGE / t.host_link_bytes_per_cycle)
    gs = (7, 14, 28, 56, 112, 448)
    rows = [study.measure(mb, g, di, 1) for g in gs]
    assert all(r["plateau"] == pytest.approx(plateau, rel=1e-12) for r in rows)
    # each micro-batch more adds one steady-state step; the ramp-up and ramp-down stay
    assert [device_cycles(mb, g + 1, t) - device_cycles(mb, g, t) for g in gs] == [step] * 6
    speeds = [r["throughput"] for r in rows]
    assert speeds == sorted(speeds) and speeds[-1] < plateau
    assert speeds[0] < 0.85 * plateau < 0.97 * plateau < speeds[-1]
    # so doubling the accumulation helps less and less
    gains = [b / a for a, b in zip(speeds, speeds[1:])]
    assert gains == sorted(gains, reverse=True) and gains[-1] < 1.03 < 1.1 < gains[0]


def test_device_iterations_amortise_the_host_sync():
    mb, g = 1, 7  # a short run: the host sync of each call weighs most
    rows = [study.measure(mb, g, di, 1) for di in (1, 10, 100)]
    sync = cost.host_sync_cycles(IPUModel("ipu2", num_ipus=N).create_device().target)
    for r in rows:
        assert r["host"] - sync == r["cycles"] - sync - r["di"] * r["run"]  # the host I/O
        # without the sync the call costs the same per image: the limit of many iterations
        assert r["no_sync"] == pytest.approx(rows[-1]["no_sync"], rel=1e-3)
    speeds = [r["throughput"] for r in rows]
    assert speeds == sorted(speeds) and speeds[-1] < rows[-1]["no_sync"]
    # one call of 100 iterations pays 99 fewer syncs than 100 calls of one
    assert 100 * rows[0]["cycles"] - rows[-1]["cycles"] == pytest.approx(99 * sync, abs=200)


def test_replicas_multiply_the_images_but_pay_an_all_reduce():
    mb, g, di = 40, 10, 10
    rows = {r: study.measure(mb, g, di, r) for r in (1, 2, 4)}
    for r, row in rows.items():
        cycles, t = call_cycles(mb, g, di, r)
        assert row["ipus"] == N * r and row["samples"] == r * mb * g * di
        assert row["cycles"] == cycles
        assert row["throughput"] == pytest.approx(r * mb * g * di * t.clock_hz / cycles,
                                                  rel=1e-12)
    assert rows[1]["allreduce"] == 0 < rows[2]["allreduce"] < rows[4]["allreduce"]
    assert rows[1]["throughput"] < rows[2]["throughput"] < 2 * rows[1]["throughput"]
    assert 1.8 * rows[2]["throughput"] < rows[4]["throughput"] < 2 * rows[2]["throughput"]


def test_the_command_prints_the_table_and_saves_the_plot(tmp_path, capsys):
    png = tmp_path / "throughput.png"
    assert study.main(["--cost-model", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "of plateau" in out and "Plot saved to" in out
    assert "reaches 90 % of the plateau at 28" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(out.splitlines()) == 1 + 3 * 2 + 4 + 3 + 2 + 3 + 2


@pytest.mark.parametrize("argv,message", [
    (["--batch-size", "0"], "0 must be at least 1"),
    (["--accumulation", "4"], "unrecognized option --accumulation"),
    (["--gradient-accumulation", "1e9"], "up to 10,000"),
    # PopART: "depth (gradient accumulation factor) must equal at least the number of
    # pipeline stages" (7 for 4 IPUs), one line, exit status 2
    (["--gradient-accumulation", "4"], "greater than or equal to the number of pipeline "
                                       "stages \\(7\\)"),
])
def test_bad_options_are_one_line_and_refused(argv, message, capsys, monkeypatch):
    # refused before any setting is emulated or costed (an emulated call takes seconds)
    monkeypatch.setattr(study, "study", lambda *a, **k: pytest.fail("timed before refusing"))
    try:
        code = study.main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert re.search(message, err), err


def test_the_full_sweep_is_a_superset_of_the_small_one():
    small, full = study.SWEEPS["small"], study.SWEEPS["full"]
    assert all(set(small[k]) <= set(full[k]) for k in small)
    # PopART: the accumulation must be at least the 2N - 1 pipeline stages
    assert min(small["ga"]) == min(full["ga"]) == study.PIPELINE_STAGES == 2 * N - 1
    assert all(np.all(np.diff(v) > 0) for v in full.values())


# -- the emulated study (the default): every figure from emulated calls ------------------
# PopART runs a call as ONE program (graphcore/popart willow/src/popx/popprograms.cpp,
# getMainProgramFromPipelineFragments: Repeat(batchesPerStep, fill + main + flush + the
# accumulated weight update)); "increasing deviceIterations is more efficient because the
# loop runs on the IPU directly" (graphcore/examples simple_applications/pytorch/mnist).

def direct(mb, ga, di, replicas):
    """An emulated call of the study's model with these settings, run as such."""
    from ipukit.examples.replicated_mnist import SAMPLE_SHAPE, build

    model = build(replicas, di, ga, rts=False, emulate=True)
    n = replicas * di * ga * mb
    rng = np.random.default_rng(3)  # any data: the emulator's cycles do not depend on it
    return model.run(rng.normal(size=(n,) + SAMPLE_SHAPE).astype(np.float32),
                     rng.integers(0, 10, n))


@pytest.mark.parametrize("mb,ga,di,replicas", [(4, 10, 3, 1), (4, 7, 2, 2)])
def test_the_emulated_study_gives_a_directly_emulated_call_exactly(mb, ga, di, replicas):
    """The study's rules give the cycles of the call emulated as such, exactly: from ONE
    emulated call at accumulation 8 with two device iterations, the first iteration
    what a call of one costs, each later one what the second added, one steady-state
    cycle more per micro-batch past 8 (one less at 7). Between them the two calls take
    every rule: two micro-batches past 8 and a third iteration; 7, and two replicas (their
    all-reduce, and the study's call of two replicas)."""
    r = direct(mb, ga, di, replicas)
    row = study.measure_emulated(mb, ga, di, replicas)
    assert row["cycles"] == pytest.approx(r.cycles, rel=1e-12)
    assert row["throughput"] == pytest.approx(replicas * mb * ga * di * 1.33e9 / r.cycles,
                                              rel=1e-12)
    steps = r.trace.executed_steps()
    # one Engine.run per call: one host sync, however many device iterations
    assert [s.kind for s in steps].count("host") == 1
    # every image and label came over the host link, and every micro-batch's loss went back
    image = 28 * 28 * 4 + 4
    assert sum(s.host_bytes for s in steps) == replicas * di * ga * mb * image + \
        replicas * di * ga * 4
    streams = [s for s in steps if s.kind == "stream"]
    assert len(streams) == 3 * replicas * di * ga and all(s.cycles > 0 for s in streams)
    assert row["host"] - row["sync"] == pytest.approx(
        max(sum(s.cycles for s in streams if q in s.ipus) for q in range(4 * replicas)))
    # the all-reduce: GCL's ring, each step an inter-IPU copy and an add (gradients/...)
    ring = [s for s in steps if "gradients/ring" in s.name]
    assert (len(ring) > 0) == (replicas > 1)
    assert row["allreduce"] == pytest.approx(
        max(sum(s.cycles for s in ring if q in s.ipus) for q in range(4 * replicas)))
    assert any(s.kind == "copy" and s.inter_ipu_bytes for s in ring) == (replicas > 1)


def test_a_steady_state_cycle_is_its_busiest_ipu_then_one_exchange_of_its_copies():
    """PopART's pipeline cycle (graphcore/popart willow/src/popx/popprograms.cpp,
    addPipelineCycle): each stage's program, then the IpuCopy fragment of every inter-IPU
    copy. On the emulator a steady-state cycle lasts its busiest IPU's steps (compute,
    on-IPU copies, its stream copies) plus ONE copy step that joins the four IPUs (an
    external sync, then the exchange), so each micro-batch more costs the same."""
    e = study.emulated(4)
    r = direct(4, study.BASE, 1, 1)
    recs = [o for o in r.op_steps if o.run == 0]
    p = study.PIPELINE_STAGES
    busy = {}
    for o in recs:
        if o.step == p and o.phase != "copy":
            for i in r.trace._step_ids[o.first:o.end]:
                st = r.trace.steps[i]
                assert len(st.ipus) == 1  # nothing in a cycle's compute joins two IPUs
                busy[st.ipus[0]] = busy.get(st.ipus[0], 0) + st.cycles
    (copy,) = [o for o in recs if o.phase == "copy" and o.step == p]
    (c,) = [r.trace.steps[i] for i in r.trace._step_ids[copy.first:copy.end]]
    assert tuple(c.ipus) == (0, 1, 2, 3) and c.kind == "copy"
    # the bytes of the cycle: each block's activations on and its input gradients back
    relu = [4 * 10 * 12 * 12, 4 * 20 * 4 * 4, 4 * 256]  # per image, float32
    assert c.inter_ipu_bytes == 2 * 4 * sum(relu)
    target = IPUModel("ipu2", num_ipus=N).create_device().target
    assert c.sync_cycles == cost.global_sync_cycles(target, 4)
    assert e["t_step"] == max(busy.values()) + c.cycles
    # and the run of one micro-batch more costs exactly that
    assert direct(4, study.BASE + 1, 1, 1).cycles - r.cycles == e["t_step"]


def test_emulated_throughput_rises_with_accumulation_and_levels_off():
    """PopTorch's tutorial: more gradient accumulation fills the pipeline; the bubble's
    share falls as (P - 1) / (G + P - 1), so each doubling of G helps less."""
    rows = [study.measure_emulated(4, g, 10, 1) for g in (7, 14, 28, 56, 112)]
    speeds = [r["throughput"] for r in rows]
    assert speeds == sorted(speeds) and speeds[-1] < rows[-1]["plateau"]
    gains = [b / a for a, b in zip(speeds, speeds[1:])]
    assert gains == sorted(gains, reverse=True) and gains[-1] < 1.02


def test_the_emulated_study_pays_one_host_sync_and_an_all_reduce_per_update():
    mb = 4
    rows = {di: study.measure_emulated(mb, 7, di, 1) for di in (1, 10, 100)}
    sync = rows[1]["sync"]
    assert sync == IPUModel("ipu2", num_ipus=N).create_device().target.host_sync_cycles
    for di, row in rows.items():  # the host sync once per call, the rest per iteration
        assert row["cycles"] == pytest.approx(sync + di * (rows[1]["cycles"] - sync))
    speeds = [rows[di]["throughput"] for di in (1, 10, 100)]
    assert speeds == sorted(speeds) and speeds[-1] < rows[100]["no_sync"]
    one, two = study.measure_emulated(mb, 7, 1, 1), study.measure_emulated(mb, 7, 1, 2)
    assert one["allreduce"] == 0 < two["allreduce"]
    assert one["throughput"] < two["throughput"] < 2 * one["throughput"]


def test_the_command_says_where_its_figures_come_from(capsys, monkeypatch):
    monkeypatch.setitem(study.SWEEPS, "small", {"ga": (7, 14), "di": (1, 3), "replicas": (1, 2)})
    args = ["--batch-size", "4", "--gradient-accumulation", "7", "--device-iterations", "3"]
    assert study.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("Emulated throughput") and "of plateau" in out
    assert study.main(args + ["--cost-model"]) == 0
    assert capsys.readouterr().out.startswith("Simulated (cost model) throughput")
    assert study.EMULATED_MAX_REPLICAS < max(study.SWEEPS["full"]["replicas"])
