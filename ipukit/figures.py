"""Figures of the lessons that would otherwise fill a lesson cell with drawing code.

Each function draws one figure of a lesson with matplotlib and returns what a lesson
cell wants to check next to it.

>>> import matplotlib
>>> matplotlib.use("Agg")
>>> ax = replication_diagram(replicas=2, stages=2)
>>> ax.get_title()
'replication_factor=2 of a model on 2 IPUs: 4 IPUs'
"""

from __future__ import annotations

from .report import _ax, _plt, figure_text

#: The parts of a MemoryRecord drawn as stacked bars, with their colours.
MEMORY_PARTS = (("weights", "tab:blue"), ("gradients", "tab:cyan"), ("stash", "tab:orange"),
                ("optimizer", "tab:green"))


def replication_diagram(replicas: int = 4, stages: int = 2, ax=None):
    """Lesson 10: ``replicas`` copies of a ``stages``-IPU pipeline, each fed its own
    micro-batches, and the ring all-reduce of each stage's gradients. Returns the axes."""
    plt = _plt()
    ax = _ax(ax, (11, 3.8))
    box_w, box_h, step = 1.7, 0.6, 2.6
    rows_y = [1.2 - 1.15 * s for s in range(stages)]  # bottom of each stage's boxes
    for r in range(replicas):
        x0 = 0.4 + step * r
        ax.add_patch(plt.Rectangle((x0 - 0.25, -0.45), box_w + 0.5, 2.5, fill=False, ls="--",
                                   ec="0.5"))
        ax.text(x0 + box_w / 2, -0.7, f"replica {r}", ha="center", fontsize=10)
        ax.text(x0 + box_w / 2, 2.45, f"micro-batches of replica {r}", ha="center",
                fontsize=8.5, color="tab:blue")
        ax.annotate("", (x0 + box_w / 2, 1.8), (x0 + box_w / 2, 2.4),
                    arrowprops=dict(arrowstyle="->", color="tab:blue"))
        for s, y in enumerate(rows_y):
            ax.add_patch(plt.Rectangle((x0, y), box_w, box_h,
                                       fc=["#cfe2f3", "#fde9d9"][s % 2], ec="k"))
            ax.text(x0 + box_w / 2, y + box_h / 2, f"IPU {r * stages + s}\nstage {s}",
                    ha="center", va="center", fontsize=9)
    for y in rows_y:  # the ring of one stage's IPUs: r -> r + 1, and the last back to 0
        mid = y + box_h / 2
        for r in range(replicas - 1):
            ax.annotate("", (0.4 + step * (r + 1), mid), (0.4 + step * r + box_w, mid),
                        arrowprops=dict(arrowstyle="->", color="tab:red", lw=1.6))
        lane, right, left = y - 0.15, 0.4 + step * (replicas - 1) + box_w, 0.4
        ax.plot([right, right + 0.12, right + 0.12, left - 0.12, left - 0.12],
                [mid, mid, lane, lane, mid], color="tab:red", lw=1.2, ls=":")
        ax.annotate("", (left, mid), (left - 0.12, mid),
                    arrowprops=dict(arrowstyle="->", color="tab:red", lw=1.2))
    right_edge = 0.4 + step * replicas
    ax.text(right_edge - 0.3, 0.75, "ring all-reduce\nof each stage's\ngradients over\n"
            "IPU-Links", color="tab:red", fontsize=9, va="center")
    ax.set(xlim=(0, right_edge + 1.8), ylim=(-0.9, 2.75),
           title=f"replication_factor={replicas} of a model on {stages} IPUs: "
                 f"{replicas * stages} IPUs")
    ax.axis("off")
    return ax


