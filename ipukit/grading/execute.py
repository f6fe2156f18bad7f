"""Run a notebook in a fresh kernel, cell by cell, surviving errors and endless loops.

Used by the grader (``python -m ipukit.grade``: the learner's file is read, never
written) and by authors to store a fresh run's outputs::

    python -m ipukit.grading.execute notebooks/01_ipu_and_bsp.ipynb   # runs and saves

It saves through :func:`ipukit.grading.notebook_file.save_notebook` (a temporary file renamed
over the notebook, never one changed while it ran, never half written), with the kernel's
``kernelspec`` and ``language_info`` stored so that JupyterLab opens it without marking it
unsaved.

Every code cell gets ``timeout`` seconds and the whole run ``total_timeout`` seconds
(kernel starts and restarts included); both must be positive numbers of seconds. An
exception is recorded as the cell's error output and execution goes on (as
``allow_errors``); a cell that runs too long is interrupted, and when the kernel does not
stop (or dies) it is killed, the earlier cells that ran without an error are re-run
silently in a fresh kernel (so imports and definitions hold again; the cell that stopped
the kernel is skipped) and the remaining cells run there. When the total time is spent,
the running cell is stopped and the cells after it do not run (:attr:`Run.not_run`).
A cell keeps at most ``max_output_bytes`` of output (then a note says the rest was
dropped), so a cell that prints without end cannot exhaust the grader's memory. The
kernel is the ``python3`` kernel of the running environment (as nbval's
``--nbval-current-env``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty

import nbformat
from jupyter_core.utils import run_sync

from ..errors import IpuError
from .notebook_file import NotebookFileError, read_notebook, save_notebook, stamp_kernel

#: Seconds to wait for an interrupted cell to stop before replacing the kernel.
INTERRUPT_GRACE = 3.0
#: Output kept per cell (characters of text and data); the rest is dropped with a note.
MAX_OUTPUT_BYTES = 1_000_000
#: Whole-notebook budget of the grader (seconds).
TOTAL_TIMEOUT = 600.0
#: nbclient logs every timeout as an error; the outputs already say it.
_QUIET = logging.getLogger("ipukit.grading.execute")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class TimeLimitError(IpuError, ValueError):
    """A time limit that is not a positive, finite number of seconds."""


def positive_seconds(value, name: str = "timeout") -> float:
    """``value`` as a positive, finite number of seconds, or :class:`TimeLimitError`."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise TimeLimitError(f"{name} must be a number of seconds, got {value!r}") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise TimeLimitError(
            f"{name} must be a positive number of seconds, got {value!r} (0, negative, nan "
            "and inf would let an endless loop run for ever); e.g. 60 or 2.5")
    return seconds


@dataclass
class Run:
    """What :func:`run_notebook` did: the notebook (with outputs), the code cells that did
    not run because the total time was spent, and why it stopped early (or "")."""

    nb: object
    not_run: list[int] = field(default_factory=list)
    stopped: str = ""
    restarts: int = 0


def _error_output(ename: str, evalue: str):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])


def _size(content: dict) -> int:
    if "text" in content:
        return len(content["text"])
    data = content.get("data", {})
    return sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in data.values())


def _client_class():
    from nbclient import NotebookClient

    class CappedClient(NotebookClient):
        """nbclient's client, keeping at most ``max_output_bytes`` of output per cell."""

        def __init__(self, *args, max_output_bytes: int = MAX_OUTPUT_BYTES, **kw):
            super().__init__(*args, **kw)
            self.max_output_bytes = max_output_bytes
            self.output_sizes: dict[int, int] = {}

        def output(self, outs, msg, display_id, cell_index):
            content = msg["content"]
            if msg["msg_type"] == "error":  # always kept (the cell raised), but short
                content["evalue"] = str(content.get("evalue", ""))[:10_000]
                content["traceback"] = list(content.get("traceback", []))[-50:]
                return super().output(outs, msg, display_id, cell_index)
            used = self.output_sizes.get(cell_index, 0)
            if used > self.max_output_bytes:
                return None  # already over: dropped
            size = _size(content)
            self.output_sizes[cell_index] = used + size
            if used + size <= self.max_output_bytes:
                return super().output(outs, msg, display_id, cell_index)
            if msg["msg_type"] == "stream":  # keep the text up to the limit
                content["text"] = content["text"][:self.max_output_bytes - used]
                super().output(outs, msg, display_id, cell_index)
            note = nbformat.v4.new_output(
                "stream", name="stderr",
                text=f"\n[output truncated: this cell's output passed "
                     f"{self.max_output_bytes:,} characters; the rest was dropped]\n")
            outs.append(note)
            return note

    return CappedClient


