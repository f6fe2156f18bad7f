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

What the kernel sends is bounded before it is read: ZMQ refuses any message over
:data:`MAX_MESSAGE_BYTES` (``zmq.MAXMSGSIZE``) and holds at most :data:`RECEIVE_QUEUE`
messages per channel, so whatever a cell does the client holds a bounded amount of the
kernel's data. A message that was refused for its size, or that is not a Jupyter message
the client can read, is a named error of the cell that was running
(``KernelMessageError``); a refused message cuts the kernel's link, so that kernel is
replaced as a dead one is. The kernel's stdout and stderr go to ``/dev/null``, never to
this process's. ``launcher`` (a command prefix) starts the kernel through a sandbox
(:mod:`ipukit.grading.sandbox`); ``runtime`` is where its connection file is written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import subprocess
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
#: The largest message accepted from the kernel (bytes): ZMQ refuses a bigger one before
#: reading it (kit convention: 8 MiB, thirty times the largest output of any lesson).
MAX_MESSAGE_BYTES = 8 * 2**20
#: Messages received but not yet read, per channel (ZMQ's receive high-water mark).
RECEIVE_QUEUE = 16
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


class KernelMessageError(IpuError):
    """The kernel sent what the client cannot take: a message over
    :data:`MAX_MESSAGE_BYTES` or one that is not a readable Jupyter message."""


def _malformed(msg) -> str:
    """Why ``msg`` is not a Jupyter message the client can read ("" when it is)."""
    if not isinstance(msg, dict):
        return f"a message of type {type(msg).__name__}"
    for key in ("header", "parent_header", "content", "metadata"):
        if not isinstance(msg.get(key), dict):
            return f"its {key} is not a mapping"
    if not isinstance(msg.get("msg_type"), str):
        return "it has no message type"
    return ""


def _guarded_context():
    """A ZMQ context whose sockets refuse messages over :data:`MAX_MESSAGE_BYTES` before
    reading them and hold at most :data:`RECEIVE_QUEUE` of them."""
    import zmq
    import zmq.asyncio

    context = zmq.asyncio.Context()
    context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    context.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
    return context


def _manager_class(launcher):
    """A kernel manager whose client's sockets are guarded (:func:`_guarded_context`) and
    whose kernel starts through ``launcher`` (a command prefix), if any."""
    from jupyter_client.asynchronous import AsyncKernelClient
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class GuardedKernelClient(AsyncKernelClient):
        @default("context")
        def _context_default(self):
            self._created_context = True
            return _guarded_context()

    class GuardedKernelManager(AsyncKernelManager):
        @default("client_factory")
        def _client_factory_default(self):
            return GuardedKernelClient

        def format_kernel_cmd(self, extra_arguments=None):
            return [*(launcher or ()), *super().format_kernel_cmd(extra_arguments)]

    return GuardedKernelManager


