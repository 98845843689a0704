"""The runtime of reduce_collect.py that the collector's tests run on: mismatch (the recorded
failure or another), summarize, check_result, run_in_child (with its ChildFailure), sample_value,
check_sample_rule, check_distinct, and check_passing and the culprit checks built on them.
run_in_child runs real batches in real child processes, and a test file marked xfail(strict=True,
raises=...) around it is run by pytest in a subprocess. test_collector.py runs the collector."""

import collections
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.checks  # noqa: E402
import reduce_batch.child  # noqa: E402
import reduce_batch.errors  # noqa: E402
import reduce_batch.failure  # noqa: E402
import reduce_batch.plugin  # noqa: E402
import reduce_batch.steps  # noqa: E402
from check_structure_select import Encoding  # noqa: E402  (a mapping that is not a dict)
from conftest import require, without_source_lines  # noqa: E402

MiB = 1 << 20

# The entry functions of the child-process tests, in a module of their own (imported in the child
# by name from the working directory, and here when its exception class is resolved).
ENTRIES = '''
import json
import os
import sys

import torch


class StepError(Exception):
    pass


class TwoArgError(Exception):
    def __init__(self, a, b):
        Exception.__init__(self, a, b)


def raise_custom(batch):
    raise StepError("the step failed on sample 3")


def raise_empty(batch):
    raise StepError()


def raise_two(batch):
    raise TwoArgError("x", "y")


def raise_oom(batch):
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def raise_key(batch):
    raise KeyError("label")


def raise_lines(batch):
    raise RuntimeError("CUDA error: device-side assert triggered\\nCompile with TORCH_USE_CUDA_DSA")


def raise_chained(batch):
    try:
        raise ValueError("the first")
    except ValueError:
        raise IndexError("index 7 is out of bounds")


def report(batch):
    import reduce_batch
    raise RuntimeError(json.dumps({
        "CUDA_LAUNCH_BLOCKING": os.environ.get("CUDA_LAUNCH_BLOCKING"),
        "AMD_SERIALIZE_KERNEL": os.environ.get("AMD_SERIALIZE_KERNEL"),
        "MARK": os.environ.get("RB_CHILD_MARK"),
        "cwd": os.getcwd(),
        "reduce_batch": os.path.abspath(reduce_batch.__file__),
        "executable": sys.executable,
        "samples": batch.samples,
    }))


def outputs(batch):
    return {"loss": torch.tensor(1.5), "parts": (torch.zeros(2, 3, dtype=torch.float16), 7), "name": "x"}


def abort(batch):
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.abort()


def exit3(batch):
    sys.stdout.flush()
    os._exit(3)


def sleep(batch):
    import time
    time.sleep(600)
'''


@pytest.fixture(scope="module")
def child_dir(tmp_path_factory):
    """A folder with the entry module and the batches: cross_entropy (IndexError on the CPU),
    gather (RuntimeError), a passing cross_entropy, and an embedding whose output is 48 MiB."""
    d = tmp_path_factory.mktemp("child")
    (d / "rb_child_entries.py").write_text(ENTRIES)
    logits = torch.zeros(4, 3)
    rb.save(str(d / "ce.bin"), {"input": logits, "target": torch.tensor([0, 1, 5, 2])}, op="cross_entropy",
            provenance=False)
    rb.save(str(d / "ok.bin"), {"input": logits, "target": torch.tensor([0, 1, 2, 2])}, op="cross_entropy",
            provenance=False)
    rb.save(str(d / "gather.bin"), {"input": torch.zeros(2, 3), "index": torch.tensor([[0], [5]])}, op="gather",
            attrs={"dim": 1}, provenance=False)
    rb.save(str(d / "emb.bin"), {"input": torch.zeros(48, 64, dtype=torch.int64), "weight": torch.zeros(100, 4096)},
            op="embedding", batch_dims={"weight": None}, provenance=False)
    return d


@pytest.fixture
def in_child_dir(child_dir, monkeypatch):
    """The working directory is the entries' folder (the child imports them from there), which is
    on this process's sys.path too (where run_in_child resolves their exception classes)."""
    monkeypatch.chdir(child_dir)
    monkeypatch.syspath_prepend(str(child_dir))
    return child_dir


# ---------------------------------------------------------------------------------------------
# mismatch: what fixture.json records, compared


class Custom(RuntimeError):
    pass


