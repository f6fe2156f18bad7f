"""The grader's sandbox: where the learner's kernel may write, what it may leave behind.

Used by ``python -m ipukit.grade`` (the judge); standard library only, so that it also
runs as the kernel's launcher without importing the kit::

    python -I -S ipukit/grading/sandbox.py --write SCRATCH --max-file-bytes N -- KERNEL...

* **Landlock** (Linux 5.13+; the LSM must be enabled): the launcher applies a ruleset
  before it ``exec``'s the kernel, so the kernel and every process it starts may write
  only beneath the ``--write`` folders and to ``/dev/null`` (reads stay allowed). From ABI
  6 on, it also may not signal or reach the abstract UNIX sockets of processes outside
  (the grader among them); Landlock also keeps it from ptrace-ing or reading the memory
  of processes outside. Syscalls through :mod:`ctypes` (x86-64 and arm64 numbers).
* **Every file** the kernel writes is at most ``--max-file-bytes`` (``RLIMIT_FSIZE``).
* :class:`KitSnapshot`: the kit's files as bytes in the grader's memory; a digest before
  and after each notebook, and a restore when they differ (kit convention: the check
  that works where Landlock does not).
* :func:`make_scratch`: the notebook's folder copied with regular files only (links and
  devices are not followed), up to a size limit and a deadline.
* :func:`become_subreaper` and :func:`end_descendants`: every process the notebook
  started, double forks and new sessions included, ends before the grader does.

>>> landlock_abi() >= 0
True
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import hashlib
import os
import resource
import shutil
import signal
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# Landlock (include/uapi/linux/landlock.h); the syscall numbers are the same on x86-64
# and arm64 (the generic table)
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS, _PR_SET_CHILD_SUBREAPER = 38, 36
_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE_CHAR, _MAKE_DIR, _MAKE_REG, _MAKE_SOCK = 1 << 6, 1 << 7, 1 << 8, 1 << 9
_MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM, _REFER, _TRUNCATE = 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14
#: The rights that change the file system, by the ABI that brought them (reads, execution
#: and device ioctls are not handled: they stay allowed everywhere).
_WRITES = {1: _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG
           | _MAKE_SOCK | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM, 2: _REFER, 3: _TRUNCATE}
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
#: Written by every program: allowed besides the scratch folder.
DEVICES = ("/dev/null",)


class SandboxError(OSError):
    """The sandbox cannot be set up as asked."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version of the running Linux kernel, 0 where there is none."""
    return max(0, _landlock_version()[0])


def landlock_missing() -> str:
    """Why Landlock cannot be used here ("" when it can)."""
    abi, err = _landlock_version()
    if abi > 0:
        return ""
    if sys.platform != "linux":
        return f"Landlock is Linux's and this is {sys.platform}"
    if err == errno.EOPNOTSUPP:
        return "Landlock is built into this Linux kernel but not enabled (lsm= at boot)"
    return "this Linux kernel has no Landlock (5.13 or later has)"


def _landlock_version() -> tuple[int, int]:
    if sys.platform != "linux":
        return 0, 0
    libc = _libc()
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(abi), ctypes.get_errno()


def _handled(abi: int) -> int:
    return sum(bits for version, bits in _WRITES.items() if abi >= version)


def restrict_writes(folders, abi: int | None = None) -> None:
    """Let this process and its children write only beneath ``folders`` and to
    :data:`DEVICES`, from now on (Landlock; irreversible). ABI 6+: also no signals to,
    and no abstract UNIX sockets of, processes outside."""
    abi = landlock_abi() if abi is None else abi
    if abi < 1:
        raise SandboxError(errno.ENOSYS, landlock_missing())
    libc = _libc()
    handled = _handled(abi)
    attr = _RulesetAttr(handled, 0, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6
                        else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise SandboxError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        file_rights = handled & (_WRITE_FILE | _TRUNCATE)
        rules = [(str(f), handled) for f in folders] + [(d, file_rights) for d in DEVICES]
        for path, rights in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneathAttr(rights, fd)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset),
                                ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                                ctypes.c_uint32(0)) < 0:
                    raise SandboxError(ctypes.get_errno(), f"landlock_add_rule {path} failed")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise SandboxError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise SandboxError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)


