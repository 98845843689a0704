"""The batch as the loader yields it (format version 2): structure, per-sample values, the
recorded step, the state at the crash, padded tensors; and that the recorder never loses a
crash. Runs on every torch make test runs it with."""

import collections
import os
import random
import subprocess
import sys
import textwrap

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.errors  # noqa: E402
import reduce_batch.steps  # noqa: E402
from check_structure_select import Encoding  # noqa: E402  (a mapping that is not a dict)

Sample = collections.namedtuple("Sample", "image label")


def _header_version(path):
    with open(path, "rb") as f:
        return int.from_bytes(f.read(12)[8:12], "little")


def test_flat_dict_is_written_as_version_1(tmp_path):
    """A dict of tensors and nothing else: the bytes version 1 wrote, so older readers read it."""
    p = tmp_path / "a.bin"
    rb.save(p, {"input": torch.ones(2, 3), "target": torch.tensor([0, 1])}, provenance=False)
    assert _header_version(p) == 1
    assert "structure" not in rb.load(p).manifest
    rb.save(p, (torch.ones(2, 3), torch.tensor([0, 1])), provenance=False)
    assert _header_version(p) == 2


@pytest.mark.parametrize("make", [
    lambda x, y: (x, y),
    lambda x, y: [x, y],
    lambda x, y: {"batch": {"x": x, "y": [y, "shared"]}, "step": 3},
    lambda x, y: Sample(x, y),
    lambda x, y: Encoding({"input_ids": x, "labels": y}),
    lambda x, y: {"ids": ["a", "b", "c"], "x": x, 7: y, "lr": 0.5, "none": None},
    lambda x, y: x,
], ids=["tuple", "list", "nested", "namedtuple", "mapping", "values", "tensor"])
def test_structures_round_trip(tmp_path, make):
    x = torch.arange(12.0).view(3, 4).t().contiguous().t()  # a transposed layout survives too
    y = torch.tensor([1, 0, 2])
    batch = make(x, y)
    p = tmp_path / "b.bin"
    rb.save(p, batch, provenance=False)
    got = rb.load(p, types=[Sample, Encoding]).data  # the classes trusted: rebuilt with them
    assert type(got) is type(batch)
    _assert_same(got, batch)


