"""Grade a learner's notebook: ``python -m ipukit.grade NOTEBOOK.ipynb [--json]
[--output FILE] [--seed N] [--timeout S] [--total-timeout S] [--scratch-limit MB]``.

What is guaranteed (the README's "Grading a notebook" says it for learners):

* **The verdict comes from this process (the judge).** Before any kernel starts it
  imports the kit and every lesson's checks, and takes the exercises, their answers'
  names, cases, trials and verdicts from the kit's code (never from notebooks in
  ``exercises/`` or ``solutions/``). The learner's cells run in a fresh kernel; then, for
  each exercise, the judge draws the cases with a fresh secret seed, and one cell it adds
  runs the exercise's trial there on the learner's functions and sends back plain data
  only (:mod:`ipukit.grading.judge`). Expected results, the verdict and the score are
  worked out here, so nothing a cell does to the kernel, NumPy, IPython or the display
  machinery changes them: it can only change the data its own trial sends back. Cycle or
  byte counts that only the kernel measured earn at most a star. ``--seed N`` draws the
  same cases again (to reproduce a grade).
* **The kit is not an input the notebook can change.** Linux with Landlock: the kernel
  and all it starts can write only beneath the scratch folder (and ``/dev/null``)
  (:mod:`ipukit.grading.sandbox`), so the kit, the learner's files, ``--output`` and any
  absolute or ``../`` path are out of its reach. Elsewhere the kernel imports the kit from
  a read-only copy. In both cases the kit's files are compared with a copy in this
  process's memory before and after the notebook: a change voids the grade (exit status
  2, nothing on stdout) and the kit is restored, so nothing carries into the next one.
  Each changed or added file is first moved to a new folder of ``ipukit-grade-backups``
  beside the kit's package (else of the temporary folder), which the message names: an
  instructor's edit saved while a batch is being graded is kept there, not reverted.
* **Process hygiene.** The kernel's stdout and stderr go to ``/dev/null``; ``--json``
  prints one document, at the end; ``--output FILE`` writes it atomically (a temporary
  file in the same folder, renamed). This process is a child subreaper and ends every
  process the notebook started (detached or double-forked ones included) before it
  reports. Messages from the kernel are bounded before they are read (ZMQ's
  ``MAXMSGSIZE``); an oversized or malformed one is a named error of its cell.
  The scoreboard prints control characters as escapes (no cell's error draws on the
  terminal). ``python -m`` puts the working folder on ``sys.path``: it is taken off
  before the grader imports Jupyter's libraries, and a namesake there of a module already
  imported refuses the grade (:func:`working_folder_off_path`).
* **The scratch folder**: the notebook's folder copied with regular files only (links
  are not followed), at most ``--scratch-limit`` MB (default 200; what was left out is
  reported), within the time budget; the kernel's working folder, ``HOME`` and temporary
  folder are inside it, and so is every file it writes (each at most that size).
* **Grading ends**: every cell gets ``--timeout`` seconds (default 60) and the whole run
  ``--total-timeout`` (default 600; the copy, kernel restarts and the checks included).
  A cell keeps at most 1 MB of output.

What is not: a notebook may still pass by calling kit code that solves an exercise
(each check is designed so that the point of the exercise cannot be had that way);
without Landlock the kernel can write wherever the user can (other than the kit, which
is checked), read this process's memory where ptrace allows it, and reach its stdout;
processes started through a service (systemd, at) are not this process's descendants.

Prints a scoreboard, or with ``--json``::

    {"notebook": …, "lesson": "01", "score": 3, "max_score": 9, "seed": 123…,
     "sandbox": "landlock ABI 7" | "none: …",
     "scratch": {"limit_bytes": …, "copied_files": …, "copied_bytes": …, "left_out": […]},
     "exercises": [{"id": "01.1", "title": …, "status": "passed" | "failed" |
                    "not solved", "points": …, "max_points": …, "message": …,
                    "star": true, "cost": "★ 1,234 cycles, within the budget of …"},
                   …],
     "errors": [{"cell": 7, "shown_as": "[5]", "error": …}], "not_run": [12, 13],
     "stopped": …}

Cells are numbered as JupyterLab shows them: ``cell`` counts every cell (markdown too)
from 1, top to bottom; ``shown_as`` is the code cell's prompt after Run All. Exit status 0
when the notebook could be graded (whatever the score), 2 when not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

if __name__ == "__main__":
    # jsonschema, which nbformat imports, imports rfc3987_syntax where it is installed
    # (jupyter-events asks for jsonschema[format-nongpl]) to check "iri" formats, and that
    # builds 39 Earley parsers as it is imported: 1.2 CPU s of every grade's start
    # (python-jsonschema/jsonschema issue 1428). nbformat checks no formats, so the command
    # does without it (kit convention); an import of this module changes nothing.
    sys.modules.setdefault("rfc3987_syntax", None)

from .errors import IpuError
from .examples._cli import non_negative_int, positive_float
from .grading import judge, sandbox
from .grading.execute import TOTAL_TIMEOUT, positive_seconds, run_notebook, seconds_arg
from .grading.feedback import Result, format_scoreboard, load_lesson

#: The kit's package: what the kernel must not change.
KIT = Path(__file__).resolve().parent
#: Where the files of the kit that changed during a grade are moved before it is restored.
BACKUPS = KIT.parent / "ipukit-grade-backups"
#: Default size limit of the scratch folder (MB).
SCRATCH_LIMIT_MB = 200


class GradingError(IpuError):
    """The notebook cannot be graded (its lesson cannot be told, no kit checks for it)."""


class KitChanged(GradingError):
    """The kit's files changed while the notebook ran: the grade is void."""


