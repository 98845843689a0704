"""reduce_batch.command, the startup hook of `reduce record -- COMMAND` and of its replays, run as reduce runs it:
programs of our own in a fresh interpreter with reduce's sitecustomize first on PYTHONPATH."""

import contextlib
import json
import os
import pkgutil
import subprocess
import sys
import textwrap

import pytest
from conftest import require

HERE = os.path.dirname(os.path.abspath(__file__))

# A training program: a DataLoader over a Dataset (or a random_split Subset of it) whose item BAD has a label past the
# classes; LOOP says how the loop takes its batches.
PROGRAM = """
import sys
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, random_split

BAD, WORKERS, SUBSET, LOOP = {bad}, {workers}, {subset}, {loop!r}


class Items(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        if LOOP == "loader_error" and i == BAD:
            raise KeyError("the loader's own error")
        return torch.full((3,), float(i)), torch.tensor(9 if i == BAD else i % 3)


torch.manual_seed(0)
ds = Items()
if SUBSET:
    ds, _ = random_split(ds, [48, 16], generator=torch.Generator().manual_seed(1))
loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=WORKERS)
w = torch.nn.Linear(3, 3)
opt = torch.optim.SGD(w.parameters(), lr=0.0)
for epoch in range(2):
    if LOOP == "ahead":  # the next batch fetched before the backward; the step sees copies
        it = iter(loader)
        x, y = next(it)
        for nxt in it:
            loss = F.cross_entropy(w(x.clone()), y.clone())
            x, y = nxt
            loss.backward()
            opt.step()
    else:
        for x, y in loader:
            F.cross_entropy(w(x), y).backward()
            opt.step()
print("done")
"""


