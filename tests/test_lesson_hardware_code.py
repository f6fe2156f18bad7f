"""Every lesson shows, next to the ipukit code, what a learner writes on hardware (issue 18).

Lessons 01-06 show Poplar C++ (a Graph, an Engine, codelets where they have vertices);
07-12 show PopTorch and/or TensorFlow for IPU; 13 shows TensorFlow for IPU next to
``torch.distributed.pipelining``. Each such cell labels what ipukit does
differently with the kit's marker, "(kit convention)". The code is not compiled here: at
least the Python parses and the C++ brackets balance.
"""

import ast
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[01][0-9]_*.ipynb"))

#: API names each lesson's hardware cell must show (Graphcore's spelling).
MUST_SHOW = {
    "01": ["addCodelets", "Graph graph", "Engine engine", "setTileMapping", "addVertex"],
    "02": ["addVariable", "addConstant", "PrintTensor", "addHostToDeviceFIFO",
           "connectStream"],
    "03": ["addCodelets", "class SumVertex : public Vertex", "setPerfEstimate",
           "setInitialValue"],
    "04": ["addComputeSet", "program::Execute", "program::Copy"],
    "05": ["popops::addCodelets", "poplin::matMul", "mapTensorLinearly",
           "printProfileSummary"],
    "06": ["program::Repeat", "IPUInfeedQueue", "loops.repeat", "deviceIterations"],
    "07": ["poptorch.Block", "poptorch.ShardedExecution", "poptorch.trainingModel",
           "ipu_shard"],
    "08": ["pipelining_ops.pipeline", "optimizer_function", "IPUConfig",
           "poptorch.PipelinedExecution", "gradientAccumulation"],
    "09": ["allow_recompute", "RecomputationMode", "offload_weight_update_variables",
           "setOptimizerLocation"],
    "10": ["replicationFactor", "auto_select_ipus", "CrossReplicaOptimizer",
           "replicated_optimizer_state_sharding"],
    "11": ["computational_stages", "device_mapping=[0, [1, 2], 2]", "_ALL_DEVICES"],
    "12": ["_ALL_DEVICES", "pipelining_ops.pipeline", "outfeed_loss"],
    "13": ["device_mapping=[0, 1, 2, 3, 0, 1, 2, 3]", "PipelineSchedule.Grouped",
           "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble",
           "ScheduleDualPipeV"],
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_lesson_shows_the_graphcore_code(path):
    nb = nbformat.read(path, as_version=4)
    cells = [c.source for c in nb.cells
             if c.cell_type == "markdown" and c.source.startswith("### On hardware")]
    assert len(cells) == 1, f"{path.name}: one '### On hardware' cell"
    text = cells[0]
    fence = "```cpp" if path.name < "07" else "```python"
    assert fence in text and text.count("```") % 2 == 0
    for name in MUST_SHOW[path.name[:2]]:
        assert name in text, f"{path.name}: the hardware code does not show {name!r}"
    assert re.search(r"\(kit\s+convention[):]", text), f"{path.name}: label the kit's difference"


FENCE = re.compile(r"```(python|cpp)\n(.*?)```", re.S)


def snippets():
    for path in NOTEBOOKS:
        for c in nbformat.read(path, as_version=4).cells:
            if c.cell_type == "markdown" and c.source.startswith("### On hardware"):
                for n, (lang, code) in enumerate(FENCE.findall(c.source)):
                    yield pytest.param(lang, code, id=f"{path.name[:2]}-{n}-{lang}")


def unbalanced(code: str) -> str | None:
    """The first bracket that does not match, ignoring comments, strings and chars."""
    code = re.sub(r'//[^\n]*|/\*.*?\*/|"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', "", code,
                  flags=re.S)
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    for i, ch in enumerate(code):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return f"{ch!r} at {code[max(0, i - 40):i + 1]!r}"
    return f"unclosed {stack[-1]!r}" if stack else None


def test_the_bracket_check_can_fail():
    assert unbalanced("int f() { return g(1]; }") is not None
    assert unbalanced("int f() { return g(1);") == "unclosed '{'"
    assert unbalanced('f("{"); // }') is None


@pytest.mark.parametrize("lang, code", list(snippets()))
def test_hardware_code_is_well_formed(lang, code):
    if lang == "python":
        ast.parse(code)
    else:
        assert unbalanced(code) is None, unbalanced(code)
