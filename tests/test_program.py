import io

import numpy as np
import pytest

import ipukit as ipu

from .helpers import run, small


class Step(ipu.Vertex):
    """i += 1; more = i < limit."""

    i = ipu.InOut(ipu.INT)
    limit = ipu.Input(ipu.INT)
    more = ipu.Output(ipu.BOOL)

    def compute(self):
        self.i[...] += 1
        self.more[...] = self.i < self.limit


def counter_graph():
    dev, g = small(tiles=1)
    i = g.add_variable(ipu.INT, [1], "i")
    limit = g.add_constant(ipu.INT, [1], [5], "limit")
    more = g.add_variable(ipu.BOOL, [1], "more")
    for t in (i, limit, more):
        g.set_tile_mapping(t, 0)
    cs = g.add_compute_set("step")
    g.add_vertex(cs, Step, {"i": i[0], "limit": limit[0], "more": more[0]}, tile=0)
    g.create_host_read("i", i)
    return dev, g, cs, i, more


def test_repeat_while_true_runs_until_the_predicate_is_false():
    dev, g, cs, i, more = counter_graph()
    eng = run(g, ipu.RepeatWhileTrue(ipu.Execute(cs), more, ipu.Sequence()), dev)
    assert eng.read_tensor("i")[0] == 5
    names = [s.name for s in eng.trace.executed_steps()]
    assert names.count("step") == 5


def test_repeat_and_if():
    dev, g, cs, i, more = counter_graph()
    prog = ipu.Sequence(ipu.Repeat(3, ipu.Execute(cs)),
                        ipu.If(more, ipu.Execute(cs), ipu.Sequence()))
    eng = run(g, prog, dev)
    assert eng.read_tensor("i")[0] == 4  # 3 repeats, then more == (3 < 5) is true: one more
    eng.run(0)
    assert eng.read_tensor("i")[0] == 7  # 5, 6, 7; then 7 < 5 is false: no extra step


def test_a_loop_that_never_ends_is_stopped_with_a_clear_error():
    dev, g, cs, i, more = counter_graph()
    never = g.add_constant(ipu.BOOL, [1], [True], "always")
    g.set_tile_mapping(never, 0)
    eng = ipu.Engine(g, ipu.RepeatWhileTrue(ipu.Sequence(), never, ipu.Sequence()),
                     max_loop_iterations=100)
    eng.load(dev)
    with pytest.raises(ipu.ProgramError, match="'always' is still true"):
        eng.run()


@pytest.mark.parametrize("dtype, values, text", [
    (ipu.FLOAT, [1.0, 1.5, 2.0, 2.5], "v1-debug: [1.0000000 1.5000000 2.0000000 2.5000000]"),
    (ipu.INT, list(range(10)), "v1-debug: [0 1 2 3 4 5 6 7 8 9]"),
    # popart tests/integration/printtensor.py (test_basic): Poplar's PrintTensorFmt pads
    # elements to a common width, read from captured.err
    (ipu.INT, [5, 7, 9], "v1-debug: [5 7 9]"),
    (ipu.INT, [6, 9, 12], "v1-debug: [ 6  9 12]"),
])
def test_print_tensor_uses_poplars_format(capsys, dtype, values, text):
    dev, g = small(tiles=1)
    c = g.add_constant(dtype, [len(values)], values, "c")
    g.set_tile_mapping(c, 0)
    run(g, ipu.PrintTensor("v1-debug", c), dev)
    out = capsys.readouterr()
    assert out.err.strip() == text and out.out == ""  # stderr, as Poplar prints


def test_print_tensor_2d(capsys):
    dev, g = small(tiles=1)
    c = g.add_constant(ipu.FLOAT, [2, 2], [5, 4.5, 4, 3.5], "v3")
    g.set_tile_mapping(c, 0)
    run(g, ipu.PrintTensor(c), dev)
    rows = ["v3: [", "  [5.0000000 4.5000000]", "  [4.0000000 3.5000000]", "]"]
    assert capsys.readouterr().err.splitlines() == rows


# popart willow/include/popart/printtensorfmt.hpp documents Poplar's PrintTensorFmt
# defaults: summariseThreshold 1000, edgeItems 3, maxLineWidth 75, digits 8, space
# separator, square brackets.
def test_print_tensor_fmt_defaults_are_poplars():
    f = ipu.PrintTensorFmt()
    assert (f.summarise_threshold, f.edge_items, f.max_line_width, f.digits) == (1000, 3, 75, 8)
    assert (f.float_format, f.separator, f.open_bracket, f.close_bracket) == \
        ("auto", " ", "[", "]")


