"""Pipelines on the emulator (``emulate=True``) against the NumPy runner."""

import io
import warnings

import numpy as np
import pytest

import ipukit as ipu
from ipukit import cost
from ipukit.errors import IpuError, PipelineConfigError
from ipukit.parallel import nn, optim
from ipukit.parallel.emulated import steps_of
from ipukit.parallel.pipelining import Block, pipeline, training_model
from ipukit.parallel.schedule import KINDS, LOCKSTEP
from ipukit.poplibs import poputil
from ipukit.widgets import BSPView

TARGET = ipu.IPUModel(num_ipus=3, tiles_per_ipu=4).create_device().target


def stages():
    return [[nn.Dense(6, 8, rng=1), nn.ReLU()],
            [nn.Dense(8, 8, rng=2), nn.ReLU()],
            [nn.Dense(8, 3, rng=3)]]


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 6)).astype("float32"), rng.integers(0, 3, n)


def both(make, x, y):
    """Run the same pipeline with the NumPy runner and on the emulator."""
    out = []
    for emulate in (False, True):
        p = make(emulate)
        out.append((p.run(x, y), p))
    return out


def assert_same(pair, rtol=1e-4, atol=1e-6):
    """The emulator's losses and trained weights equal the NumPy runner's (float32; with
    float16 accumulators, rtol 1e-3 and atol 1e-4)."""
    (a, pa), (b, pb) = pair
    np.testing.assert_allclose(b.losses, a.losses, rtol=rtol, atol=atol)
    assert pa.params.keys() == pb.params.keys()
    for k in pa.params:
        np.testing.assert_allclose(pb.params[k], pa.params[k], rtol=rtol, atol=atol,
                                   err_msg=k)


def assert_cycles(records, sched):
    """The ops of run 0 as the emulator runs a schedule: asynchronous ones in the
    schedule's order; lock-step ones step by step (PopART's pipeline cycles), each step's
    ops, a non-last stage's F after the stage's other ops, then ONE record of the step's
    inter-IPU copies when any of its ops sends (an F to the next stage, a B to the
    previous one)."""
    ops = [(o.phase, o.stage, o.microbatch) for o in records if o.run == 0]
    if not sched.lockstep:
        assert ops == [(o.phase, o.stage, o.microbatch) for o in sched.ops]
        return
    last, pos = sched.num_stages - 1, 0
    for step in sched.steps():
        mine = ops[pos:pos + len(step)]
        assert sorted(mine) == sorted((o.phase, o.stage, o.microbatch) for o in step)
        for k in {o.stage for o in step if o.phase == "F" and o.stage < last}:
            assert [op for op in mine if op[1] == k][-1][0] == "F"
        pos += len(step)
        if any(o.phase == "F" and o.stage < last or o.phase == "B" and o.stage > 0
               for o in step):
            assert ops[pos] == ("copy", -1, -1)
            pos += 1
    assert pos == len(ops)


@pytest.mark.parametrize("kind", KINDS)
def test_every_schedule_equals_the_numpy_runner(kind):
    x, y = data(6 * 2 * 4)
    ga = 6

    def make(emulate):
        return pipeline(stages(), None, gradient_accumulation_count=ga, pipeline_schedule=kind,
                        optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy(),
                        target=TARGET, repeat_count=2, emulate=emulate)

    pair = both(make, x, y)
    assert_same(pair)
    (a, pa), (b, _) = pair
    assert not np.allclose(pa.params["0.0.weight"], stages()[0][0].params["weight"])  # trained
    assert_cycles([o for o in b.op_steps if o.phase != "optimizer"], pa.schedule)


#: The schedules after Graphcore's on 4 IPUs of 4 tiles: stages placed as each kind does.
AFTER = [("interleaved_1f1b", [0, 1, 2, 0, 1, 2]), ("zb_h1", [0, 1, 2]),
         ("zb_v", [0, 1, 2, 2, 1, 0]), ("dualpipev", [0, 1, 2, 2, 1, 0])]


def model(n):
    return ([[nn.Dense(6, 8, rng=1), nn.ReLU()]]
            + [[nn.Dense(8, 8, rng=k), nn.ReLU()] for k in range(2, n)] + [[nn.Dense(8, 3)]])


@pytest.mark.parametrize("reduction,recomputation", [("SUM", False), ("RUNNING_MEAN", True),
                                                     ("MEAN", False)])
@pytest.mark.parametrize("kind,mapping", AFTER)
def test_schedules_after_graphcore_equal_the_numpy_runner(kind, mapping, reduction,
                                                          recomputation):
    """Virtual stages (several on one IPU) and split backwards run on the emulator: the
    losses and updated weights equal the NumPy runner's; a W op is compute sets of its
    own, writing the weight gradients, and the B op before it computes the input
    gradient only."""
    x, y = data(6 * 2, seed=21)

    def make(emulate):
        return pipeline(model(len(mapping)), mapping, gradient_accumulation_count=6,
                        pipeline_schedule=kind, reduction_method=reduction,
                        recomputation=recomputation, optimizer=optim.SGD(0.1, momentum=0.5),
                        loss=nn.SoftmaxCrossEntropy(), target=TARGET, repeat_count=2,
                        emulate=emulate)

    pair = both(make, x, y)
    assert_same(pair)
    (a, pa), (b, pb) = pair
    ops = [(o.phase, o.stage, o.microbatch) for o in b.op_steps if o.run == 0 and o.stage >= 0]
    assert ops == [(o.phase, o.stage, o.microbatch) for o in pb.schedule.ops]
    for k, q in enumerate(mapping):  # stage k computes on IPU mapping[k]'s tiles
        tiles = {t // TARGET.tiles_per_ipu for s in b.steps_of("F", k, 0)
                 if s.kind == "compute" for t in np.flatnonzero(s.tile_compute_cycles)}
        assert tiles == {q}
    names = {ph: [s.name for s in b.steps_of(ph, 1, 2) if s.kind == "compute"]
             for ph in ("B", "W")[:1 + pb.schedule.split]}
    if pb.schedule.split:
        assert names["W"] and all("/weight" in n or "/bias" in n or "accumulate" in n
                                  or "running mean" in n or "/count" in n for n in names["W"])
        assert any("/weight" in n for n in names["W"])
        assert not any("/weight" in n or "/bias" in n for n in names["B"])
        assert any("/input" in n for n in names["B"])
        w = next(sp for sp in b.timeline if sp.kind == "W" and sp.stage == 1)
        assert b.span_steps(w) == b.steps_of("W", 1, w.microbatch)
    else:
        assert any("/weight" in n for n in names["B"])


