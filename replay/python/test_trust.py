"""A batch file is data: load() imports and calls nothing a file names, and reduce's worker
imports a recorded step (or the class a step of reduce_hooks rebuilds) only when reduce found the
file the user's (--trusted), never a function of reduce's own: a recording, not a place. Each
hostile file here, read as load() read it before, runs a command that creates a marker file. Runs
on every torch make test runs it with."""

import collections
import collections.abc
import json
import os
import subprocess
import sys
import re
import textwrap

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.errors  # noqa: E402
import reduce_batch.hooks  # noqa: E402
import reduce_batch.plugin  # noqa: E402
import reduce_batch.steps  # noqa: E402
import reduce_batch.trust  # noqa: E402
import reduce_batch.worker  # noqa: E402

MODULE = os.path.join(HERE, "testdata", "run_worker.py")  # as reduce's launcher runs it
ERROR = "IndexError: Target 4 is out of bounds."


def _named(cls, module, qualname):
    cls.__module__, cls.__qualname__ = module, qualname
    return cls


class _Mapping(collections.abc.Mapping):
    def __init__(self, d):
        self.d = d

    def __getitem__(self, k):
        return self.d[k]

    def __iter__(self):
        return iter(self.d)

    def __len__(self):
        return len(self.d)


def _hostile(tmp_path):
    """A batch whose named tuple says os:system and whose mapping says subprocess:check_call: the
    old loader called os.system("touch MARKER") and subprocess.check_call({"touch": 0, MARKER2: 0})
    (a dict's keys are its argv)."""
    marks = [str(tmp_path / "marker-namedtuple"), str(tmp_path / "marker-mapping")]
    System = _named(collections.namedtuple("system", ["command"]), "os", "system")
    CheckCall = _named(type("CheckCall", (_Mapping,), {}), "subprocess", "check_call")
    batch = {"input": torch.randn(3, 4), "target": torch.tensor([0, 1, 4]), "p": System("touch " + marks[0]),
             "m": CheckCall({"touch": 0, marks[1]: 0})}
    path = str(tmp_path / "hostile.bin")
    rb.save(path, batch, op="cross_entropy", error=ERROR, provenance=False)
    return path, marks


def test_load_runs_nothing_a_file_names(tmp_path):
    path, marks = _hostile(tmp_path)
    b = rb.load(path)
    assert not any(os.path.exists(m) for m in marks)
    # A named tuple of the recorded name and fields, made here; a mapping, a dict.
    assert type(b.data["p"]).__name__ == "system" and b.data["p"]._fields == ("command",)
    assert b.data["p"].command == "touch " + marks[0]
    assert type(b.data["m"]) is dict and list(b.data["m"]) == ["touch", marks[1]]
    assert b.types == {"p": "os:system", "m": "subprocess:check_call"}
    # The same recorded type is one class, load after load.
    assert type(rb.load(path).data["p"]) is type(b.data["p"])
    # The worker's loader too (a candidate of an op's batch: nothing of the step imports them).
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        rb.worker.main(["replay", path])
    assert not any(os.path.exists(m) for m in marks)


def test_load_rebuilds_the_types_the_caller_trusts(tmp_path):
    Pair = collections.namedtuple("Pair", "x y")
    Enc = type("Enc", (_Mapping,), {"__module__": __name__})
    batch = {"pair": Pair(torch.ones(2), torch.zeros(2)), "enc": Enc({"ids": torch.arange(2)})}
    path = tmp_path / "b.bin"
    rb.save(path, batch, provenance=False)
    for types in ([Pair, Enc], {rb.type_path(Pair): Pair, rb.type_path(Enc): Enc}):
        got = rb.load(path, types=types).data
        assert type(got["pair"]) is Pair and type(got["enc"]) is Enc
    got = rb.load(path, types=Pair).data
    assert type(got["pair"]) is Pair and type(got["enc"]) is dict
    with pytest.raises(TypeError, match="types"):
        rb.load(path, types={"x:Y": "not a class"})


@pytest.mark.parametrize("qualname,name", [("Outer.Batch", "Batch"), ("class", "_class"), ("9lives", "_9lives"),
                                           ("weird-name", "weird_name")])
def test_a_made_named_tuple_has_an_identifier_for_a_name(tmp_path, qualname, name):
    Rec = _named(collections.namedtuple("Rec", ["a", "b"]), "pkg.mod", qualname)
    path = tmp_path / "n.bin"
    rb.save(path, {"x": torch.ones(2), "r": Rec(1, 2)}, provenance=False)
    r = rb.load(path).data["r"]
    assert type(r).__name__ == name and r == (1, 2) and r.a == 1


