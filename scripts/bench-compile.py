"""Replays of a step compiled with torch.compile (Inductor, on the CPU), warm against cold, side by side
in one run: cmd/reduce/testdata/compiled/train.py's nn.Embedding step, recorded once, reduced with
`reduce --batch` from batches that differ only in their meta:

- warm: meta "compiled" (what reduce_batch records of a compiled step): the replays share Inductor's
  caches (the training run's TORCHINDUCTOR_CACHE_DIR) and the fork server imported Inductor;
- cold: what replays did before they kept the caches warm: no such meta (no Inductor imported in
  the fork server, no eager probe), Inductor's caches off (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1: a
  replay's TMPDIR was its run directory, where Inductor put its cache, so every replay compiled from
  scratch) and its compile workers as many as the CPUs (a pool started in every replay).

    python scripts/bench-compile.py [--rounds 1] [--reduce bin/reduce]

Run with the Python whose torch has torch.compile (make bench: the PyPI environment). It prints, per
kind, the replays, the median and total wall of a replay, the reduction's wall, and the ratios.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def reduction(reduce, proj, batch, env):
    out = tempfile.mkdtemp(prefix="out-", dir=proj)
    t0 = time.monotonic()
    res = subprocess.run([reduce, "--batch", batch, "--json", "-q", "--out", out], cwd=proj, env=env,
                         capture_output=True, text=True)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        sys.exit("reduce --batch %s: exit %d\n%s" % (batch, res.returncode, res.stderr[-4000:]))
    events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    replays = [e["seconds"] for e in events if e.get("event") == "replay"]
    summary = events[-1]
    shutil.rmtree(out)
    return {"replays": len(replays), "median": statistics.median(replays), "sum": sum(replays), "wall": wall,
            "ids": summary["culprits"][0]["ids"], "others": sum(o["count"] for o in summary["other_failures"])}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--reduce", default=os.path.join(ROOT, "bin", "reduce"))
    a = p.parse_args()
    reduce = os.path.abspath(a.reduce)
    proj = tempfile.mkdtemp(prefix="bench-compile-")
    try:
        shutil.copy(os.path.join(ROOT, "cmd", "reduce", "testdata", "compiled", "train.py"), proj)
        with open(os.path.join(proj, "reduce_batch.py"), "wb") as f:
            f.write(subprocess.run([reduce, "recorder"], check=True, capture_output=True).stdout)
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(proj, "inductor-cache"))
        for name, cold in (("warm.bin", []), ("cold.bin", ["--cold"])):
            # One OpenMP thread: Inductor's check raises (on more it aborts the process, unrecorded).
            r = subprocess.run([sys.executable, "train.py", "--model", "embedding", "--out", name] + cold,
                               cwd=proj, env=dict(env, OMP_NUM_THREADS="1"), capture_output=True, text=True)
            if not os.path.exists(os.path.join(proj, name)):
                sys.exit("train.py recorded nothing:\n" + r.stderr[-4000:])
        got = {"cold": [], "warm": []}
        for _ in range(a.rounds):
            for kind in ("cold", "warm"):  # interleaved: the machine's load falls on both alike
                got[kind].append(reduction(reduce, proj, kind + ".bin", env if kind == "warm" else dict(
                    env, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", TORCHINDUCTOR_COMPILE_THREADS=str(os.cpu_count()))))
        print("torch.compile (Inductor, CPU), nn.Embedding step, 16 samples, %d round(s), %d CPUs"
              % (a.rounds, os.cpu_count()))
        print("%-5s %8s %14s %14s %14s %s" % ("kind", "replays", "median/replay", "sum of replays", "reduction", "culprit"))
        med = {}
        for kind, runs in got.items():
            med[kind] = {k: statistics.median(r[k] for r in runs) for k in ("replays", "median", "sum", "wall")}
            print("%-5s %8d %13.2fs %13.1fs %13.1fs %s (other failures: %d)" % (
                kind, med[kind]["replays"], med[kind]["median"], med[kind]["sum"], med[kind]["wall"],
                ",".join(runs[-1]["ids"]), runs[-1]["others"]))
        c, w = med["cold"], med["warm"]
        print("cold/warm: %.1fx a replay (median), %.1fx the reduction's wall; warm has %+d replays (its eager probe)"
              % (c["median"] / w["median"], c["wall"] / w["wall"], w["replays"] - c["replays"]))
    finally:
        shutil.rmtree(proj, ignore_errors=True)


if __name__ == "__main__":
    main()