@pytest.mark.parametrize("kind,mapping", AFTER)
def test_training_model_runs_the_schedules_after_graphcore_on_the_emulator(kind, mapping):
    """PopTorch's front end too: ``training_model(..., pipeline_schedule=kind,
    emulate=True)`` with the kind's placement (``Stage(...).ipu(q)``) equals
    ``emulate=False``, every loss and every updated weight."""
    from ipukit.parallel import PipelinedExecution, Stage

    x, y = data(6 * 2, seed=31)
    out = []
    for emulate in (False, True):
        blocks = [Block(f"S{k}", *layers, ipu_id=q)
                  for k, (layers, q) in enumerate(zip(model(len(mapping)), mapping))]
        m = training_model(blocks, nn.SoftmaxCrossEntropy(), optim.SGD(0.1, momentum=0.5),
                           PipelinedExecution(*[Stage(f"S{k}").ipu(q)
                                                for k, q in enumerate(mapping)]),
                           gradient_accumulation=6, device_iterations=2, target=TARGET,
                           emulate=emulate, pipeline_schedule=kind, output_mode="all")
        out.append((m.run(x, y), m))
    assert_same(out)
    (a, ma), (b, mb) = out
    assert mb.schedule.kind == kind and a.losses.size == 12 and len(b.trace) > 0
    assert ({sp.kind for sp in b.timeline} >= {"F", "B", "W"}) == mb.schedule.split


def lesson08(kind, emulate, target):
    """Lesson 08's MNIST blocks (its L0 the biggest), pipelined by ``kind``."""
    blocks = [Block("L0", nn.Dense(784, 256, rng=0), nn.ReLU(), ipu_id=0),
              Block("L1", nn.Dense(256, 256, rng=1), nn.ReLU(), ipu_id=1),
              Block("L2", nn.Dense(256, 256, rng=2), nn.ReLU(), ipu_id=2),
              Block("L3", nn.Dense(256, 10, rng=3), ipu_id=3)]
    return training_model(blocks, nn.SoftmaxCrossEntropy(), optim.SGD(0.5),
                          gradient_accumulation=8, target=target, emulate=emulate,
                          pipeline_schedule=kind)


def test_emulated_zb_h1_idles_less_than_1f1b_on_lesson_08s_model():
    """The smaller bubble from the trace: the same model and micro-batches, ZB-H1's IPUs
    wait less on each other than 1F1B's, and the run ends sooner."""
    target = ipu.IPUModel("ipu2", num_ipus=4, tiles_per_ipu=16).create_device().target
    rng = np.random.default_rng(9)
    x, y = rng.random((8 * 32, 784), dtype=np.float32), rng.integers(0, 10, 8 * 32)
    runs = {kind: lesson08(kind, True, target).run(x, y) for kind in ("1f1b", "zb_h1")}
    m = {kind: r.timeline.measures() for kind, r in runs.items()}
    wait = {kind: {q: idle.get("dependency", 0.0) for q, idle in mm["idle"].items()}
            for kind, mm in m.items()}
    for q in range(4):
        assert wait["zb_h1"][q] < wait["1f1b"][q], q
    assert m["zb_h1"]["makespan"] < m["1f1b"]["makespan"]
    idle = {kind: sum(sum(i.values()) for i in mm["idle"].values()) for kind, mm in m.items()}
    assert idle["zb_h1"] < idle["1f1b"]
    # from the trace: each IPU's clock is busy with W ops where 1F1B's waited
    w = [sp for sp in runs["zb_h1"].timeline if sp.kind == "W"]
    assert {sp.ipu for sp in w} == {0, 1, 2, 3} and len(w) == 4 * 8


def test_the_idle_time_of_each_ipu_says_why():
    """Every moment of every IPU is work (F, B, W), or idle for a reason: the host sync of
    ``Engine.run``, an IPU-Link copy's sync and transfer, the weight update, or waiting
    for another IPU (a dependency). From the trace, per IPU."""
    x, y = data(6 * 2, seed=22)
    p = pipeline(model(3), None, gradient_accumulation_count=6, pipeline_schedule="zb_h1",
                 optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy(), target=TARGET,
                 repeat_count=2, emulate=True)
    r = p.run(x, y)
    m = r.timeline.measures()
    for q in range(3):
        assert m["busy"][q] + sum(m["idle"][q].values()) == pytest.approx(m["makespan"])
        assert {"host", "sync", "link", "optimizer", "dependency"} <= set(m["idle"][q]), q
        host = [s for s in r.trace.executed_steps() if s.kind == "host"]
        assert m["idle"][q]["host"] == pytest.approx(sum(s.cycles for s in host))
    copies = [s for s in r.trace.executed_steps() if s.inter_ipu_bytes]
    syncs = sum(s.sync_cycles for s in copies if 0 in s.ipus)
    assert m["idle"][0]["sync"] == pytest.approx(syncs)  # IPU 0's copies' external syncs
    assert sum(sp.bytes for sp in r.timeline if sp.kind == "link") == sum(
        s.inter_ipu_bytes for s in copies)  # each copy's bytes once, on its sender


@pytest.mark.parametrize("kind", ["grouped", "1f1b", "zb_h1", "dualpipev"])
@pytest.mark.parametrize("training", [True, False])
def test_the_steps_of_a_run_are_counted_before_it_is_built(kind, training):
    mapping = [0, 1, 1, 0] if kind == "dualpipev" else None
    x, y = data(12 * 2, seed=23)
    p = pipeline(model(4 if mapping else 3), mapping, gradient_accumulation_count=12,
                 pipeline_schedule=kind, optimizer=optim.SGD(0.1) if training else None,
                 loss=nn.SoftmaxCrossEntropy() if training else None, target=TARGET,
                 recomputation=training and kind == "1f1b", replication_factor=1,
                 emulate=True)
    p.run(x, y if training else None)
    emu = next(iter(p._emulations.values()))
    assert emu.steps == emu.counts[0] + sum(emu.counts[1:1 + len(emu.entries)])  # what ran


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "gpipe"])
def test_later_micro_batches_reuse_the_programs_of_their_slots(kind):
    """An op of a later micro-batch that uses the same FIFO and inbox slots adds the same
    programs again, so the compiled plan (its steps) does not grow with the gradient
    accumulation count; the steps run still do, and the results equal the runner's. (Not
    GPipe: its stash holds every micro-batch, so its slots grow with the count.)"""
    sizes, ran = [], []
    for ga in (6, 12):
        x, y = data(ga * 2, seed=ga)

        def make(emulate, ga=ga):
            return pipeline(stages(), None, gradient_accumulation_count=ga,
                            pipeline_schedule=kind, optimizer=optim.SGD(0.1),
                            loss=nn.SoftmaxCrossEntropy(), target=TARGET, emulate=emulate)

        pair = both(make, x, y)
        assert_same(pair)
        emu = next(iter(pair[1][1]._emulations.values()))
        sizes.append(len(emu.engine.executable.steps))
        ran.append(len(pair[1][0].trace))
    assert sizes[0] == sizes[1] and ran[1] > 1.8 * ran[0]


