"""Fixtures shared by tests/."""

import fcntl
import functools
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from ipukit import backend
from ipukit.grading import feedback

# Property tests run on busy 2-core CI machines: time limits per example would be flaky.
settings.register_profile("ipukit", deadline=None)
settings.load_profile("ipukit")


def _host(a):
    """A CuPy array (or a list/tuple of them) as NumPy; anything else unchanged."""
    if isinstance(a, (list, tuple)):
        return type(a)(_host(x) for x in a)
    return backend.to_numpy(a) if type(a).__module__.startswith("cupy") else a


_TESTS = str(Path(__file__).resolve().parent)


def _on_host(compare):
    @functools.wraps(compare)
    def wrapper(*args, **kwargs):
        if not sys._getframe(1).f_code.co_filename.startswith(_TESTS):
            return compare(*args, **kwargs)  # library code: NumPy's own behaviour
        return compare(*map(_host, args), **{k: _host(v) for k, v in kwargs.items()})
    return wrapper


# With IPUKIT_BACKEND=cupy, model parameters and the parallel ops' results are CuPy arrays,
# which refuse implicit conversion to NumPy: NumPy's comparisons copy them to the host
# first (backend.to_numpy), so the same assertions check the same values on both backends.
# Only calls written in tests/ are wrapped: library code that hands a CuPy array to NumPy
# still fails as it would for a user.
if backend.name() == "cupy":
    for _mod, _name in [(np.testing, "assert_allclose"), (np.testing, "assert_array_equal"),
                        (np.testing, "assert_equal"), (np, "allclose"),
                        (np, "array_equal")]:
        setattr(_mod, _name, _on_host(getattr(_mod, _name)))


@pytest.fixture(autouse=True)
def fresh_grading_results():
    """Every test starts with no recorded exercise results, in feedback mode."""
    feedback.set_mode("feedback")
    feedback.reset()
    yield
    feedback.reset()


@pytest.fixture(autouse=True)
def _wasm32_ints(request):
    """IPUKIT_WASM32=1 runs every test with NumPy refusing what it refuses on wasm32
    (tests/wasm32.py): ``IPUKIT_WASM32=1 pytest tests/test_compile.py``."""
    import os

    mode = os.environ.get("IPUKIT_WASM32")
    if mode not in ("1", "collect"):
        yield
        return
    from tests.wasm32 import strict_ints

    seen = [] if mode == "collect" else None
    with strict_ints(seen):
        yield
    for where in dict.fromkeys(seen or []):
        print("wasm32 would refuse:", where, file=sys.stderr)


@pytest.fixture(scope="session")
def kit_wheel(tmp_path_factory) -> Path:
    """The kit's wheel, built from this checkout once per test run (tools/site/assets.py's
    ``pip wheel``, ~3 CPU s): under pytest-xdist the workers share the run's folder, and
    the first to ask builds it there under a lock (test_pyodide's and test_site's)."""
    sys.path.insert(0, str(Path(_TESTS).parent / "tools" / "site"))
    import assets

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this run's folder (each worker's is popen-gwN in it)
    folder = base / "kit-wheel"
    with open(base / "kit-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not folder.exists():  # (built aside, so that no one finds half a folder)
            partial = base / "kit-wheel.partial"
            shutil.rmtree(partial, ignore_errors=True)
            assets.kit_wheel(partial)
            partial.rename(folder)
        [wheel] = folder.glob("ipukit-*.whl")
        return wheel
