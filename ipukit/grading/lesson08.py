"""The ``check_*`` functions of lesson 08: pipelining schedules as programs.

A schedule here is what each IPU runs, in order: ``orders[q]`` is a list of
``(phase, microbatch)`` for stage q on IPU q (phase ``"F"`` or ``"B"``; inference has only
``"F"``). An op waits for its IPU and for its inputs: ``F`` of stage k for ``F`` of stage
k-1, ``B`` of stage k for its own ``F`` and for ``B`` of stage k+1, on the same
micro-batch. The references are an event-driven simulator written here
(:func:`reference_run`), cross-checked in the tests against
:func:`ipukit.parallel.schedule`'s asynchronous timing and its golden cases, and the
schedules of :func:`ipukit.parallel.schedule` itself.

>>> from ipukit.grading import lesson08
>>> r = lesson08.check_simulator(lambda orders, t_F, t_B: (0, [0] * len(orders)))
... # doctest: +ELLIPSIS
WRONG · Exercise 08.1 · a dependency-driven pipeline simulator: 0/3 points
   ...
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ipukit.parallel import schedule

from .feedback import Wrong, as_ints, exercise, side_by_side, timeline


def orders_of(sched) -> list[list[tuple[str, int]]]:
    """A :class:`~ipukit.parallel.schedule.Schedule`'s ops as per-IPU orders."""
    out: list[list[tuple[str, int]]] = [[] for _ in range(sched.num_stages)]
    for o in sorted(sched.ops, key=lambda o: o.step):  # stable: execution order in a step
        if o.phase in "FB":
            out[o.ipu].append((o.phase, o.microbatch))
    return out


def _deps(k: int, phase: str, m: int, n: int) -> list[tuple[int, str, int]]:
    if phase == "F":
        return [(k - 1, "F", m)] if k > 0 else []
    return [(k, "F", m)] + ([(k + 1, "B", m)] if k < n - 1 else [])


def reference_run(orders, t_F, t_B):
    """``(end times {(stage, phase, mb): t}, stuck heads)``: run every IPU's order, each op
    as soon as its IPU and its inputs are ready. ``stuck`` lists ``(ipu, phase, mb)`` of
    the first op of every IPU that can never run (a deadlock), or is empty."""
    n = len(orders)
    end: dict[tuple[int, str, int], float] = {}
    pos, free = [0] * n, [0.0] * n
    progress = True
    while progress:
        progress = False
        for q in range(n):
            while pos[q] < len(orders[q]):
                phase, m = orders[q][pos[q]]
                deps = _deps(q, phase, m, n)
                if any(d not in end for d in deps):
                    break
                start = max([free[q]] + [end[d] for d in deps])
                free[q] = start + (t_F if phase == "F" else t_B)[q]
                end[(q, phase, m)] = free[q]
                pos[q] += 1
                progress = True
    stuck = [(q, *orders[q][pos[q]]) for q in range(n) if pos[q] < len(orders[q])]
    return end, stuck


def reference_stash(orders, end) -> list[int]:
    """Most micro-batches each IPU holds at once: +1 when an F ends, -1 when its B ends
    (at equal times the B's release comes first); 0 for inference."""
    peaks = []
    for q, order in enumerate(orders):
        if not any(ph == "B" for ph, _ in order):
            peaks.append(0)
            continue
        held = peak = 0
        for _, d in sorted((end[(q, ph, m)], 1 if ph == "F" else -1) for ph, m in order):
            held += d
            peak = max(peak, held)
        peaks.append(peak)
    return peaks


def _table(orders) -> str:
    return "\n".join(f"   IPU{q}: " + " ".join(f"{ph}{m}" for ph, m in o)
                     for q, o in enumerate(orders))


def _picture(orders, t_F, t_B):
    """The orders as a timeline Picture: each op that runs, as simulated."""
    end, _ = reference_run(orders, t_F, t_B)
    bars = [(f"IPU{q}", end[(q, ph, m)] - (t_F if ph == "F" else t_B)[q], end[(q, ph, m)],
             f"{ph}{m}") for q, o in enumerate(orders) for ph, m in o if (q, ph, m) in end]
    return timeline(bars or [("IPU0", 0, 0, "")])