def test_a_reused_program_is_found_by_its_own_tensors_only():
    """The ops' shared programs are found by their tensors' ids: a view made for one call
    and dropped must not lend its id to another view, and with it its program (CPython
    gives a freed object's memory to the next one of its size)."""
    x, y = data(6 * 2)
    p = pipeline(stages(), None, gradient_accumulation_count=6, pipeline_schedule="grouped",
                 optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy(), target=TARGET,
                 emulate=True)
    p.run(x, y)
    emu = next(iter(p._emulations.values()))
    (s0, s1), (in1, in2) = (s.output for s in emu.stages[:2]), (s.inbox for s in emu.stages[1:])

    def halves(cols):  # two sends, views made for this call only (joined: concatenated)
        return emu._joined_copy([(s0[:, cols], in1[0][:, cols]), (s1[:, cols], in2[0][:, cols])])

    first = halves(slice(0, 4))
    second = halves(slice(4, 8))
    assert second is not first
    assert [c.dst.name for c in second.programs] == [
        "concat(stage1/inbox[0][:, 4:8].flatten(), stage2/inbox[0][:, 4:8].flatten())"]
    assert halves(slice(0, 4)) is not first  # (new views, new ids: built again)


def test_a_run_too_long_to_emulate_is_refused_before_it_is_built(monkeypatch):
    """Issue 26: gradient_accumulation_count=199998 with emulate=True sat in compile for
    minutes before the engine's step guard; the count comes first now."""
    from ipukit.parallel.emulated import pipeline as emulated_pipeline

    def make(g):
        return pipeline([[nn.Dense(4, 8, rng=1), nn.ReLU()], [nn.Dense(8, 3, rng=2)]],
                        [0, 1], gradient_accumulation_count=g, pipeline_schedule="1f1b",
                        optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy(),
                        target=TARGET, replication_factor=1, emulate=True)

    small = make(4)
    small.run(np.ones((4, 4), np.float32), np.arange(4) % 3)
    need = next(iter(small._emulations.values())).steps

    def not_reached(*args, **kwargs):
        raise AssertionError("built or compiled before the step count was checked")

    with monkeypatch.context() as m:
        m.setattr(emulated_pipeline.Emulation, "_unroll", not_reached)
        m.setattr(emulated_pipeline, "Engine", not_reached)
        g = 199998
        with pytest.raises(PipelineConfigError, match=r"gradient_accumulation_count=199998 "
                           r"with emulate=True would emulate [\d,]+ steps.*stops at "
                           r"1,000,000.*at most [\d,]+ with emulate=True, or emulate=False"):
            make(g).run(np.ones((g, 4), np.float32), np.arange(g) % 3)
        m.setattr(emulated_pipeline, "MAX_EMULATED_STEPS", need - 1)  # one step too many
        with pytest.raises(PipelineConfigError, match=f"would emulate {need:,} steps"):
            make(4).run(np.ones((4, 4), np.float32), np.arange(4) % 3)
    monkeypatch.setattr(emulated_pipeline, "MAX_EMULATED_STEPS", need)  # just fits: runs
    make(4).run(np.ones((4, 4), np.float32), np.arange(4) % 3)


@pytest.mark.parametrize("bad", [-1, 7, -3])
@pytest.mark.parametrize("emulate", [False, True])
def test_bad_labels_are_refused_before_anything_runs(bad, emulate, monkeypatch):
    """Issue 26: emulated, labels of -1 trained with loss 0.0, 7 of 3 classes blamed a
    codelet, -3 was reported as 4294967293; now both runners say what nn.check_labels
    says, before building."""
    from ipukit.parallel.emulated import pipeline as emulated_pipeline

    monkeypatch.setattr(emulated_pipeline, "Emulation", None)  # never built
    x, y = data(6, seed=24)
    y[4] = bad
    p = pipeline(stages(), None, gradient_accumulation_count=6, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), target=TARGET, emulate=emulate)
    before = {k: np.array(v) for k, v in p.params.items()}
    with pytest.raises(IpuError, match=rf"^labels hold {bad}, outside 0..2 \(the 3 classes "):
        p.run(x, y)
    for k, v in p.params.items():
        np.testing.assert_array_equal(v, before[k])


@pytest.mark.parametrize("reduction", ["SUM", "MEAN", "RUNNING_MEAN"])
@pytest.mark.parametrize("recomputation", [False, True])
def test_reductions_and_recomputation(reduction, recomputation):
    x, y = data(4 * 6 * 2, seed=1)

    def make(emulate):
        return pipeline(stages(), None, gradient_accumulation_count=6,
                        pipeline_schedule="grouped", reduction_method=reduction,
                        recomputation=recomputation, optimizer=optim.SGD(0.05),
                        loss=nn.SoftmaxCrossEntropy(), target=TARGET, device_iterations=2,
                        emulate=emulate)

    pair = both(make, x, y)
    assert_same(pair)
    if recomputation:
        assert any(o.phase == "R" for o in pair[1][0].op_steps)


@pytest.mark.parametrize("opt", [lambda: optim.SGD(0.1, momentum=0.9, weight_decay=0.01),
                                 lambda: optim.Adam(0.01, weight_decay=0.01),
                                 lambda: optim.AdamW(0.01)])
def test_optimisers_and_state_across_calls(opt):
    x, y = data(6 * 2, seed=2)

    def make(emulate):
        return pipeline(stages(), None, gradient_accumulation_count=6,
                        pipeline_schedule="interleaved", optimizer=opt(),
                        loss=nn.SoftmaxCrossEntropy(), target=TARGET, repeat_count=2,
                        emulate=emulate)

    (a, pa), (b, pb) = both(make, x, y)
    a2, b2 = pa.run(x, y), pb.run(x, y)  # the optimiser state carries over
    assert_same([(a2, pa), (b2, pb)])


