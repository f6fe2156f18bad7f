"""The ``check_*`` functions of lesson 08: pipelining schedules as programs.

A schedule here is what each IPU runs, in order: ``orders[q]`` is a list of
``(phase, microbatch)`` for stage q on IPU q (phase ``"F"`` or ``"B"``; inference has only
``"F"``). An op waits for its IPU and for its inputs: ``F`` of stage k for ``F`` of stage
k-1, ``B`` of stage k for its own ``F`` and for ``B`` of stage k+1, on the same
micro-batch. Every check is judged: the cases and the verdict run in the judge, only the
learner's function runs in the notebook's kernel. The references are written here and
never call :func:`ipukit.parallel.schedule` (which a learner may call): an event-driven
simulator (:func:`reference_run`), the lock-step rule "every op at the first step its
inputs allow" for Grouped (08.2, with device mappings that ``schedule`` does not take)
and 1F1B under per-stage memory limits (08.3, warm-ups ``schedule("1f1b")`` does not
produce), each certified by the simulator. The tests cross-check them with ``schedule``'s
own golden cases.

>>> from ipukit.grading import lesson08
>>> r = lesson08.check_simulator(lambda orders, t_F, t_B: (0, [0] * len(orders)))
... # doctest: +ELLIPSIS
WRONG · Exercise 08.1 · a dependency-driven pipeline simulator: 0/3 points
   ...
"""

from __future__ import annotations

import html
from typing import NamedTuple

import numpy as np

from ipukit.parallel import schedule

from .common import capped_warmups, gantt
from .feedback import Picture, Wrong, as_ints, exercise, plural, side_by_side


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


def _as_orders(orders) -> list[list[tuple[str, int]]]:
    """Orders as lists of ``(phase, microbatch)`` tuples (plain data gives lists)."""
    return [[(str(ph), int(m)) for ph, m in o] for o in orders]


def _read_orders(got, n: int, what: str) -> list[list[tuple[str, int]]]:
    try:
        out = _as_orders(got)
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


def _stuck_text(orders, stuck, end) -> str:
    """Where each stuck IPU stops and what it waits for."""
    n, parts = len(orders), []
    for q, ph, m in stuck:
        missing = [d for d in _deps(q, ph, m, n) if d not in end]
        waits = " and ".join(f"{p}{mb} of stage {k} (IPU {k})" for k, p, mb in missing)
        parts.append(f"IPU {q} stops at {ph}{m}, waiting for {waits}")
    return "; ".join(parts)


def _run_picture(orders, t_F, t_B, end_of_axis: float):
    """The ops of ``orders`` that run, as simulated, on every IPU's row of a time axis
    ``0..end_of_axis``; a red mark where an IPU waits for ever."""
    end, stuck = reference_run(orders, t_F, t_B)
    n = len(orders)
    bars = [(f"IPU{q}", end[(q, ph, m)] - (t_F if ph == "F" else t_B)[q], end[(q, ph, m)],
             f"{ph}{m}") for q, o in enumerate(orders) for ph, m in o if (q, ph, m) in end]
    idle = {q: max([end[(q, ph, m)] for ph, m in orders[q] if (q, ph, m) in end] or [0.0])
            for q in range(n)}
    marks = [(f"IPU{q}", idle[q], f"waits for ever at {ph}{m}") for q, ph, m in stuck]
    return gantt(bars, [f"IPU{q}" for q in range(n)], end_of_axis, marks,
                 width=int(min(110, max(48, 2 * end_of_axis))))


# -- 08.1 ---------------------------------------------------------------------------------