def _client_class():
    import uuid

    import zmq
    from nbclient import NotebookClient
    from nbclient.util import ensure_async

    class CappedClient(NotebookClient):
        """nbclient's client, keeping at most ``max_output_bytes`` of output per cell (of
        a judge's cell, only the outputs of its MIME type, up to the message limit), and
        turning what the kernel should not send into a named error of the cell."""

        def __init__(self, *args, max_output_bytes: int = MAX_OUTPUT_BYTES,
                     judge_cells=None, runtime=None, **kw):
            super().__init__(*args, **kw)
            self.max_output_bytes = max_output_bytes
            self.output_sizes: dict[int, int] = {}
            self.judge_cells = dict(judge_cells or {})
            self.runtime = runtime
            self.link_lost = ""
            self.monitors: list = []
            self.output_task = None  # the running cell's output poll

        def create_kernel_manager(self):
            if self.runtime is None:
                return super().create_kernel_manager()
            self.km = self.kernel_manager_class(
                kernel_name=self.kernel_name, config=self.config,
                connection_file=str(Path(self.runtime) / f"kernel-{uuid.uuid4()}.json"))
            return self.km

        async def async_start_new_kernel_client(self):
            kc = await super().async_start_new_kernel_client()
            for channel in (kc.iopub_channel, kc.shell_channel):  # a refused message ends
                self.monitors.append(  # the link: watch for that
                    (channel, channel.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)))
            return kc

        def stop_output(self) -> None:
            """End the last cell's output poll. nbclient leaves it running after a timeout
            (``CellTimeoutError`` is a ``CellControlSignal``); on the one event loop of
            :func:`run_sync` it would go on reading what later cells send, and spin without
            yielding (no budget could end it) once its kernel is gone."""
            if self.output_task is not None:
                self.output_task.cancel()
                self.output_task = None

        async def _async_handle_timeout(self, timeout, cell=None):
            self.stop_output()
            return await super()._async_handle_timeout(timeout, cell)

        async def _async_cleanup_kernel(self):
            self.stop_output()
            for channel, monitor in self.monitors:
                channel.socket.disable_monitor()
                monitor.close(linger=0)
            self.monitors = []
            await super()._async_cleanup_kernel()

        async def _async_poll_kernel_alive(self):
            from nbclient.exceptions import DeadKernelError

            while True:  # nbclient's, ending also when the kernel's link was cut
                await asyncio.sleep(1)
                if self.link_lost or self.kc is None:
                    return
                try:
                    await self._async_check_alive()
                except DeadKernelError:
                    self.task_poll_for_reply.cancel()
                    return

        # nbclient binds its synchronous wrappers to its own coroutines
        start_new_kernel_client = run_sync(async_start_new_kernel_client)
        _cleanup_kernel = run_sync(_async_cleanup_kernel)

        async def _link_cut(self) -> str:
            """Why the kernel's link was cut ("" while it holds, or when the kernel died:
            nbclient says that). A refused message disconnects a live kernel."""
            for channel, monitor in self.monitors:
                if self.link_lost or not zmq.Socket.shadow(monitor.underlying).poll(0):
                    continue
                for _ in range(20):  # a kernel that exits closes its sockets first
                    if not await ensure_async(self.km.is_alive()):
                        return ""
                    await asyncio.sleep(0.05)
                name = "iopub" if channel is self.kc.iopub_channel else "shell"
                self.link_lost = (
                    f"the kernel sent a message larger than {MAX_MESSAGE_BYTES:,} bytes on "
                    f"its {name} channel (kit convention: the grader's limit); it was "
                    "refused, which cut the kernel's link, so the kernel was replaced")
            return self.link_lost

        def malformed(self, cell, what) -> None:
            """Note (once per cell) that a message from the kernel was ignored."""
            if not any(o.get("ename") == "KernelMessageError" for o in cell.outputs):
                cell.outputs.append(_error_output(
                    "KernelMessageError", f"the kernel sent a message the grader cannot "
                    f"read ({str(what)[:200]}); it was ignored"))

        async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
            from queue import Empty

            from nbclient.exceptions import CellExecutionComplete

            self.output_task = asyncio.current_task()
            while self.kc is not None:  # None: the kernel was shut down
                if await self._link_cut():  # the cell ends as if the kernel had died, named
                    self.task_poll_for_reply.cancel()  # (the reply may never come)
                    raise KernelMessageError(self.link_lost)
                try:
                    msg = await ensure_async(self.kc.iopub_channel.get_msg(timeout=0.2))
                except Empty:
                    continue
                except Exception as exc:  # a bad signature, not JSON, no header...
                    self.malformed(cell, f"{type(exc).__name__}: {exc}")
                    continue
                problem = _malformed(msg)
                if problem:
                    self.malformed(cell, problem)
                elif msg["parent_header"].get("msg_id") == parent_msg_id:
                    try:
                        self.process_message(msg, cell, cell_index)
                    except CellExecutionComplete:
                        return
                    except Exception as exc:  # e.g. a stream without text
                        self.malformed(cell, f"{msg['msg_type']}: {type(exc).__name__}: "
                                             f"{exc}")

        def output(self, outs, msg, display_id, cell_index):
            content = msg["content"]
            if cell_index in self.judge_cells:
                return self._judge_output(outs, msg, display_id, cell_index)
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

        def _judge_output(self, outs, msg, display_id, cell_index):
            """A judge's cell keeps its errors (short) and its MIME type's display data."""
            content = msg["content"]
            if msg["msg_type"] == "error":
                content["evalue"] = str(content.get("evalue", ""))[:10_000]
                content["traceback"] = []
                return super().output(outs, msg, display_id, cell_index)
            data = content.get("data")
            if msg["msg_type"] != "display_data" or not isinstance(data, dict) or \
                    self.judge_cells[cell_index] not in data:
                return None
            if sum(o.get("output_type") == "display_data" for o in outs) >= 2:
                return None  # two already say it came more than once: the rest is dropped
            content["data"] = {self.judge_cells[cell_index]: data[self.judge_cells[cell_index]]}
            return super().output(outs, msg, display_id, cell_index)

    return CappedClient