def test_over_1000_elements_are_summarised_with_3_edge_items():
    assert ipu.format_tensor("t", np.arange(1000, dtype=np.int32)).count("...") == 0
    text = ipu.format_tensor("t", np.arange(1001, dtype=np.int32))
    assert text == "t: [   0    1    2 ...  998  999 1000]"
    rows = ipu.format_tensor("m", np.arange(2000, dtype=np.int32).reshape(40, 50)).splitlines()
    assert rows[1] == "  [   0    1    2 ...   47   48   49]" and rows[4] == "  ..."
    assert len(rows) == 2 + 7


def test_lines_are_split_at_75_characters():
    text = ipu.format_tensor("t", np.arange(40, dtype=np.int32))
    lines = text.removeprefix("t: ").splitlines()
    assert len(lines) == 2 and all(len(line) <= 75 for line in lines)
    assert lines[1].startswith(" 24 25")  # continuation indented past the bracket
    numbers = [int(x) for x in text.removeprefix("t: ").strip("[]").split()]
    assert numbers == list(range(40))


def test_print_tensor_takes_a_format(capsys):
    dev, g = small(tiles=1)
    c = g.add_constant(ipu.INT, [6], [1, 2, 3, 4, 5, 600], "c")
    g.set_tile_mapping(c, 0)
    fmt = ipu.PrintTensorFmt(summarise_threshold=4, edge_items=1, separator=",",
                             open_bracket="{", close_bracket="}")
    run(g, ipu.PrintTensor("c", c, fmt), dev)
    assert capsys.readouterr().err == "c: {  1,...,600}\n"
    with pytest.raises(ipu.ProgramError, match="edge_items must be a non-negative int"):
        ipu.PrintTensorFmt(edge_items=-1)


def test_print_tensor_stream_can_be_set():
    dev, g = small(tiles=1)
    c = g.add_constant(ipu.INT, [2], [1, 2], "c")
    g.set_tile_mapping(c, 0)
    eng = ipu.Engine(g, ipu.PrintTensor("c", c))
    eng.load(dev)
    buf = io.StringIO()
    eng.set_print_tensor_stream(buf)
    eng.run()
    assert buf.getvalue() == "c: [1 2]\n"


def test_bad_programs_are_refused_when_built():
    dev, g = small(tiles=1)
    v = g.add_variable(ipu.INT, [2], "pair")
    with pytest.raises(ipu.ProgramError, match="Sequence expects a program"):
        ipu.Sequence(ipu.Sequence(), "oops")
    with pytest.raises(ipu.ProgramError, match="one-element tensor, got pair"):
        ipu.If(v, ipu.Sequence())
    with pytest.raises(ipu.ProgramError, match="non-negative"):
        ipu.Repeat(-1, ipu.Sequence())
    with pytest.raises(ipu.ProgramError, match="Execute expects a ComputeSet"):
        ipu.Execute(v)


def test_copy_needs_same_type_and_size():
    dev, g = small(tiles=1)
    a = g.add_variable(ipu.FLOAT, [3], "a")
    b = g.add_variable(ipu.FLOAT, [4], "b")
    c = g.add_variable(ipu.INT, [3], "c")
    for t in (a, b, c):
        g.set_tile_mapping(t, 0)
    with pytest.raises(ipu.ProgramError, match=r"'a' \(float \(3,\)\) to 'b' \(float \(4,\)\)"):
        ipu.Engine(g, ipu.Copy(a, b))
    with pytest.raises(ipu.ProgramError, match="same type"):
        ipu.Engine(g, ipu.Copy(a, c))
    eng = run(g, ipu.Copy(a, b[1:]), dev)  # same size through a view is fine
    mem = eng.trace.memory.categories  # a is read before it is written, no program uses c:
    assert mem["variables"][0] == 3 * 4 + 3 * 4  # always live; b: only while it is written
    assert mem["not-always-live variables"][0] == 4 * 4
    with pytest.raises(ipu.ProgramError, match="aliased"):
        ipu.Engine(g, ipu.Copy(a, b[0:1].broadcast([3])))
