"""Pipeline schedules: Graphcore's exact rules, golden cases, and invariants."""

import re
from collections import Counter, defaultdict
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipukit.errors import IpuError, PipelineConfigError
from ipukit.parallel import KINDS, schedule
from ipukit.parallel.schedule import BEYOND_GRAPHCORE


def steps_as_sets(s):
    return [{(o.phase, o.stage, o.microbatch) for o in step} for step in s.steps()]


def test_grouped_n2_gac4_matches_tensorflow():
    # Golden case 17 (graphcore-sources.md §5): 7 timesteps.
    expected = [
        {("F", 0, 0)},
        {("F", 1, 0), ("F", 0, 1)},
        {("B", 1, 0), ("F", 1, 1), ("F", 0, 2)},
        {("B", 0, 0), ("B", 1, 1), ("F", 1, 2), ("F", 0, 3)},
        {("B", 0, 1), ("B", 1, 2), ("F", 1, 3)},
        {("B", 0, 2), ("B", 1, 3)},
        {("B", 0, 3)},
    ]
    assert steps_as_sets(schedule("grouped", 2, 4)) == expected


def test_interleaved_n2_gac4_matches_tensorflow():
    # Golden case 18: 10 columns, one op per IPU per column.
    expected = [
        {("F", 0, 0)}, {("F", 1, 0)}, {("B", 1, 0), ("F", 0, 1)}, {("B", 0, 0), ("F", 1, 1)},
        {("F", 0, 2), ("B", 1, 1)}, {("F", 1, 2), ("B", 0, 1)}, {("B", 1, 2), ("F", 0, 3)},
        {("B", 0, 2), ("F", 1, 3)}, {("B", 1, 3)}, {("B", 0, 3)},
    ]
    assert steps_as_sets(schedule("interleaved", 2, 4)) == expected
    # ...in the listed order: a column runs CircularUnion's rows, micro-batch m on row m % N
    order = [(o.phase, o.stage, o.microbatch) for o in schedule("interleaved", 2, 4).ops]
    assert order[2:8] == [("B", 1, 0), ("F", 0, 1), ("B", 0, 0), ("F", 1, 1),
                          ("F", 0, 2), ("B", 1, 1)]
    assert order[8:12] == [("F", 1, 2), ("B", 0, 1), ("B", 1, 2), ("F", 0, 3)]


def test_step_counts_and_fifo_depths():
    assert schedule("grouped", 4, 8).num_steps == 15
    assert schedule("interleaved", 4, 4).num_steps == 14
    assert schedule("grouped", 4, 8).fifo_depths == (6, 4, 2, 0)
    assert schedule("interleaved", 4, 8).fifo_depths == (3, 2, 1, 0)
    # pipeline_fifo_inserter_test.cc: interleaved, 3 stages -> stage 1 depth 1, stage 0 depth 2
    assert schedule("interleaved", 3, 3).fifo_depths[:2] == (2, 1)
    assert schedule("sequential", 4, 3).fifo_depths == (0, 0, 0, 0)


def test_sequential_runs_one_stage_at_a_time():
    s = schedule("sequential", 3, 2)
    assert [(o.phase, o.stage) for o in s.ops[:6]] == [
        ("F", 0), ("F", 1), ("F", 2), ("B", 2), ("B", 1), ("B", 0)]
    # PipelineStageMerger fuses F2 and B2 into one stage program: one step for both
    assert [o.step for o in s.ops] == [0, 1, 2, 2, 3, 4, 5, 6, 7, 7, 8, 9]


def test_sequential_merges_the_last_forward_and_first_backward_stage():
    # graphcore/tensorflow tensorflow/compiler/plugin/poplar/driver/passes/
    # pipeline_stage_merger.cc (test: tests/pipeline_stage_merger_test.cc, "Sequential": the
    # last forward stage becomes a pass-through and its backward stage does the work), run
    # for Sequential only: 2N - 1 = 7 stage steps per micro-batch, 21 for count 3.
    assert schedule("sequential", 4, 3).num_steps == 21
    assert schedule("grouped", 4, 8).num_steps == 8 + 2 * 4 - 1
    # inference has no backward stage to merge
    assert schedule("sequential", 4, 3, training=False).num_steps == 12


@pytest.mark.parametrize("kind,n,count,factor", [
    ("grouped", 4, 20, 8), ("grouped", 4, 4, 8), ("interleaved", 4, 6, 4),
    ("grouped", 3, 10, 6),
])
def test_wrong_count_raises_in_graphcores_words(kind, n, count, factor):
    with pytest.raises(PipelineConfigError,
                       match=f"must be a multiple of {factor}, but gradient_accumulation"):
        schedule(kind, n, count)


def test_counts_accepted_as_in_tensorflow_tests():
    schedule("grouped", 2, 84)
    schedule("grouped", 3, 84)
    schedule("interleaved", 3, 84)
    schedule("interleaved", 4, 20)
    schedule("grouped", 4, 24)
    schedule("sequential", 4, 1)
    for kind in ("grouped", "interleaved"):  # golden case 15: inference needs a multiple of 3
        with pytest.raises(PipelineConfigError, match="must be a multiple of 3"):
            schedule(kind, 3, 10, training=False)