def _write(path, text):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w") as f:
        f.write(textwrap.dedent(text))


def test_trust_is_a_recording_not_a_place(tmp_path):
    """What the check (rb.trust.Trust) lets through: every step of a file that is the user's, wherever it
    lies, and none of one that is not, its own tree's included; never a function of reduce's own
    (a file naming __main__:save with a file reduce_batch.py had the worker call the repository's
    vendored reduce_batch.save with the file's path and data), whatever the file's trust. A step's
    file that is a FIFO is never opened (it would block)."""
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    _write(repo / "mine.py", "def step(b):\n    return b\n")
    _write(outside / "theirs.py", "def step(b):\n    return b\n")
    _write(repo / "helpers.py", open(rb.__file__).read())  # the recorder vendored under another name
    _write(repo / "regress" / "conftest.py", open(rb.plugin.__file__).read())  # the plugin, as a conftest.py
    steps = [({"module": "mine", "qualname": "step"}, "mine:step"),
             ({"module": "theirs", "qualname": "step"}, "theirs:step"),
             ({"module": "__main__", "qualname": "step", "file": str(repo / "mine.py")}, str(repo / "mine.py") + ":step"),
             ({"module": "subprocess", "qualname": "call"}, "subprocess:call")]
    own = [({"module": "reduce_batch", "qualname": "save"}, "its module reduce_batch is reduce's own"),
           ({"module": "vendor.reduce_batch", "qualname": "save"}, "its module vendor.reduce_batch is reduce's own"),
           ({"module": "reduce_hooks", "qualname": "record_trainer"}, "its module reduce_hooks is reduce's own"),
           ({"module": "__main__", "qualname": "save", "file": "/home/someone/proj/reduce_batch.py"},
            "its file reduce_batch.py is reduce's own"),
           ({"module": "helpers", "qualname": "save", "file": str(repo / "helpers.py")}, "is a copy of one of reduce's"),
           ({"module": "conftest", "qualname": "run_in_child", "file": str(repo / "regress" / "conftest.py")},
            "is a copy of one of reduce's")]
    mine, theirs = rb.trust.Trust(str(repo), True), rb.trust.Trust(str(repo), False, "not in your trust store")
    for step, target in steps:
        mine(step, target, "step")  # nothing raised
        with pytest.raises(rb.errors.HarnessError, match="is not run: not in your trust store"):
            theirs(step, target, "step")
    mine({"module": "reduce_hooks", "qualname": "lightning_step"}, "reduce_hooks:lightning_step", "step")
    with pytest.raises(rb.errors.HarnessError, match="is not run: not in your trust store"):
        theirs({"module": "reduce_hooks", "qualname": "lightning_step"}, "reduce_hooks:lightning_step", "step")
    for step, why in own:  # the user's file or not (theirs: refused first as not theirs, nothing looked at)
        target = "%s:%s" % (step.get("file") or step["module"], step["qualname"])
        with pytest.raises(rb.errors.HarnessError, match="reduce's own functions are never a step") as e:
            mine(step, target, "step")
        assert why in str(e.value), e.value
        with pytest.raises(rb.errors.HarnessError, match="is not run: not in your trust store"):
            theirs(step, target, "step")
    assert rb.trust.reduce_own({"module": "mine", "qualname": "step", "file": str(repo / "mine.py")}) is None
    for name in sorted(os.listdir(os.path.join(HERE, "reduce_batch"))):  # the marks follow the files
        if not name.endswith(".py"):
            continue
        copy = repo / ("copy_of_" + name.replace("__", "") )
        copy.write_bytes(open(os.path.join(HERE, "reduce_batch", name), "rb").read())
        assert rb.trust.reduce_own({"module": copy.stem, "qualname": "save", "file": str(copy)}), name
    fifo = tmp_path / "fifo.py"
    os.mkfifo(str(fifo))
    assert rb.trust.reduce_own({"module": "__main__", "qualname": "step", "file": str(fifo)}) is None  # returns, unblocked
    assert rb.trust.printable("a\x1b]0;T\x07\u202e\tb") == "a\\x1b]0;T\\x07\\u202e\\tb"


