"""Remote buffers (Streaming Memory): ``Graph.add_remote_buffer``, ``Copy`` to and from them
with an offset, the engine's host access, their cost, trace phase and memory category.

Graphcore's behaviour tested here:
* ``poplar::RemoteBuffer`` (poplar-api, poplar/graph/DataStream.html): "a region of remote
  (meaning not on the IPU) memory"; ``numElements()``, ``getRepeats()``, ``elementType()``.
* ``Graph::addRemoteBuffer(handle, elementType, numElements, repeats, rearrangeOnHost,
  optimiseMemory)`` and ``program::Copy(buffer, tensor, offset)`` / ``Copy(tensor, buffer,
  offset)``: the offset picks a repeat; several offsets copy several repeats, the tensor's
  first dimension one per offset (popops/HostSliceTensor.hpp: "if using a copy from a remote
  buffer with multiple slice indices dim(0) must be num slice indices").
* ``Engine::copyToRemoteBuffer(data, handle, repeatIndex)`` and
  ``copyFromRemoteBuffer(handle, data, repeatIndex)``: one repeat at a time (TensorFlow's
  IPU plugin test writes one float per repeat index and reads them back).
* Streaming Memory is off the IPU (Bow-2000 datasheet: "Up to 256GB Streaming Memory" beside
  "3.6GB In-Processor-Memory"): it is not tile memory.
"""

import io
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit import cost
from ipukit.poplibs import popops
from ipukit.widgets import BSPView


def _graph(tiles=2):
    dev = ipu.IPUModel(tiles_per_ipu=tiles).create_device()
    return dev, ipu.Graph(dev.target)


def _mapped(g, dtype, shape, name, tile=0):
    t = g.add_variable(dtype, shape, name)
    g.set_tile_mapping(t, tile)
    return t


def test_copy_with_offset_tensor_reads_and_writes_the_repeats_it_names():
    dev, g = _graph()
    v = _mapped(g, ipu.FLOAT, [2, 3], "v")
    off = _mapped(g, ipu.UNSIGNED_INT, [2], "off", 1)
    rb = g.add_remote_buffer("rb", ipu.FLOAT, 3, repeats=4)
    g.create_host_write("off", off)
    g.create_host_read("v", v)
    scale = ipu.Copy(rb, v, off)
    back = ipu.Copy(v, rb, off)
    eng = ipu.Engine(g, [scale, back])
    eng.load(dev)
    host = np.arange(12, dtype=np.float32).reshape(4, 3)
    for r in range(4):
        eng.copy_to_remote_buffer(host[r], "rb", r)
    eng.write_tensor("off", np.array([3, 1]))
    eng.run(0)
    np.testing.assert_array_equal(eng.read_tensor("v"), host[[3, 1]])
    eng.write_tensor("off", np.array([0, 2]))  # v (repeats 3 and 1) into repeats 0 and 2
    eng.run(1)
    expected = host.copy()
    expected[[0, 2]] = host[[3, 1]]
    got = np.stack([eng.copy_from_remote_buffer("rb", np.zeros(3, np.float32), r)
                    for r in range(4)])
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2)), min_size=1, max_size=6))
def test_a_program_of_remote_copies_matches_a_numpy_model(ops):
    """Any sequence of copies in and out (fixed int offsets) leaves the tensor and every
    repeat as a NumPy model of the buffer says."""
    dev, g = _graph(1)
    v = _mapped(g, ipu.INT, [2], "v")
    g.create_host_read("v", v)
    rb = g.add_remote_buffer("rb", ipu.INT, 2, repeats=3)
    one = g.add_constant(ipu.INT, [2], [1, 1], "one")
    g.set_tile_mapping(one, 0)
    seq = ipu.Sequence()
    model_v, model_rb = np.zeros(2, np.int64), np.arange(6).reshape(3, 2)
    for to_remote, r in ops:
        seq.add(ipu.Copy(v, rb, r) if to_remote else ipu.Copy(rb, v, r))
        if to_remote:
            model_rb[r] = model_v
        else:
            model_v = model_rb[r].copy()
        popops.add_in_place(g, v, one, seq, "inc")
        model_v = model_v + 1
    eng = ipu.Engine(g, seq)
    eng.load(dev)
    for r in range(3):
        eng.copy_to_remote_buffer(np.arange(6).reshape(3, 2)[r], "rb", r)
    eng.run()
    np.testing.assert_array_equal(eng.read_tensor("v"), model_v)
    for r in range(3):
        np.testing.assert_array_equal(
            eng.copy_from_remote_buffer("rb", np.zeros(2, np.int32), r), model_rb[r])


