"""pytest configuration for the notebooks (nbval) and the test suite.

``make test`` runs ``pytest``, which collects ``tests/`` and, with ``--nbval-lax``
(pyproject.toml), every notebook in ``notebooks/``, ``solutions/`` and ``exercises/``:
each cell must run without error; cells tagged ``nbval-check-output`` (the exercise
checks and scoreboards) must also reproduce their stored output. Exercise notebooks are
stored with a fresh run's outputs, so their checks must still say "not solved yet".
An exercise notebook a learner edited (its cells differ from what ``make_exercises``
generated) is not run: ``make test`` lists it as the learner's work and never changes it.
"""

from pathlib import Path

import pytest

_EDITED: list[str] = []

#: Output types never compared: stderr carries warnings with per-run temporary paths;
#: HTML and JavaScript come from widgets and rich reprs.
SKIP_COMPARE = ("stderr", "text/html", "application/javascript")


def pytest_collectstart(collector):
    """nbval's documented hook: skip output types that differ from run to run."""
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb" and hasattr(collector, "skip_compare"):
        collector.skip_compare = tuple(collector.skip_compare) + SKIP_COMPARE


def pytest_ignore_collect(collection_path, config):
    """Leave a learner's edited exercise notebook alone (the kit's own tests are for the
    notebooks as generated); the terminal summary names it."""
    path = Path(collection_path)
    if path.suffix != ".ipynb" or path.parent.name != "exercises":
        return None
    from ipukit.grading.make_exercises import edited_exercise

    if edited_exercise(path):
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
            f"{path}: edited since it was generated (a learner's work): not run by nbval, "
            "and kept as it is (make_exercises will not overwrite it)")
