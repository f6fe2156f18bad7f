"""The ``check_*`` functions of lesson 13: the schedules after Graphcore's, as programs.

An order is what each IPU runs, in order: ``orders[q]`` lists IPU q's ops as ``(phase,
stage, microbatch)`` (13.1: an IPU may hold several model stages, as in interleaved 1F1B
and ZB-V) or as ``(phase, microbatch)`` of stage q on IPU q (13.2, 13.3). The phases are
``"F"``, ``"B"`` (the input gradient) and ``"W"`` (the weight gradient). An op waits for
its IPU and for its inputs: F of stage k for F of stage k-1, B of stage k for its own F and
for B of stage k+1, W of stage k for B of stage k, on the same micro-batch; nothing waits
for a W but the optimizer step.

Every check is judged: the cases and the verdict run in the judge, only the learner's
function runs in the notebook's kernel. The references are written here and never call
:func:`ipukit.parallel.schedule` (which a learner may call): an event-driven simulator
with W ops and the kit's three bubble measures (13.1), ZB-H1 under per-IPU memory limits
(13.2, a variant ``schedule`` does not build, certified by the simulator), a slot-by-slot
greedy that puts W ops into idle slots under a memory cap (13.3), and the IPUs, link
bytes and memory of a replicated pipeline with a concurrent stage, the all-reduce from
:func:`ipukit.cost.ring_bytes` (13.4). 13.2 and 13.3 are judged by properties: the orders
run, stay within the memory limits and finish no later than the reference. The tests
cross-check the references with ``schedule``'s golden cases.

Mutation pass (``tools/mutants.py 13``): the one-token mistakes that keep full marks are
equivalent: starting 13.3's greedy at slot 1 instead of 0 (every IPU one slot later: the
same orders), and running 13.4's ring with one replica (it sends 0 bytes to itself, which
the trial leaves out as it leaves out every empty link).

>>> from ipukit.grading import lesson13
>>> r = lesson13.check_split_simulator(lambda orders, t_F, t_B, t_W: (0, {}))
... # doctest: +ELLIPSIS
WRONG · Exercise 13.1 · a simulator for split backwards: 0/3 points
   ...
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np

from ipukit import cost

from . import lesson08
from .common import capped_warmups, gantt
from .feedback import Picture, Wrong, exercise, plural, side_by_side

PHASES = ("F", "B", "W")


def orders_of(sched) -> list[list[tuple[str, int, int]]]:
    """A :class:`~ipukit.parallel.schedule.Schedule`'s ops as per-IPU orders of ``(phase,
    stage, microbatch)``, in execution order."""
    out: list[list[tuple[str, int, int]]] = [[] for _ in range(sched.num_stages)]
    for o in sorted(sched.ops, key=lambda o: o.step):  # stable: execution order in a step
        out[o.ipu].append((o.phase, o.stage, o.microbatch))
    return out


def staged(orders) -> list[list[tuple[str, int, int]]]:
    """Orders of ``(phase, microbatch)`` (stage q on IPU q) as ``(phase, stage, mb)``."""
    return [[(str(ph), q, int(m)) for ph, m in o] for q, o in enumerate(orders)]


def _needs(op, last: int) -> list[tuple[str, int, int]]:
    phase, k, m = op
    if phase == "F":
        return [("F", k - 1, m)] if k > 0 else []
    if phase == "B":
        return [("F", k, m)] + ([("B", k + 1, m)] if k < last else [])
    return [("B", k, m)]


def reference_run(orders, t_F, t_B, t_W):
    """``(start, end, stuck)``: run every IPU's order of ``(phase, stage, mb)`` ops, each
    op as soon as its IPU is free and its inputs have ended (F takes ``t_F``, B ``t_B``, W
    ``t_W``). ``start`` and ``end`` map each op that ran to its times; ``stuck`` lists
    ``(ipu, op)`` of the first op of every IPU that can never run (a deadlock)."""
    dur = {"F": t_F, "B": t_B, "W": t_W}
    last = max((op[1] for o in orders for op in o), default=0)
    start: dict = {}
    end: dict = {}
    pos, free = [0] * len(orders), [0.0] * len(orders)
    progress = True
    while progress:
        progress = False
        for q, order in enumerate(orders):
            while pos[q] < len(order):
                op = order[pos[q]]
                deps = _needs(op, last)
                if any(d not in end for d in deps):
                    break
                start[op] = max([free[q]] + [end[d] for d in deps])
                free[q] = end[op] = start[op] + dur[op[0]]
                pos[q] += 1
                progress = True
    stuck = [(q, o[pos[q]]) for q, o in enumerate(orders) if pos[q] < len(o)]
    return start, end, stuck


def reference_measures(orders, t_F, t_B, t_W) -> dict:
    """The makespan and the kit's three bubble measures (lesson 08 §3, ``Timeline.measures``)
    of orders that run: ideal = the busiest IPU's work; ``total`` = (makespan - ideal) /
    makespan, ``ideal`` = (makespan - ideal) / ideal, ``span`` = (longest span - ideal) /
    longest span, an IPU's span running from its first op's start to its last op's end."""
    start, end, _ = reference_run(orders, t_F, t_B, t_W)
    dur = {"F": t_F, "B": t_B, "W": t_W}
    makespan = max(end.values())
    busy = max(sum(dur[op[0]] for op in o) for o in orders)
    spread = max(max(end[op] for op in o) - min(start[op] for op in o) for o in orders if o)
    return {"makespan": makespan, "total": (makespan - busy) / makespan,
            "ideal": (makespan - busy) / busy, "span": (spread - busy) / spread}