def run_notebook(nb, cwd: str | Path = ".", timeout: float = 60, kernel_name: str = "python3",
                 env: dict | None = None, total_timeout: float | None = None,
                 max_output_bytes: int = MAX_OUTPUT_BYTES) -> Run:
    """Execute ``nb`` (a NotebookNode, changed in place) in a fresh kernel; see the module."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    timeout = positive_seconds(timeout, "timeout")
    if total_timeout is not None:
        total_timeout = positive_seconds(total_timeout, "total timeout")
    deadline = math.inf if total_timeout is None else time.monotonic() + total_timeout

    def left() -> float:
        return deadline - time.monotonic()

    def cell_timeout(cell=None) -> float:
        return max(0.01, min(timeout, left()))

    result = Run(nb)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    done: list[int] = []  # cells that ran without an error, replayed in a fresh kernel
    kernel_env = {**os.environ, **(env or {})}
    client_class = _client_class()
    out_of_time = (f"the notebook's total time limit of {total_timeout:g} s was reached"
                   if total_timeout is not None else "")
    while code:  # one pass per kernel; a stuck or dead kernel is replaced by a fresh one
        if left() <= 0:
            result.stopped = out_of_time
            break
        client = client_class(nb, kernel_name=kernel_name, timeout_func=cell_timeout,
                              allow_errors=True, record_timing=False,
                              interrupt_on_timeout=False, shutdown_kernel="immediate",
                              startup_timeout=max(1, math.ceil(min(60, left()))),
                              resources={"metadata": {"path": str(cwd)}}, log=_QUIET,
                              extra_arguments=["--IPKernelApp.log_level=ERROR"],
                              max_output_bytes=max_output_bytes)
        try:
            with client.setup_kernel(env=kernel_env, cwd=str(cwd)):
                for index in done:  # restore imports and definitions; outputs discarded
                    if not _replay(client, nb.cells[index].source, cell_timeout()):
                        _interrupt(client)  # it ran too long this time: stop replaying
                        break
                while code and left() > 0:
                    index = code.pop(0)
                    cell = nb.cells[index]
                    try:
                        client.execute_cell(cell, index)
                    except CellTimeoutError:
                        spent = left() <= 0.01
                        cell.outputs.append(_error_output(
                            "CellTimeoutError",
                            f"the cell was stopped: {out_of_time}" if spent else
                            f"the cell ran longer than {timeout:g} s and was stopped (an "
                            "endless loop?)"))
                        if spent or not _interrupt(client):
                            break
                    except DeadKernelError:
                        cell.outputs.append(_error_output("DeadKernelError", "the kernel died"))
                        break
                    if not any(o.output_type == "error" for o in cell.outputs):
                        done.append(index)
        except RuntimeError:  # the kernel did not start in time
            if left() > 0:
                raise
        if code:
            result.restarts += 1
    if code:
        result.stopped = result.stopped or out_of_time
        result.not_run = code
    return result


def execute(nb, cwd: str | Path = ".", timeout: float = 60, kernel_name: str = "python3",
            env: dict | None = None, total_timeout: float | None = None):
    """Execute ``nb`` (a NotebookNode, changed in place and returned) in a fresh kernel."""
    return run_notebook(nb, cwd, timeout, kernel_name, env, total_timeout).nb


def _replay(client, source: str, timeout: float) -> bool:
    """Run ``source`` silently in the kernel; False if it does not finish in ``timeout``."""
    msg_id = client.kc.execute(source, silent=True, store_history=False)
    return _wait_reply(client, msg_id, timeout)


def _wait_reply(client, msg_id: str, timeout: float) -> bool:
    """Wait for the shell reply to ``msg_id``, skipping other replies."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = max(0.01, deadline - time.monotonic())
            reply = run_sync(client.kc.get_shell_msg)(timeout=left)
            if reply["parent_header"].get("msg_id") == msg_id:
                return True
    except Empty:
        return False


def _interrupt(client) -> bool:
    """Interrupt a cell that timed out; False if the kernel does not stop in time."""
    run_sync(client.km.interrupt_kernel)()
    # skip the interrupted cell's reply; wait for ours (none: it ignores interrupts)
    return _wait_reply(client, client.kc.execute("pass", store_history=False),
                       INTERRUPT_GRACE)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ipukit.grading.execute",
                                description="Run notebooks in fresh kernels and save them "
                                            "with their outputs (for authors).")
    p.add_argument("notebooks", nargs="+", type=Path)
    p.add_argument("--timeout", type=seconds_arg, default=120, help="seconds per cell")
    args = p.parse_args(argv)
    failed = 0
    for path in args.notebooks:
        try:
            nb, checked = read_notebook(path)
            execute(nb, cwd=path.parent, timeout=args.timeout)
            save_notebook(stamp_kernel(nb), path, checked, "python -m ipukit.grading.execute")
        except NotebookFileError as exc:
            print(exc)
            failed += 1
            continue
        errors = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and any(
            o.output_type == "error" for o in c.outputs)]
        print(f"{path}: {len(nb.cells)} cells" + (f", ERRORS in cells {errors}" if errors
                                                   else ", no errors"))
        failed += bool(errors)
    return 1 if failed else 0


def seconds_arg(text: str) -> float:
    """argparse type: positive seconds (argparse turns the error into exit status 2)."""
    try:
        return positive_seconds(text, "the time limit")
    except TimeLimitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


if __name__ == "__main__":
    sys.exit(main())