@pytest.mark.parametrize("e, name, message, pattern, want", [
    (RuntimeError("boom"), "RuntimeError", None, None, True),
    (RuntimeError("boom"), "RuntimeError", "boom", None, True),
    (RuntimeError("boom\nC++ backtrace"), "RuntimeError", "boom", None, True),
    (RuntimeError("boom!"), "RuntimeError", "boom", None, False),
    (RuntimeError("boom"), "RuntimeError", "boom\nmore", None, False),
    (RuntimeError("index 5 is out of bounds"), "RuntimeError", None, r"index \d+ is out", True),
    (RuntimeError("index 5 is out of bounds"), "RuntimeError", None, r"^out", False),
    (RuntimeError("boom"), "RuntimeError", "boom", r"never", True),  # message wins over pattern
    (IndexError("boom"), "RuntimeError", None, None, False),
    (Custom("boom"), "RuntimeError", None, None, False),  # the short name must be equal
    (Custom("boom"), "Custom", None, None, True),  # a short name that resolves to no class
    (torch.cuda.OutOfMemoryError("oom"), "torch.cuda.OutOfMemoryError", "oom", None, True),
    (torch.cuda.OutOfMemoryError("oom"), "torch.OutOfMemoryError", None, None, True),
    (Custom("boom"), "torch.cuda.Custom", None, None, True),  # torch.cuda has no Custom: name only
    (IndexError("boom"), None, None, None, False),  # not a crash of the child
    (rb.child.ChildFailure("signal SIGSEGV", "", "Fatal Python error: Segmentation fault\n"), None, None, "SIGSEGV", True),
])
def test_mismatch(e, name, message, pattern, want):
    assert (rb.failure.mismatch(e, name, message, pattern) is None) is want


def test_mismatch_searches_the_ends_of_a_huge_text():
    """A pattern is searched in a huge text's first and last 64 KiB (the message, the traceback's end), so that
    a fixture's test cannot spend its time in one search."""
    pad = "x" * (1 << 20)
    assert rb.failure.mismatch(ValueError("label out of range " + pad), "ValueError", None, "label.*?range") is None
    assert rb.failure.mismatch(ValueError(pad + " label out of range " + pad), "ValueError", None, "label.*?range") \
        .startswith("its text does not match")


def test_mismatch_says_why():
    class OutOfMemoryError(Exception):  # the short name, but not torch's class
        pass

    assert rb.failure.mismatch(OutOfMemoryError("oom"), "torch.cuda.OutOfMemoryError").endswith(
        "not a torch.cuda.OutOfMemoryError")
    assert rb.failure.mismatch(IndexError("Target 5 is out of bounds."), "RuntimeError") == \
        "raised IndexError: Target 5 is out of bounds.; want RuntimeError"
    assert rb.failure.mismatch(IndexError("Target 5"), "IndexError", "Target 4") == "message 'Target 5', want 'Target 4'"
    assert rb.failure.mismatch(ValueError("x out of [0, 1]"), "ValueError", None, "duplicate.*?key") == \
        "its text does not match 'duplicate.*?key'"
    # A DifferentFailure is no Exception: an xfail's raises=Exception cannot take it for the recorded one.
    assert not issubclass(rb.failure.DifferentFailure, Exception)


def test_failure_class():
    assert rb.failure.failure_class("IndexError") is IndexError
    assert rb.failure.failure_class("torch.cuda.OutOfMemoryError") is torch.cuda.OutOfMemoryError
    assert rb.failure.failure_class(None) is rb.child.ChildFailure
    with pytest.raises(ImportError, match="no_such_module.Error"):
        rb.failure.failure_class("no_such_module.Error")


# ---------------------------------------------------------------------------------------------
# summarize and check_result

Pair = collections.namedtuple("Pair", "loss logits")


def test_summarize_walks_containers():
    out = [Pair(torch.tensor(1.0), torch.zeros(2, 3)),
           {"z": torch.tensor([float("nan"), 1.0]), "a": [3, 2.5, float("inf")], "s": "text", "b": True,
            "ids": torch.tensor([1, 2], dtype=torch.int64), "none": None, 1: torch.ones(1, dtype=torch.bool)}]
    got = rb.checks.summarize(out)
    assert got == [
        {"path": "0.loss", "dtype": "float32", "shape": [], "finite": True},
        {"path": "0.logits", "dtype": "float32", "shape": [2, 3], "finite": True},
        {"path": "1.1", "dtype": "bool", "shape": [1], "finite": True},
        {"path": "1.a.0", "dtype": "int", "shape": [], "finite": True},
        {"path": "1.a.1", "dtype": "float", "shape": [], "finite": True},
        {"path": "1.a.2", "dtype": "float", "shape": [], "finite": False},
        {"path": "1.b", "dtype": "bool", "shape": [], "finite": True},
        {"path": "1.ids", "dtype": "int64", "shape": [2], "finite": True},
        {"path": "1.z", "dtype": "float32", "shape": [2], "finite": False},
    ]
    assert json.loads(json.dumps(got)) == got


def test_summarize_bare_values():
    assert rb.checks.summarize(torch.zeros(0, 4, dtype=torch.float64)) == [
        {"path": "", "dtype": "float64", "shape": [0, 4], "finite": True}]
    assert rb.checks.summarize(torch.full((2,), float("-inf"), dtype=torch.bfloat16, requires_grad=True)) == [
        {"path": "", "dtype": "bfloat16", "shape": [2], "finite": False}]
    assert rb.checks.summarize(None) == [] and rb.checks.summarize("loss") == []
    assert rb.checks.summarize(0.5) == [{"path": "", "dtype": "float", "shape": [], "finite": True}]


