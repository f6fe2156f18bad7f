"""Lesson 10's checks: solutions score full marks, untouched exercises score zero, the
judged path (cases and verdict in the judge, plain data in between) agrees, and wrong
answers get feedback that names what is wrong."""

import math

import numpy as np
import pytest

import ipukit as ipu
from ipukit.grading import feedback, lesson10, plain
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    graded_points,
    judged,
    judged_checks_hold,
    notebook_namespace,
)

NOTEBOOK = "10_replication_rts.ipynb"
CHECKS = {"10.1": ("check_ring_allreduce", "ring_allreduce"),
          "10.2": ("check_update_collectives", "update_collectives"),
          "10.3": ("check_zero1", "zero1_step"),
          "10.4": ("check_emulated_ring", "ring_program")}


@pytest.fixture(scope="module")
def solution():
    return notebook_namespace("solutions", NOTEBOOK)


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    rows = grade_exercises(lesson10, "10", NOTEBOOK, CHECKS, folder, status)
    assert sum(r.max_points for r in rows) == 11


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("check, answer", CHECKS.values())
def test_the_judged_path_passes_the_solutions_on_fresh_cases(solution, check, answer, seed):
    r = judged(getattr(lesson10, check), solution[answer], seed=seed)
    assert r.passed, r.text()


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("10", NOTEBOOK)


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

    r = lesson10.check_ring_allreduce(reduce_scatter_only, show=False)
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

    r = lesson10.check_ring_allreduce(whole_gradients, show=False)
    assert "You sent whole gradients: send one chunk per step" in r.message
    r = lesson10.check_ring_allreduce(lambda grads, send: [sum(grads)] * len(grads), show=False)
    assert "must not read the other replicas' gradients directly" in r.message
    r = lesson10.check_ring_allreduce(lambda grads, send: [send(0, 0, grads[0])], show=False)
    assert "replica 0 sent to replica 0, but in a ring" in r.message
    r = lesson10.check_ring_allreduce(lambda grads, send: [send(0, 5, grads[0])], show=False)
    assert "send(dst=5): replicas are numbered 0 to 1" in r.message
    assert "hint " in r.message  # the fifth failure in this session


def test_update_collectives_feedback(solution):
    def half_ring(g, w, r, rts):
        return [] if r == 1 else [("allreduce", math.ceil((r - 1) * g / r))]

    r = lesson10.check_update_collectives(half_ring, show=False)
    assert "2(R-1)/R in all" in r.message
    assert "IPU 0's timeline has [('allreduce', 252)]" in r.message

    def gathers_gradients(g, w, r, rts):
        if r == 1:
            return []
        if not rts:
            return solution["update_collectives"](g, w, r, rts)
        return [("reducescatter", math.ceil((r - 1) * g / r)),
                ("allgather", math.ceil((r - 1) * g / r))]

    r = lesson10.check_update_collectives(gathers_gradients, show=False)
    assert "rts=True" in r.message and "moves the updated weights" in r.message
    r = lesson10.check_update_collectives(lambda g, w, r, rts: [("allreduce", 0)], show=False)
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





def test_docstring_example_runs():
    import doctest

    result = doctest.testmod(lesson10)
    assert result.failed == 0 and result.attempted > 0


def _zero1_sum(weights, grad, velocity, lr, mu, comms):  # forgets the mean over replicas
    velocity = mu * velocity + comms.reduce_scatter(grad)
    chunk = np.split(weights, comms.replicas)[comms.replica] - lr * velocity
    return comms.all_gather(chunk), velocity


def test_zero1_feedback():
    r = lesson10.check_zero1(_zero1_sum, show=False)
    assert "steps with the SUM of the replicas' gradients" in r.message

    def dense(weights, grad, velocity, lr, mu, comms):  # plain all-reduce, full state
        return weights - lr * comms.all_reduce(grad) / comms.replicas, velocity

    r = lesson10.check_zero1(dense, show=False)
    assert "AttributeError" in r.message and "all_reduce" in r.message


def test_comms_reduce_scatter_and_all_gather():
    """Replica 1 of 3: its chunk of the sum, and its chunk among the others'."""
    c = lesson10.Comms(3, 1, [10.0, 20.0], [[1.0, 2.0], [5.0, 6.0]])
    assert c.reduce_scatter(np.arange(6.0)).tolist() == [12.0, 23.0]
    assert c.all_gather([3.0, 4.0]).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    r = lesson10.check_zero1(lambda w, g, v, lr, mu, comms: (comms.all_gather(w), v),
                             show=False)
    assert "comms.all_gather on replica 0: pass this replica's array of 3 elements, got " \
        "shape (6,)" in r.message