def launcher(python: str, folders, max_file_bytes: int, landlock: bool) -> list[str]:
    """The command prefix that starts a kernel in the sandbox."""
    cmd = [python, "-I", "-S", str(Path(__file__).resolve()),
           "--max-file-bytes", str(int(max_file_bytes))]
    for folder in folders if landlock else ():
        cmd += ["--write", str(folder)]
    return [*cmd, "--"]


def main(argv=None) -> int:
    """The launcher: restrict, then exec the command after ``--``."""
    p = argparse.ArgumentParser(prog="sandbox.py", description=main.__doc__)
    p.add_argument("--write", action="append", default=[],
                   help="a folder the command may write beneath (Landlock); none: no Landlock")
    p.add_argument("--max-file-bytes", type=int, required=True)
    p.add_argument("command", nargs="+")
    args = p.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_FSIZE, (args.max_file_bytes, args.max_file_bytes))
    if args.write:
        try:
            restrict_writes(args.write)
        except OSError as exc:  # never run the kernel unsandboxed when asked to sandbox
            print(f"sandbox.py: {exc}", file=sys.stderr)
            return 3
    os.execvp(args.command[0], args.command)


# -- processes ----------------------------------------------------------------------------

def become_subreaper() -> bool:
    """Make this process the one that orphaned descendants are re-parented to (Linux's
    ``PR_SET_CHILD_SUBREAPER``), so that none escapes :func:`end_descendants` by a double
    fork or a new session. False where it cannot (not Linux)."""
    if sys.platform != "linux":
        return False
    return _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _parents() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process in /proc."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        found[int(entry.name)] = (int(fields[1]), fields[0].decode())
    return found


def descendants(root: int | None = None) -> set[int]:
    """The live (not zombie) descendants of ``root`` (this process)."""
    root = os.getpid() if root is None else root
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid for pid in found if parents[pid][1] != "Z"}


def end_descendants(keep=frozenset(), timeout: float = 5.0) -> list[int]:
    """Stop, then kill, every descendant of this process but those in ``keep`` (started
    before grading), until none is left or ``timeout`` passes; reap the children. Returns
    the pids that were ended."""
    ended: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = descendants() - set(keep)
        if not found:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):  # frozen first: none forks meanwhile
            for pid in found:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        ended |= found
        _reap(keep)
        time.sleep(0.01)
    _reap(keep)
    return sorted(ended)


def _reap(keep) -> None:
    """Collect the exit status of this process's ended children (zombies) not in keep."""
    for pid, (ppid, state) in _parents().items():
        if ppid == os.getpid() and state == "Z" and pid not in keep:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


# -- the scratch folder -------------------------------------------------------------------

#: Folders never copied into the scratch folder.
SKIPPED = frozenset({".git", ".venv", ".ipynb_checkpoints", "__pycache__", "node_modules"})


@dataclass
class Scratch:
    """What :func:`make_scratch` copied and what it left out (and why)."""

    limit_bytes: int
    copied_files: int = 0
    copied_bytes: int = 0
    left_out: list[str] = field(default_factory=list)
    more_left_out: int = 0

    def leave_out(self, what: str) -> None:
        if len(self.left_out) < 20:
            self.left_out.append(what)
        else:
            self.more_left_out += 1

    def report(self) -> dict:
        more = [f"and {self.more_left_out:,} more"] if self.more_left_out else []
        return {"limit_bytes": self.limit_bytes, "copied_files": self.copied_files,
                "copied_bytes": self.copied_bytes, "left_out": self.left_out + more}