def hooked(tmp_path, conf, env_name):
    """The environment reduce gives a command: its sitecustomize and the package first on PYTHONPATH."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_bytes(pkgutil.get_data("reduce_batch", "sitecustomize.py"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), HERE]), **{env_name: json.dumps(conf)})
    env.pop("REDUCE_REPLAY", None)
    return env


def record(tmp_path, **kw):
    require("torch", "python3-torch")
    kw = dict({"bad": 37, "workers": 0, "subset": False, "loop": "plain"}, **kw)
    (tmp_path / "train.py").write_text(PROGRAM.format(**kw))
    out = tmp_path / "crash.bin"
    env = hooked(tmp_path, {"out": str(out), "hook_dir": str(tmp_path / "hook")}, "REDUCE_RECORD")
    p = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    return p, out


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("loop", ["plain", "ahead"])
def test_records_the_failing_step_by_dataset_index(tmp_path, workers, loop):
    """The batch whose step raised, named by the batch sampler's indices: with worker processes (which fetch
    ahead), and in a loop that fetches the next batch before its backward and steps on copies (no frame holds
    the loader's tensors: the steps completed say which batch it was)."""
    import reduce_batch

    p, out = record(tmp_path, workers=workers, loop=loop)
    assert p.returncode == 1, p.stderr
    assert "IndexError" in p.stderr and "reduce: recorded the batch whose step raised" in p.stderr, p.stderr
    b = reduce_batch.load(str(out))
    m = reduce_batch.read_manifest(str(out))[0]
    assert "37" in m["sample_ids"], m["sample_ids"]
    assert m["meta"]["sample_ids"] == "dataset index"
    row = m["sample_ids"].index("37")
    assert int(b.data[1][row]) == 9 and float(b.data[0][row][0]) == 37.0  # the ids are the samples' own
    cmd = json.loads(m["meta"]["command"])
    assert cmd["argv"] == ["train.py"] and cmd["cwd"] == str(tmp_path) and cmd["grad"] is True
    assert cmd["loader"].endswith("Items:64") and "train.py" in cmd["entries"]
    assert json.loads(m["meta"]["batch_position"])["epoch"] == 0


def test_subset_names_the_wrapped_index(tmp_path):
    """Through random_split's Subset: the Subset's index is the id, the wrapped dataset's is in batch_position."""
    import reduce_batch

    p, out = record(tmp_path, subset=True)
    assert p.returncode == 1, p.stderr
    m = reduce_batch.read_manifest(str(out))[0]
    wrapped = json.loads(m["meta"]["batch_position"])["wrapped"]
    assert 37 in wrapped, wrapped
    sub = json.loads(m["meta"]["command"])["loader"]
    assert sub.endswith("Subset:48"), sub


def test_loader_error_records_nothing(tmp_path):
    """An error the DataLoader raised making a batch is no step's: nothing is recorded, and it is said."""
    p, out = record(tmp_path, loop="loader_error")
    assert p.returncode == 1 and "KeyError" in p.stderr, p.stderr
    assert "raised by the DataLoader" in p.stderr
    assert not out.exists()


def test_no_crash_writes_nothing(tmp_path):
    p, out = record(tmp_path, bad=1000)
    assert p.returncode == 0 and "done" in p.stdout, p.stderr
    assert not out.exists()


def test_chains_the_sitecustomize_it_shadows(tmp_path):
    """The sitecustomize that was first before reduce's (Debian's, a virtual environment's) still runs, once."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = os.environ.get('CHAINED', '') + 'x'\n")
    env = hooked(tmp_path, {"out": str(tmp_path / "c.bin")}, "REDUCE_RECORD")
    env["PYTHONPATH"] += os.pathsep + str(other)
    p = subprocess.run([sys.executable, "-c", "import os, sitecustomize; print(os.environ['CHAINED'], "
                        "sitecustomize.__file__)"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    chained, first = p.stdout.split()
    assert chained == "x" and first == str(tmp_path / "hook" / "sitecustomize.py")


@pytest.mark.parametrize("loop", ["plain", "ahead"])
def test_handover_replay(tmp_path, loop):
    """A replay (cold): the candidate replaces the recorded loader's first batch; its step completed, the process
    exits 0 at once, saying so; a failing candidate fails as the program prints it; the run's outputs land in a
    scratch directory, not in the recorded one."""
    import reduce_batch
    from reduce_batch import command

    p, out = record(tmp_path, loop=loop)
    assert p.returncode == 1, p.stderr
    cmd = json.loads(reduce_batch.read_manifest(str(out))[0]["meta"]["command"])
    b = reduce_batch.load(str(out))
    row = list(b.manifest["sample_ids"]).index("37")
    for keep, want in ((row, 1), ((row + 1) % 4, 0)):  # the recorded batch: 4 samples
        cand = tmp_path / f"cand{keep}.bin"
        reduce_batch.save(str(cand), (b.data[0][keep:keep + 1], b.data[1][keep:keep + 1]))
        scratch = tmp_path / f"run{keep}"
        scratch.mkdir()
        env = hooked(tmp_path, {"command": cmd, "batch": str(cand), "scratch": str(scratch)}, "REDUCE_HANDOVER")
        r = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == want, r.stderr
        assert (command.PASSED in r.stderr) == (want == 0), r.stderr
        assert "done" not in r.stdout  # it ended at the candidate's step, not the program's end
        here = scratch / "root" / os.path.relpath(os.path.realpath(tmp_path), os.sep)
        assert (here / "train.py").is_symlink() and (here / ".." / tmp_path.name).is_dir()
        assert sorted(os.listdir(here)) == ["hook", "train.py"]  # as it was: no crash.bin


def test_startup_imports_no_torch():
    """Every Python process of the command runs the hook: it costs no torch import."""
    p = subprocess.run([sys.executable, "-c", "import sys, reduce_batch.command as c; c.install(); "
                        "print('torch' in sys.modules)"], env=dict(os.environ, PYTHONPATH=HERE,
                       REDUCE_RECORD=json.dumps({"out": "x.bin"})), capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "False", p.stderr


def test_sitecustomize_chains_to_startup():
    """The package's sitecustomize.py, which reduce (replay.HookDir) and the collector (fixture_run) write: it runs
    the command module's startup; Go's copy is the embedded file itself (TestSitecustomizeAgrees)."""
    text = pkgutil.get_data("reduce_batch", "sitecustomize.py").decode()
    compile(text, "sitecustomize.py", "exec")
    assert text.rstrip().endswith("_reduce_command.startup(__file__)")


def test_step_module_reads_the_recorded_argv(tmp_path):
    """A step whose module parses its command line when imported (argparse at the top level, as scripts do) is
    imported with the recorded sys.argv (meta "argv"), not the replay's."""
    require("torch", "python3-torch")
    (tmp_path / "mystep.py").write_text(textwrap.dedent("""
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--classes", type=int, required=True)
        args = p.parse_args()

        def step(batch):
            return batch[0] * args.classes
        """))
    (tmp_path / "main.py").write_text("import torch, reduce_batch, mystep\n"
                                      "reduce_batch.save('b.bin', (torch.ones(2),), step=mystep.step)\n")
    env = dict(os.environ, PYTHONPATH=HERE)
    env.pop("REDUCE_ARGV", None)
    subprocess.run([sys.executable, "main.py", "--classes", "3"], cwd=tmp_path, env=env, check=True, timeout=120)
    code = ("import sys; from reduce_batch import steps, trust; steps.step_check = trust.Trust('.', True, '', 'test')\n"
            "b, fn = steps.load_candidate('b.bin'); print(fn(b)[0].tolist())")
    p = subprocess.run([sys.executable, "-c", code, "--other"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "3.0"  # the step ran, with --classes 3


def test_record_on_failure_names_dataset_indices(tmp_path):
    """record_on_failure (and the hooks, which record through it) given the batch a DataLoader yielded, with no
    sample_ids: the batch sampler's indices, through a Subset the wrapped dataset's in batch_position; ids given win."""
    torch = require("torch", "python3-torch")
    import reduce_batch
    from torch.utils.data import DataLoader, TensorDataset, random_split

    reduce_batch.record.Yielded.watch()  # as importing reduce_batch after torch does
    ds = TensorDataset(torch.arange(20.0).view(20, 1), torch.arange(20))
    sub, _ = random_split(ds, [15, 5], generator=torch.Generator().manual_seed(0))
    for given in (None, ["a", "b", "c", "d"]):
        path = tmp_path / f"{given is None}.bin"
        for i, (x, y) in enumerate(DataLoader(sub, batch_size=4, shuffle=True, num_workers=2 if given else 0)):
            with contextlib.suppress(ValueError), reduce_batch.record_on_failure(str(path), (x, y), sample_ids=given):
                if i == 2:  # every step in the block, as a loop has it
                    raise ValueError("the step")
            if i == 2:
                break
        m = reduce_batch.read_manifest(str(path))[0]
        if given is not None:
            assert m["sample_ids"] == given and "batch_position" not in m["meta"]
            continue
        assert [sub.indices[int(i)] for i in m["sample_ids"]] == y.tolist()  # the Subset's indices
        where = json.loads(m["meta"]["batch_position"])
        assert where == {"position": 2, "wrapped": y.tolist()} and m["meta"]["sample_ids"] == "dataset index"


WRITER = """
import os
import torch
from torch.utils.data import DataLoader, TensorDataset

with open("log.txt", "w") as f:  # a log, truncated at the start
    f.write("this run")
os.makedirs("ckpt", exist_ok=True)
with open(os.path.join("ckpt", "last.txt"), "w") as f:
    f.write("this run")
if os.environ.get("OTHER_LOADER"):
    loader = DataLoader(TensorDataset(torch.zeros(6, 1)), batch_size=2)  # another dataset than the recording's
else:
    loader = DataLoader(TensorDataset(torch.arange(8.0).view(8, 1)), batch_size=4)
w = torch.nn.Linear(1, 1)
for (x,) in loader:
    w(x).sum().backward()
    if x.max() > 6:
        raise ValueError("the step")
"""


def test_replay_writes_into_its_scratch_directory(tmp_path):
    """A replay of a recorded command writes what it writes (a log, a checkpoint in a folder it had) into its
    scratch directory, never through the links into the recorded directory; a replay whose program no longer gives
    the recorded loader's batch is the harness's failure (86), naming it."""
    import reduce_batch

    require("torch", "python3-torch")
    (tmp_path / "train.py").write_text(WRITER)
    (tmp_path / "log.txt").write_text("the user's log")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "last.txt").write_text("the user's checkpoint")
    out = tmp_path / "crash.bin"
    env = hooked(tmp_path, {"out": str(out), "hook_dir": str(tmp_path / "hook")}, "REDUCE_RECORD")
    p = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 1 and out.exists(), p.stderr
    (tmp_path / "log.txt").write_text("the user's log")  # the recording run wrote them: the user's again
    (tmp_path / "ckpt" / "last.txt").write_text("the user's checkpoint")
    cmd = json.loads(reduce_batch.read_manifest(str(out))[0]["meta"]["command"])
    for other, want in (("", 1), ("1", 86)):
        scratch = tmp_path / f"run{other}"
        scratch.mkdir()
        env = hooked(tmp_path, {"command": cmd, "batch": str(out), "scratch": str(scratch)}, "REDUCE_HANDOVER")
        env["OTHER_LOADER"] = other
        r = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300, check=False)
        assert r.returncode == want, r.stderr
        assert (tmp_path / "log.txt").read_text() == "the user's log"
        assert (tmp_path / "ckpt" / "last.txt").read_text() == "the user's checkpoint"
        here = scratch / "root" / os.path.relpath(os.path.realpath(tmp_path), os.sep)
        assert (here / "log.txt").read_text() == "this run" and not (here / "log.txt").is_symlink()
        assert (here / "ckpt" / "last.txt").read_text() == "this run"
    assert "harness: the program ended before torch.utils.data.dataset.TensorDataset:8 gave its first batch" in r.stderr