def test_poptorch_needs_count_of_at_least_2n_minus_1():
    # graphcore/poptorch popart_compiler/source/Compiler.cpp (the message, word for word)
    with pytest.raises(PipelineConfigError, match=re.escape(
            "poptorch.Options().Training.gradientAccumulation must be greater than or equal "
            "to the number of pipeline stages (7) when using poptorch.PipelinedExecution. "
            "Please note that a model with 4 pipeline stages in PopTorch will have an "
            "additional 3 stages when training.")):
        schedule("poptorch", 4, 6)
    assert schedule("poptorch", 4, 7).num_steps == 7 + 7 - 1
    assert schedule("poptorch", 3, 5).num_steps == 9  # PopART's pipelining.md example
    # inference: deviceIterations >= the number of stages (same file)
    with pytest.raises(PipelineConfigError, match=re.escape(
            "poptorch.Options().deviceIterations must be greater than or equal to the "
            "number of pipeline stages (4) when using PopTorch.PipelinedExecution.")):
        schedule("poptorch", 4, 3, training=False)
    assert schedule("poptorch", 4, 4, training=False).num_steps == 4 + 4 - 1


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4"])
def test_bad_arguments(bad):
    with pytest.raises(PipelineConfigError):
        schedule("grouped", bad, 8)
    with pytest.raises(PipelineConfigError):
        schedule("sequential", 2, bad)
    with pytest.raises(IpuError, match="unknown pipeline schedule"):
        schedule("zigzag", 2, 4)


def test_poptorch_tutorial_figure():
    # The 13 columns of PopTorch's 4-IPU pipelining figure (1-based micro-batches).
    F = [[(1, 0)], [(2, 0), (1, 1)], [(3, 0), (2, 1), (1, 2)],
         [(4, 0), (3, 1), (2, 2), (1, 3)]]
    expected = F + [
        [("B", 1, 3)],
        [("F", 5, 0), ("F", 4, 1), ("F", 3, 2), ("F", 2, 3)],
        [("B", 1, 2), ("B", 2, 3)],
        [("F", 6, 0), ("F", 5, 1), ("F", 4, 2), ("F", 3, 3)],
        [("B", 1, 1), ("B", 2, 2), ("B", 3, 3)],
        [("F", 7, 0), ("F", 6, 1), ("F", 5, 2), ("F", 4, 3)],
        [("B", 1, 0), ("B", 2, 1), ("B", 3, 2), ("B", 4, 3)],
        [("F", 8, 0), ("F", 7, 1), ("F", 6, 2), ("F", 5, 3)],
        [("B", 2, 0), ("B", 3, 1), ("B", 4, 2), ("B", 5, 3)],
    ]
    expected[:4] = [[("F", m, q) for m, q in col] for col in F]
    cols = schedule("poptorch", 4, 8).columns()
    got = [sorted((o.phase, o.microbatch + 1, o.ipu) for o in c) for c in cols[:13]]
    assert got == [sorted(c) for c in expected]
    # "after nine steps ... all the IPUs are used at the same time" (2N+1 for N=4).
    full = [len({o.ipu for o in c}) == 4 for c in cols]
    assert not full[8] and all(full[9:13])


@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_poptorch_steady_state_after_3_n_minus_1_columns(n):
    cols = schedule("poptorch", n, 4 * n).columns()
    first_steady = next(i for i in range(len(cols))
                        if all(len({o.ipu for o in c}) == n for c in cols[i:i + 2 * n]))
    assert first_steady == 3 * (n - 1)


@pytest.mark.parametrize("kind,p,m,makespan,total,ideal,peak", [
    ("gpipe", 4, 8, 33, Fraction(3, 11), Fraction(3, 8), (8, 8, 8, 8)),
    ("1f1b", 4, 8, 33, Fraction(3, 11), Fraction(3, 8), (4, 3, 2, 1)),
    ("gpipe", 4, 4, 21, Fraction(3, 7), Fraction(3, 4), (4, 4, 4, 4)),
    ("1f1b", 8, 32, 117, Fraction(7, 39), Fraction(7, 32), (8, 7, 6, 5, 4, 3, 2, 1)),
    ("gpipe", 4, 16, 57, Fraction(3, 19), Fraction(3, 16), None),
    ("1f1b", 2, 4, 15, Fraction(1, 5), Fraction(1, 4), None),
    ("grouped", 4, 8, 33, Fraction(3, 11), Fraction(3, 8), (7, 5, 3, 1)),
    ("interleaved", 4, 8, 40, Fraction(2, 5), Fraction(2, 3), (4, 3, 2, 1)),
])
def test_golden_timings(kind, p, m, makespan, total, ideal, peak):
    # pipeline-theory.md §1.8, t_F = 1, t_B = 2, no communication.
    s = schedule(kind, p, m)
    assert s.makespan(t_F=1, t_B=2) == makespan
    b = s.bubble(t_F=1, t_B=2)
    assert b["total"] == pytest.approx(float(total), abs=1e-12)
    assert b["ideal"] == pytest.approx(float(ideal), abs=1e-12)
    assert s.utilisation(1, 2) == pytest.approx(1 - float(total), abs=1e-12)
    if peak:
        assert s.peak_activations() == peak


def test_graphcore_equal_times_and_span_measure():
    assert schedule("grouped", 4, 8).makespan(1, 1) == 22
    assert schedule("interleaved", 4, 8).makespan(1, 1) == 22
    # 1F1B with T_F = T_B + T_W = 1 + 2: span bubble (p-1)(T_F+T_B+T_W) = 9 of span 33.
    assert schedule("1f1b", 4, 8).bubble(1, 2)["span"] == pytest.approx(9 / 33)
    # Sequential: one IPU busy at a time.
    s = schedule("sequential", 4, 8)
    assert s.makespan(1, 2) == 8 * 4 * 3
    assert s.utilisation(1, 2) == pytest.approx(1 / 4)


