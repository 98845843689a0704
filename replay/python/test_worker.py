"""Tests of the torch backend of reduce: reduce_collect.py's run_op, resolve_entry and replay, and
reduce_replay.py's worker (`replay`) and zygote (`zygote`). Run with
`/usr/bin/python3 -m pytest replay/python -q`."""

import json
import os
import select
import signal
import subprocess
import sys
import zipfile
import time

import pytest
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(ROOT, "fixtures", "examples")
ENTRY = os.path.join(ROOT, "replay", "testdata", "entry")
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.errors  # noqa: E402
import reduce_batch.ops  # noqa: E402
import reduce_batch.steps  # noqa: E402
import reduce_batch.worker  # noqa: E402

MODULE = os.path.join(HERE, "testdata", "run_worker.py")  # as reduce's launcher runs it


def example(name):
    return os.path.join(EXAMPLES, name + ".bin")


def test_run_op_matches_torch():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(5, 4, generator=g)
    y = torch.tensor([0, 3, 1, 2, 1])
    w = torch.rand(4, generator=g)
    idx = torch.tensor([[0, 1], [3, 2], [1, 1], [0, 0], [2, 3]])
    cases = [
        ("cross_entropy", {"input": x, "target": y, "weight": w}, {"reduction": "sum", "label_smoothing": 0.1},
         F.cross_entropy(x, y, weight=w, reduction="sum", label_smoothing=0.1)),
        ("nll_loss", {"input": x.log_softmax(1), "target": y}, {"ignore_index": 3},
         F.nll_loss(x.log_softmax(1), y, ignore_index=3)),
        ("binary_cross_entropy", {"input": x.sigmoid(), "target": x.sigmoid().round()}, {"reduction": "none"},
         F.binary_cross_entropy(x.sigmoid(), x.sigmoid().round(), reduction="none")),
        ("embedding", {"input": idx, "weight": x}, {"padding_idx": 0}, F.embedding(idx, x, padding_idx=0)),
        ("index_select", {"input": x, "index": y}, {"dim": 1}, torch.index_select(x, 1, y)),
        ("gather", {"input": x, "index": idx}, {"dim": 1}, torch.gather(x, 1, idx)),
        ("scatter_add", {"input": torch.zeros(5, 4), "index": idx, "src": x[:, :2]}, {"dim": 1},
         torch.scatter_add(torch.zeros(5, 4), 1, idx, x[:, :2])),
        ("one_hot", {"input": y}, {"num_classes": 6}, F.one_hot(y, 6)),
        ("index", {"input": x, "index": y}, {"dim": 1}, x[:, y]),
    ]
    for op, tensors, attrs, want in cases:
        got = rb.ops.run_op(op, tensors, attrs)
        assert torch.equal(got, want), op


def test_run_op_errors(monkeypatch):
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 4])
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        rb.ops.run_op("cross_entropy", {"input": x, "target": y}, {})
    with pytest.raises(rb.errors.HarnessError, match="unknown op 'conv2d'"):
        rb.ops.run_op("conv2d", {"input": x}, {})
    with pytest.raises(rb.errors.HarnessError, match="takes no tensor 'bias'"):
        rb.ops.run_op("cross_entropy", {"input": x, "target": y, "bias": y}, {})
    with pytest.raises(rb.errors.HarnessError, match="missing tensor 'target'"):
        rb.ops.run_op("cross_entropy", {"input": x}, {})
    with pytest.raises(rb.errors.HarnessError, match="takes no attribute 'pos_weight'"):
        rb.ops.run_op("cross_entropy", {"input": x, "target": y}, {"pos_weight": 2})
    with pytest.raises(rb.errors.HarnessError, match="missing attribute 'dim'"):
        rb.ops.run_op("gather", {"input": x, "index": y}, {})
    # A table generated for a torch that has a function this one lacks.
    monkeypatch.setitem(rb.ops._OPS, "gather", ("nn.functional.gather_v9",) + rb.ops._OPS["gather"][1:])
    with pytest.raises(rb.errors.HarnessError, match=r"gather: this torch \(.*\) has no torch\.nn\.functional\.gather_v9"):
        rb.ops.run_op("gather", {"input": x, "index": y[:, None]}, {"dim": 1})


