"""The ``check_*`` functions of lesson 12: MNIST with basic and concurrent pipelines.

Every check is judged (:func:`ipukit.grading.feedback.exercise`): the judge draws the cases
and reaches the verdict against real runs of Graphcore's concurrent-pipeline MNIST port
(:mod:`ipukit.examples.sharded_mnist`): for 12.1 the learner's pipeline, sent as a
description (:mod:`ipukit.parallel.pipeline_data`), rebuilt and trained on the judge's own
images next to the basic pipeline, whose losses and weights it must match;
the bytes in a run's timeline for 12.2; a dense float64 classifier trained next to the
learner's sharded one for 12.3, whose kernel holds one shard's weights while the judge
plays the others (a :class:`~.common.PeerLog`); every shard count tried, with the
collectives costed by ``CollectiveLog``, for 12.4. The trials, in the learner's kernel,
return plain data: the pipeline's description; a number; the weights, losses and
collectives of each step.

Mutation pass (``tools/mutants.py 12``): the one-token mistakes that keep full marks are
equivalent: reading a shard's size from ``[1]`` instead of ``[0]`` (an even split), and
taking the loss from ``all_reduce(...)[1]`` (every shard gets the same sum).

>>> from ipukit.grading import lesson12
>>> r = lesson12.check_shard_count(lambda first, classifier, collectives, max_ipus: 1)
... # doctest: +ELLIPSIS
WRONG · Exercise 12.4 · how many IPUs for the concurrent stage: 0/2 points
   ...
"""

from __future__ import annotations

import functools

import numpy as np

from ipukit import backend
from ipukit.examples import sharded_mnist
from ipukit.parallel import Pipeline, optim, pipeline_data, sharded
from ipukit.parallel.concurrent import Concurrent
from ipukit.target import IPUModel

from .common import PeerLog, check_sent, nan_parts
from .feedback import Wrong, as_int, exercise

#: What crosses between IPUs: IPU-Link copies between stages and a stage's collectives.
TRAFFIC = ("link", "broadcast", "reduce", "allreduce")
#: 12.1's gradient accumulation: a count both accept (basic: 3 stages, concurrent: 2).
ACCUMULATION = 12


def _data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.uniform(0, 1, (n, 28, 28)).astype(np.float32),
            rng.integers(0, sharded_mnist.CLASSES, n))


def _train(p, seed: int) -> np.ndarray:
    """The losses of two weight updates of ``ACCUMULATION`` micro-batches of 8 images."""
    g = ACCUMULATION
    x, y = _data(2 * g * 8, seed)
    steps = [slice(0, g * 8), slice(g * 8, 2 * g * 8)]
    return np.concatenate([backend.to_numpy(p.run(x[s], y[s]).losses).ravel()
                           for s in steps])


# -- 12.1 ---------------------------------------------------------------------------------


def _pipeline_what(case) -> str:
    return (f"hidden sizes {case['hidden']}, {case['shards']} shards, gradient accumulation "
            f"{ACCUMULATION}")


def _pipeline_cases(rng) -> list[dict]:
    """Two shard counts (2 and 5 members) and a random MLP and learning rate; the images
    the judge trains on (``_data``, a seed) never reach the kernel."""
    found = [{"hidden": [16], "shards": 2, "seed": 1, "lr": 0.01},
             {"hidden": [24, 12], "shards": 5, "seed": 2, "lr": 0.05},
             {"hidden": [int(h) for h in rng.integers(4, 33, int(rng.integers(1, 3)))],
              "shards": int(rng.choice([2, 5])), "seed": int(rng.integers(2**31)),
              "lr": float(rng.choice([0.01, 0.02, 0.1]))}]
    return [c | {"_data": int(rng.integers(2**31))} for c in found]


def _pipeline_trial(case, concurrent_pipeline):
    """A description of the learner's pipeline as built (stages, layers and their weights,
    options, optimiser, loss: :func:`ipukit.parallel.pipeline_data.to_plain`); the judge
    rebuilds it with the kit's classes and trains it on its own images."""
    mlp, classifier = sharded_mnist.model(case["hidden"], case["seed"])
    p = concurrent_pipeline(mlp, classifier, case["shards"], ACCUMULATION,
                            optim.SGD(case["lr"]))
    if not isinstance(p, Pipeline):
        return {"type": type(p).__name__}
    return {"type": "Pipeline", "pipeline": pipeline_data.to_plain(p)}


