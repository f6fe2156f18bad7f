"""Issue 12: every command line mistake exits non-zero with one clear line, quickly.

The mistakes run in-process through each CLI's ``main`` (SystemExit or a return code),
so they are fast; one subprocess run checks the whole path (no traceback on stderr) under
a memory limit.
"""

import os
import re
import resource
import subprocess
import sys
import time

import pytest

from ipukit.examples import sharded_embedding, sharded_matmul, sharded_mnist
from ipukit.tutorials import mnist_regression, tut1, tut5, tut6

CASES = [
    (tut5, ["abc", "3"], r"'abc' is not an integer"),
    (tut5, ["-4", "3"], r"-4 must be at least 1"),
    (tut5, ["0", "0"], r"0 must be at least 1"),
    (tut5, ["2000", "4"], r"numRows 2,000.*1,472 tiles"),
    (tut5, ["3"], r"numCols"),
    (mnist_regression, ["1", "nan"], r"percent=nan.*gives 0 images"),
    (mnist_regression, ["--lr", "inf"], r"unrecognized option --lr"),
    (mnist_regression, ["-1"], r"-1 must be at least 1"),
    (mnist_regression, ["0"], r"0 must be at least 1"),
    (tut1, ["foo"], r"unrecognized arguments: foo"),
    (sharded_embedding, ["--vocab-size", "1e9"],
     r"would need [\d,]+ B \(.*GiB\) per IPU, but an ipu2 IPU has 940,572,672 B"),
    (sharded_embedding, ["--sequence-length", "1e10"], r"would need [\d,]+ B .* per IPU"),
    (sharded_embedding, ["--ipus", "1000000"], r"1,000,000 IPUs.*up to 1,024"),
    (sharded_embedding, ["--ipus", "3"], r"20 is not a multiple of 3"),
    (sharded_matmul, ["--rows", "1e5", "--cols", "1e5", "--outsize", "1e5"],
     r"\[100,000, 100,000\] x \[100,000, 100,000\].*would need .* per IPU"),
    (sharded_mnist, ["--pipeline-mode", "basic", "--hidden-sizes", "1e6", "1e6"],
     r"MLP stage.*1,000,786,000,000 parameters.*would need .* per IPU"),
    (sharded_mnist, ["--pipeline-mode", "basic", "--pipeline-schedule", "cubic"],
     r"invalid choice: 'Cubic'"),
    (tut6, ["100000", "100000"], r"100,000x100,000.*would need 40,001,200,000 B"),
    (tut6, ["0", "5"], r"0 must be at least 1"),
]


@pytest.mark.parametrize("module, argv, message", CASES,
                         ids=[f"{m.__name__.split('.')[-1]} {' '.join(a)}" for m, a, _ in CASES])
def test_cli_mistake_is_one_line_and_non_zero(module, argv, message, capsys):
    t0 = time.perf_counter()
    try:
        code = module.main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code not in (0, None), err
    assert len(err.splitlines()) == 1, err
    assert "error:" in err

    assert re.search(message, err), err
    assert time.perf_counter() - t0 < 10


def test_sharded_mnist_schedule_is_case_insensitive_as_pipeline_is():
    args = sharded_mnist.parser().parse_args(["--pipeline-mode", "basic",
                                              "--pipeline-schedule", "grouped"])
    assert args.pipeline_schedule == "Grouped"
    assert sharded_mnist.build("basic", args).schedule.kind == "grouped"


def test_whole_numbers_in_e_notation_are_taken():
    args = sharded_mnist.parser().parse_args(["--pipeline-mode", "basic",
                                              "--hidden-sizes", "1e2", "64"])
    assert args.hidden_sizes == [100, 64]


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.mark.parametrize("argv", [
    ["ipukit.examples.sharded_embedding", "--vocab-size", "1e9"],
    ["ipukit.tutorials.tut6", "100000", "100000"],
])
def test_cli_process_prints_no_traceback_and_allocates_nothing_big(argv):
    t0 = time.perf_counter()
    # NumPy: a CUDA context cannot start inside a 3 GB address space (CuPy, issue 17)
    run = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                         timeout=60, preexec_fn=_limit_memory,
                         env={**os.environ, "IPUKIT_BACKEND": "numpy"})
    assert run.returncode == 2
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "would need" in run.stderr
    assert time.perf_counter() - t0 < 30
