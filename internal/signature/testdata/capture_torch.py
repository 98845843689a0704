"""Capture, from a real torch, the CPU failures of corpus files recorded with another torch.

    python3 internal/signature/testdata/capture_torch.py PYTHON SUFFIX NAME...

For each NAME (a file stderr/NAME.txt of the corpus, recorded by one torch), runs the same
program under PYTHON (another torch), as the corpus's files were captured: subprocess.run([PYTHON,
"-c", SRC]) from the repository's root, and writes stderr/NAME_SUFFIX.txt: a "# source:" line
naming PYTHON's torch version, the exit status, the stderr byte for byte, and the "-- want --" and
"-- class --" sections of NAME.txt: the claim that the other torch's text of the same failure
parses to the same signature. internal/signature's TestParseCorpus checks that claim, and
TestCorpusTorchVersions that the two files match strictly.

SRC is NAME.txt's own, from its "# source:" line (SRC = "..."), except where that line describes
the program in words; then it is in PROGRAMS below. Run it from anywhere; it writes next to itself.
"""

import json
import os
import platform
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

# Programs of corpus files whose "# source:" line describes them in words.
PROGRAMS = {
    # --device-memory 95MiB as the torch backend sets it (reduce_batch.memory.limit_device_memory,
    # after the batch is in memory): an embedding whose 96 MiB output does not fit.
    "cpu_alloc_oom_embedding": (
        "import sys\nsys.path.insert(0, 'replay/python')\n"
        "import torch, torch.nn.functional as F, reduce_batch.memory\n"
        "ids, table = torch.arange(48 * 128).reshape(48, 128) % 100, torch.zeros(100, 4096)\n"
        "reduce_batch.memory.limit_device_memory('cpu', 95 << 20)\n"
        "F.embedding(ids, table)"),
}


def sections(text):
    """The header lines and the sections of a corpus file, up to its stderr."""
    head = text.split("-- stderr --\n", 1)[0]
    out, name = {"": ""}, ""
    for line in head.splitlines(keepends=True):
        m = re.match(r"-- (\w+) --\n", line)
        if m:
            name = m.group(1)
            out[name] = ""
        else:
            out[name] += line
    return out


def program(name, header):
    if name in PROGRAMS:
        return PROGRAMS[name]
    m = re.search(r'SRC = ("(?:[^"\\]|\\.)*")\s*$', header, re.M)
    if not m:
        raise SystemExit("%s.txt: no SRC = \"...\" in its source line, and no entry in PROGRAMS" % name)
    return json.loads(m.group(1))


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__)
    python, suffix, names = argv[0], argv[1], argv[2:]
    probe = "import platform, torch; print(torch.__version__, platform.python_version())"
    torch_version, python_version = subprocess.run([python, "-c", probe], check=True, capture_output=True,
                                                   text=True).stdout.split()
    for name in names:
        with open(os.path.join(HERE, "stderr", name + ".txt"), encoding="utf-8") as f:
            sec = sections(f.read())
        src = program(name, sec[""])
        p = subprocess.run([python, "-c", src], cwd=ROOT, capture_output=True)
        if p.returncode == 0:
            raise SystemExit("%s: the program passed under torch %s" % (name, torch_version))
        out = os.path.join(HERE, "stderr", "%s_%s.txt" % (name, suffix))
        with open(out, "wb") as f:
            f.write(("# source: real torch %s CPU (PyPI torch, the virtual environment of "
                     "scripts/pypi-torch.txt, python %s), captured with subprocess.run([PYTHON, \"-c\", SRC]) "
                     "by testdata/capture_torch.py: the failure of %s.txt, "
                     "SRC = %s\n" % (torch_version, python_version, name, json.dumps(src))).encode())
            f.write(b"-- exit --\n" + json.dumps({"code": p.returncode}).encode() + b"\n")
            for s in ("want", "class"):
                if s in sec:
                    f.write(("-- %s --\n%s" % (s, sec[s])).encode())
            f.write(b"-- stderr --\n" + p.stderr)
        print("%s: exit %d, %d bytes of stderr" % (os.path.relpath(out, ROOT), p.returncode, len(p.stderr)))
    print("torch", torch_version, "python", python_version, "on", platform.machine())


if __name__ == "__main__":
    main(sys.argv[1:])