@pytest.mark.parametrize("kind", ["gpipe", "1f1b", "grouped", "poptorch"])
@pytest.mark.parametrize("n,m", [(2, 4), (3, 6), (4, 8), (5, 20)])
def test_fill_drain_formula(kind, n, m):
    # (m + p - 1)(t_F + t_B) for per-stage-uniform costs, any t_F, t_B.
    for t_f, t_b in ((1, 2), (2, 3), (1.5, 1)):
        assert schedule(kind, n, m).makespan(t_f, t_b) == pytest.approx((m + n - 1) * (t_f + t_b))


def test_per_stage_durations():
    s = schedule("grouped", 2, 4)
    # Each step lasts as long as its busiest IPU.
    assert s.makespan(t_F=[1, 3], t_B=[2, 2]) == 1 + 3 + 5 + 5 + 5 + 2 + 2
    with pytest.raises(PipelineConfigError, match="one per stage"):
        s.makespan(t_F=[1, 2, 3])


def test_async_steps_are_unit_time_starts():
    for kind in ("gpipe", "1f1b"):
        for n, m in ((4, 8), (3, 2), (5, 3)):
            s = schedule(kind, n, m)
            start, _ = s.timing(1, 1)
            assert start.tolist() == [o.step for o in s.ops]


def test_recomputation_inserts_r_before_each_b():
    s = schedule("grouped", 3, 6, recomputation=True)
    ops = s.ops
    assert sum(o.phase == "R" for o in ops) == 18
    for i, o in enumerate(ops):
        if o.phase == "B":
            r = ops[i - 1]
            assert (r.phase, r.stage, r.microbatch, r.step) == ("R", o.stage, o.microbatch, o.step)
    assert s.makespan(1, 2, t_R=1) > schedule("grouped", 3, 6).makespan(1, 2)


@pytest.mark.parametrize("kind", KINDS)
def test_inference_schedules(kind):
    n = 3
    s = schedule(kind, n, 6, training=False)
    assert {o.phase for o in s.ops} == {"F"}
    assert Counter((o.stage, o.microbatch) for o in s.ops) == Counter(
        (k, m) for k in range(n) for m in range(6))
    assert s.num_steps == (6 * n if kind == "sequential" else 6 + n - 1)
    assert s.fifo_depths == (0,) * n


def test_table_draws_ops():
    text = schedule("grouped", 2, 4).table()
    assert text.splitlines()[1].split()[:3] == ["IPU1:", "F0", "B0+F1"]


# --- property tests ------------------------------------------------------------------

VALID_MULTIPLE = {"grouped": lambda n: 2 * n, "interleaved": lambda n: n}


@st.composite
def schedules(draw):
    kind = draw(st.sampled_from(KINDS))
    n = draw(st.integers(1, 6))
    if kind in VALID_MULTIPLE:
        count = VALID_MULTIPLE[kind](n) * draw(st.integers(1, 4))
    elif kind == "poptorch":
        count = draw(st.integers(2 * n - 1, 3 * n + 3))
    else:
        count = draw(st.integers(1, 12))
    return schedule(kind, n, count, recomputation=draw(st.booleans()))


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_schedule_invariants(s):
    n, g = s.num_stages, s.gradient_accumulation
    pos = {(o.phase, o.stage, o.microbatch): i for i, o in enumerate(s.ops)}
    # every op exactly once
    assert len(pos) == len(s.ops)
    assert {k for k in pos if k[0] != "R"} == {
        (ph, k, m) for ph in "FB" for k in range(n) for m in range(g)}
    step = {key: s.ops[i].step for key, i in pos.items()}
    for m in range(g):
        for k in range(n):
            # every F before its B; stage order respected (in op order and in steps)
            assert pos[("F", k, m)] < pos[("B", k, m)]
            if k:
                assert step[("F", k - 1, m)] < step[("F", k, m)]
            if k < n - 1:
                assert step[("B", k + 1, m)] < step[("B", k, m)]
                assert step[("F", k, m)] < step[("B", k, m)]
    # steps never go backwards in op order
    assert all(a.step <= b.step for a, b in zip(s.ops, s.ops[1:]))
    # no IPU does two things at once (grouped/PopTorch: one F and one B per step)
    per = defaultdict(Counter)
    for o in s.ops:
        per[(o.step, o.ipu)][o.phase] += 1
    for (_, q), c in per.items():
        if s.kind in ("grouped", "poptorch"):
            assert c["F"] <= 1 and c["B"] <= 1
        elif s.kind == "sequential" and q == n - 1 and s.training:  # F(N-1), B(N-1) merged
            assert c["F"] == c["B"] == 1
        else:
            assert c["F"] + c["B"] <= 1
    start, end = s.timing(1, 2)
    by_ipu = defaultdict(list)
    for o, a, b in zip(s.ops, start, end):
        by_ipu[o.ipu].append((a, b))
    for spans in by_ipu.values():
        spans.sort()
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))
    # the stash never exceeds its FIFO plus the stage's output buffer
    live = [0] * n
    for o in s.ops:
        live[o.stage] += {"F": 1, "B": -1, "R": 0}[o.phase]
        assert live[o.stage] <= s.fifo_depths[o.stage] + 1
    assert s.peak_activations() == tuple(min(d + 1, g) for d in s.fifo_depths)
    if s.kind in ("grouped", "interleaved", "poptorch"):
        # activations kept through a whole step (neither made nor used in it) fit the FIFO
        for t in range(s.num_steps):
            for k in range(n):
                held = sum(step[("F", k, m)] < t < step[("B", k, m)] for m in range(g))
                assert held <= s.fifo_depths[k]


