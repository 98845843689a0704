"""The command of an exec fixture is built, never spliced: rb.plugin.exec_argv quotes {batch}
in the script of a POSIX shell whatever the fixture's path holds, and decides as reduce's Go side
does (replay/testdata/shell_commands.json, the table both are tested on); a traceback whose file's
path holds a newline is judged whole by reduce."""

import hashlib
import json
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reduce_batch as rb  # noqa: E402
import reduce_batch.child  # noqa: E402
import reduce_batch.plugin  # noqa: E402

with open(os.path.join(HERE, "..", "testdata", "shell_commands.json"), encoding="utf-8") as _f:
    TABLE = json.load(_f)


@pytest.mark.parametrize("case", TABLE["commands"], ids=[c["what"] for c in TABLE["commands"]])
def test_exec_argv_table(case):
    if case.get("refused"):
        with pytest.raises(ValueError):
            rb.plugin.exec_argv(case["argv"], TABLE["batch"])
    else:
        assert rb.plugin.exec_argv(case["argv"], TABLE["batch"]) == case["want"]


# Names of a directory that a shell reads as code, or splits, where a path holding one is put in a
# script unquoted: the commands below create $PWNED when they run what the name holds.
HOSTILE = ["with blank", "$(touch $PWNED)", "a'$(touch $PWNED)'b", "a'`touch $PWNED`'b", "`touch $PWNED`",
           '"$(touch $PWNED)"', "new\nline", "tab\there;touch $PWNED", "-dash"]

# Commands, a shell in each spelling, that exit 0 when the batch's file is there and 9 when not.
SCRIPT = "test -f {batch} || exit 9"
COMMANDS = [["sh", "-c", SCRIPT], ["sh", "-ec", SCRIPT], ["sh", "-e", "-c", SCRIPT], ["sh", "-c", "-e", SCRIPT],
            ["bash", "-xc", SCRIPT], ["bash", "--norc", "-c", SCRIPT], ["bash", "-o", "pipefail", "-c", SCRIPT],
            ["sh", "-c", 'test -f "$1" || exit 9', "sh", "{batch}"]]


EXAMPLE = os.path.join(HERE, "..", "..", "fixtures", "examples", "four_class_targets.bin")


@pytest.fixture
def exec_fixture(tmp_path, monkeypatch):
    """make(folder, args): a fixture of reduce's exec backend in folder, its command args, its files
    allowed in a trust store of the test's own (REDUCE_TRUST_DIR), as `reduce trust` allows them."""
    store = tmp_path / "trust-store"
    store.mkdir()
    monkeypatch.setenv("REDUCE_TRUST_DIR", str(store))

    def make(folder, args):
        os.makedirs(folder)
        with open(os.path.join(folder, "fixture.json"), "w", encoding="utf-8") as f:
            json.dump({"version": rb.plugin.RECORD_VERSION, "status": "open", "replay_args": args,
                       "signature": {"family": "host_check", "backend": "cpu", "exception": "IndexError",
                                     "expression": "IndexError: Target N is out of bounds."}}, f)
        shutil.copyfile(EXAMPLE, os.path.join(folder, "batch.bin"))
        for name in ("fixture.json", "batch.bin"):
            with open(os.path.join(folder, name), "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            (store / (digest + ".json")).write_text(json.dumps({"digest": "sha256:" + digest, "kind": "allowed"}))
        return rb.plugin.Fixture(os.path.join(folder, "fixture.json"))

    return make


@pytest.mark.parametrize("name", HOSTILE)
def test_exec_fixture_hostile_dir(tmp_path, monkeypatch, exec_fixture, name):
    pwned = tmp_path / "PWNED"
    monkeypatch.setenv("PWNED", str(pwned))
    for i, args in enumerate(COMMANDS):
        fx = exec_fixture(os.path.join(tmp_path, name, str(i)), args)
        assert fx.exec
        ran, e = fx.run("batch.bin")
        assert e is None and ran == {"batch": "batch.bin", "device": "", "exit": {"code": 0}}, args  # it found it
        assert not pwned.exists(), f"{args} ran what the directory's name holds"


def test_exec_fixture_refused(tmp_path, exec_fixture):
    fx = exec_fixture(os.path.join(tmp_path, "fx"), ["env", "A=1", "sh", "-c", SCRIPT])
    with pytest.raises(rb.plugin.FixtureError, match=r"sh -c '\.\.\.'"):
        fx.run("batch.bin")


# A traceback as Python prints it for a script whose path (the repository's) holds a newline.
def traceback_of(repo):
    return ("some output\nTraceback (most recent call last):\n"
            f'  File "{repo}/step.py", line 9, in <module>\n    main()\n'
            f'  File "{repo}/step.py", line 5, in main\n    raise IndexError("Target 4 is out of bounds.")\n'
            "IndexError: Target 4 is out of bounds.\n")


@pytest.mark.parametrize("repo", ["/home/u/my\nrepo", "/home/u/b: c\nValueError: x\nrepo", "/r\n/x", "/r\n"])
def test_traceback_newline_in_path(tmp_path, exec_fixture, repo):
    fx = exec_fixture(os.path.join(tmp_path, "fx"), ["sh", "-c", SCRIPT])
    assert rb.plugin.judge(fx, {"batch": "batch.bin", "exit": {"code": 1}, "stderr": traceback_of(repo)})[0] == "recorded"
    other = traceback_of(repo).replace("IndexError: Target 4", "KeyError: Target 4")
    assert rb.plugin.judge(fx, {"batch": "batch.bin", "exit": {"code": 1}, "stderr": other})[0] == "other"


def test_exec_fixture_newline_in_repo(tmp_path, exec_fixture):
    """The user's script in a repository whose path holds a newline raises: the fixture's failure is
    that exception, as recorded."""
    repo = tmp_path / "my\nrepo"
    repo.mkdir()
    step = repo / "step.py"
    step.write_text("import sys\n\n\ndef main():\n    raise IndexError('Target 4 is out of bounds.')\n\n\nmain()\n")
    fx = exec_fixture(os.path.join(repo, "fx"), [sys.executable, str(step), "{batch}"])
    ran, e = fx.run("batch.bin")
    assert isinstance(e, rb.child.ChildFailure) and ran["exit"] == {"code": 1}
    assert rb.plugin.judge(fx, ran)[0] == "recorded"


def test_exec_fixture_timeout(tmp_path, exec_fixture):
    """A command that gives no answer is killed with what it started, and is a timeout (what reduce
    judges), not the plugin's own error."""
    import time

    marker = tmp_path / "grandchild"
    fx = exec_fixture(os.path.join(tmp_path, "fx"), ["sh", "-c", f"(sleep 3; touch {marker}) & sleep 60", "{batch}"])
    start = time.monotonic()
    with pytest.raises(rb.child.ChildFailure) as info:
        fx._run_command("batch.bin", timeout=1)
    assert info.value.timed_out and info.value.exit() == {"code": -1, "timed_out": True}
    assert time.monotonic() - start < 30
    time.sleep(4)
    assert not marker.exists(), "the command's child outlived its timeout"
