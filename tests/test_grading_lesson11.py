"""Lesson 11's checks: solutions score full marks, untouched exercises score zero, and
wrong answers get feedback that names what is wrong."""

import math

import nbformat
import numpy as np
import pytest

from ipukit.grading import common, feedback, lesson11, plain
from ipukit.parallel import sharded
from ipukit.target import IPUModel
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    graded_points,
    judged,
    judged_checks_hold,
    kit_notebook,
    notebook_namespace,
)

NOTEBOOK = "11_concurrent_sharded_embedding.ipynb"
CHECKS = {"11.1": ("check_sharded_log_softmax", "sharded_log_softmax"),
          "11.2": ("check_ce_backward", "ce_backward"),
          "11.3": ("check_collective_cycles", "collective_cycles"),
          "11.4": ("check_embedding_lookup", "embedding_lookup"),
          "11.5": ("check_embedding_grad", "embedding_grad")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    grade_exercises(lesson11, "11", NOTEBOOK, CHECKS, folder, status)


def test_checks_are_judged_on_fresh_cases():
    judged_checks_hold("11", NOTEBOOK)


def test_reference_log_softmax_is_the_hand_checked_case():
    # golden case 9: logits [1, 2, 3, 4], log D = 0.4401897
    np.testing.assert_allclose(lesson11.dense_log_softmax([[1.0, 2.0, 3.0, 4.0]]),
                               [[-3.4401897, -2.4401897, -1.4401897, -0.4401897]], atol=1e-7)


def _dense(x):
    return x - x.max(1, keepdims=True) - np.log(np.exp(x - x.max(1, keepdims=True)).sum(
        1, keepdims=True))


def test_log_softmax_feedback():
    r = lesson11.check_sharded_log_softmax(lambda parts, log: [_dense(x) for x in parts])
    assert "no collective ran" in r.message and "hint " in r.message

    def gathered(parts, log):  # right values, but shard s read every other shard's logits
        return np.split(_dense(np.concatenate(parts, 1)), len(parts), 1)

    r = lesson11.check_sharded_log_softmax(gathered)
    assert "no collective ran" in r.message and "nan in your kernel" in r.message

    def all_reduce_the_logits(parts, log):
        s_count = len(parts)
        padded = [np.concatenate([x if i == s else 0 * x for i in range(s_count)], 1)
                  for s, x in enumerate(parts)]
        full = log.all_reduce(padded, "max", "logits")[0]
        return np.split(_dense(full), s_count, 1)

    r = lesson11.check_sharded_log_softmax(all_reduce_the_logits)
    assert "logits [1, 4] over 2 shards (checked: shard 1): all-reduce 1 ('logits') carries " \
        "4 numbers per shard (shape [1, 4]); the other shards all-reduce each row's max, " \
        "shape [1]" in r.message

    def no_shift(parts, log):
        sums = log.all_reduce([np.exp(x).sum(1) for x in parts], "add", "sum")
        return [x - np.log(d)[:, None] for x, d in zip(parts, sums)]

    r = lesson11.check_sharded_log_softmax(no_shift)
    assert "all-reduce 1 ('sum') is 'add'; the other shards (the check plays them) " \
        "all-reduce MAX of each row's max here" in r.message

    def unused_max(parts, log):  # all-reduces the max but never subtracts it
        log.all_reduce([x.max(1) for x in parts], "max", "max")
        return no_shift(parts, log)

    with np.errstate(over="ignore", invalid="ignore"):  # the case with logits near 1000
        r = lesson11.check_sharded_log_softmax(unused_max)
    assert "your all-reduce ADD 'sum' sent" in r.message
    assert "each shard sends its rows' sums of exp(x - the row's max over all shards)" \
        in r.message

    def own_max(parts, log):  # all-reduces the max, then shifts by its own row max
        log.all_reduce([x.max(1) for x in parts], "max", "max")
        shifted = [x - x.max(1, keepdims=True) for x in parts]
        sums = log.all_reduce([np.exp(t).sum(1) for t in shifted], "add", "sum")
        return [t - np.log(d)[:, None] for t, d in zip(shifted, sums)]

    r = lesson11.check_sharded_log_softmax(own_max)
    assert "logits [3, 8] over 4 shards (checked: shard 1): your all-reduce ADD 'sum' sent 1 " \
        "from shard 1 at [0]" in r.message
    r = lesson11.check_sharded_log_softmax(lambda parts, log: parts[0])
    assert "return a list of 2 arrays" in r.message


def _solution_backward(log_probs, labels, g):
    size, rows, out = log_probs[0].shape[1], np.arange(len(labels)), []
    for s, lp in enumerate(log_probs):
        d = np.exp(lp) * g[:, None]
        local = labels - s * size
        mine = (local >= 0) & (local < size)
        d[rows[mine], local[mine]] -= g[mine]
        out.append(d)
    return out


def test_ce_backward_golden_case_and_feedback():
    lp = np.split(lesson11.dense_log_softmax([[1.0, 2.0, 3.0, 4.0]]), 2, 1)
    got = np.concatenate(_solution_backward(lp, np.array([2]), np.ones(1)), 1)
    np.testing.assert_allclose(got, [[0.0320586, 0.0871443, -0.7631172, 0.6439143]],
                               atol=1e-7)

    def every_shard_subtracts(log_probs, labels, g):
        size, rows, out = log_probs[0].shape[1], np.arange(len(labels)), []
        for lp in log_probs:
            d = np.exp(lp) * g[:, None]
            d[rows, labels % size] -= g
            out.append(d)
        return out

    r = lesson11.check_ce_backward(every_shard_subtracts)
    assert "Shard 0 subtracted g at its column 0 for label 2, which lives on shard 1" \
        in r.message
    r = lesson11.check_ce_backward(lambda lp, labels, g: [np.exp(p) * g[:, None] for p in lp])
    assert "left out the one-hot" in r.message
    r = lesson11.check_ce_backward(
        lambda lp, labels, g: _solution_backward(lp, labels, np.ones_like(g)))
    assert "expected" in r.message and "Scale by the incoming gradient" in r.message
    r = lesson11.check_ce_backward(lambda lp, labels, g: [p[:, :1] for p in lp])
    assert "shape (1, 1), expected (1, 2)" in r.message


@pytest.mark.parametrize("kind,nbytes,s_count,busiest", [
    ("broadcast", 786_432, 4, 3 * 786_432), ("reduce_add", 1000, 3, 2000),
    ("all_reduce", 1024, 4, 1536), ("all_reduce", 7, 3, 10)])
def test_measured_cycles_follow_the_formula(kind, nbytes, s_count, busiest):
    target = IPUModel("ipu2", num_ipus=s_count).create_device().target
    link = math.ceil(busiest / target.ipu_link_bytes_per_cycle)
    if kind == "all_reduce":  # 2(S-1) ring steps of 40 cycles (2 x 15 ns at 1.33 GHz)
        want = 2 * (s_count - 1) * 40 + link
    else:  # one global sync, then the root's bytes
        want = target.global_sync_cycles + link
    assert lesson11.measured_cycles(kind, nbytes, s_count, target) == want


def test_large_embedding_broadcast_costs_what_the_exercise_says():
    # the tokens' features [256, 768] float32 over 4 Mk2 IPUs (exercise 11.3's text):
    # 80 cycles of sync + 3 x 786,432 B at 13.6 GB/s and 1.33 GHz; the all-reduce of 256
    # float32: 6 steps x 40 cycles + 1,536 B over the link (151 cycles)
    target = IPUModel("ipu2", num_ipus=4).create_device().target
    assert lesson11.measured_cycles("broadcast", 256 * 768 * 4, 4, target) == 230_806
    assert lesson11.measured_cycles("all_reduce", 256 * 4, 4, target) == 391
    log = sharded.CollectiveLog(4, target)
    log.all_reduce([np.zeros(256, np.float32)] * 4, "max", "m")
    assert log.records[0].duration == 391 == 6 * 40 + math.ceil(1536 * 1.33e9 / 13.6e9)


def _right_cycles(kind, nbytes, s_count, target):
    link = target.ipu_link_bytes_per_cycle
    if kind == "all_reduce":
        step = math.ceil(2 * 15e-9 * target.clock_hz)
        return 2 * (s_count - 1) * step + math.ceil(
            math.ceil(2 * (s_count - 1) * nbytes / s_count) / link)
    return target.global_sync_cycles + math.ceil(nbytes * (s_count - 1) / link)


def test_collective_cycles_feedback():
    right = _right_cycles
    assert lesson11.check_collective_cycles(right).passed
    r = lesson11.check_collective_cycles(
        lambda k, n, s, t: right(k, n, s, t) - (t.global_sync_cycles if k != "all_reduce"
                                                else 0))
    assert "also pays one global sync" in r.message
    r = lesson11.check_collective_cycles(
        lambda k, n, s, t: t.global_sync_cycles + math.ceil(n / t.ipu_link_bytes_per_cycle)
        if k != "all_reduce" else right(k, n, s, t))
    assert "broadcast of 786,432 bytes over 4 ipu2 IPUs" in r.message
    assert "one copy per other IPU (S-1)" in r.message


def test_ring_latency_feedback():
    right = _right_cycles

    def bandwidth_only(k, n, s, t):
        if k != "all_reduce":
            return right(k, n, s, t)
        return math.ceil(math.ceil(2 * (s - 1) * n / s) / t.ipu_link_bytes_per_cycle)

    r = lesson11.check_collective_cycles(bandwidth_only)
    assert "all_reduce of 28 bytes over 2 ipu2 IPUs" in r.message
    assert "it costs 83 cycles, you said 3" in r.message  # 2 steps x 40 + ceil(28 / 10.2)
    assert "left out the latency: a ring takes 2(S-1) = 2 steps of 40 cycles" in r.message

    def one_sync(k, n, s, t):  # the old model: one global sync + the bytes
        return bandwidth_only(k, n, s, t) + (t.global_sync_cycles if k == "all_reduce" else 0)

    r = lesson11.check_collective_cycles(one_sync)
    assert "pays no single global sync but 2(S-1) steps" in r.message

    def half_the_steps(k, n, s, t):  # on 2 IPUs S-1 steps cost one sync: wrong from S=3
        if k != "all_reduce" or s == 2:
            return right(k, n, s, t)
        return right(k, n, s, t) - (s - 1) * math.ceil(2 * 15e-9 * t.clock_hz)

    r = lesson11.check_collective_cycles(half_the_steps)
    assert "2(S-1) steps, not S-1" in r.message
    r = lesson11.check_collective_cycles(lambda k, n, s, t: "many")
    assert "expected a number" in r.message


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(lesson11)
    assert result.failed == 0 and result.attempted > 0


def test_embedding_lookup_feedback():
    def unmasked(parts, ids, log):
        size = parts[0].shape[0]
        partials = [p[(ids - s * size) % size] for s, p in enumerate(parts)]
        return log.all_reduce(partials, "add", "rows")

    r = lesson11.check_embedding_lookup(unmasked)
    assert "ids [0, 7, 3, 4] (checked: shard 0): your all-reduce ADD 'rows' sent" in r.message
    assert "Shard 0 added a row for id 7, which shard 1 owns: mask the ids" in r.message

    def gathers(parts, ids, log):
        table = np.concatenate(parts)
        return [table[ids] for _ in parts]

    r = lesson11.check_embedding_lookup(gathers)
    assert "no collective ran. Shard 0 sees only its own part" in r.message


def test_embedding_grad_feedback():
    def last_wins(ids, dy, v, s_count):
        size = v // s_count
        out = []
        for s in range(s_count):
            dw = np.zeros((size, dy.shape[1]))
            local = ids - s * size
            mine = (local >= 0) & (local < size)
            dw[local[mine]] += dy[mine]  # repeated ids: only one survives
            out.append(dw)
        return out

    r = lesson11.check_embedding_grad(last_wins)
    assert "appears 2 times" in r.message and "np.add.at" in r.message


def _dense_softmax(shift):
    """A log-softmax that all-reduces the row max and the sum of exp, shifted by
    ``shift(x, m, rows)`` (the right answer subtracts m; ``rows``: all shards' columns)."""
    def answer(parts, log):
        maxima = log.all_reduce([x.max(1) for x in parts], "max", "row max")
        rows = np.concatenate(parts, 1)
        shifted = [shift(x, m[:, None], rows) for x, m in zip(parts, maxima)]
        sums = log.all_reduce([np.exp(t).sum(1) for t in shifted], "add", "row sum")
        return [t - np.log(d)[:, None] for t, d in zip(shifted, sums)]
    return answer


def test_a_shift_that_is_not_the_row_max_fails():
    assert lesson11.check_sharded_log_softmax(_dense_softmax(lambda x, m, r: x - m)).passed
    with np.errstate(over="ignore", invalid="ignore"):  # logits near 1000
        r = lesson11.check_sharded_log_softmax(_dense_softmax(lambda x, m, r: x + m))
    assert "logits [1, 4] over 2 shards (checked: shard 1): your all-reduce ADD 'row sum' " \
        "sent 4077.591 from shard 1 at [0]; each shard sends its rows' sums of exp(x - the " \
        "row's max over all shards), here 1.367879" in r.message
    plan = [("add", "its sums", np.ones(2))]
    with pytest.raises(feedback.Wrong, match="sent inf from shard 2 at \\[1\\]; each shard "
                       "sends its sums, here 1. exp\\(\\) of a large logit overflows"):
        common.check_sent([{"kind": "all_reduce_add", "label": "s", "sent": [1, np.inf]}],
                          plan, 2, "x")
    for shift in (lambda x, m, r: x - r.mean(1, keepdims=True),  # read the other shards
                  lambda x, m, r: x - r.min(1, keepdims=True)):
        r = lesson11.check_sharded_log_softmax(_dense_softmax(shift))
        assert "logits [1, 4] over 2 shards" in r.message and "sent nan" in r.message
        assert "It read another shard's part, which the check keeps" in r.message


def _lookup(masked_index):
    def answer(parts, ids, log):
        size, partials = parts[0].shape[0], []
        for s, part in enumerate(parts):
            local = ids - s * size
            mine = (local >= 0) & (local < size)
            partials.append(np.where(mine[:, None], part[np.where(mine, local, masked_index)],
                                     0.0))
        return log.all_reduce(partials, "add", "rows")
    return answer


def test_a_masked_id_read_past_a_one_row_shard_fails():
    assert lesson11.check_embedding_lookup(_lookup(0)).passed
    r = lesson11.check_embedding_lookup(_lookup(1))  # size 1: row 1 does not exist
    assert r.status == "failed" and "IndexError" in r.message


def test_all_reducing_the_whole_table_fails():
    def whole_table(parts, ids, log):
        s_count = len(parts)
        mine = [np.concatenate([p if i == s else 0 * p for i in range(s_count)])
                for s, p in enumerate(parts)]
        return [t[ids] for t in log.all_reduce(mine, "add", "table")]

    r = lesson11.check_embedding_lookup(whole_table)
    assert "all-reduce 1 ('table') carries 24 numbers per shard (shape [8, 3]); the other " \
        "shards all-reduce their partial lookups" in r.message and "shape [4, 3]" in r.message


def test_trials_return_only_what_the_learner_did():
    ex = lesson11.check_embedding_lookup.exercise
    case = feedback.public(feedback.notebook_cases(ex)[0])
    out = ex.trial(case, _lookup(0))
    assert [(c["kind"], c["label"], c["sent"].shape) for c in out["collectives"]] == \
        [("all_reduce_add", "rows", (4, 3))]
    assert plain.decode(plain.encode(out))["rows"][1].shape == (4, 3)


def test_forged_collectives_do_not_pass_right_values():
    ex = lesson11.check_sharded_log_softmax.exercise
    cases = feedback.notebook_cases(ex)
    sol = _dense_softmax(lambda x, m, r: x - m)
    outputs = feedback.run_trials(ex, cases, (sol,))
    outputs[0]["ok"]["collectives"] = []  # a kernel that hides its collectives
    with pytest.raises(feedback.Wrong, match="no collective ran"):
        feedback.judge(ex, outputs, cases)


def test_the_intro_says_what_the_checks_do():
    intro = nbformat.read(kit_notebook("solutions", NOTEBOOK), as_version=4).cells[0].source
    assert "PASSED (green), WRONG (red)" in intro and "NOT SOLVED YET (amber)" in intro
    assert "each\nfailed attempt adds a hint" in intro and not {"✅", "❌", "⏳"} & set(intro)
    wrong = lesson11.check_embedding_grad(lambda ids, dy, v, s: [np.zeros((v // s, 3))] * s)
    assert "hint 1 of 3" in wrong.message  # the first failed attempt already has one
    assert "hint 2 of 3" in lesson11.check_embedding_grad(lambda *a: None).message


# -- the judge plays the other shards (issue 26, point 1) -------------------------------


def test_the_kernel_holds_one_shards_data_only():
    """11.1 and 11.4: every public case holds one shard's logits or rows, nan for the
    others; the whole data stay with the judge; what the other shards send comes
    combined (one max or sum per row), never their parts."""
    for check, key, whole in [(lesson11.check_sharded_log_softmax, "x_parts", "_x"),
                              (lesson11.check_embedding_lookup, "table_parts", "_table")]:
        for seed in (0, 1):
            for case in feedback.draw_cases(check.exercise, np.random.default_rng(seed)):
                shown, k = feedback.public(case), case["shard"]
                assert whole in case and not {k for k in shown if k.startswith("_")}
                for s, part in enumerate(shown[key]):
                    assert np.isnan(part).all() != (s == k)
                assert [p["value"].shape[0] for p in shown["peers"]] == \
                    [len(shown[key][0]) if key == "x_parts" else len(shown["ids"])] * \
                    len(shown["peers"])
    shards = [c["shard"] for c in lesson11._softmax_cases(np.random.default_rng(5))]
    assert len(set(shards)) > 1  # the kernel's shard is drawn


def _own_only_softmax(parts, log):
    """A cheat: dense on what the kernel holds, the collectives run for show."""
    log.all_reduce([x.max(1) for x in parts], "max", "row max")
    out = [x - x.max(1, keepdims=True) for x in parts]
    log.all_reduce([np.exp(t).sum(1) for t in out], "add", "row sum")
    return [t - np.log(np.exp(t).sum(1, keepdims=True)) for t in out]


def _own_only_lookup(parts, ids, log):
    size = parts[0].shape[0]
    partials = []
    for s, part in enumerate(parts):
        local = ids - s * size
        mine = (local >= 0) & (local < size)
        partials.append(np.where(mine[:, None], part[np.where(mine, local, 0)], 0.0))
    log.all_reduce(partials, "add", "rows")
    return partials


def test_answers_that_ignore_the_collectives_score_nothing():
    """Judged from fresh seeds: dense on the kernel's own shard (with the collectives run
    for show), or with a log of its own, scores nothing; the solution full marks."""
    ns = notebook_namespace("solutions", NOTEBOOK)

    def own_log(fn):
        return lambda *args: fn(*args[:-1], sharded.CollectiveLog(len(args[0])))

    for seed in (1, 2):
        for check, name, cheat in [
                (lesson11.check_sharded_log_softmax, "sharded_log_softmax", _own_only_softmax),
                (lesson11.check_embedding_lookup, "embedding_lookup", _own_only_lookup)]:
            assert judged(check, ns[name], seed=seed).passed
            for answer in (cheat, own_log(ns[name])):
                assert judged(check, answer, seed=seed).points == 0


FORGED = """\
import numpy as np
from ipukit.grading import feedback, plain
real = feedback.run_trials
def own(c, name, rows):
    return [rows if s == c['shard'] else p for s, p in enumerate(c[name])]
def forged(ex, cases, answers):
    outs = []
    for c in cases:
        if ex.id == '11.1':  # dense on the shard it holds, the records it would send
            x = c['x_parts'][c['shard']]
            t = x - x.max(1, keepdims=True)
            sent = [('max', x.max(1)), ('add', np.exp(t).sum(1))]
            out = {'parts': own(c, 'x_parts', t - np.log(np.exp(t).sum(1, keepdims=True)))}
        elif ex.id == '11.4':  # the rows it owns, and its partial lookup as the record
            part, size = c['table_parts'][c['shard']], len(c['table_parts'][0])
            local = c['ids'] - c['shard'] * size
            mine = (local >= 0) & (local < size)
            rows = np.where(mine[:, None], part[np.where(mine, local, 0)], 0.0)
            sent = [('add', rows)]
            out = {'rows': own(c, 'table_parts', rows)}
        else:
            return real(ex, cases, answers)
        out['collectives'] = [{'kind': 'all_reduce_' + op, 'label': op, 'sent': v}
                              for op, v in sent]
        outs.append({'ok': plain.encode(out)})
    return outs
feedback.run_trials = forged
"""


def test_forged_outputs_score_nothing_through_the_grader(tmp_path):
    """Through ``python -m ipukit.grade``: a cell that replaces 11.1's and 11.4's trials
    with what the kernel can work out from the shard it holds, records included, scores
    nothing there; the other exercises keep their points."""
    points = graded_points("solutions", NOTEBOOK, FORGED, tmp_path / "11_forged.ipynb")
    assert points == {"11.1": 0, "11.2": 3, "11.3": 2, "11.4": 0, "11.5": 3}
