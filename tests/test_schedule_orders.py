"""Per-IPU op orders of the schedules after Graphcore, against their authors' figures."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipukit.parallel.schedule_orders import orders, stage_ipu, units

# deepseek-ai/DualPipe README.md, images/dualpipev.png: "Example DualPipeV scheduling for 4
# PP ranks (8 PP stages) and 10 micro-batches", transcribed cell by cell. Upper case is
# chunk 0 (stage r, black numbers), lower case chunk 1 (stage 2p-1-r, white numbers); F is
# a forward, B a backward cell (for input, or a full backward), W a "backward for weights"
# cell; "+" joins the two halves of an overlapped forward-and-backward cell.
DUALPIPEV_FIGURE = [
    "F0 F1 F2 F3 F4 F5 F6 f0 b0 w0 f1 b1 w1 f2 b2 w2 f3 F7+b3 f4+B0 F8+b4 f5+B1 F9+b5 "
    "f6+B2 b6 f7+B3 b7 f8+B4 b8 f9+B5 b9 B6 W6 B7 W7 B8 W8 B9 W9",
    "F0 F1 F2 F3 F4 f0 F5 f1 b0 w0 f2 b1 w1 f3 F6+b2 f4+B0 F7+b3 f5+B1 F8+b4 f6+B2 F9+b5 "
    "f7+B3 b6 f8+B4 b7 f9+B5 b8 B6 b9 B7 w9 B8 W7 B9 W8 W9",
    "F0 F1 F2 f0 F3 f1 F4 f2 b0 w0 f3 F5+b1 f4+B0 F6+b2 f5+B1 F7+b3 f6+B2 F8+b4 f7+B3 "
    "F9+b5 f8+B4 b6 f9+B5 b7 B6 b8 B7 b9 B8 W7 B9 w9 W8 W9",
    "F0 f0 F1 f1 F2 f2 F3 f3 F4 b0 f4+B0 F5+b1 f5+B1 F6+b2 f6+B2 F7+b3 f7+B3 F8+b4 f8+B4 "
    "F9+b5 f9+B5 b6 B6 b7 B7 b8 B8 b9 B9 w8 W8 w9 W9",
]


def from_figure(cells: str, p: int, r: int):
    """The figure's cells as units of (phase, stage, micro-batch): a backward with no W
    cell of its own is a full backward, its W run with it; an overlapped cell is one unit."""
    tokens = cells.replace("+", " ").split()
    units = []
    for cell in cells.split():
        unit = []
        for tok in cell.split("+"):
            stage = r if tok[0].isupper() else 2 * p - 1 - r
            unit.append((tok[0].upper(), stage, int(tok[1:])))
            if tok[0] in "Bb" and {"B": "W", "b": "w"}[tok[0]] + tok[1:] not in tokens:
                unit.append(("W", stage, int(tok[1:])))
        units.append(tuple(unit))
    return units


@pytest.mark.parametrize("r", range(4))
def test_dualpipev_is_deepseeks_figure(r):
    assert units("dualpipev", 4, 10, 2)[r] == from_figure(DUALPIPEV_FIGURE[r], 4, r)
    assert orders("dualpipev", 4, 10, 2)[r] == [op for u in units("dualpipev", 4, 10, 2)[r]
                                                for op in u]


def test_megatron_warmup_counts():
    # Megatron get_pp_rank_microbatches: (p - r - 1) * 2 + (v - 1) * p warm-up forwards,
    # at most m * v; then one forward, one backward (forward first), then the backwards.
    for p, m, v in ((4, 8, 2), (4, 8, 4), (2, 2, 3), (8, 8, 2), (3, 3, 2)):
        for r, order in enumerate(orders("interleaved_1f1b", p, m, v)):
            warmup = min(2 * (p - r - 1) + (v - 1) * p, m * v)
            steady = m * v - warmup
            assert [op[0] for op in order] == \
                ["F"] * warmup + ["F", "B"] * steady + ["B"] * warmup


def test_megatron_chunk_order():
    # p = 2, v = 2, m = 4: micro-batches go through the chunks in groups of p
    # (get_schedule_table with microbatch_group_size_per_vp_stage = p).
    fwd = [op for op in orders("interleaved_1f1b", 2, 4, 2)[0] if op[0] == "F"]
    assert [(s // 2, mb) for _, s, mb in fwd] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    bwd = [op for op in orders("interleaved_1f1b", 2, 4, 2)[0] if op[0] == "B"]
    assert [(s // 2, mb) for _, s, mb in bwd] == [
        (1, 0), (1, 1), (0, 0), (0, 1), (1, 2), (1, 3), (0, 2), (0, 3)]


def test_zb_h1_warmup_and_held_back_w():
    # torch _get_1f1b_rank_ops(enable_zero_bubble=True), one stage per rank: p-1-r
    # forwards, r B ops without their W, then F, B, W; the held-back W last.
    p, m = 4, 8
    for r, order in enumerate(orders("zb_h1", p, m)):
        kinds = "".join(op[0] for op in order)
        assert kinds == "F" * (p - 1 - r) + "FB" * r + "FBW" * (m - (p - 1 - r) - r) \
            + "BW" * (p - 1 - r) + "W" * r


def test_zb_v_first_rank_is_sail_sgs_handcrafted_order():
    # sail-sg handcrafted_zb_v.py get_zb_v_schedule(4, 8), rank 0: 2p-1 forwards of chunk 0,
    # then p times (f, b, w) of chunk 1, then (F, B, W, f, b, w) ...
    order = orders("zb_v", 4, 8, 2)[0]
    text = " ".join(f"{ph if s < 4 else ph.lower()}{mb}" for ph, s, mb in order)
    assert text == ("F0 F1 F2 F3 F4 F5 F6 f0 b0 w0 f1 b1 w1 f2 b2 w2 f3 b3 w3 F7 B0 W0 f4 b4 "
                    "w4 B1 W1 f5 b5 w5 B2 W2 f6 b6 w6 B3 W3 f7 b7 w7 B4 W4 B5 W5 B6 W6 B7 W7")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["interleaved_1f1b", "zb_h1", "zb_v", "dualpipev"]),
       st.integers(1, 6), st.integers(1, 4), st.integers(1, 4))
def test_each_ipu_runs_its_own_stages_once(kind, p, k, v):
    v = {"zb_h1": 1, "zb_v": 2, "dualpipev": 2}.get(kind, v + 1)
    m = {"interleaved_1f1b": p * k, "dualpipev": 2 * p + k}.get(kind, k + p // 2)
    split = kind != "interleaved_1f1b"
    for r, order in enumerate(orders(kind, p, m, v)):
        assert all(stage_ipu(kind, p, s) == r for _, s, _ in order)
        held = {s for _, s, _ in order}
        assert len(held) == v
        want = {(ph, s, mb) for ph in ("FBW" if split else "FB") for s in held
                for mb in range(m)}
        assert sorted(order) == sorted(want)  # each op exactly once


def test_stage_ipu_placements():
    assert [stage_ipu("interleaved_1f1b", 4, s) for s in range(8)] == [0, 1, 2, 3] * 2
    assert [stage_ipu("zb_v", 4, s) for s in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    assert [stage_ipu("dualpipev", 2, s) for s in range(4)] == [0, 1, 1, 0]
