"""Lesson 10's checks: solutions score full marks, untouched exercises score zero, and
wrong answers get feedback that names what is wrong."""

import math

import numpy as np
import pytest

from ipukit.grading import feedback, lesson10
from ipukit.parallel import optim
from tests.lessons import SOLVED_AND_UNTOUCHED, grade_exercises, notebook_namespace

NOTEBOOK = "10_replication_rts.ipynb"
CHECKS = {"10.1": ("check_ring_allreduce", "ring_allreduce"),
          "10.2": ("check_update_collectives", "update_collectives"),
          "10.3": ("check_optimizer_state", "optimizer_state"),
          "10.4": ("check_call_arithmetic", "call_arithmetic")}


@pytest.fixture(scope="module")
def solution():
    return notebook_namespace("solutions", NOTEBOOK)


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    rows = grade_exercises(lesson10, "10", NOTEBOOK, CHECKS, folder, status)
    assert sum(r.max_points for r in rows) == 9


def test_ring_sends_two_r_minus_one_over_r_of_the_gradient(solution):
    # the solution's messages, counted independently of the check
    for r, n in [(2, 4), (4, 12), (6, 6)]:
        ring = lesson10.Ring(r)
        grads = [np.full(n, float(q + 1)) for q in range(r)]
        out = solution["ring_allreduce"](grads, ring.send)
        for a in out:
            np.testing.assert_array_equal(a, np.full(n, r * (r + 1) / 2))
        assert [sum(s) for s in ring.sent] == [2 * (r - 1) * n // r] * r


def test_ring_allreduce_feedback():
    def reduce_scatter_only(grads, send):
        r = len(grads)
        chunks = [np.split(np.array(g, dtype=float), r) for g in grads]
        for s in range(r - 1):
            arrived = [send(q, (q + 1) % r, chunks[q][(q - s) % r]) for q in range(r)]
            for q in range(r):
                chunks[(q + 1) % r][(q - s) % r] += arrived[q]
        return [np.concatenate(c) for c in chunks]

    r = lesson10.check_ring_allreduce(reduce_scatter_only)
    assert r.status == feedback.FAILED
    assert "R=2" in r.message and "that is the reduce-scatter" in r.message

    def whole_gradients(grads, send):
        r = len(grads)
        out = [np.array(g, dtype=float) for g in grads]
        msg = [np.array(g, dtype=float) for g in grads]
        for _ in range(r - 1):  # pass every gradient round the ring, add on arrival
            msg = [send(q, (q + 1) % r, msg[q]) for q in range(r)]
            msg = [msg[(q - 1) % r] for q in range(r)]
            for q in range(r):
                out[q] += msg[q]
        return out

    r = lesson10.check_ring_allreduce(whole_gradients)
    assert "You sent whole gradients: send one chunk per step" in r.message
    r = lesson10.check_ring_allreduce(lambda grads, send: [sum(grads)] * len(grads))
    assert "must not read the other replicas' gradients directly" in r.message
    r = lesson10.check_ring_allreduce(lambda grads, send: [send(0, 0, grads[0])])
    assert "replica 0 sent to replica 0, but in a ring" in r.message
    r = lesson10.check_ring_allreduce(lambda grads, send: [send(0, 5, grads[0])])
    assert "send(dst=5): replicas are numbered 0 to 1" in r.message
    assert "hint:" in r.message  # the fifth failure in this session


def test_update_collectives_feedback(solution):
    def half_ring(g, w, r, rts):
        return [] if r == 1 else [("allreduce", math.ceil((r - 1) * g / r))]

    r = lesson10.check_update_collectives(half_ring)
    assert "2(R-1)/R in all" in r.message
    assert "IPU 0's timeline has [('allreduce', 252)]" in r.message

    def gathers_gradients(g, w, r, rts):
        if r == 1:
            return []
        if not rts:
            return solution["update_collectives"](g, w, r, rts)
        return [("reducescatter", math.ceil((r - 1) * g / r)),
                ("allgather", math.ceil((r - 1) * g / r))]

    r = lesson10.check_update_collectives(gathers_gradients)
    assert "rts=True" in r.message and "moves the updated weights" in r.message
    r = lesson10.check_update_collectives(lambda g, w, r, rts: [("allreduce", 0)])
    assert "none with one replica" in r.message


def test_collectives_match_the_exact_integer_formula():
    # the runner rounds a float product; on the check's pipelines it equals exact integers
    for replicas, rts, acc in [(2, False, None), (3, False, "float16"), (4, True, None),
                               (3, True, "float16"), (5, False, None)]:
        p = lesson10.replicated(replicas, rts, gradient_accumulation_dtype=acc)
        result = lesson10.run_once(p)
        for q, stage in enumerate(p.stages):
            w, g, _ = p.static_bytes([stage])
            r = replicas
            want = ([("allreduce", -(-2 * (r - 1) * g // r))] if not rts else
                    [("reducescatter", -(-(r - 1) * g // r)),
                     ("allgather", -(-(r - 1) * w // r))])
            assert lesson10._collectives(result, q) == want


def test_optimizer_state_feedback():
    def ignores_rts(sizes, itemsize, slots, r, rts):
        return slots * itemsize * sum(sizes)

    r = lesson10.check_optimizer_state(ignores_rts)
    assert "replicas=4, rts=True" in r.message and "only its shard" in r.message

    def total_over_r(sizes, itemsize, slots, r, rts):
        return math.ceil(slots * itemsize * sum(sizes) / (r if rts else 1))

    r = lesson10.check_optimizer_state(total_over_r)
    assert "round ceil(size / R) per tensor" in r.message

    def always_sharded(sizes, itemsize, slots, r, rts):
        return sum(slots * math.ceil(n / r) * itemsize for n in sizes)

    r = lesson10.check_optimizer_state(always_sharded)
    assert "rts=False" in r.message and "every replica keeps all of the state" in r.message


def test_optimizer_state_is_what_adam_keeps_per_shard():
    # Adam: two float32 moments per weight; stage 0 is Dense(6, 9): 54 + 9 elements
    p = lesson10.replicated(4, True, optimizer=optim.Adam())
    result = lesson10.run_once(p)
    assert {m.optimizer for m in result.memory if m.ipu == 0} == {
        2 * 4 * (math.ceil(54 / 4) + math.ceil(9 / 4))}


def test_call_arithmetic_feedback(solution):
    def no_replicas(size, mb, g, di, r, mode, period):
        return size // (mb * g * di), solution["call_arithmetic"](size, mb, g, di, r, mode,
                                                                  period)[1]

    r = lesson10.check_call_arithmetic(no_replicas)
    assert "makes 6 calls of 144 samples, you said 13" in r.message
    assert "count the replicas too" in r.message

    def per_replica(size, mb, g, di, r, mode, period):
        calls, losses = solution["call_arithmetic"](size, mb, g, di, r, mode, period)
        return calls, losses // r

    r = lesson10.check_call_arithmetic(per_replica)
    assert "a call returns 36 losses, you said 18" in r.message
    assert "Every replica returns its own losses" in r.message
    r = lesson10.check_call_arithmetic(lambda *a: 3)
    assert "expected a pair (calls, losses), got 3" in r.message


def test_docstring_example_runs():
    import doctest

    result = doctest.testmod(lesson10)
    assert result.failed == 0 and result.attempted > 0
