"""A step compiled with torch.compile, replayed eager when the batch's meta says replay_compile=eager
(reduce's probe of whether the failure needs the compile: fixtures.View.Eager)."""

import collections
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reduce_batch as rb  # noqa: E402
import reduce_batch.steps  # noqa: E402

B = collections.namedtuple("B", "data state meta")


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch %s has no torch.compile" % torch.__version__)
def test_call_step_eager():
    """replay_compile=eager: the compiled module's frames run eager (nothing compiled), and the
    step compiles when it runs again without it (torch.compiler.set_stance, torch 2.6+). The "eager"
    backend of torch.compile compiles nothing to C++: the test needs no compiler."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(torch.nn.Linear(3, 2), backend="eager")

    def step(batch):
        return compiled(batch["x"])

    rb.steps._call_step(step, B({"x": torch.ones(4, 3)}, None, {"replay_compile": "eager"}))
    assert not counters["stats"].get("unique_graphs"), dict(counters["stats"])
    if hasattr(torch.compiler, "set_stance"):
        rb.steps._call_step(step, B({"x": torch.ones(4, 3)}, None, {}))
        assert counters["stats"].get("unique_graphs") == 1, dict(counters["stats"])


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch %s has no torch.compile" % torch.__version__)
def test_recorder_notes_compile(tmp_path):
    """The recorded meta says "compiled" once torch.compile compiled a frame in the process: "1" for
    a backend other than Inductor (the "eager" backend here: no C++ compiler needed)."""
    from torch._dynamo.utils import counters

    counters.clear()
    rb.save(tmp_path / "eager.bin", {"x": torch.ones(2, 3)})
    assert "compiled" not in rb.load(tmp_path / "eager.bin").meta
    torch.compile(torch.nn.Linear(3, 2), backend="eager")(torch.ones(2, 3))
    rb.save(tmp_path / "compiled.bin", {"x": torch.ones(2, 3)})
    assert rb.load(tmp_path / "compiled.bin").meta["compiled"] == "1"


def test_record_keep_disk(tmp_path):
    """keep="disk": the batch is on disk while the step runs (what a process that aborts leaves,
    with no error), removed when the step passes, and written with the error when it raises."""
    path = tmp_path / "crash.bin"
    batch = {"x": torch.arange(6.0).reshape(3, 2)}
    with rb.record_on_failure(path, batch, keep="disk", sample_ids=["a", "b", "c"]):
        kept = rb.load(path)
        assert kept.error is None and kept.sample_ids == ["a", "b", "c"]
        assert torch.equal(kept.data["x"], batch["x"])
    assert not path.exists()
    with pytest.raises(ValueError, match="boom"), rb.record_on_failure(path, batch, keep="disk"):
        raise ValueError("boom")
    assert "boom" in str(rb.load(path).error)
    with pytest.raises(ValueError, match=r"keep: want None or 'disk'"):
        rb.record_on_failure(path, batch, keep="memory")
