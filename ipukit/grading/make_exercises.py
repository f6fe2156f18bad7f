"""Generate ``exercises/`` from ``solutions/``, or check that they are in sync.

    python -m ipukit.grading.make_exercises             # regenerate and run exercises/
    python -m ipukit.grading.make_exercises 01_ipu_and_bsp.ipynb   # just this one
    python -m ipukit.grading.make_exercises --check     # exit 1 if the generator changed

Each ``solutions/NN_topic.ipynb`` becomes ``exercises/NN_topic.ipynb``: solution regions
become ``raise NotImplementedError`` stubs (see :mod:`ipukit.grading.markers`), and the
exercise notebook is then run in a fresh kernel so that it is stored with the outputs a
learner sees on a first run (every check saying "not solved yet"). ``--no-execute``
skips the run. ``--check`` compares cell types and sources only.

A learner's work is never lost: each exercise notebook records in its metadata
(``ipukit.generated_sha256``) a hash of the cells it was generated with. A notebook whose
cells no longer match that hash was edited (a learner's answers): it is not overwritten;
``--force`` first saves it as ``exercises/backup-YYYYMMDD-HHMMSS-NN_topic.ipynb``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

import nbformat

from .markers import strip_solutions

#: Where the hash of the generated cells is kept: ``nb.metadata["ipukit"][HASH_KEY]``.
HASH_KEY = "generated_sha256"
COMMAND = "python -m ipukit.grading.make_exercises"


def exercise_notebook(solution):
    """The exercise version of a solution notebook (a new NotebookNode, no outputs)."""
    nb = nbformat.from_dict(solution)  # deep copy
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source, where=f"cell {i}")
            cell.outputs, cell.execution_count = [], None
    meta = nb.metadata.setdefault("ipukit", {})
    meta["generated_from"] = "solutions"
    meta[HASH_KEY] = cells_hash(nb)
    return nb


def _cells(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nb.cells]


def cells_hash(nb) -> str:
    """SHA-256 of the notebook's cell types and sources (what a learner edits)."""
    return hashlib.sha256(json.dumps(_cells(nb)).encode()).hexdigest()


def recorded_hash(nb) -> str | None:
    """The hash of the cells ``nb`` was generated with, if it records one."""
    return nb.metadata.get("ipukit", {}).get(HASH_KEY)


def edited(nb) -> bool:
    """Whether ``nb``'s cells differ from what was last generated (or it records no hash)."""
    return recorded_hash(nb) != cells_hash(nb)


def edited_exercise(path: str | Path) -> bool:
    """Whether the exercise notebook at ``path`` is a learner's edited copy: it records a
    generated hash that its cells no longer match."""
    nb = nbformat.read(path, as_version=4)
    return recorded_hash(nb) is not None and edited(nb)


def backup_path(path: Path) -> Path:
    """Where ``--force`` saves an edited exercise notebook, next to it (a fresh name)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup, k = path.with_name(f"backup-{stamp}-{path.name}"), 1
    while backup.exists():
        k += 1
        backup = path.with_name(f"backup-{stamp}-{k}-{path.name}")
    return backup


def sync_report(solutions: Path, exercises: Path) -> tuple[list[str], list[str]]:
    """``(problems, notes)``: problems mean the generator changed (``--check`` fails);
    notes name exercise notebooks a learner edited (kept as they are, not a failure)."""
    problems: list[str] = []
    notes: list[str] = []
    sol_names = {p.name for p in solutions.glob("[0-9][0-9]_*.ipynb")}
    ex_names = {p.name for p in exercises.glob("[0-9][0-9]_*.ipynb")}
    problems += [f"{exercises / n} has no solution notebook" for n in sorted(ex_names -
                                                                               sol_names)]
    for name in sorted(sol_names):
        sol = nbformat.read(solutions / name, as_version=4)
        try:
            want_nb = exercise_notebook(sol)
        except ValueError as exc:
            problems.append(f"{solutions / name}: {exc}")
            continue
        path = exercises / name
        if name not in ex_names:
            problems.append(f"{path} is missing; create it with: {COMMAND} {name}")
            continue
        have_nb = nbformat.read(path, as_version=4)
        have, want = _cells(have_nb), _cells(want_nb)
        if have == want:
            continue
        diff = (f"{len(have)} cells, solutions make {len(want)}" if len(have) != len(want)
                else f"cell {next(i for i, (h, w) in enumerate(zip(have, want)) if h != w)} "
                     "differs from the generated one")
        if not edited(have_nb):
            problems.append(
                f"{path}: the generator changed ({diff}); the file is exactly as generated, "
                f"so regenerating it loses nothing: {COMMAND} {name}")
        elif recorded_hash(have_nb) == cells_hash(want_nb):
            notes.append(
                f"{path}: edited since it was generated ({diff}): a learner's work, kept as "
                f"it is ({COMMAND} will not overwrite it); nothing to do")
        else:
            problems.append(
                f"{path}: edited since it was generated, and the kit's version changed too "
                f"({diff}). Your edits are kept ({COMMAND} will not overwrite them). To get "
                f"the new version as well: {COMMAND} --force {name} (it first saves your "
                f"edited copy next to it as backup-<date>-{name})")
    return problems, notes


def sync_problems(solutions: Path, exercises: Path) -> list[str]:
    """What makes ``exercises/`` stale: the generator's output differs from what is there
    (learner edits alone are not problems; see :func:`sync_report`)."""
    return sync_report(solutions, exercises)[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ipukit.grading.make_exercises",
                                description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help="solution notebooks to convert (default: all)")
    p.add_argument("--solutions", type=Path, default=Path("solutions"))
    p.add_argument("--exercises", type=Path, default=Path("exercises"))
    p.add_argument("--check", action="store_true", help="only check that they are in sync")
    p.add_argument("--no-execute", action="store_true", help="do not run the exercises")
    p.add_argument("--force", action="store_true",
                   help="also regenerate edited exercise notebooks, saving each first as "
                        "exercises/backup-<date>-NN_topic.ipynb")
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
        wanted = {Path(n).name for n in args.names}
        paths = [p for p in paths if p.name in wanted]
        missing = wanted - {p.name for p in paths}
        if missing:
            print(f"no such solution notebook in {args.solutions}: {', '.join(sorted(missing))}")
            return 1
    refused = 0
    for path in paths:
        nb = exercise_notebook(nbformat.read(path, as_version=4))
        target = args.exercises / path.name
        if target.exists():
            old = nbformat.read(target, as_version=4)
            if edited(old) and _cells(old) != _cells(nb):
                if not args.force:
                    refused += 1
                    print(f"NOT overwritten: {target} was edited since it was generated "
                          "(a learner's work?). To keep your edits, do nothing: it stays as it "
                          f"is. To discard them and get a fresh exercise: {COMMAND} --force "
                          f"{path.name} (it first saves your edited copy next to it as "
                          f"backup-<date>-{path.name})")
                    continue
                backup = backup_path(target)
                shutil.copy2(target, backup)
                print(f"saved your edited {target} as {backup}")
        if not args.no_execute:
            execute(nb, cwd=args.exercises.resolve(), env={"IPUKIT_GRADING": "feedback"})
        nbformat.write(nb, target)
        print(f"wrote {target}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
