"""Cross-check reduce_batch.py against another implementation of docs/FORMAT.md (the Go one).

    check_go_roundtrip.py write DIR [--zstd]
        Writes DIR/<case>.bin (every dtype, every layout, and one batch with every manifest
        field) with reduce_batch.save, and DIR/expected.json describing each tensor: dtype,
        shape, strides, offset, recorded_offset, storage_elements, batch_dim, contiguity flags,
        the values in row-major order (as strings, and as the little-endian bytes in hex), and
        the whole stored storage in hex. --zstd also writes zstd-compressed copies
        (DIR/<case>.zstd.bin; needs the zstandard module).

    check_go_roundtrip.py verify DIR [--bytes]
        Loads DIR/<case>.out.bin (each file the other side read and wrote again, uncompressed)
        and checks it holds what DIR/<case>.bin held. --bytes also requires the rewritten file
        to be byte-identical to the original (a canonical writer produces the same bytes).

Exit status 0 when all is well; 1 with one line per problem on stderr; 2 on a usage error.
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reduce_batch as rb  # noqa: E402

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _name(dtype):
    return str(dtype).replace("torch.", "")


def _storage(dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point:
        x = (torch.randn(n, generator=g, dtype=torch.float64) * 50).to(dtype)
        specials = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 1e-8], dtype=dtype)
        k = min(n, len(specials))
        x[:k] = specials[:k]
        return x[torch.randperm(n, generator=g)]
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -(2 ** 62)), min(info.max, 2 ** 62), (n,), generator=g).to(dtype)


def layouts(dtype, seed=0):
    """name -> a view of dtype in that layout, in a fixed order."""
    a = 4096 // torch.empty((), dtype=dtype).element_size()

    def s(n):
        return _storage(dtype, n, seed)

    return [
        ("contiguous", s(20).view(4, 5)),
        ("channels_last", s(120).view(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)),
        ("transposed", s(20).view(5, 4).t()),
        ("permuted_3d", s(24).view(2, 3, 4).permute(2, 0, 1)),
        ("strided_slice", s(24).view(4, 6)[:, ::2]),
        ("expanded", s(4).view(1, 4).expand(3, 4)),
        ("overlapping", torch.as_strided(s(8), (3, 3), (1, 1), 2)),
        ("offset_small", s(64)[3:13]),
        ("offset_at_A", s(a + 8)[a:a + 3]),
        ("offset_large", s(3 * a + 64)[2 * a + 37:2 * a + 47]),
        ("offset_large_2d", s(6 * a + 64).view(-1, 8)[(5 * a) // 8 + 1:, 1:7:2].t()),
        ("scalar", s(1).view(())),
        ("scalar_view", s(16)[7]),
        ("empty", s(1)[:0].view(0, 3)),
        ("empty_offset", s(10)[5:5]),
    ]


def batch_case():
    """A batch with every manifest field, batch axes other than 0 and a shared tensor."""
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(6, 5, 2, 2, generator=g).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, 5, (6, 2, 2), generator=g)
    target[3, 1, 0] = 255
    tokens = torch.randint(0, 50, (6, 4), generator=g).t()  # batch axis 1
    weight = torch.rand(5, generator=g).to(torch.bfloat16)
    return dict(
        tensors={"input": logits, "target": target, "index": tokens, "weight": weight},
        batch_dims={"index": 1, "weight": None},
        op="cross_entropy",
        attrs={"ignore_index": -100, "reduction": "mean", "label_smoothing": 0.1, "big": 9007199254740993,
               "flags": [True, False, None], "note": "<a & b> \u2028 caf\u00e9"},
        sample_ids=["img-000173", "img-<1>", "img-&2", "img-\u00e93", "img-\u65e5\u672c", "img-\U0001f600"],
        error={"text": "IndexError: Target 255 is out of bounds.", "exception": "IndexError", "exit_status": 1},
        meta={"torch": "1.13.1", "python": "3.11.2", "device": "cpu", "host": "h<&>", "recorded_at":
              "2025-01-01T00:00:00Z", "git": "0123456789abcdef0123456789abcdef01234567", "extra": "\u2029"},
    )


def cases():
    out = []
    for i, dt in enumerate(DTYPES):
        ts = layouts(dt, seed=i)
        out.append((_name(dt), dict(tensors=dict(ts), batch_dims={n: None for n, _ in ts})))
    out.append(("batch", batch_case()))
    return out


def _bits(t):
    t = t.contiguous()
    return t.view(torch.uint8) if t.dtype == torch.bool else t.view(_BITS[t.element_size()])


def _hex(t):
    b = _bits(t).reshape(-1)
    return "".join(int(v).to_bytes(t.element_size(), "little", signed=b.dtype != torch.uint8).hex()
                   for v in b.tolist())


def _values(t):
    flat = t.reshape(-1)
    if t.dtype == torch.bool:
        return ["true" if v else "false" for v in flat.tolist()]
    if t.dtype.is_floating_point:
        return [repr(v) for v in flat.double().tolist()]
    return [str(v) for v in flat.tolist()]


def _whole_storage(t):
    n = t.untyped_storage().nbytes() if hasattr(t, "untyped_storage") else t.storage().nbytes()
    return torch.as_strided(t, (n // t.element_size(),), (1,), 0)


def describe(batch):
    tensors = []
    for e in batch.manifest["tensors"]:
        t = batch.tensors[e["name"]]
        d = {
            "name": e["name"],
            "dtype": e["dtype"],
            "shape": list(t.shape),
            "strides": list(t.stride()),
            "offset": t.storage_offset(),
            "storage_elements": e["storage_elements"],
            "batch_dim": e.get("batch_dim"),
            "is_contiguous": t.is_contiguous(),
            "is_channels_last": t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last),
            "values": _values(t),
            "values_hex": _hex(t),
            "storage_hex": _hex(_whole_storage(t)),
        }
        if "recorded_offset" in e:
            d["recorded_offset"] = e["recorded_offset"]
        tensors.append(d)
    return {
        "samples": batch.samples,
        "sample_ids": batch.sample_ids,
        "op": batch.op,
        "attrs": batch.attrs,
        "error": batch.error,
        "meta": batch.meta,
        "tensors": tensors,
    }


def write(directory, zstd=False):
    os.makedirs(directory, exist_ok=True)
    expected = {"format": rb.FORMAT_VERSION, "files": {}}
    for stem, c in cases():
        kw = dict(batch_dims=c.get("batch_dims"), op=c.get("op"), attrs=c.get("attrs"),
                  sample_ids=c.get("sample_ids"), error=c.get("error"), meta=c.get("meta"), provenance=False)
        path = os.path.join(directory, stem + ".bin")
        rb.save(path, c["tensors"], **kw)
        expected["files"][stem] = describe(rb.load(path))
        if zstd:
            rb.save(os.path.join(directory, stem + ".zstd.bin"), c["tensors"], compression="zstd", **kw)
    with open(os.path.join(directory, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    return 0


def verify(directory, same_bytes=False):
    with open(os.path.join(directory, "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)
    problems = []
    for stem, want in sorted(expected["files"].items()):
        out = os.path.join(directory, stem + ".out.bin")
        try:
            got = describe(rb.load(out))
        except (OSError, ValueError) as e:
            problems.append("%s: %s" % (out, e))
            continue
        for key in ("samples", "sample_ids", "op", "attrs", "error", "meta"):
            if got[key] != want[key]:
                problems.append("%s: %s: got %s, want %s" % (out, key, json.dumps(got[key]), json.dumps(want[key])))
        names = [t["name"] for t in got["tensors"]]
        want_names = [t["name"] for t in want["tensors"]]
        if names != want_names:
            problems.append("%s: tensors: got %s, want %s" % (out, names, want_names))
            continue
        for g, w in zip(got["tensors"], want["tensors"]):
            for key in sorted(set(g) | set(w)):
                if g.get(key) != w.get(key):
                    problems.append("%s: tensor %r: %s: got %s, want %s" % (
                        out, g["name"], key, json.dumps(g.get(key))[:200], json.dumps(w.get(key))[:200]))
        if same_bytes:
            with open(os.path.join(directory, stem + ".bin"), "rb") as f:
                orig = f.read()
            with open(out, "rb") as f:
                new = f.read()
            if orig != new:
                at = next((i for i, (a, b) in enumerate(zip(orig, new)) if a != b), min(len(orig), len(new)))
                problems.append("%s: not byte-identical to %s.bin (%d vs %d bytes, first difference at byte %d)"
                                % (out, stem, len(new), len(orig), at))
    for p in problems:
        sys.stderr.write(p + "\n")
    if problems:
        return 1
    sys.stdout.write("ok: %d files\n" % len(expected["files"]))
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) >= 2 and argv[0] == "write" and set(argv[2:]) <= {"--zstd"}:
        return write(argv[1], zstd="--zstd" in argv[2:])
    if len(argv) >= 2 and argv[0] == "verify" and set(argv[2:]) <= {"--bytes"}:
        return verify(argv[1], same_bytes="--bytes" in argv[2:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
