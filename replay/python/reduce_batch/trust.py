"""reduce_batch.trust: what a recording or a fixture may run of what it names (Go's internal/trust, the same rule)."""

import json
import os
import re
import subprocess

import reduce_batch

from .errors import HarnessError
from .hooks import step_names
from .modules import HOOKS_MODULES, is_installed, module_files, under


class Trust:
    """step_check: what a recording (or a fixture) may run of what it names. `mine`: the file is
    the user's (trusted: reduce's worker is told so by reduce, which decided, internal/trust; the
    collector decides per fixture, Fixture.trust), else `why` says why not and how to allow it.
    Never a function of reduce's own (reduce_own), the user's file or not. `tree` is where the
    recorded folders of a step from another checkout move to (_step_paths): the worker's working
    directory, pytest's root directory."""

    def __init__(self, tree, mine=False, why="", runner="reduce"):
        self.tree, self.mine, self.why, self.runner = os.path.realpath(tree), mine, why, runner

    def __call__(self, step, target, what):
        if not self.mine:  # decided first: nothing the step names is looked at, not even its file
            raise HarnessError(f"the recorded {what} {printable(target)} is not run: "
                               f"{self.why or 'the file is not yours'}")
        own = reduce_own(step, target)
        if own:
            raise HarnessError(f"the recorded {what} {printable(target)} is not run: {own}, and reduce's own "
                               "functions are never a step (a file naming one would have reduce call it with the "
                               "file's data): the file is damaged or was made to do so")
        if self.runner != "pytest" or (step.get("module") in HOOKS_MODULES and step.get("qualname") in step_names()):
            return
        # Not trust: a fixture tests the repository pytest runs in, not another checkout of it
        # (_step_paths moved the recorded folders into it where it holds the step).
        mod = step.get("module", "")
        for name, origin in [("its script", target.rpartition(":")[0])] if mod == "__main__" else module_files(mod):
            real = os.path.realpath(origin) if origin and os.path.isabs(origin) else None
            if real and not under(real, self.tree) and not is_installed(real, self.tree):
                raise HarnessError(printable(
                    f"the recorded {what} {target} is not run here: {name} ({origin}) lies outside {self.tree}, "
                    "pytest's root directory: a fixture tests the repository it is run in; run pytest at the root of "
                    "the repository that holds the step (or give it --rootdir=THAT_ROOT)"))


def reduce_own(step, target=None):
    """Why the recorded step ({module, qualname, file}) is one of reduce's own functions, or None:
    its module is one of reduce's (the last part of its dotted name: a vendored copy in a package
    too), or the file its name resolves to (target's, or the module's as the import would find it)
    is named after one or begins as one of reduce's files do. reduce_hooks' steps, named by that
    module, are steps (the worker's copy replays them). trust.OwnStep is Go's side."""
    mod, qual = str(step.get("module") or ""), str(step.get("qualname") or "")
    if mod in HOOKS_MODULES and qual in step_names():
        return None
    if mod.partition(".")[0] == "reduce_batch" or mod.rpartition(".")[2] in _OWN_MODULES:
        return f"its module {mod} is reduce's own"
    files = [step.get("file")] + ([target.rpartition(":")[0]] if target and mod == "__main__" else []) + [
        origin for _, origin in (module_files(mod) if mod and mod != "__main__" else ())]
    for f in [f for f in files if f and os.path.isabs(f)]:
        if os.path.splitext(os.path.basename(f))[0] in _OWN_MODULES or \
                os.path.basename(os.path.dirname(f)) == "reduce_batch":  # the package's
            return f"its file {printable(os.path.basename(f))} is reduce's own"
        if _head(f).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(_OWN_MARKS):
            return f"its file {printable(f)} is a copy of one of reduce's"
    return None


def _head(path, n=256):
    """The first n bytes of a regular file, b"" of anything else: opened without blocking and never
    through a link (a file names the path, which may be a FIFO or a terminal)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        return f.read(n) if stat.S_ISREG(os.fstat(fd).st_mode) else b""


def printable(s):
    """s with every character that could drive a terminal or reorder the text around it (C0 and C1
    controls, DEL, the bidirectional controls, the line and paragraph separators) escaped, as
    fixtures.Printable does: a file's text in a message."""
    return _CONTROLS.sub(lambda m: repr(m.group())[1:-1] if m.group() in "\t\n\r" else
                         f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x80 else f"\\u{ord(m.group()):04x}", str(s))


_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


_OWN_MODULES = ("reduce_batch", "reduce_hooks", "reduce_collect", "reduce_replay")  # trust.OwnModules
_OWN_MARKS = (b'"""Record a failing PyTorch batch for `reduce`', b'"""Framework hooks for `reduce`',
              b"# reduce collector ", b'"""The replay worker and fork server of reduce\'s torch backend',
              b'"""reduce_batch')


