"""Lesson 13's checks: solutions score full marks, untouched exercises score zero, the
judged path (cases and verdict in the judge, plain data in between) agrees, the
references agree with ``schedule``'s golden cases and the kit's runner, and wrong answers
get feedback that names what is wrong."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ipukit as ipu
from ipukit import cost
from ipukit.grading import lesson13
from ipukit.parallel import nn, optim, pipeline, schedule
from ipukit.parallel.concurrent import split_dense
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    judged,
    judged_checks_hold,
    notebook_namespace,
)

NOTEBOOK = "13_beyond_graphcore_schedules.ipynb"
CHECKS = {"13.1": ("check_split_simulator", "simulate"),
          "13.2": ("check_zb_h1", "zb_h1"),
          "13.3": ("check_place_w", "place_w"),
          "13.4": ("check_plan_3d", "plan_3d")}


@pytest.fixture(scope="module")
def solution():
    return notebook_namespace("solutions", NOTEBOOK)


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    grade_exercises(lesson13, "13", NOTEBOOK, CHECKS, folder, status)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("check, answer", CHECKS.values())
def test_the_judged_path_passes_the_solutions_on_fresh_cases(solution, check, answer, seed):
    r = judged(getattr(lesson13, check), solution[answer], seed=seed)
    assert r.passed, r.text()


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("13", NOTEBOOK)


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(lesson13)
    assert result.failed == 0 and result.attempted > 0


# -- the references against schedule() ------------------------------------------------------


@pytest.mark.parametrize("kind, p, m, v, t", [
    ("1f1b", 4, 8, 1, (1, 2, 0)), ("zb_h1", 4, 8, 1, (1, 1, 1)), ("zb_h1", 8, 24, 1, (1, 1, 1)),
    ("zb_v", 4, 8, 2, (1, 1, 1)), ("zb_v", 3, 7, 2, (2, 3, 1)),
    ("interleaved_1f1b", 4, 8, 2, (1, 2, 0)), ("interleaved_1f1b", 4, 8, 4, (1, 2, 0))])
def test_reference_simulator_matches_schedule_timing_and_bubbles(kind, p, m, v, t):
    s = schedule(kind, p, m, virtual_stages=v)
    t_f, t_b, t_w = t
    unsplit = 0 if s.split else t_w  # an unsplit B takes t_B + t_W
    got = lesson13.reference_measures(lesson13.orders_of(s), t_f / v, (t_b + unsplit) / v,
                                      t_w / v)
    assert got["makespan"] == s.makespan(t_f, t_b, t_W=t_w)
    for key, value in s.bubble(t_f, t_b, t_W=t_w).items():
        assert np.isclose(got[key], value), key


def test_golden_figures():  # pipeline-theory.md §1.8: 33 / 27 / 25.5, 93 / 79, 28.5
    unit = (1, 1, 1)
    figures = {("1f1b", 4, 8): 33, ("zb_h1", 4, 8): 27, ("zb_h1", 8, 24): 79,
               ("1f1b", 8, 24): 93}
    for (kind, p, m), want in figures.items():
        t = unit if kind == "zb_h1" else (1, 2, 0)
        assert lesson13.reference_measures(lesson13.orders_of(schedule(kind, p, m)),
                                           *t)["makespan"] == want
    zbv = lesson13.orders_of(schedule("zb_v", 4, 8))
    assert lesson13.reference_measures(zbv, 0.5, 0.5, 0.5)["makespan"] == 25.5


def test_capped_zb_h1_without_binding_limits_is_zb_h1():
    for p in range(2, 7):  # ZB-H1 needs two IPUs (its authors refuse one)
        for m in range(1, 10):
            want = [[(ph, i) for ph, _, i in o]
                    for o in lesson13.orders_of(schedule("zb_h1", p, m))]
            assert lesson13.capped_zb_h1(p, m, [p] * p) == want, (p, m)


@given(p=st.integers(1, 6), m=st.integers(1, 10), data=st.data())
def test_capped_zb_h1_runs_within_its_limits_and_never_loses_to_1f1b_cut_in_two(p, m, data):
    caps = data.draw(st.lists(st.integers(1, p + 2), min_size=p, max_size=p))
    orders = lesson13.capped_zb_h1(p, m, caps)  # certified inside: it runs
    assert all(lesson13.in_flight_peak(o) <= c for o, c in zip(orders, caps))
    cut = lesson13._immediate([[op for op in o if op[0] != "W"] for o in orders])
    for t in ((1, 1, 1), (1, 2, 1), (2, 2, 1)):
        zb = lesson13.reference_measures(lesson13.staged(orders), *t)["makespan"]
        assert zb <= lesson13.reference_measures(lesson13.staged(cut), *t)["makespan"]


def test_greedy_w_orders_replay_to_its_own_makespan_within_caps():
    rng = np.random.default_rng(5)
    for case in lesson13._place_cases(rng):
        given_ = [[tuple(op) for op in o] for o in case["orders"]]
        t = tuple(case["t"])
        out, span = lesson13.greedy_w(given_, t, case["m_b"], case["m_w"], case["caps"])
        _, end, stuck = lesson13.reference_run(lesson13.staged(out), *t)
        assert not stuck and max(end.values()) == span == case["_span"]
        assert all(lesson13.in_flight_peak(o, case["m_b"], case["m_w"]) <= c
                   for o, c in zip(out, case["caps"]))


def test_place_cases_make_the_greedy_beat_both_simple_answers():
    beaten = 0
    for case in lesson13._place_cases(np.random.default_rng(0)):
        given_ = [[tuple(op) for op in o] for o in case["orders"]]
        t, m_b, m_w = tuple(case["t"]), case["m_b"], case["m_w"]
        now = lesson13.reference_measures(lesson13.staged(lesson13._immediate(given_)), *t)
        late = [o + [("W", i) for ph, i in o if ph == "B"] for o in given_]
        fits = all(lesson13.in_flight_peak(o, m_b, m_w) <= c for o, c in zip(late, case["caps"]))
        at_end = lesson13.reference_measures(lesson13.staged(late), *t)["makespan"]
        beaten += now["makespan"] > case["_span"] and (not fits or at_end > case["_span"])
    assert beaten >= 3


def test_plan_reference_agrees_with_the_runner_on_all_reduce_memory_and_forward_links():
    """Lesson 13 §5's layout run by the kit's runner: the IPUs, each IPU's all-reduce bytes
    and its weights/accumulator/optimizer bytes match plan_reference; so do the forward
    sends, the broadcast and the reduce. (The runner sends a concurrent stage's output
    gradient whole to its first IPU and does not charge its split to the other members;
    the exercise sends each member the gradient of its own shard.)"""
    target = ipu.IPUModel("ipu2", num_ipus=8, tiles_per_ipu=4).create_device().target
    stages = [[nn.Dense(16, 32, rng=0), nn.ReLU()], split_dense(nn.Dense(32, 64, rng=1), 2),
              [nn.ReLU(), nn.Dense(64, 10, rng=2)]]
    p = pipeline(stages, [0, [1, 2], 3], gradient_accumulation_count=6,
                 pipeline_schedule="1f1b", optimizer=optim.Momentum(0.1),
                 loss=nn.SoftmaxCrossEntropy(), target=target, offload_optimizer_state=False)
    rng = np.random.default_rng(3)
    mb = 4
    r = p.run(rng.normal(size=(2 * 6 * mb, 16)).astype(np.float32), rng.integers(0, 10, 48))
    weights = [sum(v.nbytes for v in s.params.values()) for s in p.stages]
    config = {"replicas": 2, "stage_weights": weights, "concurrent_stage": 1, "shards": 2,
              "act_bytes": [mb * 32 * 4, mb * 64 * 4], "stash_bytes": [0, 0, 0],
              "micro_batches": 6, "optimizer_slots": 1}
    plan = lesson13.plan_reference(config)
    assert plan["ipus"] == target.num_ipus == 8
    links = {key: nbytes for key, (nbytes, _) in plan["links"].items()}
    for q in p.ipus:
        ring = sum(s.bytes for s in r.timeline if s.kind == "allreduce" and s.ipu == q)
        assert links[(q, q + 4)] == ring
        w, g, o = p.static_bytes([s.on(q) for s in p.stages if q in s.ipus])
        assert plan["memory"][q] == w + g + o
    sent = {}
    for s in r.timeline:
        if s.kind in ("broadcast", "reduce"):
            sent[(s.kind, s.ipu, s.stage)] = sent.get((s.kind, s.ipu, s.stage), 0) + s.bytes
    forward = [s for s in r.timeline if s.kind == "link" and s.ipu == 0]
    assert sum(s.bytes for s in forward) == links[(0, 1)]  # stage 0's activations
    assert sent[("broadcast", 1, 1)] == links[(1, 2)]  # the concurrent stage's input
    assert sent[("reduce", 2, 1)] == links[(2, 1)]  # its partial input gradient
    member_out = sum(s.bytes for s in r.timeline if s.kind == "link" and s.ipu == 2)
    assert member_out == links[(2, 3)]  # member 1's output shard


# -- feedback ---------------------------------------------------------------------------


def _naive(orders, t_f, t_b, t_w):  # ignores the inputs: each IPU's work alone
    dur = {"F": t_f, "B": t_b, "W": t_w}
    span = max(sum(dur[op[0]] for op in o) for o in orders)
    return span, {"total": 0.0, "ideal": 0.0, "span": 0.0}


def test_simulator_feedback(solution):
    r = lesson13.check_split_simulator(_naive, show=False)
    assert "the busiest IPU's work alone" in r.message and "simulate(orders" in r.message

    def no_w(orders, t_f, t_b, t_w):
        return solution["simulate"](orders, t_f, t_b, 0)

    r = lesson13.check_split_simulator(no_w, show=False)
    assert "W taking no time" in r.message

    def mean_work(orders, t_f, t_b, t_w):
        span, bubble = solution["simulate"](orders, t_f, t_b, t_w)
        dur = {"F": t_f, "B": t_b, "W": t_w}
        mean = np.mean([sum(dur[op[0]] for op in o) for o in orders])
        return span, {**bubble, "total": (span - mean) / span}

    r = lesson13.check_split_simulator(mean_work, show=False)
    assert "the bubble 'total'" in r.message and "mean work" in r.message

    def span_is_total(orders, t_f, t_b, t_w):
        span, bubble = solution["simulate"](orders, t_f, t_b, t_w)
        return span, {**bubble, "span": bubble["total"]}

    r = lesson13.check_split_simulator(span_is_total, show=False)
    assert "the bubble 'span'" in r.message and "first op's start" in r.message
    r = lesson13.check_split_simulator(lambda *a: 3, show=False)
    assert "return (makespan, {'total'" in r.message


def _cut_in_two(orders):
    return [[x for op in o for x in ([op, ("W", op[1])] if op[0] == "B" else [op])]
            for o in orders]


def test_zb_h1_feedback(solution):
    def library(p, m, caps):  # calls the kit: no limits
        return [[(ph, i) for ph, _, i in o] for o in lesson13.orders_of(schedule("zb_h1", p, m))]

    r = lesson13.check_zb_h1(library, show=False)
    assert "zb_h1(4, 8, max_in_flight=[4, 3, 3, 3]): IPU 1 holds 4 micro-batches" in r.message
    assert "its limit is 3" in r.message and "ZB-H1 under the limits" in r.picture["text"]
    r = lesson13.check_zb_h1(lambda p, m, caps: _cut_in_two(solution["one_f_one_b"](
        p, m, caps)), show=False)
    assert "Every W runs right after its B" in r.message and "ZB-H1 under the same limits 27" \
        in r.message

    r = lesson13.check_zb_h1(_own_limit, show=False)
    assert "your orders deadlock, their F and B ops (your 1F1B) already in 08.1's simulator: " \
        "IPU 0 stops at B0, waiting for B0 of stage 1 (IPU 1)" in r.message
    assert "|F0F1X" in r.picture["text"] and "waits for ever" in r.picture["html"]

    def too_patient(p, m, caps):  # keeps one more W waiting than ZB-H1
        return [o[:1] + [op for op in o[1:] if op[0] != "W"] + [op for op in o if op[0] == "W"]
                for o in lesson13.capped_zb_h1(p, m, caps)]

    r = lesson13.check_zb_h1(too_patient, show=False)
    assert "zb_h1(4, 8, max_in_flight=[4, 4, 4, 4]): IPU 0 holds 8 micro-batches" in r.message
    assert "its limit is 4" in r.message

    def more_waiting_w(p, m, caps):  # IPU 1 keeps 2 W ops waiting where its limit allows
        orders = lesson13.capped_zb_h1(p, m, caps)
        if p > 1 and caps[1] > lesson13.in_flight_peak(orders[1]):
            orders[1] = _keep(orders[1], 2, m)
        return orders

    r = lesson13.check_zb_h1(more_waiting_w, show=False)
    assert "zb_h1(4, 8, max_in_flight=[2, 4, 4, 4]): IPU 1 holds 4 micro-batches at once, " \
        "ZB-H1 under these limits only 3" in r.message

    def w_first(p, m, caps):
        orders = solution["zb_h1"](p, m, caps)
        o = orders[0]
        i, j = o.index(("B", 0)), o.index(("W", 0))
        o[i], o[j] = o[j], o[i]
        return orders

    r = lesson13.check_zb_h1(w_first, show=False)
    assert "IPU 0 runs W0 before B0" in r.message
    r = lesson13.check_zb_h1(lambda p, m, caps: solution["one_f_one_b"](p, m, caps),
                             show=False)
    assert "never runs W0" in r.message and "split into B and W" in r.message
    r = lesson13.check_zb_h1(lambda p, m, caps: [[("F", 0)]], show=False)
    assert "return 4 lists" in r.message


@given(st.integers(1, 4), st.integers(1, 5), st.randoms(use_true_random=False))
def test_split_orders_run_when_their_1f1b_runs_in_08_1s_simulator(p, m, random):
    # 13.2's check reports a deadlock from 08.1's simulator: W ops placed anywhere after
    # their B never block, so the split orders deadlock exactly when their F/B ops do.
    from ipukit.grading import lesson08

    fb = [[("F", i) for i in range(m)] + [("B", i) for i in range(m)] for _ in range(p)]
    for o in fb:  # some F/B orders run (GPipe), shuffled ones often deadlock
        if random.random() < 0.7:
            random.shuffle(o)
    split = []
    for o in fb:
        out = list(o)
        for i in range(m):  # each W somewhere after its B
            out.insert(random.randint(out.index(("B", i)) + 1, len(out)), ("W", i))
        split.append(out)
    _, stuck08 = lesson08.reference_run(fb, [1] * p, [2] * p)
    _, _, stuck = lesson13.reference_run(lesson13.staged(split), 1, 1, 1)
    assert bool(stuck) == bool(stuck08)


def _keep(order, keep, m):
    """``order`` with its W ops placed so that ``keep`` wait after each B."""
    out, waiting = [], []
    for op in order:
        if op[0] == "W":
            continue
        out.append(op)
        if op[0] == "B":
            waiting.append(op[1])
            if len(waiting) > keep:
                out.append(("W", waiting.pop(0)))
    return out + [("W", i) for i in waiting]


def _own_limit(p, m, caps):
    """ZB-H1 whose warm-up ignores the IPU before it (deadlocks where a limit binds)."""
    out = []
    for r in range(p):
        w = min(p - r, caps[r], m)
        order = [("F", i) for i in range(w)]
        for i in range(m):
            order += [("B", i)] + ([("F", i + w)] if i + w < m else [])
        out.append(_keep(order, min(r, caps[r] - w), m))
    return out


def test_place_w_feedback(solution):
    def now(orders, *args):
        return lesson13._immediate([[tuple(op) for op in o] for o in orders])

    r = lesson13.check_place_w(now, show=False)
    assert "Every W runs right after its B" in r.message and "place_w(orders" in r.message
    assert "W ops in idle slots (the greedy)" in r.picture["text"]

    def at_end(orders, *args):
        return [[tuple(op) for op in o] + [("W", i) for ph, i in o if ph == "B"]
                for o in orders]

    r = lesson13.check_place_w(at_end, show=False)
    assert "All your W ops run at the end" in r.message

    def reordered(orders, *args):
        out = solution["place_w"](orders, *args)
        out[1] = out[1][1:2] + out[1][:1] + out[1][2:]  # F1 before F0
        return out

    r = lesson13.check_place_w(reordered, show=False)
    assert "IPU 1's F and B ops must keep their order" in r.message

    def greedy_ignoring_caps(orders, t_f, t_b, t_w, m_b, m_w, caps):
        return solution["place_w"](orders, t_f, t_b, t_w, m_b, m_w, [10**9] * len(caps))

    r = lesson13.check_place_w(greedy_ignoring_caps, show=False)
    assert "over its cap of" in r.message and "a W that waits keeps its bytes" in r.message


def test_plan_3d_feedback(solution):
    r = lesson13.check_plan_3d(lambda config: solution["plan_3d"]({**config, "replicas": 1}),
                               show=False)
    assert "it takes 8 IPUs, you said 4. That is one replica" in r.message

    def no_broadcast(config):
        out = solution["plan_3d"](config)
        first = config["concurrent_stage"]  # the first member's IPU: one IPU per stage before
        out["links"] = {k: v for k, v in out["links"].items()
                        if not (k[0] == first and k[1] == first + 1)}
        return out

    r = lesson13.check_plan_3d(no_broadcast, show=False)
    assert "IPU 1 sends IPU 2" in r.message and "broadcast" in r.message

    def whole_allreduce(config):  # every IPU sends all its gradients: not a ring
        real = cost.ring_bytes
        cost.ring_bytes = lambda kind, nbytes, ranks: nbytes
        try:
            return solution["plan_3d"](config)
        finally:
            cost.ring_bytes = real

    r = lesson13.check_plan_3d(whole_allreduce, show=False)
    assert "ring all-reduce" in r.message

    def no_accumulator(config):
        out = solution["plan_3d"](config)
        return {**out, "memory": [x - 1 for x in out["memory"]]}

    r = lesson13.check_plan_3d(no_accumulator, show=False)
    assert "IPU 0 needs 2,300 bytes at its peak" in r.message
    r = lesson13.check_plan_3d(lambda config: {"ipus": 3}, show=False)
    assert "return {'ipus': n, 'links'" in r.message

    def counts_stage_ipu_too(config):
        out = solution["plan_3d"](config)
        return {**out, "ipus": config["replicas"] * (len(config["stage_weights"])
                                                     + config["shards"])}

    r = lesson13.check_plan_3d(counts_stage_ipu_too, show=False)
    assert "N - 1 + S per replica" in r.message


def test_ring_bytes_round_up():  # 13.4's third fixed case: 500 bytes over 3 replicas
    assert cost.ring_bytes("allreduce", 500, 3) == 667
