"""The example batches in fixtures/examples and check_go_roundtrip.py."""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "fixtures", "examples")
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import check_go_roundtrip  # noqa: E402

NAMES = ["four_class_targets", "one_hot_labels", "channels_last_bf16", "transposed_index", "offset_slice"]


def run(op, attrs, t):
    try:
        if op == "cross_entropy":
            F.cross_entropy(t["input"], t["target"], weight=t.get("weight"), **attrs)
        elif op == "embedding":
            F.embedding(t["input"], t["weight"], **attrs)
        else:
            raise AssertionError(op)
    except Exception as e:
        return "%s: %s" % (type(e).__name__, str(e).splitlines()[0])
    return None


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
    assert run(b.op, b.attrs, b.tensors) == b.error["text"]  # real torch fails the same way
    for n, d in want["tensors"].items():
        t = b.tensors[n]
        assert str(t.dtype) == "torch." + d["dtype"] and list(t.shape) == d["shape"]
        assert list(t.stride()) == d["strides"] and t.storage_offset() == d["saved_offset"]
        assert b.batch_dims[n] == d["batch_dim"]
        assert t.is_contiguous() == d["is_contiguous"]
        if "is_channels_last" in d:
            assert t.is_contiguous(memory_format=torch.channels_last) == d["is_channels_last"]
        assert b.recorded_offsets.get(n) == d.get("recorded_offset")
    single = [run(b.op, b.attrs, subset(b, [i])) is not None for i in range(b.samples)]
    if want["any_sample_fails"]:
        assert all(single)
    else:
        assert [i for i, bad in enumerate(single) if bad] == want["culprits"]
        rest = [i for i in range(b.samples) if i not in want["culprits"]]
        assert run(b.op, b.attrs, subset(b, rest)) is None
    for e in want["bad_elements"]:
        assert b.tensors[e["tensor"]][tuple(e["index"])].item() == e["value"]


def test_examples_regenerate_identically(tmp_path):
    src = os.path.join(EXAMPLES, "make_examples.py")
    work = tmp_path / "fixtures" / "examples"
    work.mkdir(parents=True)
    shutil.copy(src, work)
    shutil.copytree(HERE, tmp_path / "replay" / "python", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, str(work / "make_examples.py")], check=True, stdout=subprocess.DEVNULL)
    for name in NAMES:
        for suffix in (".bin", ".expected.json"):
            with open(os.path.join(EXAMPLES, name + suffix), "rb") as f:
                assert f.read() == (work / (name + suffix)).read_bytes(), name + suffix


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
