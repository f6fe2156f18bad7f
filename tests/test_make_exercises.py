"""ipukit.grading.make_exercises never loses a learner's edits (issue 11, point 1; issue 26,
point 4 and its findings under "Learner work"), and names exercise and solution notebooks
so that their tabs say which is which (issue 31)."""

import base64
import contextlib
import io
from pathlib import Path

import nbformat
import pytest

from ipukit.grading import execute, make_exercises
from ipukit.grading.make_exercises import (
    LEGACY_HASH_KEY,
    cells_hash,
    content_hash,
    edited_exercise,
    exercise_name,
    exercise_notebook,
    generated_as,
    lesson_name,
    recorded_hash,
    solution_name,
    sync_report,
)

ROOT = Path(__file__).resolve().parents[1]
#: Lesson 01's solution notebook, whichever way it is named (before or after the rename).
SOLUTION = next((ROOT / "solutions").glob("01_*.ipynb"))
NAME = exercise_name(SOLUTION.name)
#: A 1x1 PNG, as JupyterLab stores a pasted image in a cell's attachments.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()


def main(*args) -> tuple[int, str]:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        rc = make_exercises.main([*map(str, args)])
    return rc, out.getvalue()


@pytest.fixture
def kit(tmp_path):
    """A solutions/ and a freshly generated exercises/ with lesson 01 in them."""
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    nbformat.write(nbformat.read(SOLUTION, as_version=4), sol / SOLUTION.name)
    assert main("--solutions", sol, "--exercises", ex, "--no-execute")[0] == 0
    return sol, ex


def learner_edits(path: Path) -> bytes:
    """Answer the first exercise in place, as a learner does; returns the file's bytes."""
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if "raise NotImplementedError" in c.source)
    cell.source = cell.source.replace("raise NotImplementedError", "return 42  # mine\n    #")
    nbformat.write(nb, path)
    return path.read_bytes()


def change_generator(sol: Path) -> None:
    """A kit update: a new line outside the solution regions of the solution notebook."""
    nb = nbformat.read(sol / SOLUTION.name, as_version=4)
    nb.cells[0].source += "\n\nA new sentence from the kit."
    nbformat.write(nb, sol / SOLUTION.name)


def test_every_exercise_notebook_is_recognised_as_generated():
    """Each kit exercise notebook records the hash it was generated with (the content
    hash, or the cells hash of notebooks generated before it) and is exactly as generated
    from its solution notebook now."""
    for sol in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        path = ROOT / "exercises" / exercise_name(sol.name)
        have = nbformat.read(path, as_version=4)
        want = exercise_notebook(nbformat.read(sol, as_version=4))
        assert recorded_hash(want) == content_hash(want)
        assert generated_as(have, want) and not edited_exercise(path), path.name


def test_regenerating_refuses_to_overwrite_an_edited_exercise(kit):
    sol, ex = kit
    mine = learner_edits(ex / NAME)
    change_generator(sol)  # even when the kit changed, the learner's file stays
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute")
    assert rc == 1 and (ex / NAME).read_bytes() == mine
    assert f"NOT overwritten: {ex / NAME} was edited" in out
    assert "To keep your edits, do nothing" in out and f"--force {SOLUTION.name}" in out
    assert list(ex.glob("backup-*")) == []


def test_force_backs_the_edited_notebook_up_next_to_it_first(kit):
    sol, ex = kit
    mine = learner_edits(ex / NAME)
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute", "--force")
    [backup] = ex.glob(f"backup-*-{NAME}")
    assert rc == 0 and backup.read_bytes() == mine and f"saved your edited {ex / NAME}" in out
    fresh = nbformat.read(ex / NAME, as_version=4)
    assert "# mine" not in str(fresh.cells) and recorded_hash(fresh) == content_hash(fresh)
    # the backup is not taken for an exercise notebook: --check stays clean
    assert sync_report(sol, ex) == ([], [])


def test_an_unedited_exercise_is_regenerated_when_the_generator_changed(kit):
    sol, ex = kit
    change_generator(sol)
    [problem], notes = sync_report(sol, ex)
    assert notes == [] and "the generator changed" in problem and "loses nothing" in problem
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute")
    assert rc == 0 and "A new sentence from the kit." in (ex / NAME).read_text()
    assert sync_report(sol, ex) == ([], [])


def test_check_tells_a_learners_edit_from_a_generator_change(kit):
    sol, ex = kit
    learner_edits(ex / NAME)
    rc, out = main("--check", "--solutions", sol, "--exercises", ex)
    # the learner's edit alone: reported, kept, not a failure, no command to run
    assert rc == 0 and "edited since it was generated" in out and "kept" in out
    assert "nothing to do" in out and "make_exercises " + SOLUTION.name not in out
    change_generator(sol)
    rc, out = main("--check", "--solutions", sol, "--exercises", ex)
    # edited and the kit changed: the only advice is --force, which saves the edits first
    assert rc == 1 and "the kit's version changed too" in out and "edits are kept" in out
    assert f"--force {SOLUTION.name}" in out and "saves your edited copy" in out
    assert f"make_exercises {SOLUTION.name}" not in out