# -- 10.3: the function is one replica; the others' data come only through the collectives
FORGED_ZERO = """\
import numpy as np
from ipukit.grading import feedback, plain
real = feedback.run_trials
def old(c):  # the old trial's record, dense momentum on the gradients the kernel holds
    r, lr, mu = c['replicas'], c['lr'], c['mu']
    w, v, steps = np.asarray(c['w0'], float), np.zeros(len(c['w0'])), []
    for g in np.asarray(c['grads']).reshape(len(c['grads']), -1, len(c['w0'])):
        v = mu * v + g.mean(axis=0)
        w = w - lr * v
        steps.append({'calls': ['reduce_scatter', 'all_gather'], 'weights': w,
                      'velocity': np.split(v, r)[c.get('replica', 0)]})
    return steps
def forged(ex, cases, answers):
    if ex.id == '10.3':
        return [{'ok': plain.encode(old(c))} for c in cases]
    return real(ex, cases, answers)
feedback.run_trials = forged
"""


def test_a_replica_without_the_collectives_scores_nothing():
    """The reviewer's function read every replica's gradient and ran the collectives for
    show: now the function sees one replica's data, and the other replicas' parts come
    only from what the collectives return, so using its own gradient as the mean, or
    calling the collectives and dropping their results, fails; the forged record too."""
    def local_only(weights, grad, velocity, lr, mu, comms):
        r, q = comms.replicas, comms.replica
        velocity = mu * velocity + np.split(grad, r)[q]
        return weights - lr * grad, velocity

    def for_show(weights, grad, velocity, lr, mu, comms):
        r, q = comms.replicas, comms.replica
        comms.reduce_scatter(grad)
        velocity = mu * velocity + np.split(grad, r)[q]
        comms.all_gather(np.split(weights, r)[q] - lr * velocity)
        return weights - lr * grad, velocity

    for f in (local_only, for_show):
        r = lesson10.check_zero1(f, show=False)
        assert not r.passed and "after step 0 the weights are" in r.message
    ex = feedback.EXERCISES["10.3"]
    cases = feedback.notebook_cases(ex)
    assert all("_grads" in c and "_grads" not in feedback.public(c) for c in cases)
    namespace = {}
    exec(FORGED_ZERO.rsplit("def forged", 1)[0], namespace)
    forged = [{"ok": plain.encode(namespace["old"](c))} for c in cases]
    with pytest.raises(feedback.Wrong, match="after step 0 the weights are"):
        feedback.judge(ex, forged, cases)


def test_forged_zero1_scores_nothing_through_the_grader(tmp_path):
    """Through ``python -m ipukit.grade``: the forged record scores 0 on 10.3 (it scored
    3/3 when every replica lived in the kernel); the rest of the solutions still scores."""
    points = graded_points("solutions", NOTEBOOK, FORGED_ZERO, tmp_path / "10_zero.ipynb")
    assert points == {"10.1": 3, "10.2": 2, "10.3": 0, "10.4": 3}


def test_emulated_ring_feedback(solution):
    r = lesson10.check_emulated_ring(_via_ipu0, show=False)
    assert "IPU 0 sent 24 bytes to IPU 2; in a ring IPU 0 sends only to IPU 1" in r.message
    r = lesson10.check_emulated_ring(lambda graph, grads, add_into: ipu.Sequence(), show=False)
    assert "IPU 0's g0" in r.message
    r = lesson10.check_emulated_ring(lambda graph, grads, add_into: None, show=False)
    assert "return a Program" in r.message
    assert lesson10.check_emulated_ring(solution["ring_program"], show=False).passed