def test_remote_copy_costs_sync_plus_the_streaming_memory_link():
    dev, g = _graph(4)
    v = g.add_variable(ipu.FLOAT, [4000], "v")
    for i in range(4):
        g.set_tile_mapping(v[i * 1000:(i + 1) * 1000], i)
    rb = g.add_remote_buffer("rb", ipu.FLOAT, 4000)
    eng = ipu.Engine(g, [ipu.Copy(rb, v), ipu.Copy(v, rb)])
    eng.load(dev)
    eng.run(0)
    eng.run(1)
    t = dev.target
    # independently: PCIe Gen4 x8 line rate, 8 lanes x 16 GT/s x 128/130 bits, and 1 µs
    rate = 8 * 16e9 * 128 / 130 / 8 / t.clock_hz
    expected = round(1e-6 * t.clock_hz) + int(np.ceil(16000 / rate))
    assert cost.remote_cycles(16000, t) == expected
    steps = [s for s in eng.trace.executed_steps() if s.kind == "remote"]
    assert [s.name for s in steps] == ["RemoteCopy v <- rb", "RemoteCopy v -> rb"]
    for s in steps:
        assert s.remote_bytes == 16000
        assert s.exchange_cycles == expected  # the link, not the tiles' 1,000 cycles, is slower
        assert s.cycles == cost.sync_cycles(t) + expected
    assert steps[0].tile_bytes_in.tolist() == [4000] * 4
    assert steps[1].tile_bytes_out.tolist() == [4000] * 4
    summary = eng.trace.summary()
    assert summary["remote_bytes"] == 32000
    assert summary["remote_exchange_cycles"] == 2 * expected
    assert summary["ipu_exchange_cycles"] == 0  # not counted as on-IPU exchange


def test_trace_timeline_and_bsp_view_show_remote_copies_as_their_own_kind():
    dev, g = _graph()
    v = _mapped(g, ipu.FLOAT, [2], "v")
    rb = g.add_remote_buffer("state", ipu.FLOAT, 2)
    eng = ipu.Engine(g, ipu.Sequence(ipu.Copy(rb, v), ipu.Copy(v[0], v[1])))
    eng.load(dev)
    eng.run()
    kinds = [(sp.kind, sp.label) for sp in eng.trace.timeline().spans]
    assert ("remote", "RemoteCopy v <- state") in kinds
    assert ("exchange", "RemoteCopy v <- state") not in kinds
    view = BSPView(eng.trace)
    frame = view.frame_at(view.frame_index(1, "exchange"))
    assert view.phase_name(frame) == "Streaming Memory"
    assert view.phase_colour(frame) != view.phase_colour(
        view.frame_at(view.frame_index(2, "exchange")))
    assert "Streaming Memory" in view.caption(view.frame_index(1, "exchange"))
    meta = view.payload()["meta"]
    assert meta["steps"][1]["kind"] == "remote" and meta["steps"][1]["remote_bytes"] == 8
    assert "remote" in meta["colours"]