def in_flight_peak(order, m_b=1, m_w=None) -> int:
    """The most an IPU holds at once running ``order`` (of ``(phase, ...)`` ops), counted
    in order: F stashes ``m_b``, B frees all but ``m_w``, W frees ``m_w`` (the zero-bubble
    paper's memory model). ``m_w`` defaults to ``m_b``: a micro-batch is held from its F
    until its W."""
    m_w = m_b if m_w is None else m_w
    change = {"F": m_b, "B": m_w - m_b, "W": -m_w}
    held = peak = 0
    for op in order:
        held += change[op[0]]
        peak = max(peak, held)
    return peak


def _table(orders) -> str:
    return "\n".join(f"   IPU{q}: " + " ".join(_name(op) for op in o)
                     for q, o in enumerate(orders))


def _name(op) -> str:
    """``F3`` (stage q on IPU q) or ``F3s5`` (micro-batch 3 of model stage 5)."""
    return f"{op[0]}{op[-1]}" if len(op) == 2 else f"{op[0]}{op[2]}s{op[1]}"


def _read(got, n: int, width: int, what: str) -> list[list[tuple]]:
    """The learner's orders as lists of tuples of ``width`` (phase first), or Wrong."""
    shape = "(phase, microbatch)" if width == 2 else "(phase, stage, microbatch)"
    try:
        out = [[(str(op[0]), *(int(x) for x in op[1:])) for op in o] for o in got]
        ok = all(len(op) == width for o in out for op in o)
    except (TypeError, ValueError, IndexError):
        ok = False
    if not ok:
        raise Wrong(f"{what}: return one list per IPU of {shape} tuples, like "
                    f"[[('F', 0), ('F', 1), ...], ...]; got {str(got)[:80]}")
    if len(out) != n:
        raise Wrong(f"{what}: return {n} lists, one per IPU, got {len(out)}")
    return out


def _picture(orders, t, end_of_axis: float) -> Picture:
    """``orders`` (of ``(phase, stage, mb)``) as simulated with times ``t``, one row per
    IPU; a red mark where an IPU waits for ever."""
    start, end, stuck = reference_run(orders, *t)
    bars = [(f"IPU{q}", start[op], end[op], _name(op)) for q, o in enumerate(orders)
            for op in o if op in end]
    marks = [(f"IPU{q}", max([end[op] for op in orders[q] if op in end] or [0.0]),
              f"waits for ever at {_name(op)}") for q, op in stuck]
    return gantt(bars, [f"IPU{q}" for q in range(len(orders))], end_of_axis, marks,
                 width=int(min(110, max(48, 2 * end_of_axis))))


def random_orders(rng, placement, m: int):
    """A random order of every F, B and W op that never deadlocks (a random topological
    order): model stage s on IPU ``placement[s]``, ``m`` micro-batches."""
    stages = len(placement)
    todo = [(ph, k, i) for k in range(stages) for i in range(m) for ph in PHASES]
    done: set = set()
    orders: list[list[tuple[str, int, int]]] = [[] for _ in range(max(placement) + 1)]
    while todo:
        ready = [op for op in todo if all(d in done for d in _needs(op, stages - 1))]
        op = ready[int(rng.integers(len(ready)))]
        todo.remove(op)
        done.add(op)
        orders[placement[op[1]]].append(op)
    return orders


# -- 13.1 ---------------------------------------------------------------------------------


def _sim_cases(rng) -> list[dict]:
    """Library schedules (inputs only: their orders) with the published unit times, an
    unsplit schedule with v chunks, uneven phase times, a U (IPU 0 holds the first and
    the last stage: more work than IPU 1), and random valid orders on a V, a cyclic
    placement and a random one."""
    from ipukit.parallel import schedule  # noqa: PLC0415 - only the case inputs

    found = [(orders_of(schedule("zb_h1", 4, 8)), 1, 1, 1),
             (orders_of(schedule("1f1b", 4, 8)), 1, 2, 0),
             (orders_of(schedule("zb_v", 4, 8)), 0.5, 0.5, 0.5),
             (orders_of(schedule("interleaved_1f1b", 4, 8, virtual_stages=2)), 0.5, 1, 0),
             (orders_of(schedule("zb_h1", 3, 5)), 2, 3, 1),
             ([[("F", 0, 0), ("F", 2, 0), ("B", 2, 0), ("W", 2, 0), ("B", 0, 0), ("W", 0, 0)],
               [("F", 1, 0), ("B", 1, 0), ("W", 1, 0)]], 1, 2, 1),
             ([[("F", 0, 0), ("F", 0, 1), ("B", 0, 0), ("B", 0, 1), ("W", 0, 1), ("W", 0, 0)],
               [("F", 1, 0), ("B", 1, 0), ("F", 1, 1), ("W", 1, 0), ("B", 1, 1),
                ("W", 1, 1)]], 1, 3, 2)]
    p = int(rng.integers(2, 4))
    for placement in ([0, 1, 1, 0], [0, 1, 2, 0, 1, 2], [int(q) for q in rng.integers(0, p, 4)]
                      + list(range(p))):  # a V, cyclic, and some IPUs with more stages
        times = [int(x) for x in rng.integers(1, 5, 3)]
        found.append((random_orders(rng, placement, int(rng.integers(1, 4))), *times))
    return [{"orders": [[list(op) for op in o] for o in orders], "t_F": f, "t_B": b,
             "t_W": w} for orders, f, b, w in found]