# --- recomputation modes (TensorFlow's RecomputationMode) ---------------------------------
# graphcore/tensorflow tensorflow/compiler/plugin/poplar/driver/tools/pipeline_util.cc,
# GetPipelineRecomputationMode, and its table in tests/pipeline_util_test.cc
# (GetPipelineRecomputationModeTestCases): Auto is RecomputeThenBackpropagate for Grouped
# and Interleaved, RecomputeAndBackpropagateInterleaved for Sequential; each explicit mode
# is supported by two schedules only.
TF_MODE_TABLE = [  # (schedule, requested, supported, resolved)
    ("interleaved", "Auto", True, "RecomputeThenBackpropagate"),
    ("interleaved", "RecomputeThenBackpropagate", True, "RecomputeThenBackpropagate"),
    ("interleaved", "RecomputeAndBackpropagateInterleaved", False, None),
    ("grouped", "Auto", True, "RecomputeThenBackpropagate"),
    ("grouped", "RecomputeThenBackpropagate", True, "RecomputeThenBackpropagate"),
    ("grouped", "RecomputeAndBackpropagateInterleaved", True,
     "RecomputeAndBackpropagateInterleaved"),
    ("sequential", "Auto", True, "RecomputeAndBackpropagateInterleaved"),
    ("sequential", "RecomputeThenBackpropagate", False, None),
    ("sequential", "RecomputeAndBackpropagateInterleaved", True,
     "RecomputeAndBackpropagateInterleaved"),
]


@pytest.mark.parametrize("kind,mode,supported,resolved", TF_MODE_TABLE)
def test_recomputation_mode_per_schedule_as_tensorflow(kind, mode, supported, resolved):
    from ipukit.parallel.schedule import _PROTO_NAMES, RecomputationMode

    count = {"grouped": 8, "interleaved": 4, "sequential": 3}[kind]
    for requested in (mode, RecomputationMode[mode]):
        if supported:
            s = schedule(kind, 4, count, recomputation=True, recomputation_mode=requested)
            assert s.recomputation_mode == resolved
        else:
            # pipeline_util.cc: UnimplementedStrCat("Pipeline schedule ", Schedule_Name(...),
            # " does not support '<mode>' recomputation mode.")
            want = (f"Pipeline schedule {kind.capitalize()} does not support "
                    f"'{_PROTO_NAMES[RecomputationMode[mode]]}' recomputation mode.")
            with pytest.raises(PipelineConfigError, match=re.escape(want)):
                schedule(kind, 4, count, recomputation=True, recomputation_mode=requested)


def test_recomputation_mode_must_be_the_enumeration():
    from ipukit.errors import PipelineConfigTypeError

    # pipelining_ops.py: TypeError("The given recomputation_mode is not a member of the
    # RecomputationMode enumeration.")
    with pytest.raises(TypeError, match="The given recomputation_mode is not a member of the "
                                        "RecomputationMode enumeration") as info:
        schedule("grouped", 2, 4, recomputation=True, recomputation_mode="fast")
    assert isinstance(info.value, PipelineConfigTypeError)
    assert schedule("grouped", 2, 4).recomputation_mode == ""  # no recomputation, no mode
    # both modes run one R before each B (kit convention)
    a, b = (schedule("grouped", 3, 6, recomputation=True, recomputation_mode=m)
            for m in ("RecomputeThenBackpropagate", "RecomputeAndBackpropagateInterleaved"))
    assert a.ops == b.ops


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([("grouped", 3, 6), ("interleaved", 2, 4), ("poptorch", 3, 5),
                        ("gpipe", 4, 6), ("1f1b", 4, 8), ("sequential", 2, 3)]),
       st.sampled_from([1.0, 2.0]))
def test_timeline_is_the_timing_as_spans(case, t_b):
    s = schedule(*case)
    tl = s.timeline(1.0, t_b)
    start, end = s.timing(1.0, t_b)
    assert [(sp.ipu, sp.kind, sp.stage, sp.microbatch) for sp in tl] == \
        [(o.ipu, o.phase, o.stage, o.microbatch) for o in s.ops]
    assert [(sp.start, sp.end) for sp in tl] == list(zip(start.tolist(), end.tolist()))
    assert tl.num_ipus == s.num_stages and tl.makespan == s.makespan(1.0, t_b)
    # the stash samples peak at the schedule's peak activations
    peaks = [max(m.bytes["stash"] for m in tl.memory if m.ipu == q)
             for q in range(s.num_stages)]
    assert tuple(peaks) == s.peak_activations()


def test_gpipe_measures_are_the_papers_formulas():
    p, m = 4, 8
    meas = schedule("gpipe", p, m).timeline(1, 2).measures()
    assert meas["total"] == pytest.approx((p - 1) / (m + p - 1))
    assert meas["ideal"] == pytest.approx((p - 1) / m)
    # IPU 0 waits for the other stages between its last F and its first B
    assert meas["idle"][0] == {"dependency": pytest.approx(3 * (p - 1))}


# --- the schedules after Graphcore: interleaved 1F1B, ZB-H1, ZB-V, DualPipeV ------------
# Published figures and the golden cases of shared/reference/pipeline-theory.md §1.3-1.8
# (zero communication, uniform stages; t_W = 0 unless given; a chunk takes 1/v).