def memory_bars(peaks: dict, ax=None, predicted: dict | None = None, hatched=()):
    """Stacked bars of peak ``MemoryRecord``s: ``peaks[label] = record`` (weights,
    gradients, stash, optimiser state, in KiB); ``predicted[label]`` bytes as a dashed
    line over the bar; the bars of the labels in ``hatched`` hatched. Returns the axes."""
    ax = _ax(ax, (10, 3.6))
    for x, (label, rec) in enumerate(peaks.items()):
        bottom = 0.0
        for part, colour in MEMORY_PARTS:
            v = getattr(rec, part) / 2**10
            ax.bar(x, v, bottom=bottom, color=colour, hatch="//" if label in hatched else None,
                   label=part if x == 0 else None)
            bottom += v
        if predicted and label in predicted:
            ax.plot([x - 0.4, x + 0.4], [predicted[label] / 2**10] * 2, "k--", lw=1)
    ax.set_xticks(range(len(peaks)), [figure_text(k, 40) for k in peaks], fontsize=8.5)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def allreduce_panels(rows, shares: dict, gradient_bytes: int):
    """Lesson 10's two all-reduce panels: left, the bytes one replica sends per all-reduce
    (``rows`` of (R, bytes sent, ...)) over ``gradient_bytes`` against the ring's
    2(R-1)/R; right, the % of a call's cycles spent all-reducing for each gradient
    accumulation count (``shares[G]``, a fraction). Returns the two axes."""
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.2))
    rs = [r for r, *_ in rows]
    ax1.plot(rs, [2 * (r - 1) / r for r in rs], "k--", lw=1, label="2(R-1)/R")
    ax1.plot(rs, [b / gradient_bytes for _, b, *_ in rows], "o", color="tab:red",
             label="measured (bytes ÷ gradient bytes)")
    ax1.set(xscale="log", xlabel="replicas R", ylabel="sent per replica ÷ gradient",
            title="ring all-reduce traffic per replica")
    ax1.set_xticks(rs, [str(r) for r in rs])
    ax1.legend(fontsize=8)
    ax2.bar([str(g) for g in shares], [100 * v for v in shares.values()], color="tab:red")
    ax2.set(xlabel="gradient accumulation G (same samples per call)",
            ylabel="% of cycles in all-reduce", title="4 replicas: rarer all-reduces")
    fig.tight_layout()
    return ax1, ax2


def optimizer_state_saving(stages, without, with_rts, replicas: int) -> list[dict]:
    """Lesson 10's RTS accounting, per IPU of the first replica (stage ``q`` on IPU ``q``):
    Adam's two float32 moments per weight, in full (``full``) and as ``replicas`` shards
    of ``ceil(size / R)`` elements (``shard``), next to what the runs measured (the peak
    optimiser state ``before``/``after`` and the fall of the peak memory, ``saved``)."""
    import math  # noqa: PLC0415

    out = []
    for q, st in enumerate(stages):
        sizes = [v.size for v in st.params.values()]
        out.append({"full": 2 * 4 * sum(sizes),
                    "shard": 2 * 4 * sum(math.ceil(n / replicas) for n in sizes),
                    "before": max(m.optimizer for m in without.memory if m.ipu == q),
                    "after": max(m.optimizer for m in with_rts.memory if m.ipu == q),
                    "saved": without.peak_memory()[q] - with_rts.peak_memory()[q]})
    return out


def accumulator_drift(trace16, trace32, step: float = 0.01, ax=None):
    """Lesson 10: running sums of ``step`` in a float16 and a float32 accumulator against
    the exact sum. Returns the axes."""
    import numpy as np  # noqa: PLC0415

    ax = _ax(ax, (7, 2.8))
    ax.plot(np.arange(1, len(trace16) + 1) * step, "k--", lw=1, label="exact", zorder=3)
    ax.plot(trace32, color="tab:blue", label="float32 accumulator")
    ax.plot(trace16, color="tab:red", label="float16 accumulator")
    ax.set(xlabel="micro-batches accumulated", ylabel=f"sum of gradients of {step}",
           title="float16 accumulators drift, then stop growing")
    ax.legend(fontsize=8)
    return ax
