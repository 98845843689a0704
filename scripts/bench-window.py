"""The cost of recording a window of steps: a training step of a small model on the CPU, timed bare,
inside record_on_failure (no window), and inside record_on_failure(window=8), side by side in one
run (the three kinds interleaved, each the median of its rounds), and the memory the window holds.

    python scripts/bench-window.py [--steps 400] [--window 8]

What the window adds to a step is a CPU copy of the batch (every step) and a copy of the model's
and optimizer's state every `window` steps; this script also times those two copies alone, so that
the step's figure can be read against them. Nothing is written unless a step fails (none does).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "replay", "python"))

import reduce_batch  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(1)
MODEL = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
OPT = torch.optim.Adam(MODEL.parameters(), lr=1e-3)


def step(batch, state=None):
    if state is not None:
        state.restore(model=MODEL, optimizer=OPT)
    loss = F.cross_entropy(MODEL(batch["x"]), batch["label"])
    OPT.zero_grad()
    loss.backward()
    OPT.step()


def batches(n, size=64):
    g = torch.Generator().manual_seed(1)
    return [{"x": torch.randn(size, 256, generator=g), "label": torch.randint(0, 10, (size,), generator=g),
             "id": ["s%d-%d" % (i, k) for k in range(size)]} for i in range(n)]


def mib(n):
    return n / 2.0 ** 20


def held(window):
    """Bytes of the tensors the window holds: its batches and its state copies."""
    return sum(reduce_batch._nbytes(torch, x) for x in [s[1] for s in window.steps] + [c[1] for c in window.copies])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    o = p.parse_args()
    data = batches(o.steps)
    path = os.path.join(tempfile.mkdtemp(), "crash.bin")
    state = {"model": MODEL, "optimizer": OPT}
    kinds = {
        "bare": lambda b: step(b),
        "record_on_failure": lambda b: _recorded(path, b, state, None),
        "window=%d" % o.window: lambda b: _recorded(path, b, state, o.window),
    }
    for b in data[:20]:  # warm up: Adam's state exists, the allocator has its blocks
        step(b)
    times = {k: [] for k in kinds}
    for _ in range(o.rounds):
        for name, run in kinds.items():
            t0 = time.perf_counter()
            for b in data:
                run(b)
            times[name].append((time.perf_counter() - t0) / len(data))
    per = {k: statistics.median(v) for k, v in times.items()}
    base = per["bare"]
    print("torch %s, one thread; a step: Linear(256, 256), ReLU, Linear(256, 10), Adam; batch of 64 samples "
          "[64, 256] float32 + labels + ids" % torch.__version__)
    for name, t in per.items():
        print("  %-20s %8.1f us a step   %.3fx bare" % (name, t * 1e6, t / base))
    # The window's two copies alone.
    copy_batch = _median_us(lambda: reduce_batch._copied(torch, data[0]))
    copy_state = _median_us(lambda: {k: reduce_batch._copied(torch, v.state_dict()) for k, v in state.items()})
    window = reduce_batch._Window.of(path, o.window, state)
    batch_bytes = reduce_batch._nbytes(torch, data[0])
    print("  the window's copies: a batch %.1f us every step, the state %.1f us every %d steps (%.1f us a step)"
          % (copy_batch, copy_state, o.window, copy_state / o.window))
    print("  memory the window holds now: %.2f MiB (%d batches of %.3f MiB, %d state copies); at most %d batches"
          % (mib(held(window)), len(window.steps), mib(batch_bytes), len(window.copies), 2 * o.window))


def _recorded(path, batch, state, window):
    with reduce_batch.record_on_failure(path, batch, step=step, state=state, window=window):
        step(batch)


def _median_us(fn, n=200):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e6


if __name__ == "__main__":
    main()