def _sim_what(case) -> str:
    orders = [[tuple(op) for op in o] for o in case["orders"]]
    return (f"simulate(orders, t_F={case['t_F']}, t_B={case['t_B']}, t_W={case['t_W']}) "
            f"for the orders\n{_table(orders)}\n")


def _sim_trial(case, simulate):
    """The learner's simulator on one case (the kernel): its makespan and bubbles."""
    orders = [[(str(ph), int(k), int(m)) for ph, k, m in o] for o in case["orders"]]
    got = simulate([list(o) for o in orders], case["t_F"], case["t_B"], case["t_W"])
    try:
        span, bubble = got
        found = {"span": float(span),
                 "bubble": {k: float(bubble[k]) for k in ("total", "ideal", "span")}}
    except (TypeError, ValueError, KeyError, IndexError):
        raise Wrong(f"{_sim_what(case)}return (makespan, {{'total': ..., 'ideal': ..., "
                    f"'span': ...}}), got {str(got)[:120]}") from None
    return found


@exercise("13.1", "a simulator for split backwards", points=3,
          hints=(
              'A W op waits only for its own B; an IPU may hold several model stages.',
              'Run the orders as in 08.1, with W of stage k needing B of stage k: an op '
              "starts at max(its IPU free, its inputs' ends). Then the three bubbles compare "
              "the makespan with the busiest IPU's work (the ideal time).",
              'ideal = max over IPUs of the sum of their ops\' times; total = (makespan - '
              'ideal) / makespan; ideal bubble = (makespan - ideal) / ideal; span = (s - '
              "ideal) / s, s being the longest (last op's end - first op's start) of any "
              'IPU.',),
          answers=("simulate",), cases=_sim_cases, trial=_sim_trial)
def check_split_simulator(cases, outputs):
    """Exercise 13.1: ``simulate(orders, t_F, t_B, t_W)`` → ``(makespan, {"total",
    "ideal", "span"})`` for per-IPU orders of ``(phase, stage, microbatch)`` ops."""
    for case, got in zip(cases, outputs):
        orders = [[tuple(op) for op in o] for o in case["orders"]]
        t = (case["t_F"], case["t_B"], case["t_W"])
        want = reference_measures(orders, *t)
        what = _sim_what(case)
        if not _close(got["span"], want["makespan"]):
            raise Wrong(f"{what}the last op ends at {want['makespan']:g}, you said "
                        f"{got['span']:g}" + _span_diagnosis(orders, t, got["span"]))
        for key in ("total", "ideal", "span"):
            if not _close(got["bubble"][key], want[key]):
                raise Wrong(f"{what}the bubble '{key}' is {want[key]:.6g}, you said "
                            f"{got['bubble'][key]:.6g} (expected {_rounded(want)}, got "
                            f"{_rounded(got['bubble'])})" + _bubble_diagnosis(
                                orders, t, key, got["bubble"][key]))


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))  # nan is never close


def _rounded(bubble) -> dict:
    return {k: round(float(bubble[k]), 4) for k in ("total", "ideal", "span")}


def _span_diagnosis(orders, t, got) -> str:
    if t[2] and _close(got, reference_measures(orders, t[0], t[1], 0)["makespan"]):
        return ". That is the makespan with W taking no time: a W op takes t_W"
    dur = {"F": t[0], "B": t[1], "W": t[2]}
    if _close(got, max(sum(dur[op[0]] for op in o) for o in orders)):
        return (". That is the busiest IPU's work alone: an op also waits for its inputs "
                "from the other stages")
    return ""


def _bubble_diagnosis(orders, t, key, got) -> str:
    dur = {"F": t[0], "B": t[1], "W": t[2]}
    work = [sum(dur[op[0]] for op in o) for o in orders]
    want = reference_measures(orders, *t)
    makespan, mean = want["makespan"], sum(work) / len(work)
    if key != "span" and _close(got, (makespan - mean) / (makespan if key == "total" else mean)):
        return (". That uses the IPUs' mean work; the ideal time is the busiest IPU's work, "
                "max over IPUs")
    if key == "span" and _close(got, want["total"]):
        return (". That is the bubble of the whole run; 'span' measures each IPU from its "
                "first op's start to its last op's end and takes the longest")
    return ""


# -- 13.2 ---------------------------------------------------------------------------------


