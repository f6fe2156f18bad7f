"""The ``check_*`` functions of lesson 08: pipelining schedules.

The references are :func:`ipukit.parallel.schedule` itself (its ops, its timing, the
counts it accepts), whose golden cases are tested against Graphcore's and the papers'
published numbers in ``tests/test_schedule.py``.

>>> from ipukit.grading import lesson08
>>> r = lesson08.check_gpipe_bubble(lambda p, m, t_F, t_B: {"total": 0, "ideal": 0})
... # doctest: +ELLIPSIS
WRONG · Exercise 08.1 · the bubble of GPipe: 0/2 points
   ...
"""

from __future__ import annotations

from ipukit.errors import PipelineConfigError
from ipukit.parallel import schedule

from .feedback import Wrong, as_int, exercise, run

# -- 08.1 ---------------------------------------------------------------------------------


@exercise("08.1", "the bubble of GPipe", points=2,
          hint="Every IPU is busy m*(t_F + t_B) (the ideal time). The makespan is "
               "(m + p - 1)*(t_F + t_B): the ramp-up and ramp-down add p - 1 slots of each. "
               "bubble = makespan - ideal; 'total' divides it by the makespan, 'ideal' by "
               "the ideal time.")
def check_gpipe_bubble(gpipe_bubble):
    """Exercise 08.1: ``gpipe_bubble(p, m, t_F, t_B)`` → ``{"total": …, "ideal": …}``."""

    def body():
        for p, m, t_f, t_b in [(4, 8, 1, 2), (2, 4, 1, 2), (8, 32, 1, 2), (4, 4, 1, 1),
                               (3, 7, 2.5, 4), (6, 1, 1, 3)]:
            want = schedule("gpipe", p, m).bubble(t_f, t_b)
            what = f"GPipe with p={p} stages, m={m} micro-batches, t_F={t_f}, t_B={t_b}"
            got = gpipe_bubble(p, m, t_f, t_b)
            if not isinstance(got, dict) or not {"total", "ideal"} <= set(got):
                raise Wrong(f"{what}: return a dict with keys 'total' and 'ideal', got {got!r}")
            for key in ("total", "ideal"):
                value = float(got[key])
                if abs(value - want[key]) > 1e-9:
                    other = "ideal" if key == "total" else "total"
                    raise Wrong(f"{what}: bubble ÷ {key} time should be {want[key]:.6g}, you "
                                f"said {value:.6g}" + (
                                    f"; that is bubble ÷ {other} time" if
                                    abs(value - want[other]) < 1e-9 else ""))

    return run("08.1", body)


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
          hint="In TensorFlow's Grouped schedule stage k (on IPU k) runs F on micro-batch m "
               "at step m + k and B on micro-batch m at step m + 2N - 1 - k, for every m in "
               "range(g) and k in range(N).")
def check_grouped_ops(grouped_ops):
    """Exercise 08.2: ``grouped_ops(num_stages, gradient_accumulation)`` → the ops of
    TensorFlow-for-IPU's ``PipelineSchedule.Grouped`` as (step, ipu, phase, microbatch)."""

    def body():
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

    return run("08.2", body)


# -- 08.3 ---------------------------------------------------------------------------------


def _accepted(kind, n, count) -> bool:
    try:
        schedule(kind, n, count)
    except PipelineConfigError:
        return False
    return True


@exercise("08.3", "a gradient accumulation count the schedule accepts", points=2,
          hint="Grouped (training): a multiple of 2N; Interleaved: a multiple of N; "
               "Sequential: any count >= 1; PopTorch (PopART): at least 2N - 1, the number "
               "of pipeline stages once the last forward and first backward are fused.")
def check_smallest_count(smallest_valid_count):
    """Exercise 08.3: ``smallest_valid_count(kind, num_stages, at_least)`` → the smallest
    gradient accumulation count >= ``at_least`` that ``schedule(kind, ...)`` accepts."""

    def body():
        cases = [("grouped", 4, 20), ("grouped", 3, 18), ("interleaved", 4, 10),
                 ("interleaved", 5, 1), ("sequential", 4, 3), ("poptorch", 4, 2),
                 ("poptorch", 3, 11), ("grouped", 2, 1)]
        for kind, n, at_least in cases:
            what = f"smallest_valid_count({kind!r}, {n}, at_least={at_least})"
            got = as_int(smallest_valid_count(kind, n, at_least), what)
            if got < at_least:
                raise Wrong(f"{what}: you said {got}, which is below {at_least}")
            if not _accepted(kind, n, got):
                try:
                    schedule(kind, n, got)
                except PipelineConfigError as exc:
                    raise Wrong(f"{what}: you said {got}, but schedule({kind!r}, {n}, {got}) "
                                f"raises PipelineConfigError: {exc}") from None
            smaller = next((c for c in range(at_least, got) if _accepted(kind, n, c)), None)
            if smaller is not None:
                raise Wrong(f"{what}: you said {got}, but {smaller} is accepted too and "
                            "is smaller")

    return run("08.3", body)
