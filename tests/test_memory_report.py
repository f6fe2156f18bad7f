"""The out-of-memory report's words where a graph has remote buffers (Streaming Memory).

Graphcore's memory guide ("Debugging an out-of-memory exception") gives the two forms of
the message; Poplar's ``RemoteBuffer`` is "a region of remote (meaning not on the IPU)
memory" (poplar/graph/DataStream, ``classpoplar_1_1RemoteBuffer``), added with
``Graph::addRemoteBuffer`` and copied with ``program::Copy``: its bytes are not tile memory,
and offloading a variable there is a fix only where the tile's always-live variables are at
least what it lacks.
"""

import numpy as np
import pytest

import ipukit as ipu
from ipukit.memory_report import offload_hint, streaming_memory_text
from ipukit.trace import TileMemory


def oom_graph(remote=()):
    """Tile 2 of four 256 KiB tiles holds 280,000 B of always-live variables."""
    g = ipu.Graph(ipu.IPUModel("ipu1", tiles_per_ipu=4).create_device().target)
    big = g.add_variable(ipu.FLOAT, [70_000], "embedding")
    g.set_tile_mapping(big, 2)
    for name, n in remote:
        g.add_remote_buffer(name, ipu.FLOAT, n)
    return g


def test_the_error_counts_streaming_memory_apart_and_suggests_a_remote_buffer():
    g = oom_graph([("adam/m", 1_000), ("adam/v", 1_000), ("momentum", 10)])
    with pytest.raises(ipu.OutOfMemoryError) as err:
        ipu.compile_graph(g, [], {"debug.allowOutOfMemory": "false"})
    msg = str(err.value)
    assert msg.startswith("Memory allocation error : Out of memory on tile 2: 280,000 bytes")
    assert ("Streaming Memory holds 8,040 B in 3 remote buffers ('adam/m' 4,000 B, "
            "'adam/v' 4,000 B, 'momentum' 40 B), off the tiles: not in these figures.") in msg
    assert "tile 2: 280,000 B (variables 280,000;" in msg  # tile memory without them
    assert "graph.add_remote_buffer(name, dtype, num_elements)" in msg
    assert "Copy(buffer, tensor) before it is used and Copy(tensor, buffer) after" in msg


def test_the_warning_without_remote_buffers_does_not_mention_them():
    with pytest.warns(ipu.OutOfMemoryWarning) as caught:
        ipu.compile_graph(oom_graph(), [])
    msg = str(caught[0].message)
    assert msg.startswith("Out of memory: Cannot fit all variable data onto one or more tiles")
    assert "Streaming Memory holds" not in msg
    assert "add_remote_buffer" in msg  # 280,000 B of variables, 17,856 B too many


def test_more_than_three_buffers_are_summed_and_the_rest_elided():
    mem = TileMemory({"variables": np.zeros(1, np.int64)}, 100,
                     remote={f"b{i}": 10 * i for i in range(1, 6)})
    assert streaming_memory_text(mem) == (
        " Streaming Memory holds 150 B in 5 remote buffers ('b5' 50 B, 'b4' 40 B, 'b3' 30 B,"
        " ...), off the tiles: not in these figures.")
    assert streaming_memory_text(TileMemory({"variables": np.zeros(1)}, 100)) == ""


@pytest.mark.parametrize("variables, code, hint", [
    (100, 300, True),   # 50 B too many, 100 B of variables could leave the tile
    (50, 350, True),    # exactly enough
    (49, 351, False),   # not enough: the code does not fit whatever is offloaded
    (0, 400, False),
])
def test_offloading_is_suggested_only_where_it_can_make_the_tile_fit(variables, code, hint):
    mem = TileMemory({"variables": np.array([variables, 1]), "vertex code": np.array([code, 0])},
                     350)
    assert bool(offload_hint(mem)) is hint
    assert offload_hint(TileMemory({"variables": np.array([300])}, 350)) == ""  # it fits
