"""Lesson 05's deep dive: tut6's cost estimate against the emulator's profile.

Builds tut6's matrix-vector graph (:func:`ipukit.tutorials.tut6.build`) for several
column splits, compiles it, and compares each compute set's measured cycles with
Graphcore's integer estimate (``estimateCycles`` in ``tut6.cpp``), part by part. The
lesson calls :func:`study`, :func:`plot` and :func:`check` instead of carrying the code.
It also builds lesson 05's profiled program, the tiny classifier (:func:`classifier`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import ipukit as ipu
from ipukit.poplibs import multislice, poplin, popnn, poputil
from ipukit.tensor import unique
from ipukit.tutorials import tut5, tut6

TRIED = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32)


def classifier(tiles=16, version="ipu2", w_on_one_tile=False):
    """Lesson 05's profiled program: an embedding lookup (``multislice.multi_slice``), then
    ``x @ W`` (``poplin.mat_mul``), softmax (``popnn.non_linearity``) and cross-entropy
    (``popnn.calc_loss``) on ``tiles`` tiles, run once on random data (seed 5). W is mapped
    linearly, or all on tile 0 (``w_on_one_tile``, the bad mapping the lesson compares).
    Returns the loaded, run Engine and the host values written (table, W, ids, labels)."""
    dev = ipu.IPUModel(version, tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
    table = multislice.create_sliceable_tensor(g, ipu.FLOAT, [50, 64], [0], [1], "table")
    w = g.add_variable(ipu.FLOAT, [64, 10], "W")
    if w_on_one_tile:
        g.set_tile_mapping(w, 0)
    else:
        poputil.map_tensor_linearly(g, w)
    ids = g.add_variable(ipu.UNSIGNED_INT, [8, 1], "ids")
    labels = g.add_variable(ipu.UNSIGNED_INT, [8], "labels")
    loss, num_correct = (g.add_variable(t, s, n) for t, s, n in [
        (ipu.FLOAT, [8], "loss"), (ipu.UNSIGNED_INT, [1], "numCorrect")])
    for t in (ids, labels, loss, num_correct):
        g.set_tile_mapping(t, 0)
    for name, t in [("table", table), ("W", w), ("ids", ids), ("labels", labels)]:
        g.create_host_write(name, t)
    prog = ipu.Sequence()
    x = multislice.multi_slice(g, table, ids, [0], [1], prog, "lookup").reshape([8, 64])
    logits = poplin.mat_mul(g, x, w, prog, "logits")
    probs = popnn.non_linearity(g, popnn.NonLinearityType.SOFTMAX, logits, prog)
    delta = g.add_variable(ipu.FLOAT, [8, 10], "delta")
    poputil.map_tensor_linearly(g, delta)
    prog.add(popnn.calc_loss(g, probs, labels, loss, delta, num_correct))
    g.create_host_read("loss", loss)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    rng = np.random.default_rng(5)
    host = {"table": rng.normal(size=(50, 64)), "W": rng.normal(size=(64, 10)) / 8,
            "ids": rng.integers(0, 50, (8, 1)), "labels": rng.integers(0, 10, 8)}
    for name, value in host.items():
        eng.write_tensor(name, value)
    eng.run()
    return eng, host


@dataclass
class Study:
    """Measured and estimated cycles of tut6 ``rows`` x ``cols`` for each split tried."""

    target: object
    rows: int
    cols: int
    tried: tuple
    steps: dict  # split -> (mulCS Step, reduceCS Step)
    widest: dict  # split -> the most vector elements one tile's vertices read
    estimate: dict  # split -> tut6.estimate_parts
    total: np.ndarray
    syncs: np.ndarray
    est_total: np.ndarray

    @property
    def best(self) -> int:
        """The split the measurement prefers."""
        return self.tried[int(np.argmin(self.total))]


def profile(rows: int, cols: int, split: int):
    """tut6's compute steps for ``split``, and the widest vector read of one tile."""
    _, g, prog = tut6.build(rows, cols, split=split)
    steps = [s for s in ipu.compile_graph(g, [prog]).steps if s.kind == "compute"]
    # the vertices of one column piece share one slice of the vector: each tile's slices
    # once, then the addresses they cover
    pieces = {(tile, conn["b"]) for tile, cls, conn in zip(g.v_tile, g.v_cls, g.v_conn)
              if cls is tut5.DotProductVertex}
    read = {}
    for tile, b in pieces:
        read.setdefault(tile, []).append(b.idx.reshape(-1))
    return steps, max(unique(np.concatenate(a)).size for a in read.values())


