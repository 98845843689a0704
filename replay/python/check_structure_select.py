"""Property check of the batch structure across the two implementations of docs/FORMAT.md:
save (Python) -> load and select samples (Go) -> load (Python).

    check_structure_select.py write DIR [--examples N]
        Hypothesis generates N batches (nestings of dict, list, tuple, named tuple and mapping
        objects; leaves: tensors of every dtype in several layouts, some padded to the longest
        sample, per-sample Python values, shared values, leaves that cannot be encoded) and a
        selection of samples for each; writes DIR/<k>.bin with reduce_batch.save, and
        DIR/<k>.json with the selection.

    check_structure_select.py verify DIR
        For each DIR/<k>.bin, loads DIR/<k>.sel.bin (the other side's selection, written by it)
        and checks it against the selection done here on the original: the same structure and
        leaf kinds, per-sample values of the selected samples, and for every tensor its dtype,
        shape (a padded dim cut to the longest selected sample), stride order, storage offset,
        contiguity flags and values.

Exit status 0 when all is well; 1 with one line per problem on stderr; 2 on a usage error.
"""

import collections
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reduce_batch as rb  # noqa: E402

Pair = collections.namedtuple("Pair", "left right")


class Encoding(collections.abc.Mapping):
    """A mapping object that is not a dict, as a tokenizer's BatchEncoding is."""

    def __init__(self, data):
        self.data = dict(data)

    def __getitem__(self, k):
        return self.data[k]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _tensor(draw, st, n):
    dtype = draw(st.sampled_from(DTYPES))
    layout = draw(st.sampled_from(["contiguous", "transposed", "channels_last", "offset", "expanded", "gappy"]))
    base = torch.arange(4096 * 3, dtype=torch.float64).remainder(97).to(dtype)
    if layout == "channels_last":
        return base[:n * 24].view(n, 2, 3, 4).contiguous(memory_format=torch.channels_last)
    if layout == "transposed":
        return base[:n * 5].view(5, n).t()
    if layout == "offset":
        off = draw(st.sampled_from([3, 700, 4100]))
        return base[off:off + n * 6].view(n, 6)
    if layout == "expanded":
        return base[:n].view(n, 1).expand(n, 4)
    if layout == "gappy":
        return base[:n * 10].view(n, 10)[:, 1:8:2]
    return base[:n * 7].view(n, 7)


def batches(st):
    @st.composite
    def batch(draw):
        n = draw(st.integers(1, 5))
        pads = {}
        lengths = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))

        def leaf(path):
            kind = draw(st.sampled_from(["tensor", "tensor", "padded", "samples", "value", "skipped"]))
            if kind == "tensor":
                return _tensor(draw, st, n)
            if kind == "padded":
                pads[path] = 1
                return torch.arange(n * 7, dtype=torch.int64).view(n, 7)
            if kind == "samples":
                return draw(st.lists(st.one_of(st.text(max_size=3), st.integers(-5, 5), st.booleans(), st.none(),
                                               st.floats(allow_nan=False, allow_infinity=False, width=32)),
                                     min_size=n, max_size=n).filter(lambda v: len(v) == n))
            if kind == "value":
                return draw(st.one_of(st.integers(), st.text(max_size=4), st.floats(allow_nan=False,
                                                                                   allow_infinity=False)))
            return object()

        def node(path, depth):
            kind = draw(st.sampled_from(["leaf", "leaf", "dict", "list", "tuple", "pair", "mapping"]
                                        if depth < 3 else ["leaf"]))
            sub = (lambda k: "%s.%s" % (path, k) if path else str(k))
            if kind == "leaf":
                return leaf(path or "batch")
            if kind == "dict":
                keys = draw(st.lists(st.sampled_from(["a", "b", "ids", 0, 7]), min_size=1, max_size=3, unique=True))
                return {k: node(sub(k), depth + 1) for k in keys}
            if kind == "mapping":
                return Encoding({k: node(sub(k), depth + 1) for k in ["x", "y"]})
            if kind == "pair":
                return Pair(node(sub("left"), depth + 1), node(sub("right"), depth + 1))
            items = [node(sub(i), depth + 1) for i in range(draw(st.integers(1, 3)))]
            return items if kind == "list" else tuple(items)

        b = {"first": _tensor(draw, st, n), "rest": node("rest", 1)}
        sel = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1)))
        return b, pads, lengths, sel
    return batch()