def test_run_op_passes_the_defaults():
    # The table's defaults, the Go kernels' own (the table is rendered from them), reach torch.
    x, y = torch.randn(4, 4), torch.tensor([0, 1, 3])
    assert rb.ops._op_args("cross_entropy", {"input": x, "target": y}, {"reduction": "sum"})[1] == \
        {"ignore_index": -100, "reduction": "sum", "label_smoothing": 0.0}
    assert rb.ops._op_args("gather", {"input": x, "index": y}, {"dim": 0})[1] == {"dim": 0, "sparse_grad": False}
    assert rb.ops._op_args("one_hot", {"input": y}, {})[1] == {"num_classes": -1}
    assert torch.equal(rb.ops.run_op("index", {"input": x, "index": y}, {}), x[y])  # dim 0: reduce's own op


def test_op_calls_are_torchs():
    # Where torch's function has a Python signature, the table's calls and defaults are its own: the
    # names run_op passes by keyword are its parameters, and the Go kernels, the table and torch agree
    # on what an attribute left out means. (torch's builtins, such as torch.gather, have no signature
    # to read: test_run_op_matches_torch calls each.)
    import functools
    import inspect

    checked = set()
    for op, (function, positional, required, optional, _, defaults) in rb.ops._OPS.items():
        if not function:
            continue  # Python indexing
        fn = functools.reduce(getattr, function.split("."), torch)
        try:
            params = inspect.signature(fn).parameters
        except ValueError:
            continue
        checked.add(op)
        for name in required + optional:
            assert name in params, (op, name)
        assert list(positional) == list(params)[:len(positional)], (op, positional)
        for name, default in defaults.items():
            assert name in params and params[name].default == default, (op, name, params.get(name))
            assert type(params[name].default) is type(default), (op, name)
    assert {"cross_entropy", "nll_loss", "binary_cross_entropy", "embedding"} <= checked


def test_runtime_replay(tmp_path):
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        rb.steps.replay(example("four_class_targets"))
    b = rb.load(example("four_class_targets"))
    ok = str(tmp_path / "ok.bin")
    x, y = b.tensors["input"][:2], b.tensors["target"][:2]
    rb.save(ok, {"input": x, "target": y}, op="cross_entropy", meta={"fault": "pass"}, provenance=False)
    assert torch.equal(rb.steps.replay(ok, device="cpu"), F.cross_entropy(x, y))
    assert torch.equal(rb.steps.replay(ok, entry=os.path.join(ENTRY, "faults.py") + ":run"), x.sum())
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"RDCBATCH garbage")
    with pytest.raises(rb.errors.HarnessError, match="cannot load the candidate"):
        rb.steps.replay(str(bad))
    noop = str(tmp_path / "noop.bin")
    rb.save(noop, {"input": x}, provenance=False)
    with pytest.raises(rb.errors.HarnessError, match="records no op"):
        rb.steps.replay(noop)
    with pytest.raises(rb.errors.HarnessError, match="want module:function"):
        rb.steps.replay(ok, entry="nocolon")