def capped_zb_h1(p: int, m: int, max_in_flight) -> list[list[tuple[str, int]]]:
    """ZB-H1 under per-IPU limits: the limited 1F1B (B first after the warm-up), each
    backward split into B and W, IPU r keeping the W of up to ``min(r, limit - warm-up)``
    backwards pending (the oldest runs when more are); the rest run at the end. With
    limits of at least p it is the zero-bubble paper's ZB-H1. Certified by the simulator:
    it runs, within the limits."""
    orders = []
    for r, w in enumerate(capped_warmups(p, m, max_in_flight)):
        keep = min(r, int(max_in_flight[r]) - w)
        order = [("F", i) for i in range(w)]
        pending: deque = deque()
        for i in range(m):
            order.append(("B", i))
            pending.append(i)
            if len(pending) > keep:
                order.append(("W", pending.popleft()))
            if i + w < m:
                order.append(("F", i + w))
        orders.append(order + [("W", i) for i in pending])
    _, _, stuck = reference_run(staged(orders), 1, 1, 1)
    if stuck or any(in_flight_peak(o) > c for o, c in zip(orders, max_in_flight)):
        raise RuntimeError(f"kit bug: capped ZB-H1 {p}, {m}, {max_in_flight} fails")
    return orders


def _zb_cases(rng) -> list[dict]:
    """Limits that do not bind (ZB-H1 itself: the published 27 and 79), limits that cut
    the pending W ops, the warm-up of the first IPU (every later one follows it) or one in
    the middle, fewer micro-batches than IPUs, one IPU, uneven times, and random ones."""
    found = [(4, 8, [4] * 4, (1, 1, 1)), (4, 8, [4, 3, 3, 3], (1, 1, 1)),
             (4, 8, [2, 4, 4, 4], (1, 1, 1)), (5, 10, [5, 5, 2, 5, 5], (1, 1, 1)),
             (3, 2, [3, 3, 3], (1, 1, 1)), (1, 3, [2], (1, 1, 1)),
             (8, 24, [8] * 8, (1, 1, 1)), (4, 6, [6, 5, 4, 3], (1, 2, 1)),
             (5, 12, [5, 5, 4, 4, 2], (2, 2, 1))]
    for _ in range(3):
        p = int(rng.integers(2, 7))
        caps = [int(c) for c in rng.integers(max(1, p - 2), p + 2, p)]
        found.append((p, int(rng.integers(1, 13)), caps, (1, 1, 1)))
    return [{"p": p, "m": m, "max_in_flight": caps, "t": list(t),
             "_orders": [[list(op) for op in o] for o in capped_zb_h1(p, m, caps)]}
            for p, m, caps, t in found]


def _zb_what(case) -> str:
    return f"zb_h1({case['p']}, {case['m']}, max_in_flight={list(case['max_in_flight'])})"


def _zb_trial(case, zb_h1):
    """The learner's orders on one case (the kernel)."""
    p = case["p"]
    got = zb_h1(p, case["m"], list(case["max_in_flight"]))
    return [[list(op) for op in o] for o in _read(got, p, 2, _zb_what(case))]


@exercise("13.2", "ZB-H1 from your 1F1B", points=3,
          hints=(
              "Nothing waits for a W but the optimizer: it can wait for an IPU's idle time.",
              'Start from the limited 1F1B (08.3), split every backward into B then W, and '
              'let IPU r leave the W of its r oldest backwards for later: they fill the '
              'time it would wait at the end. Every pending W still holds its micro-batch, '
              'so the limit bounds how many may wait.',
              "IPU r: warm-up w_r = min(p - r, max_in_flight[r], w_(r-1), m) forwards; then "
              'for each micro-batch i: B i, then the oldest pending W if more than k_r = '
              'min(r, max_in_flight[r] - w_r) are pending, then F (i + w_r) while forwards '
              'remain; then the pending W ops in order.',),
          answers=("zb_h1",), cases=_zb_cases, trial=_zb_trial)
def check_zb_h1(cases, outputs):
    """Exercise 13.2: ``zb_h1(p, m, max_in_flight)`` → each IPU's order of ``(phase,
    microbatch)`` with phases F, B, W: ZB-H1 in which IPU r never holds more than
    ``max_in_flight[r]`` micro-batches (one is held from its F until its W). Judged by
    properties: the orders run, every IPU holds no more than the limit and than ZB-H1
    under that limit, and they finish no later than it."""
    for case, got in zip(cases, outputs):
        p, m, caps = case["p"], case["m"], list(case["max_in_flight"])
        t = tuple(case["t"])
        what = _zb_what(case)
        mine = [[(str(ph), int(i)) for ph, i in o] for o in got]
        want = [[(str(ph), int(i)) for ph, i in o] for o in case["_orders"]]
        _check_ops(mine, m, what, {"F", "B", "W"})
        _, end, _ = reference_run(staged(mine), *t)
        _, ref_end, _ = reference_run(staged(want), *t)
        axis = max(list(end.values()) + list(ref_end.values()) + [1.0])
        titles = (f"yours (t_F, t_B, t_W = {t})", "ZB-H1 under the limits")
        pictures = side_by_side(_picture(staged(mine), t, axis),
                                _picture(staged(want), t, axis), titles)
        # A W waits for its own B alone, which _check_ops put before it: the orders run
        # exactly when their F and B ops, the 1F1B they split, run in 08.1's simulator.
        fb = [[op for op in o if op[0] != "W"] for o in mine]
        end08, stuck08 = lesson08.reference_run(fb, [t[0]] * p, [t[1] + t[2]] * p)
        if stuck08:
            raise Wrong(f"{what}: your orders deadlock, their F and B ops (your 1F1B) "
                        f"already in 08.1's simulator: {lesson08._stuck_text(fb, stuck08, end08)}"
                        f"\n{_table(mine)}", picture=pictures)
        for q in range(p):
            peak, limit, zb = in_flight_peak(mine[q]), caps[q], in_flight_peak(want[q])
            if peak > limit:
                raise Wrong(f"{what}: IPU {q} holds {peak} micro-batches at once (each from "
                            f"its F until its W); its limit is {limit}", picture=pictures)
            if peak > zb:
                raise Wrong(f"{what}: IPU {q} holds {peak} micro-batches at once, ZB-H1 under "
                            f"these limits only {zb}: ZB-H1 keeps no more W ops waiting "
                            "than it needs to fill the IPU's idle time, so that no IPU holds "
                            "more than 1F1B's first IPU", picture=pictures)
        span, ref = max(end.values()), max(ref_end.values())
        if span > ref + 1e-9:
            msg = (f"{what}: your orders take {span:g} time units (t_F, t_B, t_W = {t}), "
                   f"ZB-H1 under the same limits {ref:g}")
            if all(o[i + 1] == ("W", op[1]) for o in mine for i, op in enumerate(o)
                   if op[0] == "B"):
                msg += (". Every W runs right after its B: that is 1F1B with the backward cut "
                        "in two. Leave some W ops for the time the IPU would wait")
            raise Wrong(msg, picture=pictures)


