"""pytest setup of reduce's Python tests.

REDUCE_REQUIRE_TORCH, set to any non-empty value (make test sets it), says the machine has
everything the tests need, as it does for the Go tests (internal/testenv): a module that is
missing then fails the tests that need it instead of skipping them.
"""

import importlib
import os

import pytest


def require(module, package):
    """The imported module; else the test is skipped, or fails under REDUCE_REQUIRE_TORCH."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        why = "cannot import %s (Debian's %s): %s" % (module, package, e)
        if os.environ.get("REDUCE_REQUIRE_TORCH"):
            pytest.fail("REDUCE_REQUIRE_TORCH is set and " + why, pytrace=False)
        pytest.skip(why)


@pytest.fixture
def zstandard():
    return require("zstandard", "python3-zstandard")
