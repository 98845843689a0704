"""The example batches in fixtures/examples and check_go_roundtrip.py."""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "fixtures", "examples")
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.memory  # noqa: E402
import reduce_batch.ops  # noqa: E402
import reduce_batch.steps  # noqa: E402
import check_go_roundtrip  # noqa: E402
from conftest import single_thread_after_fork, without_source_lines  # noqa: E402

NAMES = ["four_class_targets", "one_hot_labels", "channels_last_bf16", "transposed_index", "offset_slice",
         "token_id_vocab", "gather_out_of_range", "bce_out_of_range", "two_bad_samples", "size_dependent",
         "trap_first_failure", "nan_probability"]
# Recorded for a step of their own (fixtures/examples/example_steps.py), not an op.
STEP_NAMES = ["duplicate_keys", "learned_positions"]


def run(op, attrs, t, memory=None):
    """The error text of the op on t, or None; with memory (bytes), in a forked child that may
    allocate only that much (the torch backend's --device-memory)."""
    if memory is not None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                single_thread_after_fork(torch)
                rb.memory.limit_device_memory("cpu", memory)
                out = run(op, attrs, t)
            finally:
                os.write(w, json.dumps(out).encode())
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        return json.loads(data.decode())
    try:
        rb.ops.run_op(op, t, attrs)
    except Exception as e:
        return "%s: %s" % (type(e).__name__, str(e).splitlines()[0])
    return None


def device_memory(want):
    """The example's --device-memory in bytes (given in MiB), or None."""
    flags = want.get("flags", [])
    if "--device-memory" not in flags:
        return None
    v = flags[flags.index("--device-memory") + 1]
    assert v.endswith("MiB")
    return int(float(v[:-3]) * (1 << 20))


def subset(b, idx):
    index = torch.tensor(idx, dtype=torch.int64)
    return {n: t if b.batch_dims[n] is None else t.index_select(b.batch_dims[n], index)
            for n, t in b.tensors.items()}


@pytest.mark.parametrize("name", NAMES)
def test_example(name):
    path = os.path.join(EXAMPLES, name + ".bin")
    with open(os.path.join(EXAMPLES, name + ".expected.json"), encoding="utf-8") as f:
        want = json.load(f)
    b = rb.load(path)
    assert b.op == want["op"] and b.attrs == want["attrs"] and b.samples == want["samples"]
    assert b.error["text"] == want["error"]["text"]
    memory = device_memory(want)
    # Real torch fails the same way (recorded by torch 1.13; the line of a C++ check may move).
    assert without_source_lines(run(b.op, b.attrs, b.tensors, memory)) == without_source_lines(b.error["text"])
    for n, d in want["tensors"].items():
        t = b.tensors[n]
        assert str(t.dtype) == "torch." + d["dtype"] and list(t.shape) == d["shape"]
        assert list(t.stride()) == d["strides"] and t.storage_offset() == d["saved_offset"]
        assert b.batch_dims[n] == d["batch_dim"]
        assert t.is_contiguous() == d["is_contiguous"]
        if "is_channels_last" in d:
            assert t.is_contiguous(memory_format=torch.channels_last) == d["is_channels_last"]
        assert b.recorded_offsets.get(n) == d.get("recorded_offset")
    if want["mode"] == "size":
        k, n = want["largest_passing"], want["smallest_failing"]
        assert n == k + 1 and want["culprits"] is None
        assert run(b.op, b.attrs, subset(b, list(range(k))), memory) is None
        got = run(b.op, b.attrs, subset(b, list(range(b.samples - n, b.samples))), memory)
        assert got is not None and got.startswith("RuntimeError: [enforce fail at alloc_cpu.cpp")
        assert "DefaultCPUAllocator: can't allocate memory" in got
        return
    other = {i: o["error"] for o in want.get("other_failure_samples", []) for i in o["samples"]}
    assert bool(other) == want.get("other_failures", False)
    results = [run(b.op, b.attrs, subset(b, [i])) for i in range(b.samples)]
    single = [r == b.error["text"] for r in results]
    assert all(r in (None, b.error["text"]) or other.get(i) == r for i, r in enumerate(results))
    if want["any_sample_fails"]:
        assert all(single) and want["mode"] == "samples" and want["minimal_samples"] == 1
    else:
        assert [i for i, bad in enumerate(single) if bad] == want["culprits"]
        assert sorted(i for s in want.get("culprit_sets", [want["culprits"]]) for i in s) == want["culprits"]
        rest = [i for i in range(b.samples) if i not in want["culprits"]]
        if other:  # the trap: another failure fires once the culprits are gone
            assert run(b.op, b.attrs, subset(b, rest)) in other.values()
            rest = [i for i in rest if i not in other]
        assert run(b.op, b.attrs, subset(b, rest)) is None
    check_bad_elements(b, want)


def check_bad_elements(b, want):
    for e in want["bad_elements"]:
        v = b.tensors[e["tensor"]][tuple(e["index"])].item()
        if e.get("value_text") == "NaN":
            assert e["value"] is None and v != v
        else:
            assert v == e["value"]


def step_error(fn, t):
    """The error text of the step fn on the batch t, or None."""
    try:
        fn(t)
    except Exception as e:
        return "%s: %s" % (type(e).__name__, str(e).splitlines()[0])
    return None


