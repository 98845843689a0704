#!/usr/bin/env python3
"""Build reduce's platform wheel: the Python package reduce_batch and the reduce executable.

    scripts/build-wheel.py --binary BIN --goos linux --goarch amd64 [--out dist]

The wheel (PEP 427) installs reduce_batch into site-packages, `reduce` into the environment's bin
(its .data/scripts), and registers the pytest plugin (entry point pytest11). It depends on nothing:
torch is the user's own, never a requirement pip would replace. The executable is built for one
platform (make wheel GOOS=... GOARCH=...), and the tag says which; the Go binary is static
(CGO_ENABLED=0), so a Linux wheel is manylinux. Standard library only: a wheel is a zip of the files,
three metadata files and their RECORD.
"""

import argparse
import base64
import hashlib
import os
import re
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PACKAGE = os.path.join(ROOT, "replay", "python", "reduce_batch")
DIST = "reduce_batch"  # the distribution's name as a wheel's file name spells it (reduce-batch)

# GOOS/GOARCH -> the wheel's platform tag.
PLATFORMS = {
    ("linux", "amd64"): "manylinux_2_17_x86_64.manylinux2014_x86_64",
    ("linux", "arm64"): "manylinux_2_17_aarch64.manylinux2014_aarch64",
    ("darwin", "amd64"): "macosx_10_12_x86_64",
    ("darwin", "arm64"): "macosx_11_0_arm64",
}
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the same inputs, the same wheel


def version():
    src = open(os.path.join(ROOT, "replay", "embed.go"), encoding="utf-8").read()
    m = re.search(r'^const Version = "([^"]+)"', src, re.M)
    if not m:
        sys.exit("build-wheel: no `const Version` in replay/embed.go")
    return m.group(1)


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", required=True, help="the reduce executable built for --goos/--goarch")
    p.add_argument("--goos", required=True)
    p.add_argument("--goarch", required=True)
    p.add_argument("--out", default="dist")
    o = p.parse_args()
    plat = PLATFORMS.get((o.goos, o.goarch))
    if plat is None:
        sys.exit(f"build-wheel: no wheel tag for GOOS={o.goos} GOARCH={o.goarch}; "
                 f"known: {', '.join('/'.join(k) for k in PLATFORMS)}")
    ver = version()
    info, data = f"{DIST}-{ver}.dist-info", f"{DIST}-{ver}.data"
    exe = "reduce.exe" if o.goos == "windows" else "reduce"
    files = []  # (name in the wheel, bytes, executable)
    for name in sorted(os.listdir(PACKAGE)):
        if name.endswith((".py", ".json")):  # the modules and the hooks' table
            with open(os.path.join(PACKAGE, name), "rb") as f:
                files.append((f"reduce_batch/{name}", f.read(), False))
    with open(o.binary, "rb") as f:
        files.append((f"{data}/scripts/{exe}", f.read(), True))
    readme = ("reduce turns a recorded failing PyTorch training batch into the smallest input that still "
              "fails the same way, and writes it as a regression fixture that pytest runs.\n")
    files.append((f"{info}/METADATA", (
        "Metadata-Version: 2.1\n"
        "Name: reduce-batch\n"
        f"Version: {ver}\n"
        "Summary: Reduce a failing PyTorch batch to its minimal input; the recorder, the pytest plugin "
        "and the reduce executable\n"
        "Requires-Python: >=3.8\n"
        "Classifier: Framework :: Pytest\n"
        "Description-Content-Type: text/plain\n\n" + readme).encode(), False))
    files.append((f"{info}/WHEEL", (
        "Wheel-Version: 1.0\n"
        "Generator: reduce scripts/build-wheel.py\n"
        "Root-Is-Purelib: false\n"
        + "".join(f"Tag: py3-none-{t}\n" for t in plat.split("."))).encode(), False))
    files.append((f"{info}/entry_points.txt", b"[pytest11]\nreduce_batch = reduce_batch.plugin\n", False))
    record = "".join(f"{n},{digest(b)},{len(b)}\n" for n, b, _ in files) + f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode(), False))
    os.makedirs(o.out, exist_ok=True)
    path = os.path.join(o.out, f"{DIST}-{ver}-py3-none-{plat}.whl")
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, b, executable in files:
            zi = zipfile.ZipInfo(name, FIXED_TIME)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (0o100755 if executable else 0o100644) << 16
            z.writestr(zi, b)
    os.replace(tmp, path)
    print(path)


if __name__ == "__main__":
    main()
