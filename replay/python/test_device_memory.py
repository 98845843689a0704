"""--device-memory: reduce_collect.py's limit_device_memory, and reduce_replay.py's replay and zygote flags."""

import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.memory  # noqa: E402
from conftest import single_thread_after_fork, without_source_lines  # noqa: E402

MODULE = os.path.join(HERE, "testdata", "run_worker.py")  # as reduce's launcher runs it
MiB = 1 << 20


def in_child(fn):
    """fn() in a forked child (the limit must not stay on the test process): its result or
    "Type: message" of what it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            single_thread_after_fork(torch)
            try:
                out = fn()
            except Exception as e:
                out = "%s: %s" % (type(e).__name__, e)
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data.decode())


def test_cpu_limit_counts_what_the_op_allocates():
    def run(mib):
        lift = rb.memory.limit_device_memory("cpu", 40 * MiB)
        try:
            torch.empty(mib * MiB // 4, dtype=torch.float32).fill_(1)
            return "ok"
        finally:
            lift()

    assert in_child(lambda: run(39)) == "ok"
    got = in_child(lambda: run(41))
    assert got.startswith("RuntimeError: [enforce fail at alloc_cpu.cpp")
    assert "DefaultCPUAllocator: can't allocate memory: you tried to allocate %d bytes" % (41 * MiB) in got

    def lifted():
        rb.memory.limit_device_memory("cpu", 8 * MiB)()
        torch.empty(64 * MiB // 4).fill_(1)  # the limit is gone again
        return "ok"

    assert in_child(lifted) == "ok"


def test_cuda_limit_is_a_memory_fraction(monkeypatch):
    calls = []

    class Props:
        total_memory = 80 * 1024 * MiB

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props())
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: 2 * MiB)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, i: calls.append((f, i)))
    lift = rb.memory.limit_device_memory("cuda", 94 * MiB)
    assert calls == [((2 + 94) * MiB / float(Props.total_memory), 0)]
    lift()
    assert calls[-1] == (1.0, 0)
    rb.memory.limit_device_memory("cuda:0", 200 * 1024 * MiB)
    assert calls[-1] == (1.0, 0)  # more than the device: no limit


def test_replay_flag(tmp_path):
    path = str(tmp_path / "e.bin")
    rb.save(path, {"input": torch.zeros(48, 64, dtype=torch.int64), "weight": torch.zeros(100, 4096)},
            op="embedding", batch_dims={"weight": None}, provenance=False)
    limit = str(47 * MiB + MiB // 2)  # 48 MiB of output do not fit, 47 would
    p = subprocess.run([sys.executable, MODULE, "replay", path, "--device-memory", limit],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 1
    assert without_source_lines(p.stderr.strip().splitlines()[-1]) == (
        "RuntimeError: [enforce fail at alloc_cpu.cpp] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate %d bytes. Error code 12 (Cannot allocate memory)" % (48 * MiB))
    p = subprocess.run([sys.executable, MODULE, "replay", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 0 and "reduce_batch: ok embedding (cpu): float32[48, 64, 4096]" in p.stdout