def _sim_cases(rng) -> list[dict]:
    """Library schedules (inputs only), uneven stages, an inference pipeline, a stage that
    drains and fills again (its peak comes after a backward) and random valid orders."""
    refill = [[("F", 0), ("B", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 1), ("B", 2), ("B", 3)],
              [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)]]
    found = [(orders_of(schedule("gpipe", 4, 8)), [1] * 4, [2] * 4),
             (orders_of(schedule("1f1b", 4, 8)), [1] * 4, [2] * 4),
             (orders_of(schedule("grouped", 3, 6)), [1, 3, 2], [2, 5, 4]),
             (orders_of(schedule("grouped", 4, 8, training=False)), [2, 1, 3, 1], [0] * 4),
             (orders_of(schedule("1f1b", 3, 5)), [4, 1, 1], [1, 1, 6]),
             (refill, [1, 1], [1, 1])]
    for _ in range(4):
        n, g = int(rng.integers(2, 5)), int(rng.integers(1, 6))
        found.append((_random_valid_orders(rng, n, g, training=bool(rng.integers(0, 4))),
                      [int(t) for t in rng.integers(1, 6, n)],
                      [int(t) for t in rng.integers(1, 9, n)]))
    return [{"orders": o, "t_F": f, "t_B": b} for o, f, b in found]


def _sim_what(case) -> str:
    return (f"simulate(orders, t_F={list(case['t_F'])}, t_B={list(case['t_B'])}) for the "
            f"orders\n{_table(_as_orders(case['orders']))}\n")


def _sim_trial(case, simulate):
    """The learner's simulator on one case (the kernel): its makespan and stash."""
    orders = _as_orders(case["orders"])
    got = simulate([list(o) for o in orders], list(case["t_F"]), list(case["t_B"]))
    try:
        span, stash = got
        span = float(span)
    except (TypeError, ValueError):
        raise Wrong(f"{_sim_what(case)}return (makespan, peak_stash), got {got!r}") from None
    return {"span": span, "stash": as_ints(stash, len(orders), _sim_what(case) + "peak_stash")}


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
              'same time as an F frees first).',),
          answers=("simulate",), cases=_sim_cases, trial=_sim_trial)
def check_simulator(cases, outputs):
    """Exercise 08.1: ``simulate(orders, t_F, t_B)`` → ``(makespan, peak_stash)``: when the
    last op ends, and the most micro-batches each IPU holds at once."""
    for case, got in zip(cases, outputs):
        orders, t_f, t_b = _as_orders(case["orders"]), case["t_F"], case["t_B"]
        end, _ = reference_run(orders, t_f, t_b)
        want_span, want_stash = max(end.values()), reference_stash(orders, end)
        what = _sim_what(case)
        if not abs(got["span"] - want_span) <= 1e-9:  # nan is never right
            raise Wrong(f"{what}the last op ends at {want_span:g}, you said {got['span']:g}"
                        + _span_diagnosis(orders, t_f, t_b, got["span"]))
        stash = list(got["stash"])
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


def _ipus_of(entry) -> list[int]:
    """The IPUs of one ``device_mapping`` entry: an IPU, or a list (a concurrent stage)."""
    return [int(q) for q in entry] if isinstance(entry, list | tuple) else [int(entry)]


def lockstep_steps(num_stages: int, g: int) -> dict[tuple[str, int, int], int]:
    """``{(phase, stage, mb): step}`` of a lock-step pipeline in which every op runs at the
    first step after its inputs' steps and each stage runs at most one forward and one
    backward per step, micro-batches in order. This is Grouped (graphcore-sources.md §3b:
    pipeline stage s of the chain F0..F(N-1), B(N-1)..B0 handles micro-batch m at step
    m + s); derived here from the dependencies, not from the formula."""
    step: dict[tuple[str, int, int], int] = {}
    for m in range(g):
        for k in range(num_stages):
            after = [step[("F", k - 1, m)] if k else -1, step.get(("F", k, m - 1), -1)]
            step[("F", k, m)] = max(after) + 1
    for m in range(g):
        for k in reversed(range(num_stages)):
            after = [step[("F", k, m)], step.get(("B", k, m - 1), -1)]
            if k < num_stages - 1:
                after.append(step[("B", k + 1, m)])
            step[("B", k, m)] = max(after) + 1
    return step