def test_check_result():
    out = {"loss": torch.tensor(0.5), "logits": torch.zeros(2, 3)}
    summary = rb.checks.check_result(out)
    assert summary == rb.checks.summarize(out)
    assert rb.checks.check_result(summary, like=out) == summary  # a summary (run_in_child's), like a live output
    assert rb.checks.check_result(out, like=summary) == summary
    assert rb.checks.check_result([]) == []

    with pytest.raises(AssertionError) as info:
        rb.checks.check_result({"loss": torch.tensor(float("nan")), "logits": torch.zeros(2)})
    assert str(info.value) == "output 'loss' (float32[]) is not finite: it holds NaN or an infinity"
    with pytest.raises(AssertionError, match=r"^the output \(float32\[3\]\) is not finite"):
        rb.checks.check_result(torch.tensor([1.0, float("inf"), 0.0]))
    with pytest.raises(AssertionError) as info:
        rb.checks.check_result({"loss": torch.tensor(0.5), "extra": 1}, like=out)
    assert str(info.value) == "the output's parts differ: missing 'logits'; unexpected 'extra'"
    with pytest.raises(AssertionError) as info:
        rb.checks.check_result({"loss": torch.tensor(0.5), "logits": torch.zeros(2, 4)}, like=out)
    assert str(info.value) == "output 'logits': float32[2, 4], want float32[2, 3]"
    with pytest.raises(AssertionError, match=r"output 'loss': float64\[\], want float32\[\]"):
        rb.checks.check_result({"loss": torch.tensor(0.5, dtype=torch.float64), "logits": torch.zeros(2, 3)}, like=out)


# ---------------------------------------------------------------------------------------------
# run_in_child


def test_run_in_child_passing_batch(in_child_dir):
    summary = rb.child.run_in_child("ok.bin")
    assert summary == [{"path": "", "dtype": "float32", "shape": [], "finite": True}]
    assert rb.checks.check_result(summary, like=torch.tensor(0.0)) == summary
    got = rb.child.run_in_child("ok.bin", entry="rb_child_entries:outputs")
    assert got == [{"path": "loss", "dtype": "float32", "shape": [], "finite": True},
                   {"path": "parts.0", "dtype": "float16", "shape": [2, 3], "finite": True},
                   {"path": "parts.1", "dtype": "int", "shape": [], "finite": True}]


@pytest.mark.parametrize("batch, cls, message", [
    ("ce.bin", IndexError, "Target 5 is out of bounds."),
    ("gather.bin", RuntimeError, "index 5 is out of bounds for dimension 1 with size 3"),
])
def test_run_in_child_raises_the_childs_exception(in_child_dir, batch, cls, message):
    with pytest.raises(Exception) as info:
        rb.child.run_in_child(str(in_child_dir / batch))
    e = info.value
    assert type(e) is cls and str(e) == message
    assert rb.failure.mismatch(e, cls.__name__, message) is None
    assert "Traceback (most recent call last):" in e.child_stderr and "in run_op" in e.child_stderr
    cause = e.__cause__
    assert isinstance(cause, rb.child.ChildFailure)
    assert (cause.name, cause.message, cause.stderr) == (cls.__name__, message, e.child_stderr)
    assert str(cause).startswith("the child process ended with %s: %s\n--- the end of its stderr ---\n"
                                 % (cls.__name__, message))
    assert str(cause).endswith("%s: %s" % (cls.__name__, message))


def test_run_in_child_runs_this_reduce_batch_in_this_environment(in_child_dir, monkeypatch):
    monkeypatch.setenv("RB_CHILD_MARK", "kept")
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")
    with pytest.raises(RuntimeError) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:report")
    assert json.loads(str(info.value)) == {
        "CUDA_LAUNCH_BLOCKING": "1", "AMD_SERIALIZE_KERNEL": "3", "MARK": "kept", "cwd": str(in_child_dir),
        "reduce_batch": os.path.abspath(rb.__file__), "executable": sys.executable, "samples": 4}


@pytest.mark.parametrize("entry, path, fragment", [
    ("rb_no_such_module:step", "ok.bin", "--entry 'rb_no_such_module:step': cannot import rb_no_such_module"),
    ("rb_child_entries:no_such_function", "ok.bin", "has no attribute 'no_such_function'"),
    (None, "missing.bin", "cannot load the candidate"),
])
def test_run_in_child_harness_error(in_child_dir, entry, path, fragment):
    with pytest.raises(rb.errors.HarnessError) as info:
        rb.child.run_in_child(path, entry=entry)
    text = str(info.value)
    assert text.startswith("the batch could not run in the child process: ") and fragment in text
    assert "--- the end of its stderr ---\nTraceback" in text or "rb.errors.HarnessError: " in text


