"""Lesson 02's checks (issues 16, 26, 31): judged checks; the solution scores full marks,
the untouched exercise zero, and plausible mistakes in the learner's mappings, views and
streams lose points, with a message naming the case."""

import pytest

import ipukit as ipu
from ipukit.grading import feedback, lesson02
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    judged_checks_hold,
    solution_trials,
    to_judge,
)

NOTEBOOK = "02_graphs_tensors_streams.ipynb"
CALLS = {"02.1": ("check_map_evenly", "map_evenly"),
         "02.2": ("check_interleave", "interleave"),
         "02.3": ("check_reverse_stream", "build_reverse"),
         "02.4": ("check_block_mapping", "map_blocks")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_score_zero(folder, status):
    rows = grade_exercises(lesson02, "02", NOTEBOOK, CALLS, folder, status)
    assert sum(r.max_points for r in rows) == 9


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("02", NOTEBOOK)


def test_floor_instead_of_ceil_leaves_elements_unmapped():
    def floor_chunks(graph, tensor):
        flat = tensor.flatten()
        n, tiles = flat.num_elements(), graph.target.num_tiles
        chunk = max(1, n // tiles)
        for tile in range(tiles):
            if tile * chunk < n:
                graph.set_tile_mapping(flat[tile * chunk:(tile + 1) * chunk], tile)

    r = lesson02.check_map_evenly(floor_chunks, show=False)
    assert r.status == "failed" and "not mapped to any tile" in r.message


def test_concatenating_instead_of_interleaving_names_the_element():
    r = lesson02.check_interleave(lambda a, b: ipu.concat([a, b]), show=False)
    assert r.status == "failed" and "element 1 of your view is a[1], expected b[0]" in \
        r.message


def test_a_forward_copy_is_not_a_reverse():
    def forward(graph, n):
        s_in = graph.add_host_to_device_fifo("in", ipu.FLOAT, n)
        s_out = graph.add_device_to_host_fifo("out", ipu.FLOAT, n)
        v = graph.add_variable(ipu.FLOAT, [n], "v")
        graph.set_tile_mapping(v, 0)
        return ipu.Sequence(ipu.Copy(s_in, v), ipu.Copy(v, s_out))

    r = lesson02.check_reverse_stream(forward, show=False)
    assert r.status == "failed" and r.message.startswith("'out' for n=4[0]: expected")


def test_the_block_reference_matches_the_statement():
    assert lesson02.block_owner(4, 6, 2, 3, 4).tolist() == [
        [0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1], [2, 2, 2, 3, 3, 3], [2, 2, 2, 3, 3, 3]]
    # 5x7 in 2x3 blocks: 3 blocks per row (the last one 1 column wide), 3 rows of blocks
    assert lesson02.block_owner(5, 7, 2, 3, 3)[4].tolist() == [0, 0, 0, 1, 1, 1, 2]


def blocks(column_major=False, swap=False):
    def map_blocks(graph, m, br, bc):
        if swap:
            br, bc = bc, br
        rows, cols = m.shape
        tiles = graph.target.num_tiles
        per_row, per_col = -(-cols // bc), -(-rows // br)
        for i in range(per_col):
            for j in range(per_row):
                k = j * per_col + i if column_major else i * per_row + j
                graph.set_tile_mapping(m[i * br:(i + 1) * br, j * bc:(j + 1) * bc], k % tiles)

    return map_blocks


@pytest.mark.parametrize("mistake", [dict(column_major=True), dict(swap=True)])
def test_block_order_and_shape_mistakes_fail_with_a_picture(mistake):
    assert lesson02.check_block_mapping(blocks(), show=False).passed
    r = lesson02.check_block_mapping(blocks(**mistake), show=False)
    assert r.status == "failed" and "expected tile" in r.message
    assert r.picture["text"].startswith("yours:") and "expected:" in r.picture["text"]
    assert len(r.picture["text"].splitlines()) >= 2 * 4 + 2


def chunks(order=lambda tiles: range(tiles), step=None):
    def map_evenly(graph, tensor):
        flat = tensor.flatten()
        n, tiles = flat.num_elements(), graph.target.num_tiles
        c = -(-n // tiles)
        for k, tile in enumerate(order(tiles)):
            if step:  # round robin: element i on tile i % tiles
                for i in range(k, n, tiles):
                    graph.set_tile_mapping(flat[i:i + 1], tile)
            elif k * c < n:
                graph.set_tile_mapping(flat[k * c:(k + 1) * c], tile)

    return map_evenly


def test_balanced_mappings_that_are_not_contiguous_runs_in_order_fail():
    assert lesson02.check_map_evenly(chunks(), show=False).passed
    r = lesson02.check_map_evenly(chunks(step=True), show=False)
    assert r.status == "failed" and "tile 0 holds 2 separate pieces [(0, 1), (4, 5)]" in \
        r.message and "shape [8]" in r.message
    r = lesson02.check_map_evenly(chunks(order=lambda t: reversed(range(t))), show=False)
    assert r.status == "failed" and "expected the run to start at element 0" in r.message


def test_a_copy_is_not_a_view():
    def copied(a, b):
        n = a.shape[0]
        return a.graph.add_variable(ipu.FLOAT, [2 * n], "copy")

    r = lesson02.check_interleave(copied, show=False)
    assert r.status == "failed" and \
        "n=1: element 0 of your view is not an element of a or b, expected a[0]" in r.message


def reverse(copies_in=1, name="in"):
    def build(graph, n):
        s_in = graph.add_host_to_device_fifo(name, ipu.FLOAT, n)
        s_out = graph.add_device_to_host_fifo("out", ipu.FLOAT, n)
        v = graph.add_variable(ipu.FLOAT, [n], "v")
        graph.set_tile_mapping(v, 0)
        back = ipu.concat([v[i:i + 1] for i in reversed(range(n))])
        return ipu.Sequence(*[ipu.Copy(s_in, v)] * copies_in, ipu.Copy(back, s_out))

    return build


def test_extra_stream_copies_and_misnamed_streams_fail():
    assert lesson02.check_reverse_stream(reverse(), show=False).passed
    r = lesson02.check_reverse_stream(reverse(copies_in=2), show=False)
    assert r.status == "failed" and r.message.startswith(
        "n=1: your program moved 12 bytes over the host link (3 stream copies); one copy in "
        "and one out move 8")
    r = lesson02.check_reverse_stream(reverse(name="input"), show=False)
    assert r.status == "failed" and \
        r.message.startswith("n=1: expected a host-to-device FIFO named 'in' of 1 floats")


def test_docstring_examples_run():
    import doctest

    assert doctest.testmod(lesson02).failed == 0


# -- 02.3 is judged on the graph (issue 26 point 1) ------------------------------------------

def test_02_3_right_numbers_without_a_graph_score_nothing():
    ex, cases, sent = solution_trials("02.3", NOTEBOOK)
    assert all("data" not in feedback.public(c) and "_data" in c for c in cases)
    assert feedback.judge(ex, to_judge(sent), cases) is None  # the judge streams its data
    right = [{"streams": {"in": {"to_device": True, "n": c["n"], "type": "float"},
                          "out": {"to_device": False, "n": c["n"], "type": "float"}},
              "out": c["_data"][::-1], "copies": 2} for c in cases]
    with pytest.raises(feedback.Wrong, match="n=1: your graph cannot be rebuilt: "
                       "GraphDataError"):
        feedback.judge(ex, to_judge(right), cases)


def test_02_3_hand_edited_graphs_are_run_by_the_judge_and_named():
    ex, cases, sent = solution_trials("02.3", NOTEBOOK)
    forward = []  # the copy out reads v itself, not the reversed view
    for g in sent:
        copy_in, copy_out = g["programs"][0]["Sequence"]
        v = copy_in["Copy"][1]
        forward.append(dict(g, programs=[{"Sequence": [copy_in, {"Copy": [
            v, copy_out["Copy"][1], None]}]}]))
    with pytest.raises(feedback.Wrong, match=r"'out' for n=4\[0\]: expected"):
        feedback.judge(ex, to_judge(forward), cases)
    renamed = [dict(g, streams=[["input" if s[0] == "in" else s[0], *s[1:]]
                                for s in g["streams"]],
                    programs=[{"Sequence": []}]) for g in sent]
    with pytest.raises(feedback.Wrong, match="n=1: expected a host-to-device FIFO named 'in' "
                       "of 1 floats; the graph has"):
        feedback.judge(ex, to_judge(renamed), cases)
    twice = [dict(g, programs=[{"Repeat": [2, g["programs"][0]]}]) for g in sent]
    with pytest.raises(feedback.Wrong, match=r"n=1: your program moved 16 bytes over the host "
                       r"link \(4 stream copies\)"):
        feedback.judge(ex, to_judge(twice), cases)