def grouped_reference(device_mapping, g: int) -> set[tuple[int, int, str, int, int]]:
    """Every op ``(step, ipu, phase, stage, mb)`` of TensorFlow's Grouped schedule for the
    stages of ``device_mapping`` (a concurrent stage runs on each of its IPUs)."""
    steps = lockstep_steps(len(device_mapping), g)
    return {(s, q, ph, k, m) for (ph, k, m), s in steps.items()
            for q in _ipus_of(device_mapping[k])}


def _grouped_cases(rng) -> list[dict]:
    """Mappings ``schedule()`` does not take: two stages on one IPU, a U (first and last
    stage on IPU 0, as BERT's tied embedding), concurrent stages (the
    ``concurrent-pipeline-stages`` figure: A@0, B@1, [C0..C3]@[0..3], D@3), the identity
    and random mappings; counts are multiples of 2N, as TensorFlow requires."""
    found = [([0, 1, 2, 3], 8), ([0, 0, 1], 6), ([0, 1, 1, 0], 8), ([0, [1, 2], 2, 3], 8),
             ([0, 1, [0, 1, 2, 3], 3], 16), ([1, 0], 4), ([0, 1, 2, 3, 0], 10)]
    for _ in range(3):
        n = int(rng.integers(2, 6))
        mapping = []
        for _ in range(n):
            if rng.random() < 0.2:
                mapping.append(sorted(int(q) for q in rng.choice(n, 2, replace=False)))
            else:
                mapping.append(int(rng.integers(n)))
        found.append((mapping, 2 * n * int(rng.integers(1, 3))))
    return [{"device_mapping": m, "gradient_accumulation": g} for m, g in found]


def _grouped_what(case) -> str:
    return f"grouped_ops({case['device_mapping']}, {case['gradient_accumulation']})"


def _grouped_trial(case, grouped_ops):
    """The learner's ops on one case (the kernel), as lists of five plain values."""
    mapping = [list(e) if isinstance(e, list | tuple) else e for e in case["device_mapping"]]
    ops = grouped_ops(mapping, case["gradient_accumulation"])
    try:
        return [[int(s), int(q), str(ph), int(k), int(mb)] for s, q, ph, k, mb in ops]
    except (TypeError, ValueError):
        raise Wrong(f"{_grouped_what(case)}: return a list of (step, ipu, phase, stage, "
                    f"microbatch) tuples, got {str(ops)[:80]}...") from None


def _op(ph, k, m) -> str:
    return f"{ph}{m} of stage {k}"


@exercise("08.2", "the Grouped schedule", points=3,
          hints=(
              'Steps belong to stages, not to IPUs: when does micro-batch m reach stage k, and '
              'when does its gradient come back?',
              'TensorFlow chains 2N pipeline stages, F0..F(N-1) then B(N-1)..B0, and in Grouped '
              'stage s of that chain handles micro-batch m at step m + s, whatever IPU it is '
              'on: each step every stage runs one forward and one backward. A concurrent stage '
              '(a list of IPUs) runs on all of them in the same step.',
              'With N = len(device_mapping) stages: stage k runs F of micro-batch m at step '
              'm + k and B of micro-batch m at step m + 2N - 1 - k, once on every IPU of '
              'device_mapping[k] (an int, or a list of IPUs).',),
          answers=("grouped_ops",), cases=_grouped_cases, trial=_grouped_trial)