def _assert_same(a, b):
    if isinstance(b, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        assert a.storage_offset() == b.storage_offset() and torch.equal(a, b)
    elif isinstance(b, collections.abc.Mapping):
        assert list(a.keys()) == list(b.keys())
        for k in b:
            _assert_same(a[k], b[k])
    elif isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for u, v in zip(a, b):
            _assert_same(u, v)
    else:
        assert a == b and type(a) is type(b)


def test_per_sample_values_and_ids(tmp_path):
    """A list with one Python value per sample follows its samples; one under "ids" gives the
    sample ids; a list of another length is shared."""
    p = tmp_path / "c.bin"
    rb.save(p, {"ids": ["s0", "s1", "s2"], "text": ("a", "b", "c"), "x": torch.zeros(3, 2), "dims": [5, 6]},
            provenance=False)
    b = rb.load(p)
    assert b.sample_ids == ["s0", "s1", "s2"]
    s = b.manifest["structure"]
    kinds = {k: n["kind"] for k, n in zip(s["keys"], s["items"])}
    assert kinds == {"ids": "samples", "text": "samples", "x": "tensor", "dims": "list"}
    assert b.data["text"] == ("a", "b", "c") and b.data["dims"] == [5, 6]


def test_record_on_failure_never_loses_the_crash(tmp_path, capfd):
    """What real loaders yield: a tuple, strings, a Python int, a nested dict, a complex tensor,
    an object. The file is written; what cannot be encoded is named in it and on stderr."""
    p = tmp_path / "crash.bin"
    batch = ({"input": torch.ones(4, 2), "meta": {"len": torch.tensor([1, 2, 3, 4]), "lang": "en"}},
             ["w", "x", "y", "z"], 3, torch.zeros(4, dtype=torch.complex64), object())
    with pytest.raises(RuntimeError):
        with rb.record_on_failure(p, batch, batch_dims={"0.meta.len": 0}):
            raise RuntimeError("boom")
    b = rb.load(p)
    assert b.error["text"] == "RuntimeError: boom"
    assert isinstance(b.data, tuple) and b.data[1] == ["w", "x", "y", "z"] and b.data[2] == 3
    assert b.data[0]["meta"]["lang"] == "en" and b.data[3] is None and b.data[4] is None
    assert [s[0] for s in b.skipped] == ["3", "4"]
    err = capfd.readouterr().err
    assert "skipped 3" in err and "skipped 4" in err and "saved the failing batch" in err


def test_record_on_failure_disagreeing_tensor_is_shared(tmp_path):
    """A tensor whose first dim is not the batch's: recorded as shared, not a lost crash."""
    p = tmp_path / "crash.bin"
    with pytest.raises(ValueError):
        with rb.record_on_failure(p, {"x": torch.ones(4, 2), "table": torch.ones(10, 2)}):
            raise ValueError("bad")
    b = rb.load(p)
    assert b.samples == 4 and b.batch_dims == {"x": 0, "table": None}
    with pytest.raises(ValueError, match="batch_dims"):  # save() itself says so
        rb.save(tmp_path / "d.bin", {"x": torch.ones(4, 2), "table": torch.ones(10, 2)})


def test_padded_tensors(tmp_path):
    p = tmp_path / "p.bin"
    tokens = torch.tensor([[1, 2, 0], [3, 4, 5]])
    rb.save(p, {"tokens": tokens, "mask": tokens != 0}, padded={"tokens": 1, "mask": 1}, lengths=torch.tensor([2, 3]),
            provenance=False)
    b = rb.load(p)
    assert b.pads == {"tokens": {"dim": 1, "lengths": [2, 3]}, "mask": {"dim": 1, "lengths": [2, 3]}}
    for bad, match in [({"tokens": 0}, "batch axis"), ({"nope": 1}, "no tensor named")]:
        with pytest.raises(ValueError, match=match):
            rb.save(p, {"tokens": tokens}, padded=bad, lengths=[2, 3])
    with pytest.raises(ValueError, match="lengths="):
        rb.save(p, {"tokens": tokens}, padded={"tokens": 1})


def step_of_the_test(batch, state=None):
    return batch


def test_step_is_recorded_by_name(tmp_path):
    p = tmp_path / "s.bin"
    rb.save(p, {"x": torch.ones(2)}, step=step_of_the_test, provenance=False)
    step = rb.load(p).step
    assert step["module"] == __name__ and step["qualname"] == "step_of_the_test"
    assert step["file"] == os.path.abspath(__file__) and step["cwd"] == os.getcwd()
    assert rb.steps.resolve_step(step) is step_of_the_test


def test_step_in_the_script_replays_without_running_it(tmp_path):
    """A step defined in the script that was run (module __main__) is imported from its file
    under another name, so the script's `if __name__ == "__main__":` block does not run again;
    its folder (here not the working directory) is on sys.path for its own imports."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "helper.py").write_text("LIMIT = 2\n")
    (proj / "train.py").write_text(textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, %r)
        import reduce_batch, helper

        def step(batch):
            if batch["x"].max() > helper.LIMIT:
                raise IndexError("x above %%d" %% helper.LIMIT)

        if __name__ == "__main__":
            print("TRAINING")
            batch = {"x": torch.tensor([1, 5]), "ids": ["a", "b"]}
            with reduce_batch.record_on_failure("crash.bin", batch, step=step):
                step(batch)
    """ % HERE))
    run = subprocess.run([sys.executable, "train.py"], cwd=str(proj), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert run.returncode == 1 and b"IndexError: x above 2" in run.stderr
    replay = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r); import reduce_batch as rb, reduce_batch.steps; "
                             "rb.steps.replay(%r)" % (HERE, str(proj / "crash.bin"))],
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert replay.returncode == 1, replay.stderr
    assert b"IndexError: x above 2" in replay.stderr and b"TRAINING" not in replay.stdout


def test_missing_step_names_the_module_and_the_path(tmp_path):
    p = tmp_path / "s.bin"
    rb.save(p, {"x": torch.ones(2)}, step="no_such_module_xyz:step", provenance=False)
    with pytest.raises(rb.errors.HarnessError, match=r"no_such_module_xyz.*sys.path tried"):
        rb.steps.replay(p)