def _read_orders(got, n: int, what: str) -> list[list[tuple[str, int]]]:
    try:
        out = [[(str(ph), int(m)) for ph, m in order] for order in got]
    except (TypeError, ValueError):
        raise Wrong(f"{what}: return one list per IPU of (phase, microbatch) pairs, like "
                    f"[[('F', 0), ('F', 1), ...], ...]; got {str(got)[:80]}") from None
    if len(out) != n:
        raise Wrong(f"{what}: return {n} lists, one per IPU, got {len(out)}")
    return out


def _random_valid_orders(rng, n: int, g: int, training: bool = True):
    """A random order that never deadlocks: a random topological order of all ops."""
    done: set = set()
    todo = [(k, ph, m) for k in range(n) for m in range(g)
            for ph in (("F", "B") if training else ("F",))]
    orders: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    while todo:
        ready = [op for op in todo if all(d in done for d in _deps(op[0], op[1], op[2], n))]
        k, ph, m = ready[int(rng.integers(len(ready)))]
        todo.remove((k, ph, m))
        done.add((k, ph, m))
        orders[k].append((ph, m))
    return orders


# -- 08.1 ---------------------------------------------------------------------------------


def _sim_cases():
    rng = np.random.default_rng(81)
    yield orders_of(schedule("gpipe", 4, 8)), [1] * 4, [2] * 4
    yield orders_of(schedule("1f1b", 4, 8)), [1] * 4, [2] * 4
    yield orders_of(schedule("grouped", 3, 6)), [1, 3, 2], [2, 5, 4]
    yield orders_of(schedule("grouped", 4, 8, training=False)), [2, 1, 3, 1], [0] * 4
    yield orders_of(schedule("1f1b", 3, 5)), [4, 1, 1], [1, 1, 6]
    for _ in range(4):
        n, g = int(rng.integers(2, 5)), int(rng.integers(1, 6))
        yield (_random_valid_orders(rng, n, g, training=bool(rng.integers(0, 4))),
               [int(t) for t in rng.integers(1, 6, n)], [int(t) for t in rng.integers(1, 9, n)])


@exercise("08.1", "a dependency-driven pipeline simulator", points=3,
          hints=(
              'An op cannot start before its IPU is free, nor before the ops it needs have '
              'ended.',
              'F of stage k needs F of stage k-1 (same micro-batch); B of stage k needs its own '
              "F and B of stage k+1. Simulate by repeatedly running any IPU's next op whose "
              'inputs are done.',
              'Keep, per IPU, the position in its order and the time it is free; keep the end '
              'time of every finished op. Repeatedly run the next op of any IPU whose inputs '
              "have finished: it starts at max(IPU free, inputs' ends). For the stash, walk "
              "each IPU's ops by end time: +1 at an F's end, -1 at a B's end (a B ending at the "
              'same time as an F frees first).',))
def check_simulator(simulate):
    """Exercise 08.1: ``simulate(orders, t_F, t_B)`` → ``(makespan, peak_stash)``: when the
    last op ends, and the most micro-batches each IPU holds at once."""

    for orders, t_f, t_b in _sim_cases():
        end, _ = reference_run(orders, t_f, t_b)
        want_span, want_stash = max(end.values()), reference_stash(orders, end)
        what = f"simulate(orders, t_F={t_f}, t_B={t_b}) for the orders\n{_table(orders)}\n"
        got = simulate([list(o) for o in orders], list(t_f), list(t_b))
        try:
            span, stash = got
        except (TypeError, ValueError):
            raise Wrong(f"{what}return (makespan, peak_stash), got {got!r}") from None
        if abs(float(span) - want_span) > 1e-9:
            raise Wrong(f"{what}the last op ends at {want_span:g}, you said {float(span):g}"
                        + _span_diagnosis(orders, t_f, t_b, float(span)))
        stash = as_ints(stash, len(orders), what + "peak_stash")
        if stash != want_stash:
            q = next(i for i, (a, b) in enumerate(zip(stash, want_stash)) if a != b)
            raise Wrong(f"{what}IPU {q} holds at most {want_stash[q]} micro-batches at "
                        f"once, you said {stash[q]} (all IPUs: expected {want_stash}, "
                        f"got {stash})")