def check_grouped_ops(cases, outputs):
    """Exercise 08.2: ``grouped_ops(device_mapping, gradient_accumulation)`` → the ops of
    TensorFlow-for-IPU's ``PipelineSchedule.Grouped`` as (step, ipu, phase, stage,
    microbatch), stage k on the IPU (or IPUs) ``device_mapping[k]``."""
    for case, got in zip(cases, outputs):
        mapping, g = case["device_mapping"], case["gradient_accumulation"]
        what = _grouped_what(case)
        want = grouped_reference(mapping, g)
        mine = [tuple(o) for o in got]
        seen: set = set()
        for o in mine:
            if o in seen:
                raise Wrong(f"{what}: you list {_op(*o[2:])} on IPU {o[1]} at step {o[0]} "
                            "twice")
            seen.add(o)
        extra, missing = sorted(seen - want), sorted(want - seen)
        if not extra and not missing:
            continue
        picture = _grouped_picture(mine, want)
        if extra:
            raise Wrong(_misplaced(extra[0], want, mapping, g, what) +
                        f" ({plural(len(extra), 'op')} of yours "
                        f"{'differs' if len(extra) == 1 else 'differ'} from Grouped's)",
                        picture=picture)
        s, q, ph, k, m = missing[0]
        raise Wrong(f"{what}: {_op(ph, k, m)} on IPU {q} (step {s}) is missing "
                    f"({len(missing)} of {len(want)} ops missing)", picture=picture)


def _misplaced(op, want, mapping, g, what) -> str:
    s, q, ph, k, m = op
    n = len(mapping)
    if ph not in ("F", "B") or not (0 <= k < n and 0 <= m < g):
        return (f"{what}: you run {ph}{m} of stage {k}, which is no op of this pipeline "
                f"(phases F and B, stages 0-{n - 1}, micro-batches 0-{g - 1})")
    ipus = _ipus_of(mapping[k])
    if q not in ipus:
        return (f"{what}: you run {_op(ph, k, m)} on IPU {q}; stage {k} runs on "
                f"{'IPUs ' + str(ipus) if len(ipus) > 1 else 'IPU ' + str(ipus[0])} "
                f"(device_mapping[{k}])")
    right = next(o[0] for o in want if o[1:] == (q, ph, k, m))
    msg = (f"{what}: you run {_op(ph, k, m)} on IPU {q} at step {s}; Grouped runs it at "
           f"step {right}")
    num_ipus = len({i for e in mapping for i in _ipus_of(e)})
    if ph == "B" and num_ipus != n and s == m + 2 * num_ipus - 1 - k:
        msg += (f". You counted the IPUs ({num_ipus}); the chain has a forward and a backward "
                f"pipeline stage per computational stage: N = {n} stages")
    elif ph == "B" and s == m + 2 * n - 2 - k:
        msg += (". That fuses the last forward and the first backward into one step, as "
                "PopTorch (PopART) does; TensorFlow's Grouped keeps them apart")
    elif (ph == "F" and s == m + q) or (ph == "B" and s == m + 2 * n - 1 - q):
        msg += ". Steps follow the stage, not the IPU it runs on"
    return msg


def _grouped_picture(mine, want) -> Picture | None:
    """Yours above Grouped's: the ops as a table of IPUs x steps, your cells that differ
    from Grouped's marked (small cases only)."""
    steps = max([o[0] for o in want] + [o[0] for o in mine]) + 1
    if steps > 24 or any(o[0] < 0 for o in mine):
        return None
    yours, theirs = _cells(mine, steps), _cells(want, steps)
    tables = [_step_table("yours (* differs from Grouped)", yours, theirs),
              _step_table("Grouped", theirs, theirs)]
    return Picture("".join(t.html for t in tables), "\n".join(t.text for t in tables))


def _cells(ops, steps: int) -> dict:
    """``{(ipu, step): "F3s1+B0s2"}``: ``F3s1`` is the forward of micro-batch 3 of stage 1."""
    cells: dict = {}
    for s, q, ph, k, m in sorted(ops, key=lambda o: (o[0], o[3], o[2])):
        if s < steps:
            cells[(q, s)] = cells.get((q, s), "") + ("+" if (q, s) in cells else "") + \
                f"{ph}{m}s{k}"
    return cells