def make_scratch(source: Path, dest: Path, limit_bytes: int, deadline: float,
                 skip=frozenset()) -> Scratch:
    """Copy the regular files beneath ``source`` to ``dest``: symbolic links, devices,
    pipes and sockets are left out (never followed), as are :data:`SKIPPED` folders and
    ``skip`` paths, files that would take the copy past ``limit_bytes`` and whatever is
    left when ``deadline`` (``time.monotonic()``) passes."""
    done = Scratch(limit_bytes)
    dest.mkdir(parents=True, exist_ok=True)
    todo = [(Path(source), dest, "")]
    while todo:
        folder, target, shown = todo.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            done.leave_out(f"{shown or '.'} (cannot be read: {exc.strerror})")
            continue
        for entry in entries:
            name = f"{shown}{entry.name}"
            if time.monotonic() > deadline:
                done.leave_out(f"{name} and what follows (the time limit was reached)")
                return done
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if entry.name not in SKIPPED and Path(entry.path).resolve() not in skip:
                    (target / entry.name).mkdir()
                    todo.append((Path(entry.path), target / entry.name, name + "/"))
            elif not stat.S_ISREG(info.st_mode):
                kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a file"
                done.leave_out(f"{name} ({kind}: not copied)")
            elif done.copied_bytes + info.st_size > limit_bytes:
                done.leave_out(f"{name} ({info.st_size:,} bytes: over the scratch "
                                     f"limit of {limit_bytes:,})")
            elif _copy_file(entry.path, target / entry.name, info.st_size):
                done.copied_files += 1
                done.copied_bytes += info.st_size
            else:
                done.leave_out(f"{name} (changed or unreadable while copied)")
    return done


def _copy_file(src: str, dst: Path, size: int) -> bool:
    """Copy one regular file, never through a link, at most ``size`` bytes."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f, open(dst, "xb") as out:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        copied = 0
        while copied < size:
            chunk = f.read(min(1 << 20, size - copied))
            if not chunk:
                break
            out.write(chunk)
            copied += len(chunk)
    return True


def remove_tree(path: Path) -> None:
    """Remove ``path`` (links inside are removed, never followed) whatever the kernel did
    to the permissions of the folders in it."""
    todo = [str(path)]
    while todo:  # every folder readable and writable again, top down
        folder = todo.pop()
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(folder).st_mode):
                os.chmod(folder, 0o700)
                todo += [e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    shutil.rmtree(path, ignore_errors=True)


# -- the kit's files ---------------------------------------------------------------------

class KitSnapshot:
    """Every regular file beneath ``root`` (the kit's package, compiled caches included),
    as bytes in this process's memory: :meth:`changes` compares the files with it and
    :meth:`restore` puts them back. A notebook cannot reach this copy."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.mtimes: dict[str, int] = {}
        self.files = self._read(self.mtimes)
        self.digest = _digest(self.files)

    def _read(self, mtimes=None) -> dict[str, tuple[int, bytes | None]]:
        """relative path -> (mode, bytes; None where not a regular file)."""
        found = {}
        for folder, dirs, names in os.walk(self.root):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                    data = _read_regular(path) if stat.S_ISREG(info.st_mode) else None
                except OSError:
                    continue
                rel = os.path.relpath(path, self.root)
                found[rel] = (info.st_mode, data)
                if mtimes is not None:
                    mtimes[rel] = info.st_mtime_ns
        return found

    def changes(self) -> list[str]:
        """The files added, changed or removed since the snapshot (relative paths)."""
        now = self._read()
        if _digest(now) == self.digest:
            return []
        return sorted(k for k in set(now) | set(self.files) if now.get(k) != self.files.get(k))

    def restore(self, backup: Path | None = None) -> list[str]:
        """Put back every file as it was (removing those added since). With ``backup`` (a
        folder), each changed or added regular file is first moved there, under its
        relative path, so that no edit made meanwhile is lost; returns the paths moved
        (one that cannot be moved is replaced all the same)."""
        kept = []
        for rel in self.changes():
            path = self.root / rel
            if backup is not None and path.is_file() and not path.is_symlink():
                try:  # a rename where it can, else a copy; the kit is restored regardless
                    (backup / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(path, backup / rel)
                    kept.append(rel)
                except OSError:
                    pass
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                remove_tree(path)
            mode, data = self.files.get(rel, (0, None))
            if data is not None:  # a regular file (the kit holds no links)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                os.chmod(path, stat.S_IMODE(mode))
        return kept

    def copy_to(self, dest: Path) -> None:
        """A read-only copy of the snapshot at ``dest`` (times kept: compiled caches hold)."""
        for rel, (_, data) in self.files.items():
            if data is None:
                continue
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.chmod(path, 0o444)
            os.utime(path, ns=(self.mtimes[rel], self.mtimes[rel]))
        for folder, _, _ in os.walk(dest, topdown=False):
            os.chmod(folder, 0o555)


def _read_regular(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _digest(files: dict) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        mode, data = files[rel]
        h.update(f"{rel}\0{mode}\0{-1 if data is None else len(data)}\0".encode())
        h.update(data or b"")
    return h.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