def _one_copy_per_ipu(graph, grads, add_into):
    r, n = len(grads), grads[0].shape[0]
    c, tiles = n // r, graph.target.tiles_per_ipu
    recv = []
    for q in range(r):
        buf = graph.add_variable(ipu.FLOAT, [c], f"recv{q}")
        graph.set_tile_mapping(buf, q * tiles)
        recv.append(buf)
    steps = []
    for s in range(r - 1):
        cs = graph.add_compute_set(f"reduce{s}")
        for q in range(r):
            k, d = (q - s) % r, (q + 1) % r
            steps.append(ipu.Copy(grads[q][k * c:(k + 1) * c], recv[d]))
            graph.add_vertex(cs, add_into, {"acc": grads[d][k * c:(k + 1) * c], "x": recv[d]},
                             tile=d * tiles)
        steps.append(ipu.Execute(cs))
    for s in range(r - 1):
        for q in range(r):
            k = (q + 1 - s) % r
            steps.append(ipu.Copy(grads[q][k * c:(k + 1) * c],
                                  grads[(q + 1) % r][k * c:(k + 1) * c]))
    return ipu.Sequence(*steps)


def test_emulated_ring_budget(solution):
    r = lesson10.check_emulated_ring(_one_copy_per_ipu, show=False)  # R exchanges a step
    assert r.passed and not r.star and "the reference takes" in r.cost
    r = lesson10.check_emulated_ring(solution["ring_program"], show=False)
    assert r.passed and r.star


# -- 10.1: which half of the all-reduce is wrong, at which step and chunk ------------------


def _ring(first_chunk, gather_adds=False, scale=1.0, gather_chunk=None):
    """A ring all-reduce whose reduce-scatter sends chunk ``first_chunk(q, s, r)`` (scaled
    by ``scale``) and whose all-gather sends ``gather_chunk(q, s, r)``; with
    ``gather_adds`` the all-gather adds what arrives instead of overwriting."""
    gather_chunk = gather_chunk or (lambda q, s, r: (q + 1 - s) % r)

    def ring_allreduce(grads, send):
        r = len(grads)
        chunks = [np.split(np.array(g, dtype=float), r) for g in grads]
        for s in range(r - 1):
            k = [first_chunk(q, s, r) for q in range(r)]
            arrived = [send(q, (q + 1) % r, scale * chunks[q][k[q]]) for q in range(r)]
            for q in range(r):
                chunks[(q + 1) % r][k[q]] += arrived[q]
        for s in range(r - 1):
            k = [gather_chunk(q, s, r) for q in range(r)]
            arrived = [send(q, (q + 1) % r, chunks[q][k[q]]) for q in range(r)]
            for q in range(r):
                if gather_adds:
                    chunks[(q + 1) % r][k[q]] += arrived[q]
                else:
                    chunks[(q + 1) % r][k[q]] = arrived[q]
        return [np.concatenate(c) for c in chunks]

    return ring_allreduce


def test_ring_feedback_names_the_phase_the_step_and_the_chunk():
    right = _ring(lambda q, s, r: (q - s) % r)
    assert lesson10.check_ring_allreduce(right, show=False).passed
    r = lesson10.check_ring_allreduce(_ring(lambda q, s, r: (q + s) % r), show=False)
    assert "R=3" in r.message and "(chunk 0)" in r.message
    assert ("In step 1 of the reduce-scatter, replica 0 sent chunk 1; it should pass on "
            "chunk 2, the one it received in the step before with its own part added"
            ) in r.message
    r = lesson10.check_ring_allreduce(_ring(lambda q, s, r: (q - s) % r, gather_adds=True),
                                      show=False)
    assert "Every message was right" in r.message and "overwrites its copy" in r.message
    r = lesson10.check_ring_allreduce(_ring(lambda q, s, r: (q - s) % r, scale=0.5),
                                      show=False)
    assert ("In step 0 of the reduce-scatter, replica 0 sent values that are no sum of the "
            "replicas' chunk") in r.message

    wrong_gather = _ring(lambda q, s, r: (q - s) % r,
                         gather_chunk=lambda q, s, r: (q - s) % r)
    r = lesson10.check_ring_allreduce(wrong_gather, show=False)
    assert ("In step 0 of the all-gather, replica 0 sent chunk 0; it should pass on chunk 1, "
            "the one it received in the step before") in r.message


def test_ring_trace_is_empty_for_a_right_ring_and_counts_missing_steps():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=8) for _ in range(4)]
    ring = lesson10.Ring(4)
    _ring(lambda q, s, r: (q - s) % r)([g.copy() for g in grads], ring.send)
    assert lesson10._ring_trace(grads, ring.log) == ""
    assert "replica 0 sent 3 messages: the all-gather needs its step 0" in \
        lesson10._ring_trace(grads, [m for i, m in enumerate(ring.log) if i < 12])


