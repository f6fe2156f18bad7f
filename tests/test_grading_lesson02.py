"""Lesson 02's checks (issue 16): the solution scores full marks, the untouched exercise
zero, and plausible mistakes in the learner's mappings, views and streams lose points."""

import pytest

import ipukit as ipu
from ipukit.grading import lesson02
from tests.lessons import SOLVED_AND_UNTOUCHED, grade_exercises

NOTEBOOK = "02_graphs_tensors_streams.ipynb"
CALLS = {"02.1": ("check_map_evenly", "map_evenly"),
         "02.2": ("check_interleave", "interleave"),
         "02.3": ("check_reverse_stream", "build_reverse"),
         "02.4": ("check_block_mapping", "map_blocks")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_score_zero(folder, status):
    rows = grade_exercises(lesson02, "02", NOTEBOOK, CALLS, folder, status)
    assert sum(r.max_points for r in rows) == 9


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
