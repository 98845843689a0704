#!/usr/bin/env python3
"""`make bench`'s comparisons, printed as ratios measured side by side in one run:

1. reduce against picire (PyPI; its ddmin driving the same per-candidate step, a fresh python +
   torch process per test) on one bad target among 256 and among 4,096 samples: replays and wall
   time of reduce's torch backend, and of its exec backend warm and cold, each against picire's;
   and shrinkray (PyPI, --no-llm, one test at a time), which reduces the batch written as text
   (a sample a line) with a test that runs the same step in a fresh python + torch: its tests
   and wall until it first holds one sample, under a time cap ($REDUCE_BENCH_CAP seconds,
   default 300), whether it stopped by itself, and whether the sample it holds is the culprit as
   recorded;
2. one full-batch replay at 256 MiB (65,536 x 1,024 float32 logits, cross_entropy) with the go
   backend and with the torch backend, against a bare torch script that loads the same file and
   runs the op;
3. the whole job's replays against log2 n for one bad target among n = 256, 4,096, 100,000;
4. the peak resident set of reduce and of its largest replay against the batch's storage, at
   256 MiB (and 1 GiB with --gib).

Run with the Python that has torch (Debian's, /usr/bin/python3), from the repository root, after
`make build`:  scripts/bench-peers.py [--skip-large] [--gib] [--against OLD_BINARY]

--against measures an earlier build (say `git worktree add /tmp/old REV && cd /tmp/old && go build
-o /tmp/reduce-old ./cmd/reduce`) beside this one in sections 2 and 4.

picire runs from a virtual environment of its own under ~/.cache/reduce (made on first use with
pip, on top of this Python's packages, so that its test processes import the same torch).
shrinkray's releases need Python >= 3.12, which Debian 12 does not have: it runs from the
Python 3.13 environment scripts/py313-trixie.sh makes under ~/.cache/reduce (Debian 13's
python3.13, unpacked, not installed), or from $REDUCE_SHRINKRAY (its shrinkray command); its
tests run this Python.
Absolute times are context only: the ratios are the result.
"""

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import REDUCE, ROOT, STEP, reduce_batch, run_reduce, write_batch

# The binaries sections 2 and 4 measure, each with its label: this one, and --against.
BINARIES = [("", REDUCE)]
PICIRE = "picire==21.8"
PICIRE_DEPS = ["inators==2.1.1"]

# picire's test: the candidate (a list of sample positions) written as a batch, the step run in
# a fresh process; FAIL when it fails as the original does (an IndexError), PASS otherwise.
PICIRE_DRIVER = """import os, subprocess, sys, tempfile, time
sys.path.insert(0, %(rb)r)
import picire, reduce_batch, torch

path, step, out = sys.argv[1], sys.argv[2], sys.argv[3]
b = reduce_batch.load(path)
x, t = b.tensors["input"], b.tensors["target"]
tests = 0
tmp = tempfile.mkdtemp()


def test(config, config_id):
    global tests
    if not config:
        return picire.Outcome.PASS
    tests += 1
    idx = torch.tensor(sorted(config))
    f = os.path.join(tmp, "candidate.bin")
    reduce_batch.save(f, {"input": x.index_select(0, idx), "target": t.index_select(0, idx)}, op="cross_entropy")
    p = subprocess.run([sys.executable, step, f], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    failed = p.returncode != 0 and b"IndexError" in p.stderr
    return picire.Outcome.FAIL if failed else picire.Outcome.PASS


start = time.time()
dd = picire.DD(test, split=picire.config_splitters.ZellerSplit(n=2), cache=picire.ConfigCache())
result = dd(list(range(t.shape[0])))
with open(out, "w") as f:
    f.write("%%d %%f %%s\\n" %% (tests, time.time() - start, ",".join(map(str, result))))
"""


# shrinkray's test: the candidate text (a sample a line: the target, then the logits), the step
# run on it in this fresh process; exit 0 (interesting) when it fails as the original does. Each
# call appends its time, its lines and its verdict to the log $REDUCE_BENCH_LOG.
SHRINKRAY_TEST = """import os, sys, time
start = time.time()
interesting = False
try:
    rows = [line.split() for line in open(sys.argv[1]).read().splitlines()]
    import torch
    import torch.nn.functional as F
    t = torch.tensor([int(r[0]) for r in rows])
    x = torch.tensor([[float(v) for v in r[1:]] for r in rows])
    try:
        F.cross_entropy(x, t)
    except IndexError:
        interesting = True
except Exception:
    rows = []
with open(os.environ["REDUCE_BENCH_LOG"], "a") as f:
    f.write("%f %d %d\\n" % (time.time(), len(rows), interesting))
sys.exit(0 if interesting else 1)
"""


def shrinkray_command():
    """shrinkray's command: $REDUCE_SHRINKRAY, else the one scripts/py313-trixie.sh makes."""
    if os.environ.get("REDUCE_SHRINKRAY"):
        return os.environ["REDUCE_SHRINKRAY"]
    out = subprocess.run([os.path.join(ROOT, "scripts", "py313-trixie.sh")], stdout=subprocess.PIPE, check=True)
    return os.path.join(os.path.dirname(out.stdout.decode().strip().splitlines()[-1]), "shrinkray")


