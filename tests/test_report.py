"""PopVision-style figures: drawn from a Trace, saved as PNG (copies in /tmp/ipukit_png)."""

import contextlib
import io
import shutil
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

import ipukit as ipu  # noqa: E402
from ipukit import report  # noqa: E402
from ipukit.tutorials import tut6  # noqa: E402

COPIES = Path("/tmp/ipukit_png")


def run_tut6(rows, cols, version="ipu2"):
    with contextlib.redirect_stdout(io.StringIO()):
        device, graph, prog = tut6.build(rows, cols, version)
    engine = ipu.Engine(graph, prog)
    engine.load(device)
    engine.connect_stream("inputVector", np.ones(cols, np.float32))
    engine.connect_stream("inputMatrix", np.ones(rows * cols, np.float32))
    engine.connect_stream("out", np.zeros(rows, np.float32))
    engine.run()
    return engine.trace


@pytest.fixture(scope="module")
def traces():
    return run_tut6(2000, 300), run_tut6(2000, 300, "ipu1")


def save(fig, tmp_path, name):
    path = tmp_path / f"{name}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    assert path.stat().st_size > 10_000  # a real picture, not an empty canvas
    with contextlib.suppress(OSError):
        COPIES.mkdir(exist_ok=True)
        shutil.copy(path, COPIES / path.name)
    return path


def test_tile_memory_map(traces, tmp_path):
    trace = traces[0]
    ax = report.tile_memory_map(trace)
    image = ax.images[0].get_array()
    assert image.shape == (32, 46)  # Mk2's 1472 tiles
    np.testing.assert_array_equal(image.compressed(), trace.memory.total)
    worst = int(np.argmax(trace.memory.total))
    assert f"on tile {worst}" in ax.get_title()
    save(ax.figure, tmp_path, "tile_memory_map")
    save(report.memory_map_figure(trace), tmp_path, "memory_map_categories")


def test_tile_memory_map_colours_span_emptiest_to_fullest(tmp_path):
    """Lesson 05's exchange-buffer map was one colour (1,536 B vs 1,664 B on a 0-based
    scale): the scale spans the emptiest to the fullest tile, and the ticks are whole tiles."""
    t = ipu.IPUModel(tiles_per_ipu=4).create_device().target
    g = ipu.Graph(t)
    v = g.add_variable(ipu.FLOAT, [4 * 384 + 32], "v")  # 1,536 B per tile, 128 B more on 3
    g.set_tile_mapping(v[:384], 0)
    g.set_tile_mapping(v[384:768], 1)
    g.set_tile_mapping(v[768:1152], 2)
    g.set_tile_mapping(v[1152:], 3)
    ax = report.tile_memory_map(ipu.compile_graph(g, []), category="variables")
    image = ax.images[0]
    assert image.get_clim() == (1536, 1664)
    colours = image.to_rgba(image.get_array().compressed())
    assert len({tuple(c) for c in colours.round(3)}) == 2  # tile 3 stands out
    assert not np.allclose(colours[0], colours[3], atol=0.2)
    ticks = [*ax.get_xticks(), *ax.get_yticks()]
    assert ticks and all(float(x).is_integer() for x in ticks)
    save(ax.figure, tmp_path, "tile_memory_map_two_levels")
    flat = report.tile_memory_map(ipu.compile_graph(g, []), category="constants")
    assert [x.get_text() for x in flat.texts] == ["every tile: 0 B"]
    plt.close(flat.figure)


def test_execution_trace_marks_slowest_tile(traces, tmp_path):
    trace = traces[0]
    ax = report.execution_trace(trace)
    steps = trace.executed_steps()
    # every step named, at a readable size, a long name cut with an ellipsis
    names = [s.name if len(s.name) <= 40 else s.name[:39] + "\u2026" for s in steps]
    assert [t.get_text() for t in ax.get_yticklabels()] == names
    assert {t.get_fontsize() for t in ax.get_yticklabels()} == {8.5}
    mul = next(s for s in steps if s.name == "mulCS")
    notes = [t.get_text() for t in ax.texts]
    assert f"slowest tile {int(np.argmax(mul.tile_compute_cycles))}" in notes
    right = max(p.get_x() + p.get_width() for p in ax.patches)
    assert right == trace.total_cycles  # bars end where the run ends
    save(ax.figure, tmp_path, "execution_trace")


