"""Reference answers from real PyTorch for the kernels tests (torch_test.go).

Usage (the test runs these; nothing else does):
  torch_ref.py flags            stdin {"cases": [{"shape", "strides", "offset"}]}
                                stdout [[is_contiguous, channels_last, channels_last_3d], ...]
  torch_ref.py make DIR         writes DIR/cases.json, DIR/<id>.storage, DIR/<id>.expected
  torch_ref.py check DIR        reads DIR/results.json and DIR/<id>.result; stdout JSON
  torch_ref.py convert          stdin {"floats": [float64 bits], "ints": [int64]}
                                stdout {dtype: {"floats": hex, "ints": hex}}

Storage bytes are raw little-endian element bytes, as the Go Tensor holds
them. Only the standard library and torch are used.
"""

import json
import os
import struct
import sys

import torch

DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}
NAMES = {v: k for k, v in DTYPES.items()}
CL, CL3 = torch.channels_last, torch.channels_last_3d


def flags(t):
    return [t.is_contiguous(), t.is_contiguous(memory_format=CL), t.is_contiguous(memory_format=CL3)]


def extent(shape, strides):
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, strides))


def cmd_flags():
    out = []
    for c in json.load(sys.stdin)["cases"]:
        base = torch.zeros(c["offset"] + extent(c["shape"], c["strides"]) + 1)
        out.append(flags(torch.as_strided(base, c["shape"], c["strides"], c["offset"])))
    json.dump(out, sys.stdout)


def storage_bytes(t):
    s = t.storage()
    n = s.size()
    if n == 0:
        return b""
    full = torch.empty(0, dtype=t.dtype).set_(s, 0, (n,), (1,))
    return full.view(torch.uint8).numpy().tobytes()


def dense_bytes(t):
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def from_bytes(data, dtype):
    if not data:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype)


def layouts(dt, g):
    def rnd(*shape):
        if dt.is_floating_point:
            return torch.randn(*shape, generator=g).to(dt)
        if dt == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        lo, hi = max(torch.iinfo(dt).min, -1000), min(torch.iinfo(dt).max, 1000)
        return torch.randint(lo, hi, shape, generator=g).to(dt)

    cl = rnd(4, 3, 5, 6).contiguous(memory_format=CL)
    yield "contiguous", rnd(5, 3, 4), 0, [4, 0, 0, 2]
    yield "channels_last", cl, 0, [3, 1, 1]
    yield "channels_last_3d", rnd(3, 2, 2, 3, 4).contiguous(memory_format=CL3), 0, [2, 0, 2]
    yield "transposed 2-D", rnd(6, 5).t(), 0, [4, 0, 0, 2]
    yield "permuted 3-D", rnd(3, 5, 4).permute(1, 2, 0), 0, [4, 1, 1]
    yield "row step x[:, ::2]", rnd(5, 8)[:, ::2], 0, [3, 3, 0]
    yield "view into a wider buffer", rnd(5, 10)[:, 2:7], 0, [4, 1, 4]
    yield "expanded rows", rnd(1, 4).expand(5, 4), 0, [4, 4, 1, 0, 2, 3]
    yield "expanded columns", rnd(5, 1).expand(5, 4), 0, [4, 1, 1]
    yield "storage offset base[5:]", rnd(40)[5:40].view(5, 7), 0, [1, 4, 1]
    yield "permuted with offset", rnd(30)[3:27].view(6, 4).t(), 0, [3, 0, 3]
    yield "channels_last with a W step", cl[:, :, :, ::2], 0, [2, 0, 2]
    yield "channels_last with offset", rnd(5, 3, 4, 6).contiguous(memory_format=CL)[1:], 0, [3, 0, 3]
    yield "unfold windows", rnd(4, 10).unfold(1, 4, 2), 0, [3, 1, 3]
    yield "batch of 1, channels_last", rnd(1, 3, 4, 5).contiguous(memory_format=CL), 0, [0, 0, 0]
    yield "batch of 1, transposed column", rnd(3, 1).t(), 0, [0, 0]
    yield "batch of 1, strided", rnd(3, 8)[0:1, ::2], 0, [0, 0, 0]
    yield "channels_last along C", cl, 1, [2, 0]
    yield "transposed along dim 1", rnd(6, 5).t(), 1, [5, 0, 3]
    yield "permuted along dim -1", rnd(3, 5, 4).permute(1, 2, 0), -1, [2, 2, 0]
    yield "channels_last, empty selection", cl, 0, []
    yield "empty dim", rnd(3, 0, 2), 0, [1, 2]
    yield "1-D", rnd(7), 0, [6, 0, 6]


def cmd_make(out):
    g = torch.Generator().manual_seed(1234)
    cases = []
    for dname, dt in DTYPES.items():
        for name, t, dim, idx in layouts(dt, g):
            cid = "%s-%d" % (dname, len(cases))
            sel = torch.index_select(t, dim, torch.tensor(idx, dtype=torch.int64))
            with open(os.path.join(out, cid + ".storage"), "wb") as f:
                f.write(storage_bytes(t))
            with open(os.path.join(out, cid + ".expected"), "wb") as f:
                f.write(dense_bytes(sel))
            cases.append({
                "id": cid, "name": name, "dtype": dname, "shape": list(t.shape),
                "strides": list(t.stride()), "offset": t.storage_offset(),
                "storage_elements": t.storage().size(), "dim": dim, "indices": idx,
                "flags": flags(t), "expected_shape": list(sel.shape),
                "index_select_strides": list(sel.stride()),
            })
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f)


def cmd_check(out):
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    with open(os.path.join(out, "cases.json")) as f:
        cases = {c["id"]: c for c in json.load(f)}
    report = []
    for r in results:
        c = cases[r["id"]]
        dt = DTYPES[c["dtype"]]
        with open(os.path.join(out, r["id"] + ".result"), "rb") as f:
            storage = from_bytes(f.read(), dt)
        got = torch.as_strided(storage, r["shape"], r["strides"], r["offset"])
        with open(os.path.join(out, r["id"] + ".expected"), "rb") as f:
            want = from_bytes(f.read(), dt).reshape(c["expected_shape"])
        equal = list(got.shape) == list(want.shape) and torch.equal(
            got.contiguous().reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))
        report.append({"id": r["id"], "flags": flags(got), "equal": bool(equal),
                       "storage_offset": got.storage_offset()})
    json.dump(report, sys.stdout)


def cmd_convert():
    req = json.load(sys.stdin)
    floats = torch.tensor([struct.unpack("<d", struct.pack("<Q", b))[0] for b in req["floats"]], dtype=torch.float64)
    ints = torch.tensor(req["ints"], dtype=torch.int64)
    out = {}
    for name, dt in DTYPES.items():
        out[name] = {"floats": dense_bytes(floats.to(dt)).hex(), "ints": dense_bytes(ints.to(dt)).hex()}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "flags":
        cmd_flags()
    elif mode == "make":
        cmd_make(sys.argv[2])
    elif mode == "check":
        cmd_check(sys.argv[2])
    elif mode == "convert":
        cmd_convert()
    else:
        sys.exit("unknown mode " + mode)