@exercise("12.1", "the concurrent pipeline", points=3,
          hints=(
              'Lesson 11 showed how a stage becomes concurrent.',
              'A concurrent stage is a list of members in the stage list and a list of IPUs in '
              'device_mapping; the members come from splitting the classifier you were given.',
              'pipeline([mlp, split_dense(classifier, shards)], [0, list(range(1, shards + '
              "1))], gradient_accumulation, 'grouped', optimizer=optimizer, "
              'loss=ShardedSoftmaxCrossEntropy()): the second stage is a list of members, its '
              'device_mapping entry a list of IPUs.',),
          answers=("concurrent_pipeline",), cases=_pipeline_cases, trial=_pipeline_trial)
def check_concurrent_pipeline(cases, outputs):
    """Exercise 12.1: ``concurrent_pipeline(mlp, classifier, shards, gradient_accumulation,
    optimizer)`` → a Pipeline whose classifier and loss run sharded, training as the basic
    pipeline does."""
    for case, out in zip(cases, outputs):
        what = _pipeline_what(case)
        if out.get("type") != "Pipeline":
            raise Wrong(f"{what}: return the Pipeline that parallel.pipeline(...) builds, "
                        f"got {out.get('type')}")
        try:
            p = pipeline_data.from_plain(out.get("pipeline"))
        except Exception as exc:  # noqa: BLE001 - what the kernel sent is untrusted
            raise Wrong(f"{what}: your pipeline cannot be rebuilt: {type(exc).__name__}: "
                        f"{exc}") from None
        _check_structure(p, case["shards"], case["hidden"][-1], what)
        o = p.optimizer
        if type(o) is not optim.SGD or (o.lr, o.momentum) != (case["lr"], 0.0):
            raise Wrong(f"{what}: your pipeline trains with {type(o).__name__}"
                        f"{_settings(o)}; pass the optimizer you were given, "
                        f"SGD(lr={case['lr']})")
        try:
            got = _train(p, case["_data"])
        except Exception as exc:  # noqa: BLE001 - the learner's pipeline may raise anything
            raise Wrong(f"{what}: your pipeline raised {type(exc).__name__}: {exc} while "
                        "training") from None
        basic = sharded_mnist.build("basic", hidden_sizes=case["hidden"], seed=case["seed"],
                                    gradient_accumulation_count=ACCUMULATION, repeat_count=1,
                                    learning_rate=case["lr"])
        want = _train(basic, case["_data"])
        if got.shape != want.shape:
            raise Wrong(f"{what}: two weight updates give {want.size} losses (one per "
                        f"micro-batch), your pipeline gave {got.size}")
        if not np.allclose(got, want, rtol=1e-4, atol=1e-6):
            i = int(np.argmax(~np.isclose(got, want, rtol=1e-4, atol=1e-6)))
            raise Wrong(f"{what}: the loss of micro-batch {i} is {got[i]:.6f}, the basic "
                        f"pipeline's is {want[i]:.6f}. Both must start from the same "
                        "weights: build the members from the given classifier "
                        "(split_dense), not new layers")
        weights = np.concatenate([backend.to_numpy(m.params["weight"])
                                  for m in p.stages[-1].net.members], 1)
        if not np.allclose(weights, backend.to_numpy(basic.stages[1].net.params["weight"]),
                           rtol=1e-4, atol=1e-6):
            raise Wrong(f"{what}: same losses, but after training the members' weights "
                        "differ from the basic classifier's: pass the optimizer you "
                        "were given")


def _settings(o) -> tuple:
    return tuple(getattr(o, k) for k in ("lr", "momentum") if hasattr(o, k))


