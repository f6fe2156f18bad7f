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