def _check_ops(orders, m: int, what: str, phases: set) -> None:
    """Every IPU runs each op of ``phases`` once per micro-batch, W after its B."""
    for q, order in enumerate(orders):
        count = Counter(order)
        twice = [op for op, n in count.items() if n > 1]
        if twice:
            raise Wrong(f"{what}: IPU {q} runs {_name(twice[0])} {count[twice[0]]} times")
        want = {(ph, i) for ph in phases for i in range(m)}
        missing, extra = sorted(want - set(count)), sorted(set(count) - want)
        if extra:
            raise Wrong(f"{what}: IPU {q} runs {_name(extra[0])}, which is no op of this "
                        f"pipeline (phases {', '.join(sorted(phases))}, micro-batches 0-"
                        f"{m - 1})")
        if missing:
            raise Wrong(f"{what}: IPU {q} never runs {_name(missing[0])} "
                        f"({plural(len(missing), 'op')} missing)"
                        + (": every backward is split into B and W" if missing[0][0] == "W"
                           else ""))
        where = {op: i for i, op in enumerate(order)}
        late = [i for i in range(m) if ("W", i) in where and where[("W", i)] < where[("B", i)]]
        if late:
            raise Wrong(f"{what}: IPU {q} runs W{late[0]} before B{late[0]}: the weight "
                        "gradient needs the output gradient that its B receives")


# -- 13.3 ---------------------------------------------------------------------------------


def greedy_w(orders, t, m_b: int, m_w: int, caps):
    """``(orders with W, makespan)``: the F and B ops of ``orders`` (``(phase, mb)``, stage q
    on IPU q) in their order, W ops placed slot by slot. At every whole time t each free
    IPU runs its next F or B if its inputs have ended by t and, for an F, it fits under the
    IPU's cap (F stashes ``m_b``, B frees all but ``m_w``, W frees ``m_w``); else its
    oldest pending W, if any; else it waits. Its pending W ops run after its last B."""
    t_f, t_b, t_w = (int(x) for x in t)
    dur = {"F": t_f, "B": t_b, "W": t_w}
    n = len(orders)
    out: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    end: dict = {}
    pos, free, held = [0] * n, [0] * n, [0] * n
    pending: list[deque] = [deque() for _ in range(n)]
    now = 0
    while any(pos[q] < len(orders[q]) or pending[q] for q in range(n)):
        for q in range(n):
            if free[q] > now:
                continue
            op = None
            if pos[q] < len(orders[q]):
                ph, i = orders[q][pos[q]]
                ready = all(end.get(d, now + 1) <= now for d in _needs((ph, q, i), n - 1))
                if ready and (ph != "F" or held[q] + m_b <= caps[q]):
                    op = (ph, i)
                    pos[q] += 1
            if op is None and pending[q]:
                op = ("W", pending[q].popleft())
            if op is None:
                continue
            out[q].append(op)
            free[q] = end[(op[0], q, op[1])] = now + dur[op[0]]
            held[q] += {"F": m_b, "B": m_w - m_b, "W": -m_w}[op[0]]
            if op[0] == "B":
                pending[q].append(op[1])
        now += 1
    return out, max(end.values(), default=0)


def _fb_orders(kind: str, p: int, m: int) -> list[list[tuple[str, int]]]:
    """GPipe's or 1F1B's F/B orders (B first after 1F1B's p - r warm-up forwards)."""
    if kind == "gpipe":
        return [[("F", i) for i in range(m)] + [("B", i) for i in range(m)] for _ in range(p)]
    orders = []
    for r in range(p):
        w = min(p - r, m)
        order = [("F", i) for i in range(w)]
        for i in range(m):
            order.append(("B", i))
            if i + w < m:
                order.append(("F", i + w))
        orders.append(order)
    return orders


def _fb_only(rng, p: int, m: int) -> list[list[tuple[str, int]]]:
    """Random valid F/B orders of p stages on p IPUs (:func:`random_orders` without W)."""
    return [[(ph, i) for ph, _, i in o if ph != "W"]
            for o in random_orders(rng, list(range(p)), m)]