def _span_diagnosis(orders, t_f, t_b, got) -> str:
    busy = max(sum((t_f if ph == "F" else t_b)[q] for ph, _ in o) for q, o in enumerate(orders))
    total = sum(sum((t_f if ph == "F" else t_b)[q] for ph, _ in o) for q, o in enumerate(orders))
    if got == busy:
        return (". That is the busiest IPU's work alone: an op also waits for its inputs "
                "from the neighbouring stages")
    if got == total:
        return ". That runs one op at a time: IPUs work in parallel"
    return ""


# -- 08.2 ---------------------------------------------------------------------------------


def _normalise(ops, what):
    try:
        out = [(int(s), int(q), str(ph), int(mb)) for s, q, ph, mb in ops]
    except (TypeError, ValueError):
        raise Wrong(f"{what}: return a list of (step, ipu, phase, microbatch) tuples, got "
                    f"{list(ops)[:3]!r}...") from None
    if len(set(out)) != len(out):
        raise Wrong(f"{what}: some ops appear twice")
    return out


@exercise("08.2", "the Grouped schedule", points=3,
          hints=(
              "Print schedule('grouped', 2, 4).table() and look at when each stage's backward "
              'runs.',
              'Forwards enter one stage per step; backwards leave the last stage one step after '
              'its forward and go back one stage per step.',
              'Stage k runs F of micro-batch m at step m + k and B of micro-batch m at step m + '
              '2N - 1 - k.',))
def check_grouped_ops(grouped_ops):
    """Exercise 08.2: ``grouped_ops(num_stages, gradient_accumulation)`` → the ops of
    TensorFlow-for-IPU's ``PipelineSchedule.Grouped`` as (step, ipu, phase, microbatch)."""

    for n, g in [(2, 4), (4, 8), (3, 12), (1, 2)]:
        what = f"grouped_ops({n}, {g})"
        want = {(o.step, o.ipu, o.phase, o.microbatch) for o in
                schedule("grouped", n, g).ops}
        got = _normalise(grouped_ops(n, g), what)
        missing = sorted(want - set(got))
        extra = sorted(set(got) - want)
        if extra:
            s, q, ph, mb = extra[0]
            right = [o for o in want if o[1:] == (q, ph, mb)]
            where = f" (it runs at step {right[0][0]})" if right else ""
            raise Wrong(f"{what}: you run {ph}{mb} on IPU {q} at step {s}{where}; "
                        f"{len(extra)} op(s) differ from TensorFlow's schedule")
        if missing:
            s, q, ph, mb = missing[0]
            raise Wrong(f"{what}: {ph}{mb} on IPU {q} at step {s} is missing "
                        f"({len(missing)} of {len(want)} ops missing)")


# -- 08.3 ---------------------------------------------------------------------------------


@exercise("08.3", "write 1F1B", points=3,
          hints=(
              'A stage should not start a backward before it has enough forwards in flight to '
              'keep the later stages busy.',
              'The stages after stage k, itself included, number N - k: that is how many '
              'forwards it runs before its first backward.',
              'Stage k (of N) first runs min(N - k, g) warm-up forwards. Then, while forwards '
              'remain, it alternates one backward (the oldest micro-batch it holds) and one '
              'forward. Then it drains the remaining backwards in order.',))
def check_one_f_one_b(one_f_one_b):
    """Exercise 08.3: ``one_f_one_b(num_stages, gradient_accumulation)`` → each IPU's order
    of (phase, microbatch) in PipeDream-Flush (1F1B)."""

    for n, g in [(4, 8), (2, 2), (3, 7), (4, 2), (1, 3), (5, 12)]:
        what = f"one_f_one_b({n}, {g})"
        want = orders_of(schedule("1f1b", n, g))
        got = _read_orders(one_f_one_b(n, g), n, what)
        if got == want:
            continue
        end, stuck = reference_run(got, [1] * n, [2] * n)
        q = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        i = next((j for j, (a, b) in enumerate(zip(got[q], want[q])) if a != b),
                 min(len(got[q]), len(want[q])))
        msg = (f"{what}: IPU {q}'s op {i} is "
               f"{''.join(map(str, got[q][i])) if i < len(got[q]) else 'missing'}, "
               f"1F1B runs {''.join(map(str, want[q][i])) if i < len(want[q]) else 'nothing'}"
               f"\n   yours:\n{_table(got)}\n   1F1B:\n{_table(want)}")
        if stuck:
            msg += f"\n   Your order deadlocks: IPUs wait forever at {stuck}"
        else:
            peak, best = reference_stash(got, end), list(schedule("1f1b", n, g)
                                                          .peak_activations())
            if peak != best:
                msg += f"\n   Your peak stash per IPU is {peak}; 1F1B's is {best}"
        unit = ([1] * n, [2] * n)
        raise Wrong(msg, picture=side_by_side(_picture(got, *unit), _picture(want, *unit),
                                              ("yours (t_F=1, t_B=2)", "1F1B")))


