"""pytest setup of reduce's Python tests.

REDUCE_REQUIRE_TORCH, set to any non-empty value (make test sets it), says the machine has
everything the tests need, as it does for the Go tests (internal/testenv): a module that is
missing then fails the tests that need it instead of skipping them.
"""

import importlib
import os
import re
import shutil
import subprocess

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


def single_thread_after_fork(torch):
    """Call first in a child os.fork()ed from the test process: run torch's ops on one thread.

    torch's intra-op pool is GNU OpenMP, which is not fork-safe: in a child forked after the parent
    ran a parallel op, the child's first parallel op waits forever for the parent's pool threads,
    which the child does not have. Debian's torch 1.13 runs one thread unless OMP_NUM_THREADS says
    otherwise, so it never showed there; PyPI's torch 2.x runs one per core (measured: a child of
    a process that ran torch.ones(1 << 18).sum() on 2 threads hangs in that same sum). One thread
    runs the op inline. the worker's zygote runs no op before it forks and imports the --entry
    or step module on one thread (test_worker.test_zygote_entry_running_ops_at_import), so only
    these test harnesses need it."""
    torch.set_num_threads(1)


def without_source_lines(text):
    """text (or None) without the line numbers of torch's C++ sources: "alloc_cpu.cpp:75]" becomes
    "alloc_cpu.cpp]", as reduce's signatures normalize them (internal/signature/normalize.go). They
    move between torch releases while the message stays: DefaultCPUAllocator's check is
    alloc_cpu.cpp:75 in torch 1.13 and alloc_cpu.cpp:127 in 2.15."""
    return None if text is None else re.sub(r"(\.(?:cpp|cu|h)):\d+\]", r"\1]", text)


@pytest.fixture(autouse=True, scope="session")
def reduce_binary(tmp_path_factory):
    """The reduce executable that judges the fixtures' runs (REDUCE_BINARY, which the plugin reads):
    the one make test built, else one `go build` makes for the session."""
    if os.environ.get("REDUCE_BINARY"):
        yield os.environ["REDUCE_BINARY"]
        return
    go = shutil.which("go")
    if go is None:
        pytest.fail("REDUCE_BINARY is not set and there is no go to build reduce with: set it to reduce's "
                    "executable (make build: bin/reduce)", pytrace=False)
    out = str(tmp_path_factory.mktemp("bin") / "reduce")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([go, "build", "-o", out, "./cmd/reduce"], cwd=root, check=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REDUCE_BINARY", out)
        yield out


@pytest.fixture(autouse=True, scope="session")
def trust_store(tmp_path_factory):
    """The tests' own trust store (REDUCE_TRUST_DIR), for the whole session so that it is in place
    before any fixture records (a module's, too): what the recorder or reduce records as the user's
    stays in the tests, and nothing a test writes becomes the machine's user's."""
    store = tmp_path_factory.mktemp("trust")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REDUCE_TRUST_DIR", str(store))
        yield store