def _place_cases(rng) -> list[dict]:
    """1F1B with room for every W to wait and with room for one; GPipe with uneven times;
    a stage that drains and fills again; fixed random orders on which a greedy that runs
    an F before its input has arrived, or idles a slot after each op, loses; random valid
    F/B orders with random times, sizes and caps (each at least what the orders need when
    every W follows its B)."""
    refill = [[("F", 0), ("B", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 1), ("B", 2), ("B", 3)],
              [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)]]
    found = [(_fb_orders("1f1b", 4, 8), (1, 1, 1), 4, 2, None),
             (_fb_orders("1f1b", 4, 8), (1, 1, 1), 4, 2, [2]),
             (_fb_orders("1f1b", 3, 6), (2, 2, 1), 6, 5, [0, 5, 0]),
             (_fb_orders("gpipe", 3, 4), (2, 3, 1), 10, 4, [4]),
             (refill, (1, 2, 1), 3, 1, [0]), (_fb_orders("1f1b", 2, 1), (1, 1, 1), 2, 1, [9]),
             (_fb_orders("1f1b", 3, 5), (3, 3, 1), 3, 3, [2, 0, 0]),
             (_fb_only(np.random.default_rng(2), 4, 7), (2, 3, 1), 5, 4, [0, 0, 0, 1]),
             (_fb_only(np.random.default_rng(8), 4, 7), (1, 2, 3), 3, 2, [2, 1, 1, 2]),
             (_fb_only(np.random.default_rng(5), 2, 5), (3, 1, 3), 3, 1, [2, 1])]
    for _ in range(3):
        p, m = int(rng.integers(2, 5)), int(rng.integers(2, 7))
        orders = _fb_only(rng, p, m)
        m_b = int(rng.integers(2, 9))
        found.append((orders, tuple(int(x) for x in rng.integers(1, 4, 3)), m_b,
                      int(rng.integers(1, m_b + 1)), [int(x) for x in rng.integers(0, 4, p)]))
    cases = []
    for orders, t, m_b, m_w, room in found:
        # room: spare pending W ops over the least each IPU needs (None: as many as it likes)
        least = [in_flight_peak(o, m_b, m_w) for o in _immediate(orders)]
        spare = room if room is not None else [len(o) for o in orders]
        caps = [need + m_w * spare[q % len(spare)] for q, need in enumerate(least)]
        cases.append({"orders": [[list(op) for op in o] for o in orders], "t": list(t),
                      "m_b": m_b, "m_w": m_w, "caps": caps,
                      "_span": greedy_w(orders, t, m_b, m_w, caps)[1]})
    return cases


def _immediate(orders):
    """The orders with every W right after its B (the least memory)."""
    return [[x for op in o for x in ([op, ("W", op[1])] if op[0] == "B" else [op])]
            for o in orders]


def _place_what(case) -> str:
    orders = [[tuple(op) for op in o] for o in case["orders"]]
    return (f"place_w(orders, t_F, t_B, t_W = {tuple(case['t'])}, m_b={case['m_b']}, "
            f"m_w={case['m_w']}, caps={list(case['caps'])}) for the F and B orders\n"
            f"{_table(orders)}\n")


def _place_trial(case, place_w):
    """The learner's orders with W on one case (the kernel)."""
    orders = [[(str(ph), int(i)) for ph, i in o] for o in case["orders"]]
    t_f, t_b, t_w = case["t"]
    got = place_w([list(o) for o in orders], t_f, t_b, t_w, case["m_b"], case["m_w"],
                  list(case["caps"]))
    return [[list(op) for op in o] for o in _read(got, len(orders), 2, _place_what(case))]


@exercise("13.3", "W ops into idle slots under a memory cap", points=3,
          hints=(
              'Time moves in whole slots; each slot, ask every idle IPU what it can run.',
              'Simulate slot by slot: a free IPU runs its next F or B when its inputs are done '
              '(and an F fits under the cap), otherwise it fills the slot with a pending W; a '
              'W becomes pending when its B runs. Track each IPU\'s memory as ops start.',
              'At each whole time t, for each IPU free at t: if its next F/B has its inputs '
              'ended by t and (for an F) held + m_b <= cap, run it (held += m_b for F, += m_w '
              '- m_b for B, and queue W of a B); elif a W is queued, run the oldest (held -= '
              'm_w); else wait. Then t += 1, until every op ran.',),
          answers=("place_w",), cases=_place_cases, trial=_place_trial)