def test_resolve_step_refuses_before_it_moves(tmp_path):
    """A step of a file that is not the user's is refused before its folders go on sys.path or
    its working directory is made current: the collector runs in the user's test session."""
    elsewhere = tmp_path / "elsewhere"
    _write(elsewhere / "theirs.py", "def step(b):\n    return b\n")
    old, path, cwd = rb.steps.step_check, list(sys.path), os.getcwd()
    rb.steps.step_check = rb.trust.Trust(str(tmp_path / "repo"), False, "not yours")
    try:
        with pytest.raises(rb.errors.HarnessError, match="is not run: not yours"):
            rb.steps.resolve_step({"module": "theirs", "qualname": "step", "file": str(elsewhere / "theirs.py"),
                             "cwd": str(elsewhere)}, chdir=True)
        assert sys.path == path and os.getcwd() == cwd and "theirs" not in sys.modules
    finally:
        rb.steps.step_check = old
        sys.path[:] = path
        os.chdir(cwd)


def _run(args, cwd, env=None):
    p = subprocess.run([sys.executable, MODULE] + args, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300, env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_worker_runs_a_step_only_when_told_the_file_is_mine(tmp_path):
    """The worker's replay, entry and zygote commands: without --trusted (reduce gives it for a file
    that is the user's), a recorded step is a harness error naming it, and runs nothing, the step in
    the tree it runs in too (the in-tree rule trusted a place); with it, the step replays, wherever
    its file lies."""
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    marker = tmp_path / "marker"
    step_source = """\
        import torch.nn.functional as F


        def step(batch):
            open(%r, "w").close()
            return F.cross_entropy(batch["input"], batch["target"])
        """ % str(marker)
    _write(outside / "theirs.py", step_source)
    _write(repo / "mine.py", step_source)
    paths = {}
    for folder, name in ((outside, "theirs"), (repo, "mine")):
        sys.path.insert(0, str(folder))
        try:
            module = __import__(name)
        finally:
            del sys.path[0]
            sys.modules.pop(name, None)
        x, y = torch.randn(3, 4), torch.tensor([0, 1, 4])
        paths[name] = str(repo / (name + ".bin"))
        rb.save(paths[name], {"input": x, "target": y}, step=module.step, error=ERROR, provenance=False)
    call = str(repo / "call.bin")
    rb.save(call, {"touch": x, str(marker): y}, step="subprocess:call", error=ERROR, provenance=False)
    for path in (paths["theirs"], paths["mine"]):
        step = json.dumps(rb.load(path).step)
        for args in (["replay", path], ["replay", path, "--step", step], ["entry", "--step", step], ["replay", call]):
            code, out, err = _run(args, repo)
            assert code == rb.worker.HARNESS_EXIT, (args, err)
            assert "is not run: reduce did not find the file yours" in err, err
        z = subprocess.run([sys.executable, MODULE, "zygote", "--step", step], cwd=str(repo), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        hello = json.loads(z.stdout.decode().splitlines()[0])
        assert "is not run: reduce did not find the file yours" in hello["entry_error"], hello
        assert not marker.exists()
    for path in (paths["theirs"], paths["mine"]):
        code, out, err = _run(["replay", path, "--trusted"], repo)
        assert code == 1 and err.rstrip().endswith(ERROR), err
        assert marker.exists()
        marker.unlink()


def test_the_step_gets_the_types_its_import_brought(tmp_path):
    """A replay (the worker's, and run_fixture's in a generated test) rebuilds a named tuple or
    mapping with its class when the step's own import brought it (its module, or a lazily loaded
    package's attribute), else as load() does; what the step sees is what the loader yielded."""
    repo = tmp_path / "repo"
    _write(repo / "lazypkg" / "__init__.py", """\
        def __getattr__(name):  # as transformers loads BatchEncoding on access
            if name == "Enc":
                from lazypkg.tokens import Enc
                return Enc
            raise AttributeError(name)
        """)
    _write(repo / "lazypkg" / "tokens.py", """\
        import collections.abc


        class Enc(collections.abc.Mapping):
            def __init__(self, d):
                self.d = d

            def __getitem__(self, k):
                return self.d[k]

            def __iter__(self):
                return iter(self.d)

            def __len__(self):
                return len(self.d)
        """)
    _write(repo / "steps.py", """\
        import collections

        import torch.nn.functional as F

        import lazypkg

        Pair = collections.namedtuple("Pair", "input target")


        def step(batch):
            assert type(batch["pair"]) is Pair, type(batch["pair"])
            assert type(batch["enc"]).__module__ == "lazypkg.tokens", type(batch["enc"])
            assert type(batch["other"]) is dict, type(batch["other"])
            return F.cross_entropy(batch["pair"].input, batch["enc"]["target"])
        """)
    sys.path.insert(0, str(repo))
    try:
        import steps
        from lazypkg.tokens import Enc
        Other = _named(type("Other", (_Mapping,), {}), "steps", "NotThere")
        batch = {"pair": steps.Pair(torch.randn(3, 4), torch.tensor([0, 1, 4])),
                 "enc": Enc({"target": torch.tensor([0, 1, 4])}), "other": Other({"k": 1})}
        path = str(repo / "typed.bin")
        rb.save(path, batch, step=steps.step, error=ERROR, provenance=False)
    finally:
        del sys.path[0]
        for m in ("steps", "lazypkg", "lazypkg.tokens"):
            sys.modules.pop(m, None)
    code, out, err = _run(["replay", path, "--trusted"], repo)
    assert code == 1 and err.rstrip().endswith(ERROR), err
    assert "steps:NotThere is rebuilt without its class" in err
    # The generated tests' replay in their own process, as the worker's.
    try:
        with pytest.raises(IndexError, match="Target 4 is out of bounds"):
            rb.steps.replay(path)
    finally:
        for m in ("steps", "lazypkg", "lazypkg.tokens"):
            sys.modules.pop(m, None)
    assert rb.steps.imported_type("os:system") is None  # a function, not a class


def test_lightning_class_is_checked(tmp_path):
    """lightning_step rebuilds the class the file's state names, as cls(**hparams): the class of a
    file that is not the user's is refused before it is imported, and one of the user's that is no
    LightningModule before it is called. subprocess:Popen with hparams {"args": [...]} ran a
    command."""
    marker = tmp_path / "marker"
    state = rb.State({"lightning": {"module_class": {"module": "subprocess", "qualname": "Popen"},
                                    "hparams": {"args": ["touch", str(marker)]}}})
    for trusted, why in ((False, "the recorded LightningModule class subprocess:Popen is not run: reduce did not "
                                 "find the file yours"),
                         (True, "subprocess:Popen is not run: it is not a LightningModule subclass|subprocess:Popen is "
                                "a LightningModule, and .* cannot import")):
        old = rb.worker._set_trust(trusted)
        try:
            with pytest.raises(rb.errors.HarnessError, match=why):
                rb.hooks.lightning_step({"x": torch.ones(2)}, state)
        finally:
            rb.steps.step_check = old
        assert not marker.exists()


@pytest.mark.parametrize("layout", ["module", "src_module", "script", "sub_script"])
def test_a_second_checkout_replays_its_own_step(tmp_path, layout):
    """A fixture's tests in another checkout of the repository, the first one still there: the
    recorded step resolves to the checkout under test (pytest's root), its imports and its working
    directory too, not to the checkout the batch was recorded in; a file of the same name
    elsewhere in the tree is not taken for it; a step that is in neither checkout is refused with
    a message for pytest, not for reduce."""
    first, second = tmp_path / "first", tmp_path / "second"
    sub = {"src_module": "src", "sub_script": "examples"}.get(layout, "")
    name = "train.py" if layout.endswith("script") else "mytrain.py"
    for repo, result in ((first, "first"), (second, "second")):
        _write(repo / "settings_of_test.py", "WHO = %r\n" % result)
        _write(repo / sub / name, "import os\nimport settings_of_test\n\n\ndef train_step(b):\n"
               "    return settings_of_test.WHO, os.path.basename(os.getcwd())\n")
        if sub:  # a file of the same name at the root, which is not the step
            _write(repo / name, "def train_step(b):\n    return 'the wrong file'\n")
    f = str(first / sub / name)
    module = "__main__" if layout.endswith("script") else "mytrain"
    step = {"module": module, "qualname": "train_step", "file": f, "cwd": str(first)}
    old, path, cwd = rb.steps.step_check, list(sys.path), os.getcwd()
    rb.steps.step_check = rb.trust.Trust(str(second), True, "", "pytest")
    try:
        for m in ("mytrain", "settings_of_test"):
            sys.modules.pop(m, None)
        assert rb.steps.resolve_step(dict(step), chdir=True)(None) == ("second", "second")
        assert not any(p.startswith(str(first)) for p in sys.path), sys.path
        os.chdir(cwd)
        os.remove(str(second / sub / name))
        for m in ("mytrain", "settings_of_test"):
            sys.modules.pop(m, None)
        with pytest.raises(rb.errors.HarnessError) as e:
            rb.steps.resolve_step(dict(step))(None)
        assert "pytest's root directory" in str(e.value) or "cannot import" in str(e.value), e.value
    finally:
        rb.steps.step_check = old
        sys.path[:] = path
        os.chdir(cwd)
        for m in ("mytrain", "settings_of_test"):
            sys.modules.pop(m, None)


def test_a_rebuilt_class_is_the_kind_its_step_builds(tmp_path):
    """The worker's start-up check of the class a file names for reduce_hooks' step to rebuild
    (--step-class): lightning_step's must be a LightningModule, trainer_step's a PreTrainedModel
    (of the installed transformers, or of the user's code), of a file that is the user's
    (--trusted), never one of reduce's own, and a step of the user's rebuilds none; refused before
    any replay, the class never called, and a transformers package of the tree never imported for
    the installed one."""
    repo = tmp_path / "repo"
    marker = tmp_path / "marker"
    _write(repo / "plain.py", "class Plain:\n    def __init__(self, *a, **k):\n        open(%r, 'w').close()\n"
           % str(marker))
    _write(repo / "steps.py", "def step(batch):\n    return None\n")
    # A folder named transformers, in a tree of its own (Lightning's import imports transformers).
    other = tmp_path / "other"
    _write(other / "transformers" / "__init__.py", "open(%r, 'w').close()\n\n\nclass Evil:\n    pass\n"
           % str(marker))
    lightning = {"module": "reduce_hooks", "qualname": "lightning_step"}
    trainer = {"module": "reduce_hooks", "qualname": "trainer_step"}
    plain = {"module": "plain", "qualname": "Plain", "file": str(repo / "plain.py"), "cwd": str(repo)}
    for tree, step, cls, flags, why in [
        (repo, lightning, plain, [], "the recorded step reduce_hooks:lightning_step is not run: reduce did not find "
         "the file yours|the recorded LightningModule class plain:Plain is not run: reduce did not find the file yours"),
        (repo, lightning, plain, ["--trusted"], "the recorded LightningModule class plain:Plain is not run: it is not a "
         "LightningModule subclass|plain:Plain is a LightningModule, and .* cannot import lightning.pytorch"),
        (repo, trainer, plain, ["--trusted"], "the recorded Trainer model class plain:Plain is not run: it is not a "
         "PreTrainedModel subclass|plain:Plain is a PreTrainedModel, and .* cannot import transformers"),
        (repo, trainer, {"module": "subprocess", "qualname": "Popen"}, [], "is not run: reduce did not find the file "
         "yours"),
        (repo, trainer, {"module": "subprocess", "qualname": "Popen"}, ["--trusted"], "subprocess:Popen is not run: "
         "it is not a PreTrainedModel subclass|subprocess:Popen is a PreTrainedModel, and .* cannot import"),
        (other, trainer, {"module": "transformers", "qualname": "Evil"}, ["--trusted"], "transformers:Evil is not "
         "run: its module transformers .* is not the installed transformers"),
        (repo, trainer, {"module": "reduce_batch", "qualname": "save"}, ["--trusted"], "reduce_batch:save is not run: "
         "its module reduce_batch is reduce's own"),
        (repo, {"module": "steps", "qualname": "step", "file": str(repo / "steps.py"), "cwd": str(repo)}, plain,
         ["--trusted"], r"names a class to rebuild \(plain:Plain\), and its step steps:step rebuilds none"),
    ]:
        code, out, err = _run(["entry", "--step", json.dumps(step), "--step-class", json.dumps(cls)] + flags, tree)
        assert code == rb.worker.HARNESS_EXIT, (step, cls, err)
        assert re.search(why, err), err
        assert not marker.exists(), (step, cls)


@pytest.mark.parametrize("env,xdg,home,want", [
    ("", "", "/home/someone", "/home/someone/.local/share/reduce/trusted"),
    ("", "relative/data", "/home/someone", "/home/someone/.local/share/reduce/trusted"),
    ("", "/data", "/home/someone", "/data/reduce/trusted"),
    ("/elsewhere", "/data", "/home/someone", "/elsewhere"),
    ("", "", "", None), ("", "", "relative", None), ("relative", "", "/home/x", None),
])
def test_trust_dir(monkeypatch, env, xdg, home, want):
    """The store's directory, as internal/trust's DefaultStore chooses it (TestDefaultStore): only an
    absolute path, never one relative to a working directory (another process, another store)."""
    for k, v in (("REDUCE_TRUST_DIR", env), ("XDG_DATA_HOME", xdg), ("HOME", home)):
        monkeypatch.setenv(k, v)
    if want is None:
        with pytest.raises(OSError, match="no trust store"):
            rb.trust_dir()
    else:
        assert rb.trust_dir() == want
