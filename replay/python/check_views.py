"""Check that a candidate built from a plan (reduce_batch.worker.load_view) is the candidate reduce
would have written to a file (reduce_batch.load of it), with real torch.

    check_views.py write DIR
        Writes DIR/<case>.bin, recorded batches in every layout class and dtype kind, batched
        along their first or last dim, with reduce_batch.save (zstd-compressed where the module
        is installed, as users' recorders write them).

    check_views.py compare DIR
        Reads DIR/pairs.json, [{"name", "file", "plan"}], the other side's candidates: "file" a
        candidate written whole, "plan" the plan of the same candidate. Loads both and checks
        that every tensor has the same dtype, shape, strides, storage offset and storage bytes,
        and the batch the same samples, sample ids, batch axes, pads and structure.

Exit status 0 when all is well; 1 with one line per problem on stderr; 2 on a usage error.
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import check_go_roundtrip as rt  # noqa: E402
import reduce_batch as rb  # noqa: E402
import reduce_batch.worker  # noqa: E402

DTYPES = [torch.bool, torch.uint8, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]


def cases():
    out = []
    for i, dt in enumerate(DTYPES):
        for name, t in rt.layouts(dt, seed=i):
            if t.dim() == 0 or t.size(0) < 2:
                continue
            other = rt._storage(torch.int64, 3 * t.size(0), i).view(t.size(0), 3)
            out.append(("%s_%s_first" % (rt._name(dt), name),
                        dict(tensors={"x": t, "y": other}, batch_dims={"x": 0, "y": 0})))
            if t.dim() > 1 and t.size(-1) == t.size(0):
                out.append(("%s_%s_last" % (rt._name(dt), name),
                            dict(tensors={"x": t, "y": other}, batch_dims={"x": t.dim() - 1, "y": 0})))
    out.append(("batch", rt.batch_case()))
    # A label column [N, 1], contiguous and a column of a wider tensor: a view drops its dim of size 1.
    out.append(("label_column", dict(tensors={"label": torch.arange(5).view(5, 1), "x": torch.randn(5, 3)},
                                     batch_dims={"label": 0, "x": 0})))
    out.append(("label_column_strided", dict(tensors={"label": torch.arange(10).view(5, 2)[:, 1:]},
                                             batch_dims={"label": 0})))
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 9, (5, 7), generator=g)
    out.append(("structure", dict(batch={"tokens": tokens, "key": [3, 1, 4, 1, 5], "scale": 0.5,
                                         "table": torch.randn(4, 2, generator=g)},
                                  batch_dims={"table": None})))
    # Padded to the longest sample, with a state: every candidate is padded afresh to its own.
    lengths = [7, 2, 5, 3, 4]
    padded = torch.zeros(5, 7, dtype=torch.int64)
    for i, n in enumerate(lengths):
        padded[i, :n] = torch.arange(1, n + 1)
    model = torch.nn.Linear(3, 2)
    out.append(("padded_state", dict(batch={"tokens": padded, "mask": padded != 0, "lengths": torch.tensor(lengths)},
                                     padded={"tokens": 1, "mask": 1}, lengths=lengths,
                                     state={"model": model})))
    return out


def write(directory):
    os.makedirs(directory, exist_ok=True)
    try:
        import zstandard  # noqa: F401
        compression = "zstd"
    except ImportError:
        compression = "none"
    for name, kw in cases():
        path = os.path.join(directory, name + ".bin")
        if "batch" in kw:
            rb.save(path, kw.pop("batch"), compression=compression, **kw)
        else:
            rb.save(path, kw.pop("tensors"), compression=compression, **kw)
    # A window of steps (record_on_failure(window=2)): the steps before the failing one, each its own
    # batch of padded tokens (one with a transposed layout), and the state at the window's start.
    g, model, path = torch.Generator().manual_seed(5), torch.nn.Linear(3, 2), os.path.join(directory, "window.bin")
    for i in range(4):
        lengths = torch.randint(1, 6, (4,), generator=g).tolist()
        tokens = torch.randint(1, 9, (4, 5), generator=g) * (torch.arange(5) < torch.tensor(lengths)[:, None])
        batch = {"x": torch.randn(3, 4, generator=g).t(), "tokens": tokens, "id": ["s%d-%d" % (i, k) for k in range(4)]}
        try:
            with rb.record_on_failure(path, batch, step=window_step, state={"model": model}, window=2,
                                      padded={"tokens": 1}, lengths=lengths, compression=compression):
                window_step(batch, fail=i == 3)
        except ValueError:
            pass


def window_step(batch, state=None, fail=False):
    """The window case's step: it fails at the last step (the file records it by name only)."""
    if fail:
        raise ValueError("the step failed")