def test_runtime_replays_from_its_zip(tmp_path):
    # A user's repository has reduce's package only as the zip beside its conftest.py (what reduce
    # writes where the package is not installed): the runtime imported from there replays a batch.
    z = tmp_path / "reduce_batch-test.zip"
    with zipfile.ZipFile(str(z), "w") as f:
        for name in sorted(os.listdir(os.path.join(HERE, "reduce_batch"))):
            if name.endswith((".py", ".json")):  # the package's files, as replay.PackageZip holds them
                f.write(os.path.join(HERE, "reduce_batch", name), "reduce_batch/" + name)
    child = ("import sys; sys.path.insert(0, sys.argv[1]); import reduce_batch.steps as s; "
             "s.replay(sys.argv[2], sys.argv[3]); assert s.__file__.startswith(sys.argv[1])")
    p = subprocess.run([sys.executable, "-c", child, str(z), example("four_class_targets"), "cpu"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path), timeout=120)
    assert p.returncode == 1 and p.stderr.rstrip().endswith("IndexError: Target 4 is out of bounds."), p.stderr
    assert str(z) in p.stderr  # the zip's copy ran, not this directory's
    b = rb.load(example("four_class_targets"))
    ok = str(tmp_path / "ok.bin")
    rb.save(ok, {"input": b.tensors["input"][:2], "target": b.tensors["target"][:2]}, op="cross_entropy",
            provenance=False)
    p = subprocess.run([sys.executable, "-c", child, str(z), ok, "cpu"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, cwd=str(tmp_path), timeout=120)
    assert p.returncode == 0 and p.stdout == "", p.stderr


def test_resolve_entry(monkeypatch):
    monkeypatch.syspath_prepend(ENTRY)
    assert rb.steps.resolve_entry("myproj.step:step").__name__ == "step"
    assert rb.steps.resolve_entry("myproj.step:TinyModel.forward").__name__ == "forward"
    assert rb.steps.resolve_entry(os.path.join(ENTRY, "faults.py") + ":run").__name__ == "run"
    for bad, msg in [("nocolon", "want module:function"), ("myproj.step:nope", "no attribute"),
                     ("no_such_module_xyz:f", "cannot import"), ("myproj.step:torch", "not callable")]:
        with pytest.raises(rb.errors.HarnessError, match=msg):
            rb.steps.resolve_entry(bad)


def test_replay_command_in_process(capsys, tmp_path):
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        rb.worker.main(["replay", example("four_class_targets")])
    with pytest.raises(IndexError, match="index out of range in self"):
        rb.worker.main(["replay", example("transposed_index"), "--device", "cpu"])
    b = rb.load(example("four_class_targets"))
    ok = str(tmp_path / "ok.bin")
    rb.save(ok, {"input": b.tensors["input"][:2], "target": b.tensors["target"][:2]}, op="cross_entropy",
            provenance=False)
    capsys.readouterr()
    assert rb.worker.main(["replay", ok]) == 0
    assert capsys.readouterr().out.startswith("reduce_batch: ok cross_entropy (cpu): float32[] first=[")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"RDCBATCH garbage")
    assert rb.worker.main(["replay", str(bad)]) == rb.worker.HARNESS_EXIT
    assert "harness" in capsys.readouterr().err
    noop = str(tmp_path / "noop.bin")
    rb.save(noop, {"input": b.tensors["input"]}, provenance=False)
    assert rb.worker.main(["replay", noop]) == rb.worker.HARNESS_EXIT
    assert rb.worker.main(["replay", ok, "--device", "tpu"]) == rb.worker.HARNESS_EXIT


def test_report_line(capsys, tmp_path):
    """The report line the Go side reads (replay.Report): a built-in op's outputs when it passes,
    its failure on the CPU when it fails; _cpu_failure gives the latter for a replay on another
    device, from the candidate run again on the CPU."""
    path = example("four_class_targets")
    with pytest.raises(IndexError):
        rb.worker.replay(path, "cpu")
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith(rb.worker.REPORT_PREFIX)]
    assert len(lines) == 1, lines
    assert json.loads(lines[0][len(rb.worker.REPORT_PREFIX):]) == {
        "cpu": {"exception": "IndexError", "message": "Target 4 is out of bounds."}}
    e = rb.worker._cpu_failure(path, None)
    assert type(e) is IndexError and str(e) == "Target 4 is out of bounds."

    b = rb.load(path)
    ok = str(tmp_path / "ok.bin")
    rb.save(ok, {"input": b.tensors["input"][:2], "target": b.tensors["target"][:2]}, op="cross_entropy",
            provenance=False)
    assert rb.worker._cpu_failure(ok, None) is None
    out = rb.worker.replay(ok, "cpu")
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith(rb.worker.REPORT_PREFIX)]
    assert len(lines) == 1, lines
    (o,) = json.loads(lines[0][len(rb.worker.REPORT_PREFIX):])["outputs"]
    assert o["name"] == "output" and o["dtype"] == "float32" and o["shape"] == []
    assert o["values"] == [float(out)] and o["sum"] == float(out) and o["sum_abs"] == abs(float(out))