@pytest.mark.parametrize("kind,p,m,v,times,makespan,total,ideal,peak", [
    # Megatron interleaved 1F1B, t_F = 1, t_B = 2: bubble/ideal = (p-1)/(v m)
    ("interleaved_1f1b", 4, 8, 2, (1, 2, 0), 28.5, Fraction(3, 19), Fraction(3, 16),
     (5.5, 4.5, 3.5, 2.5)),
    ("interleaved_1f1b", 4, 8, 4, (1, 2, 0), 26.25, 0.0857, Fraction(3, 32),
     (4.75, 4.25, 3.75, 3.25)),
    ("interleaved_1f1b", 8, 32, 2, (1, 2, 0), 106.5, 0.0986, Fraction(7, 64), None),
    ("interleaved_1f1b", 4, 4, 2, (1, 2, 0), 16.5, None, Fraction(3, 8), None),
    # the zero-bubble paper's setting T_F = T_B = T_W = 1
    ("1f1b", 4, 8, 1, (1, 1, 1), 33, Fraction(9, 33), None, (4, 3, 2, 1)),
    ("zb_h1", 4, 8, 1, (1, 1, 1), 27, Fraction(3, 27), None, (4, 4, 4, 4)),
    ("zb_v", 4, 8, 2, (1, 1, 1), 25.5, Fraction(3, 51), None, (4, 4, 4, 4)),
    ("1f1b", 8, 24, 1, (1, 1, 1), 93, Fraction(21, 93), None, (8, 7, 6, 5, 4, 3, 2, 1)),
    ("zb_h1", 8, 24, 1, (1, 1, 1), 79, Fraction(7, 79), None, (8,) * 8),
])
def test_golden_timings_after_graphcore(kind, p, m, v, times, makespan, total, ideal, peak):
    s = schedule(kind, p, m, virtual_stages=v if kind == "interleaved_1f1b" else None)
    t_f, t_b, t_w = times
    assert s.makespan(t_f, t_b, t_W=t_w) == pytest.approx(makespan, abs=1e-12)
    b = s.bubble(t_f, t_b, t_W=t_w)
    if total is not None:
        assert b["total"] == pytest.approx(float(total), abs=1e-4)
    if ideal is not None:
        assert b["ideal"] == pytest.approx(float(ideal), abs=1e-12)
    if peak:
        assert s.peak_activations() == peak
    # the same work for every kind: p IPUs, each m (t_F + t_B + t_W) busy
    assert b["ideal"] == pytest.approx(makespan / (m * sum(times)) - 1, abs=1e-12)


def span_bubble(s, *times, **kw):
    """The zero-bubble paper's bubble: the longest per-IPU span minus its work."""
    start, end = s.timing(*times, **kw)
    spans = []
    for q in range(s.num_stages):
        mine = [i for i, o in enumerate(s.ops) if o.ipu == q]
        spans.append(end[mine].max() - start[mine].min())
    return max(spans) - sum(end - start) / s.num_stages


@pytest.mark.parametrize("p,m,bubbles", [(4, 8, (9, 3, 0)), (8, 24, (21, 7, None))])
def test_zero_bubble_span_bubbles(p, m, bubbles):
    # §1.8: span bubbles with unit times: 1F1B (p-1)(T_F+T_B+T_W), ZB-H1 (p-1)(T_F+T_B-T_W),
    # ZB-V 0 (the paper's Table 2 / the sail-sg README)
    for kind, want in zip(("1f1b", "zb_h1", "zb_v"), bubbles):
        if want is not None:
            assert span_bubble(schedule(kind, p, m), 1, 1, t_W=1) == pytest.approx(want)
    assert schedule("zb_v", 4, 8).bubble(1, 1, t_W=1)["span"] == 0


def test_zero_bubble_papers_profiled_times():
    # The zero-bubble paper's Table 9 (1.5B model, p = 8, m = 24): T_F = 18.522,
    # T_B = 18.086, T_W = 9.337 (§1.8): the 1F1B bubble is 7 (T_F+T_B+T_W) = 321.615,
    # ZB-H1's span bubble 7 (T_F+T_B-T_W) = 190.897.
    t_f, t_b, t_w = 18.522, 18.086, 9.337
    one = schedule("1f1b", 8, 24)
    assert one.makespan(t_f, t_b, t_W=t_w) - 24 * (t_f + t_b + t_w) == pytest.approx(321.615)
    assert span_bubble(one, t_f, t_b, t_W=t_w) == pytest.approx(7 * (t_f + t_b + t_w))
    assert span_bubble(schedule("zb_h1", 8, 24), t_f, t_b, t_W=t_w) == \
        pytest.approx(190.897)


def test_dualpipev_bubbles_are_deepseeks():
    # deepseek-ai/DualPipe README, images/dualpipev.png (4 ranks, 10 micro-batches, one
    # cell per chunk op): 6, 5, 4 and 3 idle cells inside each device's span; the README's
    # bubble (PP/2 - 1)(F&B + B - 3W) with PP = 2p stages, F, B (full), W per chunk and,
    # as the kit runs a pair, F&B = F + B, for T_F = T_B = T_W.
    s = schedule("dualpipev", 4, 10)
    start, end = s.timing(2, 2, t_W=2)  # a chunk op: one cell
    idle = []
    for q in range(4):
        mine = [i for i, o in enumerate(s.ops) if o.ipu == q]
        idle.append(end[mine].max() - start[mine].min() - (end - start)[mine].sum())
    assert idle == [6, 5, 4, 3]
    for p, m in ((2, 4), (3, 8), (4, 16), (8, 16), (5, 13)):
        f, b, w = 0.5, 1.0, 0.5  # t = 1: a chunk half of it; the full B is B + W
        assert span_bubble(schedule("dualpipev", p, m), 1, 1, t_W=1) == \
            pytest.approx((2 * p / 2 - 1) * ((f + b) + b - 3 * w))


