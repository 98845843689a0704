"""A replay command for the exec backend, standard library only: python3 exec_reader.py FILE.

FILE is a candidate batch in reduce's native format (.bin), .npz or .safetensors. The script
reads `input` [N, C] and `target` [N] and fails as cross_entropy does when a target is out of
[0, C) (IndexError: Target 4 is out of bounds.); otherwise it prints what it read and exits 0.
`--exit N` exits with status N after reading (86 is the user's own status, not reduce's).
"""

import ast
import json
import struct
import sys
import zipfile

_SIZES = {"int64": 8, "float32": 4, "int32": 4, "float64": 8, "bfloat16": 2, "float16": 2, "uint8": 1,
          "int8": 1, "int16": 2, "bool": 1}


def _ints(data, n, width=8):
    return list(struct.unpack("<%d%s" % (n, {8: "q", 4: "i"}[width]), data[:n * width]))


def read_bin(path):
    with open(path, "rb") as f:
        raw = f.read()
    magic, version, _, mlen, _, _ = struct.unpack("<8sIIQII", raw[:32])
    assert magic == b"RDCBATCH" and version == 1, "not a batch file"
    m = json.loads(raw[32:32 + mlen])
    p = (32 + mlen + 63) // 64 * 64
    out = {}
    for t in m["tensors"]:
        pl = t["payload"]
        assert pl["compression"] == "none"
        storage = raw[p + pl["offset"]:p + pl["offset"] + pl["length"]]
        out[t["name"]] = (t["dtype"], t["shape"], t["strides"], t["offset"], storage)
    return out


def _elements(dtype, shape, strides, offset, storage):
    """The values of a 1-D int64 view (targets)."""
    assert dtype == "int64" and len(shape) == 1, (dtype, shape)
    vals = _ints(storage, len(storage) // 8)
    return [vals[offset + i * strides[0]] for i in range(shape[0])]


def read_npz(path):
    out = {}
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if not name.endswith(".npy"):
                continue
            data = z.read(name)
            assert data[:6] == b"\x93NUMPY"
            hlen = struct.unpack("<H", data[8:10])[0] if data[6] == 1 else struct.unpack("<I", data[8:12])[0]
            start = 10 if data[6] == 1 else 12
            header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
            shape = list(header["shape"])
            descr = {"<i8": "int64", "<f4": "float32", "<f8": "float64", "<i4": "int32"}.get(header["descr"], header["descr"])
            strides = [1] * len(shape)
            for k in range(len(shape) - 2, -1, -1):
                strides[k] = strides[k + 1] * shape[k + 1]
            out[name[:-4]] = (descr, shape, strides, 0, data[start + hlen:])
    return out


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype = {"I64": "int64", "F32": "float32", "F64": "float64", "I32": "int32", "BF16": "bfloat16"}[t["dtype"]]
        a, b = t["data_offsets"]
        shape = t["shape"]
        strides = [1] * len(shape)
        for k in range(len(shape) - 2, -1, -1):
            strides[k] = strides[k + 1] * shape[k + 1]
        out[name] = (dtype, shape, strides, 0, raw[8 + n + a:8 + n + b])
    return out


def check(tensors):
    classes = tensors["input"][1][1]
    targets = _elements(*tensors["target"])
    for t in targets:
        if not 0 <= t < classes and t != -100:
            raise IndexError("Target %d is out of bounds." % t)
    return classes, targets


def main(argv):
    path = argv[0]
    if path.endswith(".npz"):
        tensors = read_npz(path)
    elif path.endswith(".safetensors"):
        tensors = read_safetensors(path)
    else:
        tensors = read_bin(path)
    if "--exit" in argv:
        return int(argv[argv.index("--exit") + 1])
    classes, targets = check(tensors)
    print("exec_reader: %s: %d classes, targets %s" % (path.rsplit(".", 1)[-1], classes, targets))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