def test_accumulator_dtype_and_poptorch_front_end():
    x, y = data(3 * 5 * 2, seed=3)

    def make(emulate):
        blocks = [Block("a", nn.Dense(6, 8, rng=4), nn.ReLU(), ipu_id=0),
                  Block("b", nn.Dense(8, 8, rng=5), nn.ReLU(), ipu_id=1),
                  Block("c", nn.Dense(8, 3, rng=6), ipu_id=2)]
        return training_model(blocks, nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                              gradient_accumulation=5, device_iterations=2, target=TARGET,
                              emulate=emulate)

    assert_same(both(make, x, y))
    x, y = data(6 * 2, seed=4)

    def make16(emulate):
        return pipeline(stages(), None, gradient_accumulation_count=6,
                        gradient_accumulation_dtype="float16", optimizer=optim.SGD(0.1),
                        loss=nn.SoftmaxCrossEntropy(), target=TARGET, repeat_count=2,
                        emulate=emulate)

    assert_same(both(make16, x, y), rtol=1e-3, atol=1e-4)


def test_the_trace_holds_every_op_as_supersteps():
    x, y = data(6, seed=5)
    p = pipeline(stages(), None, gradient_accumulation_count=6, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), target=TARGET, emulate=True)
    r = p.run(x, y)
    assert isinstance(r.trace, ipu.Trace)
    steps = r.steps_of("F", 1, 0)
    names = [s.name for s in steps]
    assert any("stage1/0.Dense" in n and s.kind == "compute" for n, s in zip(names, steps))
    assert not any(s.inter_ipu_bytes for s in steps)  # its send waits for the step's end
    # grouped, step 1 runs F0(1) and F1(0); then PopART's IpuCopy fragment: ONE copy of
    # both outputs (micro-batch 1 x 8 floats each), IPUs 0 -> 1 and 1 -> 2, one external
    # sync of the three IPUs (popprograms.cpp, addPipelineCycle)
    recs = list(r.op_steps)
    at = next(i for i, o in enumerate(recs) if (o.phase, o.stage, o.microbatch) == ("F", 1, 0))
    copy = next(o for o in recs[at:] if o.phase == "copy")
    (c,) = steps_of(r.trace, copy)
    assert (c.kind, c.inter_ipu_bytes, tuple(c.ipus)) == ("copy", 2 * 8 * 1 * 4, (0, 1, 2))
    assert c.sync_cycles == cost.global_sync_cycles(TARGET, 3)
    # IPU 1's tiles do all the compute of stage 1's forward
    tiles = TARGET.tiles_per_ipu
    for s in steps:
        if s.kind == "compute":
            busy = np.flatnonzero(s.tile_compute_cycles)
            assert busy.min() >= tiles and busy.max() < 2 * tiles
    span = next(t for t in r.timeline if t.kind == "B" and t.stage == 2)
    assert r.span_steps(span) == r.steps_of("B", 2, span.microbatch)
    local = [s for s in r.span_steps(span) if tuple(s.ipus) == (2,)]
    assert span.duration == sum(s.cycles for s in local)  # stage 2 has nothing to wait for
    BSPView(r.trace)  # the widget takes the whole run
    with pytest.raises(ipu.IpuError, match="not an F, B, W or R span"):
        r.span_steps(next(t for t in r.timeline if t.kind == "optimizer"))


def test_report_opens_a_span_as_its_supersteps(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    from ipukit import report

    x, y = data(6, seed=5)
    p = pipeline(stages(), None, gradient_accumulation_count=6, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), target=TARGET, emulate=True)
    r = p.run(x, y)
    span = next(t for t in r.timeline if t.kind == "F" and t.stage == 1 and t.microbatch == 2)
    fig = report.span_supersteps(r, span)
    low = fig.axes[1]
    names = [t.get_text() for t in low.get_yticklabels()]
    assert names == [s.name if len(s.name) <= 40 else s.name[:39] + "\u2026"  # never cut
                     for s in r.span_steps(span)]                                # silently
    assert f"{sum(s.cycles for s in r.span_steps(span)):,} cycles" in low.get_title()
    fig.savefig(tmp_path / "span.png")


def test_a_stash_that_does_not_fit_names_the_fifo():
    tiny = ipu.IPUModel(num_ipus=2, tiles_per_ipu=1).create_device().target
    big = [[nn.Dense(64, 64, rng=0), nn.ReLU()], [nn.Dense(64, 4, rng=1)]]
    # 400 rows a micro-batch (200 fit since temporaries reuse memory, issue 31)
    x = np.zeros((8 * 400, 64), np.float32)
    p = pipeline(big, None, gradient_accumulation_count=8, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), target=tiny, emulate=True)
    # an error, or a warning where the engine lets a graph run out of memory (Poplar's
    # debug.allowOutOfMemory): either way the report names the stash
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            p.run(x, np.zeros(len(x), np.int64))
            message = " ".join(str(w.message) for w in caught)
        except ipu.OutOfMemoryError as e:
            message = str(e)
    assert "Out of memory" in message and "stage0/stash FIFO" in message


@pytest.mark.parametrize("kind", ["grouped", "1f1b"])
def test_conv_and_maxpool_stages_equal_the_numpy_runner(kind):
    target = ipu.IPUModel(num_ipus=3, tiles_per_ipu=4).create_device().target
    rng = np.random.default_rng(8)
    x = rng.normal(size=(6 * 2, 2, 10, 10)).astype("float32")
    y = rng.integers(0, 4, len(x))

    def make(emulate):
        conv = [[nn.Conv2D(2, 3, 3, rng=1), nn.MaxPool2D(), nn.ReLU()],
                [nn.Conv2D(3, 4, 3, rng=2), nn.ReLU(), nn.Flatten()],
                [nn.Dense(4 * 2 * 2, 4, rng=3)]]
        return pipeline(conv, None, gradient_accumulation_count=6, pipeline_schedule=kind,
                        optimizer=optim.SGD(0.05), loss=nn.SoftmaxCrossEntropy(),
                        target=target, emulate=emulate)

    assert_same(both(make, x, y))


def test_layers_the_emulator_does_not_build_are_refused():
    class Odd(nn.Layer):
        def forward(self, x):
            return x, None

    p = pipeline([[Odd()], [nn.Dense(4, 2, rng=1)]], None, gradient_accumulation_count=4,
                 optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy(), emulate=True)
    with pytest.raises(ipu.IpuError, match="Odd.*emulate=False"):
        p.run(np.zeros((4, 4), np.float32), np.zeros(4, np.int64))