def _step_table(title: str, cells: dict, reference: dict) -> Picture:
    """One row per IPU, one column per step; a cell that differs from ``reference``'s is
    marked ``*`` (text) or red (HTML)."""
    ipus = sorted({q for q, _ in cells} | {q for q, _ in reference})
    steps = 1 + max(s for _, s in list(cells) + list(reference))
    mark = {key: cells.get(key, "") != reference.get(key, "") for key in
            set(cells) | set(reference)}
    shown = {key: cells.get(key, "") + ("*" if mark.get(key) else "") for key in mark}
    width = [max([len(str(s))] + [len(shown.get((q, s), "")) for q in ipus])
             for s in range(steps)]
    lines = ["   step  " + " ".join(f"{s:<{width[s]}}" for s in range(steps))]
    lines += [f"   IPU{q:<3} " + " ".join(f"{shown.get((q, s), ''):<{width[s]}}"
                                          for s in range(steps)) for q in ipus]
    head = "".join(f"<th style='padding:0 4px'>{s}</th>" for s in range(steps))
    rows = "".join(
        f"<tr><th style='padding:0 4px'>IPU{q}</th>" + "".join(
            f"<td style='padding:0 4px;{'background:#ffd7d5' if mark.get((q, s)) else ''}'>"
            f"{html.escape(cells.get((q, s), ''))}</td>" for s in range(steps)) + "</tr>"
        for q in ipus)
    table = (f"<div style='margin:4px 0'><b>{html.escape(title)}</b><table style='border-"
             f"collapse:collapse;font-family:monospace;font-size:11px'><tr><th>step</th>"
             f"{head}</tr>{rows}</table></div>")
    text = f"{title}:\n" + "\n".join(line.rstrip() for line in lines)
    return Picture(table, text)


# -- 08.3 ---------------------------------------------------------------------------------


def _pattern(g: int, warm: list[int]) -> list[list[tuple[str, int]]]:
    """1F1B orders: stage k runs ``warm[k]`` forwards, then one backward (the oldest it
    holds) and one forward while forwards remain, then its last backwards."""
    orders = []
    for w in warm:
        order = [("F", m) for m in range(w)]
        for m in range(w, g):
            order += [("B", m - w), ("F", m)]
        orders.append(order + [("B", m) for m in range(g - w, g)])
    return orders


def capped_reference(num_stages: int, g: int, max_in_flight) -> list[list[tuple[str, int]]]:
    """The orders 08.3 asks for, certified by the simulator: they run to the end, no stage
    holds more than its limit, and one more warm-up forward on any stage that is below
    1F1B's N - k and its limit deadlocks."""
    warm = capped_warmups(num_stages, g, max_in_flight)
    orders = _pattern(g, warm)
    unit = ([1] * num_stages, [2] * num_stages)
    end, stuck = reference_run(orders, *unit)
    peaks = reference_stash(orders, end)
    if stuck or any(p > c for p, c in zip(peaks, max_in_flight)):
        raise RuntimeError(f"kit bug: warm-ups {warm} deadlock or exceed the limits")
    for k, w in enumerate(warm):
        more = _pattern(g, warm[:k] + [w + 1] + warm[k + 1:])
        if w < min(num_stages - k, max_in_flight[k], g) and not reference_run(more, *unit)[1]:
            raise RuntimeError(f"kit bug: warm-ups {warm} are not the largest on stage {k}")
    return orders


def _capped_cases(rng) -> list[dict]:
    """Limits that do not bind (1F1B itself, fewer micro-batches than stages, one stage)
    and limits that do: on the first stage (every later one follows it), in the middle,
    in decreasing steps, and random ones."""
    found = [(4, 8, [8] * 4), (2, 2, [2, 2]), (3, 7, [3, 3, 3]), (4, 2, [4] * 4), (1, 3, [3]),
             (4, 8, [2, 4, 4, 4]), (4, 8, [4, 1, 4, 4]), (4, 6, [3, 3, 3, 3]),
             (5, 12, [5, 4, 2, 2, 1]), (3, 5, [1, 3, 3])]
    for _ in range(3):
        n = int(rng.integers(2, 6))
        found.append((n, int(rng.integers(1, 10)), [int(c) for c in rng.integers(1, n + 2, n)]))
    return [{"num_stages": n, "gradient_accumulation": g, "max_in_flight": caps,
             "_orders": capped_reference(n, g, caps)} for n, g, caps in found]