def check_place_w(cases, outputs):
    """Exercise 13.3: ``place_w(orders, t_F, t_B, t_W, m_b, m_w, caps)`` → each IPU's
    order with its W ops placed: the F and B order unchanged, every IPU within its cap,
    finishing no later than the greedy that fills idle slots with W ops."""
    for case, got in zip(cases, outputs):
        given = [[(str(ph), int(i)) for ph, i in o] for o in case["orders"]]
        t, m_b, m_w, caps = tuple(case["t"]), case["m_b"], case["m_w"], list(case["caps"])
        m = max(i for o in given for _, i in o) + 1
        what = _place_what(case)
        mine = [[(str(ph), int(i)) for ph, i in o] for o in got]
        for q, (o, g) in enumerate(zip(mine, given)):
            fb = [op for op in o if op[0] != "W"]
            if fb != g:
                i = next((j for j, (a, b) in enumerate(zip(fb, g)) if a != b),
                         min(len(fb), len(g)))
                yours = _name(fb[i]) if i < len(fb) else "nothing"
                raise Wrong(f"{what}IPU {q}'s F and B ops must keep their order: its "
                            f"F/B op {i} is {yours}, the given order has "
                            f"{_name(g[i]) if i < len(g) else 'nothing'}; add W ops only")
        _check_ops(mine, m, "place_w", {"F", "B", "W"})
        start, end, _ = reference_run(staged(mine), *t)
        greedy, _ = greedy_w(given, t, m_b, m_w, caps)
        _, ref_end, _ = reference_run(staged(greedy), *t)
        axis = max(list(end.values()) + list(ref_end.values()) + [1.0])
        pictures = side_by_side(_picture(staged(mine), t, axis),
                                _picture(staged(greedy), t, axis),
                                ("yours", "W ops in idle slots (the greedy)"))
        for q, o in enumerate(mine):
            peak = in_flight_peak(o, m_b, m_w)
            if peak > caps[q]:
                raise Wrong(f"{what}IPU {q} holds {peak:,} bytes at once (F +{m_b}, B "
                            f"-{m_b - m_w}, W -{m_w}), over its cap of {caps[q]:,}: a W that "
                            "waits keeps its bytes", picture=pictures)
        span = max(end.values())
        if span > case["_span"] + 1e-9:
            msg = (f"{what}your orders take {span:g} time units, W ops put into idle slots "
                   f"{case['_span']:g}")
            if mine == _immediate(given):
                msg += (". Every W runs right after its B, so an IPU waiting for an input "
                        "has nothing to do: run a pending W there instead")
            elif all(o[-m:] == [op for op in o if op[0] == "W"] for o in mine):
                msg += ". All your W ops run at the end, after the IPU's last B"
            raise Wrong(msg, picture=pictures)


# -- 13.4 ---------------------------------------------------------------------------------


def stage_ipus(num_stages: int, concurrent_stage: int, shards: int) -> list[list[int]]:
    """The IPUs (within a replica) of each stage: one each, in order, and ``shards``
    consecutive ones for the concurrent stage."""
    out, q = [], 0
    for k in range(num_stages):
        n = shards if k == concurrent_stage else 1
        out.append(list(range(q, q + n)))
        q += n
    return out


def plan_reference(config) -> dict:
    """What 13.4 asks, worked out here: ``{"ipus": n, "links": {(src, dst): (bytes,
    [what crosses])}, "memory": [bytes per IPU]}`` of a replicated pipeline with one
    concurrent stage, for one weight update (1F1B, so stage k holds N - k micro-batches)."""
    c = config
    reps, weights, k_c, shards = c["replicas"], c["stage_weights"], c["concurrent_stage"], \
        c["shards"]
    act, stash, m, slots = c["act_bytes"], c["stash_bytes"], c["micro_batches"], \
        c["optimizer_slots"]
    n = len(weights)
    where = stage_ipus(n, k_c, shards)
    per = where[-1][-1] + 1
    links: dict = {}

    def send(src, dst, nbytes, text):
        old, texts = links.get((src, dst), (0, []))
        links[(src, dst)] = (old + nbytes, texts + [text])

    own = [0] * per
    memory = [0] * per
    for k, ipus in enumerate(where):
        for q in ipus:
            own[q] = weights[k] // len(ipus)
            memory[q] = own[q] * (2 + slots) + min(n - k, m) * stash[k]
    for r in range(reps):
        base = r * per
        for k in range(n - 1):
            src, dst = where[k], where[k + 1]
            if len(src) > 1:  # the members' output shards go to the next stage and back
                for q in src:
                    part = m * act[k] // len(src)
                    send(base + q, base + dst[0], part, f"stage {k}'s output shard")
                    send(base + dst[0], base + q, part, f"the gradient of stage {k}'s "
                         "output shard")
                continue
            send(base + src[0], base + dst[0], m * act[k], f"stage {k}'s output")
            send(base + dst[0], base + src[0], m * act[k], f"the gradient of stage {k}'s "
                 "output")
            for q in dst[1:]:  # a concurrent stage: broadcast in, reduce back
                send(base + dst[0], base + q, m * act[k], f"stage {k + 1}'s input, broadcast")
                send(base + q, base + dst[0], m * act[k], f"stage {k + 1}'s input gradient, "
                     "reduced")
        if reps > 1:
            for q in range(per):
                send(base + q, (r + 1) % reps * per + q,
                     cost.ring_bytes("allreduce", own[q], reps),
                     "the gradients' ring all-reduce across replicas")
    return {"ipus": reps * per, "links": links, "memory": memory * reps}