def test_state_restores_weights_optimizer_and_rng(tmp_path):
    """state=: the model's and the optimizer's state_dicts as data (no pickle), and the random
    generators, so that the replay starts from the state at the crash."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(5, 3)).pow(2).sum().backward()
        opt.step()
    random.seed(7)
    p = tmp_path / "st.bin"
    rb.save(p, [torch.ones(2, 3)], state={"model": model, "optimizer": opt}, provenance=False)
    want_torch, want_random = torch.rand(3), random.random()

    b = rb.load(p)
    assert set(b.state) == {"model", "optimizer", "rng"} and set(b.tensors) == {"0"}
    m2 = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    o2 = torch.optim.Adam(m2.parameters(), lr=0.5)
    b.state.restore(model=m2, optimizer=o2)
    for k, v in model.state_dict().items():
        assert torch.equal(m2.state_dict()[k], v), k
    assert o2.param_groups[0]["lr"] == 0.01 and o2.param_groups[0]["betas"] == (0.9, 0.999)
    assert torch.equal(o2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    torch.manual_seed(123)
    random.seed(123)
    rb.steps.restore_rng(b.state)
    assert torch.equal(torch.rand(3), want_torch) and random.random() == want_random
    # State tensors are stored compressed when zstandard is there.
    state_entries = [e for e in b.manifest["tensors"] if e["name"].startswith("state.")]
    assert state_entries and all(e["batch_dim"] is None for e in state_entries)


def test_ids_of_a_default_collated_tuple(tmp_path):
    """(images, labels, ids) as default_collate makes it: the distinct strings are the ids."""
    p = tmp_path / "t.bin"
    rb.save(p, [torch.zeros(3, 2), torch.tensor([1, 2, 3]), ("a.png", "b.png", "c.png")], provenance=False)
    assert rb.load(p).sample_ids == ["a.png", "b.png", "c.png"]
    rb.save(p, [torch.zeros(3, 2), ("x", "x", "y")], provenance=False)  # not distinct: not ids
    assert rb.load(p).sample_ids is None


def test_a_replay_never_records(tmp_path, monkeypatch):
    """Inside reduce's replays (REDUCE_REPLAY set) record_on_failure writes nothing: a script
    that trains when its step is imported cannot write over the batch being reduced."""
    p = tmp_path / "crash.bin"
    monkeypatch.setenv("REDUCE_REPLAY", "1")
    with pytest.raises(IndexError):
        with rb.record_on_failure(p, {"x": torch.ones(2)}) as rec:
            raise IndexError("again")
    assert not p.exists() and not rec.saved


def test_unguarded_script_is_named(tmp_path):
    """A script that trains at import: the recorder warns, reduce's replay does not overwrite
    the crash file, and the import error says to add the guard."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "noguard.py").write_text(textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, %r)
        import reduce_batch

        def step(batch):
            raise IndexError("bad sample")

        batch = {"x": torch.tensor([1, 5])}
        with reduce_batch.record_on_failure("crash.bin", batch, step=step):
            step(batch)
    """ % HERE))
    run = subprocess.run([sys.executable, "noguard.py"], cwd=str(proj), stderr=subprocess.PIPE)
    assert run.returncode == 1
    assert b"runs code when it is imported (line 10)" in run.stderr
    before = (proj / "crash.bin").read_bytes()
    env = dict(os.environ, REDUCE_REPLAY="1")
    replay = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r); import reduce_batch as rb, reduce_batch.steps; "
                             "rb.steps.replay(%r)" % (HERE, str(proj / "crash.bin"))],
                            cwd=str(tmp_path), stderr=subprocess.PIPE, env=env)
    assert replay.returncode != 0
    assert b"put it under `if __name__ == \"__main__\":`" in replay.stderr, replay.stderr
    assert (proj / "crash.bin").read_bytes() == before


def test_bad_state_keeps_the_step(tmp_path, capfd):
    p = tmp_path / "crash.bin"
    with pytest.raises(IndexError):
        with rb.record_on_failure(p, {"x": torch.ones(2)}, step=step_of_the_test, state=torch.nn.Linear(1, 1)):
            raise IndexError("x")
    b = rb.load(p)
    assert b.step["qualname"] == "step_of_the_test" and b.state is None
    assert "state: want a dict" in capfd.readouterr().err


def test_moved_script_step(tmp_path, monkeypatch):
    """A step in a script, recorded in one checkout, found by name in another (CI)."""
    other = tmp_path / "checkout"
    other.mkdir()
    (other / "train.py").write_text("def step(batch):\n    return 42\n")
    monkeypatch.chdir(other)
    fn = rb.steps.resolve_step({"module": "__main__", "qualname": "step", "file": "/gone/checkout/train.py"})
    assert fn({}) == 42