def _capped_what(case) -> str:
    return (f"one_f_one_b({case['num_stages']}, {case['gradient_accumulation']}, "
            f"max_in_flight={list(case['max_in_flight'])})")


def _capped_trial(case, one_f_one_b):
    """The learner's orders on one case (the kernel)."""
    n = case["num_stages"]
    got = one_f_one_b(n, case["gradient_accumulation"], list(case["max_in_flight"]))
    return [[list(op) for op in o] for o in _read_orders(got, n, _capped_what(case))]


@exercise("08.3", "write 1F1B", points=3,
          hints=(
              'A stage should not start a backward before it has enough forwards in flight to '
              'keep the later stages busy, nor hold more micro-batches than its limit.',
              "Stage k's first backward waits for the next stage's first backward, which comes "
              "after the next stage's warm-up forwards, and those need stage k's forwards. So "
              'no stage may warm up with more forwards than the stage before it.',
              'Stage k (of N) warms up with w_k = min(N - k, max_in_flight[k], w_(k-1), g) '
              'forwards (w_(-1) = g). Then, while forwards remain, it alternates one backward '
              '(the oldest micro-batch it holds) and one forward. Then it drains the remaining '
              'backwards in order.',),
          answers=("one_f_one_b",), cases=_capped_cases, trial=_capped_trial)
def check_one_f_one_b(cases, outputs):
    """Exercise 08.3: ``one_f_one_b(num_stages, gradient_accumulation, max_in_flight)`` →
    each IPU's order of (phase, microbatch): PipeDream-Flush (1F1B) in which stage k never
    holds more than ``max_in_flight[k]`` micro-batches."""
    for case, got in zip(cases, outputs):
        n, caps = case["num_stages"], list(case["max_in_flight"])
        want, mine = _as_orders(case["_orders"]), _as_orders(got)
        if mine == want:
            continue
        what = _capped_what(case)
        q = next(i for i, (a, b) in enumerate(zip(mine, want)) if a != b)
        i = next((j for j, (a, b) in enumerate(zip(mine[q], want[q])) if a != b),
                 min(len(mine[q]), len(want[q])))
        yours = f"{mine[q][i][0]}{mine[q][i][1]}" if i < len(mine[q]) else "missing"
        theirs = f"{want[q][i][0]}{want[q][i][1]}" if i < len(want[q]) else "nothing"
        msg = (f"{what}: IPU {q}'s op {i} is {yours}, the limited 1F1B runs {theirs}"
               f"\n   yours:\n{_table(mine)}\n   limited 1F1B:\n{_table(want)}")
        unit = ([1] * n, [2] * n)
        end, stuck = reference_run(mine, *unit)
        ref_end, _ = reference_run(want, *unit)
        axis = max(list(ref_end.values()) + list(end.values()) + [1.0])
        if stuck:
            msg += f"\n   Your orders deadlock: {_stuck_text(mine, stuck, end)}."
        else:
            peak = reference_stash(mine, end)
            over = [k for k in range(n) if peak[k] > caps[k]]
            if over:
                k = over[0]
                msg += (f"\n   IPU {k} holds {peak[k]} micro-batches at once; its limit is "
                        f"{caps[k]} (your peak stash per IPU: {peak})")
            elif max(end.values(), default=0.0) > max(ref_end.values()):
                msg += (f"\n   Your orders take {max(end.values()):g} time units (t_F=1, "
                        f"t_B=2), the limited 1F1B {max(ref_end.values()):g}")
        raise Wrong(msg, picture=side_by_side(_run_picture(mine, *unit, axis),
                                              _run_picture(want, *unit, axis),
                                              ("yours (t_F=1, t_B=2)", "limited 1F1B")))