@pytest.mark.parametrize("name", STEP_NAMES)
def test_step_example(name, monkeypatch, tmp_path):
    # As reduce and the Makefile run them: the folder on PYTHONPATH, the step imported by name
    # where the recorded path is gone (another clone).
    monkeypatch.syspath_prepend(EXAMPLES)
    with open(os.path.join(EXAMPLES, name + ".expected.json"), encoding="utf-8") as f:
        want = json.load(f)
    b = rb.load(os.path.join(EXAMPLES, name + ".bin"))
    assert b.op is None and want["op"] is None and b.samples == want["samples"]
    assert "%s:%s" % (b.step["module"], b.step["qualname"]) == want["step"]
    assert b.error["text"] == want["error"]["text"]
    # Recorded in another clone: neither its file nor its cwd exists here.
    monkeypatch.delitem(sys.modules, "example_steps", raising=False)
    fn = rb.steps.resolve_step(dict(b.step, file=str(tmp_path / "gone" / "example_steps.py"), cwd=str(tmp_path)))
    assert os.path.realpath(sys.modules["example_steps"].__file__) == os.path.realpath(
        os.path.join(EXAMPLES, "example_steps.py"))
    assert step_error(fn, b.data) == b.error["text"]
    with pytest.raises(Exception) as got:
        rb.steps.run_step(b)
    assert "%s: %s" % (got.type.__name__, got.value) == b.error["text"]
    for n, d in want["tensors"].items():
        t = b.tensors[n]
        assert str(t.dtype) == "torch." + d["dtype"] and list(t.shape) == d["shape"] and b.batch_dims[n] == 0
    results = [step_error(fn, subset(b, [i])) for i in range(b.samples)]
    if want["any_sample_fails"]:
        assert all(r == b.error["text"] for r in results) and want["minimal_samples"] == 1
    else:
        (together,) = want["culprit_sets"]
        assert results == [None] * b.samples  # the culprits fail only together
        assert step_error(fn, subset(b, together)) == b.error["text"]
        for drop in together:
            assert step_error(fn, subset(b, [i for i in range(b.samples) if i != drop])) is None
    rel = want.get("relation")
    if rel:
        assert rel["kind"] == "equal" and rel["samples"] == want["culprit_sets"][0]
        a, c = (b.tensors[rel["tensor"]][i] for i in rel["samples"])
        assert torch.equal(a, c)
    shape = want.get("shape")
    if shape:
        for k in (shape["largest_passing"], shape["smallest_failing"]):
            cut = dict(b.tensors)
            cut[shape["tensor"]] = cut[shape["tensor"]].narrow(shape["dim"], 0, k)
            assert step_error(fn, cut) == (None if k == shape["largest_passing"] else b.error["text"])
    check_bad_elements(b, want)


def test_examples_regenerate_identically(tmp_path):
    recorded_by = rb.load(os.path.join(EXAMPLES, NAMES[0] + ".bin")).meta["torch"]
    if recorded_by != torch.__version__:
        # Every file holds the torch version that wrote it in its meta: another torch cannot
        # rewrite the same bytes.
        pytest.skip("the examples were recorded by torch %s, this is %s" % (recorded_by, torch.__version__))
    src = os.path.join(EXAMPLES, "make_examples.py")
    work = tmp_path / "fixtures" / "examples"
    work.mkdir(parents=True)
    shutil.copy(src, work)
    shutil.copy(os.path.join(EXAMPLES, "example_steps.py"), work)
    shutil.copytree(HERE, tmp_path / "replay" / "python", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, str(work / "make_examples.py")], check=True, stdout=subprocess.DEVNULL)
    for name in NAMES + STEP_NAMES:
        for suffix in (".bin", ".expected.json"):
            with open(os.path.join(EXAMPLES, name + suffix), "rb") as f:
                data = f.read()
            if name in STEP_NAMES and suffix == ".bin":
                continue  # the step's recorded file and cwd are where it ran: compared below
            assert data == (work / (name + suffix)).read_bytes(), name + suffix
    for name in STEP_NAMES:
        (m, storages), (m2, storages2) = (rb.read_raw(p) for p in (os.path.join(EXAMPLES, name + ".bin"),
                                                                  str(work / (name + ".bin"))))
        assert m2["step"]["file"] == str(work / "example_steps.py")
        for x in (m, m2):
            x["step"].pop("file")
            x["step"].pop("cwd")
        assert m == m2 and storages == storages2, name


def test_check_go_roundtrip(tmp_path, capsys):
    d = str(tmp_path)
    assert check_go_roundtrip.main(["write", d]) == 0
    stems = [os.path.basename(p)[:-4] for p in glob.glob(os.path.join(d, "*.bin"))]
    assert len(stems) == 11
    assert check_go_roundtrip.main(["verify", d]) == 1  # nothing rewritten yet
    assert "batch.out.bin" in capsys.readouterr().err
    for s in stems:
        shutil.copy(os.path.join(d, s + ".bin"), os.path.join(d, s + ".out.bin"))
    assert check_go_roundtrip.main(["verify", d, "--bytes"]) == 0
    # a rewrite that loses a layout (a contiguous copy) or a value is caught
    b = rb.load(os.path.join(d, "float32.bin"))
    ts = dict(b.tensors)
    ts["transposed"] = ts["transposed"].contiguous()
    rb.save(os.path.join(d, "float32.out.bin"), ts, batch_dims=b.batch_dims, provenance=False)
    b = rb.load(os.path.join(d, "batch.bin"))
    ts = dict(b.tensors)
    ts["target"] = ts["target"].clone()
    ts["target"][0, 0, 0] += 1
    rb.save(os.path.join(d, "batch.out.bin"), ts, batch_dims=b.batch_dims, op=b.op, attrs=b.attrs,
            sample_ids=b.sample_ids, error=b.error, meta=b.meta, provenance=False)
    capsys.readouterr()
    assert check_go_roundtrip.main(["verify", d]) == 1
    err = capsys.readouterr().err
    assert "float32.out.bin: tensor 'transposed': strides" in err
    assert "batch.out.bin: tensor 'target': values" in err
    assert check_go_roundtrip.main(["nope"]) == 2