def test_liveness_names_peak(traces, tmp_path):
    trace = traces[0]
    ax = report.liveness(trace)
    live = trace.memory.liveness
    mem = trace.memory.categories
    always = sum(int(mem[k].sum()) for k in trace.memory.always_live)
    total = always + live.live_bytes() + live.buffers
    peak = live.labels[int(np.argmax(total))]
    assert ax.texts[0].get_text().startswith(f"peak: {peak} ({int(total.max()):,} B")
    # every program point named in full (lesson 05 read "host sync (Engine.ru")
    labels = [x.get_text() for x in ax.get_xticklabels()]
    assert labels == [name if len(name) <= 32 else name[:31] + "\u2026" for name in live.labels]
    assert "StreamCopy inputMatrix -> matrix" in labels
    save(ax.figure, tmp_path, "liveness")


def test_liveness_shows_memory_reuse(tmp_path):
    """t1 (points 0-1) and t2 (2-3) on one tile: each bar holds one of them; without reuse
    both would be there (dashed line)."""
    from tests.test_liveness import N, two_temporaries

    dev, g, prog = two_temporaries("apart")
    eng = ipu.Engine(g, prog)
    ax = report.liveness(eng.trace, tile=0)
    always = 4 * N + 8 + 72 + 512
    heights = {}  # label -> heights of its bars
    for bars in ax.containers:
        heights[bars.get_label()] = [int(b.get_height()) for b in bars]
    assert heights["always live"] == [always] * 4
    assert heights["t1"] == [4 * N, 4 * N, 0, 0] and heights["t2"] == [0, 0, 4 * N, 4 * N]
    assert [int(b.get_y()) for b in ax.containers[2]] == [always + 4 * N] * 2 + [always] * 2
    assert f"reuse saves {4 * N:,} B" in ax.texts[0].get_text()
    line = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"][0]
    assert line.get_ydata()[0] == always + 8 * N
    save(ax.figure, tmp_path, "liveness_reuse")


def test_compute_set_table(traces, tmp_path):
    rows = report.compute_set_rows(traces[0])
    assert [r["name"] for r in rows] == ["mulCS", "reduceCS"]
    split = tut6.calc_optimal_col_axis_split(traces[0].target, 2000, 300)
    assert rows[0]["vertices"] == 2000 * split and rows[1]["vertices"] == 2000
    save(report.compute_set_table(traces[0]).figure, tmp_path, "compute_set_table")


def test_compare_two_runs(traces, tmp_path):
    a, b = traces
    fig = report.compare(a, b, ("Mk2", "Mk1"))
    cycles = {r["name"]: r["cycles"] for r in report.compute_set_rows(a)}
    cycles_b = {r["name"]: r["cycles"] for r in report.compute_set_rows(b)}
    worse = sum(cycles_b[n] > cycles[n] for n in cycles)
    assert fig.axes[1].get_title().endswith(f"/ {worse}")
    # every change bar is named and its value written (issue 16: no unlabelled bar)
    names = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert names == [n[:28] for n in cycles] and len(fig.axes[1].texts) == len(cycles)
    # the tile panel counts exchange too, so a remapping that only moves data shows
    busy = [sum(int(n) * (s.tile_compute_cycles[t] + s.tile_exchange_cycles(tr.target)[t])
                for n, s in zip(tr.executions(), tr.steps)) for tr in (a, b) for t in [0]]
    assert fig.axes[2].patches[0].get_height() == busy[1] - busy[0]
    save(fig, tmp_path, "compare")


def test_timeline_figure_draws_every_span_of_a_schedule(tmp_path):
    from ipukit.parallel import schedule

    s = schedule("grouped", 3, 6)
    ax = report.timeline(s, title="grouped")
    bars = [c for c in ax.collections]
    assert len(bars) == len(s.ops)  # one bar per F/B op
    assert [t.get_text() for t in ax.get_yticklabels()] == ["IPU 0", "IPU 1", "IPU 2"]
    b = s.bubble(1.0, 2.0)
    assert f"bubble {b['total']:.1%} of total" in ax.get_title(loc="left")
    # every box says its op and micro-batch, and its stage where there is room (the
    # backward boxes, twice as wide as the forward ones)
    spans = s.timeline(1.0, 2.0).spans
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == len(spans)
    for text, o in zip(texts, spans):
        op = f"{o.kind}{o.microbatch}"
        assert text in (f"{op} · stage {o.stage}", f"{op} s{o.stage}", op), (text, o)
        assert o.kind == "F" or text != op, (text, o)
    assert {"F0", "B5 s2"} <= set(texts) or {"F0 s0", "B5 s2"} <= set(texts)
    save(ax.figure, tmp_path, "timeline_schedule")