def test_fused_units_start_together_and_send_at_their_end():
    # DualPipe's _forward_backward_chunk (and a full backward) receives every input, runs,
    # then sends every output: a unit's outputs leave when its last op ends
    s = schedule("dualpipev", 3, 8)
    assert s.fused and all(len(u) in (2, 3) for u in s.fused)
    start, end = s.timing(1, 2, t_W=0.5)
    at = {(o.phase, o.stage, o.microbatch): (a, e) for o, a, e in zip(s.ops, start, end)}
    for unit in s.fused:
        assert [at[k][0] for k in unit[1:]] == [at[k][1] for k in unit[:-1]]  # in a row
        unit_end = at[unit[-1]][1]
        for ph, k, m in unit:  # the next stage's F, the previous stage's B wait for it
            user = {"F": ("F", k + 1, m), "B": ("B", k - 1, m)}.get(ph)
            if user in at and user not in unit:
                assert at[user][0] >= unit_end
    with_r = schedule("dualpipev", 3, 8, recomputation=True)
    assert all(u.index(("R",) + k[1:]) == u.index(k) - 1 for u in with_r.fused
               for k in u if k[0] == "B")


@pytest.mark.parametrize("p,m", [(4, 8), (8, 24), (3, 5), (6, 6)])
def test_activation_bytes_are_the_papers(p, m):
    mb, mw = 1000, 370
    # ZB paper Table 2: 1F1B p M_B; ZB-H1 worker i (1-based) (p-i+1) M_B + (i-1) M_W
    assert schedule("1f1b", p, m).peak_activations(mb)[0] == p * mb
    assert schedule("zb_h1", p, m).peak_activations(mb, mw) == tuple(
        (p - r) * mb + r * mw for r in range(p))
    # ZB-V: p M_B on every IPU once the pipeline fills (m >= 2p - 1; kit convention
    # M_W = M_B: an upper bound)
    if m >= 2 * p - 1:
        assert schedule("zb_v", p, m).peak_activations(mb) == (p * mb,) * p
    # DualPipeV (DeepSeek's README): PP + 1 chunk activations per device, PP = 2p stages
    if m >= 2 * p:
        for w in (mb, 0):
            assert schedule("dualpipev", p, m).peak_activations(mb, w) == \
                ((2 * p + 1) * mb / 2,) * p


def test_activation_bytes_count_chunks():
    s = schedule("interleaved_1f1b", 4, 8, virtual_stages=2)
    assert s.peak_activations(bytes_per_microbatch=64) == (352, 288, 224, 160)
    assert s.peak_activations(64) == tuple(64 * x for x in s.peak_activations())
    # Megatron / Korthikanti: rank 0 holds p (1 + (p-1)/(p v)) micro-batches
    for p, v in ((4, 2), (4, 4), (8, 2), (3, 3)):
        s = schedule("interleaved_1f1b", p, 2 * p, virtual_stages=v)
        assert s.peak_activations()[0] == pytest.approx(p * (1 + (p - 1) / (p * v)))
    for bad in (-1, float("nan"), "1k", True):
        with pytest.raises(PipelineConfigError, match="bytes_per_microbatch"):
            s.peak_activations(bad)
    with pytest.raises(PipelineConfigError, match="M_W <= M_B"):
        schedule("zb_h1", 4, 8).peak_activations(10, 20)


def test_unsplit_backward_takes_t_b_plus_t_w():
    for kind in KINDS + ("interleaved_1f1b",):
        count = {"grouped": 8, "poptorch": 7}.get(kind, 4)
        v = 2 if kind == "interleaved_1f1b" else None
        s = schedule(kind, 4, count, virtual_stages=v)
        a, b = s.timing(1.5, 2, t_W=0.75), s.timing(1.5, 2.75)
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
    # split kinds: the W ops take t_W, their B ops t_B
    s = schedule("zb_h1", 3, 4)
    start, end = s.timing(1, 2, t_W=0.5)
    assert {(o.phase, e - a) for o, a, e in zip(s.ops, start, end)} == {
        ("F", 1), ("B", 2), ("W", 0.5)}
    s = schedule("zb_v", 3, 4)
    start, end = s.timing([2, 2, 2], 4, t_W=[1, 1, 1])  # chunks: half a stage's time
    assert {(o.phase, e - a) for o, a, e in zip(s.ops, start, end)} == {
        ("F", 1), ("B", 2), ("W", 0.5)}
    with pytest.raises(PipelineConfigError, match="t_W"):
        s.timing(1, 2, t_W=-1)


