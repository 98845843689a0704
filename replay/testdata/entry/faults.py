"""An --entry whose step misbehaves as the batch's meta["fault"] says (the zygote's tests)."""

import ctypes
import os
import signal
import sys
import time


def run(batch):
    fault = batch.meta.get("fault", "pass")
    sys.stderr.write("faults: %s in pid %d (parent %d)\n" % (fault, os.getpid(), os.getppid()))
    sys.stderr.flush()
    if fault == "pass":
        return batch.tensors["input"].sum()
    if fault == "exception":
        raise ValueError("candidate rejected: %d samples" % batch.samples)
    if fault == "segv":
        ctypes.string_at(0)
    if fault == "abort":
        os.abort()
    if fault == "hang":
        time.sleep(3600)
    if fault == "exit3":
        sys.exit(3)
    if fault == "grandchild":  # leaves a process running in its group
        pid = os.fork()
        if pid == 0:
            time.sleep(3600)
            os._exit(0)
        sys.stdout.write("grandchild %d\n" % pid)
        sys.stdout.flush()
        return None
    if fault == "kill-zygote":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(3600)
    if fault == "visible":  # the slot's device, as the zygote's child sees it
        sys.stdout.write("visible %s\n" % os.environ.get("CUDA_VISIBLE_DEVICES", "-"))
        sys.stdout.flush()
        return None
    if fault == "tmpfile":  # a temporary file in the run directory, removed with it
        import tempfile

        fd, path = tempfile.mkstemp()
        os.write(fd, b"scratch")
        os.close(fd)
        return path
    if fault == "exit0":  # ends the process with status 0 halfway: not a pass
        sys.stdout.flush()
        os._exit(0)
    if fault == "escape":  # a grandchild in a session of its own, holding stdout and stderr
        import subprocess

        gc = subprocess.Popen(["sleep", "100"], start_new_session=True)
        sys.stdout.write("escaped %d\n" % gc.pid)
        sys.stdout.flush()
        return None
    raise RuntimeError("unknown fault %r" % fault)
