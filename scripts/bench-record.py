#!/usr/bin/env python3
"""What `reduce record -- COMMAND` costs (make bench), side by side in one run:

1. A training epoch that does not fail, bare against under `reduce record` (the startup hook in the process, every
   batch kept by reference with its indices): the ratio of the medians of interleaved runs (aim: <= 1.02).
2. One reduction of a recorded crash, the command forked at its first batch for each replay (the CPU's way) against
   a fresh run of the command for each (--no-zygote, a GPU's way): replays, wall, and the time per replay against
   the bare step of the same program.

The program is our own image-classifier shape (cmd/reduce/testdata/record/classifier.py, larger), under the Python
given by --python (default: REDUCE_PYTHON, else /usr/bin/python3)."""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = """
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
n, bad = int(sys.argv[1]), int(sys.argv[2])
x, y = torch.randn(n, 256), torch.randint(0, 10, (n,))
if bad >= 0:
    y[bad] = 10
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
start, steps = time.perf_counter(), 0
for xb, yb in loader:
    opt.zero_grad()
    F.cross_entropy(model(xb), yb).backward()
    opt.step()
    steps += 1
print("%f %d" % (time.perf_counter() - start, steps))
"""


def run(argv, cwd, env):
    t = time.perf_counter()
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=os.environ.get("REDUCE_PYTHON", "/usr/bin/python3"))
    ap.add_argument("--reduce", default=os.path.join(ROOT, "bin", "reduce"))
    ap.add_argument("--samples", type=int, default=40000)
    ap.add_argument("--runs", type=int, default=5)
    o = ap.parse_args()
    work = tempfile.mkdtemp(prefix="reduce-bench-record-")
    env = dict(os.environ, OMP_NUM_THREADS="1", REDUCE_TRUST_DIR=os.path.join(work, "trust"))
    try:
        with open(os.path.join(work, "train.py"), "w") as f:
            f.write(PROGRAM)
        bare, hooked = [], []
        for _ in range(o.runs):  # interleaved: the machine's drift falls on both alike
            _, p = run([o.python, "train.py", str(o.samples), "-1"], work, env)
            bare.append(float(p.stdout.split()[0]))
            _, p = run([o.reduce, "record", "-o", "none.bin", "--", o.python, "train.py", str(o.samples), "-1"], work,
                       env)
            assert p.returncode == 0, p.stderr
            hooked.append(float(p.stdout.split()[0]))
        steps = int(p.stdout.split()[1])
        b, h = statistics.median(bare), statistics.median(hooked)
        print(f"epoch ({o.samples} samples, {steps} steps, {o.python}): bare {b:.2f}s, under reduce record {h:.2f}s: "
              f"{h / b:.3f}x (median of {o.runs} each, interleaved)")
        step = b / steps
        _, p = run([o.reduce, "record", "--", o.python, "train.py", str(o.samples), str(o.samples // 2)], work, env)
        assert p.returncode == 1 and os.path.exists(os.path.join(work, "crash.bin")), p.stderr
        rows = []
        for name, flags in (("forked at the first batch", []), ("a fresh run each (--no-zygote)", ["--no-zygote"])):
            out = os.path.join(work, "out-" + str(len(rows)))
            wall, p = run([o.reduce, "--batch", "crash.bin", "--json", "-q", "--out", out, *flags], work, env)
            s = json.loads(p.stdout.strip().splitlines()[-1])
            rows.append((name, s["replays"], wall))
        for name, replays, wall in rows:
            print(f"reduce, {name}: {replays} replays, {wall:.1f}s wall, {wall / replays:.3f}s a replay = "
                  f"{wall / replays / step:.0f}x the bare step ({step * 1000:.1f} ms)")
        print(f"forked against fresh runs: {rows[0][2] / rows[1][2]:.2f}x the wall")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
