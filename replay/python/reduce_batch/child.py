"""reduce_batch.child: replays in a child process: run_in_child, and what a child's failure was."""

import contextlib
import json
import os
import subprocess
import sys

import reduce_batch

from . import steps
from .checks import summarize
from .errors import HARNESS_EXIT, HarnessError
from .fileformat import torch_module
from .memory import limit_device_memory
from .steps import load_candidate, run_loaded


class ChildFailure(Exception):
    """A run in a child process (run_in_child's, or the user's command) that did not end well: its
    exit status (`returncode`, negative for a signal, as subprocess gives it; None when it gave no
    answer before its timeout, `timed_out`) and all it wrote to stderr (`stderr`, also
    `child_stderr`), whose end the exception's text shows. What the failure is, and whether it is
    the one recorded, is reduce's to say (`reduce judge`, from exit() and stderr): nothing here
    reads the traceback."""

    def __init__(self, returncode, stderr, timed_out=False):
        self.returncode, self.stderr, self.child_stderr, self.timed_out = returncode, stderr, stderr, timed_out
        if timed_out:
            head = "the child process gave no answer before its timeout: killed"
        elif returncode < 0:
            head = f"the child process ended by signal {_signal_name(-returncode)}"
        else:
            head = f"the child process exited {returncode}"
        end = tail(stderr)
        Exception.__init__(self, head + ("\n--- the end of its stderr ---\n" + end if end else
                                         "\n(its stderr is empty)"))

    def exit(self):
        """How it ended, as `reduce judge` reads it (signature.ExitInfo)."""
        return {"code": -1, "timed_out": True} if self.timed_out else {"code": self.returncode}


def tail(text, lines=40, chars=4000):
    """The end of a process's output, as a failure's text shows it: its last lines, at most chars."""
    out = "\n".join(text.rstrip().splitlines()[-lines:])
    return out if len(out) <= chars else "..." + out[-chars:]


_SUMMARY_LINE = "reduce_batch-summary: "
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
    then the summary line. A batch that cannot run exits HARNESS_EXIT, saying why."""
    try:
        batch, fn = load_candidate(path, device, entry or None)
        if seed:
            torch_module().manual_seed(int(seed))
        nbytes = int(device_memory)
        lift = limit_device_memory(device, nbytes) if nbytes > 0 else None
        out = run_loaded(batch, fn, device)
    except HarnessError as e:
        sys.stderr.write(f"reduce_batch: the batch could not run: {e}\n")
        sys.exit(HARNESS_EXIT)
    if lift is not None:
        lift()  # the summary is the harness's, not the step's
    sys.stdout.write(_SUMMARY_LINE + json.dumps(summarize(out), sort_keys=True) + "\n")
    sys.stdout.flush()


def _signal_name(n):
    import signal

    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


def run_in_child(path, device="cpu", entry=None, device_memory=0, timeout=900, seed=None):
    """replay(path, device, entry) in a fresh Python process (sys.executable, this runtime and
    reduce_batch, the working directory and environment of this one, with CUDA_LAUNCH_BLOCKING=1
    and AMD_SERIALIZE_KERNEL=3), with device_memory > 0 limiting what the step may allocate
    (limit_device_memory, set once the batch is loaded). A failure of the step on a device leaves
    that process, not this one, unusable.

    Returns the output's summary (summarize). When the step fails, the child dies by a signal or
    gives no answer within `timeout` seconds (then its process group is killed), raises
    ChildFailure with its exit status and stderr; HarnessError when the batch could not run (the
    file does not load, the entry does not resolve). `seed` seeds torch's generators before the
    step, as reduce's --seed does. The child runs with REDUCE_REPLAY=1, as reduce's replays do: a
    record_on_failure in the step records nothing there."""
    trust = [getattr(steps.step_check, "tree", ""), "mine" if getattr(steps.step_check, "mine", False) else "",
             getattr(steps.step_check, "why", "")]  # the child trusts what this process does
    cmd = [sys.executable, "-c", _CHILD_CODE, os.path.dirname(os.path.dirname(os.path.abspath(reduce_batch.__file__))),
           *trust, os.path.abspath(os.fspath(path)), str(device), entry or "",
           str(int(device_memory or 0)), "" if seed is None else str(int(seed))]
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", AMD_SERIALIZE_KERNEL="3", REDUCE_REPLAY="1")
    returncode, stdout, stderr = run_process(cmd, env, timeout)
    if returncode == 0:
        for line in reversed(stdout.splitlines()):
            if line.startswith(_SUMMARY_LINE):
                return json.loads(line[len(_SUMMARY_LINE):])
        raise HarnessError("the child process exited 0 without its summary line (did the step exit the "
                           f"process?); its stderr ends:\n{tail(stderr)}")
    if returncode == HARNESS_EXIT:
        raise HarnessError(f"the batch could not run in the child process; its stderr ends:\n{tail(stderr)}")
    raise ChildFailure(returncode, stderr)


def run_process(argv, env, timeout, cwd=None):
    """Run argv with env in a session of its own, its stdin empty, and return (exit status, stdout,
    stderr as text). ChildFailure when it gives no answer within `timeout` seconds: then its process
    group is killed, with whatever it started (loader workers, a shell's children), as it is on
    Ctrl-C in the test run, which goes on."""
    import signal

    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         start_new_session=True, cwd=cwd)
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException as e:  # the timeout, or Ctrl-C: the process goes too
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
        if not isinstance(e, subprocess.TimeoutExpired):
            raise
        raise ChildFailure(None, err.decode("utf-8", "replace"), timed_out=True) from None
    return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