def _open_status(data):
    """A fixture record's bytes with its first "status": "fixed" read as "status": "open": the
    status decides nothing that runs, and marking a fixture fixed (by hand, or `reduce fixed`)
    keeps it the user's (trust.openStatus)."""
    return re.sub(rb'"status"[ \t\n\r]*:[ \t\n\r]*"fixed"', b'"status": "open"', data, count=1)  # JSON's white space


def file_digest(path):
    """The SHA-256 of the file's bytes, as "sha256:<hex>"; of a fixture's record, with its
    status open (trust.Digest)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        if os.path.basename(path) == "fixture.json":
            h.update(_open_status(f.read()))
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def stored(digest):
    """The user's trust store's entry for digest (reduce_batch.trust_dir: what their recorder, their
    reduce or `reduce trust` recorded as theirs), or None: an entry is a regular file, never a link,
    whose JSON names that digest (trust.Store.Lookup)."""
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest or ""):
        return None
    try:
        path = os.path.join(reduce_batch.trust_dir(), digest[len("sha256:"):] + ".json")
    except OSError:  # no store: no HOME
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            entry = json.loads(f.read(1 << 20))
        except ValueError:
            return None
    return entry if isinstance(entry, dict) and entry.get("digest") == digest else None


def _git(cwd, *args, why=None):
    """git's output, run read-only in cwd (no optional locks, no prompt, no filesystem monitor: a
    repository's config may name one, and it would run), or None when it fails; why (a list)
    receives git's reason then."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        p = subprocess.run(["git", "-c", "core.fsmonitor=false", "-C", cwd, *args], capture_output=True, env=env,
                           timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        p = subprocess.CompletedProcess(args, 1, b"", str(e).encode())
    if p.returncode != 0 and why is not None:
        why.append((p.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit {p.returncode}"])[0])
    return p.stdout if p.returncode == 0 else None


def committed(root, path, digest):
    """(repository, whether the file at path is committed with its bytes (a fixture's record, its
    status aside) at HEAD of the git repository whose work tree holds root (never one found from
    the file's own folder, which may carry a .git of its own), a Git LFS pointer naming its digest
    too, and why not); trust.Committed. Without a repository, git's reason stands for it."""
    import hashlib

    top = _git(root, "rev-parse", "--show-toplevel", why=(reason := []))
    if top is None:  # in none, or one git refuses (another user's: safe.directory)
        return "".join(reason), False, ""
    top = os.fsdecode(top.rstrip(b"\n"))
    real_top, real = os.path.realpath(top), os.path.realpath(path)
    if not under(real, real_top):
        return top, False, "the file lies outside it"
    rel = os.path.relpath(real, real_top).replace(os.sep, "/")
    out = _git(real_top, "ls-tree", "-z", "-l", "--full-tree", "HEAD", "--", rel)
    meta = (out or b"").split(b"\0")[0].partition(b"\t")[0].split()
    obj = meta[2].decode("ascii", "replace") if len(meta) == 4 else ""
    h = {40: hashlib.sha1, 64: hashlib.sha256}.get(len(obj))
    if meta[1:2] != [b"blob"] or meta[0] not in (b"100644", b"100755") or h is None:
        return top, False, "not at its HEAD"
    h = h(b"blob %d\0" % os.path.getsize(real))
    with open(real, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() == obj:
        return top, True, ""
    if os.path.basename(real) == "fixture.json":  # its status aside (file_digest)
        blob = _git(real_top, "cat-file", "blob", obj)
        if blob is not None and "sha256:" + hashlib.sha256(_open_status(blob)).hexdigest() == digest:
            return top, True, ""
    pointer = _git(real_top, "cat-file", "blob", obj) if meta[3].isdigit() and int(meta[3]) <= 1024 else None
    lines = (pointer or b"").decode("ascii", "replace").splitlines()
    if lines[:1] and lines[0].startswith("version https://git-lfs.github.com/spec/") and f"oid {digest}" in lines:
        return top, True, ""
    return top, False, "changed since its HEAD"


def trusted(path, root):
    """(mine, how): whether the file at path, of a fixture directory, is the user's, so that the
    fixture runs what it names (docs/TRUST.md): its bytes in their
    trust store (stored), or committed with these bytes in the git repository that root lies in
    (committed); `how` says which, or why not. internal/trust's Check is Go's side. A batch file
    is the store's alone (trust.Of, replay)."""
    digest = file_digest(path)
    entry = stored(digest)
    if entry is not None:
        return True, {"recording": "written by your recorder", "fixture": "written by your reduce",
                      "allowed": "allowed with reduce trust"}.get(entry.get("kind"), "in your trust store")
    repo, ok, why = committed(root, path, digest)
    if ok:
        return True, f"committed in {repo}"
    where = f"not committed in {repo} ({why})" if os.path.isabs(repo or "") else \
        f"not committed in a git repository of {root} (git: {repo or 'not found'})"
    try:
        store = f"not in your trust store ({reduce_batch.trust_dir()})"
    except OSError as e:
        store = str(e)
    return False, f"{store}; {where}"