@pytest.mark.parametrize("rts", [False, True])
@pytest.mark.parametrize("reduction", ["SUM", "MEAN"])
def test_replication_and_rts(rts, reduction):
    target = ipu.IPUModel(num_ipus=6, tiles_per_ipu=2).create_device().target
    x, y = data(2 * 2 * 6 * 2, seed=6)

    def make(emulate):
        return pipeline(stages(), None, gradient_accumulation_count=6,
                        pipeline_schedule="grouped", optimizer=optim.Adam(0.01),
                        loss=nn.SoftmaxCrossEntropy(), target=target, replication_factor=2,
                        replica_reduction=reduction, repeat_count=2,
                        replicated_optimizer_state_sharding=rts, emulate=emulate)

    (a, pa), (b, pb) = pair = both(make, x, y)
    assert_same(pair)
    assert b.losses.shape == (2, 2, 6)
    assert sorted(pb.optimizer.state) == sorted(pa.optimizer.state)
    # the replicas' stages run on IPUs 3..5 and their gradients cross to IPUs 0..2
    stage_ipus = {o.ipu for o in b.op_steps if o.stage >= 0}
    assert stage_ipus == {0, 1, 2}
    steps = [s for o in b.op_steps if o.phase == "optimizer" for s in steps_of(b.trace, o)]
    assert any(s.kind == "copy" and s.inter_ipu_bytes for s in steps)


@pytest.mark.parametrize("rts", [False, True])
def test_replicas_reduce_round_gcls_ring(rts):
    """Three replicas of two stages: the gradients go round the ring (2 reduce-scatter
    steps then, after the update with RTS, 2 all-gather steps), each step one copy joining
    all six IPUs; the shards (5 and 3 elements of the biases) do not divide evenly."""
    target = ipu.IPUModel(num_ipus=6, tiles_per_ipu=2).create_device().target
    x, y = data(3 * 2 * 4, seed=9)

    def make(emulate):
        return pipeline([[nn.Dense(6, 5, rng=1), nn.ReLU()], [nn.Dense(5, 3, rng=3)]], None,
                        gradient_accumulation_count=4, optimizer=optim.SGD(0.1, momentum=0.9),
                        loss=nn.SoftmaxCrossEntropy(), target=target, replication_factor=3,
                        replica_reduction="MEAN", replicated_optimizer_state_sharding=rts,
                        emulate=emulate)

    pair = both(make, x, y)
    assert_same(pair)
    b = pair[1][0]
    steps = [s for o in b.op_steps if o.phase == "optimizer" for s in steps_of(b.trace, o)]
    copies = [s for s in steps if s.inter_ipu_bytes]
    assert len(copies) == 2 * (3 - 1) and all(s.ipus == tuple(range(6)) for s in copies)
    names = [" ".join(s.name.removeprefix("Copy ").split(" ")[:2]) for s in copies]
    assert names == (["gradients/ring reduce-scatter"] * 2 + ["weights/ring all-gather"] * 2
                     if rts else ["gradients/ring reduce-scatter"] * 2
                     + ["gradients/ring all-gather"] * 2)


def test_replicas_ring_with_float16_and_float32_accumulators():
    """Accumulators of two dtypes: each ring step is one copy per dtype (a Copy moves one
    type), 2 x 2(R-1) copies in all, and the update still equals the NumPy runner's."""
    target = ipu.IPUModel(num_ipus=4, tiles_per_ipu=2).create_device().target
    x, y = data(2 * 4 * 3, seed=11)

    def make(emulate):
        return pipeline([[nn.Dense(6, 5, rng=1), nn.ReLU()], [nn.Dense(5, 3, rng=3)]], None,
                        gradient_accumulation_count=4, optimizer=optim.SGD(0.1),
                        gradient_accumulation_dtype=lambda var: (
                            "float16" if var.name.endswith("bias") else None),
                        loss=nn.SoftmaxCrossEntropy(), target=target, replication_factor=2,
                        emulate=emulate)

    pair = both(make, x, y)
    assert_same(pair, rtol=1e-3, atol=1e-4)
    b = pair[1][0]
    steps = [s for o in b.op_steps if o.phase == "optimizer" for s in steps_of(b.trace, o)]
    copies = [s for s in steps if s.inter_ipu_bytes]
    assert len(copies) == 2 * 2 * (2 - 1)
    assert {s.ipus for s in copies} == {(0, 1, 2, 3)}


def test_grouped_beats_sequential_because_stages_overlap_on_per_ipu_clocks():
    x, y = data(6 * 8, seed=7)
    runs = {}
    for kind in ("grouped", "sequential"):
        wide = [[nn.Dense(6, 64, rng=1), nn.ReLU()], [nn.Dense(64, 64, rng=2), nn.ReLU()],
                [nn.Dense(64, 3, rng=3)]]
        runs[kind] = pipeline(wide, None, gradient_accumulation_count=6,
                              pipeline_schedule=kind, optimizer=optim.SGD(0.1),
                              loss=nn.SoftmaxCrossEntropy(), target=TARGET,
                              emulate=True).run(x, y)

    def overlaps(tl):
        ops = [s for s in tl if s.kind in ("F", "B")]
        return sum(a.ipu != b.ipu and a.start < b.end and b.start < a.end
                   for a in ops for b in ops)

    g, s = runs["grouped"], runs["sequential"]
    assert g.cycles == g.timeline.makespan and s.cycles == s.timeline.makespan
    assert overlaps(g.timeline) > 0 and overlaps(s.timeline) == 0
    assert g.cycles < 0.9 * s.cycles
    # the same work: every F and B lasts as long in both (only their placement differs)
    work = {k: sorted(sp.duration for sp in r.timeline if sp.kind in "FB")
            for k, r in runs.items()}
    assert sum(work["grouped"]) == pytest.approx(sum(work["sequential"]), rel=0.05)


def test_sharded_mnist_basic_emulated_has_the_same_loss_profile():
    from ipukit.data import load_mnist
    from ipukit.examples import sharded_mnist

    data = load_mnist()
    images, labels = data.train_images[:960], data.train_labels[:960]
    means = {}
    for emulate in ([], ["--emulate"]):
        args = sharded_mnist.parser().parse_args(
            ["--pipeline-mode", "basic", "--hidden-sizes", "32", "16", "--repeat-count", "2",
             "--epochs", "0.4", *emulate])
        p, means[bool(emulate)], result = sharded_mnist.train("basic", args, images, labels,
                                                               out=io.StringIO())
    assert len(means[True]) == 2
    np.testing.assert_allclose(means[True], means[False], rtol=1e-4)
    assert isinstance(result.trace, ipu.Trace) and p.target.tiles_per_ipu == 16


