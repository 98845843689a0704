"""What make bench's Python scripts share (bench-peers.py, bench-scale.py): the user's step that
the exec backend and the peers' tests run, the cross_entropy batch with one bad target they
reduce, and one run of reduce with its --json events."""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "replay", "python"))

import reduce_batch  # noqa: E402
import torch  # noqa: E402

REDUCE = os.path.join(ROOT, "bin", "reduce")

# The user's step, as the exec backend and picire's tests run it: exit 1 with torch's traceback
# on a bad target, 0 otherwise.
STEP = """import sys
sys.path.insert(0, %r)
import reduce_batch
import torch.nn.functional as F

b = reduce_batch.load(sys.argv[1])
F.cross_entropy(b.tensors["input"], b.tensors["target"])
""" % os.path.join(ROOT, "replay", "python")


def write_batch(path, n, width, bad, classes):
    """A cross_entropy batch of n samples of `width` logits, targets below `classes`, but the one
    at `bad`, which is `width`: one past the last class."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, width, generator=g)
    t = torch.randint(0, classes, (n,), generator=g)
    t[bad] = width
    reduce_batch.save(path, {"input": x, "target": t}, op="cross_entropy",
                      error="IndexError: Target %d is out of bounds." % width)


def run_reduce(binary, path, cwd, out, args):
    """The --json events of `binary --batch path --out out` with args, run in cwd, each with the
    seconds since the start when it arrived ("_at"), and the wall time."""
    start = time.time()
    p = subprocess.Popen([binary, "--batch", path, "--out", out, "--json", "-q"] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, text=True)
    events = []
    for line in p.stdout:
        ev = json.loads(line)
        ev["_at"] = time.time() - start
        events.append(ev)
    err = p.stderr.read()
    if p.wait() != 0:
        raise SystemExit("reduce %s failed (%d): %s" % (" ".join(args), p.returncode, err[-2000:]))
    return events, time.time() - start
