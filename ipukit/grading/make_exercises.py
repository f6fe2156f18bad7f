"""Generate ``exercises/`` from ``solutions/``, or check that they are in sync.

    python -m ipukit.grading.make_exercises             # regenerate and run exercises/
    python -m ipukit.grading.make_exercises 01_ipu_and_bsp.ipynb   # just this lesson's
    python -m ipukit.grading.make_exercises --check     # exit 1 if the generator changed

Each ``solutions/NN_topic_solutions.ipynb`` becomes ``exercises/NN_topic_exercises.ipynb``
(the lesson is ``notebooks/NN_topic.ipynb``): solution regions become ``raise
NotImplementedError`` stubs (see :mod:`ipukit.grading.markers`), and the exercise notebook
is then run in a fresh kernel so that it is stored with the outputs a learner sees on a
first run (every check saying "not solved yet"), and with the kernel's metadata, so that
opening it in JupyterLab does not mark it unsaved. ``--no-execute`` skips the run.

A learner's work is never lost. Each exercise notebook records in its metadata
(``ipukit.generated_content_sha256``) a hash of everything in it but the kit's own outputs
(:func:`learner_content`). A notebook that no longer matches it was edited (a learner's
work): it is not overwritten; ``--force`` first saves it beside it as
``backup-YYYYMMDD-HHMMSS-NN_topic_exercises.ipynb``. The notebook is saved through
:func:`ipukit.grading.notebook_file.save_notebook`: if it changes while the new one runs,
it is kept (and a copy saved), never overwritten.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import nbformat

from .markers import strip_solutions
from .notebook_file import (
    NotebookFileError,
    NotebookUnreadable,
    back_up,
    parse_notebook,
    read_notebook,
    save_notebook,
    stamp_kernel,
)

#: Where the hash of the generated notebook is kept: ``nb.metadata["ipukit"][HASH_KEY]``.
HASH_KEY = "generated_content_sha256"
#: What exercise notebooks generated before the content hash record: a hash of their cell
#: types and sources only (:func:`cells_hash`); still read, never written.
LEGACY_HASH_KEY = "generated_sha256"
#: Notebook metadata that is not the learner's work, left out of the hash: JupyterLab
#: rewrites ``kernelspec`` and ``language_info`` from the running kernel when it opens a
#: notebook (another Python version changes ``language_info.version``), and ``widgets``
#: holds widget state it saves with the outputs.
IGNORED_METADATA = ("kernelspec", "language_info", "widgets")
#: Cell metadata that is not the learner's work: ``execution`` holds the run's timings
#: (JupyterLab's "record timing", nbclient), which change with every run, like outputs.
IGNORED_CELL_METADATA = ("execution",)
COMMAND = "python -m ipukit.grading.make_exercises"


def exercise_name(name: str) -> str:
    """The exercise notebook of a lesson's solution (or lesson) notebook, by name.

    >>> exercise_name("08_pipelining_schedules_solutions.ipynb")
    '08_pipelining_schedules_exercises.ipynb'
    """
    return lesson_name(name).removesuffix(".ipynb") + "_exercises.ipynb"


def solution_name(name: str) -> str:
    """The solution notebook of a lesson's exercise (or lesson) notebook, by name (the
    inverse of :func:`exercise_name`)."""
    return lesson_name(name).removesuffix(".ipynb") + "_solutions.ipynb"


def lesson_name(name: str) -> str:
    """The lesson notebook (in ``notebooks/``) of a solution or exercise notebook's name.

    >>> lesson_name("08_pipelining_schedules_exercises.ipynb")
    '08_pipelining_schedules.ipynb'
    """
    stem = name.removesuffix(".ipynb")
    return stem.removesuffix("_solutions").removesuffix("_exercises") + ".ipynb"


def exercise_notebook(solution):
    """The exercise version of a solution notebook (a new NotebookNode, no outputs)."""
    nb = nbformat.from_dict(solution)  # deep copy
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source, where=f"cell {i}")
            cell.outputs, cell.execution_count = [], None
    meta = nb.metadata.setdefault("ipukit", {})
    meta["generated_from"] = "solutions"
    meta.pop(LEGACY_HASH_KEY, None)
    return record_hash(nb)


def record_hash(nb):
    """Record :func:`content_hash` in ``nb``'s metadata (changed in place and returned)."""
    nb.metadata.setdefault("ipukit", {})[HASH_KEY] = content_hash(nb)
    return nb


