"""The runtime the plugin's tests run on: summarize and output_values (what a run reports),
run_in_child (with its ChildFailure), the judge (`reduce judge`, on real runs of real batches),
sample_value, check_sample_rule, check_distinct, and the culprit checks built on them.
run_in_child runs real batches in real child processes."""

import collections
import json
import os
import sys

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
# what a failure is: reduce judges it


def test_failure_kinds():
    # A DifferentFailure is no Exception: an xfail's raises=Exception cannot take it for the recorded one.
    assert not issubclass(rb.failure.DifferentFailure, Exception)
    assert issubclass(rb.failure.RecordedFailure, Exception)


COMMITTED = os.path.join(HERE, "..", "..", "fixtures", "regress")


def test_judge_real_runs(monkeypatch):
    """The committed cross_entropy fixture's batches run here under this torch, and reduce judges
    what they did: the minimal batch's IndexError is the recorded failure, the boundary's outputs the
    recorded ones; another failure, outputs off by a little more than their tolerance, NaN: not."""
    monkeypatch.setenv("REDUCE_DEVICE", "cpu")
    fx = rb.plugin.Fixture(os.path.join(COMMITTED, "cross_entropy-4ecd1e1d6241", "fixture.json"))
    ran, e = fx.run("batch.bin")
    assert isinstance(e, IndexError) and ran["exit"] == {"code": 1}
    assert ran["stderr"].startswith("Traceback (most recent call last):")
    assert "Target 5 is out of bounds." in ran["stderr"]
    assert rb.plugin.judge(fx, ran)[0] == "recorded"
    assert rb.plugin.judge(fx, dict(ran, stderr=ran["stderr"].replace("IndexError: Target 5 is out of bounds.",
                                                                      "KeyError: 'target'")))[0] == "other"
    outputs = fx.record["boundary"]["outputs"]
    ran, e = fx.run("boundary.bin", outputs=outputs)
    assert e is None and ran["values"] == [{"name": "output", "dtype": "float32", "shape": [],
                                            "values": [pytest.approx(outputs[0]["values"][0], rel=1e-6)]}]
    assert rb.plugin.judge(fx, ran) == ("pass", "")
    off = dict(ran, values=[dict(ran["values"][0], values=[outputs[0]["values"][0] * 1.001])])
    outcome, why = rb.plugin.judge(fx, off)
    assert outcome == "other" and why.startswith("outputs differ: output: value 0 is"), why
    nan = dict(ran, values=[dict(ran["values"][0], values=[float("nan")])])
    assert rb.plugin.judge(fx, nan)[0] == "other"
    assert rb.plugin.judge(fx, {"batch": "batch.bin", "exit": {"code": 0}, "outputs": [
        {"path": "", "dtype": "float32", "shape": [], "finite": False}]}) == (
        "other", "the output (float32[]) is not finite: it holds NaN or an infinity")


def test_judge_needs_reduce(monkeypatch, tmp_path):
    """Without the reduce executable a fixture's test says how to get it."""
    monkeypatch.delenv("REDUCE_BINARY")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(rb.plugin, "_beside", lambda: str(tmp_path / "reduce"))
    fx = rb.plugin.Fixture(os.path.join(COMMITTED, "cross_entropy-4ecd1e1d6241", "fixture.json"))
    with pytest.raises(rb.plugin.FixtureError, match="install reduce's wheel into this environment"):
        rb.plugin.judge(fx, {"batch": "batch.bin", "exit": {"code": 0}})
    monkeypatch.setenv("REDUCE_BINARY", "/bin/false")
    with pytest.raises(rb.plugin.FixtureError, match="judge failed"):
        rb.plugin.judge(fx, {"batch": "batch.bin", "exit": {"code": 0}})


# ---------------------------------------------------------------------------------------------
# summarize and output_values

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


