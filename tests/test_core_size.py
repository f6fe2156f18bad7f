"""The emulator core stays small enough to read in an afternoon (DESIGN.md, issue 13)."""

import ast
import io
import tokenize
from pathlib import Path

CORE = ("target", "tensor", "vertex", "graph", "program", "compile", "engine", "trace",
        "cost", "timeline")
#: Issue 13 asks for about 1,700 code lines (DESIGN.md: about 1,500). Issues 12, 17 and 18
#: (error checks, regions, PrintTensorFmt, out-of-memory reporting) took the core to 2,358
#: lines; two rounds of simplification brought it to 1,882, with the printing of tensors,
#: the profile summary, the out-of-memory report and the timeline's measures in their own
#: modules (print_tensor, profile_summary, memory_report, timeline_measures). The last
#: 180 lines are open work; until then this guard stops the core growing again.
LIMIT = 1_900


def code_lines(source: str) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENDMARKER)
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docstrings)
    return len(lines)


def test_code_lines_counts_only_code():
    src = '"""Doc\n\nstring."""\n\n# comment\nx = (1,\n     2)  # trailing\n\n\ndef f():\n' \
          '    """Doc."""\n    return x\n'
    assert code_lines(src) == 4  # x = (1, / 2) / def f(): / return x


def test_the_core_is_under_the_limit():
    root = Path(__file__).resolve().parents[1] / "ipukit"
    sizes = {m: code_lines((root / f"{m}.py").read_text()) for m in CORE}
    total = sum(sizes.values())
    assert total <= LIMIT, f"the core has {total} code lines (limit {LIMIT}): {sizes}"