def test_run_in_child_device_memory(in_child_dir):
    with pytest.raises(RuntimeError) as info:
        rb.child.run_in_child("emb.bin", device_memory=47 * MiB + MiB // 2)  # 48 MiB of output do not fit
    assert type(info.value) is RuntimeError
    assert without_source_lines(str(info.value)) == (
        "[enforce fail at alloc_cpu.cpp] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
        "allocate %d bytes. Error code 12 (Cannot allocate memory)" % (48 * MiB))
    assert rb.child.run_in_child("emb.bin", device_memory=1 << 30) == [
        {"path": "", "dtype": "float32", "shape": [48, 64, 4096], "finite": True}]


def test_run_in_child_dotted_classes(in_child_dir):
    import rb_child_entries

    with pytest.raises(rb_child_entries.StepError) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:raise_custom")
    assert str(info.value) == "the step failed on sample 3"
    assert rb.failure.mismatch(info.value, "rb_child_entries.StepError", "the step failed on sample 3") is None
    with pytest.raises(rb_child_entries.StepError) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:raise_empty")
    assert str(info.value) == ""

    # torch.cuda.OutOfMemoryError, which torch 2.x prints as torch.OutOfMemoryError
    with pytest.raises(torch.cuda.OutOfMemoryError) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:raise_oom")
    assert str(info.value) == "CUDA out of memory. Tried to allocate 2.00 GiB"
    assert rb.failure.mismatch(info.value, "torch.cuda.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB") is None

    with pytest.raises(KeyError) as info:  # its message is the repr of its argument
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:raise_key")
    assert info.value.args == ("label",) and str(info.value) == "'label'"

    with pytest.raises(RuntimeError) as info:  # a message of several lines: all of them
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:raise_lines")
    assert str(info.value) == "CUDA error: device-side assert triggered\nCompile with TORCH_USE_CUDA_DSA"
    assert rb.failure.mismatch(info.value, "RuntimeError", "CUDA error: device-side assert triggered") is None

    with pytest.raises(IndexError, match="^index 7 is out of bounds$"):  # the last of a chain
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:raise_chained")


def test_run_in_child_child_failure(in_child_dir):
    # A class this process cannot import: the entry module imported from its file is
    # _reduce_entry_<name> in the child.
    path_entry = "%s:raise_custom" % (in_child_dir / "rb_child_entries.py")
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child("ok.bin", entry=path_entry)
    e = info.value
    assert (e.name, e.message) == ("_reduce_entry_rb_child_entries.StepError", "the step failed on sample 3")
    assert e.child_stderr == e.stderr and "Traceback (most recent call last):" in e.stderr
    assert str(e).startswith("the child process ended with _reduce_entry_rb_child_entries.StepError: the step "
                             "failed on sample 3\n--- the end of its stderr ---\n")
    assert rb.failure.mismatch(e, "_reduce_entry_rb_child_entries.StepError") is not None  # not its class

    with pytest.raises(rb.child.ChildFailure) as info:  # a class that one string does not make
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:raise_two")
    assert (info.value.name, info.value.message) == ("rb_child_entries.TwoArgError", "('x', 'y')")


def test_run_in_child_signal_exit_and_timeout(in_child_dir):
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:abort")
    assert (info.value.name, info.value.message) == ("signal SIGABRT", "")
    assert str(info.value).startswith("the child process ended with signal SIGABRT\n")
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:exit3")
    assert info.value.name == "exit 3"
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:sleep", timeout=3)
    assert info.value.name == "timeout"
    assert info.value.message == "no end within 3 seconds: killed"


@pytest.mark.parametrize("stderr, want", [
    ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    f()\n    ^^^\n"
     "torch.OutOfMemoryError: CUDA out of memory.\n", ("torch.OutOfMemoryError", "CUDA out of memory.")),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nmod.Outer.Inner\n",
     ("mod.Outer.Inner", "")),
    ("noise\nTraceback (most recent call last):\n  File \"a\", line 1\nValueError: a\n\nDuring handling of the "
     "above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"b\", line 2\n"
     "rb.errors.HarnessError: --entry 'x:y': cannot import x\n", ("rb.errors.HarnessError",
                                                                    "--entry 'x:y': cannot import x")),
    ("Traceback (most recent call last):\n  File \"a\", line 1\nRuntimeError: Caught IndexError in DataLoader "
     "worker process 0.\nOriginal Traceback (most recent call last):\n  File \"w\", line 3\nIndexError: 9\n",
     ("RuntimeError", "Caught IndexError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
      "last):\n  File \"w\", line 3\nIndexError: 9")),
    ("Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n  File \"a\", line 1\n", None),
    ("", None),
])
def test_child_exception(stderr, want):
    assert rb.child._child_exception(stderr) == want


