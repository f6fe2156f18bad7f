"""pytest configuration for the notebooks (nbval) and the test suite.

``make test`` runs ``pytest``, which collects ``tests/`` and, with ``--nbval-lax``
(pyproject.toml), every notebook in ``notebooks/``, ``solutions/`` and ``exercises/``:
each cell must run without error; cells tagged ``nbval-check-output`` (the exercise
checks and scoreboards) must also reproduce their stored output. Exercise notebooks are
stored with a fresh run's outputs, so their checks must still say "not solved yet".
In ``exercises/``, nbval runs only the kit's exercise notebooks exactly as
``make_exercises`` generated them (outputs aside): a notebook a learner edited (code,
pasted images, tags, metadata: :func:`ipukit.grading.make_exercises.edited_exercise`, the
definition ``make_exercises`` itself uses), a learner's own notebook there and a
``backup-*`` copy anywhere are not run; ``make test`` lists them as the learner's work and
never changes them.

``make test`` runs pytest-xdist with ``--dist loadscope`` (a module's tests, or a notebook's
cells, on one worker) and ``--no-loadscope-reorder``: the modules are handed out in the
order :func:`pytest_collection_modifyitems` leaves them, the longest first.

A notebook's kernel that does not answer ``kernel_info`` in time is started again, with a
warning that keeps its log (:func:`patient_kernel_start`).
"""

import tempfile
import warnings
from pathlib import Path

import pytest

_EDITED: list[str] = []

#: Output types never compared: stderr carries warnings with per-run temporary paths;
#: HTML and JavaScript come from widgets and rich reprs.
SKIP_COMPARE = ("stderr", "text/html", "application/javascript")


#: The slowest test modules, slowest first (``pytest -n 2 --durations=0``, summed per module;
#: BENCHMARKS.md, issue 29): handed out first, so that the many short modules fill in
#: around them and no worker starts a long one while the other runs out of work. The rest
#: follow in collection order.
LONG_POLES = ("tests/test_browser.py", "tests/test_grade.py", "tests/test_pyodide.py",
              "tests/test_wasm32.py", "tests/test_site.py", "tests/test_pipelining_throughput.py",
              "tests/test_grading.py", "tests/test_mutants.py", "tests/test_widgets.py")


#: How many kernels nbval may start for one notebook before its cells fail to set up.
KERNEL_TRIES = 3


def patient_kernel_start(start, tries: int = KERNEL_TRIES):
    """nbval's ``start_new_kernel``, tried up to ``tries`` times.

    Once in CI, on a busy machine, a fresh kernel never answered ``kernel_info`` (nbval:
    "Kernel didn't respond in 60 seconds") and every cell of that notebook failed to set up;
    the same lesson runs in a second in every other run. A kernel that does not answer in
    ``--nbval-kernel-startup-timeout`` seconds is shut down (by nbval) and a fresh one is
    started, with a pytest warning that gives the error and the end of the lost kernel's
    stderr (which nbval sends to ``os.devnull``), so that a run that needed it says so."""
    def start_new_kernel(startup_timeout=60, **kwargs):
        for attempt in range(1, tries + 1):
            with tempfile.TemporaryFile() as log:
                kwargs["stderr"] = log
                try:
                    return start(startup_timeout=startup_timeout, **kwargs)
                except RuntimeError as exc:
                    if attempt == tries:
                        raise
                    log.seek(0)
                    tail = log.read()[-2000:].decode(errors="replace")
                    warnings.warn(f"the kernel for {kwargs.get('cwd')} did not start (try "
                                  f"{attempt} of {tries}: {exc}); starting a fresh one. Its "
                                  f"stderr ended: {tail or '(nothing)'}", stacklevel=2)
    start_new_kernel.__wrapped__ = start
    return start_new_kernel


def pytest_configure(config):
    import nbval.kernel

    nbval.kernel.start_new_kernel = patient_kernel_start(nbval.kernel.start_new_kernel)


def pytest_collection_modifyitems(items):
    """The long poles first (a stable sort: each module's own order is kept)."""
    rank = {name: i for i, name in enumerate(LONG_POLES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_collectstart(collector):
    """nbval's documented hook: skip output types that differ from run to run."""
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb" and hasattr(collector, "skip_compare"):
        collector.skip_compare = tuple(collector.skip_compare) + SKIP_COMPARE


def pytest_ignore_collect(collection_path, config):
    """Leave a learner's notebooks alone (the kit's own tests are for the notebooks as
    generated); the terminal summary names them."""
    path = Path(collection_path)
    if path.suffix != ".ipynb":
        return None
    if not path.name.startswith("backup-") and path.parent.name != "exercises":
        return None
    from ipukit.grading.make_exercises import edited_exercise

    if path.name.startswith("backup-") or edited_exercise(path):
        _EDITED.append(str(path))
        return True
    return None


def pytest_sessionfinish(session):
    """Under pytest-xdist (``make test``) the workers collect: each tells the controller
    which notebooks it left alone."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["ipukit_edited"] = list(_EDITED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _EDITED.extend(p for p in getattr(node, "workeroutput", {}).get("ipukit_edited", [])
                   if p not in _EDITED)


def pytest_terminal_summary(terminalreporter):
    for path in _EDITED:
        terminalreporter.write_line(
            f"{path}: a learner's work (edited since it was generated, a backup, or not "
            "generated by make_exercises): not run by nbval, and kept as it is "
            "(make_exercises will not overwrite it)")