# -- 10.4: the judge runs the program itself ----------------------------------------------


def _via_ipu0(graph, grads, add_into):  # everything summed on IPU 0: not a ring
    steps = []
    for q in range(1, len(grads)):
        buf = graph.add_variable(ipu.FLOAT, list(grads[0].shape), f"b{q}")
        graph.set_tile_mapping(buf, 0)
        cs = graph.add_compute_set(f"sum{q}")
        graph.add_vertex(cs, add_into, {"acc": grads[0], "x": buf}, tile=0)
        steps += [ipu.Copy(grads[q], buf), ipu.Execute(cs)]
    return ipu.Sequence(*steps, *[ipu.Copy(grads[0], grads[q]) for q in range(1, len(grads))])


def _remote_vertices(graph, grads, add_into):  # vertices on IPU 0 read other IPUs directly
    steps = []
    for q in range(1, len(grads)):
        cs = graph.add_compute_set(f"sum{q}")
        graph.add_vertex(cs, add_into, {"acc": grads[0], "x": grads[q]}, tile=1)
        steps.append(ipu.Execute(cs))
    return ipu.Sequence(*steps, *[ipu.Copy(grads[0], grads[q]) for q in range(1, len(grads))])


def _parts(step):
    """The tensor views one of ``program_as_plain``'s steps reads and writes."""
    if "copy" in step:
        return step["copy"]
    return [part for v in step["execute"] for part in (v["acc"], v["x"])]


@pytest.mark.parametrize("program", ["solution", "one_copy_per_ipu", "via_ipu0",
                                     "remote_vertices"])
