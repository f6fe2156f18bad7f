"""ipukit.grading.sandbox: Landlock, the scratch copy, the kit's snapshot, and processes
that end with the grader (issue 26, points 2 and 3)."""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipukit.grading import sandbox

LANDLOCK = pytest.mark.skipif(sandbox.landlock_abi() == 0, reason=sandbox.landlock_missing())

PROBE = """\
import os, sys
inside, outside = sys.argv[1:3]
found = []
for path in (os.path.join(inside, 'a.txt'), os.path.join(outside, 'b.txt'), '/dev/null',
             os.path.join(inside, '..', 'c.txt')):
    try:
        with open(path, 'a') as f:
            f.write('x')
        found.append('wrote')
    except PermissionError:
        found.append('refused')
try:
    with open(os.path.join(inside, 'big'), 'wb') as f:
        f.write(b'x' * 20_000)
    found.append('big')
except OSError as exc:
    found.append(f'errno {exc.errno}')
try:
    os.kill(os.getppid(), 0)
    found.append('signals out')
except PermissionError:
    found.append('no signals out')
print(' '.join(found))"""


def probe(tmp_path, landlock: bool) -> str:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    cmd = sandbox.launcher(sys.executable, [inside], 10_000, landlock=landlock)
    proc = subprocess.run([*cmd, sys.executable, "-c", PROBE, str(inside), str(outside)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@LANDLOCK
def test_the_launcher_lets_the_command_write_only_in_its_folder(tmp_path):
    scoped = "no signals out" if sandbox.landlock_abi() >= 6 else "signals out"
    assert probe(tmp_path, landlock=True) == f"wrote refused wrote refused errno 27 {scoped}"
    assert not (tmp_path / "outside" / "b.txt").exists()


def test_without_landlock_the_launcher_only_limits_file_sizes(tmp_path):
    assert probe(tmp_path, landlock=False) == "wrote wrote wrote wrote errno 27 signals out"


@LANDLOCK
def test_the_launcher_never_runs_the_command_unsandboxed(tmp_path):
    cmd = sandbox.launcher(sys.executable, [tmp_path / "missing"], 10_000, landlock=True)
    proc = subprocess.run([*cmd, sys.executable, "-c", "print('ran')"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 3 and proc.stdout == ""
    assert "sandbox.py: [Errno 2]" in proc.stderr


# -- the scratch copy -------------------------------------------------------------------------

def test_the_scratch_copy_holds_regular_files_only(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "data.txt").write_text("data")
    (src / "a.ipynb").write_text("{}")
    (src / "linked_dir").symlink_to(src / "sub", target_is_directory=True)
    (src / "linked_file").symlink_to("/etc/hostname")
    os.mkfifo(src / "pipe")  # opening it would block: never opened
    for skipped in (".git", "__pycache__", "kit"):
        (src / skipped).mkdir()
        (src / skipped / "x").write_text("x")
    done = sandbox.make_scratch(src, dest, 1_000, time.monotonic() + 30,
                                skip={(src / "kit").resolve()})
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == [
        "a.ipynb", "sub", "sub/data.txt"]
    assert (done.copied_files, done.copied_bytes) == (2, 6)
    assert sorted(done.left_out) == ["linked_dir (a symbolic link: not copied)",
                                     "linked_file (a symbolic link: not copied)",
                                     "pipe (not a file: not copied)"]


def test_the_scratch_copy_stops_at_its_size_limit_and_its_deadline(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for k in range(30):
        (src / f"{k:02d}.bin").write_bytes(b"x" * 100)
    done = sandbox.make_scratch(src, tmp_path / "dest", 1_050, time.monotonic() + 30)
    assert done.copied_files == 10 and done.copied_bytes == 1_000
    assert done.report()["left_out"] == [
        f"{k:02d}.bin (100 bytes: over the scratch limit of 1,050)" for k in range(10, 30)]
    late = sandbox.make_scratch(src, tmp_path / "late", 10**6, time.monotonic() - 1)
    assert late.copied_files == 0
    assert late.left_out == ["00.bin and what follows (the time limit was reached)"]


def test_a_long_list_of_left_out_files_is_cut(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for k in range(25):
        (src / f"{k:02d}").symlink_to("/etc/hostname")
    report = sandbox.make_scratch(src, tmp_path / "dest", 10, time.monotonic() + 30).report()
    assert len(report["left_out"]) == 21 and report["left_out"][-1] == "and 5 more"


def test_remove_tree_removes_what_the_kernel_made_read_only(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    (tmp_path / "a" / "c").mkdir()
    (tmp_path / "a" / "c" / "link").symlink_to(tmp_path / "kept")
    (tmp_path / "kept").write_text("not followed")
    os.chmod(tmp_path / "a" / "b", 0o000)
    os.chmod(tmp_path / "a", 0o500)
    sandbox.remove_tree(tmp_path / "a")
    assert not (tmp_path / "a").exists() and (tmp_path / "kept").read_text() == "not followed"


# -- the kit's snapshot -----------------------------------------------------------------------

def kit(tmp_path) -> Path:
    root = tmp_path / "kit"
    (root / "grading" / "__pycache__").mkdir(parents=True)
    (root / "__init__.py").write_text("x = 1\n")
    (root / "grading" / "checks.py").write_text("y = 2\n")
    (root / "grading" / "__pycache__" / "checks.cpython.pyc").write_bytes(b"\0" * 16)
    return root


@pytest.mark.parametrize("change", ["edit", "add", "remove", "pyc", "mode", "link"])
def test_the_snapshot_notices_every_change_and_restores_it(tmp_path, change):
    root = kit(tmp_path)
    snap = sandbox.KitSnapshot(root)
    target = root / "grading" / "checks.py"
    if change == "edit":
        target.write_text("y = 3\n")
    elif change == "add":
        (root / "grading" / "extra.py").write_text("z = 1\n")
    elif change == "remove":
        target.unlink()
    elif change == "pyc":  # a planted compiled cache would run in the next grader
        (root / "grading" / "__pycache__" / "checks.cpython.pyc").write_bytes(b"\1" * 16)
    elif change == "mode":
        os.chmod(target, 0o777)
    else:
        target.unlink()
        target.symlink_to("/etc/hostname")
    assert snap.changes() != []
    snap.restore()
    assert snap.changes() == []
    assert target.read_text() == "y = 2\n" and not target.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) != 0o777
    assert not (root / "grading" / "extra.py").exists()


def test_restore_moves_the_changed_and_added_files_to_the_backup_first(tmp_path):
    root = kit(tmp_path)
    snap = sandbox.KitSnapshot(root)
    (root / "grading" / "checks.py").write_text("y = 3  # an edit\n")
    (root / "grading" / "extra.py").write_text("z = 1\n")
    (root / "__init__.py").unlink()
    backup = tmp_path / "backup"
    assert snap.restore(backup) == ["grading/checks.py", "grading/extra.py"]
    assert snap.changes() == []
    assert (root / "grading" / "checks.py").read_text() == "y = 2\n"
    assert (backup / "grading" / "checks.py").read_text() == "y = 3  # an edit\n"
    assert (backup / "grading" / "extra.py").read_text() == "z = 1\n"
    assert sorted(p.name for p in backup.rglob("*") if p.is_file()) == ["checks.py", "extra.py"]


def test_the_kernels_copy_of_the_kit_is_read_only_with_the_same_times(tmp_path):
    root = kit(tmp_path)
    snap = sandbox.KitSnapshot(root)
    snap.copy_to(tmp_path / "copy")
    copied = tmp_path / "copy" / "grading" / "checks.py"
    assert copied.read_text() == "y = 2\n"
    assert stat.S_IMODE(copied.stat().st_mode) == 0o444
    assert stat.S_IMODE((tmp_path / "copy" / "grading").stat().st_mode) == 0o555
    assert copied.stat().st_mtime_ns == (root / "grading" / "checks.py").stat().st_mtime_ns
    sandbox.remove_tree(tmp_path / "copy")


# -- processes --------------------------------------------------------------------------------

ESCAPES = """\
import os, subprocess, sys, time
subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],
                 start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
time.sleep(60)"""


def test_every_descendant_ends_detached_and_double_forked_ones_too():
    assert sandbox.become_subreaper()
    before = sandbox.descendants()
    parent = subprocess.Popen([sys.executable, "-c", ESCAPES])
    deadline = time.monotonic() + 20
    while len(sandbox.descendants() - before) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    started = sandbox.descendants() - before  # the parent, its child, its grandchild
    assert len(started) == 3 and parent.pid in started
    parent.kill()  # its children are orphans now: re-parented to this process
    parent.wait()
    time.sleep(0.2)
    assert sorted(sandbox.end_descendants(keep=before)) == sorted(started - {parent.pid})
    assert sandbox.descendants() - before == set()
    zombies = [p for p, (ppid, state) in sandbox._parents().items()
               if ppid == os.getpid() and state == "Z"]
    assert zombies == []
