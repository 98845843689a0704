"""reduce_batch.child: replays in a child process: run_in_child, and reading a child's failure back."""

import contextlib
import json
import os
import re
import subprocess
import sys

import reduce_batch

from . import steps
from .checks import summarize
from .errors import HarnessError
from .fileformat import torch_module
from .memory import limit_device_memory
from .steps import load_candidate, run_loaded


class ChildFailure(Exception):
    """run_in_child's child failed in a way that cannot be raised again as its own exception: a
    class that cannot be imported here or made from its message alone, death by a signal (an
    abort after a device error, a segfault), an exit status with no traceback, or no end before
    the timeout. name is the exception's dotted class, "signal SIGABRT", "exit N" or "timeout";
    message its text; stderr (and child_stderr) all the child wrote there, whose end the
    exception's own text shows."""

    def __init__(self, name, message, stderr):
        self.name, self.message, self.stderr = name, message, stderr
        self.child_stderr = stderr
        head = f"the child process ended with {name}" + (f": {message}" if message else "")
        tail = _tail(stderr)
        Exception.__init__(self, head + ("\n--- the end of its stderr ---\n" + tail if tail else
                                         "\n(its stderr is empty)"))


def _tail(text, lines=40, chars=4000):
    out = "\n".join(text.rstrip().splitlines()[-lines:])
    return out if len(out) <= chars else "..." + out[-chars:]


_SUMMARY_LINE = "reduce_batch-summary: "
_TRACEBACK_HEAD = "Traceback (most recent call last):"
_RANK_MARK = re.compile(r"^\[rank\d+\]: ?")
_FRAME_HEAD = '  File "'
_FRAME_END = re.compile(r'", line \d+(?:, in \S+)?$')  # a frame's line ends so, whatever its file's path
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::(?: (.*))?)?$")
# The child: this package, imported from where this process imported it (a folder, or the zip
# reduce writes beside a conftest.py), with the working directory next on sys.path (where an
# --entry module is, as reduce's replays have it); then child_replay.
_CHILD_CODE = """import os, sys
sys.path[:0] = [sys.argv[1], os.getcwd()]
from reduce_batch import child, steps, trust
steps.step_check = trust.Trust(sys.argv[2], sys.argv[3] == "mine", sys.argv[4], "pytest") if sys.argv[2] else None
child.child_replay(*sys.argv[5:])
"""


def child_replay(path, device, entry, device_memory, seed=""):
    """run_in_child's child: replay(path, device, entry) with the limit of --device-memory set
    between the load and the run and the seed of --seed before it, as the worker's replay does;
    then the summary line."""
    batch, fn = load_candidate(path, device, entry or None)
    if seed:
        torch_module().manual_seed(int(seed))
    nbytes = int(device_memory)
    lift = limit_device_memory(device, nbytes) if nbytes > 0 else None
    out = run_loaded(batch, fn, device)
    if lift is not None:
        lift()  # the summary is the harness's, not the step's
    sys.stdout.write(_SUMMARY_LINE + json.dumps(summarize(out), sort_keys=True) + "\n")
    sys.stdout.flush()


def _child_exception(stderr):
    """(dotted class, message) of the exception whose traceback the child printed last, or None.
    The message runs from the exception's line to the end of stderr: a torch message has lines of
    its own, which check_exception's rule (first line, then more) allows to be followed by more.
    Under a process group (a rank's replay, alone) torch prints the traceback with each line led
    by "[rank0]: ": that mark is dropped."""
    lines = [_RANK_MARK.sub("", line) for line in stderr.splitlines()]
    starts = [i for i, line in enumerate(lines) if line == _TRACEBACK_HEAD]
    if not starts:
        return None
    i = starts[-1] + 1
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith(_FRAME_HEAD) and not _FRAME_END.search(line):
            # The path of the frame's file holds newlines (a repository's): its line runs on to the
            # one that ends it, whatever the lines between look like (signature.joinFrames).
            end = next((j for j in range(i, min(i + 4, len(lines))) if not lines[j] or _FRAME_END.search(lines[j])),
                       None)
            if end is not None and lines[end]:
                i = end + 1
            continue
        if not line or line[0].isspace():
            continue  # a frame, its source line, its ^^^ marks
        m = _EXCEPTION_LINE.match(line)
        if m is None:
            return None
        return m.group(1), "\n".join([m.group(2) or ""] + lines[i:]).rstrip()
    return None