def test_the_judges_byte_count_is_the_compilers(solution, program):
    build = {"solution": solution["ring_program"], "one_copy_per_ipu": _one_copy_per_ipu,
             "via_ipu0": _via_ipu0, "remote_vertices": _remote_vertices}[program]
    for r, n in [(2, 4), (3, 6), (4, 8)]:
        dev, graph, grads = lesson10.ring_graph(r, n)
        prog = build(graph, grads, lesson10.AddInto)
        exe = ipu.compile_graph(graph, [prog])
        tiles = dev.target.tiles_per_ipu
        compiled = np.zeros((r, r), np.int64)
        for step in exe.steps:
            for src, dst, nbytes in step.transfers.tolist():
                if src // tiles != dst // tiles:
                    compiled[src // tiles, dst // tiles] += nbytes
        steps = lesson10.program_as_plain(graph, prog, lesson10.AddInto, "ring")
        plain.encode(steps)
        values = [np.arange(n, dtype=np.float64) * (q + 1) for q in range(r)]
        memory = np.zeros(1 + max(int(p["addresses"].max()) for s in steps
                                  for p in _parts(s)))
        for q in range(r):
            memory[grads[q].idx] = values[q]
        assert (lesson10.run_plain(steps, memory, tiles, r) == compiled).all()
        for q in range(r):  # and it computes what the engine computes: the sum
            np.testing.assert_allclose(memory[grads[q].idx], np.sum(values, axis=0))


def test_emulated_ring_refuses_what_the_judge_cannot_follow():
    class Twice(ipu.Vertex):
        acc = ipu.InOut(ipu.Vector(ipu.FLOAT))
        x = ipu.Input(ipu.Vector(ipu.FLOAT))

        def compute(self):
            self.acc[...] = self.acc + self.x

    def own_codelet(graph, grads, add_into):
        return _via_ipu0(graph, grads, Twice)

    r = lesson10.check_emulated_ring(own_codelet, show=False)
    assert "has a Twice vertex; use the add_into codelet" in r.message

    def printing(graph, grads, add_into):
        return ipu.Sequence(_via_ipu0(graph, grads, add_into), ipu.PrintTensor("g", grads[0]))

    r = lesson10.check_emulated_ring(printing, show=False)
    assert "got PrintTensor" in r.message


def test_a_forged_program_description_is_refused_not_allocated(solution):
    ex = lesson10.check_emulated_ring.exercise
    cases = feedback.draw_cases(ex, np.random.default_rng(0))
    outputs = feedback.run_trials(ex, cases, (solution["ring_program"],))
    decoded = [plain.decode(o["ok"]) for o in outputs]
    copy = decoded[1]["programs"][0]["Sequence"][0]["Copy"]
    copy[1]["tensor"]["addresses"][0] = 10**12  # a huge address (a concat's destination)
    with pytest.raises(feedback.Wrong, match="your graph cannot be rebuilt: GraphDataError: "
                       "Copy: addresses outside the 12 float32 elements of the graph"):
        ex.verdict(cases, decoded)
    decoded[1]["programs"] = [{"Repeat": [10**9, {"Sequence": []}]}]  # never followed
    with pytest.raises(feedback.Wrong, match="your program takes more than 1,000 steps"):
        ex.verdict(cases, decoded)


def test_numbers_without_a_graph_score_nothing(solution):
    """Issue 26 point 1: the gradients are the judge's; the kernel sends the graph, which
    the judge runs (its cycles earn the star), so the sums alone score nothing."""
    ex = lesson10.check_emulated_ring.exercise
    cases = feedback.draw_cases(ex, np.random.default_rng(0))
    assert all(set(feedback.public(c)) == {"replicas", "n"} for c in cases)
    outputs = feedback.run_trials(ex, cases, (solution["ring_program"],))
    cost = feedback.judge(ex, outputs, cases)
    assert cost.star and cost.used == cost.budget  # the judge's own run of the reference
    forged = [{"g": [np.sum(c["_values"], axis=0)] * c["replicas"], "steps": [],
               "cycles": 1} for c in cases]  # even knowing the values
    with pytest.raises(feedback.Wrong, match="your graph cannot be rebuilt"):
        ex.verdict(cases, forged)


def _long_ring(graph, grads, add_into):  # the reference, then 10**6 empty passes
    return ipu.Sequence(_one_copy_per_ipu(graph, grads, add_into),
                        ipu.Repeat(1000, ipu.Repeat(1000, ipu.Sequence())))


def test_a_program_too_long_to_follow_is_refused_in_bounded_time():
    r = lesson10.check_emulated_ring(_long_ring, show=False)
    assert "your program takes more than 1,000 steps" in r.message


FORGED = """\
import numpy as np
from ipukit.grading import feedback, plain
real = feedback.run_trials
from ipukit.grading import lesson10
def right(c):  # the old trial's outputs: the sums, and the kit's reference ring's steps
    values = c.get('values')
    r, n = c['replicas'], len(values[0]) if values else c['n']
    _, graph, grads = lesson10.ring_graph(r, n)
    prog = lesson10.reference_ring(graph, grads, lesson10.AddInto)
    total = np.sum(values, axis=0) if values else np.zeros(n)
    return {'g': [total] * r, 'cycles': 1,
            'steps': lesson10.program_as_plain(graph, prog, lesson10.AddInto, 'ring')}
def forged(ex, cases, answers):
    if ex.id == '10.4':
        return [{'ok': plain.encode(right(c))} for c in cases]
    return real(ex, cases, answers)
feedback.run_trials = forged
"""


def test_forged_outputs_score_nothing_through_the_grader(tmp_path):
    """Through ``python -m ipukit.grade``: a cell that replaces the kernel's trial with
    the old trial's numbers (they scored 3/3 and the star) scores nothing on 10.4, while
    the rest of the solutions still scores."""
    points = graded_points("solutions", NOTEBOOK, FORGED, tmp_path / "10_forged.ipynb")
    assert points == {"10.1": 3, "10.2": 2, "10.3": 3, "10.4": 0}


def _sizes_only(grads, send):
    """Sends 2(R-1) chunks of zeros (the right sizes to the right neighbour) and returns the
    sum it read from every replica directly: no ring at all."""
    r = len(grads)
    for _ in range(2 * (r - 1)):
        for q in range(r):
            send(q, (q + 1) % r, np.zeros(len(grads[q]) // r))
    total = np.sum(grads, axis=0)
    return [total.copy() for _ in grads]


def test_messages_of_the_right_size_but_no_ring_score_nothing(solution):
    """The points rest on what the messages carry, not only on their sizes: right sums read
    directly from the other replicas, with zeros of the right size sent for show, fail in
    the notebook and on the judged path (where a forging cell could send that log too)."""
    r = lesson10.check_ring_allreduce(_sizes_only, show=False)
    assert r.status == feedback.FAILED
    assert "sent values that are no sum of the replicas' chunk" in r.message
    assert not judged(lesson10.check_ring_allreduce, _sizes_only, seed=3).passed
    assert judged(lesson10.check_ring_allreduce, solution["ring_allreduce"], seed=3).passed