# -- 08.4 ---------------------------------------------------------------------------------


def _deadlock_cases(rng) -> list[dict]:
    """Orders that run, hand-made deadlocks and random swaps of valid orders."""
    found = [orders_of(schedule("1f1b", 3, 4))]  # runs
    bad = orders_of(schedule("1f1b", 3, 4))
    bad[0] = [("F", 0), ("B", 0)] + [op for op in bad[0] if op not in (("F", 0), ("B", 0))]
    found.append(bad)  # stage 0 waits for B0 before sending F1: the others wait for it
    swapped = orders_of(schedule("gpipe", 3, 3))
    swapped[2] = [("B", 0)] + [op for op in swapped[2] if op != ("B", 0)]
    found.append(swapped)  # the last stage's B0 before its F0
    crossed = orders_of(schedule("gpipe", 2, 3))
    crossed[1] = [("F", 1), ("F", 0)] + crossed[1][2:]
    found.append(crossed)  # F1 before F0 on stage 1: still runs (out of order, no cycle)
    found.append(orders_of(schedule("grouped", 2, 4, training=False)))
    for _ in range(6):
        n, g = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        orders = _random_valid_orders(rng, n, g)
        q = int(rng.integers(n))
        i, j = sorted(rng.choice(len(orders[q]), 2, replace=False))
        orders[q][i], orders[q][j] = orders[q][j], orders[q][i]
        found.append(orders)
    return [{"orders": o} for o in found]


def _deadlock_trial(case, find_deadlock):
    """The learner's stuck IPUs on one case (the kernel)."""
    orders = _as_orders(case["orders"])
    got = find_deadlock([list(o) for o in orders])
    try:
        return sorted([int(q), str(ph), int(m)] for q, ph, m in (got or []))
    except (TypeError, ValueError):
        raise Wrong(f"find_deadlock for the orders\n{_table(orders)}\nreturn a list of (ipu, "
                    f"phase, microbatch), got {got!r}") from None


@exercise("08.4", "detect a deadlock", points=2,
          hints=(
              'A deadlock is a set of IPUs each waiting for another one.',
              "Run the orders without time; if at some point no IPU's next op has its inputs, "
              'nothing will ever move again.',
              'Run the orders as in 08.1 but ignore time: repeatedly run the next op of any IPU '
              'whose inputs have run. When no IPU can move, every IPU that still has ops is '
              'stuck at its next op.',),
          answers=("find_deadlock",), cases=_deadlock_cases, trial=_deadlock_trial)