def test_a_notebook_without_a_recorded_hash_that_differs_is_kept(kit):
    sol, ex = kit
    nb = nbformat.read(ex / NAME, as_version=4)
    del nb.metadata["ipukit"][make_exercises.HASH_KEY]  # not generated by the kit
    nbformat.write(nb, ex / NAME)
    mine = learner_edits(ex / NAME)
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute")
    assert rc == 1 and (ex / NAME).read_bytes() == mine and "NOT overwritten" in out


# -- what counts as the learner's work (issue 26, "Learner work") ---------------------------

def paste_image(nb):
    cell = next(c for c in nb.cells if c.cell_type == "markdown")
    cell["attachments"] = {"image.png": {"image/png": PNG}}


def tag_a_cell(nb):
    next(c for c in nb.cells if c.cell_type == "code").metadata["tags"] = ["my-answer"]


def collapse_a_cell(nb):
    next(c for c in nb.cells if c.cell_type == "code").metadata["jupyter"] = {
        "source_hidden": True}


def set_notebook_metadata(nb):
    nb.metadata["authors"] = [{"name": "A. Learner"}]


def make_a_markdown_cell_raw(nb):
    next(c for c in nb.cells if c.cell_type == "markdown").cell_type = "raw"


LEARNERS = [paste_image, tag_a_cell, collapse_a_cell, set_notebook_metadata,
            make_a_markdown_cell_raw]


@pytest.mark.parametrize("change", LEARNERS, ids=lambda f: f.__name__)
def test_a_change_besides_the_code_is_the_learners_work(kit, change):
    """A pasted image, tags, cell or notebook metadata alone: never overwritten without
    a backup, and `make test` leaves the notebook alone (the same definition)."""
    import conftest

    sol, ex = kit
    nb = nbformat.read(ex / NAME, as_version=4)
    change(nb)
    nbformat.write(nb, ex / NAME)
    mine = (ex / NAME).read_bytes()
    assert edited_exercise(ex / NAME)
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute")
    assert rc == 1 and (ex / NAME).read_bytes() == mine and "NOT overwritten" in out
    change_generator(sol)
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute")
    assert rc == 1 and (ex / NAME).read_bytes() == mine
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute", "--force")
    [backup] = ex.glob(f"backup-*-{NAME}")
    assert rc == 0 and backup.read_bytes() == mine
    backup.unlink()
    nbformat.write(nbformat.reads(mine.decode(), as_version=4), ex / NAME)
    assert conftest.pytest_ignore_collect(ex / NAME, None)
    assert str(ex / NAME) in conftest._EDITED
    conftest._EDITED.remove(str(ex / NAME))


def run_the_cells(nb):
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    cell.execution_count = 7
    cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00.000Z"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}


def open_with_another_python(nb):
    nb.metadata["language_info"] = {"name": "python", "version": "3.13.1"}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}


@pytest.mark.parametrize("change", [run_the_cells, open_with_another_python],
                         ids=lambda f: f.__name__)
def test_what_jupyterlab_and_the_kernel_write_is_not_the_learners_work(kit, change):
    """Outputs, execution counts and timings, widget state, and the kernelspec and
    language_info that JupyterLab rewrites on opening: regenerated without a backup."""
    sol, ex = kit
    nb = nbformat.read(ex / NAME, as_version=4)
    change(nb)
    nbformat.write(nb, ex / NAME)
    assert not edited_exercise(ex / NAME)
    change_generator(sol)
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute")
    assert rc == 0 and "A new sentence from the kit." in (ex / NAME).read_text()
    assert list(ex.glob("backup-*")) == []


def legacy(nb):
    """``nb`` as make_exercises wrote it before the content hash: cells hash only."""
    meta = nb.metadata["ipukit"]
    del meta[make_exercises.HASH_KEY]
    meta[LEGACY_HASH_KEY] = cells_hash(nb)
    return nb


def test_exercises_generated_before_the_content_hash_are_still_recognised(kit):
    sol, ex = kit
    nb = legacy(nbformat.read(ex / NAME, as_version=4))
    nbformat.write(nb, ex / NAME)
    as_generated = (ex / NAME).read_bytes()
    assert not edited_exercise(ex / NAME) and sync_report(sol, ex) == ([], [])
    tag_a_cell(nb)  # the old hash does not cover tags: the solution tells them apart
    nbformat.write(nb, ex / NAME)
    mine = (ex / NAME).read_bytes()
    assert edited_exercise(ex / NAME)
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute")
    assert rc == 1 and (ex / NAME).read_bytes() == mine
    # as generated: a kit update regenerates it, now with the content hash
    (ex / NAME).write_bytes(as_generated)
    change_generator(sol)
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute")
    fresh = nbformat.read(ex / NAME, as_version=4)
    assert rc == 0 and recorded_hash(fresh) == content_hash(fresh)
    assert LEGACY_HASH_KEY not in fresh.metadata["ipukit"]