def test_replay_command_process():
    """The real traceback and exit status 1 of an uncaught torch exception."""
    p = subprocess.run([sys.executable, MODULE, "replay", example("four_class_targets")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert "torch/nn/functional.py" in err and "in cross_entropy" in err
    assert err.rstrip().endswith("IndexError: Target 4 is out of bounds.")


def test_replay_entry_that_spawns(tmp_path):
    """A step whose pool starts its workers with spawn: each child imports the launcher as
    __mp_main__, which must not run the worker again (it would replay in every child, and hang)."""
    (tmp_path / "spawning.py").write_text(
        "import multiprocessing\n\n\ndef step(batch):\n"
        "    with multiprocessing.get_context('spawn').Pool(1) as p:\n"
        "        assert p.map(abs, [-1, -2]) == [1, 2]\n")
    p = subprocess.run([sys.executable, MODULE, "replay", example("four_class_targets"), "--entry", "spawning:step"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr.decode()


class Zygote(object):
    def __init__(self, tmp, *args, cwd=ENTRY):
        self.tmp = tmp
        env = dict(os.environ, PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1")
        self.p = subprocess.Popen([sys.executable, MODULE, "zygote"] + list(args), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=env, cwd=cwd)
        self.buf = b""
        self.events = []
        self.hello = self.wait(lambda e: e["event"] == "hello")
        self.n = 0

    def wait(self, cond, timeout=120):
        deadline = time.time() + timeout
        while True:
            for i, e in enumerate(self.events):
                if cond(e):
                    return self.events.pop(i)
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.events.append(json.loads(line))
            if any(cond(e) for e in self.events):
                continue
            left = deadline - time.time()
            assert left > 0, "no event; have %s" % self.events
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                data = os.read(self.p.stdout.fileno(), 65536)
                assert data, "the zygote exited; events %s" % self.events
                self.buf += data

    def replay(self, path, slot=0):
        self.n += 1
        rid = str(self.n)
        out, err = str(self.tmp / ("%s.out" % rid)), str(self.tmp / ("%s.err" % rid))
        open(out, "w").close()
        open(err, "w").close()
        self.p.stdin.write((json.dumps({"id": rid, "slot": slot, "path": path, "stdout": out, "stderr": err,
                                        "run_dir": str(self.tmp)}) + "\n").encode())
        self.p.stdin.flush()
        start = self.wait(lambda e: e["event"] in ("start", "error") and e.get("id") == rid)
        if start["event"] == "error":
            return start, None, None
        exit_ = self.wait(lambda e: e["event"] == "exit" and e["id"] == rid)
        assert exit_["pid"] == start["pid"] == start["pgid"]
        return exit_, open(out).read(), open(err).read()

    def close(self):
        self.p.stdin.close()
        return self.p.wait(timeout=30)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_zygote(tmp_path):
    b = rb.load(example("four_class_targets"))
    segv = str(tmp_path / "segv.bin")
    rb.save(segv, {"input": b.tensors["input"], "target": b.tensors["target"]}, meta={"fault": "segv"},
            provenance=False)
    ok = str(tmp_path / "ok.bin")
    rb.save(ok, {"input": b.tensors["input"][:2], "target": b.tensors["target"][:2]}, meta={"fault": "pass"},
            provenance=False)
    z = Zygote(tmp_path, "--slots", "2", "--entry", "faults:run", "--slot-env",
               json.dumps([{"SLOT_VAR": "a"}, {"SLOT_VAR": "b"}]))
    try:
        assert z.hello["torch"] == torch.__version__ and "error" not in z.hello
        ready = [z.wait(lambda e: e["event"] == "ready" and e["slot"] == s) for s in (0, 1)]
        ev, out, err = z.replay(segv)
        assert ev["signal"] == signal.SIGSEGV and ev["status"] is None, err
        assert "Fatal Python error: Segmentation fault" in err
        ev, out, err = z.replay(ok, slot=1)
        assert ev["status"] == 0 and ev["signal"] == 0, err
        assert out.startswith("reduce_batch: ok faults:run (cpu): float32[] first=")
        ev, out, err = z.replay(ok, slot=9)
        assert ev["event"] == "error" and "slot 9" in ev["error"]
        ev, out, err = z.replay(str(tmp_path / "missing.bin"))
        assert ev["status"] == rb.worker.HARNESS_EXIT and "cannot load the candidate" in err
        children = [r["pid"] for r in ready]
    finally:
        assert z.close() == 0
    for pid in children:
        assert not alive(pid)


@pytest.mark.parametrize("how", ["entry", "step"])
def test_zygote_entry_running_ops_at_import(tmp_path, monkeypatch, how):
    """An --entry or step module that runs a parallel CPU op when imported (a model built, a
    warm-up) leaves the zygote's children able to run theirs. Torch's CPU thread pool (GNU OpenMP)
    is not fork-safe: a child forked after the pool started hangs in its first parallel op.
    Debian's torch 1.13 runs one thread unless told otherwise, PyPI's 2.x one per core; two threads
    here, whatever the machine, so that both torches would hang."""
    (tmp_path / "warm.py").write_text(
        "import torch, torch.nn.functional as F\n"
        "torch.ones(1 << 20).sum()\n\n\n"
        "def step(data):\n"
        "    assert torch.get_num_threads() == 2\n"
        "    return torch.ones(1 << 20).sum() + F.cross_entropy(data['input'], data['target'])\n\n\n"
        "def entry(batch):\n"
        "    return step(batch.tensors)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    b = rb.load(example("four_class_targets"))
    ok = str(tmp_path / "ok.bin")
    rb.save(ok, {"input": b.tensors["input"][:2], "target": b.tensors["target"][:2]}, provenance=False)
    if how == "entry":
        z = Zygote(tmp_path, "--entry", "warm:entry")
    else:
        z = Zygote(tmp_path, "--step", json.dumps({"module": "warm", "qualname": "step",
                                                   "file": str(tmp_path / "warm.py"), "cwd": str(tmp_path)}),
                   "--trusted", cwd=tmp_path)  # the user's recording (reduce says so)
    try:
        assert "entry_error" not in z.hello, z.hello
        ev, out, err = z.replay(ok)  # without the fix: no exit event (Zygote.wait gives up)
        assert ev["status"] == 0 and ev["signal"] == 0, err
        assert out.startswith("reduce_batch: ok "), out
    finally:
        z.close()


def test_zygote_usage_errors(tmp_path):
    z = Zygote(tmp_path, "--slots", "0")
    assert "--slots 0" in z.hello["error"]
    z.close()
    z = Zygote(tmp_path, "--slot-env", "{}")
    assert "--slot-env" in z.hello["error"]
    z.close()


def test_seed_makes_the_step_repeatable(tmp_path, monkeypatch):
    # reduce --seed sets REDUCE_SEED; replay() seeds torch with it before the step, so a step
    # that draws random numbers draws the same ones in every replay.
    mod = tmp_path / "drawstep.py"
    mod.write_text("import torch\n\ndef step(batch):\n    return torch.rand(4)\n")
    path = example("four_class_targets")
    entry = str(mod) + ":step"
    monkeypatch.setenv("REDUCE_SEED", "7")
    a = rb.worker.replay(path, entry=entry)
    b = rb.worker.replay(path, entry=entry)
    assert torch.equal(a, b)
    monkeypatch.setenv("REDUCE_SEED", "8")
    assert not torch.equal(a, rb.worker.replay(path, entry=entry))
    monkeypatch.setenv("REDUCE_SEED", "x")
    with pytest.raises(rb.errors.HarnessError, match="REDUCE_SEED"):
        rb.worker.replay(path, entry=entry)


def test_returned_line(capsys, tmp_path):
    """A replay whose step returned ends its stdout with the returned line (replay.ReturnedLine); one
    that raised, or whose step ended the process halfway (os._exit(0)), does not."""
    b = rb.load(example("four_class_targets"))
    ok = str(tmp_path / "ok.bin")
    rb.save(ok, {"input": b.tensors["input"][:2], "target": b.tensors["target"][:2]}, op="cross_entropy",
            provenance=False)
    capsys.readouterr()
    assert rb.worker.main(["replay", ok]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == rb.worker.RETURNED_LINE
    with pytest.raises(IndexError):
        rb.worker.main(["replay", example("four_class_targets")])
    assert rb.worker.RETURNED_LINE not in capsys.readouterr().out
    cases = {}
    for fault in ("pass", "exit0", "exception"):
        cases[fault] = str(tmp_path / ("%s.bin" % fault))
        rb.save(cases[fault], {"input": b.tensors["input"][:2], "target": b.tensors["target"][:2]},
                meta={"fault": fault}, provenance=False)
    z = Zygote(tmp_path, "--entry", "faults:run")
    try:
        for fault, status, returned in (("pass", 0, True), ("exit0", 0, False), ("exception", 1, False)):
            ev, out, err = z.replay(cases[fault])
            assert ev["status"] == status, err
            assert (rb.worker.RETURNED_LINE in out.splitlines()) == returned, out
    finally:
        assert z.close() == 0


def test_zygote_sweep_never_blocks_on_a_stray(monkeypatch):
    """A stray SIGKILL does not end (uninterruptible sleep) costs one sweep SWEEP_WAIT at most, never
    a blocking wait, and no later sweep waits on it again (simulated: waitpid never reaps it)."""
    z = rb.worker._Zygote("cpu", None, 1, None, -1, -1)
    clock, waits = [0.0], []

    def waitpid(pid, flags):
        assert flags & os.WNOHANG, "a blocking wait on a stray that never dies"
        waits.append(pid)
        return 0, 0

    def sleep(s):
        clock[0] += s

    monkeypatch.setattr(rb.worker, "_children_of", lambda ppid: [4194000])
    monkeypatch.setattr(os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(os, "killpg", lambda pid, sig: None)
    monkeypatch.setattr(os, "waitpid", waitpid)
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", sleep)
    z.sweep()
    assert waits and clock[0] <= rb.worker.SWEEP_WAIT + 0.01, (len(waits), clock[0])
    n = len(waits)
    z.sweep()
    assert len(waits) == n and clock[0] <= rb.worker.SWEEP_WAIT + 0.01, (len(waits), clock[0])


def test_zygote_kills_strays(tmp_path):
    """The zygote is a subreaper: a step's grandchild in a session of its own (setsid), holding the
    child's output, is killed before the child's exit is reported."""
    b = rb.load(example("four_class_targets"))
    path = str(tmp_path / "escape.bin")
    rb.save(path, {"input": b.tensors["input"][:2], "target": b.tensors["target"][:2]}, meta={"fault": "escape"},
            provenance=False)
    z = Zygote(tmp_path, "--entry", "faults:run")
    try:
        ev, out, err = z.replay(path)
        assert ev["status"] == 0, err
        pid = int(out.split("escaped ", 1)[1].split()[0])
        assert not alive(pid), "the grandchild %d survives its replay" % pid
    finally:
        assert z.close() == 0