# The authors' code, read with the `search` tool (the error texts are theirs):
# * Megatron-LM (also in sail-sg/zero-bubble-pipeline-parallelism, a Megatron fork)
#   megatron/core/parallel_state.py, initialize_model_parallel: "pipeline-model-parallel
#   size should be greater than 1 with interleaved schedule"; megatron/core/
#   pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving: "number of
#   microbatches (m) is not divisible by pipeline-model-parallel-size (p) when using
#   interleaved schedule" (torch's ScheduleInterleaved1F1B is laxer: m a multiple of
#   max(1, m // p) "rounds"; the kit keeps Megatron's rule, the README says so).
# * sail-sg/zero-bubble-pipeline-parallelism megatron/core/pipeline_parallel/zerobubble/
#   runtime.py, get_zero_bubble_forward_backward_func (ZB-H1 and ZB-V): "zero bubble must be
#   enabled with pipeline parallelism" (pipeline size > 1); any number of micro-batches
#   (torch's ScheduleZBVZeroBubble pads to 2p - 1 and drops the padding).
# * pytorch torch/distributed/pipelining/schedules.py, ScheduleZBVZeroBubble and
#   ScheduleDualPipeV: "ZBV requires exactly 2 stages per rank, but got v"; ScheduleDualPipeV:
#   "DualPipeV requires at least as many microbatches as stages" (2p stages); deepseek-ai/
#   DualPipe dualpipe/dualpipev.py, DualPipeV.step: num_chunks >= num_ranks * 2.
@pytest.mark.parametrize("kind,n,count,v,match", [
    ("interleaved_1f1b", 4, 8, None, "virtual_stages is not given.*Use virtual_stages=2"),
    ("interleaved_1f1b", 4, 8, 1, "virtual_stages is 1.*Use virtual_stages=2"),
    ("interleaved_1f1b", 1, 4, 2, "pipeline-model-parallel size should be greater than 1"),
    ("interleaved_1f1b", 4, 6, 2, r"number of microbatches \(6\) is not divisible by "
                                  r"pipeline-model-parallel-size \(4\).*"
                                  "Use gradient_accumulation 4 or 8"),
    ("interleaved_1f1b", 4, 3, 2, r"not divisible.*Use gradient_accumulation 4\."),
    ("zb_v", 4, 8, 3, "ZBV requires exactly 2 stages per rank, but got 3.*virtual_stages=2"),
    ("dualpipev", 4, 8, 1, "ZBV requires exactly 2 stages per rank, but got 1"),
    ("dualpipev", 4, 7, None, "DualPipeV requires at least as many microbatches as stages, "
                              "but got 7 microbatches and 8 stages.*Use gradient_accumulation"
                              " 8 or more"),
    ("zb_h1", 1, 8, None, "zero bubble must be enabled with pipeline parallelism: "
                          "num_stages is 1.*Use num_stages=2"),
    ("zb_v", 1, 3, None, "zero bubble must be enabled with pipeline parallelism"),
    ("zb_h1", 4, 8, 2, "virtual_stages is 2.*zb_h1.*Use virtual_stages=1"),
    ("grouped", 4, 8, 2, "virtual_stages is 2.*grouped.*Use virtual_stages=1"),
    ("1f1b", 4, 8, 4, "virtual_stages is 4.*1f1b"),
    ("zb_v", 4, 8, 2.0, "virtual_stages must be a positive integer"),
    ("1f1b", 4, 8, 0, "virtual_stages must be a positive integer"),
])
def test_each_kind_refuses_what_its_authors_refuse(kind, n, count, v, match):
    with pytest.raises(PipelineConfigError, match=match):
        schedule(kind, n, count, virtual_stages=v)


def test_what_the_authors_accept():
    schedule("interleaved_1f1b", 2, 2, virtual_stages=5)
    schedule("zb_v", 3, 1)  # torch pads to 2p-1 micro-batches and drops the padding
    schedule("zb_h1", 5, 2)
    schedule("zb_h1", 2, 1)
    schedule("dualpipev", 1, 2)  # DualPipeV.step asserts only num_chunks >= 2 num_ranks
    assert schedule("zb_v", 4, 8).virtual_stages == 2
    assert schedule("1f1b", 4, 8, virtual_stages=1).virtual_stages == 1