def _exception_of(name, message):
    """A new exception of the class `name` with `message`, or None when the class cannot be
    imported here, is no Exception or cannot be made from one string. A KeyError's message is the
    repr of its argument: the argument is read back from it, so that str() gives the message."""
    import ast

    try:  # whatever importing the class's module or making one raises: no exception of it here
        cls = exception_class(name)
        if not isinstance(cls, type) or not issubclass(cls, Exception):
            return None
        e = cls(message)
    except Exception:  # noqa: BLE001
        return None
    if str(e) != message and len(message) < 10000:
        with contextlib.suppress(Exception):
            again = cls(ast.literal_eval(message))
            if str(again) == message:
                e = again
    return e


def _signal_name(n):
    import signal

    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


def run_in_child(path, device="cpu", entry=None, device_memory=0, timeout=900, seed=None):
    """replay(path, device, entry) in a fresh Python process (sys.executable, this runtime and
    reduce_batch, the working directory and environment of this one, with CUDA_LAUNCH_BLOCKING=1
    and AMD_SERIALIZE_KERNEL=3), with device_memory > 0 limiting
    what the step may allocate (limit_device_memory, set once the batch is loaded). A failure of
    the step on a device leaves that process, not this one, unusable.

    Returns the output's summary (summarize). When the step fails, raises here a new exception
    of the class the child raised, with its message, its child_stderr attribute holding all the
    child wrote to stderr and, as its cause, a ChildFailure showing the end of it: so
    pytest.raises and pytest.mark.xfail(raises=...) judge the child's failure. ChildFailure
    itself when that class cannot be made here, the child died by a signal or exited with no
    traceback, or gave no answer within `timeout` seconds (then its process group is killed);
    HarnessError when the batch could not run (the file does not load, the entry does not
    resolve). `seed` seeds torch's generators before the step, as reduce's --seed does. The child
    runs with REDUCE_REPLAY=1, as reduce's replays do: a record_on_failure in the step records
    nothing there."""
    trust = [getattr(steps.step_check, "tree", ""), "mine" if getattr(steps.step_check, "mine", False) else "",
             getattr(steps.step_check, "why", "")]  # the child trusts what this process does
    cmd = [sys.executable, "-c", _CHILD_CODE, os.path.dirname(os.path.dirname(os.path.abspath(reduce_batch.__file__))),
           *trust, os.path.abspath(os.fspath(path)), str(device), entry or "",
           str(int(device_memory or 0)), "" if seed is None else str(int(seed))]
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", AMD_SERIALIZE_KERNEL="3", REDUCE_REPLAY="1")
    # A session of its own: a timeout kills the child with whatever it started (loader workers).
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         start_new_session=True)
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException as e:  # the timeout, or Ctrl-C in the test run: the child goes too
        import signal

        timed_out = isinstance(e, subprocess.TimeoutExpired)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = p.communicate()
        if not timed_out:
            raise
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if timed_out:
        raise ChildFailure("timeout", f"no end within {timeout} seconds: killed", stderr)
    if p.returncode == 0:
        for line in reversed(stdout.splitlines()):
            if line.startswith(_SUMMARY_LINE):
                return json.loads(line[len(_SUMMARY_LINE):])
        raise HarnessError("the child process exited 0 without its summary line (did the step exit the "
                           f"process?); its stderr ends:\n{_tail(stderr)}")
    raise child_failure(p.returncode, stderr)


def child_failure(returncode, stderr):
    """The exception a child process's failure stands for, to raise here: a new exception of the
    class its last traceback names (with child_stderr, and a ChildFailure as its cause),
    HarnessError when the runtime could not run the batch, else ChildFailure (a signal, an exit
    status with no traceback, a class that cannot be made here). For run_in_child, and for the
    fixtures of a command of the user's own (reduce's exec backend)."""
    failure = _child_exception(stderr)
    if failure is not None:
        name, message = failure
        if name in ("reduce_batch.errors.HarnessError", "HarnessError"):
            return HarnessError(f"the batch could not run in the child process: {message}\n"
                                f"--- the end of its stderr ---\n{_tail(stderr)}")
        e = _exception_of(name, message)
        if e is None:
            return ChildFailure(name, message, stderr)
        e.child_stderr = stderr
        e.__cause__ = ChildFailure(name, message, stderr)
        return e
    if returncode < 0:
        return ChildFailure("signal " + _signal_name(-returncode), "", stderr)
    return ChildFailure(f"exit {returncode}", "", stderr)


def exception_class(name):
    """The class a dotted name (torch.cuda.OutOfMemoryError) or a builtin's name names, or None:
    found among the modules already imported (torch is), never by importing what a record names."""
    import builtins

    torch_module()
    parts = name.split(".")
    obj = getattr(builtins, name, None) if len(parts) == 1 else sys.modules.get(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None