def test_timeline_figure_of_a_trace_and_a_run(tmp_path):
    from ipukit.parallel import nn, optim, pipeline

    trace = run_tut6(200, 30)
    tl = trace.timeline()
    ax = report.timeline(trace)
    assert len(ax.collections) == len(tl.spans)
    plt.close(ax.figure)
    p = pipeline([[nn.Dense(4, 8, rng=1)], [nn.Dense(8, 3, rng=2)]],
                 gradient_accumulation_count=4, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy())
    rng = np.random.default_rng(0)
    run = p.run(rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20))
    ax = report.timeline(run, select=lambda sp: sp.microbatch == 0, rebase=True)
    assert len(ax.collections) == sum(1 for sp in run.timeline if sp.microbatch == 0)
    assert ax.get_xlim()[0] == 0
    plt.close(ax.figure)
    ax = report.timeline(run, title="2 stages, 4 micro-batches")
    assert len(ax.collections) == len(run.timeline)
    save(ax.figure, tmp_path, "timeline_run")
    with pytest.raises(TypeError, match="Timeline, a Trace, a Schedule"):
        report.timeline(42)


def test_memory_map_marks_the_tiles_of_an_out_of_memory_graph():
    t = ipu.IPUModel("ipu1", tiles_per_ipu=4).create_device().target
    g = ipu.Graph(t)
    v = g.add_variable(ipu.FLOAT, [70_000], "embedding")  # 280,000 B on a 262,144 B tile
    g.set_tile_mapping(v, 3)
    with pytest.warns(ipu.OutOfMemoryWarning):
        eng = ipu.Engine(g, ipu.Sequence())
    ax = report.tile_memory_map(eng.trace)
    assert ax.get_title().endswith("on tile 3; 1 tiles out of memory)")
    (marks,) = ax.collections  # the red crosses (the image is in ax.images)
    assert marks.get_offsets().tolist() == [[1.0, 1.0]]  # tile 3 of a 2 x 2 grid
    plt.close(ax.figure)


def test_liveness_colours_follow_the_names_not_the_order():
    """Lesson 05 drew square/out green above and red below: one variable, two colours. A
    variable's colour is its name's, whichever order the program makes them in."""
    from tests.test_liveness import two_temporaries

    colours = []
    for swap in (False, True):
        dev, g, prog = two_temporaries("apart")
        if swap:  # t2 made and summed first
            prog = ipu.Sequence(*prog.programs[2:], *prog.programs[:2])
        ax = report.liveness(ipu.Engine(g, prog).trace, tile=0)
        colours.append({b.get_label(): tuple(b.patches[0].get_facecolor())
                        for b in ax.containers if b.get_label() in ("t1", "t2")})
        plt.close(ax.figure)
    assert colours[0] == colours[1] and colours[0]["t1"] != colours[0]["t2"]


def test_liveness_peak_label_clear_of_the_dashed_line(traces):
    """Lesson 05's peak label sat on the dashed line (84,768 B under 87,072 B): a label within
    6% of the plot under the line is written above it. tut6's peak is 8,000 B under it."""
    ax = report.liveness(traces[0])
    ax.figure.canvas.draw()
    line = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"][0]
    renderer = ax.figure.canvas.get_renderer()
    text = ax.texts[0].get_window_extent(renderer)
    y_line = ax.transData.transform((0, line.get_ydata()[0]))[1]
    assert ax.texts[0].xy[1] == line.get_ydata()[0]  # written from the line, not the bar
    assert text.y0 > y_line  # the whole label above the line, none of it struck through
    plt.close(ax.figure)


def test_memory_map_figure_titles_do_not_overlap(traces):
    """Lesson 05's seven maps: "...vertex code (max 2,048 B on tile 0)" ran into the next
    panel's title. No two titles' boxes meet, and each fits its panel's width."""
    fig = report.memory_map_figure(traces[0])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    shown = [ax for ax in fig.axes if ax.get_title()]
    boxes = [ax.title.get_window_extent(renderer) for ax in shown]
    assert len(boxes) == 1 + len(traces[0].memory.categories)
    for i, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[i + 1:]), shown[i].get_title()
    plt.close(fig)


def test_timeline_w_boxes_are_striped_as_their_legend():
    """Matplotlib >= 3.10 takes ``color=`` for the hatch too: lesson 13's W boxes lost their
    stripes while the legend kept them. Every W box is hatched in white on its colour."""
    from matplotlib.colors import to_hex

    from ipukit.parallel import schedule

    s = schedule("zb_h1", 4, 8)
    ax = report.timeline(s.timeline(t_F=1, t_B=1, t_W=1))
    spans = s.timeline(t_F=1, t_B=1, t_W=1).spans
    ws = [bar for bar, op in zip(ax.collections, spans) if op.kind == "W"]
    assert len(ws) == 4 * 8
    for bar in ws:
        assert bar.get_hatch() == "////"
        assert to_hex(bar.get_hatchcolor()[0]) == "#ffffff" != to_hex(bar.get_facecolor()[0])
    plt.close(ax.figure)