def test_chunks_and_placement():
    s = schedule("interleaved_1f1b", 4, 8, virtual_stages=3)
    assert s.num_model_stages == 12 and len(s.fifo_depths) == 12
    assert [s.ipu_of(k) for k in range(12)] == [0, 1, 2, 3] * 3
    assert [s.chunk(k) for k in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    assert all(o.ipu == s.ipu_of(o.stage) for o in s.ops)
    v = schedule("dualpipev", 3, 6)
    assert [v.ipu_of(k) for k in range(6)] == [0, 1, 2, 2, 1, 0]
    assert [v.chunk(k) for k in range(6)] == [0, 0, 0, 1, 1, 1]
    assert "F0c1" in v.table() and "W0c0" in v.table()
    assert [sp.label for sp in v.timeline()][:2] == ["F0c0", "F1c0"]


def test_inference_runs_the_training_forwards():
    # the authors' code without a backward (DualPipeV forward_only, Megatron forward_only,
    # torch eval): the forwards in the training order
    for kind, v in (("interleaved_1f1b", 2), ("zb_h1", None), ("zb_v", None),
                    ("dualpipev", None)):
        train = schedule(kind, 3, 6, virtual_stages=v)
        infer = schedule(kind, 3, 6, training=False, virtual_stages=v)
        assert {o.phase for o in infer.ops} == {"F"}
        for q in range(3):
            assert [(o.stage, o.microbatch) for o in infer.ops if o.ipu == q] == \
                [(o.stage, o.microbatch) for o in train.ops if o.ipu == q and o.phase == "F"]
        assert infer.peak_activations() == (0, 0, 0)
        assert infer.fifo_depths == (0,) * train.num_model_stages


def test_recomputation_with_split_backwards():
    s = schedule("zb_h1", 3, 5, recomputation=True)
    for i, o in enumerate(s.ops):
        if o.phase == "B":
            assert s.ops[i - 1][1:] == (o.ipu, "R", o.stage, o.microbatch)
    assert s.makespan(1, 2, t_R=1, t_W=1) > schedule("zb_h1", 3, 5).makespan(1, 2, t_W=1)


def test_generation_emits_each_op_once():
    # issue 27's speed (p = 8, m = 64, v = 4 in under 50 ms) is measured in
    # benchmarks/bench_schedule.py, not timed here; this checks the build does no more than
    # one F and one B per micro-batch and virtual stage.
    s = schedule("interleaved_1f1b", 8, 64, virtual_stages=4)
    ops = [(op.phase, op.stage, op.microbatch) for op in s.ops]
    assert len(ops) == len(set(ops)) == 2 * 64 * 8 * 4


# --- properties of every kind after Graphcore -----------------------------------------

@st.composite
def beyond(draw):
    kind = draw(st.sampled_from(BEYOND_GRAPHCORE))
    p = draw(st.integers(1, 6))
    v = None
    if kind == "interleaved_1f1b":
        p = max(p, 2)
        v = draw(st.integers(2, 4))
        m = p * draw(st.integers(1, 4))
    elif kind == "dualpipev":
        m = draw(st.integers(2 * p, 2 * p + 8))
    else:
        p = max(p, 2)  # zero bubble needs pipeline parallelism
        m = draw(st.integers(1, 14))
    return schedule(kind, p, m, virtual_stages=v, recomputation=draw(st.booleans()))


durations = st.lists(st.floats(0.25, 4), min_size=6, max_size=6)


@settings(max_examples=120, deadline=None)
@given(beyond(), durations, durations, durations)
def test_every_kind_is_a_valid_schedule(s, t_f, t_b, t_w):
    p, g, v = s.num_stages, s.gradient_accumulation, s.virtual_stages
    n = p * v
    split = s.kind != "interleaved_1f1b"
    # each F, B (and W) exactly once per (stage, micro-batch), on the stage's IPU
    keys = [(o.phase, o.stage, o.microbatch) for o in s.ops if o.phase != "R"]
    assert sorted(keys) == sorted((ph, k, m) for ph in ("FBW" if split else "FB")
                                  for k in range(n) for m in range(g))
    placed = {k: (k if k < p else 2 * p - 1 - k) if s.kind in ("zb_v", "dualpipev")
              else k % p for k in range(n)}
    assert all(o.ipu == placed[o.stage] for o in s.ops)
    # timed with random per-IPU durations: dependencies respected, one op per IPU at once
    start, end = s.timing(t_f[:p], t_b[:p], t_R=t_f[:p], t_W=t_w[:p])
    at = {(o.phase, o.stage, o.microbatch): (a, e) for o, a, e in zip(s.ops, start, end)}
    for (ph, k, m), (a, _) in at.items():
        needs = {"F": [("F", k - 1, m)] if k else [],
                 "R": [("F", k, m)],
                 "B": [("R" if s.recomputation else "F", k, m)]
                 + ([("B", k + 1, m)] if k < n - 1 else []),
                 "W": [("B", k, m)]}[ph]
        assert all(at[d][1] <= a + 1e-9 for d in needs), (ph, k, m)
    for unit in s.fused:  # a unit's outputs leave when its last op ends
        for ph, k, m in unit:
            user = {"F": ("F", k + 1, m), "B": ("B", k - 1, m)}.get(ph)
            if user in at and user not in unit:
                assert at[user][0] >= at[unit[-1]][1] - 1e-9
    for q in range(p):
        mine = sorted((a, e) for o, a, e in zip(s.ops, start, end) if o.ipu == q)
        assert all(e1 <= a2 + 1e-9 for (_, e1), (a2, _) in zip(mine, mine[1:]))
        # each IPU runs its ops in the listed order
        listed = [a for o, a in zip(s.ops, start) if o.ipu == q]
        assert listed == sorted(listed)
    # steps are the start times when every op (chunk) lasts one unit
    unit_starts = s.timing(v, v, t_R=v, t_W=v if split else None)[0]
    if not s.recomputation:
        assert unit_starts.tolist() == [o.step for o in s.ops]
    # the stash: never negative, empty at the end, its peak the schedule's
    tl = s.timeline(t_f[:p], t_b[:p], t_W=t_w[:p])
    for q in range(p):
        samples = [m.bytes["stash"] for m in tl.memory if m.ipu == q]
        assert min(samples) >= 0 and samples[-1] == 0
        assert max(samples) == s.peak_activations()[q]
    live = [0] * n
    for o in s.ops:
        live[o.stage] += {"F": 1, "W" if split else "B": -1}.get(o.phase, 0)
        assert live[o.stage] <= s.fifo_depths[o.stage] + 1


@settings(max_examples=60, deadline=None)
@given(schedules(), st.floats(0.5, 3), st.floats(0.5, 3), st.floats(0, 2))
def test_unsplit_kinds_unchanged(s, t_f, t_b, t_w):
    # Graphcore's, GPipe and 1F1B: t_W folds into B; the stash counts whole micro-batches
    start, end = s.timing(t_f, t_b + t_w)
    start_w, end_w = s.timing(t_f, t_b, t_W=t_w)
    assert start.tolist() == start_w.tolist() and end.tolist() == end_w.tolist()
    assert s.virtual_stages == 1 and s.num_model_stages == s.num_stages
    live, peak = [0] * s.num_stages, [0] * s.num_stages
    for o in s.ops:
        live[o.stage] += {"F": 1, "B": -1}.get(o.phase, 0)
        peak[o.stage] = max(peak[o.stage], live[o.stage])
    assert s.peak_activations() == tuple(peak)
    assert all(type(x) is int for x in s.peak_activations())


def test_an_order_that_cannot_run_is_refused_not_hung():
    from ipukit.parallel.schedule import _timed

    # IPU 0 waits for IPU 1's backward, IPU 1 for IPU 0's second forward: a deadlock
    units = [[(("F", 0, 0),), (("B", 0, 0),), (("F", 0, 1),), (("B", 0, 1),)],
             [(("F", 1, 1),), (("F", 1, 0),), (("B", 1, 0),), (("B", 1, 1),)]]
    with pytest.raises(PipelineConfigError, match="deadlocks at step 1: IPU0 at B0 of stage 0"
                                                  ", IPU1 at F1 of stage 1"):
        _timed("test", units, True)


def test_the_readme_table_names_the_torch_schedules():
    # issue 27.4: the README's table lists the kinds after Graphcore with their torch names
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `Schedule")]
    for torch_name, kind in (("ScheduleInterleaved1F1B", "interleaved_1f1b"),
                             ("ScheduleInterleavedZeroBubble", "zb_h1"),
                             ("ScheduleZBVZeroBubble", "zb_v"),
                             ("ScheduleDualPipeV", "dualpipev")):
        row = [r for r in rows if r.startswith(f"| `{torch_name}`")]
        assert len(row) == 1 and f'schedule("{kind}", p, m' in row[0], torch_name