def _outcomes(output):
    """test name -> pytest's outcome word, from the short summary of -rA."""
    return dict((m.group(2), m.group(1)) for m in
                re.finditer(r"^(PASSED|FAILED|XFAIL|XPASS|ERROR|SKIPPED)\S* \S*::(\w+)", output, re.M))


def test_xfail_strict_raises_judges_the_childs_exception(child_dir, tmp_path):
    """A test module with xfail(strict=True, raises=RuntimeError) around run_in_child: xfailed by
    the child's RuntimeError, failed by another class, by a harness error and by a batch that
    passes (strict)."""
    (tmp_path / "test_generated.py").write_text(textwrap.dedent('''
        import os
        import sys

        import pytest

        sys.path.insert(0, %r)
        import reduce_batch as rb
        import reduce_batch.checks
        import reduce_batch.child

        HERE = %r


        @pytest.mark.xfail(strict=True, raises=RuntimeError)
        def test_minimal_batch():
            rb.child.run_in_child(os.path.join(HERE, "gather.bin"))


        @pytest.mark.xfail(strict=True, raises=RuntimeError)
        def test_another_class():
            rb.child.run_in_child(os.path.join(HERE, "ce.bin"))  # IndexError


        @pytest.mark.xfail(strict=True, raises=IndexError)
        def test_another_batch():
            rb.child.run_in_child(os.path.join(HERE, "ce.bin"))


        @pytest.mark.xfail(strict=True, raises=RuntimeError)
        def test_harness_error():
            rb.child.run_in_child(os.path.join(HERE, "ok.bin"), entry="rb_no_such_module:step")


        @pytest.mark.xfail(strict=True, raises=RuntimeError)
        def test_passing_batch():
            out = rb.child.run_in_child(os.path.join(HERE, "ok.bin"))
            rb.checks.check_result(out)
        ''' % (HERE, str(child_dir))))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "test_generated.py"],
                       cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert _outcomes(p.stdout) == {"test_minimal_batch": "XFAIL", "test_another_batch": "XFAIL",
                                   "test_another_class": "FAILED", "test_harness_error": "FAILED",
                                   "test_passing_batch": "FAILED"}, p.stdout
    assert "[XPASS(strict)]" in p.stdout, p.stdout
    assert "IndexError: Target 5 is out of bounds." in p.stdout and "HarnessError" in p.stdout
    assert p.returncode == 1


# ---------------------------------------------------------------------------------------------
# sample_value, check_sample_rule, check_distinct

Item = collections.namedtuple("Item", "image label")


def test_sample_value_walks_the_sample():
    np = require("numpy", "python3-numpy")
    sample = {"label": torch.tensor(3), "inputs": {"ids": torch.tensor([[5, 6], [7, 8]]), "text": "hi"},
              "pair": (torch.zeros(2), {"mask": [[1, 0], [1, 1, 1]]}), "score": 0.5, "flag": True,
              "arr": np.array([1.5, 2.5]), "enc": Encoding({"input_ids": [101, 102]}), "item": Item(7, [1, 2]),
              "np_scalar": np.int64(9)}
    assert rb.checks.sample_value(sample, "label", []) == 3 and type(rb.checks.sample_value(sample, "label", [])) is int
    assert rb.checks.sample_value(sample, "inputs.ids", [1, 0]) == 7
    assert rb.checks.sample_value(sample, "inputs.ids", [-1, -1]) == 8
    assert rb.checks.sample_value(sample, "inputs.text", []) == "hi"
    assert rb.checks.sample_value(sample, "pair.0", [1]) == 0.0
    assert rb.checks.sample_value(sample, "pair.1.mask", [1, 2]) == 1
    assert rb.checks.sample_value(sample, "score", []) == 0.5
    assert rb.checks.sample_value(sample, "flag", []) is True
    assert rb.checks.sample_value(sample, "arr", [1]) == 2.5 and type(rb.checks.sample_value(sample, "arr", [1])) is float
    assert rb.checks.sample_value(sample, "enc.input_ids", [1]) == 102
    assert rb.checks.sample_value(sample, "item.label", [0]) == 1
    assert rb.checks.sample_value(sample, "item.0", []) == 7  # a named tuple the collate made a list
    assert rb.checks.sample_value(sample, "np_scalar", []) == 9
    # index None: a size along dim (without the batch dim)
    assert rb.checks.sample_value(sample, "inputs.ids", None, dim=1) == 2
    assert rb.checks.sample_value(sample, "inputs.text", None) == 2
    assert rb.checks.sample_value(sample, "pair.1.mask", None) == 2
    assert rb.checks.sample_value(sample, "pair.1.mask", None, dim=1) == 3  # the longest: what a collate pads to
    assert rb.checks.sample_value(sample, "enc.input_ids", None) == 2
    # a sample that is one tensor: the batch is named "batch"
    assert rb.checks.sample_value(torch.tensor([4, 5]), "batch", [1]) == 5
    assert rb.checks.sample_value((torch.zeros(3), 2), "1", []) == 2


