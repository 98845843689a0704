"""The exec backend's warm-vs-cold test script: python3 step.py MODE {batch}.

Each MODE ends as a Python command can end: ok (exit 0), index (torch's IndexError from
F.cross_entropy), exit3 (sys.exit(3)), abort (os.abort()), env (prints what the process sees:
argv, working directory, environment, sys.path, __name__, __file__; the test compares it warm and
cold), sibling (imports sibling_helper from this directory), hang (ignores SIGINT, starts a
child in its process group and sleeps: the timeout's SIGKILL must end both).
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

mode = sys.argv[1]
batch = sys.argv[2]
run_dir = os.environ.get("REDUCE_RUN_DIR", "")


def norm(s):
    return s.replace(run_dir, "{rundir}") if run_dir else s


if mode == "ok":
    assert os.path.exists(batch), batch
    print("ok", F.cross_entropy(torch.zeros(2, 4), torch.tensor([1, 3])).item())
elif mode == "index":
    F.cross_entropy(torch.zeros(2, 4), torch.tensor([1, 4]))
elif mode == "exit3":
    sys.exit(3)
elif mode == "abort":
    os.abort()
elif mode == "env":
    assert __name__ == "__main__"
    print(json.dumps({
        "argv": [norm(a) for a in sys.argv], "cwd": os.getcwd(), "name": __name__, "file": __file__,
        "env": {k: norm(v) for k, v in sorted(os.environ.items())}, "path": sys.path,
        "stdin": sys.stdin.read(), "main": sys.modules["__main__"].__dict__.get("mode"),
        "warm_test": os.environ.get("WARM_TEST"),
    }, sort_keys=True))
elif mode == "sibling":
    import sibling_helper

    print("sibling", sibling_helper.VALUE, os.path.dirname(sibling_helper.__file__) == os.path.dirname(os.path.abspath(__file__)))
elif mode == "hang":
    import signal
    import subprocess
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "300"])
    print("child", child.pid, flush=True)
    time.sleep(300)
else:
    sys.exit("unknown mode %r" % mode)