def _storage_bytes(t):
    n = t.storage().size()
    flat = torch.as_strided(t, (n,), (1,), 0) if n else t.new_empty(0)
    return bytes(rt._bits(flat).numpy().tobytes()) if n else b""


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for v in (x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else ())
            for t in _tensors(v)]


def _leaves(x):
    if isinstance(x, torch.Tensor):
        return "<tensor>"
    if isinstance(x, dict):
        return {k: _leaves(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x).__name__, [_leaves(v) for v in x]
    return repr(x)


def compare(directory):
    with open(os.path.join(directory, "pairs.json")) as f:
        pairs = json.load(f)
    problems = []
    for p in pairs:
        a = rb.load(os.path.join(directory, p["file"]))
        with open(os.path.join(directory, p["plan"])) as f:
            b = rb.worker.load_view(json.load(f))
        where = p["name"]
        for attr in ("samples", "sample_ids", "batch_dims", "pads", "op", "attrs", "recorded_offsets"):
            if getattr(a, attr) != getattr(b, attr):
                problems.append("%s: %s: file %r, plan %r" % (where, attr, getattr(a, attr), getattr(b, attr)))
        if _leaves(a.data) != _leaves(b.data):
            problems.append("%s: structure: file %r, plan %r" % (where, _leaves(a.data), _leaves(b.data)))
        if list(a.tensors) != list(b.tensors):
            problems.append("%s: tensors %s, plan %s" % (where, list(a.tensors), list(b.tensors)))
            continue
        if [w[::2] + (w[3],) for w in a.window] != [w[::2] + (w[3],) for w in b.window]:
            problems.append("%s: window: file %r, plan %r" % (where, [w[::2] for w in a.window],
                                                              [w[::2] for w in b.window]))
            continue
        pairs_of = list(a.tensors.items())
        for wa, wb in zip(a.window, b.window):
            ta, tb = _tensors(wa[1]), _tensors(wb[1])
            if len(ta) != len(tb):
                problems.append("%s: window step %d: %d tensors, plan %d" % (where, wa[0], len(ta), len(tb)))
            pairs_of += [("window %d %d" % (wa[0], k), (x, y)) for k, (x, y) in enumerate(zip(ta, tb))]
        for name, x in pairs_of:
            x, y = x if isinstance(x, tuple) else (x, b.tensors[name])
            got = (y.dtype, tuple(y.shape), y.stride(), y.storage_offset())
            want = (x.dtype, tuple(x.shape), x.stride(), x.storage_offset())
            if got != want:
                problems.append("%s/%s: layout %s, want %s" % (where, name, got, want))
            elif _storage_bytes(x) != _storage_bytes(y):
                problems.append("%s/%s: storage bytes differ" % (where, name))
    for line in problems:
        print(line, file=sys.stderr)
    print("%d candidates compared, %d problems" % (len(pairs), len(problems)))
    return 1 if problems else 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] not in ("write", "compare"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "write":
        write(argv[1])
        return 0
    return compare(argv[1])


if __name__ == "__main__":
    sys.exit(main())