def _plan_cases(rng) -> list[dict]:
    """One replica (no all-reduce), two (each IPU sends to the other), three (a ring whose
    bytes do not divide evenly), the concurrent stage in the middle and next to the last,
    every optimizer (0, 1 and 2 slots) and random configurations."""
    found = [(1, [1000, 4000, 2000], 1, 2, [64, 32], [100, 40, 80], 4, 0),
             (2, [1000, 4000, 2000], 1, 2, [64, 32], [100, 40, 80], 4, 1),
             (3, [6000, 9000, 3001, 500], 2, 3, [96, 48, 24], [50, 60, 30, 10], 6, 2),
             (2, [800, 1200, 4800, 300, 100], 2, 4, [40, 40, 80, 20], [8, 8, 4, 4, 2], 5, 1)]
    for _ in range(3):
        n = int(rng.integers(3, 6))
        shards = int(rng.integers(2, 5))
        k_c = int(rng.integers(1, n - 1))
        weights = [int(x) * shards for x in rng.integers(10, 500, n)]
        act = [int(x) * shards for x in rng.integers(1, 40, n - 1)]
        found.append((int(rng.integers(1, 5)), weights, k_c, shards, act,
                      [int(x) for x in rng.integers(1, 200, n)], int(rng.integers(n, 2 * n + 1)),
                      int(rng.integers(0, 3))))
    keys = ("replicas", "stage_weights", "concurrent_stage", "shards", "act_bytes",
            "stash_bytes", "micro_batches", "optimizer_slots")
    return [dict(zip(keys, values)) for values in found]


def _plan_what(case) -> str:
    return f"plan_3d({ {k: case[k] for k in sorted(case)} })"


def _plan_trial(case, plan_3d):
    """The learner's plan on one case (the kernel), links as ``[src, dst, bytes]``."""
    got = plan_3d(dict(case))
    what = _plan_what(case)
    try:
        links = [[int(s), int(d), int(b)] for (s, d), b in dict(got["links"]).items()]
        found = {"ipus": int(got["ipus"]), "links": sorted(x for x in links if x[2]),
                 "memory": [int(x) for x in got["memory"]]}
    except (TypeError, ValueError, KeyError):
        raise Wrong(f"{what}: return {{'ipus': n, 'links': {{(src, dst): bytes, ...}}, "
                    f"'memory': [bytes per IPU]}}, got {str(got)[:120]}") from None
    return found


@exercise("13.4", "replicas x pipeline x a concurrent stage", points=3,
          hints=(
              'Draw one replica: which IPU holds which stage, and what crosses each arrow, '
              'forward and backward.',
              'A replica uses one IPU per stage and S for the concurrent stage, and replica r '
              "the next block of IPUs. Per weight update each boundary carries m activations "
              'forward and m gradients back; the concurrent stage broadcasts its input from its '
              'first IPU and reduces the gradients back to it, and its members send their '
              'output shards; every IPU all-reduces its gradients with the same IPU of the '
              'other replicas in a ring.',
              'IPUs = R x (N - 1 + S). Link a->b: m x act bytes for each output or gradient '
              '(act/S for a member\'s shard), m x act for each broadcast copy and each reduced '
              'partial; ring: IPU q of replica r sends cost.ring_bytes("allreduce", w_q, R) to '
              'IPU q of replica (r + 1) % R. Memory: w_q x (2 + slots) + (N - k) x '
              'stash_bytes[k] on an IPU of stage k.',),
          answers=("plan_3d",), cases=_plan_cases, trial=_plan_trial)
def check_plan_3d(cases, outputs):
    """Exercise 13.4: ``plan_3d(config)`` → ``{"ipus", "links", "memory"}`` of a pipeline
    with one concurrent stage, replicated: the IPUs it takes, the bytes each IPU sends to
    each other IPU per weight update, and each IPU's peak memory."""
    for case, got in zip(cases, outputs):
        want = plan_reference(case)
        what = _plan_what(case)
        if got["ipus"] != want["ipus"]:
            raise Wrong(f"{what}: it takes {want['ipus']} IPUs, you said {got['ipus']}"
                        + _ipus_diagnosis(case, got["ipus"]))
        mine = {(s, d): b for s, d, b in got["links"]}
        for (s, d), (nbytes, texts) in sorted(want["links"].items()):
            if mine.get((s, d), 0) != nbytes:
                raise Wrong(f"{what}: IPU {s} sends IPU {d} {nbytes:,} bytes per weight "
                            f"update ({'; '.join(texts)}), you said {mine.get((s, d), 0):,}")
        extra = sorted(set(mine) - set(want["links"]))
        if extra:
            s, d = extra[0]
            raise Wrong(f"{what}: nothing goes from IPU {s} to IPU {d}, you said "
                        f"{mine[(s, d)]:,} bytes")
        if len(got["memory"]) != want["ipus"]:
            raise Wrong(f"{what}: give the memory of every IPU ({want['ipus']}), you gave "
                        f"{len(got['memory'])}")
        for q, (a, b) in enumerate(zip(got["memory"], want["memory"])):
            if a != b:
                raise Wrong(f"{what}: IPU {q} needs {b:,} bytes at its peak (weights, their "
                            f"gradient accumulator, optimizer state, stash), you said {a:,}"
                            f" (all IPUs: expected {want['memory']}, got {got['memory']})")


def _ipus_diagnosis(case, got) -> str:
    n, reps, shards = len(case["stage_weights"]), case["replicas"], case["shards"]
    if got == reps * (n + shards):
        return (". The concurrent stage's S IPUs replace its one IPU: N - 1 + S per replica")
    if got == n - 1 + shards:
        return ". That is one replica; each replica has its own IPUs"
    return ""