@pytest.mark.parametrize("last", [True, False])
def test_concurrent_stages_equal_the_numpy_runner(last):
    from ipukit.parallel.concurrent import ShardedSoftmaxCrossEntropy, split_dense

    target = ipu.IPUModel(num_ipus=4, tiles_per_ipu=4).create_device().target
    rng = np.random.default_rng(9)
    x = rng.normal(size=(48, 4)).astype("float32")
    y = rng.integers(0, 4, 48)

    def make(emulate):
        if last:
            st = [[nn.Dense(4, 8, rng=1), nn.ReLU()], split_dense(nn.Dense(8, 4, rng=2), 2)]
            mapping, loss = [0, [1, 2]], ShardedSoftmaxCrossEntropy()
        else:
            st = [[nn.Dense(4, 8, rng=1), nn.ReLU()], split_dense(nn.Dense(8, 6, rng=2), 2),
                  [nn.ReLU(), nn.Dense(6, 4, rng=3)]]
            mapping, loss = [0, [1, 2], 3], nn.SoftmaxCrossEntropy()
        return pipeline(st, mapping, gradient_accumulation_count=12,
                        optimizer=optim.SGD(0.1), loss=loss, target=target, repeat_count=2,
                        replication_factor=1, emulate=emulate)

    pair = both(make, x, y)
    assert_same(pair)
    steps = pair[1][0].trace.executed_steps()
    busy = {q for s in steps if s.kind == "compute" for q in s.ipus}
    assert {1, 2} <= busy  # both members computed on their own IPUs
    r = pair[1][0]
    f1 = sorted((sp for sp in r.timeline if sp.kind == "F" and sp.stage == 1
                 and sp.microbatch == 0), key=lambda sp: sp.start)[:2]  # run 0's
    assert sorted(sp.ipu for sp in f1) == [1, 2]  # one box per member, opening the same op
    assert r.span_steps(f1[0]) == r.span_steps(f1[1])