def study(target, rows: int, cols: int, tried=TRIED) -> Study:
    """Profile every split in ``tried`` and estimate it with tut6's cost function."""
    steps, widest = {}, {}
    for k in tried:
        steps[k], widest[k] = profile(rows, cols, k)
    estimate = {k: tut6.estimate_parts(target, rows, cols, k) for k in tried}
    total = np.array([sum(s.cycles for s in steps[k]) for k in tried])
    syncs = np.array([sum(s.sync_cycles for s in steps[k]) for k in tried])
    est_total = np.array([sum(estimate[k].values()) for k in tried])
    return Study(target, rows, cols, tuple(tried), steps, widest, estimate, total, syncs,
                 est_total)


def plot(st: Study, splits, cost, best: int):
    """Left: the whole estimate curve and the measured totals; right: mulCS's exchange,
    estimated vs measured, splits that divide the tiles in green. Returns the figure."""
    import matplotlib.pyplot as plt

    tiles = st.target.num_tiles
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4), width_ratios=[3, 2])
    ax1.plot(splits, cost, "k.-", lw=1, ms=3, label="Graphcore's estimate")
    ax1.plot(st.tried, st.total, "s-", color="tab:red", label="measured total")
    ax1.plot(st.tried, st.total - st.syncs, "o", mfc="none", color="tab:red",
             label="measured minus its 2 syncs")
    ax1.axvline(best, color="tab:green", ls="--", label=f"best split of both: {best}")
    ax1.set(xscale="log", xlim=(0.9, 40), ylim=(0, 1.2 * st.total.max()),
            xlabel="colsAxisSplit", ylabel="cycles",
            title=f"tut6 {st.rows}x{st.cols} on Mk2: estimate vs the emulator's profile")
    ax1.set_xticks(st.tried, [str(k) for k in st.tried])
    ax1.minorticks_off()
    ax1.legend(fontsize=8, loc="lower left")
    x = np.arange(len(st.tried))
    ax2.bar(x - 0.2, [st.estimate[k]["exchange"] for k in st.tried], 0.4, color="0.6",
            label="estimate: one slice of the vector")
    ax2.bar(x + 0.2, [st.steps[k][0].exchange_cycles for k in st.tried], 0.4,
            color="tab:orange", label="measured (busiest tile)")
    ax2.set_xticks(x, [str(k) for k in st.tried])
    for label, k in zip(ax2.get_xticklabels(), st.tried):
        label.set_color("tab:green" if tiles % k == 0 else "black")
    ax2.set(xlabel=f"colsAxisSplit (green: divides the {tiles} tiles)", ylabel="cycles",
            title="mulCS exchange")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def table(st: Study) -> str:
    """Estimate and measurement per split, phase by phase."""
    lines = ["split  estimate  measured (syncs)   mulCS exch/comp   reduceCS exch/comp   "
             "widest read"]
    for k, e, t, s in zip(st.tried, st.est_total, st.total, st.syncs):
        mul, red = st.steps[k]
        lines.append(f"{k:5}  {e:8}  {t:8} ({s})   {mul.exchange_cycles:9}/"
                     f"{mul.compute_cycles:<5}   {red.exchange_cycles:12}/"
                     f"{red.compute_cycles:<5}   {st.widest[k]:11}")
    return "\n".join(lines)


def check(st: Study, best: int) -> None:
    """The lesson's claims, rule by rule (AssertionError if one does not hold)."""
    assert st.best == best  # the profile agrees with Graphcore's choice
    assert (st.total >= st.est_total).all()
    i6, i7, i8 = (st.tried.index(k) for k in (6, 7, best))  # the measurement widens it
    assert min(st.total[i6], st.total[i7]) - st.total[i8] > \
        min(st.est_total[i6], st.est_total[i7]) - st.est_total[i8]
    tiles = st.target.num_tiles
    for k in st.tried:
        mul, red = st.steps[k]
        e = st.estimate[k]
        assert mul.sync_cycles == red.sync_cycles == st.target.sync_cycles
        assert (mul.compute_cycles, red.compute_cycles) == (e["compute"], e["reduce_compute"])
        assert red.exchange_cycles == (e["reduce_exchange"] if k > 1 else 0)
        # the busiest tile receives what its vertices read, less the element it may hold
        assert st.widest[k] - 1 <= mul.exchange_cycles <= st.widest[k]
        assert (mul.exchange_cycles > e["exchange"]) == (tiles % k != 0)
