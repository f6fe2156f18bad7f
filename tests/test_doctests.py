"""Every module's docstring examples run (and pass) in CI, whatever pytest's options."""

import doctest
import importlib
import pkgutil

import matplotlib
import pytest

import ipukit

matplotlib.use("Agg")

MODULES = sorted(m.name for m in pkgutil.walk_packages(ipukit.__path__, "ipukit.")
                 if not m.name.endswith("__main__"))


def test_every_package_is_listed():
    assert {"ipukit.cost", "ipukit.timeline", "ipukit.parallel.runner",
            "ipukit.parallel.frontend_tf", "ipukit.parallel.frontend_poptorch"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