def test_output_values():
    out = {"loss": torch.tensor(0.5), "big": torch.ones(5, 4), "nan": torch.tensor([float("nan"), 1.0]), "n": 3}
    got = rb.checks.output_values(out, [{"name": "loss"}, {"name": "big", "sum": 20.0}, {"name": "nan"}, {"name": "n"},
                                        {"name": "missing"}])
    assert got[0] == {"name": "loss", "dtype": "float32", "shape": [], "values": [0.5]}
    assert got[1] == {"name": "big", "dtype": "float32", "shape": [5, 4], "sum": 20.0}  # the record keeps its sum
    assert got[2]["values"][1] == 1.0 and got[2]["values"][0] != got[2]["values"][0]  # NaN, which reduce reads
    assert [o["name"] for o in got] == ["loss", "big", "nan"]  # no tensor, or none there: left out
    assert rb.checks.output_values(torch.ones(3), [{"name": "output"}], limit=2) == [
        {"name": "output", "dtype": "float32", "shape": [3], "sum": 3.0}]


# ---------------------------------------------------------------------------------------------
# run_in_child


def test_run_in_child_passing_batch(in_child_dir):
    summary = rb.child.run_in_child("ok.bin")
    assert summary == [{"path": "", "dtype": "float32", "shape": [], "finite": True}]
    got = rb.child.run_in_child("ok.bin", entry="rb_child_entries:outputs")
    assert got == [{"path": "loss", "dtype": "float32", "shape": [], "finite": True},
                   {"path": "parts.0", "dtype": "float16", "shape": [2, 3], "finite": True},
                   {"path": "parts.1", "dtype": "int", "shape": [], "finite": True}]


@pytest.mark.parametrize("batch, line", [
    ("ce.bin", "IndexError: Target 5 is out of bounds."),
    ("gather.bin", "RuntimeError: index 5 is out of bounds for dimension 1 with size 3"),
])
def test_run_in_child_reports_the_childs_failure(in_child_dir, batch, line):
    """A child's failure is its exit status and its stderr, read by nobody here: reduce judges it."""
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child(str(in_child_dir / batch))
    e = info.value
    assert (e.returncode, e.exit(), e.timed_out) == (1, {"code": 1}, False)
    assert "Traceback (most recent call last):" in e.stderr and "in run_op" in e.stderr
    assert e.stderr.rstrip().endswith(line) and e.child_stderr == e.stderr
    assert str(e).startswith("the child process exited 1\n--- the end of its stderr ---\n")
    assert str(e).endswith(line)


def test_run_in_child_runs_this_reduce_batch_in_this_environment(in_child_dir, monkeypatch):
    monkeypatch.setenv("RB_CHILD_MARK", "kept")
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:report")
    last = info.value.stderr.rstrip().splitlines()[-1]
    assert json.loads(last[len("RuntimeError: "):]) == {
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
    assert text.startswith("the batch could not run in the child process; its stderr ends:\n") and fragment in text


def test_run_in_child_device_memory(in_child_dir):
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child("emb.bin", device_memory=47 * MiB + MiB // 2)  # 48 MiB of output do not fit
    assert without_source_lines(info.value.stderr.rstrip().splitlines()[-1]) == (
        "RuntimeError: [enforce fail at alloc_cpu.cpp] err == 0. DefaultCPUAllocator: can't allocate memory: you "
        "tried to allocate %d bytes. Error code 12 (Cannot allocate memory)" % (48 * MiB))
    assert rb.child.run_in_child("emb.bin", device_memory=1 << 30) == [
        {"path": "", "dtype": "float32", "shape": [48, 64, 4096], "finite": True}]


def test_run_in_child_signal_exit_and_timeout(in_child_dir):
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:abort")
    assert info.value.exit() == {"code": -6}
    assert str(info.value).startswith("the child process ended by signal SIGABRT\n")
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:exit3")
    assert info.value.exit() == {"code": 3}
    with pytest.raises(rb.child.ChildFailure) as info:
        rb.child.run_in_child("ok.bin", entry="rb_child_entries:sleep", timeout=3)
    assert info.value.timed_out and info.value.exit() == {"code": -1, "timed_out": True}
    assert str(info.value).startswith("the child process gave no answer before its timeout: killed")


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
    """check_culprit_sample and check_culprits_distinct: what the collector's tests call, each
    failing where the rule does not hold."""
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