def learner_content(nb) -> dict:
    """Everything in ``nb`` that is the learner's to change, as plain data: each cell's
    type, source, attachments (pasted images) and metadata (tags included), and the
    notebook's metadata; not outputs, execution counts, cell ids, the format's version,
    the recorded hashes nor what JupyterLab and the kernel write themselves
    (:data:`IGNORED_METADATA`, :data:`IGNORED_CELL_METADATA`)."""
    meta = {k: v for k, v in nb.metadata.items() if k not in IGNORED_METADATA}
    meta["ipukit"] = {k: v for k, v in meta.get("ipukit", {}).items()
                      if k not in (HASH_KEY, LEGACY_HASH_KEY)}
    cells = [{"cell_type": c.cell_type, "source": c.source,
              "attachments": c.get("attachments") or {},
              "metadata": {k: v for k, v in c.metadata.items()
                           if k not in IGNORED_CELL_METADATA}} for c in nb.cells]
    return {"cells": cells, "metadata": meta}


def content_hash(nb) -> str:
    """SHA-256 of :func:`learner_content`."""
    text = json.dumps(learner_content(nb), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def cells_hash(nb) -> str:
    """SHA-256 of the notebook's cell types and sources (the hash that exercise notebooks
    generated before :func:`content_hash` record under ``generated_sha256``)."""
    return hashlib.sha256(json.dumps([(c.cell_type, c.source) for c in nb.cells]).encode()
                          ).hexdigest()


def recorded_hash(nb) -> str | None:
    """The content hash ``nb`` was generated with, if it records one."""
    return nb.metadata.get("ipukit", {}).get(HASH_KEY)


def _besides_sources(nb) -> dict:
    content = learner_content(nb)
    for cell in content["cells"]:
        cell["source"] = ""
    return content


def edited(nb, fresh=None) -> bool:
    """Whether ``nb`` is not exactly as the generator made it (outputs aside): it differs
    from the hash it records, or records none. A notebook generated before the content
    hash records the hash of its cell sources only: it counts as unedited only when they
    match it and everything else matches ``fresh``, the generator's output from the
    kit's solution now (without ``fresh``, it counts as edited)."""
    meta = nb.metadata.get("ipukit", {})
    if HASH_KEY in meta:
        return meta[HASH_KEY] != content_hash(nb)
    if LEGACY_HASH_KEY in meta and meta[LEGACY_HASH_KEY] == cells_hash(nb):
        return fresh is None or _besides_sources(nb) != _besides_sources(fresh)
    return True


def generated_as(nb, fresh) -> bool:
    """Whether the hash ``nb`` records is that of ``fresh`` (whatever was edited since)."""
    meta = nb.metadata.get("ipukit", {})
    if HASH_KEY in meta:
        return meta[HASH_KEY] == content_hash(fresh)
    return meta.get(LEGACY_HASH_KEY, "") == cells_hash(fresh)


def solution_of(path: Path, solutions: Path | None = None) -> Path:
    """The solution notebook that the exercise notebook at ``path`` is generated from
    (``solutions`` defaults to the ``solutions/`` folder beside its folder)."""
    path = Path(path)
    folder = path.parent.parent / "solutions" if solutions is None else Path(solutions)
    return folder / solution_name(path.name)


def edited_exercise(path: str | Path, solutions: Path | None = None) -> bool:
    """Whether the notebook at ``path`` (in ``exercises/``) is a learner's work: anything
    but a kit's exercise notebook exactly as generated (:func:`edited`). ``make test``,
    ``--check`` and the regeneration all use this one definition. A file that is not a
    readable notebook is the learner's too."""
    try:
        nb = read_notebook(path)[0]
    except NotebookUnreadable:
        return True
    if LEGACY_HASH_KEY not in nb.metadata.get("ipukit", {}):
        return edited(nb)
    solution = solution_of(path, solutions)
    fresh = None
    if solution.is_file():
        fresh = exercise_notebook(nbformat.read(solution, as_version=4))
    return edited(nb, fresh)


def _difference(have: dict, want: dict) -> str:
    """Where two :func:`learner_content` differ, in words."""
    hc, wc = have["cells"], want["cells"]
    if len(hc) != len(wc):
        return f"{len(hc)} cells, solutions make {len(wc)}"
    for i, (h, w) in enumerate(zip(hc, wc)):
        if h != w:
            what = next(k for k in ("cell_type", "source", "attachments", "metadata")
                        if h[k] != w[k])
            return f"cell {i} differs from the generated one (its {what.replace('_', ' ')})"
    return "the notebook's metadata differs from the generated one"


def sync_report(solutions: Path, exercises: Path) -> tuple[list[str], list[str]]:
    """``(problems, notes)``: problems mean the generator changed (``--check`` fails);
    notes name notebooks that are a learner's work (kept as they are, not a failure)."""
    problems: list[str] = []
    notes: list[str] = []
    sol_paths = sorted(solutions.glob("[0-9][0-9]_*.ipynb"))
    kit_names = {exercise_name(p.name) for p in sol_paths}
    for path in sorted(exercises.glob("[0-9][0-9]_*.ipynb")):
        if path.name not in kit_names:
            notes.append(f"{path}: not one of the kit's exercise notebooks (there is no "
                         f"{solutions / solution_name(path.name)}): a learner's notebook, "
                         "kept as it is and not checked")
    for sol_path in sol_paths:
        name = exercise_name(sol_path.name)
        sol = nbformat.read(sol_path, as_version=4)
        try:
            want_nb = exercise_notebook(sol)
        except ValueError as exc:
            problems.append(f"{sol_path}: {exc}")
            continue
        path = exercises / name
        if not path.exists():
            problems.append(f"{path} is missing; create it with: {COMMAND} {sol_path.name}")
            continue
        try:
            have_nb = read_notebook(path)[0]
        except NotebookUnreadable as exc:
            problems.append(f"{exc}: a learner's? It is kept; to get the kit's exercise "
                            f"instead: {COMMAND} --force {sol_path.name} (it first saves "
                            "this file next to it)")
            continue
        have, want = learner_content(have_nb), learner_content(want_nb)
        if have == want:
            continue
        diff = _difference(have, want)
        if not edited(have_nb, want_nb):
            problems.append(
                f"{path}: the generator changed ({diff}); the file is exactly as generated, "
                f"so regenerating it loses nothing: {COMMAND} {sol_path.name}")
        elif generated_as(have_nb, want_nb):
            notes.append(
                f"{path}: edited since it was generated ({diff}): a learner's work, kept as "
                f"it is ({COMMAND} will not overwrite it); nothing to do")
        else:
            problems.append(
                f"{path}: edited since it was generated, and the kit's version changed too "
                f"({diff}). Your edits are kept ({COMMAND} will not overwrite them). To get "
                f"the new version as well: {COMMAND} --force {sol_path.name} (it first "
                f"saves your edited copy next to it as backup-<date>-{name})")
    return problems, notes


def sync_problems(solutions: Path, exercises: Path) -> list[str]:
    """What makes ``exercises/`` stale: the generator's output differs from what is there
    (learner edits alone are not problems; see :func:`sync_report`)."""
    return sync_report(solutions, exercises)[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*",
                   help="solution, exercise or lesson notebooks to convert (default: all)")
    p.add_argument("--solutions", type=Path, default=Path("solutions"))
    p.add_argument("--exercises", type=Path, default=Path("exercises"))
    p.add_argument("--check", action="store_true", help="only check that they are in sync")
    p.add_argument("--no-execute", action="store_true", help="do not run the exercises")
    p.add_argument("--force", action="store_true",
                   help="also regenerate edited exercise notebooks, saving each first as "
                        "exercises/backup-<date>-NN_topic_exercises.ipynb")
    args = p.parse_args(argv)
    if args.check:
        problems, notes = sync_report(args.solutions, args.exercises)
        for line in problems + notes:
            print(line)
        print(f"{args.exercises}/ is out of sync with {args.solutions}/ (see above)" if problems
              else f"{args.exercises}/ is in sync with {args.solutions}/")
        return 1 if problems else 0
    from .execute import execute

    args.exercises.mkdir(exist_ok=True)
    paths = sorted(args.solutions.glob("[0-9][0-9]_*.ipynb"))
    if args.names:
        names = {p: {p.name, exercise_name(p.name), lesson_name(p.name)} for p in paths}
        wanted = {Path(n).name for n in args.names}
        paths = [p for p in paths if wanted & names[p]]
        missing = wanted - set().union(*names.values())
        if missing:
            print(f"no such solution notebook in {args.solutions}: {', '.join(sorted(missing))}")
            return 1
    refused = 0
    for path in paths:
        nb = exercise_notebook(nbformat.read(path, as_version=4))
        target = args.exercises / exercise_name(path.name)
        checked = None
        try:
            if target.exists():
                checked = target.read_bytes()
                try:
                    old = parse_notebook(checked, target)
                    mine = edited(old, nb) and learner_content(old) != learner_content(nb)
                except NotebookUnreadable:
                    mine = True
                if mine:
                    if not args.force:
                        refused += 1
                        print(f"NOT overwritten: {target} was edited since it was generated "
                              "(a learner's work?). To keep your edits, do nothing: it stays "
                              f"as it is. To discard them and get a fresh exercise: {COMMAND} "
                              f"--force {path.name} (it first saves your edited copy next to "
                              f"it as backup-<date>-{target.name})")
                        continue
                    print(f"saved your edited {target} as {back_up(target, COMMAND)}")
            if not args.no_execute:
                execute(nb, cwd=args.exercises.resolve(), env={"IPUKIT_GRADING": "feedback"})
            save_notebook(record_hash(stamp_kernel(nb)), target, checked, COMMAND)
        except NotebookFileError as exc:
            refused += 1
            print(exc)
            continue
        print(f"wrote {target}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
