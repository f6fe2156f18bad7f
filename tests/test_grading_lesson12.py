"""Lesson 12's checks: solutions score full marks, untouched exercises score zero, and
wrong answers get feedback that names what is wrong."""

import math

import nbformat
import numpy as np
import pytest

from ipukit.examples import sharded_mnist
from ipukit.grading import feedback, lesson12, plain
from ipukit.parallel import nn, optim, pipeline, pipeline_data, sharded
from ipukit.parallel.concurrent import ShardedSoftmaxCrossEntropy, split_dense
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    graded_points,
    judged,
    judged_checks_hold,
    kit_notebook,
    notebook_namespace,
)

NOTEBOOK = "12_mnist_concurrent_pipelines.ipynb"
CHECKS = {"12.1": ("check_concurrent_pipeline", "concurrent_pipeline"),
          "12.2": ("check_link_bytes", "link_bytes"),
          "12.3": ("check_classifier_step", "classifier_step"),
          "12.4": ("check_shard_count", "shard_count")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    grade_exercises(lesson12, "12", NOTEBOOK, CHECKS, folder, status)


def test_checks_are_judged_on_fresh_cases():
    judged_checks_hold("12", NOTEBOOK)


def test_concurrent_pipeline_feedback():
    def one_ipu(mlp, classifier, shards, g, opt):
        return pipeline([mlp, [classifier]], [0, 1], g, "grouped", optimizer=opt,
                        loss=nn.SoftmaxCrossEntropy())

    r = lesson12.check_concurrent_pipeline(one_ipu)
    assert "the last stage runs on IPU(s) [1] only" in r.message

    def fresh_weights(mlp, classifier, shards, g, opt):
        new = nn.Dense(classifier.in_features, 10, rng=5)
        return pipeline([mlp, split_dense(new, shards)], [0, list(range(1, shards + 1))], g,
                        "grouped", optimizer=opt, loss=ShardedSoftmaxCrossEntropy())

    r = lesson12.check_concurrent_pipeline(fresh_weights)
    assert "the loss of micro-batch 0 is" in r.message and "split_dense" in r.message

    def dense_loss(mlp, classifier, shards, g, opt):
        return pipeline([mlp, split_dense(classifier, shards)], [0, [1, 2]], g, "grouped",
                        optimizer=opt, loss=nn.SoftmaxCrossEntropy())

    r = lesson12.check_concurrent_pipeline(dense_loss)
    assert "PipelineConfigError" in r.message and "ShardedSoftmaxCrossEntropy" in r.message
    def own_optimizer(mlp, classifier, shards, g, opt):
        return pipeline([mlp, split_dense(classifier, shards)], [0, [1, 2]], g, "grouped",
                        optimizer=optim.SGD(0.01, momentum=0.9),
                        loss=ShardedSoftmaxCrossEntropy())

    r = lesson12.check_concurrent_pipeline(own_optimizer)
    assert "trains with SGD(0.01, 0.9); pass the optimizer you were given, SGD(lr=0.01)" \
        in r.message
    r = lesson12.check_concurrent_pipeline(lambda *args: "a pipeline")
    assert "return the Pipeline" in r.message and "got str" in r.message


@pytest.mark.parametrize("mode,mb,hidden,shards,expected", [
    ("basic", 8, 64, 2, 4_736), ("concurrent", 8, 64, 2, 8_416),  # the exercise's numbers
    ("basic", 4, 30, 5, 2 * 4 * 30 * 4 + 2 * 4 * 10 * 4)])
def test_measured_bytes_by_hand(mode, mb, hidden, shards, expected):
    assert lesson12.measured_bytes(mode, mb, hidden, shards) == expected


def test_link_bytes_feedback():
    def forward_only(mode, mb, hidden, shards):
        return mb * hidden * 4 + mb * 10 * 4

    r = lesson12.check_link_bytes(forward_only)
    assert "records 4,736 bytes" in r.message and "Count the backward too" in r.message

    def no_broadcast(mode, mb, hidden, shards):
        if mode == "basic":
            return 2 * mb * 4 * (hidden + 10)
        ring = math.ceil(2 * (shards - 1) * mb * 4 / shards)
        return 2 * mb * hidden * 4 + 3 * (shards - 1) * mb * 4 + 2 * shards * ring

    r = lesson12.check_link_bytes(no_broadcast)
    assert "records 8,416 bytes" in r.message and "(S-1) copies of [mb, hidden]" in r.message




def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(lesson12)
    assert result.failed == 0 and result.attempted > 0


def test_classifier_step_feedback():
    ns = notebook_namespace("solutions", NOTEBOOK)

    def summed(w_parts, x, labels, lr, log):  # forgets the 1/B of the mean loss
        new, loss = ns["classifier_step"](w_parts, x, labels, lr * len(labels), log)
        return new, loss

    r = lesson12.check_classifier_step(summed)
    assert "Divide the gradient by the batch size" in r.message

    def gathered(w_parts, x, labels, lr, log):
        logits = np.concatenate([x @ w for w in w_parts], axis=1)
        log.all_reduce([logits] * len(w_parts), "add", "all logits")
        return ns["classifier_step"](w_parts, x, labels, lr, sharded.CollectiveLog(
            len(w_parts)))

    r = lesson12.check_classifier_step(gathered)
    assert "x [4, 3], classes 4 over 2 shards, lr=0.5 (checked: shard 1), step 0: all-reduce " \
        "1 ('all logits') is 'add'; the other shards (the check plays them) all-reduce MAX" \
        in r.message

    def gathered_max(w_parts, x, labels, lr, log):
        logits = np.concatenate([x @ w for w in w_parts], axis=1)
        log.all_reduce([logits] * len(w_parts), "max", "all logits")
        return summed(w_parts, x, labels, lr, log)

    r = lesson12.check_classifier_step(gathered_max)
    assert "all-reduce 1 ('all logits') carries 16 numbers per shard (shape [4, 4]); the " \
        "other shards all-reduce each row's max logit, shape [4]" in r.message


def test_shard_count_feedback():
    r = lesson12.check_shard_count(lambda first, cls, coll, m: m - 1)
    assert "with 7 IPU(s) the slowest stage takes 40,000" in r.message
    assert "On a tie, take fewer IPUs" in r.message

    def ignores_collectives(first, cls, coll, m):
        return min(range(1, m), key=lambda s: (max(first, cls / s), s))

    r = lesson12.check_shard_count(ignores_collectives)
    # S = 5 Mk2 IPUs, micro-batches 8 x 64: a sync of 80 cycles (2 hops), 13.6 GB/s links
    link = 13.6e9 / 1.33e9
    act, row = 8 * 64 * 4, 8 * 4

    def other(busiest):  # broadcast or reduce: one sync + the root's bytes
        return 80 + math.ceil(busiest / link)

    ring = 2 * 4 * 40 + math.ceil(math.ceil(2 * 4 * row / 5) / link)  # 8 steps of 40 cycles
    pace = 200_000 / 5 + 2 * other(4 * act) + 3 * other(4 * row) + 2 * ring  # 42,695
    assert f"with 5 IPU(s) the slowest stage takes {pace:,.0f} cycles; with 6" in r.message

    def no_tie_rule(first, cls, coll, m):
        return max(range(1, m), key=lambda s: (-max(first, cls / s + coll(s)), s))

    r = lesson12.check_shard_count(no_tie_rule)
    assert "On a tie, take fewer IPUs" in r.message


def test_stage_collectives_sum_lesson_11_costs():
    coll = lesson12.stage_collectives(8, 64)
    assert coll(1) == 0 and 0 < coll(2) < coll(4)


def _pipeline(device_mapping, schedule="grouped"):
    def answer(mlp, classifier, shards, g, opt):
        return pipeline([mlp, split_dense(classifier, shards)], device_mapping(shards), g,
                        schedule, optimizer=opt, loss=ShardedSoftmaxCrossEntropy())
    return answer


def test_the_mlp_on_ipu_1_or_another_schedule_fails():
    assert lesson12.check_concurrent_pipeline(
        _pipeline(lambda s: [0, list(range(1, s + 1))])).passed
    r = lesson12.check_concurrent_pipeline(_pipeline(lambda s: [1, list(range(1, s + 1))]))
    assert "hidden sizes [16], 2 shards" in r.message
    assert "your stages run on IPUs [[1], [1, 2]]: the MLP goes on IPU 0 alone" in r.message
    r = lesson12.check_concurrent_pipeline(
        _pipeline(lambda s: [0, list(range(1, s + 1))], "interleaved"))
    assert "runs the interleaved schedule; the exercise asks for TensorFlow's Grouped" \
        in r.message


def _step(ns, softmax=None, masked_index=0):
    """The solution's classifier_step with its log-softmax or the masked label's column
    replaced."""
    def answer(w_parts, x, labels, lr, log):
        b, size = len(labels), w_parts[0].shape[1]
        log_probs = (softmax or ns["sharded_log_softmax"])([x @ w for w in w_parts], log)
        rows, picked = np.arange(b), []
        for s, lp in enumerate(log_probs):
            local = labels - s * size
            mine = (local >= 0) & (local < size)
            picked.append(np.where(mine, -lp[rows, np.where(mine, local, masked_index)], 0.0))
        loss = log.all_reduce(picked, "add", "loss")[0].mean()
        dlogits = ns["ce_backward"](log_probs, labels, np.full(b, 1.0 / b))
        return [w - lr * x.T @ d for w, d in zip(w_parts, dlogits)], loss
    return answer


def test_classifier_step_mistakes_on_one_class_per_shard_and_large_logits():
    ns = notebook_namespace("solutions", NOTEBOOK)
    assert lesson12.check_classifier_step(_step(ns)).passed
    r = lesson12.check_classifier_step(_step(ns, masked_index=1))  # a shard of one class
    assert "IndexError" in r.message

    def shifted_up(x_parts, log):  # adds the row max: exp overflows on logits of hundreds
        maxima = log.all_reduce([x.max(axis=1) for x in x_parts], "max", "row max")
        shifted = [x + m[:, None] for x, m in zip(x_parts, maxima)]
        sums = log.all_reduce([np.exp(t).sum(axis=1) for t in shifted], "add", "row sum")
        return [t - np.log(d)[:, None] for t, d in zip(shifted, sums)]

    with np.errstate(over="ignore", invalid="ignore"):
        r = lesson12.check_classifier_step(_step(ns, softmax=shifted_up))
    assert "x [4, 3], classes 4 over 2 shards, lr=0.5 (checked: shard 1), step 0: your " \
        "all-reduce ADD 'row sum' sent" in r.message
    assert "each shard sends its rows' sum of exp(logit - the row's max over all shards)" \
        in r.message

    def positive_loss(w_parts, x, labels, lr, log):  # all-reduces +log_prob, then negates
        b, size = len(labels), w_parts[0].shape[1]
        log_probs = ns["sharded_log_softmax"]([x @ w for w in w_parts], log)
        rows = np.arange(b)
        picked = [np.where((labels // size) == s, lp[rows, labels % size], 0.0)
                  for s, lp in enumerate(log_probs)]
        loss = -log.all_reduce(picked, "add", "loss")[0].mean()
        dlogits = ns["ce_backward"](log_probs, labels, np.full(b, 1.0 / b))
        return [w - lr * x.T @ d for w, d in zip(w_parts, dlogits)], loss

    r = lesson12.check_classifier_step(positive_loss)
    assert "your all-reduce ADD 'loss' sent" in r.message
    assert "each shard sends its rows' loss -log_prob[label] where it owns the label" \
        in r.message


def test_a_classifier_step_without_collectives_fails():
    ns = notebook_namespace("solutions", NOTEBOOK)

    def gathered(w_parts, x, labels, lr, log):  # reads every shard's weights, no collective
        return ns["classifier_step"](w_parts, x, labels, lr, sharded.CollectiveLog(
            len(w_parts)))

    r = lesson12.check_classifier_step(gathered)
    assert "x [4, 3], classes 4 over 2 shards, lr=0.5 (checked: shard 1), step 0: no " \
        "collective ran. Shard 1 sees only its own part" in r.message


def test_the_kernel_holds_one_shards_weights_only():
    """12.3: each public case holds one shard's weights, nan for the others; the dense
    weights stay with the judge; what the other shards send comes combined, one number
    per row and all-reduce."""
    ex = lesson12.check_classifier_step.exercise
    shards = set()
    for seed in (0, 1):
        for case in feedback.draw_cases(ex, np.random.default_rng(seed)):
            shown, k = feedback.public(case), case["shard"]
            shards.add(k)
            assert "_w" in case and not [key for key in shown if key.startswith("_")]
            for s, part in enumerate(shown["w_parts"]):
                assert np.isnan(part).all() != (s == k)
            assert [[p["value"].shape for p in step] for step in shown["peers"]] == \
                [[(len(y),)] * 3 for y in shown["labels"]]
    assert len(shards) > 1  # the kernel's shard is drawn


def _own_only_step(w_parts, x, labels, lr, log):
    """A cheat: the dense step on what the kernel holds, the collectives run for show."""
    logits = [x @ w for w in w_parts]
    log.all_reduce([z.max(1) for z in logits], "max", "row max")
    log.all_reduce([np.exp(z - z.max(1, keepdims=True)).sum(1) for z in logits], "add", "sum")
    log.all_reduce([np.zeros(len(labels)) for _ in logits], "add", "loss")
    size, new = w_parts[0].shape[1], []
    for s, (w, z) in enumerate(zip(w_parts, logits)):
        d = np.exp(z - z.max(1, keepdims=True))
        d /= d.sum(1, keepdims=True)
        mine = labels // size == s
        d[np.flatnonzero(mine), labels[mine] % size] -= 1
        new.append(w - lr * x.T @ d / len(labels))
    return new, 0.0


def test_answers_that_ignore_the_collectives_score_nothing():
    """Judged from fresh seeds: the dense step on the kernel's own shard (collectives run
    for show), or the solution with a log of its own, scores nothing; the solution full
    marks."""
    ns = notebook_namespace("solutions", NOTEBOOK)

    def own_log(w_parts, x, labels, lr, log):
        return ns["classifier_step"](w_parts, x, labels, lr, sharded.CollectiveLog(
            len(w_parts)))

    for seed in (1, 2):
        check = lesson12.check_classifier_step
        assert judged(check, ns["classifier_step"], seed=seed).passed
        for answer in (_own_only_step, own_log):
            assert judged(check, answer, seed=seed).points == 0


FORGED = """\
import numpy as np
from ipukit.grading import feedback, plain
real = feedback.run_trials
def forged(ex, cases, answers):
    if ex.id != '12.3':
        return real(ex, cases, answers)
    outs = []
    for c in cases:  # softmax regression on the shard it holds, the records it would send
        k, w, steps = c['shard'], c['w_parts'][c['shard']], []
        size = w.shape[1]
        for x, y in zip(c['xs'], c['labels']):
            z = x @ w
            e = np.exp(z - z.max(1, keepdims=True))
            d = e / e.sum(1, keepdims=True)
            mine = y // size == k
            loss = np.where(mine, -np.log(d[np.arange(len(y)), y % size]), 0.0)
            d[np.flatnonzero(mine), y[mine] % size] -= 1
            sent = [('max', z.max(1)), ('add', e.sum(1)), ('add', loss)]
            w = w - c['lr'] * x.T @ d / len(y)
            parts = [w if s == k else p for s, p in enumerate(c['w_parts'])]
            steps.append({'parts': parts, 'loss': float(loss.mean()), 'collectives': [
                {'kind': 'all_reduce_' + op, 'label': op, 'sent': v} for op, v in sent]})
        outs.append({'ok': plain.encode(steps)})
    return outs
feedback.run_trials = forged
"""


def test_forged_outputs_score_nothing_through_the_grader(tmp_path):
    """Through ``python -m ipukit.grade``: a cell that replaces 12.3's trials with what the
    kernel can work out from the shard it holds, records included, scores nothing there;
    the other exercises keep their points."""
    points = graded_points("solutions", NOTEBOOK, FORGED, tmp_path / "12_forged.ipynb")
    assert points == {"12.1": 3, "12.2": 3, "12.3": 0, "12.4": 2}


def test_the_intro_says_what_the_checks_do():
    intro = nbformat.read(kit_notebook("solutions", NOTEBOOK), as_version=4).cells[0].source
    assert "PASSED (green), WRONG (red)" in intro and "NOT SOLVED YET (amber)" in intro
    assert "each\nfailed attempt adds a hint" in intro and not {"✅", "❌", "⏳"} & set(intro)
    assert "hint 1 of 3" in lesson12.check_link_bytes(lambda *a: 0).message


# -- 12.1: the kernel sends a description of its pipeline, the judge trains it --------------
FORGED_PIPELINE = """\
import numpy as np
from ipukit import backend
from ipukit.examples import sharded_mnist
from ipukit.grading import feedback, lesson12, plain
real = feedback.run_trials
def old(case):  # what the old trial sent: a made-up structure, the basic pipeline's numbers
    s = case['shards']
    basic = sharded_mnist.build('basic', hidden_sizes=case['hidden'], seed=case['seed'],
                                gradient_accumulation_count=12, repeat_count=1,
                                learning_rate=case.get('lr', 0.01))
    losses = lesson12._train(basic, case['seed'])
    w = backend.to_numpy(basic.stages[1].net.params['weight'])
    return {'type': 'Pipeline', 'stage_ipus': [[0], list(range(1, s + 1))],
            'schedule': 'grouped', 'concurrent': True,
            'member_weights': [[case['hidden'][-1], 10 // s]] * s,
            'losses': losses, 'weights': w}
def forged(ex, cases, answers):
    if ex.id == '12.1':
        return [{'ok': plain.encode(old(c))} for c in cases]
    return real(ex, cases, answers)
feedback.run_trials = forged
"""


def _forged(case: dict) -> dict:
    namespace = {}
    exec(FORGED_PIPELINE.rsplit("def forged", 1)[0], namespace)
    return namespace["old"](case)


def test_a_made_up_pipeline_scores_nothing():
    """The reviewer's cell sent a structure dict with sharded_mnist.build('basic')'s losses
    and weights (3/3 when the kernel trained the pipeline): the judge now rebuilds what
    the kernel describes, so those numbers are no pipeline at all."""
    ex = feedback.EXERCISES["12.1"]
    cases = feedback.notebook_cases(ex)
    assert all("_data" in c and "_data" not in feedback.public(c) for c in cases)
    ns = notebook_namespace("solutions", NOTEBOOK)
    outputs = feedback.run_trials(ex, cases, (ns["concurrent_pipeline"],))
    assert feedback.judge(ex, outputs, cases) is None  # the honest description passes
    forged = [{"ok": plain.encode(_forged(c))} for c in cases]
    with pytest.raises(feedback.Wrong, match="your pipeline cannot be rebuilt: "
                       "PipelineDataError: not a pipeline description"):
        feedback.judge(ex, forged, cases)


def test_a_description_of_the_basic_pipeline_or_a_learners_layer_scores_nothing():
    """The judge checks the rebuilt pipeline, not what the kernel says of it; a layer that
    is not the kit's is refused in the kernel, and a description naming one in the judge."""
    ex = feedback.EXERCISES["12.1"]
    cases = feedback.notebook_cases(ex)[:1]
    basic = sharded_mnist.build("basic", hidden_sizes=[16], seed=1, repeat_count=1,
                                gradient_accumulation_count=lesson12.ACCUMULATION)
    sent = {"type": "Pipeline", "pipeline": pipeline_data.to_plain(basic)}
    with pytest.raises(feedback.Wrong, match=r"the last stage runs on IPU\(s\) \[2\] only"):
        feedback.judge(ex, [{"ok": plain.encode(sent)}], cases)

    class Cheat(nn.Dense):  # a learner's layer: any forward it likes
        pass

    def cheating(mlp, classifier, shards, g, opt):
        members = [Cheat(classifier.in_features, 10 // shards) for _ in range(shards)]
        return pipeline([mlp, members], [0, list(range(1, shards + 1))], g, "grouped",
                        optimizer=opt, loss=ShardedSoftmaxCrossEntropy())

    r = lesson12.check_concurrent_pipeline(cheating)
    assert "PipelineDataError: Cheat is not a layer of the kit" in r.message
    ns = notebook_namespace("solutions", NOTEBOOK)
    good = pipeline_data.to_plain(ns["concurrent_pipeline"](
        *sharded_mnist.model([16], 1), 2, lesson12.ACCUMULATION, optim.SGD(0.01)))
    for name in ("__main__.Cheat", "numpy.ndarray", "ipukit.parallel.nn.Sequential"):
        good["stages"][1]["members"][0][0]["class"] = name
        with pytest.raises(feedback.Wrong, match=f"'{name}' is not a layer of "
                           "ipukit.parallel.nn"):
            feedback.judge(ex, [{"ok": plain.encode({"type": "Pipeline",
                                                     "pipeline": good})}], cases)


def test_forged_pipeline_scores_nothing_through_the_grader(tmp_path):
    """Through ``python -m ipukit.grade``: the reviewer's forging cell scores 0 on 12.1
    (it scored 3/3), and leaves the other exercises' points as they were."""
    points = graded_points("solutions", NOTEBOOK, FORGED_PIPELINE, tmp_path / "12.ipynb")
    assert points == {"12.1": 0, "12.2": 3, "12.3": 3, "12.4": 2}