def shrinkray(tmp, path, n):
    """shrinkray on the batch at path as text: (tests and seconds until it first held one sample,
    or None; tests in all; whether it stopped by itself; whether its one sample is the culprit as
    recorded)."""
    b = reduce_batch.load(path)
    x, t = b.tensors["input"], b.tensors["target"]
    lines = ["%d %s" % (int(t[i]), " ".join(repr(float(v)) for v in x[i])) for i in range(n)]
    work = os.path.join(tmp, "shrinkray-%d" % n)
    os.makedirs(work)
    case, test, log = (os.path.join(work, f) for f in ("case.txt", "test.py", "log.txt"))
    with open(case, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(test, "w") as f:
        f.write("#!%s\n%s" % (sys.executable, SHRINKRAY_TEST))
    os.chmod(test, 0o755)
    cap = float(os.environ.get("REDUCE_BENCH_CAP", "300"))
    start = time.time()
    p = subprocess.Popen([shrinkray_command(), "--no-llm", "--ui", "basic", "--input-type", "arg", "--parallelism", "1",
                          "--no-history", test, case], cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, REDUCE_BENCH_LOG=log))
    try:
        p.wait(timeout=cap)
        stopped = True
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        stopped = False
    first, calls = None, 0
    with open(log) as f:
        for calls, line in enumerate(f, 1):
            at, rows, interesting = line.split()
            if first is None and int(rows) == 1 and interesting == "1":
                first = (calls, float(at) - start)
    with open(case) as f:
        held = f.read().splitlines()
    culprit = lines[n * 2 // 3]
    return first, calls, stopped, held == [culprit]


def picire_python():
    """The interpreter of picire's virtual environment, made on first use."""
    venv = os.path.join(os.path.expanduser("~"), ".cache", "reduce", "bench-" + PICIRE.replace("==", "-"))
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        tmp = venv + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", tmp], check=True)
        subprocess.run([os.path.join(tmp, "bin", "pip"), "install", "-q", PICIRE] + PICIRE_DEPS, check=True)
        os.rename(tmp, venv)
    return py


def batch(dirname, n, width=4, name=None):
    """A cross_entropy batch of n samples with one bad target (the class `width`, one past the
    last, at 2n/3)."""
    path = os.path.join(dirname, name or "ce%d.bin" % n)
    write_batch(path, n, width, n * 2 // 3, min(width, 4))
    return path


def reduce(path, out, *args):
    """(replays, seconds) of `reduce --batch path` with args."""
    events, took = run_reduce(REDUCE, path, os.path.dirname(path), out, args)
    return events[-1]["replays"], took


def timed(cmd, cwd=None):
    start = time.time()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    return time.time() - start, p


def peers(tmp, warm_flags, cold_flags):
    py = picire_python()
    step = os.path.join(tmp, "step.py")
    with open(step, "w") as f:
        f.write(STEP)
    driver = os.path.join(tmp, "picire_driver.py")
    with open(driver, "w") as f:
        f.write(PICIRE_DRIVER % {"rb": os.path.join(ROOT, "replay", "python")})
    print("\n1. reduce against picire (ddmin, a fresh python + torch process per test), one bad target among n")
    print("%-7s %-28s %8s %9s %14s %14s" % ("n", "run", "replays", "seconds", "wall/picire", "replays/picire"))
    for n in (256, 4096):
        path = batch(tmp, n)
        out = os.path.join(tmp, "picire-%d.txt" % n)
        start = time.time()
        subprocess.run([py, driver, path, step, out], check=True)
        p_wall = time.time() - start
        with open(out) as f:
            p_tests, _, p_result = f.read().split()
        p_tests = int(p_tests)
        print("%-7d %-28s %8d %9.1f %14s %14s   (picire's result: samples %s)" % (n, "picire", p_tests, p_wall, "1", "1", p_result))
        command = "%s %s {batch}" % (sys.executable, step)
        runs = [("reduce --backend torch", ["--backend", "torch", "--python", sys.executable])]
        runs.append(("reduce --backend exec (cold)", ["--backend", "exec", "--replay", command] + cold_flags))
        if warm_flags is not None:
            runs.append(("reduce --backend exec (warm)", ["--backend", "exec", "--replay", command] + warm_flags))
        for name, args in runs:
            replays, wall = reduce(path, os.path.join(tmp, "out-%d-%s" % (n, len(name))), *args)
            print("%-7d %-28s %8d %9.1f %14.2f %14.2f" % (n, name, replays, wall, wall / p_wall, replays / p_tests))
        first, calls, stopped, same = shrinkray(tmp, path, n)
        how = "stopped by itself" if stopped else "still running at the cap, killed"
        kept = "the culprit as recorded" if same else "not the recorded culprit (values rewritten)"
        if first is None:
            print("%-7d %-28s %8s %9s %14s %14s   (never held one sample: %d tests; %s)" % (
                n, "shrinkray (one sample)", "-", "-", "-", "-", calls, how))
        else:
            print("%-7d %-28s %8d %9.1f %14.2f %14.2f   (%d tests in all, %s; it holds %s)" % (
                n, "shrinkray (one sample)", first[0], first[1], first[1] / p_wall, first[0] / p_tests, calls, how, kept))


def large(tmp):
    print("\n2. one replay of a 256 MiB batch (65,536 x 1,024 float32, cross_entropy) against a bare torch script")
    path = batch(tmp, 65536, width=1024, name="ce256m.bin")
    bare = ("import sys; sys.path.insert(0, %r); import reduce_batch, torch.nn.functional as F; "
            "b = reduce_batch.load(sys.argv[1]); F.cross_entropy(b.tensors['input'], b.tensors['target'])"
            % os.path.join(ROOT, "replay", "python"))
    t_bare, _ = timed([sys.executable, "-c", bare, path])
    print("%-34s %9s %12s" % ("run", "seconds", "ratio"))
    print("%-34s %9.2f %12s" % ("bare torch: load and run the op", t_bare, "1"))
    for label, binary in BINARIES:
        for name, args in (("reduce replay --backend go", ["--backend", "go"]),
                           ("reduce replay --backend torch", ["--backend", "torch", "--python", sys.executable])):
            t, p = timed([binary, "replay", path] + args)
            print("%-34s %9.2f %12.2f" % (label + name, t, t / t_bare))


def _vm_hwm(pid):
    """The peak resident set of pid in bytes (VmHWM), 0 when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children(pid):
    """pid's children, started by any of its threads."""
    out = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return out


def peak_memory(cmd, cwd):
    """(peak RSS of the process, peak RSS of its largest descendant, exit status), polled every
    10 ms."""
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    own, child = 0, 0
    while p.poll() is None:
        own = max(own, _vm_hwm(p.pid))
        todo = _children(p.pid)
        while todo:
            c = todo.pop()
            child = max(child, _vm_hwm(c))
            todo.extend(_children(c))
        time.sleep(0.01)
    return own, child, p.returncode


def memory(tmp, sizes):
    print("\n4. peak resident set of reduce and of its largest replay, against the batch's storage")
    print("%-9s %-22s %12s %8s %14s %8s %8s" % ("batch", "backend", "reduce MiB", "ratio", "replay MiB", "ratio", "sum"))
    for rows in sizes:
        path = os.path.join(tmp, "ce%dm.bin" % (rows // 256))
        if not os.path.exists(path):
            batch(tmp, rows, width=1024, name=os.path.basename(path))
        storage = rows * 1024 * 4 + rows * 8
        for label, binary in BINARIES:
            for backend in ("go", "torch"):
                out = os.path.join(tmp, "mem-%d-%s-%d" % (rows, backend, len(label)))
                own, child, code = peak_memory([binary, "--batch", path, "--backend", backend, "--python",
                                                sys.executable, "--out", out, "-q"], tmp)
                if code != 0:
                    raise SystemExit("reduce --batch %s --backend %s failed (%d)" % (path, backend, code))
                mib = 1 << 20
                print("%-9s %-22s %12.0f %8.2f %14.0f %8.2f %8.2f" % (
                    "%d MiB" % (storage // mib), label + backend, own / mib, own / storage,
                    child / mib, child / storage, (own + child) / storage))


def bound(tmp):
    print("\n3. the whole job's replays against log2 n, one bad target among n (go backend)")
    print("%-8s %8s %12s %10s" % ("n", "replays", "ceil(log2 n)", "bound +8"))
    for n in (256, 4096, 100000):
        path = batch(tmp, n)
        replays, _ = reduce(path, os.path.join(tmp, "bound-%d" % n), "--backend", "go")
        print("%-8d %8d %12d %10d" % (n, replays, math.ceil(math.log2(n)), math.ceil(math.log2(n)) + 8))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skip-large", action="store_true", help="leave out the 256 MiB replay and the memory")
    ap.add_argument("--gib", action="store_true", help="measure the memory at 1 GiB too (minutes)")
    ap.add_argument("--against", metavar="BIN", help="an earlier reduce binary (built from an older commit) "
                    "measured beside this one in sections 2 and 4")
    o = ap.parse_args()
    if o.against:
        BINARIES.append(("earlier: ", os.path.abspath(o.against)))
    if not os.path.exists(REDUCE):
        raise SystemExit("no %s: run `make build` first" % REDUCE)
    warm, cold = warm_flags()
    tmp = tempfile.mkdtemp(prefix="reduce-bench-")
    try:
        bound(tmp)
        peers(tmp, warm, cold)
        if not o.skip_large:
            large(tmp)
            memory(tmp, [65536] + ([262144] if o.gib else []))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def warm_flags():
    """The exec backend's flags for a warm replay of a Python command (the default: a child of the
    fork server) and a cold one (--no-zygote: an interpreter per candidate)."""
    return [], ["--no-zygote"]


if __name__ == "__main__":
    main()
