"""Tests of reduce_batch.py: run with `/usr/bin/python3 -m pytest replay/python -q`."""

import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import zlib

import pytest
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.child  # noqa: E402
import reduce_batch.errors  # noqa: E402
import reduce_batch.hook_torchrun  # noqa: E402
import reduce_batch.steps  # noqa: E402
import reduce_batch.worker  # noqa: E402

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
PINNED = {"recorded_at": "2025-01-02T03:04:05Z", "host": "test", "torch": "x", "python": "y",
          "device": "cpu", "argv": "[\"train.py\"]"}


def itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()


def dname(dtype):
    return str(dtype).replace("torch.", "")


def random_storage(dtype, n, seed=0):
    """n random elements of dtype; floats include NaN, infinities and -0.0."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point:
        x = (torch.randn(n, generator=g, dtype=torch.float64) * 100).to(dtype)
        special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0], dtype=dtype)
        k = min(n, 4)
        x[:k] = special[:k]
        return x[torch.randperm(n, generator=g)]
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(2 ** 62)), min(info.max, 2 ** 62)
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)


def bits(t):
    """The bit patterns of t's elements (makes NaN compare equal to itself)."""
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(BITS[t.element_size()])


def values_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def storage_bytes(t):
    """All bytes of t's storage."""
    n = (t.untyped_storage() if hasattr(t, "untyped_storage") else t._storage()).nbytes()
    whole = torch.as_strided(t.detach(), (n // t.element_size(),), (1,), 0)
    return bytes(bits(whole).numpy().tobytes())


def base(dtype, n, seed=0):
    return random_storage(dtype, n, seed)


def A(dtype):
    return 4096 // itemsize(dtype)


# Each layout: dtype -> a tensor view.
LAYOUTS = {
    "contiguous": lambda dt: base(dt, 20).view(4, 5),
    "channels_last": lambda dt: base(dt, 120).view(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    "channels_last_sliced": lambda dt: base(dt, 240).view(2, 3, 8, 5).contiguous(
        memory_format=torch.channels_last)[:, :, 2:6],
    "transposed": lambda dt: base(dt, 20).view(5, 4).t(),
    "permuted_3d": lambda dt: base(dt, 24).view(2, 3, 4).permute(2, 0, 1),
    "strided_slice": lambda dt: base(dt, 24).view(4, 6)[:, ::2],
    "expanded": lambda dt: base(dt, 4).view(1, 4).expand(3, 4),
    "expanded_inner": lambda dt: base(dt, 4).view(4, 1).expand(4, 5),
    "overlapping": lambda dt: torch.as_strided(base(dt, 8), (3, 3), (1, 1), 2),
    "offset_small": lambda dt: base(dt, 64)[3:13],
    "offset_below_A": lambda dt: base(dt, A(dt) + 8)[A(dt) - 1:A(dt) + 3],
    "offset_at_A": lambda dt: base(dt, A(dt) + 8)[A(dt):A(dt) + 3],
    "offset_large": lambda dt: base(dt, 3 * A(dt) + 64)[2 * A(dt) + 37:2 * A(dt) + 47],
    "offset_large_2d": lambda dt: base(dt, 6 * A(dt) + 64).view(-1, 8)[(5 * A(dt)) // 8 + 1:, 1:7:2].t(),
    "scalar": lambda dt: base(dt, 1).view(()),
    "scalar_view": lambda dt: base(dt, 16)[7],
    "empty": lambda dt: base(dt, 1)[:0].view(0, 3),
    "empty_offset": lambda dt: base(dt, 10)[5:5],
    "empty_offset_large": lambda dt: base(dt, 3 * A(dt) + 2)[3 * A(dt):3 * A(dt)],
    "empty_past_storage": lambda dt: torch.as_strided(base(dt, 2), (0, 3), (3, 1), 5),
}


def expected_offset(r, dt):
    a = A(dt)
    return (r, 0) if r < a else (a + r % a, r - (a + r % a))


def check_same(orig, got, dt):
    assert got.dtype == orig.dtype
    assert got.shape == orig.shape
    assert got.stride() == orig.stride()
    want_off, start = expected_offset(orig.storage_offset(), dt)
    assert got.storage_offset() == want_off
    assert values_equal(orig, got)
    assert got.is_contiguous() == orig.is_contiguous()
    if orig.dim() == 4:
        assert got.is_contiguous(memory_format=torch.channels_last) == orig.is_contiguous(
            memory_format=torch.channels_last)
    # The saved storage is the prefix [start, last reached] of the original storage.
    got_storage = storage_bytes(got)
    orig_storage = storage_bytes(orig)
    k = itemsize(dt)
    want = orig_storage[start * k:start * k + len(got_storage)]
    if len(want) < len(got_storage):  # an empty view past the end of its storage: zero-filled
        want = want + bytes(len(got_storage) - len(want))
    assert got_storage == want
    if orig.numel():
        last = want_off + sum((n - 1) * s for n, s in zip(orig.shape, orig.stride()))
        assert len(got_storage) == (last + 1) * k  # exactly the span, no more
    else:
        assert len(got_storage) == want_off * k


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_round_trip(tmp_path, dtype, layout):
    t = LAYOUTS[layout](dtype)
    path = tmp_path / "t.bin"
    rb.save(path, {"x": t}, batch_dims={"x": None}, provenance=False)
    b = rb.load(path)
    got = b.tensors["x"]
    check_same(t, got, dtype)
    entry = b.manifest["tensors"][0]
    r = t.storage_offset()
    off, start = expected_offset(r, dtype)
    assert entry["offset"] == off
    if r != off:  # written only when it differs from offset (docs/FORMAT.md)
        assert entry["recorded_offset"] == r
        assert b.recorded_offsets == {"x": r}
    else:
        assert "recorded_offset" not in entry
        assert b.recorded_offsets == {}


def test_layouts_really_are_what_they_say():
    dt = torch.float32
    assert LAYOUTS["contiguous"](dt).is_contiguous()
    cl = LAYOUTS["channels_last"](dt)
    assert cl.is_contiguous(memory_format=torch.channels_last) and not cl.is_contiguous()
    assert not LAYOUTS["transposed"](dt).is_contiguous()
    assert LAYOUTS["expanded"](dt).stride() == (0, 1)
    assert LAYOUTS["offset_large"](dt).storage_offset() > 4096 // 4
    assert LAYOUTS["offset_small"](dt).storage_offset() == 3
    assert LAYOUTS["scalar"](dt).dim() == 0
    assert LAYOUTS["empty"](dt).numel() == 0
    assert LAYOUTS["empty_offset_large"](dt).storage_offset() == 3 * 1024


def test_all_layouts_in_one_file(tmp_path):
    ts = {}
    for i, dt in enumerate(DTYPES):
        for name in sorted(LAYOUTS):
            ts["%s_%s" % (dname(dt), name)] = LAYOUTS[name](dt)
    path = tmp_path / "all.bin"
    rb.save(path, ts, batch_dims={k: None for k in ts}, provenance=False)
    b = rb.load(path)
    assert list(b.tensors) == list(ts)
    for k, t in ts.items():
        check_same(t, b.tensors[k], t.dtype)
    # payloads in tensor order, 64-aligned, no gaps beyond padding
    prev = 0
    for e in b.manifest["tensors"]:
        assert e["payload"]["offset"] % 64 == 0
        assert e["payload"]["offset"] == (prev + 63) // 64 * 64
        prev = e["payload"]["offset"] + e["payload"]["length"]


def test_round_trip_without_numpy(tmp_path, monkeypatch):
    t = LAYOUTS["offset_large_2d"](torch.bfloat16)
    rb.save(tmp_path / "a.bin", {"x": t}, provenance=False)
    monkeypatch.setitem(sys.modules, "numpy", None)
    rb.save(tmp_path / "b.bin", {"x": t}, provenance=False)
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


def test_requires_grad_and_batch_metadata(tmp_path):
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.rand(4)
    y = torch.tensor([0, 2, 4])
    path = tmp_path / "b.bin"
    rb.save(path, {"input": x, "target": y, "weight": w}, batch_dims={"weight": None},
            op="cross_entropy", attrs={"ignore_index": -100, "reduction": "mean"},
            sample_ids=[173, "img-2", 5], error="IndexError: Target 4 is out of bounds.",
            meta={"run": 7})
    b = rb.load(path)
    assert b.samples == 3
    assert b.sample_ids == ["173", "img-2", "5"]
    assert b.op == "cross_entropy"
    assert b.attrs == {"ignore_index": -100, "reduction": "mean"}
    assert b.error == {"text": "IndexError: Target 4 is out of bounds.", "exception": "IndexError",
                       "exit_status": None}
    assert b.batch_dims == {"input": 0, "target": 0, "weight": None}
    assert b.meta["run"] == "7"
    assert list(b.tensors) == ["input", "target", "weight"]
    assert torch.equal(b.tensors["input"], x.detach())
    assert not b.tensors["input"].requires_grad


def test_batch_dim_not_zero(tmp_path):
    ids = torch.arange(12 * 5).view(12, 5)  # 12 samples of 5 tokens
    idx = ids.t()  # [5, 12]: the batch axis is 1
    rb.save(tmp_path / "b.bin", {"input": idx, "weight": torch.randn(60, 3)},
            batch_dims={"input": 1, "weight": None}, provenance=False)
    b = rb.load(tmp_path / "b.bin")
    assert b.samples == 12 and b.batch_dims == {"input": 1, "weight": None}
    with pytest.raises(ValueError, match="samples"):
        rb.save(tmp_path / "c.bin", {"input": idx, "weight": torch.randn(60, 3)}, provenance=False)
    with pytest.raises(ValueError, match="batch_dims"):
        rb.save(tmp_path / "c.bin", {"input": idx}, batch_dims={"input": 2}, provenance=False)
    with pytest.raises(ValueError, match="no tensor named"):
        rb.save(tmp_path / "c.bin", {"input": idx}, batch_dims={"inptu": 1}, provenance=False)
    with pytest.raises(ValueError, match="sample_ids"):
        rb.save(tmp_path / "c.bin", {"input": idx}, batch_dims={"input": 1}, sample_ids=["a"],
                provenance=False)
    assert not (tmp_path / "c.bin").exists()


class _AClass:
    pass


def test_step_entry_of_a_class_names_its_file():
    """A class (the LightningModule the hooks record) has no code object: its file is its module's,
    which the replay needs to import it again (and the trust check to place it)."""
    for obj in (_AClass, test_step_entry_of_a_class_names_its_file):
        entry = rb.step_entry(obj)
        assert entry["module"] == __name__ and entry["qualname"] == obj.__qualname__
        assert entry["file"] == os.path.abspath(__file__)


def test_save_rejects_bad_input(tmp_path):
    p = tmp_path / "x.bin"
    with pytest.raises(ValueError, match="no batch"):
        rb.save(p, {})
    with pytest.raises(ValueError):
        rb.save(p, {"x": torch.zeros(2)}, attrs={"eps": float("nan")})
    with pytest.raises(ValueError):
        rb.save(p, {"x": torch.zeros(2)}, compression="lz4")
    with pytest.raises(ValueError, match="bound method"):
        rb.save(p, {"x": torch.zeros(2)}, step=[].append)
    with pytest.raises(ValueError, match="top level"):
        rb.save(p, {"x": torch.zeros(2)}, step=lambda b: b)
    with pytest.raises(ValueError, match="length 5 outside"):
        rb.save(p, {"x": torch.zeros(2, 4)}, padded={"x": 1}, lengths=[1, 5])
    assert not p.exists()
    assert os.listdir(tmp_path) == []  # no temporary files left behind


def test_save_skips_what_it_cannot_encode(tmp_path, capfd):
    """A leaf that is no tensor, container or Python value, a complex or sparse tensor: recorded
    as skipped (the file says which and why, and so does stderr), the rest written."""
    p = tmp_path / "x.bin"
    rb.save(p, {"x": torch.zeros(2), "c": torch.zeros(2, dtype=torch.complex64), "s": torch.eye(2).to_sparse(),
                "o": object()}, provenance=False)
    b = rb.load(p)
    assert sorted(b.skipped) == [("c", "torch:Tensor", "dtype torch.complex64 is not supported (want one of "
                                  "bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)"),
                                 ("o", "builtins:object", "not a tensor, a container or a Python scalar"),
                                 ("s", "torch:Tensor", "layout torch.sparse_coo (only strided tensors are recorded)")]
    assert b.data["c"] is None and b.data["o"] is None and torch.equal(b.data["x"], torch.zeros(2))
    err = capfd.readouterr().err
    assert "skipped c: dtype torch.complex64" in err and "skipped o:" in err


# ---------------------------------------------------------------------------------------------
# Byte layout


def test_bytes_follow_format_md(tmp_path):
    """A file written by save(), compared with one assembled by hand from docs/FORMAT.md."""
    x = torch.arange(12, dtype=torch.float32).view(3, 4)
    y = torch.tensor([0, 2, 4])
    path = tmp_path / "crash.bin"
    rb.save(path, {"input": x, "target": y}, op="cross_entropy",
            attrs={"reduction": "mean", "ignore_index": -100}, sample_ids=["img-0", "img-1", "img-2"],
            error={"text": "IndexError: Target 4 is out of bounds.", "exception": "IndexError", "exit_status": 1},
            meta={"torch": "1.13.1", "device": "cpu"}, provenance=False)
    p_in = x.numpy().tobytes()
    p_tg = y.numpy().astype("<i8").tobytes()
    manifest = (
        '{"attrs":{"ignore_index":-100,"reduction":"mean"},'
        '"error":{"exception":"IndexError","exit_status":1,"text":"IndexError: Target 4 is out of bounds."},'
        '"meta":{"device":"cpu","torch":"1.13.1"},'
        '"op":"cross_entropy",'
        '"sample_ids":["img-0","img-1","img-2"],'
        '"samples":3,'
        '"tensors":['
        '{"batch_dim":0,"dtype":"float32","name":"input","offset":0,'
        '"payload":{"compression":"none","crc32":%d,"length":48,"offset":0},'
        '"shape":[3,4],"storage_elements":12,"strides":[4,1]},'
        '{"batch_dim":0,"dtype":"int64","name":"target","offset":0,'
        '"payload":{"compression":"none","crc32":%d,"length":24,"offset":64},'
        '"shape":[3],"storage_elements":3,"strides":[1]}'
        ']}' % (zlib.crc32(p_in), zlib.crc32(p_tg))).encode()
    header = b"RDCBATCH" + struct.pack("<IIQII", 1, 0, len(manifest), zlib.crc32(manifest), 0)
    assert len(header) == 32
    P = (32 + len(manifest) + 63) // 64 * 64
    want = header + manifest + bytes(P - 32 - len(manifest)) + p_in + bytes(16) + p_tg
    got = path.read_bytes()
    assert got == want


def test_manifest_json_canonical():
    # docs/FORMAT.md: sorted keys, compact, non-printable-ASCII as lowercase \uXXXX, <>&/ as is.
    got = rb.encode_manifest({"a": "<&>\u2028\u2029\u00e9\x01\b\f\n\r\t\"\\\x7f/", "B": [1, True, None]})
    assert got == b'{"B":[1,true,null],"a":"<&>\\u2028\\u2029\\u00e9\\u0001\\b\\f\\n\\r\\t\\"\\\\\\u007f/"}'
    # key order is code point order, which is also the byte order of UTF-8
    assert rb.encode_manifest({"\U0001f600": 1, "\uffff": 2, "z": 3, "Z": 4}) == \
        b'{"Z":4,"z":3,"\\uffff":2,"\\ud83d\\ude00":1}'
    with pytest.raises(ValueError):
        rb.encode_manifest({"a": float("inf")})


def test_lone_surrogates_become_replacement_chars(tmp_path):
    bad = b"caf\xe9".decode("utf-8", "surrogateescape")
    rb.save(tmp_path / "s.bin", {"x": torch.zeros(1)}, error="OSError: " + bad, provenance=False)
    assert rb.load(tmp_path / "s.bin").error["text"] == "OSError: caf\ufffd"


def test_determinism(tmp_path):
    def write(p):
        g = torch.Generator().manual_seed(3)
        rb.save(p, {"input": torch.randn(8, 5, generator=g).t(), "target": torch.randint(0, 5, (8,), generator=g)},
                batch_dims={"input": 1}, op="cross_entropy", attrs={"reduction": "mean", "ignore_index": -100},
                sample_ids=["s%d" % i for i in range(8)], error=IndexError("Target 7 is out of bounds."),
                meta=dict(PINNED, git=None, compiled=None))  # compiled: noted after any torch.compile in the process

    write(tmp_path / "a.bin")
    write(tmp_path / "b.bin")
    a = (tmp_path / "a.bin").read_bytes()
    assert a == (tmp_path / "b.bin").read_bytes()
    # a different process (another hash seed) writes the same bytes
    script = tmp_path / "w.py"
    script.write_text(
        "import sys, pathlib, torch\nsys.path.insert(0, %r)\nimport reduce_batch as rb\n"
        "g = torch.Generator().manual_seed(3)\n"
        "rb.save(sys.argv[1], {'input': torch.randn(8, 5, generator=g).t(), "
        "'target': torch.randint(0, 5, (8,), generator=g)}, batch_dims={'input': 1}, op='cross_entropy', "
        "attrs={'ignore_index': -100, 'reduction': 'mean'}, sample_ids=['s%%d' %% i for i in range(8)], "
        "error=IndexError('Target 7 is out of bounds.'), meta=dict(%r, git=None))\n" % (HERE, PINNED))
    env = dict(os.environ, PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, str(script), str(tmp_path / "c.bin")], check=True, env=env)
    assert a == (tmp_path / "c.bin").read_bytes()


def test_provenance(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rb.save("p.bin", {"x": torch.zeros(2)})
    meta = rb.load("p.bin").meta
    assert meta["torch"] == str(torch.__version__)
    assert meta["python"] == "%d.%d.%d" % sys.version_info[:3]
    assert meta["device"] == "cpu"
    assert meta["host"]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", meta["recorded_at"])
    assert ("cuda" in meta) == bool(torch.version.cuda)
    assert "git" not in meta  # tmp_path is not a git work tree
    rb.save("q.bin", {"x": torch.zeros(2)}, meta={"host": "pinned", "torch": None})
    meta = rb.load("q.bin").meta
    assert meta["host"] == "pinned" and "torch" not in meta
    rb.save("r.bin", {"x": torch.zeros(2)}, provenance=False)
    assert rb.load("r.bin").meta == {}
    assert "meta" not in rb.load("r.bin").manifest


def test_git_revision(tmp_path, monkeypatch):
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("no git")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    rev = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    monkeypatch.chdir(tmp_path)
    rb.save("p.bin", {"x": torch.zeros(2)})
    assert rb.load("p.bin").meta["git"] == rev


# ---------------------------------------------------------------------------------------------
# Bad files


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.bin"
    rb.save(path, {"input": torch.randn(3, 4), "target": torch.tensor([0, 2, 4]),
                   "flag": torch.tensor([True, False, True])},
            sample_ids=["a", "b", "c"], op="cross_entropy", provenance=False)
    return path


def parts(path):
    data = path.read_bytes()
    mlen = struct.unpack_from("<Q", data, 16)[0]
    manifest = json.loads(data[32:32 + mlen])
    P = (32 + mlen + 63) // 64 * 64
    return data, manifest, data[P:]


def rewrite(src, dst, mutate=None, payloads=None):
    """Write dst from src with the manifest changed by mutate (its checksum kept right)."""
    _, m, area = parts(src)
    if mutate:
        mutate(m)
    mb = json.dumps(m, sort_keys=True, separators=(",", ":")).encode() if not isinstance(m, bytes) else m
    if payloads is not None:
        area = payloads(bytearray(area))
    header = b"RDCBATCH" + struct.pack("<IIQII", 1, 0, len(mb), zlib.crc32(mb), 0)
    P = (32 + len(mb) + 63) // 64 * 64
    dst.write_bytes(header + mb + bytes(P - 32 - len(mb)) + bytes(area))
    return dst


def raises(path, *fragments):
    with pytest.raises(ValueError) as info:
        rb.load(path)
    msg = str(info.value)
    assert msg.startswith(str(path) + ": "), msg
    for f in fragments:
        assert f in msg, msg
    assert isinstance(info.value, rb.BatchFileError)
    msg = msg[len(str(path)) + 2:]
    for f in fragments:
        assert f in msg, msg
    return msg


def test_good_file_loads(good):
    b = rb.load(good)
    assert b.samples == 3 and list(b.tensors) == ["input", "target", "flag"]
    assert rewrite(good, good.parent / "same.bin").read_bytes() == good.read_bytes()


def test_truncated(good, tmp_path):
    data = good.read_bytes()
    _, m, _ = parts(good)
    for n in [0, 4, 8, 20, 31, 32, 40, 100, len(data) - 200, len(data) - 24, len(data) - 1]:
        p = tmp_path / ("trunc%d.bin" % n)
        p.write_bytes(data[:n])
        msg = raises(p)
        assert "truncated" in msg or "outside the file" in msg, msg


def test_bad_magic(good, tmp_path):
    data = bytearray(good.read_bytes())
    data[0:8] = b"PK\x03\x04zipx"
    p = tmp_path / "m.bin"
    p.write_bytes(bytes(data))
    raises(p, "magic")
    p.write_bytes(b"hello")
    raises(p, "magic")


@pytest.mark.parametrize("field,pos,value", [("version", 8, 4), ("flags", 12, 1), ("reserved", 28, 7)])
def test_bad_header_words(good, tmp_path, field, pos, value):
    data = bytearray(good.read_bytes())
    struct.pack_into("<I", data, pos, value)
    p = tmp_path / "h.bin"
    p.write_bytes(bytes(data))
    raises(p, field)


def test_manifest_too_long(good, tmp_path):
    data = bytearray(good.read_bytes())
    struct.pack_into("<Q", data, 16, (64 << 20) + 1)
    p = tmp_path / "h.bin"
    p.write_bytes(bytes(data))
    raises(p, "manifest_length")


def test_bad_manifest_checksum(good, tmp_path):
    data = bytearray(good.read_bytes())
    data[40] ^= 0x01
    p = tmp_path / "c.bin"
    p.write_bytes(bytes(data))
    raises(p, "manifest_crc32")


def test_bad_payload_checksum(good, tmp_path):
    data, m, area = parts(good)
    data = bytearray(data)
    e = [e for e in m["tensors"] if e["name"] == "target"][0]
    data[len(data) - len(area) + e["payload"]["offset"] + 5] ^= 0x80  # inside the target payload
    p = tmp_path / "c.bin"
    p.write_bytes(bytes(data))
    raises(p, 'tensor "target"', "checksum")


def test_trailing_bytes(good, tmp_path):
    p = tmp_path / "t.bin"
    p.write_bytes(good.read_bytes() + b"\0")
    raises(p, "trailing")


def set_tensor(name, key, value):
    def mutate(m):
        for e in m["tensors"]:
            if e["name"] == name:
                if value is KeyError:
                    del e[key]
                else:
                    e[key] = value
    return mutate


def set_payload(name, key, value):
    def mutate(m):
        for e in m["tensors"]:
            if e["name"] == name:
                e["payload"][key] = value
    return mutate


@pytest.mark.parametrize("mutate,fragments", [
    (lambda m: m.update(samples=4), ["sample_ids", "3 ids for 4 samples"]),
    (lambda m: (m.update(samples=4), m.pop("sample_ids")), ['tensor "input"', "batch_dim", "4 samples"]),
    (lambda m: m.update(sample_ids=["a"]), ["sample_ids"]),
    (lambda m: m.update(samples=-1), ["samples"]),
    (lambda m: m.update(samples=3.0), ["samples"]),
    (lambda m: m.pop("tensors"), ["tensors"]),
    (lambda m: m.update(meta={"a": 1}), ["meta"]),
    (set_tensor("input", "colour", 1), ['tensor "input"', 'unknown key "colour"']),
    (set_tensor("input", "name", "target"), ["tensors[1]", "already names"]),
    (set_tensor("input", "name", ""), ["tensors[0]", "name"]),
    (set_tensor("input", "dtype", "float8"), ['tensor "input"', "dtype"]),
    (set_tensor("input", "dtype", KeyError), ['tensor "input"', "dtype"]),
    (set_tensor("input", "shape", [3, -4]), ['tensor "input"', "shape"]),
    (set_tensor("input", "shape", [3, 4, 1]), ['tensor "input"', "strides"]),
    (set_tensor("input", "strides", [4, 2]), ['tensor "input"', "outside"]),
    (set_tensor("input", "strides", [4, -1]), ['tensor "input"', "strides"]),
    (set_tensor("input", "offset", 1), ['tensor "input"', "outside"]),
    (set_tensor("input", "shape", [3, 2 ** 62]), ['tensor "input"']),
    (set_tensor("input", "batch_dim", 2), ['tensor "input"', "batch_dim"]),
    (set_tensor("input", "batch_dim", 1), ['tensor "input"', "batch_dim"]),
    (set_tensor("input", "storage_elements", 11), ['tensor "input"']),
    (set_payload("target", "color", 1), ['tensor "target"', "payload", "unknown key"]),
    (set_payload("target", "compression", "lz4"), ['tensor "target"', "compression"]),
    (set_payload("target", "offset", 0), ['tensor "target"', "overlaps"]),
    (set_payload("target", "offset", 65), ['tensor "target"', "multiple of 64"]),
    (set_payload("flag", "offset", 1 << 20), ['tensor "flag"', "gap"]),
    (set_payload("target", "length", 23), ['tensor "target"', "payload"]),
    (set_payload("target", "crc32", 1 << 32), ['tensor "target"', "crc32"]),
    # A lone surrogate's escape (json.dumps writes one for a str holding it): no Unicode text, in any string.
    (lambda m: m.update(sample_ids=["a", "\ud800", "c"]), ["sample_ids: ", "lone surrogate"]),
    (lambda m: m.update(op="x\udfff"), ["op: ", "lone surrogate"]),
    (lambda m: m.update(error={"text": "\udc00\ud800"}), ["error: ", "lone surrogate"]),
    (lambda m: m.update(meta={"h\ud800": "x"}), ["meta: ", "lone surrogate"]),
    (lambda m: m.update(attrs={"a": ["\\", "\ud800"]}), ["attrs: ", "lone surrogate"]),
    (set_tensor("input", "name", "in\udbff"), ["tensors: ", "lone surrogate"]),
])
def test_bad_manifest(good, tmp_path, mutate, fragments):
    p = rewrite(good, tmp_path / "bad.bin", mutate)
    raises(p, *fragments)


def test_surrogate_pairs_and_their_text_load(good, tmp_path):
    """A pair's escapes are a character beyond U+FFFF; a backslash before "ud800" is text: both load."""
    ids = ["\U0001f600", "\\ud800", "\\\U0010ffff"]
    assert rb.load(rewrite(good, tmp_path / "p.bin", lambda m: m.update(sample_ids=ids))).sample_ids == ids


def test_malformed_json(good, tmp_path):
    for text in [b"{not json", b"[1,2]", b'{"samples":NaN,"tensors":[]}', b"\xff{}"]:
        p = tmp_path / "j.bin"
        header = b"RDCBATCH" + struct.pack("<IIQII", 1, 0, len(text), zlib.crc32(text), 0)
        p.write_bytes(header + text + bytes((-(32 + len(text))) % 64))
        raises(p, "manifest")


def test_bad_bool(good, tmp_path):
    _, m, area = parts(good)
    e = [e for e in m["tensors"] if e["name"] == "flag"][0]
    off = e["payload"]["offset"]

    def payloads(a):
        a[off] = 2
        return a

    p = rewrite(good, tmp_path / "bool.bin", set_payload("flag", "crc32", zlib.crc32(b"\x02\x00\x01")),
                payloads)
    raises(p, 'tensor "flag"', "bool")


def test_size_limit(good):
    with pytest.raises(ValueError, match="size limit"):
        rb.load(good, max_size=40)
    rb.load(good, max_size=48 + 24 + 3)


def test_zstd_without_module(good, tmp_path, monkeypatch):
    p = rewrite(good, tmp_path / "z.bin", set_payload("target", "compression", "zstd"))
    monkeypatch.setitem(sys.modules, "zstandard", None)
    msg = raises(p, 'tensor "target"', "zstandard")
    assert "reduce convert" in msg


def test_zstd(tmp_path, zstandard):
    t = LAYOUTS["offset_large_2d"](torch.float16)
    p = tmp_path / "z.bin"
    rb.save(p, {"x": t, "e": torch.zeros(0)}, batch_dims={"x": None, "e": None}, compression="zstd", provenance=False)
    b = rb.load(p)
    check_same(t, b.tensors["x"], torch.float16)
    assert b.manifest["tensors"][0]["payload"]["compression"] == "zstd"
    # a frame that does not declare its size is refused
    raw = bytes(range(256)) * 4
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    rb.save(p, {"x": torch.frombuffer(bytearray(raw), dtype=torch.uint8)}, provenance=False)
    q = rewrite(p, tmp_path / "y.bin",
                lambda m: m["tensors"][0]["payload"].update(compression="zstd", length=len(frame),
                                                            crc32=zlib.crc32(frame)),
                lambda a: bytearray(frame))
    raises(q, 'tensor "x"', "decompressed size")
    frame = zstandard.ZstdCompressor().compress(raw) + b"junk"
    q = rewrite(p, tmp_path / "y.bin",
                lambda m: m["tensors"][0]["payload"].update(compression="zstd", length=len(frame),
                                                            crc32=zlib.crc32(frame)),
                lambda a: bytearray(frame))
    raises(q, 'tensor "x"', "after the zstd frame")


@pytest.mark.parametrize("name", ["zstd-flip-window-rle-block", "zstd-flip-window-compressed-block"])
def test_zstd_block_over_the_window(zstandard, tmp_path, name):
    """One bit of the window descriptor flipped (fixtures/read_test.go) leaves a block over RFC 8878's
    Block_Maximum_Size: libzstd 1.5.4 decodes it to the right bytes, the readers refuse it; unflipped, it loads."""
    bad = pathlib.Path(HERE, "..", "..", "fixtures", "testdata", "bad", name + ".bin")
    msg = raises(bad, 'tensor "x": payload: ')
    _, m, area = parts(bad)
    frame = bytearray(area[:m["tensors"][0]["payload"]["length"]])
    frame[5] ^= 0x08
    ok = rewrite(bad, tmp_path / "ok.bin", set_payload("x", "crc32", zlib.crc32(frame)), lambda a: frame)
    assert rb.load(ok).tensors["x"].shape == (16,)
    try:  # a newer libzstd (1.5.7) may refuse the flipped frame itself
        flipped = zstandard.ZstdDecompressor().decompressobj().decompress(bytes(area[:len(frame)]))
    except zstandard.ZstdError:
        assert "corrupt zstd frame" in msg, msg
    else:
        assert flipped == rb.read_raw(ok)[1][0] and "Block_Maximum_Size" in msg, msg


GO_ZSTD = os.path.join(HERE, "testdata", "go_zstd")


@pytest.mark.parametrize("name", ["channels_last", "offset_large"])
def test_zstd_written_by_go(zstandard, name):
    # Go's writer (klauspost/compress) made these frames; the uncompressed twin, from Go too, says
    # what they hold (testdata/go_zstd/README.md).
    z, none = os.path.join(GO_ZSTD, name + ".zstd.bin"), os.path.join(GO_ZSTD, name + ".none.bin")
    mz, _ = rb.read_raw(z)
    mn, _ = rb.read_raw(none)
    assert [e["payload"]["compression"] for e in mz["tensors"]] == ["zstd"] * len(mz["tensors"])
    assert [e["payload"]["compression"] for e in mn["tensors"]] == ["none"] * len(mn["tensors"])

    def without_payloads(m):
        return dict(m, tensors=[{k: v for k, v in e.items() if k != "payload"} for e in m["tensors"]])

    assert without_payloads(mz) == without_payloads(mn)
    bz, bn = rb.load(z), rb.load(none)
    assert list(bz.tensors) == list(bn.tensors) and len(bz.tensors) == len(DTYPES)
    for n, want in bn.tensors.items():
        got = bz.tensors[n]
        assert (got.dtype, got.shape, got.stride(), got.storage_offset()) == \
            (want.dtype, want.shape, want.stride(), want.storage_offset()), n
        assert values_equal(got, want), n
        assert storage_bytes(got) == storage_bytes(want), n


def test_require_fails_under_reduce_require_torch(tmp_path):
    # conftest.require: a missing module skips a test, and fails it when REDUCE_REQUIRE_TORCH has
    # any non-empty value. Run on a copy of conftest.py, with a zstandard that cannot be imported.
    shutil.copy(os.path.join(HERE, "conftest.py"), str(tmp_path))
    (tmp_path / "zstandard.py").write_text("raise ImportError('hidden for the test')\n")
    (tmp_path / "test_needs_zstd.py").write_text("def test_it(zstandard):\n    pass\n")
    for value, code, want in [("", 0, "1 skipped"), ("1", 1, "1 error"), ("yes", 1, "1 error")]:
        env = dict(os.environ, REDUCE_REQUIRE_TORCH=value, PYTHONPATH=str(tmp_path))
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                            str(tmp_path / "test_needs_zstd.py")], cwd=str(tmp_path), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # A fixture's failure is the test's error: pytest exits 1 as for a failed test.
        assert p.returncode == code and want in p.stdout, (value, p.stdout)
        assert "python3-zstandard" in p.stdout, p.stdout


# ---------------------------------------------------------------------------------------------
# Errors and record_on_failure


def test_error_forms(tmp_path):
    p = tmp_path / "e.bin"
    x = {"x": torch.zeros(2)}
    rb.save(p, x, error=RuntimeError("CUDA error: device-side assert triggered\nCUDA kernel errors might be "
                                     "asynchronously reported"), provenance=False)
    assert rb.load(p).error == {"text": "RuntimeError: CUDA error: device-side assert triggered",
                                "exception": "RuntimeError", "exit_status": 1}
    rb.save(p, x, error=AssertionError(), provenance=False)
    assert rb.load(p).error["text"] == "AssertionError"
    rb.save(p, x, error="torch.cuda.OutOfMemoryError: CUDA out of memory.", provenance=False)
    assert rb.load(p).error["exception"] == "OutOfMemoryError"
    rb.save(p, x, error="Assertion `t >= 0 && t < n_classes` failed.", provenance=False)
    assert rb.load(p).error == {"text": "Assertion `t >= 0 && t < n_classes` failed.", "exception": "",
                                "exit_status": None}
    assert "exception" not in rb.load(p).manifest["error"]
    rb.save(p, x, error={"text": "boom", "exit_status": 134}, provenance=False)
    assert rb.load(p).error == {"text": "boom", "exception": "", "exit_status": 134}
    with pytest.raises(ValueError):
        rb.save(p, x, error={"txt": "boom"})


def test_record_on_failure_saves_and_reraises(tmp_path):
    p = tmp_path / "crash.bin"
    x, y = torch.randn(3, 4), torch.tensor([0, 2, 4])
    with pytest.raises(IndexError) as info:
        with rb.record_on_failure(p, {"input": x, "target": y}, op="cross_entropy",
                                  attrs={"ignore_index": -100, "reduction": "mean"},
                                  sample_ids=["a", "b", "c"]) as rec:
            F.cross_entropy(x, y)
    assert rec.saved
    b = rb.load(p)
    assert b.error["text"] == "IndexError: " + str(info.value)
    assert b.error["text"] == "IndexError: Target 4 is out of bounds."
    assert b.error["exception"] == "IndexError"
    assert torch.equal(b.tensors["target"], y) and torch.equal(b.tensors["input"], x)
    assert b.meta["device"] == "cpu"


def test_record_on_failure_same_exception_object(tmp_path):
    err = ValueError("bad sample")
    with pytest.raises(ValueError) as info:
        with rb.record_on_failure(tmp_path / "c.bin", lambda: {"x": torch.ones(2)}):
            raise err
    assert info.value is err
    assert rb.load(tmp_path / "c.bin").error["text"] == "ValueError: bad sample"


def test_record_on_failure_no_exception(tmp_path):
    calls = []

    def tensors():
        calls.append(1)
        return {"x": torch.ones(2)}

    with rb.record_on_failure(tmp_path / "c.bin", tensors) as rec:
        pass
    assert not rec.saved and not calls and not (tmp_path / "c.bin").exists()


def test_record_on_failure_save_fails(tmp_path, capsys):
    def broken():
        raise OSError("disk on fire")

    # A batch callable that raises: the failure is recorded all the same, without a batch.
    err = KeyError("k")
    with pytest.raises(KeyError) as info:
        with rb.record_on_failure(tmp_path / "c.bin", broken) as rec:
            raise err
    assert info.value is err and rec.saved
    assert "disk on fire" in capsys.readouterr().err
    b = rb.load(tmp_path / "c.bin")
    assert b.error["exception"] == "KeyError" and b.tensors == {}
    os.unlink(tmp_path / "c.bin")
    # A file that cannot be written at all: a warning, and the original exception.
    with pytest.raises(KeyError):
        with rb.record_on_failure(tmp_path / "nodir" / "c.bin", {"x": torch.ones(2)}) as rec:
            raise err
    assert "could not save" in capsys.readouterr().err and not rec.saved
    assert os.listdir(tmp_path) == []


def test_record_on_failure_device_error_skips_the_device_copy(tmp_path, capsys):
    # A tensor on another device (meta stands in for a dead GPU) cannot be read after a device
    # error: it is recorded as skipped, with a reason that names the fix, and the CPU tensors are
    # recorded; the original error propagates.
    dead = torch.empty(3, device="meta")
    with pytest.raises(RuntimeError, match="device-side assert"):
        with rb.record_on_failure(tmp_path / "c.bin", {"x": dead, "y": torch.arange(3)}):
            raise RuntimeError("CUDA error: device-side assert triggered")
    err = capsys.readouterr().err
    assert "skipped x" in err and "CPU copy" in err
    b = rb.load(tmp_path / "c.bin")
    assert [p for p, _, _ in b.skipped] == ["x"] and "CPU copy" in b.skipped[0][2]
    assert b.data["x"] is None and torch.equal(b.data["y"], torch.arange(3))


def test_record_on_failure_ignores_keyboard_interrupt(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with rb.record_on_failure(tmp_path / "c.bin", {"x": torch.ones(2)}):
            raise KeyboardInterrupt
    assert not (tmp_path / "c.bin").exists()


def test_info_command(good, capsys):

    assert rb.worker.main(["info", str(good)]) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 3
    assert rb.worker.main(["nope"]) == 2


# record_on_failure(window=K): the steps before the failing one

WIN_MODEL = torch.nn.Linear(2, 1)
WIN_OPT = torch.optim.SGD(WIN_MODEL.parameters(), lr=0.1, momentum=0.9)


def window_step(batch, state=None):
    """A step of a window's tests: an SGD step; the batch says when to fail."""
    if state is not None:
        state.restore(model=WIN_MODEL, optimizer=WIN_OPT)
    loss = F.mse_loss(WIN_MODEL(batch["x"]).squeeze(1), batch["y"])
    if batch["fail"]:
        raise ValueError("step failed")
    WIN_OPT.zero_grad()
    loss.backward()
    WIN_OPT.step()


def train_window(path, steps, window, fail_at, **kw):
    """Steps 0..steps-1 of window_step under record_on_failure(window=); the weights at the start
    of each step, and the exception of the failing one."""
    torch.manual_seed(0)
    with torch.no_grad():
        WIN_MODEL.weight.fill_(0.5)
        WIN_MODEL.bias.zero_()
    WIN_OPT.state.clear()
    seen = []
    for i in range(steps):
        batch = {"x": torch.full((3, 2), float(i)), "y": torch.arange(3.0) + i,
                 "id": ["s%d-%d" % (i, k) for k in range(3)], "fail": i == fail_at}
        seen.append({k: v.clone() for k, v in WIN_MODEL.state_dict().items()})
        try:
            with rb.record_on_failure(path, batch, step=window_step,
                                      state={"model": WIN_MODEL, "optimizer": WIN_OPT}, window=window, **kw):
                window_step(batch)
        except ValueError as e:
            return seen, e
    return seen, None


def test_window_records_the_steps_since_the_older_copy(tmp_path, capfd):
    p = str(tmp_path / "w.bin")
    seen, err = train_window(p, 9, 3, 7)
    assert err is not None
    b = rb.load(p)
    with open(p, "rb") as f:
        assert struct.unpack("<I", f.read(12)[8:])[0] == 3
    # copies at steps 0, 3 and 6: the older of the last two is step 3's
    assert b.failed_step == 7
    assert [(i, n) for i, _, _, n in b.window] == [(3, 3), (4, 3), (5, 3), (6, 3)]
    assert b.window[0][2] == ["s3-0", "s3-1", "s3-2"]
    assert torch.equal(b.window[2][1]["x"], torch.full((3, 2), 5.0))
    for k, v in seen[3].items():  # the state at the window's start, not at the crash
        assert torch.equal(b.state["model"][k], v), k
    assert b.state["optimizer"]["state"], "the momentum buffers at step 3"
    assert b.sample_ids == ["s7-0", "s7-1", "s7-2"] and b.data["fail"] is True
    out = capfd.readouterr().err
    assert out.count("a window of 3 steps") == 1, out


def test_window_replays_to_the_same_failure(tmp_path):

    p = str(tmp_path / "w.bin")
    train_window(p, 9, 3, 7)
    b = rb.load(p)
    with pytest.raises(ValueError, match="step failed"):
        rb.steps.run_step(b)
    # An earlier step that raises is another failure than the recorded one.
    b = rb.load(p)
    b.window[1][1]["fail"] = True
    with pytest.raises(rb.steps.WindowStepError, match="the window's step 4 raised ValueError, before the failing step 7"):
        rb.steps.run_step(b)


def test_window_at_the_first_step_and_in_a_replay(tmp_path, monkeypatch):
    p = str(tmp_path / "w.bin")
    _, err = train_window(p, 3, 4, 0)  # the first step fails: no step before it
    assert err is not None
    b = rb.load(p)
    assert b.window == [] and b.failed_step is None
    with open(p, "rb") as f:
        assert struct.unpack("<I", f.read(12)[8:])[0] == 2
    monkeypatch.setenv("REDUCE_REPLAY", "1")  # a replay keeps no window and writes nothing
    rec = rb.record_on_failure(str(tmp_path / "r.bin"), {"x": torch.ones(1)}, window=2)
    assert rec.window is None
    with pytest.raises(ValueError, match="window: want a number of steps > 0"):
        rb.record_on_failure(p, {"x": torch.ones(1)}, window=0)


def rewritten(p, edit, q):
    """p's file with its manifest edited in place (padded to its length: the payloads stay), at q."""
    with open(p, "rb") as f:
        data = bytearray(f.read())
    mlen = struct.unpack("<Q", data[16:24])[0]
    m = json.loads(data[32:32 + mlen])
    edit(m)
    raw = rb.encode_manifest(m)
    assert len(raw) <= mlen
    data[32:32 + mlen] = raw + b" " * (mlen - len(raw))
    data[24:28] = struct.pack("<I", zlib.crc32(bytes(data[32:32 + mlen])) & 0xFFFFFFFF)
    q.write_bytes(bytes(data))
    return str(q)


def test_reader_checks_the_window(tmp_path):
    p = str(tmp_path / "w.bin")
    train_window(p, 5, 2, 3)

    def order(m):
        m["window"]["steps"][1]["index"] = m["window"]["steps"][0]["index"]

    def samples(m):
        m["window"]["steps"][0]["samples"] = 2
        del m["window"]["steps"][0]["sample_ids"]

    def no_step(m):
        del m["step"]

    def tensors(m):
        m["tensors"].insert(0, m["tensors"].pop())  # a window tensor first: the payload order is the file's

    for edit, words in [(order, "index"), (samples, "want one value per sample (2)"),
                        (no_step, "want {failed, start, steps} with a step, and the batch's step and structure"),
                        (tensors, "the batch's and the state's tensors come before the window's")]:
        with pytest.raises(rb.BatchFileError, match=re.escape(words)):
            rb.load(rewritten(p, edit, tmp_path / (edit.__name__ + ".bin")))


def test_window_starts_afresh_for_other_state_objects(tmp_path):
    """A second run in the same process (another model, another optimizer) keeps none of the
    first run's steps, though it records to the same path."""
    p = str(tmp_path / "w.bin")
    train_window(p, 6, 4, None)  # 6 steps pass: copies at 0 and 4
    global WIN_MODEL, WIN_OPT
    old = WIN_MODEL, WIN_OPT
    try:
        WIN_MODEL = torch.nn.Linear(2, 1)
        WIN_OPT = torch.optim.SGD(WIN_MODEL.parameters(), lr=0.1, momentum=0.9)
        train_window(p, 3, 4, 2)
    finally:
        WIN_MODEL, WIN_OPT = old
    b = rb.load(p)
    assert b.failed_step == 2 and [i for i, _, _, _ in b.window] == [0, 1]
    assert b.manifest["window"]["start"] == 0


def test_record_on_failure_rank_file_per_rank(tmp_path, monkeypatch):
    """Under torchrun's environment (or an initialized process group) of several ranks, each rank
    writes PATH.rank{R}.EXT with its rank, world size and time of failure: never one rank's file
    over another's. A single process writes PATH."""
    batch = {"x": torch.ones(3, 2), "y": torch.tensor([0, 1, 5])}
    for rank in (1, 0):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        with pytest.raises(IndexError):
            with rb.record_on_failure(tmp_path / "crash.bin", batch, meta={"run": "r7"}) as rec:
                raise IndexError(f"rank {rank}")
        assert rec.saved and rec.path == f"{tmp_path / 'crash'}.rank{rank}.bin"
    assert not (tmp_path / "crash.bin").exists()
    metas = [rb.read_manifest(tmp_path / f"crash.rank{r}.bin")[0] for r in (0, 1)]
    assert [m["meta"]["rank"] for m in metas] == ["0", "1"]
    assert all(m["meta"]["world_size"] == "2" and m["meta"]["run"] == "r7" for m in metas)
    assert float(metas[1]["meta"]["failed_at"]) <= float(metas[0]["meta"]["failed_at"])
    assert [m["error"]["text"] for m in metas] == ["IndexError: rank 0", "IndexError: rank 1"]
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(IndexError):
        with rb.record_on_failure(tmp_path / "alone.bin", batch):
            raise IndexError("one process")
    assert "rank" not in rb.read_manifest(tmp_path / "alone.bin")[0]["meta"]


def test_rank_replays_alone_in_a_process_group_of_one(tmp_path):
    """hook_torchrun.before_replay: a rank's batch replays its DDP step in a process group of size 1 (in
    a child: a process group outlives the test)."""
    code = (
        "import sys, torch, torch.distributed as dist; sys.path.insert(0, %r); import reduce_batch as rb, reduce_batch.hook_torchrun\n"
        "class B: meta = {'rank': '1', 'world_size': '4'}; tensors = {'x': torch.ones(2, 3)}\n"
        "rb.hook_torchrun.before_replay(B())\n"
        "m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))\n"
        "m(B.tensors['x']).sum().backward()\n"
        "print(dist.get_world_size(), dist.get_rank(), dist.get_backend())\n" % HERE)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0", "gloo"]


def test_rank_without_torch_distributed_is_refused(monkeypatch):
    """A torch without torch.distributed cannot replay a rank's step alone: HarnessError, which
    the worker's start-up check (REDUCE_WORLD_SIZE) turns into exit 2 before any replay."""
    import types

    monkeypatch.setattr(torch.distributed, "is_available", lambda: False)
    with pytest.raises(rb.errors.HarnessError, match=r"rank 3 of 4's .* no torch.distributed to replay its step alone"):
        rb.hook_torchrun.before_replay(types.SimpleNamespace(meta={"rank": "3", "world_size": "4"}, tensors={}), check_only=True)
    rb.hook_torchrun.before_replay(types.SimpleNamespace(meta={"world_size": "1"}, tensors={}))  # one process: nothing to do
    rb.hook_torchrun.before_replay(types.SimpleNamespace(meta={"world_size": "\u00b2"}, tensors={}))  # no ASCII number: no rank of a run


def test_keep_disk_per_rank(tmp_path, monkeypatch):
    """keep="disk" under several ranks keeps each rank's batch in its own file before the step, with
    its rank, run id and time (kept_at, no error: reduce reads it as an abort after that time), and
    removes it after a step that passes; the git revision is asked once a directory, not each step."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run-9")
    batch = {"x": torch.ones(3, 2)}
    with rb.record_on_failure(tmp_path / "crash.bin", batch, keep="disk") as rec:
        kept = rb.read_manifest(tmp_path / "crash.rank1.bin")[0]
    assert not (tmp_path / "crash.rank1.bin").exists() and not rec.saved
    assert "error" not in kept and kept["meta"]["run_id"] == "run-9" and kept["meta"]["rank"] == "1"
    assert float(kept["meta"]["kept_at"]) > 0 and "failed_at" not in kept["meta"]
    calls = []
    monkeypatch.setattr(subprocess, "check_output", lambda *a, **k: calls.append(a) or b"0" * 40)
    monkeypatch.chdir(tmp_path)
    for _ in range(3):
        with rb.record_on_failure("crash.bin", batch, keep="disk"):
            pass
    assert len(calls) == 1
