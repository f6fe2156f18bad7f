"""Saving a notebook without ever losing what is in the file: the kit's one way to write one.

Every command of the kit that saves a notebook (``make_exercises``, ``python -m
ipukit.grading.execute``, ``tools/update_widget_cells.py``) reads it with
:func:`read_notebook`, which keeps the file's bytes as they were checked, and saves it with
:func:`save_notebook`:

1. the whole new notebook is written to a temporary file in the same folder
   (``.NAME.ipynb.XXXX.tmp``) and flushed to the disk (``fsync``);
2. just before replacing, the file is read again: if it is no longer byte for byte what
   was checked (saved by JupyterLab meanwhile, say), it is kept as it is, a copy of it is
   saved beside it under a fresh name (``backup-<date>-NAME.ipynb``), nothing is written,
   and :class:`NotebookChanged` says so;
3. otherwise the temporary file is renamed over it (``os.replace``, atomic on one file
   system), so the file is always either the old notebook or the new one.

A full disk, a file size limit or a read-only folder leaves the file untouched and raises
:class:`NotebookSaveError` naming the file, the reason and what to do; the temporary file
is removed. (A save between the re-read and the rename, microseconds apart, is the one
race left: no file system offers a compare-and-swap of a file's contents.)

>>> import tempfile, nbformat
>>> path = Path(tempfile.mkdtemp()) / "01_mine.ipynb"
>>> save_notebook(nbformat.v4.new_notebook(), path, checked=None)  # a new file
>>> nb, checked = read_notebook(path)
>>> nb.cells.append(nbformat.v4.new_markdown_cell("mine"))
>>> save_notebook(nb, path, checked)
>>> read_notebook(path)[0].cells[0].source
'mine'
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import nbformat

from ..errors import IpuError


class NotebookFileError(IpuError, OSError):
    """A notebook could not be read or saved; the file on disk is as it was."""


class NotebookSaveError(NotebookFileError):
    """Writing the new notebook failed (a full disk, a size limit, no permission)."""


class NotebookChanged(NotebookFileError):
    """The file changed after it was read: it is kept, and a copy of it saved beside it."""


class NotebookUnreadable(NotebookFileError, ValueError):
    """The file is not a notebook that nbformat can read (not JSON, or not a notebook)."""


def read_notebook(path: str | Path):
    """``(notebook, checked)``: the notebook at ``path`` and the file's bytes as read, to
    hand to :func:`save_notebook`. A file that is not a notebook raises
    :class:`NotebookUnreadable`."""
    checked = Path(path).read_bytes()
    return parse_notebook(checked, path), checked


def parse_notebook(data: bytes, path: str | Path = "the file"):
    """The notebook in ``data`` (a file's bytes), or :class:`NotebookUnreadable`."""
    try:
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as exc:  # nbformat raises ValueError, TypeError, KeyError, ...
        raise NotebookUnreadable(f"{path} is not a notebook that can be read "
                                 f"({type(exc).__name__}: {exc})"[:500]) from exc


def backup_path(path: Path) -> Path:
    """A fresh name beside ``path``: ``backup-YYYYMMDD-HHMMSS[-k]-NAME``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup, k = path.with_name(f"backup-{stamp}-{path.name}"), 1
    while backup.exists():
        k += 1
        backup = path.with_name(f"backup-{stamp}-{k}-{path.name}")
    return backup


def kernel_metadata() -> dict:
    """What JupyterLab writes into a notebook's metadata when the kit's ``python3`` kernel
    starts (the kernelspec, and the kernel's ``language_info`` from its kernel_info
    reply). A notebook stored with these opens in JupyterLab without becoming unsaved."""
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    return {"kernelspec": {"display_name": spec.display_name, "language": spec.language,
                           "name": "python3"},
            "language_info": dict(IPythonKernel.language_info)}


def stamp_kernel(nb):
    """Store :func:`kernel_metadata` in ``nb``'s metadata (changed in place and returned)."""
    nb.metadata.update(kernel_metadata())
    return nb


def _open_temporary(folder: Path, name: str):
    """A new, empty temporary file in ``folder``: ``(binary file object, its path)``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    return os.fdopen(fd, "wb"), Path(tmp)


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "the disk is full (no space left on device): free some space"
    if exc.errno in (errno.EFBIG, errno.EDQUOT):
        return f"{(exc.strerror or str(exc)).lower()}: free some space or raise the limit"
    return f"{exc.strerror or exc}: fix that"


def save_notebook(nb, path: str | Path, checked: bytes | None, command: str = "the kit"):
    """Write ``nb`` to ``path`` if the file still holds ``checked`` (``None``: it did not
    exist); see the module. Raises :class:`NotebookChanged` or :class:`NotebookSaveError`,
    and then the file is as it was."""
    path = Path(path)
    target = Path(os.path.realpath(path))  # a symlinked notebook: write the file it names
    text = nbformat.writes(nb)
    data = (text if text.endswith("\n") else text + "\n").encode("utf-8")
    tmp = None
    try:
        f, tmp = _open_temporary(target.parent, target.name)
        with f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            mode = stat.S_IMODE(target.stat().st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        now = target.read_bytes() if target.exists() else None
        if now != checked:
            raise _changed(path, now, command)
        os.replace(tmp, target)
        tmp = None
        _sync_folder(target.parent)
    except NotebookFileError:
        raise
    except OSError as exc:
        raise NotebookSaveError(
            f"{command} could not save {path}: {_reason(exc)}, then run it again. {path} is "
            "unchanged (the new notebook went to a temporary file, now removed)") from exc
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def back_up(path: str | Path, command: str = "the kit") -> Path:
    """Copy the file at ``path`` beside it under a fresh name (:func:`backup_path`); the
    copy's path. A copy that fails is removed and raises :class:`NotebookSaveError`."""
    path = Path(path)
    backup = backup_path(path)
    try:
        shutil.copyfile(path, backup)
    except OSError as exc:
        backup.unlink(missing_ok=True)
        raise NotebookSaveError(
            f"{command} could not save a copy of {path} beside it: {_reason(exc)}, then run "
            f"it again. {path} is unchanged") from exc
    return backup


def _changed(path: Path, now: bytes | None, command: str) -> NotebookChanged:
    """The error for a file that changed after it was read; saves a copy of it first."""
    if now is None:
        return NotebookChanged(
            f"{path} was deleted while {command} ran; nothing was written. Run it again to "
            "create it.")
    try:
        copy = f"a copy of it as it is now is at {back_up(path, command)}"
    except NotebookSaveError as exc:
        copy = f"no copy could be made beside it ({exc.__cause__.strerror})"
    return NotebookChanged(
        f"NOT overwritten: {path} changed while {command} ran (saved from JupyterLab or an "
        f"editor?): it is kept exactly as it is now, and {copy}. Nothing was written; run "
        "the command again once you have saved your work.")


def _sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (fsync of the directory, where the OS allows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