def _check_structure(p: Pipeline, shards: int, hidden: int, what: str) -> None:
    ipus = [list(s.ipus) for s in p.stages]
    last = p.stages[-1].net
    if not isinstance(last, Concurrent):
        raise Wrong(f"{what}: the last stage runs on IPU(s) {ipus[-1]} only. A "
                    "concurrent stage is a list of members (split_dense(classifier, shards)) "
                    "with a list of IPUs in its device_mapping entry")
    if len(ipus[-1]) != shards:
        raise Wrong(f"{what}: the classifier stage runs on {len(ipus[-1])} IPUs "
                    f"{ipus[-1]}; split it over {shards}")
    cols = sharded_mnist.CLASSES // shards
    for s, m in enumerate(last.members):
        shape = tuple(np.shape(m.params.get("weight", ())))
        if shape != (hidden, cols):
            raise Wrong(f"{what}: member {s} holds a weight of shape {shape}; each "
                        f"holds {cols} of the {sharded_mnist.CLASSES} classes, ({hidden}, "
                        f"{cols}): split the classifier by output columns")
    if ipus != [[0], list(range(1, shards + 1))]:
        raise Wrong(f"{what}: your stages run on IPUs {ipus}: the MLP goes on IPU 0 alone "
                    f"and the classifier's {shards} members on IPUs 1 to {shards}")
    if p.options.schedule != "grouped":
        raise Wrong(f"{what}: your pipeline runs the {p.options.schedule} schedule; the "
                    "exercise asks for TensorFlow's Grouped schedule")


# -- 12.2 ---------------------------------------------------------------------------------


def measured_bytes(mode: str, micro_batch: int, hidden: int, shards: int = 2) -> int:
    """Bytes all IPUs send over IPU-Links for micro-batch 0 of a sharded_mnist run."""
    p = sharded_mnist.build(mode, hidden_sizes=[8, hidden], shards=shards, repeat_count=1)
    x, y = _data(p.samples_per_run * micro_batch, micro_batch)
    r = p.run(x, y)
    return sum(rec.bytes for rec in r.timeline if rec.kind in TRAFFIC and rec.microbatch == 0)


def _bytes_what(case) -> str:
    return (f"link_bytes({case['mode']!r}, micro_batch={case['micro_batch']}, "
            f"hidden={case['hidden']}, shards={case['shards']})")


def _bytes_cases(rng) -> list[dict]:
    """The lesson's two runs, 5 shards with odd sizes, and a random run of each mode."""
    found = [("basic", 8, 64, 2), ("concurrent", 8, 64, 2), ("basic", 4, 30, 5),
             ("concurrent", 3, 20, 5), ("concurrent", 16, 128, 2)]
    found += [(mode, int(rng.integers(1, 17)), int(rng.integers(4, 65)), int(rng.choice([2, 5])))
              for mode in sharded_mnist.MODES]
    return [{"mode": m, "micro_batch": mb, "hidden": h, "shards": s} for m, mb, h, s in found]


def _bytes_trial(case, link_bytes):
    return link_bytes(case["mode"], case["micro_batch"], case["hidden"], case["shards"])


@exercise("12.2", "bytes over IPU-Links per micro-batch", points=3,
          hints=(
              'List every tensor that crosses between IPUs, forward and backward.',
              "Basic: two activations and their gradients. Concurrent: also the stage's "
              'collectives (broadcasts, reduces and ring all-reduces of one number per image).',
              'basic: the activations [mb, hidden] go to IPU 1 and their gradient comes back; '
              'the logits [mb, 10] go to IPU 2 and their gradient comes back. Concurrent: add '
              'the broadcast of the stage input and the reduce of its gradient ((S-1) copies '
              "each), the labels (int32) and the loss's two broadcasts/reduces ((S-1) x mb x 4 "
              'each), and two ring all-reduces in which each of the S IPUs sends ceil(2(S-1)/S '
              'x mb x 4) bytes.',),
          answers=("link_bytes",), cases=_bytes_cases, trial=_bytes_trial)
def check_link_bytes(cases, outputs):
    """Exercise 12.2: ``link_bytes(mode, micro_batch, hidden, shards)`` → bytes all IPUs
    send between IPUs for one micro-batch's forward and backward."""
    for case, out in zip(cases, outputs):
        mode, mb, hidden, shards = (case[k] for k in ("mode", "micro_batch", "hidden",
                                                       "shards"))
        what = _bytes_what(case)
        got = as_int(out, what)
        want = measured_bytes(mode, mb, hidden, shards)
        if got != want:
            raise Wrong(f"{what}: a run's timeline records {want:,} bytes sent between "
                        f"IPUs for micro-batch 0, you said {got:,}"
                        + _bytes_diagnosis(mode, mb, hidden, shards, got, want))