def test_sharded_mnist_concurrent_emulated_has_the_same_loss_profile():
    from ipukit.data import load_mnist
    from ipukit.examples import sharded_mnist

    data = load_mnist()
    images, labels = data.train_images[:960], data.train_labels[:960]
    means = {}
    for emulate in ([], ["--emulate"]):
        args = sharded_mnist.parser().parse_args(
            ["--pipeline-mode", "concurrent", "--hidden-sizes", "32", "16", "--repeat-count",
             "2", "--epochs", "0.4", *emulate])
        _, means[bool(emulate)], _ = sharded_mnist.train("concurrent", args, images, labels,
                                                         out=io.StringIO())
    np.testing.assert_allclose(means[True], means[False], rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_inference_pipelines_equal_the_numpy_runner(kind):
    # TF's inference pipeline (no optimizer): the forward stages in the schedule's order
    x, _ = data(2 * 6 * 2, seed=11)

    def make(emulate):
        return pipeline(stages(), None, gradient_accumulation_count=6, pipeline_schedule=kind,
                        target=TARGET, repeat_count=2, emulate=emulate)

    pa, pb = make(False), make(True)
    a, b = pa.run(x), pb.run(x)
    assert b.outputs.shape == a.outputs.shape == (2, 1, 6, 2, 3)
    np.testing.assert_allclose(b.outputs, a.outputs, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b.outputs.reshape(-1, 3), pa.predict(x), rtol=1e-4, atol=1e-6)
    assert b.losses.shape == (2, 1, 0)
    assert_cycles(b.op_steps, pb.schedule)
    assert {o.phase for o in b.op_steps} <= {"F", "copy"}  # no backward, no weight update
    names = [s.name for s in b.trace.executed_steps()]
    assert not any("stash FIFO" in n or "grad" in n for n in names)
    assert {sp.kind for sp in b.timeline} <= {"F", "link", "sync", "host"}
    for k in pa.params:  # weights untouched
        np.testing.assert_array_equal(pb.params[k], pa.params[k])
    f = next(sp for sp in b.timeline if sp.kind == "F" and sp.stage == 1)
    assert b.span_steps(f) == b.steps_of("F", 1, f.microbatch)


def test_poptorch_inference_model_scores_with_replicas():
    from ipukit.parallel import PipelinedExecution, inference_model

    target = ipu.IPUModel(num_ipus=6, tiles_per_ipu=2).create_device().target
    x, y = data(2 * 4 * 2, seed=12)

    def make(emulate):
        blocks = [Block(f"B{k}", *layers) for k, layers in enumerate(stages())]
        return inference_model(blocks, PipelinedExecution("B0", "B1", "B2"),
                               device_iterations=4, replication_factor=2, target=target,
                               loss=nn.SoftmaxCrossEntropy(), emulate=emulate)

    pa, pb = make(False), make(True)
    a, b = pa.run(x, y), pb.run(x, y)
    np.testing.assert_allclose(b.outputs, a.outputs, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b.losses, a.losses, rtol=1e-4, atol=1e-6)
    assert b.losses.shape == (1, 2, 4)
    assert {o.ipu for o in b.op_steps if o.phase == "F"} == {0, 1, 2}
    c = pb.run(x)  # without labels: outputs only, another build
    np.testing.assert_allclose(c.outputs, a.outputs, rtol=1e-4, atol=1e-6)
    assert c.losses.shape == (1, 2, 0)


def test_concurrent_inference_joins_the_members_outputs():
    from ipukit.parallel.concurrent import split_dense

    target = ipu.IPUModel(num_ipus=4, tiles_per_ipu=4).create_device().target
    x = np.random.default_rng(13).normal(size=(24, 4)).astype("float32")
    for st, mapping in (([[nn.Dense(4, 8, rng=1), nn.ReLU()],
                          split_dense(nn.Dense(8, 4, rng=2), 2)], [0, [1, 2]]),
                        ([[nn.Dense(4, 8, rng=1), nn.ReLU()],
                          split_dense(nn.Dense(8, 6, rng=2), 2),
                          [nn.ReLU(), nn.Dense(6, 4, rng=3)]], [0, [1, 2], 3])):
        a, b = (pipeline(st, mapping, gradient_accumulation_count=12, target=target,
                         replication_factor=1, emulate=e).run(x) for e in (False, True))
        np.testing.assert_allclose(b.outputs, a.outputs, rtol=1e-4, atol=1e-6)
        busy = {q for s in b.trace.executed_steps() if s.kind == "compute" for q in s.ipus}
        assert {1, 2} <= busy
    # scored: the sharded softmax cross-entropy of the concurrent last stage, forward only
    from ipukit.parallel import PipelineOptions
    from ipukit.parallel.concurrent import ShardedSoftmaxCrossEntropy
    from ipukit.parallel.emulated import build

    y = np.random.default_rng(14).integers(0, 4, 24)
    st = [[nn.Dense(4, 8, rng=1), nn.ReLU()], split_dense(nn.Dense(8, 4, rng=2), 2)]
    a, b = (build(st, [0, [1, 2]], PipelineOptions(gradient_accumulation=12, training=False,
                                                    emulate=e),
                  None, ShardedSoftmaxCrossEntropy(), target).run(x, y)
            for e in (False, True))
    np.testing.assert_allclose(b.losses, a.losses, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b.outputs, a.outputs, rtol=1e-4, atol=1e-6)


def _poptorch_model(emulate, training=True):
    from ipukit.parallel.pipelining import inference_model

    blocks = [Block("A", nn.Dense(6, 8, rng=1), nn.ReLU(), ipu_id=0),
              Block("B", nn.Dense(8, 3, rng=2), ipu_id=1)]
    if not training:
        return inference_model(blocks, device_iterations=2, target=TARGET, emulate=emulate)
    return training_model(blocks, nn.SoftmaxCrossEntropy(), optim.Adam(0.05),
                          gradient_accumulation=4, target=TARGET, emulate=emulate)


def test_compile_then_run_equals_run_alone_and_does_not_rebuild(monkeypatch):
    from ipukit.parallel import emulated

    x, y = data(4 * 3)
    alone = _poptorch_model(True)
    want = [alone.run(x, y).losses for _ in range(2)]
    built = []
    real = emulated.Emulation.__init__

    def counted(self, *args):
        built.append(args[1:])
        real(self, *args)

    monkeypatch.setattr(emulated.Emulation, "__init__", counted)
    m = _poptorch_model(True)
    assert m.compile(x, y) is None and len(built) == 1  # built, compiled, loaded
    assert len(m._emulations[(3, (6,), True)].engine.trace) == 0  # and nothing ran
    m.compile(x, y)  # the same shapes again: nothing to do (PopTorch ignores it too)
    got = [m.run(x, y).losses for _ in range(2)]
    assert len(built) == 1  # run() found the compiled programs
    for a, b in zip(want, got):
        np.testing.assert_array_equal(b, a)  # the same programs: the same losses, bit for bit
    numpy_runner = _poptorch_model(False)
    np.testing.assert_allclose(got[0], numpy_runner.run(x, y).losses, rtol=1e-4)
    m.compile(x[:8], y[:8])  # another micro-batch size is another build
    assert built[-1] == (2, (6,), True) and len(built) == 2


def test_compile_of_an_inference_model_and_without_emulation():
    x, _ = data(2 * 3)
    inf = _poptorch_model(True, training=False)
    inf.compile(x)
    ready = dict(inf._emulations)
    np.testing.assert_allclose(inf.run(x).outputs,
                               _poptorch_model(False, training=False).run(x).outputs,
                               rtol=1e-4, atol=1e-6)
    assert inf._emulations == ready  # run() used the compiled one
    x, y = data(6 * 2 * 2)  # TensorFlow's pipeline takes the call too
    tf = pipeline(stages(), None, gradient_accumulation_count=6, optimizer=optim.SGD(0.1),
                  loss=nn.SoftmaxCrossEntropy(), target=TARGET, emulate=True)
    tf.compile(x, y)
    ready = dict(tf._emulations)
    np.testing.assert_allclose(tf.run(x, y).losses, pipeline(
        stages(), None, gradient_accumulation_count=6, optimizer=optim.SGD(0.1),
        loss=nn.SoftmaxCrossEntropy(), target=TARGET).run(x, y).losses, rtol=1e-4)
    assert tf._emulations == ready
    plain = _poptorch_model(False)
    plain.compile(*data(4 * 3))  # NumPy runner: checks only, builds nothing
    assert "_emulations" not in plain.__dict__
    with pytest.raises(ipu.IpuError, match="stage 0"):
        plain.compile(np.ones((12, 5), np.float32), np.zeros(12, int))  # 5 features, not 6
    with pytest.raises(ipu.IpuError):
        _poptorch_model(True).compile(np.ones((12, 6), np.float32))  # training needs labels
    for emulate in (False, True):  # run and compile check their inputs alike, either way
        for call in ("run", "compile"):
            with pytest.raises(ipu.IpuError, match="the samples x must be an array"):
                getattr(_poptorch_model(emulate, training=False), call)(np.ones(6))


@pytest.mark.parametrize("change", ["lr and betas after compile", "lr after a run",
                                    "another optimiser after a run"])
def test_a_changed_optimiser_setting_rebuilds_the_programs(change):
    """The programs hold the optimiser's settings as constants: a change after compile()
    or a run builds them again, so the emulator trains with the new values, as the NumPy
    runner does (it reads them at every run)."""
    x, y = data(4 * 3, seed=15)
    losses = {}
    for emulate in (False, True):
        m = _poptorch_model(emulate)  # Adam(0.05)
        if change.endswith("after compile"):
            m.compile(x, y)  # the NumPy runner only checks the inputs
            m.optimizer.lr, m.optimizer.betas = 0.5, (0.5, 0.9)
        else:
            m.run(x, y)
            if change.startswith("lr"):
                m.optimizer.lr = 0.5
            else:
                m.optimizer = optim.SGD(0.3, momentum=0.9)
        losses[emulate] = np.array([m.run(x, y).losses for _ in range(2)])
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)


def _compute_sets(p):
    emu = next(iter(p._emulations.values()))
    return [cs.name for cs in emu.graph.compute_sets]


@pytest.mark.parametrize("opt", [lambda: optim.SGD(0.1, momentum=0.9, weight_decay=0.01),
                                 lambda: optim.AdamW(0.01)])