def lesson_of(nb, path: Path) -> str | None:
    """The lesson number "NN": notebook metadata ``ipukit.lesson``, else the file name."""
    meta = str(nb.metadata.get("ipukit", {}).get("lesson", ""))
    if re.fullmatch(r"\d\d", meta):
        return meta
    m = re.match(r"(\d\d)_", path.name)
    return m.group(1) if m else None


def _kernel_env(area: Path, kit_copy: Path | None) -> dict:
    """The kernel's environment: HOME, caches and temporary files in the scratch area."""
    home = area / "home"
    env = {"HOME": home, "IPYTHONDIR": home / ".ipython", "MPLCONFIGDIR": home / "matplotlib",
           "XDG_CACHE_HOME": home / ".cache", "XDG_CONFIG_HOME": home / ".config",
           "XDG_DATA_HOME": home / ".local" / "share", "XDG_RUNTIME_DIR": area / "runtime",
           "JUPYTER_RUNTIME_DIR": area / "runtime", "TMPDIR": area / "tmp",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
           "IPUKIT_GRADING": "feedback"}
    for key in ("MPLCONFIGDIR", "TMPDIR", "IPYTHONDIR"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    _copy_font_cache(Path(env["MPLCONFIGDIR"]))
    if kit_copy is not None:  # the kit's read-only copy first on the kernel's path
        env["PYTHONPATH"] = os.pathsep.join(
            [str(kit_copy)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return {k: str(v) for k, v in env.items()}


def _copy_font_cache(dest: Path) -> None:
    """matplotlib's font list, so that a fresh HOME does not rebuild it (half a second)."""
    cache = os.environ.get("MPLCONFIGDIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "matplotlib")
    for found in Path(cache).glob("fontlist-*.json"):
        if found.is_file() and not found.is_symlink() and found.stat().st_size < 2**20:
            shutil.copyfile(found, dest / found.name)


def grade(path: str | Path, timeout: float = 60, total_timeout: float = TOTAL_TIMEOUT,
          seed: int | None = None, scratch_limit_mb: float = SCRATCH_LIMIT_MB,
          landlock: bool = True) -> dict:
    """Run and grade the notebook at ``path``; returns the ``--json`` dictionary.
    ``landlock=False`` grades as where Landlock is missing (for tests)."""
    import nbformat

    timeout = positive_seconds(timeout, "--timeout")
    total_timeout = positive_seconds(total_timeout, "--total-timeout")
    started = time.monotonic()
    deadline = started + total_timeout
    path = Path(path)
    nb = nbformat.read(path, as_version=4)  # the file is not touched again
    lesson = lesson_of(nb, path)
    if lesson is None:
        raise GradingError(
            f"cannot tell which lesson {path.name} belongs to: name it after its lesson "
            "(e.g. 01_mine.ipynb) or set its notebook metadata ipukit.lesson to \"01\"")
    judge.load_all()  # every lesson's checks, before any kernel starts
    if not load_lesson(lesson):
        raise GradingError(f"lesson {lesson} has no graded exercises in the kit; name the "
                           "notebook after its lesson, e.g. 01_mine.ipynb, or set its "
                           "metadata ipukit.lesson")
    seed = secrets.randbits(63) if seed is None else int(seed)
    try:
        plans = judge.plans(lesson, seed)
    except ValueError as exc:
        raise GradingError(str(exc)) from None
    kit = sandbox.KitSnapshot(KIT)
    abi = sandbox.landlock_abi() if landlock else 0
    sandbox.become_subreaper()
    before = sandbox.descendants()
    limit = int(scratch_limit_mb * 1_000_000)
    area = Path(tempfile.mkdtemp(prefix="ipukit-grade-"))
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        work = area / "work" / (path.resolve().parent.name or "notebook")
        scratch = sandbox.make_scratch(path.resolve().parent, work, limit, deadline,
                                       skip={KIT})
        (area / "runtime").mkdir()
        if abi == 0:
            kit.copy_to(area / "kit" / KIT.name)
        env = _kernel_env(area, None if abi else area / "kit")
        n = len(nb.cells)
        nb.cells += [p.cell(area / "runtime") for p in plans]
        run = run_notebook(
            nb, cwd=work, timeout=timeout, total_timeout=total_timeout, started=started,
            env=env, runtime=area / "runtime",
            judge_cells={n + k: judge.CHANNEL for k in range(len(plans))},
            launcher=sandbox.launcher(sys.executable, [area], limit, landlock=abi > 0))
    finally:  # also when the kernel would not start: it may have run the learner's code
        sandbox.end_descendants(keep=before)
        sys.dont_write_bytecode = writes_bytecode
        sandbox.remove_tree(area)
        _kit_unchanged(kit)
    not_run = set(run.not_run)
    rows = [p.result(nb.cells[n + k], ran=n + k not in not_run) for k, p in enumerate(plans)]
    exercises = [asdict(r) for r in rows]
    for row in exercises:
        row.pop("picture", None)
    errors = [{"cell": i + 1, "shown_as": _prompt(cell), "error": e}
              for i, cell in enumerate(nb.cells[:n])
              if (e := judge.first_error(cell)) is not None]
    return {"notebook": str(path), "lesson": lesson,
            "score": sum(r.points for r in rows), "max_score": sum(r.max_points for r in rows),
            "seed": seed, "sandbox": f"landlock ABI {abi}" if abi else _unprotected(landlock),
            "scratch": scratch.report(), "exercises": exercises, "errors": errors,
            "not_run": sorted(i + 1 for i in not_run if i < n), "stopped": run.stopped}


def _kit_unchanged(kit) -> None:
    """KitChanged (after putting the kit's files back) if the notebook changed them. Each
    changed or added file is first moved to a new folder of ``BACKUPS`` (else of the
    temporary folder): an instructor's edit saved during grading is kept, never reverted
    unseen."""
    changed = kit.changes()
    if changed:
        backup, why = _backup_folder()
        kept = kit.restore(backup)
        if backup and not kept:
            backup.rmdir()
        names = f"{', '.join(kept[:5])}{', ...' if len(kept) > 5 else ''}"
        moved = (f" The changed files ({names}) were moved to {backup} first: an edit saved "
                 "while grading is kept there; copy it back when no grade is running."
                 if kept else why)
        raise KitChanged(
            f"this grade is void: the kit's files changed while the notebook ran "
            f"({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''}); they were "
            f"restored from the copy taken before it ran.{moved} Grade submitted work where "
            "the kit is read-only to the kernel (Linux with Landlock).")


def _backup_folder() -> tuple[Path | None, str]:
    """A new folder for the kit's changed files, in ``BACKUPS`` (beside the kit), else in
    the temporary folder; else None and why."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        BACKUPS.mkdir(exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{stamp}-", dir=BACKUPS)), ""
    except OSError:
        pass
    try:
        return Path(tempfile.mkdtemp(prefix=f"ipukit-grade-backup-{stamp}-")), ""
    except OSError as exc:
        return None, f" No folder could be made to keep the changed files ({exc})."


def _unprotected(landlock: bool) -> str:
    why = sandbox.landlock_missing() if landlock else "Landlock was not asked for"
    return (f"none: {why}; the kernel imported the kit from a read-only copy and the kit's "
            "files were compared before and after the notebook")


def _prompt(cell) -> str:
    """The prompt JupyterLab shows left of a code cell after Run All: ``[5]``."""
    count = cell.get("execution_count")
    return f"[{count}]" if count else "[ ]"


def write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary file in the same folder, renamed over it:
    a reader sees the old file or the whole new one, never a part."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def printable(text) -> str:
    """``text`` as the scoreboard prints it: control characters (a terminal's escape
    sequences among them: a notebook's error could clear the screen and draw a score of
    its own) and unencodable ones written as escapes (``\\x1b``); line breaks kept."""
    return "".join(c if c == "\n" or (c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF)
                   else ascii(c)[1:-1] for c in str(text))


def json_text(report: dict) -> str:
    """The ``--json`` document: UTF-8 text, with what a terminal or an encoder could take
    for something else written as ``\\u`` escapes (C1 controls, lone surrogates, line
    separators: they can only stand inside its strings, where the escapes mean the same)."""
    text = json.dumps(report, indent=1, ensure_ascii=False)
    return re.sub("[\x7f-\x9f\ud800-\udfff\u2028\u2029]",
                  lambda m: f"\\u{ord(m.group()):04x}", text)


def working_folder_off_path() -> str:
    """Take the working folder off ``sys.path`` (``python -m`` puts it first, so grading
    from a submission's own folder would import its ``nbclient/`` or ``zmq.py``); returns
    "" or why grading is refused: a module imported before this ran has a namesake there
    (e.g. ``numpy.py``), which may already be the one loaded (and may have taken the
    folder off the path itself). ``python -P`` puts nothing there."""
    if sys.flags.safe_path:
        return ""
    from importlib.machinery import all_suffixes

    cwd = Path.cwd().resolve()
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != cwd]
    names = sorted({m.split(".")[0] for m in sys.modules})
    shadows = [n for n in names if (cwd / n).resolve() != KIT and any(
        (cwd / f"{n}{s}").exists() or (cwd / n / f"__init__{s}").exists()
        for s in all_suffixes())]
    if not shadows:
        return ""
    return (f"the working folder {cwd} holds {', '.join(shadows[:5])} (as a module), a "
            "namesake of a module the grader had already imported from it; run the grader "
            "from another folder, or as python -P -m ipukit.grade")


def main(argv=None, landlock: bool = True) -> int:
    p = argparse.ArgumentParser(prog="python -m ipukit.grade",
                                description=__doc__.split("\n")[0])
    p.add_argument("notebook", type=Path)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--output", type=Path, metavar="FILE",
                   help="also write the JSON report to FILE (atomically)")
    p.add_argument("--seed", type=non_negative_int, help="draw the cases of a grade again")
    p.add_argument("--timeout", type=seconds_arg, default=60,
                   help="seconds per cell, a positive number (default 60)")
    p.add_argument("--total-timeout", type=seconds_arg, default=TOTAL_TIMEOUT,
                   help=f"seconds for the whole notebook (default {TOTAL_TIMEOUT:g})")
    p.add_argument("--scratch-limit", type=positive_float, default=SCRATCH_LIMIT_MB,
                   metavar="MB", help=f"size limit of the scratch folder and of each file "
                                      f"the notebook writes (default {SCRATCH_LIMIT_MB})")
    args = p.parse_args(argv)
    if not args.notebook.is_file():
        print(printable(f"ipukit.grade: no notebook at {args.notebook}"), file=sys.stderr)
        return 2
    try:
        report = grade(args.notebook, timeout=args.timeout, total_timeout=args.total_timeout,
                       seed=args.seed, scratch_limit_mb=args.scratch_limit, landlock=landlock)
    except GradingError as exc:
        print(printable(f"ipukit.grade: could not grade {args.notebook}: {exc}"),
              file=sys.stderr)
        return 2
    except Exception as exc:  # unreadable notebook, kernel that will not start
        print(printable(f"ipukit.grade: could not grade {args.notebook}: "
                        f"{type(exc).__name__}: {exc}"), file=sys.stderr)
        return 2
    document = json_text(report)
    if args.output:
        write_atomically(args.output, document + "\n")
    if args.json:
        print(document)
        return 0
    rows = [Result(**r) for r in report["exercises"]]
    shown = [format_scoreboard(rows, f"Scoreboard for {args.notebook} (lesson "
                                     f"{report['lesson']})")]
    shown += [f"\n{r.id} {r.title}: {r.message}" for r in rows
              if r.status != "passed" and r.message]
    shown += [f"\ncell {e['cell']} {e['shown_as']} raised {e['error']}"
              for e in report["errors"]]
    if report["not_run"]:
        shown.append(f"\ncells {', '.join(map(str, report['not_run']))} did not run: "
                     f"{report['stopped']}")
    print(printable("\n".join(shown)))
    return 0


if __name__ == "__main__":
    refused = working_folder_off_path()
    if refused:
        print(printable(f"ipukit.grade: refused: {refused}"), file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