def test_streaming_memory_is_its_own_category_not_tile_memory():
    dev, g = _graph()
    v = _mapped(g, ipu.FLOAT, [4], "v")
    before = ipu.compile_graph(g, [ipu.Copy(v[0], v[1])]).memory.total.copy()
    # 64 MB of remote buffer: far more than the IPU holds, and no out-of-memory warning
    g.add_remote_buffer("big", ipu.FLOAT, 4 << 20, repeats=4)
    g.add_remote_buffer("small", ipu.HALF, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exe = ipu.compile_graph(g, [ipu.Copy(v[0], v[1])])
    np.testing.assert_array_equal(exe.memory.total, before)
    assert exe.memory.remote == {"big": 4 * 4 * (4 << 20), "small": 6}
    assert exe.memory.streaming_memory == 64 * 2**20 + 6
    eng = ipu.Engine(exe)
    eng.load(dev)
    eng.run()
    assert eng.trace.summary()["streaming_memory"] == 64 * 2**20 + 6
    out = io.StringIO()
    eng.print_profile_summary(out)
    assert "Streaming Memory (remote buffers, not tile memory):" in out.getvalue()


# -- errors, in Poplar's words and the kit's style --------------------------------------
def test_errors_name_the_buffer_the_tensor_and_the_fix():
    dev, g = _graph()
    v = _mapped(g, ipu.FLOAT, [4], "v")
    i = _mapped(g, ipu.INT, [2], "i")
    f = _mapped(g, ipu.FLOAT, [1], "f")
    rb = g.add_remote_buffer("rb", ipu.FLOAT, 2, repeats=3)
    with pytest.raises(ipu.StreamError, match="already exists"):
        g.add_remote_buffer("rb", ipu.FLOAT, 2)
    with pytest.raises(ipu.StreamError, match="repeats must be a positive int, got 0"):
        g.add_remote_buffer("r0", ipu.FLOAT, 2, repeats=0)
    with pytest.raises(ipu.StreamError, match="num_elements must be a positive int"):
        g.add_remote_buffer("r1", ipu.FLOAT, 2.5)
    with pytest.raises(ipu.StreamError, match="offset 3 is out of range for remote buffer "
                       "'rb', which has 3 repeats"):
        ipu.Copy(v[:2], rb, 3)
    with pytest.raises(ipu.StreamError, match="integer tensor .* got tensor 'f'"):
        ipu.Copy(rb, v[:2], f)
    with pytest.raises(ipu.ProgramError, match="neither side is a remote buffer"):
        ipu.Copy(v[0], v[1], 0)
    s = g.add_host_to_device_fifo("s", ipu.FLOAT, 2)
    with pytest.raises(ipu.ProgramError, match="one side must be a tensor"):
        ipu.Copy(s, rb)
    for prog, text in ((ipu.Copy(rb, v), "tensor 'v' \\(float, 4 elements\\): the tensor must "
                        "be float with 2 elements"),
                       (ipu.Copy(rb, v[:2], i), "must be float with 2 offsets x 2 = 4"),
                       (ipu.Copy(i, rb), "tensor 'i' \\(int, 2 elements\\)")):
        with pytest.raises(ipu.StreamError, match=text):
            ipu.Engine(g, prog)
    _, other = _graph()
    with pytest.raises(ipu.StreamError, match="not created by this graph"):
        ipu.Engine(g, ipu.Copy(other.add_remote_buffer("rb", ipu.FLOAT, 2), v[:2]))


def test_offsets_read_at_run_time_and_host_access_are_checked():
    dev, g = _graph()
    v = _mapped(g, ipu.FLOAT, [2], "v")
    off = _mapped(g, ipu.INT, [1], "off")
    g.create_host_write("off", off)
    g.add_remote_buffer("rb", ipu.FLOAT, 2, repeats=2)
    eng = ipu.Engine(g, ipu.Copy(g.remote_buffers["rb"], v, off))
    eng.load(dev)
    eng.write_tensor("off", [2])
    with pytest.raises(ipu.StreamError, match="offset 2 is out of range for remote buffer 'rb'"):
        eng.run()
    with pytest.raises(ipu.StreamError, match="copy_to_remote_buffer: offset 5 is out of range"):
        eng.copy_to_remote_buffer(np.zeros(2), "rb", 5)
    with pytest.raises(ipu.StreamError, match="holds 2 elements of float but the host array "
                       "has 3"):
        eng.copy_to_remote_buffer(np.zeros(3), "rb", 0)
    with pytest.raises(ipu.StreamError, match="has 1; pass an array"):
        eng.copy_from_remote_buffer("rb", np.zeros(1, np.float32), 0)
    with pytest.raises(ipu.StreamError, match="no remote buffer named 'nope' \\(remote "
                       "buffers: rb\\)"):
        eng.copy_from_remote_buffer("nope", np.zeros(2, np.float32))
    with pytest.raises(ipu.StreamError, match="out of range"):
        eng.copy_to_remote_buffer(np.zeros(2), "rb", True)


def test_a_tensor_filled_from_a_remote_buffer_is_not_always_live():
    """What offloading buys: a tile variable written whole by a copy from Streaming Memory
    and last read by the copy back is live only between them (Poplar's liveness: a
    variable written whole is dead before; memory guide, "not-always-live")."""
    _, g = _graph(1)
    state = _mapped(g, ipu.FLOAT, [100], "state")
    w = _mapped(g, ipu.FLOAT, [100], "w")
    g.create_host_read("w", w)
    other = _mapped(g, ipu.FLOAT, [300], "other")  # live only before the update
    g.create_host_write("x", _mapped(g, ipu.FLOAT, [300], "x"))
    rb = g.add_remote_buffer("rb", ipu.FLOAT, 100)
    prog = ipu.Sequence(ipu.Copy(g.host_writes["x"], other))
    popops.add_in_place(g, w, other[:100], prog, "use other")
    prog.add(ipu.Copy(rb, state))
    popops.add_in_place(g, w, state, prog, "update")
    prog.add(ipu.Copy(state, rb))
    mem = ipu.compile_graph(g, [prog]).memory
    assert int(mem.categories["variables"][0]) == 4 * (100 + 300)  # w and x: host handles
    # state (400 B) and other (1,200 B) are never live together: the peak is other's
    assert int(mem.categories["not-always-live variables"][0]) == 1200
    assert mem.streaming_memory == 400


def test_remote_copies_in_a_repeat_run_and_cost_every_time():
    dev, g = _graph(1)
    v = _mapped(g, ipu.INT, [3], "v")
    g.create_host_read("v", v)
    rb = g.add_remote_buffer("rb", ipu.INT, 3, repeats=2)
    one = g.add_constant(ipu.INT, [3], [1, 1, 1], "one")
    g.set_tile_mapping(one, 0)
    body = ipu.Sequence(ipu.Copy(rb, v, 1))
    popops.add_in_place(g, v, one, body, "inc")
    body.add(ipu.Copy(v, rb, 1))
    eng = ipu.Engine(g, ipu.Repeat(5, body))
    eng.load(dev)
    eng.copy_to_remote_buffer(np.array([10, 20, 30]), "rb", 1)
    eng.run()
    np.testing.assert_array_equal(eng.copy_from_remote_buffer("rb", np.zeros(3, np.int32), 1),
                                  [15, 25, 35])
    np.testing.assert_array_equal(eng.copy_from_remote_buffer("rb", np.zeros(3, np.int32), 0),
                                  [0, 0, 0])
    remote = [s for s in eng.trace.executed_steps() if s.kind == "remote"]
    assert len(remote) == 10
    assert eng.trace.summary()["remote_exchange_cycles"] == 10 * cost.remote_cycles(12, dev.target)