@pytest.mark.parametrize("reduction", ["MEAN", "RUNNING_MEAN"])
def test_each_stage_zeroes_accumulates_and_updates_all_its_weights_at_once(opt, reduction):
    """PopART's mergeVarUpdate: one compute set per stage (and type) zeroes the
    accumulators (float ones only for RUNNING_MEAN), one accumulates a micro-batch's
    gradients, one runs each optimiser step (MEAN's 1/G folded in), over all the stage's
    weights; float16 accumulators of the
    biases are a second type; the results still equal the NumPy runner's."""
    x, y = data(6 * 2, seed=12)

    def make(emulate):
        return pipeline(stages(), None, gradient_accumulation_count=6, optimizer=opt(),
                        reduction_method=reduction, loss=nn.SoftmaxCrossEntropy(),
                        gradient_accumulation_dtype=lambda var: (
                            "float16" if var.name.endswith("bias") else None),
                        target=TARGET, repeat_count=2, emulate=emulate)

    (a, pa), (b, pb) = both(make, x, y)
    assert_same([(a, pa), (b, pb)], rtol=1e-3, atol=1e-4)
    a2, b2 = pa.run(x, y), pb.run(x, y)  # Adam's steps go on per weight
    assert_same([(a2, pa), (b2, pb)], rtol=1e-3, atol=1e-4)
    names = _compute_sets(pb)
    for k in range(3):
        mine = [n for n in names if n.startswith(f"stage{k}/") and "Dense" not in n
                and "ReLU" not in n]
        for n in mine:
            assert ".weight" not in n and ".bias" not in n, n  # no op of one weight
        # the float accumulators are written by the stage's first B (RUNNING_MEAN: zeroed)
        assert mine.count(f"stage{k}/zero accumulators") == (reduction == "RUNNING_MEAN")
        assert mine.count(f"stage{k}/zero accumulators (half)") == 1
        step = "running mean" if reduction == "RUNNING_MEAN" else "accumulate"
        assert mine.count(f"stage{k}/{step}") == mine.count(f"stage{k}/{step} (half)") == 1
        assert not {f"stage{k}/mean", f"stage{k}/mean (half)"} & set(mine)  # in the update
        sgd = "sgd" if "SGD" in type(pb.optimizer).__name__ else "adam"
        assert mine.count(f"stage{k}/optimizer/{sgd}") == 1
    # the state is read back per weight, as the NumPy runner keeps it
    assert pb.optimizer.state.keys() == pa.optimizer.state.keys()


def test_adam_bias_corrections_stay_per_weight():
    """Adam's steps may differ between the weights of one stage (state carried over from
    another model): each weight's elements read its own bias correction."""
    x, y = data(6, seed=13)
    rng = np.random.default_rng(0)

    def make(emulate):
        opt = optim.Adam(0.01)
        opt.state["0.0.bias"] = {"step": 5, "m": rng.normal(size=8).astype("float32"),
                                 "v": np.full(8, 0.5, "float32")}
        return pipeline(stages(), None, gradient_accumulation_count=6, optimizer=opt,
                        loss=nn.SoftmaxCrossEntropy(), target=TARGET, emulate=emulate)

    rng = np.random.default_rng(0)
    pa = make(False)
    rng = np.random.default_rng(0)
    pb = make(True)
    assert_same([(pa.run(x, y), pa), (pb.run(x, y), pb)])
    assert pb.optimizer.state["0.0.bias"]["step"] == 6
    assert pb.optimizer.state["0.0.weight"]["step"] == 1


@pytest.mark.parametrize("reduction", ["SUM", "MEAN", "RUNNING_MEAN"])
def test_the_backward_writes_gradients_where_the_accumulators_are(reduction):
    """A stage's weight and bias gradients are slices of one variable mapped like its
    weights (poplin.mat_mul_with_output, popops.reduce_with_output, as PopLibs' weight
    update pass lays them out): accumulating a micro-batch is one compute set that moves
    no gradient between tiles, and (SUM, MEAN) each stage's first B copies its gradients
    there, so nothing is zeroed; the results still equal the NumPy runner's."""
    x, y = data(6 * 2, seed=14)

    def make(emulate):
        return pipeline(stages(), None, gradient_accumulation_count=6,
                        optimizer=optim.SGD(0.1, momentum=0.9), reduction_method=reduction,
                        loss=nn.SoftmaxCrossEntropy(), target=TARGET, emulate=emulate)

    (a, pa), (b, pb) = both(make, x, y)
    assert_same([(a, pa), (b, pb)])
    step = "running mean" if reduction == "RUNNING_MEAN" else "accumulate"
    acc = [s for s in b.trace.executed_steps() if s.name.endswith(f"/{step}")]
    # each stage, each micro-batch (SUM, MEAN: but the first, whose gradients are copied)
    assert len(acc) == 3 * (6 if reduction == "RUNNING_MEAN" else 5)
    firsts = [s.name for s in b.trace.executed_steps()
              if "/gradients" in s.name and "/accumulators" in s.name]  # copies
    zeroed = [s.name for s in b.trace.executed_steps() if "zero accumulators" in s.name]
    assert (len(firsts), len(zeroed)) == ((0, 3) if reduction == "RUNNING_MEAN" else (3, 0))
    most = 4 if reduction == "RUNNING_MEAN" else 0  # (RUNNING_MEAN: each tile reads n)
    assert all(s.tile_bytes_in.max() <= most for s in acc)
    emu = next(iter(pb._emulations.values()))
    for s in emu.stages:  # one variable of gradients per stage, mapped like its weights
        assert s.grads.all.name == f"stage{s.k}/gradients"
        np.testing.assert_array_equal(poputil.tile_of_elements(s.vg, s.grads.all),
                                      poputil.tile_of_elements(s.vg, s.weights.all))


@pytest.mark.parametrize("kind", LOCKSTEP)
@pytest.mark.parametrize("recomputation", [False, True])
@pytest.mark.parametrize("bare_loss", [False, True])
def test_a_lockstep_pipeline_s_cycles_keep_the_numpy_runner_s_results(kind, recomputation,
                                                                     bare_loss):
    """Whatever the lock-step schedule, with or without recomputation and with a last
    stage without layers (its input gradient is the loss's, which its forward writes):
    one exchange of copies per step, and the losses and weights of the NumPy runner."""
    n, seed = (3 if bare_loss else 2), 7
    x, y = data(2 * n * 2, seed=seed)

    def make(emulate):
        layers = [[nn.Dense(6, 8, rng=seed), nn.ReLU()], [nn.Dense(8, 3, rng=seed + 1)]]
        return pipeline(layers + ([[nn.Flatten()]] if bare_loss else []), None,
                        gradient_accumulation_count=2 * n, pipeline_schedule=kind,
                        optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy(),
                        recomputation=recomputation, target=TARGET, replication_factor=1,
                        emulate=emulate)

    pair = both(make, x, y)
    assert_same(pair)
    (_, pa), (b, _) = pair
    assert_cycles([o for o in b.op_steps if o.phase != "optimizer"], pa.schedule)
