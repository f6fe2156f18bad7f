"""ipukit.grading.notebook_file: every notebook the kit saves is written to a temporary file
and renamed over the original, never over one that changed meanwhile, never half written
(issue 26, point 4: "No command loses a learner's edit")."""

import errno
import os
import re
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ipukit.grading import notebook_file
from ipukit.grading.notebook_file import (
    NotebookChanged,
    NotebookSaveError,
    kernel_metadata,
    read_notebook,
    save_notebook,
)

ROOT = Path(__file__).resolve().parents[1]


def notebook(*sources):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


@pytest.fixture
def saved(tmp_path):
    """A notebook on disk, read back as the kit reads it: (path, notebook, bytes)."""
    path = tmp_path / "01_mine.ipynb"
    nbformat.write(notebook("x = 1"), path)
    nb, checked = read_notebook(path)
    return path, nb, checked


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_save_replaces_the_file_whole_and_keeps_its_permissions(saved):
    path, nb, checked = saved
    path.chmod(0o640)
    inode = path.stat().st_ino
    nb.cells.append(nbformat.v4.new_markdown_cell("new"))
    save_notebook(nb, path, checked)
    assert nbformat.read(path, as_version=4) == nb
    assert path.stat().st_ino != inode  # a new file renamed over it, not rewritten in place
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert leftovers(path.parent) == []


def test_a_symlinked_notebook_saves_the_file_it_points_to(saved, tmp_path):
    path, nb, checked = saved
    link = tmp_path / "link.ipynb"
    link.symlink_to(path)
    nb.cells[0].source = "x = 2"
    save_notebook(nb, link, checked)
    assert link.is_symlink() and nbformat.read(path, as_version=4).cells[0].source == "x = 2"


class FullDisk:
    """A file object that writes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, f, room):
        self.f, self.room = f, room

    def write(self, data):
        if len(data) > self.room:
            self.f.write(data[:self.room])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_a_full_disk_leaves_the_notebook_intact_and_says_so(saved, monkeypatch):
    path, nb, checked = saved
    opener = notebook_file._open_temporary
    monkeypatch.setattr(notebook_file, "_open_temporary",
                        lambda folder, name: (lambda f, p: (FullDisk(f, 100), p))(
                            *opener(folder, name)))
    nb.cells[0].source = "x = 2\n" * 1000
    with pytest.raises(NotebookSaveError) as info:
        save_notebook(nb, path, checked, "make_exercises")
    assert path.read_bytes() == checked and leftovers(path.parent) == []
    assert str(info.value).startswith(f"make_exercises could not save {path}: the disk is "
                                      "full (no space left on device): free some space")
    assert f"{path} is unchanged" in str(info.value)


def test_a_file_changed_after_it_was_read_is_kept_and_copied(saved):
    path, nb, checked = saved
    mine = path.read_bytes().replace(b"x = 1", b"x = 'mine'")
    path.write_bytes(mine)  # saved from JupyterLab while the command ran
    nb.cells[0].source = "x = 2"
    with pytest.raises(NotebookChanged) as info:
        save_notebook(nb, path, checked, "the command")
    [backup] = path.parent.glob("backup-*-01_mine.ipynb")
    assert path.read_bytes() == mine == backup.read_bytes()
    assert f"NOT overwritten: {path} changed while the command ran" in str(info.value)
    assert str(backup) in str(info.value) and leftovers(path.parent) == []


def test_a_file_deleted_or_created_meanwhile_is_not_written(saved):
    path, nb, checked = saved
    path.unlink()
    with pytest.raises(NotebookChanged, match="was deleted while"):
        save_notebook(nb, path, checked)
    assert not path.exists()
    nbformat.write(notebook("theirs"), path)
    theirs = path.read_bytes()
    with pytest.raises(NotebookChanged):
        save_notebook(nb, path, None)  # it did not exist when checked
    assert path.read_bytes() == theirs


def limited(limit):
    """preexec_fn: a file size limit of ``limit`` bytes (writes past it fail with EFBIG)."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_execute_on_a_full_disk_leaves_the_notebook_intact(tmp_path):
    """The finding: `python -m ipukit.grading.execute` wrote in place, and with no room
    left an edited notebook was left as 8,192 bytes of broken JSON. Here its new outputs
    do not fit under a file size limit: the notebook stays as it was, and the command says
    why; without the limit it is saved, with the kernel's metadata."""
    path = tmp_path / "01_mine.ipynb"
    nbformat.write(notebook("print('x' * 40_000)"), path)
    before = path.read_bytes()
    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    command = [sys.executable, "-m", "ipukit.grading.execute", str(path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=env, preexec_fn=limited(16_384))
    assert path.read_bytes() == before and leftovers(tmp_path) == [], proc.stderr
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert re.search(rf"could not save {re.escape(str(path))}: file too large", proc.stdout)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].outputs[0].text == "x" * 40_000 + "\n"
    assert {k: nb.metadata[k] for k in ("kernelspec", "language_info")} == kernel_metadata()


def test_kernel_metadata_is_what_the_python3_kernel_reports(tmp_path, monkeypatch):
    """What JupyterLab writes on opening a notebook comes from the kernel's kernel_info
    reply (language_info) and its kernelspec: ask a real kernel."""
    from jupyter_client.manager import start_new_kernel

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        reply = kc.kernel_info(reply=True, timeout=60)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert kernel_metadata()["language_info"] == reply["content"]["language_info"]
    spec = km.kernel_spec
    assert kernel_metadata()["kernelspec"] == {
        "name": "python3", "display_name": spec.display_name, "language": spec.language}


def test_every_notebook_the_kit_writes_goes_through_save_notebook():
    """No other write of a notebook in the kit or its tools (an attacker's first look)."""
    writes = re.compile(r"nbformat\.write\(|\.ipynb.*\.write_(text|bytes)\(|"
                        r"json\.dump\(.*\.ipynb")
    found = [f"{p.relative_to(ROOT)}:{i}" for folder in ("ipukit", "tools")
             for p in sorted((ROOT / folder).rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if writes.search(line)]
    assert found == []


def test_stored_notebooks_record_what_the_kernel_fills_in():
    """Issue 31 (an exercise notebook became unsaved on opening): the lesson notebooks and
    every exercise notebook generated with the content hash store the kernel's kernelspec
    and language_info (the Python version aside: it is the environment's)."""
    from ipukit.grading.make_exercises import recorded_hash

    want = kernel_metadata()
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    paths += [p for p in sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
              if recorded_hash(nbformat.read(p, as_version=4))]
    assert len(paths) >= 12
    for path in paths:
        meta = nbformat.read(path, as_version=4).metadata
        assert meta.kernelspec == want["kernelspec"], path.name
        assert {**meta.language_info, "version": ""} == \
            {**want["language_info"], "version": ""}, path.name


def test_execute_refuses_a_file_that_is_not_a_notebook(tmp_path, capsys):
    from ipukit.grading import execute

    path = tmp_path / "01_half.ipynb"
    path.write_bytes(b'{"cells": [{"cell_type": "code", "sou')
    assert execute.main([str(path)]) == 1
    assert path.read_bytes() == b'{"cells": [{"cell_type": "code", "sou'
    assert capsys.readouterr().out.startswith(f"{path} is not a notebook that can be read")