def test_sample_value_errors():
    sample = {"label": torch.tensor(3), "inputs": {"ids": torch.tensor([5, 6]), "mask": [1, 1]}}
    with pytest.raises(KeyError) as info:
        rb.checks.sample_value(sample, "labels", [])
    assert info.value.args[0] == (
        "batch tensor 'labels': the sample has no 'labels' (it has keys 'label', 'inputs'). reduce_sample must "
        "return the sample as the Dataset yields it, with the keys of the batch, or, where the collate renames or "
        "makes keys, the collated one-sample batch (collate_fn([sample]))")
    with pytest.raises(KeyError, match=r"'inputs' has no 'token_ids' \(it has keys 'ids', 'mask'\)"):
        rb.checks.sample_value(sample, "inputs.token_ids", [0])
    with pytest.raises(KeyError, match=r"'label' is a Tensor, which has no 'x'"):
        rb.checks.sample_value(sample, "label.x", [])
    with pytest.raises(KeyError, match=r"the sample has no '2' \(it has tuple of 2 items\)"):
        rb.checks.sample_value((1, 2), "2", [])
    with pytest.raises(IndexError, match=r"index \[5\] is outside the sample's Tensor of shape \[2\]"):
        rb.checks.sample_value(sample, "inputs.ids", [5])
    with pytest.raises(IndexError, match=r"index \[2\] is outside the sample's list of 2 items"):
        rb.checks.sample_value(sample, "inputs.mask", [2])
    with pytest.raises(IndexError, match=r"names a part of shape \[2\] of the sample, not one element"):
        rb.checks.sample_value(sample, "inputs.ids", [])
    with pytest.raises(IndexError, match=r"has no dim 1"):
        rb.checks.sample_value(sample, "inputs.ids", None, dim=1)


def test_sample_value_follows_the_names_of_the_batch(tmp_path):
    """Every tensor of a batch collated from samples, by the name save() gives it, is found in each
    sample at its index without the batch dim: keys holding ".", int keys, named tuples, mappings,
    and the second part of a name that two parts share (name#2)."""
    samples = []
    for i in range(3):
        samples.append({
            "a.b": torch.tensor([i, i + 10]),
            "a": {"b": torch.tensor(float(i) / 2)},
            7: torch.tensor([i * 3]),
            "item": Item(torch.full((2, 2), float(i)), i + 100),
            "enc": Encoding({"input_ids": torch.tensor([i, i + 1, i + 2])}),
            "id": "s%d" % i,
        })
    from torch.utils.data import default_collate

    batch = default_collate(samples)
    path = str(tmp_path / "b.bin")
    rb.save(path, batch, provenance=False)
    loaded = rb.load(path)
    names = sorted(loaded.tensors)
    assert names == ["7", "a.b", "a.b#2", "enc.input_ids", "item.image", "item.label"]
    for name in names:
        t = loaded.tensors[name]
        assert loaded.batch_dims[name] == 0
        for i, sample in enumerate(samples):
            row = t[i]
            for index in ([list(ix) for ix in torch.cartesian_prod(*[torch.arange(n) for n in row.shape]).reshape(
                    -1, row.dim()).tolist()] if row.dim() else [[]]):
                assert rb.checks.sample_value(sample, name, index) == row[tuple(index)].item(), (name, i, index)


def test_check_sample_rule():
    rule = {"kind": "range", "lo": 0, "hi": 4, "hi_inclusive": False, "text": "label lies in [0, 4)"}
    rb.checks.check_sample_rule(0, rule)
    rb.checks.check_sample_rule(3, rule)
    with pytest.raises(AssertionError) as info:
        rb.checks.check_sample_rule(4, dict(rule, sample="txt-037", tensor="label"))
    assert str(info.value) == ("sample 'txt-037': label = 4, want a value in [0, 4) (the rule reduce found: label "
                               "lies in [0, 4))")
    with pytest.raises(AssertionError) as info:
        rb.checks.check_sample_rule(-1, {"kind": "range", "lo": 0, "hi": None})
    assert str(info.value) == "the value = -1, want a value in [0, inf)"
    rb.checks.check_sample_rule(4, {"kind": "range", "lo": None, "hi": 4, "hi_inclusive": True})
    with pytest.raises(AssertionError, match=r"^sample 's1': mask\[0, 2\] = 5\.5, want a value in \(-inf, 4\]$"):
        rb.checks.check_sample_rule(5.5, {"kind": "range", "lo": None, "hi": 4, "hi_inclusive": True, "sample": "s1",
                                   "tensor": "mask", "index": [0, 2]})
    with pytest.raises(AssertionError, match=r"= nan, want a value in"):
        rb.checks.check_sample_rule(float("nan"), {"kind": "range", "lo": 0, "hi": 4})
    with pytest.raises(AssertionError, match=r"= 'cat', want a value in"):
        rb.checks.check_sample_rule("cat", {"kind": "range", "lo": 0, "hi": 4})

    rb.checks.check_sample_rule(1e30, {"kind": "finite"})
    rb.checks.check_sample_rule(7, {"kind": "finite"})
    with pytest.raises(AssertionError) as info:
        rb.checks.check_sample_rule(float("inf"), {"kind": "finite", "sample": "img-3", "tensor": "0", "index": [1]})
    assert str(info.value) == "sample 'img-3': [0][1] = inf, want a finite value"

    rb.checks.check_sample_rule(64, {"kind": "max_size", "max": 64, "dim": 0})
    with pytest.raises(AssertionError) as info:
        rb.checks.check_sample_rule(80, {"kind": "max_size", "max": 64, "dim": 0, "sample": "txt-1", "tensor": "input_ids",
                                  "text": "sequences of at most 64 tokens"})
    assert str(info.value) == ("sample 'txt-1': size of input_ids along dim 0 = 80, want at most 64 (the rule reduce "
                               "found: sequences of at most 64 tokens)")

    with pytest.raises(ValueError, match="check_distinct"):
        rb.checks.check_sample_rule(1, {"kind": "distinct"})
    with pytest.raises(ValueError, match="rule kind 'between'"):
        rb.checks.check_sample_rule(1, {"kind": "between"})


