"""Run the kernels package's differential cases through real PyTorch (CPU).

Usage: run_torch.py DIR [K N]

DIR/cases.json lists the cases TestOpsAgainstTorch generated; DIR/storage.bin
holds every tensor's storage bytes (little-endian), at the byte offset each
tensor's spec names. Each tensor is rebuilt with torch.as_strided over its
storage, so strides, storage offset and overlap are exactly the Go side's.
The op runs on CPU with one thread (so the first failing element is
deterministic), and DIR/results.json gets, per case, either the exception's
class and str() or the output's dtype, shape and values (row-major; floats as
numbers, with "nan", "inf" and "-inf" as strings; integers and bools as
integers).

The ops run through reduce_batch.ops.run_op ($REDUCE_BATCH_PATH names its
directory, replay/python), with the names, aliases and defaults of its op table.

One process runs many cases (importing torch costs about a second). With
K and N it runs only the cases whose position in cases.json is K modulo N,
into DIR/results.K.json, so that a few processes can share the work: each
torch 1.13 error costs 10-100 ms, spent capturing the C++ backtrace.
"""

import json
import math
import os
import sys
import warnings

import torch

# reduce_batch.ops.run_op is the one Python definition of the ops (what the
# torch backend and the fixtures' collector run), not a copy here.
if not os.environ.get("REDUCE_BATCH_PATH"):
    sys.exit("run_torch.py: set REDUCE_BATCH_PATH to the folder of the reduce_batch package (replay/python)")
sys.path.insert(0, os.environ["REDUCE_BATCH_PATH"])
import reduce_batch.ops  # noqa: E402

torch.set_num_threads(1)
warnings.simplefilter("ignore")

DTYPES = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
NAMES = {v: k for k, v in DTYPES.items()}


def build(spec, blob):
    dt = DTYPES[spec["dtype"]]
    itemsize = torch.empty((), dtype=dt).element_size()
    n = spec["storage_elements"]
    start = spec["byte_offset"]
    raw = bytearray(blob[start:start + n * itemsize])
    if n == 0:
        storage = torch.empty(0, dtype=dt)
    else:
        storage = torch.frombuffer(raw, dtype=dt)
    return torch.as_strided(storage, spec["shape"], spec["strides"], spec["offset"])


def encode(x):
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    return x


def main():
    d = sys.argv[1]
    k, n = 0, 1
    out_name = d + "/results.json"
    if len(sys.argv) == 4:
        k, n = int(sys.argv[2]), int(sys.argv[3])
        out_name = "%s/results.%d.json" % (d, k)
    with open(d + "/cases.json") as f:
        cases = json.load(f)[k::n]
    with open(d + "/storage.bin", "rb") as f:
        blob = f.read()
    results = []
    for c in cases:
        t = {name: build(spec, blob) for name, spec in c["tensors"].items()}
        r = {"id": c["id"]}
        try:
            out = reduce_batch.ops.run_op(c["op"], t, c["attrs"])
        except Exception as e:  # noqa: BLE001 - every torch error is a result
            r["exception"] = type(e).__name__
            r["message"] = str(e)
        else:
            r["dtype"] = NAMES[out.dtype]
            r["shape"] = list(out.shape)
            flat = out.detach().contiguous().reshape(-1)
            if out.dtype.is_floating_point:
                r["values"] = [encode(v) for v in flat.double().tolist()]
            else:
                r["values"] = [int(v) for v in flat.long().tolist()]
        results.append(r)
    with open(out_name, "w") as f:
        json.dump({"torch": torch.__version__, "results": results}, f)


if __name__ == "__main__":
    main()