def _bytes_diagnosis(mode, mb, hidden, shards, got, want) -> str:
    act, small = mb * hidden * 4, mb * 4
    if mode == "basic":
        if got * 2 == want:
            return ". Count the backward too: every gradient goes back the way its input came"
        return ""
    if got == want - 2 * (shards - 1) * act:
        return (". The stage's input is broadcast to the other members' IPUs and their "
                "input gradients are reduced back: (S-1) copies of [mb, hidden] each way")
    ring = -(-2 * (shards - 1) * small // shards)
    if got == want - 2 * shards * ring + 2 * ring:
        return ". Every one of the S IPUs sends its share in a ring all-reduce, not only one"
    return ""


# -- 12.3 ---------------------------------------------------------------------------------


def _dense_step(w, x, labels, lr):
    """Dense float64 reference: one SGD step of softmax cross-entropy (mean over rows)."""
    logits = x @ w
    top = logits.max(axis=1, keepdims=True)
    lp = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = -lp[rows, labels].mean()
    d = np.exp(lp)
    d[rows, labels] -= 1
    return w - lr * x.T @ (d / len(labels)), loss


def _step_what(case) -> str:
    (b, h), s_count = case["xs"][0].shape, len(case["w_parts"])
    v = sum(p.shape[1] for p in case["w_parts"])
    return (f"x [{b}, {h}], classes {v} over {s_count} shards, lr={case['lr']:g} (checked: "
            f"shard {case['shard']})")


def _step_sends(w, x, labels, s_count: int) -> list[list]:
    """What each shard sends in the three all-reduces of one step from the dense weights
    ``w``, by the lesson's algorithm: its rows' max logit, its sums of exp(logit - the
    row's max), and each row's loss where it owns the label (0 elsewhere)."""
    logits = x @ w
    top = logits.max(axis=1, keepdims=True)
    loss = -(logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True)))
    size, rows = logits.shape[1] // s_count, np.arange(len(labels))
    return [[p.max(axis=1), np.exp(p - top).sum(axis=1),
             np.where(labels // size == s, loss[rows, labels], 0.0)]
            for s, p in enumerate(np.split(logits, s_count, axis=1))]


#: What the other shards send in each step's all-reduces (with :func:`_step_sends`).
STEP_SENDS = (("max", "each row's max logit"),
              ("add", "each row's sum of exp(logit - the row's max over all shards)"),
              ("add", "each row's loss -log_prob[label] where it owns the label, 0 elsewhere"))


def _step_case(w, xs, labels, lr, s_count, rng) -> dict:
    """Three steps of one classifier: the kernel holds shard k's weights (k drawn from
    ``rng``), nan for the others, and for each step what the other shards send to its
    all-reduces, worked out from the dense classifier's weights at that step."""
    k, labels = int(rng.integers(s_count)), [np.asarray(y, dtype=np.int32) for y in labels]
    peers, dense = [], w
    for x, y in zip(xs, labels):
        sends = _step_sends(dense, x, y, s_count)
        others = [sent for s, sent in enumerate(sends) if s != k]
        peers.append([{"op": op, "what": what, "value": (np.max if op == "max" else np.sum)(
            [o[n] for o in others], axis=0)} for n, (op, what) in enumerate(STEP_SENDS)])
        dense = _dense_step(dense, x, y, lr)[0]
    return {"w_parts": nan_parts(np.split(w, s_count, axis=1), k), "xs": list(xs),
            "labels": labels, "lr": float(lr), "shard": k, "peers": peers, "_w": w}


def _step_cases(rng) -> list[dict]:
    """Three steps each: the lesson's sizes, one class per shard, weights so large that the
    logits reach hundreds (exp overflows unless shifted by the row max), and a random
    classifier."""
    fixed = np.random.default_rng(123)
    found = []
    for b, h, v, s_count, scale in [(4, 3, 4, 2, 1), (6, 5, 12, 3, 1), (8, 4, 10, 5, 1),
                                    (5, 3, 4, 4, 1), (4, 3, 6, 3, 500)]:
        found.append(_step_case(fixed.normal(size=(h, v)) * scale,
                                [fixed.normal(size=(b, h)) for _ in range(3)],
                                [fixed.integers(0, v, b) for _ in range(3)], 0.5, s_count,
                                rng))
    b, h = int(rng.integers(1, 9)), int(rng.integers(1, 7))
    s_count, size = int(rng.integers(2, 5)), int(rng.integers(1, 5))
    found.append(_step_case(rng.normal(size=(h, s_count * size)),
                            [rng.normal(size=(b, h)) for _ in range(3)],
                            [rng.integers(0, s_count * size, b) for _ in range(3)],
                            rng.uniform(0.1, 1.0), s_count, rng))
    return found


def _step_trial(case, classifier_step):
    """Three steps of the learner's classifier on the shard the kernel holds, each from
    the weights the last returned (nan for the other shards): each step's new weights,
    loss and what its all-reduces carried."""
    k, s_count, what = case["shard"], len(case["w_parts"]), _step_what(case)
    parts, steps = [p.copy() for p in case["w_parts"]], []
    for x, labels, peers in zip(case["xs"], case["labels"], case["peers"]):
        log = PeerLog(s_count, k, peers, f"{what}, step {len(steps)}")
        got = classifier_step([p.copy() for p in parts], x.copy(), labels.copy(), case["lr"],
                              log)
        try:
            new_parts, loss = got
            new_parts = [np.asarray(backend.to_numpy(p), np.float64) for p in new_parts]
            loss = float(loss)
        except (TypeError, ValueError):
            raise Wrong(f"{what}: return (new w_parts, mean loss), got "
                        f"{str(got)[:80]}") from None
        steps.append({"parts": new_parts, "loss": loss, "collectives": log.calls})
        if [p.shape for p in new_parts] != [p.shape for p in parts]:
            break  # the judge names the shapes: the next step could not use them
        parts = nan_parts(new_parts, k)
    return steps


@exercise("12.3", "a concurrent classifier from your lesson-11 ops", points=3,
          hints=(
              'Write the dense step first, then ask which parts need other shards.',
              "Logits and weight gradients are local to a shard; the softmax needs the row's "
              "max and sum (your 11.1), the loss needs the label's shard.",
              'Forward: logits_s = x @ w_s on every shard; log-probabilities with your '
              'sharded_log_softmax; the loss of row b is -log_prob at its label, which only the '
              'owning shard has: pick it there (0 elsewhere) and all-reduce ADD. Backward with '
              'your ce_backward and g = 1/B per row; dw_s = x.T @ dlogits_s; w_s - lr * dw_s.',),
          answers=("classifier_step",), cases=_step_cases, trial=_step_trial)
def check_classifier_step(cases, outputs):
    """Exercise 12.3: ``classifier_step(w_parts, x, labels, lr, log)`` → ``(new w_parts,
    mean loss)``: one SGD step of a classifier sharded by classes, trained as the dense
    one is. The kernel holds one shard's weights (the judge plays the others): that
    shard's new weights, the loss and what it sent are checked, step by step."""
    for case, steps in zip(cases, outputs):
        what, w, lr, k = _step_what(case), case["_w"], case["lr"], case["shard"]
        s_count = len(case["w_parts"])
        for step, (x, labels) in enumerate(zip(case["xs"], case["labels"])):
            sends = _step_sends(w, x, labels, s_count)[k]
            before = np.split(w, s_count, axis=1)[k]
            w, want_loss = _dense_step(w, x, labels, lr)
            want = np.split(w, s_count, axis=1)
            new_parts = steps[step]["parts"] if step < len(steps) else []
            if len(new_parts) != s_count or any(
                    p.shape != q.shape for p, q in zip(new_parts, want)):
                raise Wrong(f"{what}: return {s_count} weight shards of shape "
                            f"{want[0].shape}, got {[p.shape for p in new_parts]}")
            check_sent(steps[step]["collectives"],
                       [(op, desc.replace("each row's", "its rows'"), sent)
                        for (op, desc), sent in zip(STEP_SENDS, sends)], k,
                       f"{what}, step {step}")
            loss = steps[step]["loss"]
            if not np.isclose(loss, want_loss, rtol=1e-7):
                raise Wrong(f"{what}: step {step}'s mean loss is {want_loss:.6f}, you "
                            f"said {loss:.6f}")
            p, q = new_parts[k], want[k]
            if not np.allclose(p, q, rtol=1e-7, atol=1e-9):
                raise Wrong(f"{what}: after step {step} shard {k}'s weights differ "
                            "from the dense classifier's (max difference "
                            f"{np.abs(p - q).max():.3g})"
                            + (". Divide the gradient by the batch size: the loss "
                               "is a mean" if np.allclose(
                                   before - p, len(labels) * (before - q)) else ""))


# -- 12.4 ---------------------------------------------------------------------------------


def stage_collectives(micro_batch: int, hidden: int):
    """``cycles(S)``: what a concurrent classifier stage of S members pays in collectives
    per micro-batch (lesson 11's list, costed by ``CollectiveLog``); 0 for one IPU."""

    def cycles(s_count: int) -> int:
        if s_count == 1:
            return 0
        target = IPUModel("ipu2", num_ipus=s_count).create_device().target
        act, row = micro_batch * hidden * 4, micro_batch * 4
        log = sharded.CollectiveLog(s_count, target)
        x, y = np.zeros(act, np.uint8), np.zeros(row, np.uint8)
        log.broadcast(x, "stage input")
        log.broadcast(y, "labels")
        log.all_reduce([y] * s_count, "max", "row max")
        log.all_reduce([y] * s_count, "add", "row sum")
        log.reduce_add([y] * s_count, "losses")
        log.broadcast(y, "loss gradient")
        log.reduce_add([x] * s_count, "input gradient")
        return int(log.cycles())

    return cycles


def _pace(first_cycles, classifier_cycles, collective_cycles, s_count):
    return max(first_cycles, classifier_cycles / s_count + collective_cycles(s_count))


def best_shard_count(first_cycles, classifier_cycles, collective_cycles, max_ipus):
    """The reference: try every S; the slowest stage decides; ties go to fewer IPUs."""
    options = [(max(first_cycles, classifier_cycles / s + collective_cycles(s)), s)
               for s in range(1, max_ipus)]
    return min(options)[1]


def _count_what(case) -> str:
    return (f"shard_count(first_cycles={case['first']:,}, "
            f"classifier_cycles={case['classifier']:,}, collective_cycles for micro-batches "
            f"of {case['micro_batch']} x {case['hidden']}, max_ipus={case['max_ipus']})")


def _count_cases(rng) -> list[dict]:
    """A compute-bound classifier, a first stage that sets the pace (a tie: fewest IPUs),
    large activations, few IPUs, and a random pipeline."""
    found = [(40_000, 200_000, 8, 64, 8), (200_000, 150_000, 8, 64, 8),
             (10_000, 400_000, 16, 256, 16), (1_000, 60_000, 4, 512, 8),
             (50_000, 120_000, 8, 64, 3),
             (int(rng.integers(1_000, 300_000)), int(rng.integers(10_000, 500_000)),
              int(rng.choice([4, 8, 16])), int(rng.choice([64, 128, 256])),
              int(rng.integers(2, 17)))]
    return [{"first": f, "classifier": c, "micro_batch": mb, "hidden": h, "max_ipus": m}
            for f, c, mb, h, m in found]


def _count_trial(case, shard_count):
    return shard_count(case["first"], case["classifier"],
                       stage_collectives(case["micro_batch"], case["hidden"]),
                       case["max_ipus"])


@exercise("12.4", "how many IPUs for the concurrent stage", points=2,
          hints=(
              'More IPUs make the classifier faster but its collectives slower.',
              "The pipeline's pace is max(first stage, classifier / S + collectives(S)): "
              'evaluate it for every S.',
              'IPU 0 runs the first stage; the classifier may use S = 1 .. max_ipus - 1 IPUs. '
              'With S members its stage takes classifier_cycles / S + collective_cycles(S). A '
              'pipeline goes at the pace of its slowest stage: pick the S whose slowest stage '
              'is fastest, the fewest IPUs on a tie.',),
          answers=("shard_count",), cases=_count_cases, trial=_count_trial)
def check_shard_count(cases, outputs):
    """Exercise 12.4: ``shard_count(first_cycles, classifier_cycles, collective_cycles,
    max_ipus)`` → the number of IPUs to give the concurrent classifier stage."""
    for case, out in zip(cases, outputs):
        first, classifier, max_ipus = case["first"], case["classifier"], case["max_ipus"]
        coll = stage_collectives(case["micro_batch"], case["hidden"])
        want = best_shard_count(first, classifier, coll, max_ipus)
        what = _count_what(case)
        got = as_int(out, what)
        if not 1 <= got < max_ipus:
            raise Wrong(f"{what}: you said {got}; IPU 0 runs the first stage, so the "
                        f"classifier can have 1 to {max_ipus - 1} IPUs")
        if got != want:
            pace = functools.partial(_pace, first, classifier, coll)
            raise Wrong(f"{what}: with {got} IPU(s) the slowest stage takes "
                        f"{pace(got):,.0f} cycles; with {want} it takes {pace(want):,.0f}"
                        + (". On a tie, take fewer IPUs" if pace(got) == pace(want) else
                           ". Collectives cost more with more members: count them"
                           if got == max_ipus - 1 else ""))