def run_notebook(nb, cwd: str | Path = ".", timeout: float = 60, kernel_name: str = "python3",
                 env: dict | None = None, total_timeout: float | None = None,
                 max_output_bytes: int = MAX_OUTPUT_BYTES, launcher=None,
                 runtime: str | Path | None = None, judge_cells=None,
                 started: float | None = None) -> Run:
    """Execute ``nb`` (a NotebookNode, changed in place) in a fresh kernel; see the module.
    ``judge_cells`` maps the index of each cell the grader added to the one MIME type kept
    from its outputs (besides its error); those cells are never replayed. ``started``: when
    the total time began (``time.monotonic()``; default now)."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    timeout = positive_seconds(timeout, "timeout")
    if total_timeout is not None:
        total_timeout = positive_seconds(total_timeout, "total timeout")
    started = time.monotonic() if started is None else started
    deadline = math.inf if total_timeout is None else started + total_timeout

    def left() -> float:
        return deadline - time.monotonic()

    def cell_timeout(cell=None) -> float:
        return max(0.01, min(timeout, left()))

    result = Run(nb)
    judge_cells = dict(judge_cells or {})
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    done: list[int] = []  # cells that ran without an error, replayed in a fresh kernel
    kernel_env = {**os.environ, **(env or {})}
    client_class = _client_class()
    manager_class = _manager_class(launcher)
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
                              max_output_bytes=max_output_bytes, judge_cells=judge_cells,
                              runtime=runtime, kernel_manager_class=manager_class)
        started, waiting = False, len(code)
        try:
            with client.setup_kernel(env=kernel_env, cwd=str(cwd), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL):
                started = True
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
                        cell.outputs.append(
                            _error_output("KernelMessageError", client.link_lost)
                            if client.link_lost else
                            _error_output("DeadKernelError", "the kernel died"))
                        break
                    except Exception as exc:  # what the kernel sent broke the client
                        cell.outputs.append(_error_output(
                            "KernelMessageError", client.link_lost or f"the kernel sent what "
                            f"the grader cannot read ({type(exc).__name__}: {str(exc)[:200]}); "
                            "the kernel was replaced"))
                        break
                    if index not in judge_cells and \
                            not any(o.output_type == "error" for o in cell.outputs):
                        done.append(index)
        except Exception as exc:  # a kernel that did not start (in time), or broke
            if not started and result.restarts == 0 and left() > 0:
                raise  # the first kernel: the notebook cannot be run here
            if left() > 0 and (not started or len(code) == waiting):
                result.stopped = f"the kernel could not be restarted ({type(exc).__name__})"
                break
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
    """Wait for the shell reply to ``msg_id``, skipping other replies (and what is not a
    readable message)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            reply = run_sync(client.kc.get_shell_msg)(timeout=left)
        except Empty:
            return False
        except Exception:  # not a readable message: skipped
            continue
        if not _malformed(reply) and reply["parent_header"].get("msg_id") == msg_id:
            return True


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