# -- 08.4 ---------------------------------------------------------------------------------


def _deadlock_cases():
    rng = np.random.default_rng(84)
    yield orders_of(schedule("1f1b", 3, 4))  # runs
    bad = orders_of(schedule("1f1b", 3, 4))
    bad[0] = [("F", 0), ("B", 0)] + [op for op in bad[0] if op not in (("F", 0), ("B", 0))]
    yield bad  # stage 0 waits for B0 before sending F1: the others wait for it
    swapped = orders_of(schedule("gpipe", 3, 3))
    swapped[2] = [("B", 0)] + [op for op in swapped[2] if op != ("B", 0)]
    yield swapped  # the last stage's B0 before its F0
    crossed = orders_of(schedule("gpipe", 2, 3))
    crossed[1] = [("F", 1), ("F", 0)] + crossed[1][2:]
    yield crossed  # F1 before F0 on stage 1: still runs (out of order, but no cycle)
    yield orders_of(schedule("grouped", 2, 4, training=False))
    for _ in range(6):
        n, g = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        orders = _random_valid_orders(rng, n, g)
        q = int(rng.integers(n))
        i, j = sorted(rng.choice(len(orders[q]), 2, replace=False))
        orders[q][i], orders[q][j] = orders[q][j], orders[q][i]
        yield orders


@exercise("08.4", "detect a deadlock", points=2,
          hints=(
              'A deadlock is a set of IPUs each waiting for another one.',
              "Run the orders without time; if at some point no IPU's next op has its inputs, "
              'nothing will ever move again.',
              'Run the orders as in 08.1 but ignore time: repeatedly run the next op of any IPU '
              'whose inputs have run. When no IPU can move, every IPU that still has ops is '
              'stuck at its next op.',))
def check_deadlock(find_deadlock):
    """Exercise 08.4: ``find_deadlock(orders)`` → ``[]`` when every op runs, else the
    ``(ipu, phase, microbatch)`` each stuck IPU waits at."""

    for orders in _deadlock_cases():
        _, want = reference_run(orders, [1] * len(orders), [1] * len(orders))
        what = f"find_deadlock for the orders\n{_table(orders)}\n"
        got = find_deadlock([list(o) for o in orders])
        try:
            got = sorted((int(q), str(ph), int(m)) for q, ph, m in (got or []))
        except (TypeError, ValueError):
            raise Wrong(f"{what}return a list of (ipu, phase, microbatch), got "
                        f"{got!r}") from None
        if got != sorted(want):
            raise Wrong(what + ("these orders run to the end: return []" if not want
                                else f"the IPUs stop at {sorted(want)}, you said "
                                     f"{got or 'no deadlock'}"))


# -- 08.5 ---------------------------------------------------------------------------------


class OptimizerFunctionOutput(NamedTuple):
    """``pipelining_ops.OptimizerFunctionOutput(opt, loss)`` (a NumPy stand-in)."""

    opt: object
    loss: object


class GradientDescentOptimizer(NamedTuple):
    """``tf.train.GradientDescentOptimizer(learning_rate)`` (a NumPy stand-in)."""

    learning_rate: float


def _mean_ce(logits, labels) -> float:
    top = logits.max(axis=1, keepdims=True)
    lp = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    return float(-lp[np.arange(len(labels)), labels].mean())


