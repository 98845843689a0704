#!/usr/bin/env python3
"""`make bench`'s scale and -j tables, printed as ratios measured side by side in one run:

1. where the culprit sits: one bad target among n samples of 1,024 float32 logits (cross_entropy),
   at 256 MiB (n = 65,536) and 1 GiB (n = 262,144), the bad sample at 0, n/3, 2n/3 and n-1, the go
   and the torch backend: the whole job's replays, the samples the samples phase's candidates held
   in all (every replay of the phase, as a multiple of n), the samples phase's wall and the job's,
   and each position's job wall against the culprit-last one;
2. -j 1 against -j 2: one bad target among 256 samples (index 173), replayed by the go and the
   torch backends and by a user's step script (--backend exec --replay 'PYTHON step.py {batch}')
   warm (a child of the fork server) and cold (--no-zygote, a fresh interpreter per candidate):
   each pair run alternately three times, the median walls, their ratio, the replays each used
   and the replays -j 2 made ahead that no search used; and whether the two wrote the same
   fixture, byte for byte.

Run with the Python that has torch (Debian's, /usr/bin/python3), from the repository root, after
`make build`:  scripts/bench-scale.py [--skip-gib] [--skip-jobs] [--skip-positions] [--against OLD]

--against measures an earlier build (say `git worktree add /tmp/old REV && cd /tmp/old && go build
-o /tmp/reduce-old ./cmd/reduce`) beside this one in section 1, on the same files.

Absolute times are context only: the ratios are the result.
"""

import argparse
import filecmp
import os
import shutil
import statistics
import sys
import tempfile

from benchlib import REDUCE, STEP, run_reduce, write_batch

# The binaries section 1 measures, each with its label: this one, and --against.
BINARIES = [("", REDUCE)]


def reduce(path, cwd, *args, binary=REDUCE):
    """The --json events of `reduce --batch path --out out` with args, run in cwd, and the wall time."""
    return run_reduce(binary, path, cwd, "out", args)


def phase_wall(events, phase):
    """Seconds from the phase's start to the next phase's."""
    start = end = None
    for ev in events:
        if ev["event"] == "phase":
            if ev["phase"] == phase and start is None:
                start = ev["_at"]
            elif start is not None and ev["phase"] != phase and end is None:
                end = ev["_at"]
    if start is None:
        return 0.0
    return (end if end is not None else events[-1]["_at"]) - start


def positions(tmp, sizes, backends):
    print("\n1. where the culprit sits: one bad target among n (n x 1,024 float32), -j 1")
    print("%-8s %-15s %-6s %8s %14s %14s %10s %9s %10s" % (
        "batch", "backend", "culprit", "replays", "samples held", "job held", "samples s", "job s", "wall/last"))
    for rows in sizes:
        mib = rows * 1024 * 4 >> 20
        walls = {}
        results = []
        for name, bad in (("0", 0), ("n/3", rows // 3), ("2n/3", 2 * rows // 3), ("n-1", rows - 1)):
            path = os.path.join(tmp, "pos.bin")
            write_batch(path, rows, 1024, bad, 10)
            for label, binary in BINARIES:
                for backend in backends:
                    cwd = tempfile.mkdtemp(dir=tmp)
                    args = ["--backend", backend] + (["--python", sys.executable] if backend == "torch" else [])
                    events, wall = reduce(path, cwd, *args, binary=binary)
                    shutil.rmtree(cwd, ignore_errors=True)
                    summary = events[-1]
                    held = sum(ev.get("size", 0) for ev in events
                               if ev["event"] == "replay" and ev.get("phase") == "samples")
                    job = sum(ev.get("size", 0) for ev in events if ev["event"] == "replay")
                    who = label + backend
                    walls[(who, name)] = wall
                    results.append((who, name, summary["replays"], held / rows, job / rows,
                                    phase_wall(events, "samples"), wall))
            os.unlink(path)
        for who, name, replays, held, job, sw, wall in sorted(results, key=lambda r: r[0]):
            print("%-8s %-15s %-6s %8d %13.2fn %13.2fn %10.2f %9.2f %10.2f" % (
                "%d MiB" % mib, who, name, replays, held, job, sw, wall, wall / walls[(who, "n-1")]))


def same_tree(a, b):
    """Whether directories a and b hold the same files with the same bytes."""
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(same_tree(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


def jobs(tmp):
    print("\n2. -j 1 against -j 2: one bad target among 256 (index 173), median of 3 runs each, alternating")
    path = os.path.join(tmp, "ce256.bin")
    write_batch(path, 256, 10, 173, 10)
    step = os.path.join(tmp, "step.py")
    with open(step, "w") as f:
        f.write(STEP)
    command = "%s %s {batch}" % (sys.executable, step)
    runs = [("go", ["--backend", "go"]),
            ("torch", ["--backend", "torch", "--python", sys.executable]),
            ("exec warm", ["--backend", "exec", "--replay", command]),
            ("exec cold", ["--backend", "exec", "--replay", command, "--no-zygote"])]
    print("%-10s %9s %9s %8s %10s %10s %12s %14s" % (
        "backend", "-j 1 s", "-j 2 s", "ratio", "replays 1", "replays 2", "ahead (-j 2)", "same fixture"))
    for name, args in runs:
        walls = {1: [], 2: []}
        replays, ahead, outs = {}, 0, {}
        for _ in range(3):
            for j in (1, 2):
                cwd = tempfile.mkdtemp(dir=tmp)
                events, wall = reduce(path, cwd, *(args + ["-j", str(j)]))
                walls[j].append(wall)
                replays[j] = events[-1]["replays"]
                if j == 2:
                    ahead = max(ahead, events[-1].get("ahead", 0))
                if j in outs:
                    shutil.rmtree(cwd, ignore_errors=True)
                else:
                    outs[j] = os.path.join(cwd, "out")
        w1, w2 = statistics.median(walls[1]), statistics.median(walls[2])
        print("%-10s %9.2f %9.2f %8.2f %10d %10d %12d %14s" % (
            name, w1, w2, w2 / w1, replays[1], replays[2], ahead, "yes" if same_tree(outs[1], outs[2]) else "NO"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skip-gib", action="store_true", help="leave out the 1 GiB batches")
    ap.add_argument("--skip-positions", action="store_true", help="leave out the culprit-position table")
    ap.add_argument("--skip-jobs", action="store_true", help="leave out -j 1 against -j 2")
    ap.add_argument("--against", metavar="BIN", help="an earlier reduce binary measured beside this one in section 1")
    o = ap.parse_args()
    if o.against:
        BINARIES.append(("earlier: ", os.path.abspath(o.against)))
    if not os.path.exists(REDUCE):
        raise SystemExit("no %s: run `make build` first" % REDUCE)
    tmp = tempfile.mkdtemp(prefix="reduce-bench-scale-")
    try:
        if not o.skip_positions:
            positions(tmp, [65536] + ([] if o.skip_gib else [262144]), ["go", "torch"])
        if not o.skip_jobs:
            jobs(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
