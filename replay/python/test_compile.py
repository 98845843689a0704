"""A step compiled with torch.compile, replayed eager when the batch's meta says replay_compile=eager
(reduce's probe of whether the failure needs the compile: fixtures.View.Eager)."""

import collections
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reduce_collect as rc  # noqa: E402

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

    rc._call_step(step, B({"x": torch.ones(4, 3)}, None, {"replay_compile": "eager"}))
    assert not counters["stats"].get("unique_graphs"), dict(counters["stats"])
    if hasattr(torch.compiler, "set_stance"):
        rc._call_step(step, B({"x": torch.ones(4, 3)}, None, {}))
        assert counters["stats"].get("unique_graphs") == 1, dict(counters["stats"])
