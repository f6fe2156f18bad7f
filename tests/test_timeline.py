"""The one record of time: bubble measures and idle time by cause."""

import pytest

from ipukit.timeline import MemorySample, Span, Timeline


def test_measures_of_gpipe_like_two_ipus():
    # IPU0: F F then B B; IPU1 starts after a link, as a 2-stage pipeline of 2 micro-batches
    spans = [Span(0, "F", 0, 1, 0, 0), Span(0, "F", 1, 1, 0, 1),
             Span(0, "link", 1, 0.5, 0, 0, bytes=8),
             Span(1, "F", 1.5, 1, 1, 0), Span(1, "F", 2.5, 1, 1, 1),
             Span(1, "B", 3.5, 2, 1, 0), Span(1, "B", 5.5, 2, 1, 1),
             Span(1, "link", 5.5, 0.5, 1, 0, bytes=8),
             Span(0, "B", 6, 2, 0, 0), Span(0, "B", 8, 2, 0, 1),
             Span(0, "optimizer", 10, 1), Span(1, "optimizer", 7.5, 1)]
    m = Timeline(spans).measures()
    assert m["makespan"] == 11
    assert m["busy"] == {0: 6.0, 1: 6.0}
    assert m["ideal_time"] == 6
    assert m["total"] == pytest.approx(5 / 11)
    assert m["ideal"] == pytest.approx(5 / 6)
    assert m["span"] == pytest.approx((10 - 6) / 10)  # IPU0: first work 0, last 10
    assert m["utilisation"] == pytest.approx(12 / 22)
    # IPU 0 idles 2..6: 0..0 link overlaps work; waits 2..6 for IPU1's gradient
    assert m["idle"][0] == {"dependency": 4.0, "optimizer": 1.0}
    # IPU 1 waits 0..1.5, then after its last B: optimizer 7.5..8.5 and waits to 11
    assert m["idle"][1] == {"dependency": 1.5 + 2.5, "optimizer": 1.0}
    # every IPU's time adds up to the makespan
    for q in (0, 1):
        assert m["busy"][q] + sum(m["idle"][q].values()) == pytest.approx(11)


def test_idle_priority_and_iteration():
    tl = Timeline([Span(0, "compute", 0, 4), Span(0, "sync", 4, 2), Span(0, "link", 5, 3),
                   Span(1, "exchange", 0, 8)], clock_hz=2.0)
    m = tl.measures()
    assert m["idle"][0] == {"sync": 1.0, "link": 3.0}  # a link outranks a sync
    assert m["idle"][1] == {"exchange": 8.0}
    assert m["busy"][1] == 0.0 and tl.makespan / tl.clock_hz == 4.0
    assert len(tl) == 4 and [s.kind for s in tl if s.ipu == 0] == ["compute", "sync", "link"]


def test_memory_samples_and_empty():
    tl = Timeline([], [MemorySample(0, 1, {"weights": 10, "stash": 5}),
                       MemorySample(3, 1, {"weights": 10, "stash": 9})])
    assert tl.num_ipus == 2 and max(m.total for m in tl.memory) == 19
    assert Timeline([]).measures()["utilisation"] == 0.0