def _write(d, examples):
    from hypothesis import HealthCheck, given, settings, strategies as st

    count = [0]

    @settings(max_examples=examples, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(batches(st))
    def one(case):
        b, pads, lengths, sel = case
        k = count[0]
        count[0] += 1
        path = os.path.join(d, "%d.bin" % k)
        rb.save(path, b, padded=pads or None, lengths=lengths if pads else None, provenance=False)
        with open(os.path.join(d, "%d.json" % k), "w") as f:
            json.dump({"select": sel}, f)

    one()
    return count[0]


def _select(t, axis, sel, pad):
    """What a selection of samples makes of tensor t, as docs/FORMAT.md says."""
    out = t.index_select(axis, torch.tensor(sel, dtype=torch.int64)) if axis is not None else t
    if pad is not None:
        keep = max([pad["lengths"][i] for i in sel] + [0])
        out = out.narrow(pad["dim"], 0, keep)
    return out


def _stride_order(t):
    return sorted(range(t.dim()), key=lambda d: (t.stride(d), t.shape[d]))


def _compare(problems, where, orig, got, node_o, node_g, b, g, sel):
    ko, kg = node_o["kind"], node_g["kind"]
    if ko != kg:
        problems.append("%s: kind %s, want %s" % (where, kg, ko))
        return
    if ko == "tensor":
        t, u = b.tensors[node_o["name"]], g.tensors[node_g["name"]]
        want = _select(t, b.batch_dims[node_o["name"]], sel, b.pads.get(node_o["name"]))
        if u.dtype != want.dtype or list(u.shape) != list(want.shape):
            problems.append("%s: %s%s, want %s%s" % (where, u.dtype, list(u.shape), want.dtype, list(want.shape)))
            return
        if not torch.equal(u.view(-1) if u.is_contiguous() else u.reshape(-1),
                           want.reshape(-1)) and not (u.dtype.is_floating_point and torch.equal(u.isnan(), want.isnan())):
            problems.append("%s: values differ" % where)
        # The layout is the original's (Select keeps it; index_select would not): the order of the
        # strides of the dims that still have more than one element.
        big = [d for d in range(u.dim()) if u.shape[d] > 1 and t.shape[d] > 1]
        if [d for d in _stride_order(u) if d in big] != [d for d in _stride_order(t) if d in big] and \
                not any(u.stride(d) == 0 or t.stride(d) == 0 for d in big):
            problems.append("%s: strides %s, want the order of %s" % (where, u.stride(), t.stride()))
        if u.storage_offset() != t.storage_offset():
            problems.append("%s: storage offset %d, want %d" % (where, u.storage_offset(), t.storage_offset()))
        if u.dim() == 4 and u.numel() > 0 and min(u.shape) > 1 and u.is_contiguous(memory_format=torch.channels_last) != \
                t.is_contiguous(memory_format=torch.channels_last):
            problems.append("%s: channels_last %s, want %s" % (where, not t.is_contiguous(), t.is_contiguous()))
        return
    if ko == "samples":
        want = [node_o["values"][i] for i in sel]
        if node_g["values"] != want:
            problems.append("%s: values %r, want %r" % (where, node_g["values"], want))
        return
    if node_o.get("keys") != node_g.get("keys") or node_o.get("type") != node_g.get("type") or \
            len(node_o.get("items", [])) != len(node_g.get("items", [])) or \
            (ko == "value" and node_o["value"] != node_g["value"]):
        problems.append("%s: %r, want %r" % (where, {k: v for k, v in node_g.items() if k != "items"},
                                            {k: v for k, v in node_o.items() if k != "items"}))
        return
    for i, (co, cg) in enumerate(zip(node_o.get("items", []), node_g.get("items", []))):
        _compare(problems, "%s.items[%d]" % (where, i), orig, got, co, cg, b, g, sel)


def _tree(b):
    """The structure of a batch; a flat dict of tensors (a version-1 file) has none written."""
    if "structure" in b.manifest:
        return b.manifest["structure"]
    names = [e["name"] for e in b.manifest["tensors"]]
    return {"kind": "dict", "keys": names, "items": [{"kind": "tensor", "name": n} for n in names]}


def _verify(d):
    problems = []
    names = sorted((f for f in os.listdir(d) if f.endswith(".json")), key=lambda f: int(f.split(".")[0]))
    if not names:
        problems.append("%s: no cases" % d)
    for f in names:
        k = f.split(".")[0]
        sel = json.load(open(os.path.join(d, f)))["select"]
        b = rb.load(os.path.join(d, k + ".bin"))
        g = rb.load(os.path.join(d, k + ".sel.bin"))
        if g.samples != len(sel):
            problems.append("%s: %d samples, want %d" % (k, g.samples, len(sel)))
            continue
        _compare(problems, k + ": structure", b, g, _tree(b), _tree(g), b, g, sel)
        # The batch the step gets: the same Python types, all the way down.
        if type(b.data) is not type(g.data):
            problems.append("%s: data is a %s, want %s" % (k, type(g.data), type(b.data)))
    for p in problems:
        sys.stderr.write(p + "\n")
    return 1 if problems else 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "write":
        n = 60
        if len(argv) == 4 and argv[2] == "--examples":
            n = int(argv[3])
        print(_write(argv[1], n))
        return 0
    if len(argv) == 2 and argv[0] == "verify":
        return _verify(argv[1])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