def test_an_edit_saved_while_the_exercise_runs_is_kept(kit, monkeypatch):
    """The finding: make_exercises checked the file, ran the fresh notebook for seconds,
    then wrote it, losing an edit saved in between. Now the file is re-read just before
    it is replaced: the edit stays, a copy is saved beside it, and the command says so."""
    sol, ex = kit
    change_generator(sol)
    saved = {}

    def run_and_meanwhile_the_learner_saves(nb, **kw):
        saved["mine"] = learner_edits(ex / NAME)
        return nb

    monkeypatch.setattr(execute, "execute", run_and_meanwhile_the_learner_saves)
    rc, out = main("--solutions", sol, "--exercises", ex)
    assert (ex / NAME).read_bytes() == saved["mine"]
    [backup] = ex.glob(f"backup-*-{NAME}")
    assert backup.read_bytes() == saved["mine"]
    assert rc == 1 and f"NOT overwritten: {ex / NAME} changed while" in out
    assert str(backup) in out and "wrote" not in out


def test_a_learners_extra_notebooks_in_exercises_break_nothing(kit):
    """A copy or a new notebook of the learner's in exercises/ is noted by --check, not
    a failure, and `make test` does not run it."""
    import conftest

    sol, ex = kit
    copy = ex / "01_copy.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
    nbformat.write(nb, copy)
    problems, [note] = sync_report(sol, ex)
    assert problems == [] and note.startswith(f"{copy}: not one of the kit's")
    assert main("--check", "--solutions", sol, "--exercises", ex)[0] == 0
    assert conftest.pytest_ignore_collect(copy, None)
    conftest._EDITED.remove(str(copy))


def test_a_notebook_that_cannot_be_read_is_the_learners_too(kit):
    """Half a file (a crashed editor) or any other non-notebook under a kit exercise's
    name: kept, reported, not run by `make test`, backed up by --force."""
    import conftest

    sol, ex = kit
    broken = (ex / NAME).read_bytes()[:2000]
    (ex / NAME).write_bytes(broken)
    problems, notes = sync_report(sol, ex)
    assert notes == [] and problems[0].startswith(f"{ex / NAME} is not a notebook that can")
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute")
    assert rc == 1 and (ex / NAME).read_bytes() == broken and "NOT overwritten" in out
    assert edited_exercise(ex / NAME) and conftest.pytest_ignore_collect(ex / NAME, None)
    conftest._EDITED.remove(str(ex / NAME))
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute", "--force")
    [backup] = ex.glob(f"backup-*-{NAME}")
    assert rc == 0 and backup.read_bytes() == broken and not edited_exercise(ex / NAME)


def test_make_test_leaves_a_learners_edited_exercise_alone(kit):
    """`make test` (nbval over exercises/) skips an edited exercise notebook and says so."""
    import conftest

    sol, ex = kit
    assert not edited_exercise(ex / NAME)
    assert conftest.pytest_ignore_collect(ex / NAME, None) is None  # nbval runs it
    learner_edits(ex / NAME)
    assert edited_exercise(ex / NAME) and conftest.pytest_ignore_collect(ex / NAME, None)
    assert str(ex / NAME) in conftest._EDITED
    conftest._EDITED.remove(str(ex / NAME))
    assert conftest.pytest_ignore_collect(sol / SOLUTION.name, None) is None  # always run


# -- names (issue 31): the tab says lesson, exercises or solutions ------------------------

def test_names_of_the_three_notebooks_of_a_lesson():
    assert exercise_name("08_pipelining_schedules_solutions.ipynb") == \
        "08_pipelining_schedules_exercises.ipynb"
    assert solution_name("08_pipelining_schedules_exercises.ipynb") == \
        "08_pipelining_schedules_solutions.ipynb"
    for name in ["08_pipelining_schedules_solutions.ipynb",
                 "08_pipelining_schedules_exercises.ipynb", "08_pipelining_schedules.ipynb"]:
        assert lesson_name(name) == "08_pipelining_schedules.ipynb"
    # a lesson's own name gives its exercise and solution notebooks
    assert exercise_name("01_ipu_and_bsp.ipynb") == "01_ipu_and_bsp_exercises.ipynb"
    assert solution_name("01_ipu_and_bsp.ipynb") == "01_ipu_and_bsp_solutions.ipynb"


def test_a_solutions_notebook_makes_an_exercises_notebook(tmp_path):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    stem = lesson_name(SOLUTION.name).removesuffix(".ipynb")
    nbformat.write(nbformat.read(SOLUTION, as_version=4), sol / f"{stem}_solutions.ipynb")
    # named by its lesson notebook
    rc, out = main("--solutions", sol, "--exercises", ex, "--no-execute", f"{stem}.ipynb")
    assert rc == 0 and [p.name for p in ex.iterdir()] == [f"{stem}_exercises.ipynb"]
    assert sync_report(sol, ex) == ([], [])
    learner_edits(ex / f"{stem}_exercises.ipynb")
    problems, [note] = sync_report(sol, ex)
    assert problems == [] and "edited since it was generated" in note
    assert edited_exercise(ex / f"{stem}_exercises.ipynb")