def test_rank_rule_and_uncollated():
    """A rank rule (a dim of size 1 dropped passes): the sample's part has that rank, whether
    reduce_sample gave the Dataset's sample or the collated one-sample batch, told apart by a
    reference tensor's rank since this one's changes with the fix."""
    rb.checks.check_sample_rule(0, {"kind": "rank", "rank": 0})
    with pytest.raises(AssertionError) as info:
        rb.checks.check_sample_rule(1, {"kind": "rank", "rank": 0, "sample": "img-1", "tensor": "label"})
    assert str(info.value) == "sample 'img-1': rank of label = 1, want 0 (no dims)"
    case = {"tensor": "label", "batch_dim": 0, "ndim": 2, "index": "rank",
            "ref": {"tensor": "x", "batch_dim": 0, "ndim": 2}}
    x = torch.zeros(8)
    for sample, rank in [({"x": x, "label": [3]}, 1), ({"x": x, "label": 3}, 0),
                         ({"x": x[None], "label": torch.tensor([[3]])}, 1), ({"x": x[None], "label": torch.tensor([3])}, 0)]:
        assert rb.checks.sample_value(rb.plugin._uncollated(sample, case), "label", "rank") == rank, sample


def test_loader_cases_and_check_loader():
    """The loader tests: a batch too small (every batch at least the smallest size that passed,
    counted from the batch_sampler), one too large, and a value every sample of a batch held."""
    record = {"mode": "size", "size": {"smallest_failing": 1, "smallest_passing": 2}}
    (small,) = rb.plugin.loader_cases(record)
    assert small["kind"] == "min_batch" and small["min"] == 2
    data = [{"label": torch.tensor(i % 3 - 1)} for i in range(5)]
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    with pytest.raises(AssertionError, match=r"^batch 3 of 3 holds 1 sample, want at least 2 .*drop_last=True"):
        rb.plugin.check_loader(loader, small)
    rb.plugin.check_loader(torch.utils.data.DataLoader(data, batch_size=2, drop_last=True), small)
    (large,) = rb.plugin.loader_cases({"mode": "size", "size": {"largest_passing": 47, "smallest_failing": 48}})
    rb.plugin.check_loader(loader, large)
    with pytest.raises(AssertionError, match="holds 64 samples, want at most 47"):
        rb.plugin.check_loader(torch.utils.data.DataLoader(list(range(64)), batch_size=64), large)
    with pytest.raises(AssertionError, match="without a batch_sampler"):
        rb.plugin.check_loader([1, 2], small)

    shared = {"culprits": [{"elements": [{"tensor": "label", "index": [2], "value": -100, "shared": True},
                                         {"tensor": "x", "index": [2, 1], "value": 9}]}]}
    (case,) = rb.plugin.loader_cases(shared)
    assert case["kind"] == "not_all" and case["index"] == []
    ignored = [{"label": torch.tensor(v)} for v in (0, 1, -100, -100)]
    with pytest.raises(AssertionError, match=r"^batch 2 of reduce_loader: every one of its 2 samples holds label = -100 "
                                             r"\(the rule reduce found: a batch in which every sample holds label"):
        rb.plugin.check_loader(torch.utils.data.DataLoader(ignored, batch_size=2), case)
    rb.plugin.check_loader(torch.utils.data.DataLoader(ignored, batch_size=4), case)


def test_call_step_fresh_state():
    """A recorded state is passed to the step, unless the batch's meta says replay_state=fresh
    (reduce's probe of whether the state is the cause): then the step gets the batch alone."""
    calls = []

    def step(batch, state=None):
        calls.append(state)

    state = rb.State({})
    rb.steps._call_step(step, collections.namedtuple("B", "data state meta")({"x": 1}, state, {}))
    rb.steps._call_step(step, collections.namedtuple("B", "data state meta")({"x": 1}, state, {"replay_state": "fresh"}))
    assert calls == [state, None]


