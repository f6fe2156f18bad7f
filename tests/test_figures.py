"""ipukit.figures: the lessons' long figures draw what they are given."""

import doctest
from types import SimpleNamespace

import matplotlib

from ipukit import figures

matplotlib.use("Agg")


def test_docstring_examples_run():
    result = doctest.testmod(figures)
    assert result.failed == 0 and result.attempted > 0


def test_replication_diagram_draws_one_box_per_ipu():
    ax = figures.replication_diagram(replicas=3, stages=2)
    labels = [t.get_text() for t in ax.texts]
    assert sum(t.startswith("IPU ") for t in labels) == 6 and "IPU 5\nstage 1" in labels


def test_memory_bars_stack_the_parts_in_kib():
    rec = SimpleNamespace(weights=1024, gradients=2048, stash=0, optimizer=4096)
    ax = figures.memory_bars({"a": rec, "b": rec}, predicted={"a": 7168}, hatched=["b"])
    tops = sorted({round(p.get_y() + p.get_height(), 6) for p in ax.patches})
    assert tops[-1] == 7.0  # 1 + 2 + 0 + 4 KiB
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    assert any(p.get_hatch() == "//" for p in ax.patches)
    assert len(ax.lines) == 1  # one prediction line


def test_allreduce_panels_draw_the_ring_law_and_the_shares():
    rows = [(1, 0, 0, 10), (2, 400, 5, 10), (4, 600, 7, 10), (8, 700, 9, 10)]
    ax1, ax2 = figures.allreduce_panels(rows, {4: 0.25, 8: 0.125}, gradient_bytes=400)
    law, measured = ax1.lines
    assert list(law.get_xdata()) == [1, 2, 4, 8]
    assert list(law.get_ydata()) == [0.0, 1.0, 1.5, 1.75]  # 2(R-1)/R
    assert list(measured.get_ydata()) == [0.0, 1.0, 1.5, 1.75]  # bytes / gradient bytes
    assert [t.get_text() for t in ax1.get_xticklabels()] == ["1", "2", "4", "8"]
    assert [p.get_height() for p in ax2.patches] == [25.0, 12.5]
    assert [t.get_text() for t in ax2.get_xticklabels()] == ["4", "8"]


def test_lesson05_classifier_computes_the_cross_entropy_of_numpy():
    import numpy as np

    from ipukit import report
    from ipukit.tutorials.split_study import classifier

    losses, exchange = [], []
    for bad in (False, True):
        eng, host = classifier(w_on_one_tile=bad)
        logits = host["table"][host["ids"][:, 0]] @ host["W"]
        log_p = logits - logits.max(1, keepdims=True)
        log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
        np.testing.assert_allclose(eng.read_tensor("loss"),
                                   -log_p[np.arange(8), host["labels"]], rtol=1e-4)
        losses.append(eng.read_tensor("loss"))
        rows = {r["name"]: r for r in report.compute_set_rows(eng.trace)}
        exchange.append(rows["logits/MatMul"]["exchange"])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)  # same numbers, other map
    assert exchange[1] > 2 * exchange[0]  # W on tile 0: its rows travel to every tile


def test_optimizer_state_saving_counts_adam_shards():
    import numpy as np

    stage = SimpleNamespace(params={"w": np.zeros((3, 5)), "b": np.zeros(5)})
    mem = lambda ipu, opt: SimpleNamespace(ipu=ipu, optimizer=opt)  # noqa: E731
    without = SimpleNamespace(memory=[mem(0, 10), mem(0, 160)], peak_memory=lambda: [900])
    with_rts = SimpleNamespace(memory=[mem(0, 48)], peak_memory=lambda: [788])
    (row,) = figures.optimizer_state_saving([stage], without, with_rts, replicas=4)
    # 20 weights: 2 moments x 4 B x 20 = 160 B; shards ceil(15/4) + ceil(5/4) = 4 + 2
    assert row == {"full": 160, "shard": 48, "before": 160, "after": 48, "saved": 112}


def test_accumulator_drift_draws_exact_and_both_sums():
    ax = figures.accumulator_drift([0.5, 1.0, 1.0], [0.5, 1.0, 1.5], step=0.5)
    exact, f32, f16 = ax.lines
    assert list(exact.get_ydata()) == [0.5, 1.0, 1.5]
    assert list(f32.get_ydata()) == [0.5, 1.0, 1.5] and list(f16.get_ydata()) == [0.5, 1.0, 1.0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "exact", "float32 accumulator", "float16 accumulator"]