def check_deadlock(cases, outputs):
    """Exercise 08.4: ``find_deadlock(orders)`` → ``[]`` when every op runs, else the
    ``(ipu, phase, microbatch)`` each stuck IPU waits at."""
    for case, got in zip(cases, outputs):
        orders = _as_orders(case["orders"])
        _, want = reference_run(orders, [1] * len(orders), [1] * len(orders))
        got = [tuple(s) for s in got]
        if got != sorted(want):
            raise Wrong(f"find_deadlock for the orders\n{_table(orders)}\n"
                        + ("these orders run to the end: return []" if not want
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


def _tf_cases(rng) -> list[dict]:
    """Two learning rates, weights and infeed elements of 4 and 3 images."""
    found = []
    for lr in (0.1, 0.02):
        found.append({"learning_rate": lr, "w1": rng.normal(size=(16, 8)),
                      "w2": rng.normal(size=(8, 10)),
                      "infeed": [[rng.uniform(size=(b, 4, 4)), rng.integers(0, 10, b)]
                                 for b in (4, 3)]})
    return found


def _tf_trial(case, make_pipeline_functions):
    """The learner's functions called as the pipeline calls them (the kernel): what each
    infeed element's ``optimizer_function`` returned, as plain data."""
    got = make_pipeline_functions(np.array(case["w1"]), np.array(case["w2"]))
    try:
        stages, optimizer_function = got
        stages = list(stages)
    except (TypeError, ValueError):
        raise Wrong("return ([stage1, stage2], optimizer_function), got "
                    f"{str(got)[:80]}") from None
    if len(stages) != 2:
        raise Wrong(f"return two computational stages, got {len(stages)}")
    infeed = [(np.array(x), np.array(y)) for x, y in case["infeed"]]
    found = []
    for out in run_tf_pipeline(stages, optimizer_function, [case["learning_rate"]], infeed):
        seen = {"output": type(out).__name__, "is_output": _is(out, OptimizerFunctionOutput)}
        if seen["is_output"]:
            seen["optimizer"] = type(out.opt).__name__
            seen["is_optimizer"] = _is(out.opt, GradientDescentOptimizer)
            if seen["is_optimizer"]:
                seen["learning_rate"] = float(out.opt.learning_rate)
            seen["loss"] = float(np.asarray(out.loss))
        found.append(seen)
    return found


@exercise("08.5", "a TF pipeline's stages and optimizer_function", points=2,
          hints=("Every value a later stage needs must travel through every stage before "
                 "it.",
                 "Stage 0 receives the pipeline's inputs (the learning rate) followed by the "
                 "infeed's tensors; each stage's outputs are the next stage's arguments; the "
                 "optimizer_function receives the last stage's outputs.",
                 "stage1(learning_rate, images, labels) returns (learning_rate, activations, "
                 "labels); stage2 takes those three and returns (learning_rate, loss); "
                 "optimizer_function(learning_rate, loss) returns OptimizerFunctionOutput("
                 "GradientDescentOptimizer(learning_rate), loss)."),
          answers=("make_pipeline_functions",), cases=_tf_cases, trial=_tf_trial)
def check_tf_pipeline(cases, outputs):
    """Exercise 08.5: ``make_pipeline_functions(w1, w2)`` → ``([stage1, stage2],
    optimizer_function)`` for ``pipelining_ops.pipeline(computational_stages=...,
    inputs=[learning_rate], infeed_queue=..., optimizer_function=...)``."""
    for case, outs in zip(cases, outputs):
        lr, w1, w2 = case["learning_rate"], case["w1"], case["w2"]
        if len(outs) != len(case["infeed"]):
            raise Wrong(f"the pipeline ran {len(case['infeed'])} infeed elements, your "
                        f"optimizer_function returned {len(outs)} results")
        for (images, labels), out in zip(case["infeed"], outs):
            # (reshape(len(images), -2) in an answer is right too: NumPy reads any negative
            # size as "the rest")
            want = _mean_ce(np.maximum(images.reshape(len(images), -1) @ w1, 0) @ w2, labels)
            what = f"an infeed element of {len(labels)} images, learning rate {lr}"
            if not out["is_output"]:
                raise Wrong(f"{what}: optimizer_function returned {out['output']}; "
                            "return OptimizerFunctionOutput(optimizer, loss)")
            if not out["is_optimizer"]:
                raise Wrong(f"{what}: the optimizer is {out['optimizer']}, expected "
                            "GradientDescentOptimizer(learning_rate)")
            if out["learning_rate"] != lr:
                raise Wrong(f"{what}: the optimizer's learning rate is "
                            f"{out['learning_rate']}; use the learning rate the pipeline "
                            f"was given as an input ({lr}), passed on through the stages")
            if not np.isclose(out["loss"], want, rtol=1e-9):
                raise Wrong(f"{what}: the loss is {out['loss']:.6f}, expected the mean "
                            "softmax cross-entropy of relu(flatten(images) @ w1) @ w2, "
                            f"{want:.6f}")