def _is(value, cls) -> bool:
    """``isinstance`` by name and fields (the notebook may hold another import of cls)."""
    return type(value).__name__ == cls.__name__ and all(hasattr(value, f)
                                                         for f in cls._fields)


def run_tf_pipeline(stages, optimizer_function, inputs, infeed):
    """Call the functions as ``pipelining_ops.pipeline`` does (forward only): stage 0 gets
    ``inputs`` then the infeed element's tensors; each later stage gets the previous
    stage's outputs; ``optimizer_function`` gets the last stage's outputs. Returns the
    ``OptimizerFunctionOutput`` of every infeed element."""
    outs = []
    for element in infeed:
        args, names = (*inputs, *element), "the pipeline's inputs and the infeed's tensors"
        for k, stage in enumerate(stages):
            try:
                result = stage(*args)
            except TypeError as exc:
                raise Wrong(f"stage {k} was called with {names} ({len(args)} values) and "
                            f"raised TypeError: {exc}") from None
            args = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            names = f"the outputs of stage {k}"
        try:
            outs.append(optimizer_function(*args))
        except TypeError as exc:
            raise Wrong(f"optimizer_function was called with {names} ({len(args)} values) "
                        f"and raised TypeError: {exc}") from None
    return outs


@exercise("08.5", "a TF pipeline's stages and optimizer_function", points=2,
          hints=("Every value a later stage needs must travel through every stage before "
                 "it.",
                 "Stage 0 receives the pipeline's inputs (the learning rate) followed by the "
                 "infeed's tensors; each stage's outputs are the next stage's arguments; the "
                 "optimizer_function receives the last stage's outputs.",
                 "stage1(learning_rate, images, labels) returns (learning_rate, activations, "
                 "labels); stage2 takes those three and returns (learning_rate, loss); "
                 "optimizer_function(learning_rate, loss) returns OptimizerFunctionOutput("
                 "GradientDescentOptimizer(learning_rate), loss)."))
def check_tf_pipeline(make_pipeline_functions):
    """Exercise 08.5: ``make_pipeline_functions(w1, w2)`` → ``([stage1, stage2],
    optimizer_function)`` for ``pipelining_ops.pipeline(computational_stages=...,
    inputs=[learning_rate], infeed_queue=..., optimizer_function=...)``."""
    rng = np.random.default_rng(85)
    for lr in (0.1, 0.02):
        w1, w2 = rng.normal(size=(16, 8)), rng.normal(size=(8, 10))
        infeed = [(rng.uniform(size=(b, 4, 4)), rng.integers(0, 10, b)) for b in (4, 3)]
        got = make_pipeline_functions(w1.copy(), w2.copy())
        try:
            stages, optimizer_function = got
            stages = list(stages)
        except (TypeError, ValueError):
            raise Wrong("return ([stage1, stage2], optimizer_function), got "
                        f"{str(got)[:80]}") from None
        if len(stages) != 2:
            raise Wrong(f"return two computational stages, got {len(stages)}")
        outs = run_tf_pipeline(stages, optimizer_function, [lr], infeed)
        for (images, labels), out in zip(infeed, outs):
            want = _mean_ce(np.maximum(images.reshape(len(images), -1) @ w1, 0) @ w2, labels)
            what = f"an infeed element of {len(labels)} images, learning rate {lr}"
            if not _is(out, OptimizerFunctionOutput):
                raise Wrong(f"{what}: optimizer_function returned {type(out).__name__}; "
                            "return OptimizerFunctionOutput(optimizer, loss)")
            if not _is(out.opt, GradientDescentOptimizer):
                raise Wrong(f"{what}: the optimizer is {type(out.opt).__name__}, expected "
                            "GradientDescentOptimizer(learning_rate)")
            if out.opt.learning_rate != lr:
                raise Wrong(f"{what}: the optimizer's learning rate is "
                            f"{out.opt.learning_rate}; use the learning rate the pipeline "
                            f"was given as an input ({lr}), passed on through the stages")
            loss = float(np.asarray(out.loss))
            if not np.isclose(loss, want, rtol=1e-9):
                raise Wrong(f"{what}: the loss is {loss:.6f}, expected the mean softmax "
                            f"cross-entropy of relu(flatten(images) @ w1) @ w2, {want:.6f}")