def test_check_distinct():
    rb.checks.check_distinct([1, 2, 3], ["a", "b", "c"])
    rb.checks.check_distinct([], [])
    with pytest.raises(AssertionError) as info:
        rb.checks.check_distinct([5, 1, 5, "x", 5, "x"], ["s0", "s1", "s2", "s3", "s4", "s5"])
    assert str(info.value) == "samples share a value, want distinct values: 's0', 's2', 's4' share 5; 's3', 's5' share 'x'"
    with pytest.raises(AssertionError, match=r"'a', 'b' share \[1, 2\]"):
        rb.checks.check_distinct([[1, 2], [1, 2]], ["a", "b"])
    with pytest.raises(ValueError, match="2 values for 1 ids"):
        rb.checks.check_distinct([1, 2], ["a"])


def test_fixture_helpers(tmp_path):
    """check_passing, check_culprit_sample and check_culprits_distinct: what the collector's tests
    call, each failing where the rule or the outputs do not hold."""
    path = str(tmp_path / "b.bin")
    rb.save(path, {"input": torch.zeros(2, 3), "target": torch.tensor([0, 2])}, op="cross_entropy")
    out = rb.steps.replay(path)
    assert out.shape == () and torch.isfinite(out)
    rb.plugin.check_passing(out)
    rb.plugin.check_passing(out, [{"name": "output", "dtype": "float32", "shape": [], "values": [float(out)],
                            "sum": None, "rtol": 1e-5, "atol": 1e-6}])
    with pytest.raises(AssertionError):
        rb.plugin.check_passing(out, [{"name": "output", "dtype": "float32", "shape": [], "values": [float(out) + 1],
                                "sum": None, "rtol": 1e-5, "atol": 1e-6}])
    with pytest.raises(AssertionError):
        rb.plugin.check_passing(torch.tensor(float("nan")))

    samples = {"a": {"label": 3, "key": 7}, "b": {"label": 1, "key": 7}, "c": {"label": 2, "key": 8}}
    rule = {"kind": "range", "lo": 0, "hi": 2, "hi_inclusive": True, "text": "valid range [0, 3)"}
    rb.plugin.check_culprit_sample(samples.get, {"id": "b", "tensor": "label", "index": [], "rule": rule})
    with pytest.raises(AssertionError, match="'a'"):
        rb.plugin.check_culprit_sample(samples.get, {"id": "a", "tensor": "label", "index": [], "rule": rule})
    # a sample without the batch's key fails, saying what reduce_sample should return
    with pytest.raises(AssertionError, match=r"sample 'a': .*no 'mask' \(it has keys 'label', 'key'\).*collate_fn"):
        rb.plugin.check_culprit_sample(samples.get, {"id": "a", "tensor": "mask", "index": [], "rule": rule})
    rb.plugin.check_culprits_distinct(samples.get, {"tensor": "key", "ids": ["a", "c"], "indices": [[], []]})
    with pytest.raises(AssertionError, match="share"):
        rb.plugin.check_culprits_distinct(samples.get, {"tensor": "key", "ids": ["a", "b"], "indices": [[], []]})

    # the collated one-sample batch stands for its sample: a tensor of the batch's rank with one row, a
    # per-sample value's list of one
    collated = {"a": {"label": torch.tensor([3]), "key": [7], "img": torch.zeros(1, 2, 5)},
                "b": {"label": torch.tensor([1]), "key": [7], "img": torch.zeros(1, 2, 3)}}
    with pytest.raises(AssertionError, match="'a'"):
        rb.plugin.check_culprit_sample(collated.get, {"id": "a", "tensor": "label", "index": [], "rule": rule,
                                               "batch_dim": 0, "ndim": 1})
    rb.plugin.check_culprit_sample(collated.get, {"id": "b", "tensor": "label", "index": [], "rule": rule,
                                           "batch_dim": 0, "ndim": 1})
    with pytest.raises(AssertionError, match="share"):
        rb.plugin.check_culprits_distinct(collated.get, {"tensor": "key", "ids": ["a", "b"], "indices": [[], []],
                                                  "batch_dim": 0, "ndim": None})
    size = {"kind": "max_size", "max": 4, "dim": 1, "text": "at most 4 along dim 2"}
    rb.plugin.check_culprit_sample(collated.get, {"id": "b", "tensor": "img", "index": None, "rule": size,
                                           "batch_dim": 0, "ndim": 3})
    with pytest.raises(AssertionError, match="size of img along dim 1 = 5, want at most 4"):
        rb.plugin.check_culprit_sample(collated.get, {"id": "a", "tensor": "img", "index": None, "rule": size,
                                               "batch_dim": 0, "ndim": 3})
