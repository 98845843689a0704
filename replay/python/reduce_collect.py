# reduce collector 0.20.0: written by reduce at the root of its --out, and rewritten by it: do not edit.
"""The regression fixtures' test side, and the runtime that replays a recorded batch outside reduce.

Under pytest, this file (the conftest.py that reduce writes at the root of `--out`, by default
fixtures/regress/conftest.py) turns every fixture.json under it into test items: the minimal
batch, marked xfail(strict=True, raises=<the recorded exception>) while the fixture's "status" is
"open" and a guard once it is "fixed"; the batches that pass, with their checked outputs; and
the culprit samples as your Dataset yields them, through the `reduce_sample` fixture you define
in a conftest.py of your own. It needs reduce_batch.py (`reduce recorder > reduce_batch.py`) on
sys.path, or its folder in $REDUCE_BATCH_PATH. reduce's README, "The regression fixture", says
how to use it.

The same file is reduce's runtime (reduce's replay worker imports it as reduce_collect): running
a built-in op (run_op), importing a recorded step or an --entry function (resolve_step,
resolve_entry), emulating a device's memory (limit_device_memory), replaying a batch in a child
process (run_in_child), and the checks of the tests (summarize, check_result, check_outputs, the
sample rules). pytest is imported only when it can be: the worker runs without it.
"""

import contextlib
import ctypes
import functools
import json
import math
import os
import re
import shlex
import subprocess
import sys

if __name__ != "reduce_collect" and os.environ.get("REDUCE_BATCH_PATH"):
    sys.path.insert(0, os.environ["REDUCE_BATCH_PATH"])  # under pytest: reduce_batch.py's folder
try:
    import reduce_batch
except ImportError as e:
    raise ImportError("cannot import reduce_batch: save it on sys.path with `reduce recorder > reduce_batch.py`, "
                      "or set REDUCE_BATCH_PATH to its folder") from e
try:
    import pytest
except ImportError:  # reduce's worker: the runtime, without the collector
    pytest = None

__version__ = "0.20.0"  # reduce's version (replay.Version)
RECORD_VERSION = 2  # the fixture.json layout this collector reads (regress.RecordVersion)

# The runtime by its name, wherever this file was imported from (a conftest.py): a recorded step that
# needs it (reduce_hooks.lightning_step) imports reduce_collect.
sys.modules.setdefault("reduce_collect", sys.modules[__name__])


def _torch():
    import torch  # imported on first use: reduce's worker reports a missing torch itself

    return torch


class HarnessError(Exception):
    """A batch could not be run at all (an unreadable file, no op, a bad --entry): a failure of
    the harness, not of the step."""


# Built-in ops ------------------------------------------------------------------------------------

_REQUIRED = object()  # the default of an attribute that has none: the batch must give it

# The built-in ops as reduce's Go kernels define them (kernels.Lookup; TestPythonOpTable in
# reduce's replay package fails when the two differ): op -> (required tensors, optional tensors,
# {alias: tensor}, {attribute: PyTorch's default, or _REQUIRED}), by PyTorch's names. run_op
# passes every default explicitly, so torch runs with the defaults the Go kernels assume.
_OPS = {
    "cross_entropy": (("input", "target"), ("weight",), {},
                      {"ignore_index": -100, "reduction": "mean", "label_smoothing": 0.0}),
    "nll_loss": (("input", "target"), ("weight",), {}, {"ignore_index": -100, "reduction": "mean"}),
    "binary_cross_entropy": (("input", "target"), ("weight",), {}, {"reduction": "mean"}),
    "embedding": (("input", "weight"), (), {},
                  {"padding_idx": None, "scale_grad_by_freq": False, "sparse": False}),
    "index_select": (("input", "index"), (), {}, {"dim": _REQUIRED}),
    "gather": (("input", "index"), (), {}, {"dim": _REQUIRED, "sparse_grad": False}),
    "scatter_add": (("input", "index", "src"), (), {}, {"dim": _REQUIRED}),
    "one_hot": (("tensor",), (), {"input": "tensor"}, {"num_classes": -1}),
    "index": (("input", "index"), (), {}, {"dim": 0}),
}


def _op_args(op, tensors, attrs):
    """Check the batch's tensors and attributes against the op: (tensors by canonical name, every
    attribute with the given value or its default)."""
    if op not in _OPS:
        raise HarnessError("unknown op {!r} (built-in ops: {})".format(op, ", ".join(sorted(_OPS))))
    required, optional, aliases, defaults = _OPS[op]
    t = {}
    for name, v in tensors.items():
        canon = aliases.get(name, name)
        if canon not in required and canon not in optional:
            raise HarnessError("{} takes no tensor {!r} (takes {})".format(op, name, ", ".join(required + optional)))
        if canon in t:
            raise HarnessError(f"{op}: tensor {canon!r} given twice (under an alias)")
        t[canon] = v
    for name in required:
        if name not in t:
            raise HarnessError(f"{op}: missing tensor {name!r}")
    for name in attrs:
        if name not in defaults:
            raise HarnessError("{} takes no attribute {!r} (takes {})".format(op, name, ", ".join(defaults) or "none"))
    a = {}
    for name, default in defaults.items():
        if name in attrs:
            a[name] = attrs[name]
        elif default is _REQUIRED:
            raise HarnessError(f"{op}: missing attribute {name!r}")
        else:
            a[name] = default
    return t, a


def run_op(op, tensors, attrs):
    """Run a built-in op through torch: the same names and attributes as reduce's Go kernels, as
    keyword arguments of torch's functions. A failure is torch's own exception."""
    torch = _torch()
    import torch.nn.functional as F

    t, a = _op_args(op, tensors, attrs)
    if op == "cross_entropy":
        return F.cross_entropy(t["input"], t["target"], weight=t.get("weight"), **a)
    if op == "nll_loss":
        return F.nll_loss(t["input"], t["target"], weight=t.get("weight"), **a)
    if op == "binary_cross_entropy":
        return F.binary_cross_entropy(t["input"], t["target"], weight=t.get("weight"), **a)
    if op == "embedding":
        return F.embedding(t["input"], t["weight"], **a)
    if op == "index_select":
        return torch.index_select(t["input"], a["dim"], t["index"])
    if op == "gather":
        dim = a.pop("dim")
        return torch.gather(t["input"], dim, t["index"], **a)
    if op == "scatter_add":
        return torch.scatter_add(t["input"], a["dim"], t["index"], t["src"])
    if op == "one_hot":
        return F.one_hot(t["tensor"], **a)
    if op == "index":
        # input[(slice(None),) * dim + (index,)]
        return t["input"][(slice(None),) * a["dim"] + (t["index"],)]
    # An op in _OPS without a branch here: its call is still to write.
    raise HarnessError(f"{op} is in the op table but run_op does not run it")



# Recorded steps and --entry functions ----------------------------------------------------------


def resolve_entry(entry):
    """The function of an --entry "module:function": module is a dotted name (imported from the
    working directory or PYTHONPATH) or a path to a .py file, whose folder goes first on sys.path;
    function may be dotted. Raises HarnessError (an import error's traceback is printed to stderr
    first)."""
    import importlib
    import traceback

    mod_name, sep, attr = entry.rpartition(":")
    if not sep or not mod_name or not attr:
        raise HarnessError(f"--entry {entry!r}: want module:function")
    try:
        if mod_name.endswith(".py") or os.sep in mod_name:
            import importlib.util

            path = os.path.abspath(mod_name)
            if sys.path[:1] != [os.path.dirname(path)]:
                sys.path.insert(0, os.path.dirname(path))  # its imports (a sibling model.py) as a script's
            name = "_reduce_entry_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
            mod = sys.modules.get(name)
            if mod is None or getattr(mod, "__file__", None) != path:
                spec = importlib.util.spec_from_file_location(name, path)
                if spec is None:
                    raise HarnessError(f"--entry {entry!r}: cannot import {path}")
                mod = importlib.util.module_from_spec(spec)
                sys.modules[name] = mod
                try:
                    spec.loader.exec_module(mod)
                except BaseException:
                    del sys.modules[name]
                    raise
        else:
            mod = importlib.import_module(mod_name)
    except HarnessError:
        raise
    except Exception as e:  # whatever the user's module raises at import: a harness failure
        traceback.print_exc()
        raise HarnessError(f"--entry {entry!r}: cannot import {mod_name}: {type(e).__name__}: {e} "
                           f"(sys.path: {', '.join(sys.path)})") from e
    obj = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HarnessError(f"--entry {entry!r}: {mod_name} has no attribute {attr!r}")
    if not callable(obj):
        raise HarnessError(f"--entry {entry!r}: {mod_name}.{attr} is not callable")
    return obj


def _step_paths(step):
    """The folders the recorded step is imported from, first first: the root of its module's
    package (the folder of its file for a top-level module), then the working directory it ran
    in, as when the user ran their script."""
    out = []
    f, mod = step.get("file"), step.get("module", "")
    if f:
        root = os.path.dirname(os.path.abspath(f))
        if mod != "__main__":
            parts = mod.split(".")
            if os.path.splitext(os.path.basename(f))[0] == "__init__":
                parts = parts[:-1]
            for _ in parts[:-1]:
                root = os.path.dirname(root)
        out.append(root)
    if step.get("cwd"):
        out.append(step["cwd"])
    return out


def _script(path):
    """The recorded script, or the file of its name on sys.path (the working directory first)
    when the recorded path is gone: another checkout of the same repository, in CI."""
    if os.path.exists(path):
        return path
    base = os.path.basename(path)
    for d in [os.getcwd()] + sys.path:
        if d and os.path.isfile(os.path.join(d, base)):
            return os.path.join(d, base)
    return path


# Set by reduce's worker (unless --trust-step) and by the collector: step_check(step, target, what)
# raises HarnessError for a recorded step (or class) it does not trust, before resolve_step imports
# anything for it (StepTrust).
step_check = None


def resolve_step(step, chdir=False, what="step"):
    """The function of a step recorded with a batch ({module, qualname, file, cwd}): its folders
    put first on sys.path (and, with chdir, the working directory it ran in made current), then
    imported by name, or from its file when it was defined in the script that was run. Raises
    HarnessError naming the module and the sys.path tried. `what` names it in errors (a
    LightningModule class is resolved the same way)."""
    paths = _step_paths(step)
    for d in reversed(paths):
        if d in sys.path:
            sys.path.remove(d)
        sys.path.insert(0, d)
    if chdir and step.get("cwd") and os.path.isdir(step["cwd"]):
        os.chdir(step["cwd"])
    if step.get("module") == "__main__":
        if not step.get("file"):
            raise HarnessError("the step {} was defined in an interactive session (module __main__ without a "
                               "file): define it in a file".format(step.get("qualname")))
        target = "{}:{}".format(_script(step["file"]), step["qualname"])
    else:
        target = "{}:{}".format(step["module"], step["qualname"])
    if step_check is not None:
        step_check(step, target, what)
    try:
        return resolve_entry(target)
    except HarnessError as e:
        why = str(e).replace(f"--entry {target!r}: ", "")
        # The recorder's own check of a script (a reduce_batch of another version may lack it).
        trains = getattr(reduce_batch, "_runs_at_import", lambda path: 0)
        line = step.get("module") == "__main__" and trains(_script(step["file"]))
        if line:
            why += f"; the script runs code when imported (line {line}): put it under `if __name__ == \"__main__\":`"
        raise HarnessError("the recorded {} {}: {}".format(what, target, why.replace("(sys.path: ", "(sys.path tried: ")))


class StepTrust:
    """step_check of reduce's worker without --trust-step, and of the collector (its tree pytest's
    root directory): a recorded step (or class) is
    imported only when every file whose code its import would run (its module's, and its
    parent packages' __init__.py) lies under `tree` (the worker's working directory when it
    started: reduce's, the user's repository) and is not a standard-library or installed module
    (site-packages or dist-packages, the interpreter's stdlib or prefix, a built-in or frozen
    module). The files are found as the import would find them (sys.modules, then the finders of
    sys.meta_path over the sys.path resolve_step set up) without running any of them. A module
    that is not found is let through: its import fails by itself, and runs nothing.
    reduce_hooks:lightning_step beside this file is reduce's own (the worker's copy): the class it
    rebuilds comes through here too."""

    def __init__(self, tree):
        self.tree = os.path.realpath(tree)

    def __call__(self, step, target, what):
        hooks = getattr(sys.modules.get("reduce_hooks"), "__file__", None)
        if (step.get("module"), step.get("qualname")) == ("reduce_hooks", "lightning_step") and hooks and \
                os.path.dirname(os.path.abspath(hooks)) == os.path.dirname(os.path.abspath(__file__)):
            return
        if step.get("module") == "__main__":
            files = [("its script", target.rpartition(":")[0])]
        else:
            files = _module_files(step.get("module", ""))
        for name, origin in files:
            why = self.untrusted(origin)
            if why:
                raise HarnessError(
                    f"the recorded {what} {target} is not replayed: {name} ({origin}) {why}. reduce replays a "
                    "recorded step only from a file under the directory it runs in that is not installed, since a "
                    "batch file may come from someone else: to replay it anyway, give --trust-step; or replay a "
                    "step of yours with --entry MODULE:FUNCTION")

    def untrusted(self, origin):
        """Why a module's file is not to be run, or None."""
        if origin in ("built-in", "frozen") or not origin or not os.path.isabs(origin):
            return "is a built-in or frozen module" if origin in ("built-in", "frozen") else "has no file"
        real = os.path.realpath(origin)
        if _installed(real, self.tree):
            return "is a standard-library or installed module"
        if not _under(real, self.tree):
            return f"lies outside {self.tree}, the directory reduce runs in"
        return None


def _under(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _installed(real, tree):
    """Whether the file at real (symbolic links resolved) is the interpreter's: in a
    site-packages or dist-packages folder, the standard library, or under the interpreter's
    prefix (unless the tree itself lies there: a repository under /usr with Debian's /usr
    prefix is still the user's)."""
    import site
    import sysconfig

    if {"site-packages", "dist-packages"} & set(real.split(os.sep)):
        return True
    dirs = [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    for fn in ("getsitepackages", "getusersitepackages"):
        with contextlib.suppress(AttributeError):  # a virtualenv's old site.py lacks them
            got = getattr(site, fn)()
            dirs += [got] if isinstance(got, str) else list(got)
    if any(d and _under(real, os.path.realpath(d)) for d in dirs):
        return True
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        p = os.path.realpath(p)
        if _under(real, p) and not _under(tree, p):
            return True
    return False


def _module_files(name):
    """[(module name, its file, or "built-in" or "frozen")] of the modules whose code
    `import name` would run, its parent packages first, found without running any: the module
    sys.modules holds, else the spec the finders of sys.meta_path give, in their order, as the
    import asks them. A namespace package (no code) is left out; the list stops at a module
    that is not found (the import fails there)."""
    out, path = [], None
    parts = name.split(".")
    for i in range(len(parts)):
        sub = ".".join(parts[:i + 1])
        m = sys.modules.get(sub)
        if m is not None:
            spec = getattr(m, "__spec__", None)
            origin = getattr(m, "__file__", None) or (spec.origin if spec is not None else None) or "built-in"
            locations = getattr(m, "__path__", None)
        else:
            spec = _find_spec(sub, path)
            if spec is None:
                return out
            origin, locations = spec.origin, spec.submodule_search_locations
            if origin in (None, "namespace") and locations is not None:
                origin = None  # a namespace package: no code of its own
        if origin is not None:
            out.append((f"its {'module' if i == len(parts) - 1 else 'package'} {sub}", origin))
        if locations is None:
            return out  # not a package: importing a submodule of it fails after running it
        path = list(locations)
    return out


def _find_spec(name, path):
    """The spec the import system finds for name (path: its parent's __path__, None for a
    top-level module), asking the finders of sys.meta_path in order, as importing it would;
    finding it runs none of its code."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(name, path)
        if spec is not None:
            return spec
    return None


def restore_rng(state):
    """Set the random generators (torch, CUDA, random, numpy) to their states at the crash, as a
    State (reduce_batch.load's .state) records them under "rng"."""
    rng, torch = state.get("rng") or {}, _torch()
    if rng.get("torch") is not None:
        torch.set_rng_state(rng["torch"].cpu())
    if rng.get("cuda") and torch.cuda.is_available():
        with contextlib.suppress(RuntimeError):  # a device in an error state
            torch.cuda.set_rng_state_all([t.cpu() for t in rng["cuda"]])
    if rng.get("random") is not None:
        import random

        v = rng["random"]
        random.setstate((v[0], tuple(v[1]), v[2]))
    if rng.get("numpy") is not None:
        try:
            import numpy
        except ImportError:
            return
        v = rng["numpy"]
        numpy.random.set_state((v[0], numpy.asarray(v[1].cpu().numpy(), dtype=numpy.uint32), v[2], v[3], v[4]))


def _call_step(fn, batch):
    """The recorded step's contract: step(batch) with the batch as the loader yielded it, or
    step(batch, state) when a state was recorded (the random generators restored first)."""
    if batch.state is not None:
        restore_rng(batch.state)
        return fn(batch.data, batch.state)
    return fn(batch.data)


def run_step(batch):
    """Run the step a Batch records, as reduce replays it: imported by name (resolve_step), called
    with the batch as the loader yielded it (and the recorded state)."""
    if not batch.step:
        raise HarnessError(f"{batch.path} records no step")
    return _call_step(resolve_step(batch.step), batch)


def imported_type(type_path):
    """The class a replay rebuilds a recorded named tuple or mapping with (reduce_batch.load's
    types), so that the step gets the batch as the loader yielded it: the class of that
    "module:qualname" when the step's own import already brought it (its module in sys.modules,
    or an attribute of its imported top-level package: transformers.BatchEncoding, which a lazily
    loaded package imports on access), and only a named tuple or Mapping class. Nothing is
    imported by name; another is rebuilt as load() rebuilds it by default."""
    import collections.abc

    mod, _, qual = type_path.partition(":")
    obj = sys.modules.get(mod) or sys.modules.get(mod.split(".")[0] if "." in mod else "")
    try:
        for n in qual.split(".") if obj is not None else ():
            obj = getattr(obj, n, None)
    except Exception:  # noqa: BLE001  (a lazy attribute whose import failed)
        obj = None
    if isinstance(obj, type) and f"{obj.__module__}:{obj.__qualname__}" == type_path and (
            issubclass(obj, collections.abc.Mapping) or (issubclass(obj, tuple) and hasattr(obj, "_fields"))):
        return obj
    if type_path not in _warned:
        _warned.add(type_path)
        sys.stderr.write(f"reduce_batch: {type_path} is rebuilt without its class (a named tuple of its fields, "
                         "or a dict): the step's import did not bring it (import it in the step's module to replay "
                         "it as recorded)\n")
    return None


_warned = set()


def _recorded_step(source):
    """The step a candidate (a file's path, or a worker's plan) records, when it has no op."""
    try:
        m = source["manifest"] if isinstance(source, dict) else reduce_batch.read_manifest(source)[0]
        m = json.loads(m) if isinstance(m, (str, bytes)) else m
    except (OSError, reduce_batch.BatchFileError, KeyError, TypeError, ValueError) as e:
        raise HarnessError(f"cannot load the candidate: {e}")
    return m.get("step") if not m.get("op") else None


def load_candidate(source, device="cpu", entry=None, step=None, load=None):
    """(the batch loaded on device, the function of the Batch that runs it: None for its op), as
    reduce's replays load a candidate: the --entry function (called with the Batch), else the step
    (`step`, or the one the file records) called as _call_step does. `load` reads `source` (a
    file's path by default; reduce's worker passes its plan loader). HarnessError when the batch
    cannot run: the entry or step does not resolve, the file does not load, or it records no op,
    no step and no entry is given. The entry or step is imported first, so that an import error
    is said first and the batch is rebuilt with the classes its import brought (imported_type)."""
    if load is None:
        load, source = reduce_batch.load, os.path.abspath(source)
    fn = resolve_entry(entry) if entry else None
    step = _recorded_step(source) if fn is None and step is None else step
    if fn is None and step is not None:
        fn = functools.partial(_call_step, resolve_step(step, chdir=True))
    try:
        batch = load(source, device=device, types=imported_type)
    except (OSError, reduce_batch.BatchFileError, KeyError, TypeError) as e:
        raise HarnessError(f"cannot load the candidate: {e}")
    if fn is None and not batch.op:
        raise HarnessError(f"{batch.path}: the batch records no op and no step: replay it with --entry module:function "
                           "or --backend exec, or record it with step=")
    return batch, fn


def run_loaded(batch, fn, device):
    """Run the batch's op (or fn, called with the batch), then wait for the device: a CUDA
    kernel's failure is reported asynchronously, so it must surface here, not later."""
    torch = _torch()
    out = fn(batch) if fn is not None else run_op(batch.op, batch.tensors, batch.attrs)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return out


def replay(path, device="cpu", entry=None, step=None):
    """Run a batch file as reduce's torch backend does: load it on `device` (its tensors rebuilt
    with as_strided), run the function of `entry` ("module:function", see resolve_entry) called
    with the Batch, or else the recorded step (step(batch) with the batch as the loader yielded
    it, step(batch, state) with a recorded state), or else its op through run_op; then
    synchronize the device. Returns the output; a failure of the step is the exception it
    raises, HarnessError when the batch cannot run. After a device-side assert the process's
    CUDA context is unusable: run_in_child replays in a child process."""
    batch, fn = load_candidate(path, device, entry, step)
    return run_loaded(batch, fn, device)


# Device memory (--device-memory) ---------------------------------------------------------------


def _vm_data():
    """The process's data size in bytes (VmData of /proc/self/status: what RLIMIT_DATA limits)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise HarnessError("--device-memory: no VmData in /proc/self/status")


def _malloc_top():
    """The free bytes at the top of glibc's main heap (mallinfo2().keepcost), 0 when unknown. They
    are inside VmData already; an allocation that glibc cannot mmap under the limit extends the
    heap from them (brk), so the limit must leave them out to count what the op allocates."""

    class _MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]

    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return 0
    fn.restype = _MallInfo2
    return int(fn().keepcost)


def limit_device_memory(device, nbytes):
    """Let this process allocate at most `nbytes` more on `device` from now on (reduce's
    --device-memory, run_in_child's device_memory: emulating a device of that size, so that a
    failure that depends on the batch size alone reproduces). On cuda, the caching allocator's
    memory fraction: what it has reserved so far (the CUDA context's first block, the loaded
    batch) plus nbytes. On the CPU, RLIMIT_DATA:
    the data size now plus nbytes, less the free top of the heap (_malloc_top); an allocation
    past it makes torch's DefaultCPUAllocator raise "can't allocate memory". The intra-op thread
    pool is started first: its threads' stacks are data mappings too, and must not count against
    the op. Free chunks inside the heap may still serve small allocations unseen: the limit is
    exact to a page for an op's large buffers, not for its small ones. Returns a function that
    lifts the limit again (for the summary of the output, which is the harness's, not the op's)."""
    torch = _torch()
    d = torch.device(device)
    if d.type == "cuda":
        index = d.index if d.index is not None else torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory
        reserved = torch.cuda.memory_reserved(index)
        torch.cuda.set_per_process_memory_fraction(min(1.0, (reserved + nbytes) / float(total)), index)
        return lambda: torch.cuda.set_per_process_memory_fraction(1.0, index)
    import resource

    try:
        # One malloc arena: a thread's first allocation would otherwise map an arena of its own,
        # counted against the limit though the op never asked for it.
        ctypes.CDLL(None).mallopt(-8, 1)  # M_ARENA_MAX (glibc malloc.h)
    except (OSError, AttributeError):
        pass
    if torch.get_num_threads() > 1:
        torch.ones(1 << 18).sum()  # a parallel reduction: the pool's threads exist from here on
    old = resource.getrlimit(resource.RLIMIT_DATA)
    soft = max(_vm_data() + nbytes - _malloc_top(), 0)
    if old[1] != resource.RLIM_INFINITY:
        soft = min(soft, old[1])
    resource.setrlimit(resource.RLIMIT_DATA, (soft, old[1]))
    return lambda: resource.setrlimit(resource.RLIMIT_DATA, old)


# Replays in a child process --------------------------------------------------------------------


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


_SUMMARY_LINE = "reduce_collect-summary: "
_TRACEBACK_HEAD = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::(?: (.*))?)?$")
# The child: this runtime, imported from its file (a conftest.py too) as reduce_collect, with the
# folder of the reduce_batch this process imported first on sys.path and the working directory next
# (where an --entry module is, as reduce's replays have it); then _child_replay.
_CHILD_CODE = """import importlib.util, os, sys
sys.path[:0] = [sys.argv[1], os.getcwd()]
spec = importlib.util.spec_from_file_location("reduce_collect", sys.argv[2])
rc = sys.modules["reduce_collect"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rc)
rc.step_check = rc.StepTrust(os.environ["REDUCE_STEP_ROOT"]) if os.environ.get("REDUCE_STEP_ROOT") else None
rc._child_replay(*sys.argv[3:])
"""


def _child_replay(path, device, entry, device_memory, seed=""):
    """run_in_child's child: replay(path, device, entry) with the limit of --device-memory set
    between the load and the run and the seed of --seed before it, as reduce_replay.replay does;
    then the summary line."""
    batch, fn = load_candidate(path, device, entry or None)
    if seed:
        _torch().manual_seed(int(seed))
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
    its own, which check_exception's rule (first line, then more) allows to be followed by more."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line == _TRACEBACK_HEAD]
    if not starts:
        return None
    for i in range(starts[-1] + 1, len(lines)):
        line = lines[i]
        if not line or line[0].isspace():
            continue  # a frame, its source line, its ^^^ marks
        m = _EXCEPTION_LINE.match(line)
        if m is None:
            return None
        return m.group(1), "\n".join([m.group(2) or ""] + lines[i + 1:]).rstrip()
    return None


def _exception_of(name, message):
    """A new exception of the class `name` with `message`, or None when the class cannot be
    imported here, is no Exception or cannot be made from one string. A KeyError's message is the
    repr of its argument: the argument is read back from it, so that str() gives the message."""
    import ast

    try:  # whatever importing the class's module or making one raises: no exception of it here
        cls = _exception_class(name)
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
    cmd = [sys.executable, "-c", _CHILD_CODE, os.path.dirname(os.path.abspath(reduce_batch.__file__)),
           os.path.abspath(__file__), os.path.abspath(os.fspath(path)), str(device), entry or "",
           str(int(device_memory or 0)), "" if seed is None else str(int(seed))]
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", AMD_SERIALIZE_KERNEL="3", REDUCE_REPLAY="1",
               REDUCE_STEP_ROOT=getattr(step_check, "tree", ""))  # the child trusts what this process does
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
        if name == "reduce_collect.HarnessError":
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


def _exception_class(name):
    """The class a dotted name (torch.cuda.OutOfMemoryError) or a builtin's name names, or None:
    found among the modules already imported (torch is), never by importing what a record names."""
    import builtins

    _torch()
    parts = name.split(".")
    obj = getattr(builtins, name, None) if len(parts) == 1 else sys.modules.get(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


# Checks of a batch's outputs and of the samples -------------------------------------------------


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields") and hasattr(type(x), "_make")


def _outputs(out):
    if isinstance(out, dict):
        return dict(out)
    if isinstance(out, (tuple, list)):
        return {f"output{i}": v for i, v in enumerate(out)}
    return {"output": out}


def check_outputs(out, expected):
    """Assert that a step's outputs (a tensor, a
    tuple or list, or a dict of them) match `expected`, fixture.json's boundary outputs: for each,
    name, dtype, shape, and its values (or their sum) within rtol/atol, compared in float64."""
    torch = _torch()
    got = _outputs(out)
    for want in expected:
        name = want["name"]
        assert name in got, f"no output {name!r} (got {sorted(got)})"
        t = got[name]
        assert isinstance(t, torch.Tensor), f"output {name!r} is a {type(t).__name__}, not a tensor"
        t = t.detach().cpu()
        assert str(t.dtype).replace("torch.", "") == want["dtype"], f"output {name!r}: dtype {t.dtype}"
        assert list(t.shape) == want["shape"], f"output {name!r}: shape {list(t.shape)}"
        flat = t.reshape(-1).to(torch.float64)
        if want.get("sum") is not None:
            got_v, want_v = flat.sum(), torch.tensor(want["sum"], dtype=torch.float64)
        else:
            got_v, want_v = flat, torch.tensor(want["values"], dtype=torch.float64)
        torch.testing.assert_close(got_v, want_v, rtol=want["rtol"], atol=want["atol"], equal_nan=True,
                                   msg=functools.partial("output {!r}: {}".format, name))


_SUMMARY_KEYS = frozenset(["path", "dtype", "shape", "finite"])


def summarize(out):
    """A JSON-able description of a step's or an op's
    output, one dict per tensor or Python number found in it, walking dicts and mappings (keys
    sorted), lists, tuples and named tuples (other values are left out): {"path": where it is,
    its keys and positions joined by "." as reduce names a batch's tensors ("" for a bare
    tensor, "0.loss"), "dtype": torch's name ("float32"; "float", "int" or "bool" for a Python
    number), "shape": [...] ([] for a number), "finite": no element is NaN or infinite (True for
    integers and booleans)}."""
    torch = _torch()
    found = []

    def walk(x, path):
        if isinstance(x, torch.Tensor):
            t = x.detach()
            finite = True
            if (t.dtype.is_floating_point or t.dtype.is_complex) and t.numel():
                finite = bool(torch.isfinite(t).all())
            found.append({"path": path, "dtype": str(t.dtype).replace("torch.", ""),
                          "shape": [int(n) for n in t.shape], "finite": finite})
        elif isinstance(x, (bool, int, float)):
            dtype = "bool" if isinstance(x, bool) else "int" if isinstance(x, int) else "float"
            found.append({"path": path, "dtype": dtype, "shape": [], "finite": dtype != "float" or math.isfinite(x)})
        else:
            for name, child in _children(x, sort=True) or ():
                walk(child, f"{path}.{name}" if path else name)

    walk(out, "")
    return found


def _children(x, sort=False):
    """[(name, part)] of a container as _Flattener names a batch's parts: a dict's or a mapping's
    keys (sorted with sort), a named tuple's fields, a list's or a tuple's positions; None for
    anything else (a tensor, an array, a string: a leaf)."""
    torch = _torch()
    if isinstance(x, (torch.Tensor, str, bytes)):
        return None
    if isinstance(x, getattr(sys.modules.get("numpy"), "ndarray", ())):
        return None
    if _is_namedtuple(x):
        return list(zip(type(x)._fields, x))
    if isinstance(x, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(x)]
    if isinstance(x, dict) or (hasattr(x, "keys") and hasattr(x, "__getitem__")):
        keys = list(x.keys())
        if sort:
            keys.sort(key=str)
        return [(str(k), x[k]) for k in keys]
    return None


def _summary_of(x):
    """x itself when it is a summary (a list of summarize's dicts), else summarize(x)."""
    if isinstance(x, list) and all(isinstance(d, dict) and set(d) == _SUMMARY_KEYS for d in x):
        return x
    return summarize(x)


def _output_name(path):
    return f"output {path!r}" if path else "the output"


def check_result(out, like=None):
    """Assert that an output (a live one, or its
    summary: run_in_child's result) holds no NaN or infinity, and, when `like` is given (a
    summary, or an output, which is summarized), that it has the same paths, with the same dtypes
    and shapes. Returns the output's summary."""
    got = _summary_of(out)
    for d in got:
        assert d["finite"], "{} ({}{}) is not finite: it holds NaN or an infinity".format(
            _output_name(d["path"]), d["dtype"], list(d["shape"]))
    if like is not None:
        want = _summary_of(like)
        by_path = {d["path"]: d for d in got}
        want_paths = {d["path"] for d in want}
        missing = [d["path"] for d in want if d["path"] not in by_path]
        extra = [d["path"] for d in got if d["path"] not in want_paths]
        diff = []
        if missing:
            diff.append("missing {}".format(", ".join(map(repr, missing))))
        if extra:
            diff.append("unexpected {}".format(", ".join(map(repr, extra))))
        assert not diff, "the output's parts differ: {}".format("; ".join(diff))
        for w in want:
            g = by_path[w["path"]]
            assert (g["dtype"], list(g["shape"])) == (w["dtype"], list(w["shape"])), "{}: {}{}, want {}{}".format(
                _output_name(w["path"]), g["dtype"], list(g["shape"]), w["dtype"], list(w["shape"]))
    return got


def _sample_parts(x, rest):
    """The parts of a sample that the dotted name `rest` names, in the order _Flattener meets
    them. A key may hold "." itself (names are not escaped), so every split is tried."""
    if rest == "":
        yield x
        return
    children = _children(x)
    if children is None:
        return
    if _is_namedtuple(x):  # a named tuple that the collate made a list (or a plain tuple)
        children = children + [(str(i), v) for i, v in enumerate(x)]
    for name, child in children:
        if rest == name:
            yield child
        elif rest.startswith(name + "."):
            yield from _sample_parts(child, rest[len(name) + 1:])


def _sample_missing(sample, tensor):
    """Why the sample has nothing named `tensor`: the key missing, and the keys there are."""
    x, done, rest = sample, "", tensor
    while rest:
        children = _children(x)
        where = "the sample" if not done else repr(done)
        if children is None:
            return f"{where} is a {type(x).__name__}, which has no {rest!r}"
        if _is_namedtuple(x):
            children = children + [(str(i), v) for i, v in enumerate(x)]
        matched = [(n, c) for n, c in children if rest == n or rest.startswith(n + ".")]
        if not matched:
            names = [n for n, _ in children]
            if isinstance(x, (list, tuple)) and not _is_namedtuple(x):
                has = f"{type(x).__name__} of {len(x)} items"
            else:
                has = "keys " + (", ".join(repr(n) for n in names[:20]) + (", ..." if len(names) > 20 else "")
                                 if names else "none")
            return "{} has no {!r} (it has {})".format(where, rest.split(".")[0], has)
        name, x = matched[0]
        done, rest = (done + "." + name) if done else name, rest[len(name) + 1:]
    return f"no part named {tensor!r}"


def _sample_leaf(sample, tensor):
    parts = list(_sample_parts(sample, tensor))
    if parts:
        return parts[0]
    m = re.match(r"^(.+)#(\d+)$", tensor)  # _Flattener's name of the n-th part named alike
    if m:
        parts = list(_sample_parts(sample, m.group(1)))
        if len(parts) >= int(m.group(2)):
            return parts[int(m.group(2)) - 1]
    if tensor == "batch" and _children(sample) is None:
        return sample  # a batch that is one tensor: _Flattener names it "batch"
    raise KeyError(f"batch tensor {tensor!r}: {_sample_missing(sample, tensor)}. reduce_sample must return the "
                   "sample as the Dataset yields it (before the collate), with the keys of the batch")


def _is_array(x):
    return isinstance(x, (_torch().Tensor, getattr(sys.modules.get("numpy"), "ndarray", ())))


def _python_value(x, tensor, index):
    if _is_array(x):
        if tuple(x.shape) != ():
            raise IndexError(f"batch tensor {tensor!r}: index {index} names a part of shape {list(x.shape)} of the "
                             "sample, not one element: give one index per dim (without the batch dim)")
        return x.item()
    if hasattr(x, "item") and tuple(getattr(x, "shape", (None,))) == ():  # a numpy scalar (np.float64 is a float)
        return x.item()
    if isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"batch tensor {tensor!r}: index {index} names a {type(x).__name__} in the sample, not a number")


def _sample_element(leaf, tensor, index):
    x = leaf
    for k, i in enumerate(index):
        if _is_array(x):
            rest = [int(j) for j in index[k:]]
            shape = list(x.shape)
            if len(rest) > len(shape) or any(not -n <= j < n for j, n in zip(rest, shape)):
                raise IndexError(f"batch tensor {tensor!r}: index {index} is outside the sample's {type(x).__name__} "
                                 f"of shape {shape} (is the batch's tensor padded past this sample?)")
            x = x[tuple(rest)]
            break
        if isinstance(x, (list, tuple)):
            if not -len(x) <= i < len(x):
                raise IndexError(f"batch tensor {tensor!r}: index {index} is outside the sample's list of {len(x)} "
                                 f"items at dim {k} (is the batch's tensor padded past this sample?)")
            x = x[i]
            continue
        raise IndexError(f"batch tensor {tensor!r}: index {index} goes into a {type(x).__name__} in the sample")
    return _python_value(x, tensor, index)


def _sample_size(x, tensor, dim):
    if _is_array(x):
        if not 0 <= dim < len(x.shape):
            raise IndexError(f"batch tensor {tensor!r}: the sample's {type(x).__name__} of shape {list(x.shape)} has "
                             f"no dim {dim}")
        return int(x.shape[dim])
    if isinstance(x, (str, bytes, list, tuple)):
        if dim == 0:
            return len(x)
        if isinstance(x, (list, tuple)):
            return max([_sample_size(c, tensor, dim - 1) for c in x] or [0])  # the size a collate pads to
    raise IndexError(f"batch tensor {tensor!r}: the sample's {type(x).__name__} has no size along dim {dim}")


def sample_value(sample, tensor, index, dim=0):
    """The element of one sample, as the user's
    Dataset yields it (before the collate), that the batch tensor `tensor` holds at `index`.
    `tensor` is reduce's name of the batch tensor: its dict keys, named tuple fields and list
    positions joined by "." ("label", "1.mask", "inputs.ids"; "batch" for a batch that is one
    tensor), found in the sample the same way (a dict, a mapping such as BatchEncoding, a list,
    a tuple, a named tuple). `index` is the element's index without the batch dim (a list, []
    for a sample that is one number); the part found is indexed (a tensor, a numpy array, nested
    lists) and the element returned as a Python int, float or bool (a str for a string). With
    index None, the part's size along `dim` (counted without the batch dim): a tensor's shape,
    a list's or a string's length, the longest of nested lists. KeyError when the sample has no
    such part, naming the key missing and the keys there are."""
    leaf = _sample_leaf(sample, tensor)
    if index is None:
        return _sample_size(leaf, tensor, int(dim))
    return _sample_element(leaf, tensor, [int(i) for i in index])


_RULE_KINDS = ("range", "finite", "max_size", "distinct")


def _rule_subject(rule):
    """What a rule's check is about, for its message: "sample 'txt-037': label" from the rule's
    optional "sample", "tensor", "index" and "dim" keys."""
    head = "sample {!r}: ".format(rule["sample"]) if rule.get("sample") is not None else ""
    what = rule.get("tensor") or "the value"
    if rule.get("kind") == "max_size":
        return f"{head}size of {what} along dim {int(rule.get('dim') or 0)}"
    if rule.get("index"):
        what = "{}{}".format(what, list(rule["index"]))
    return head + what


def _number(v):
    return f"{v!r}"


def check_sample_rule(value, rule):
    """Assert that one sample's value (sample_value's)
    obeys the rule reduce found for the failure, a dict: {"kind": "range", "lo", "hi",
    "hi_inclusive"} (lo inclusive; lo or hi None: unbounded), {"kind": "finite"}, or {"kind":
    "max_size", "max", "dim"} (value is a size: sample_value with index None and this dim). Its
    optional keys "sample" (the sample's id), "tensor", "index" and "text" (the rule in words)
    go into the message. A "distinct" rule is about several samples: check_distinct."""
    kind = rule.get("kind")
    if kind == "distinct":
        raise ValueError("a distinct rule is about several samples: check it with check_distinct(values, ids)")
    number = isinstance(value, (int, float))  # a bool too
    if kind == "range":
        lo, hi, hi_inclusive = rule.get("lo"), rule.get("hi"), bool(rule.get("hi_inclusive"))
        want = "a value in {}{}, {}{}".format("(-inf" if lo is None else "[", "" if lo is None else _number(lo),
                                          "inf)" if hi is None else _number(hi),
                                          "" if hi is None else "]" if hi_inclusive else ")")
        ok = number and not math.isnan(value) and (lo is None or value >= lo) and (
            hi is None or (value <= hi if hi_inclusive else value < hi))
    elif kind == "finite":
        want = "a finite value"
        ok = number and math.isfinite(value)
    elif kind == "max_size":
        want = f"at most {rule['max']}"
        ok = number and value <= rule["max"]
    else:
        raise ValueError("rule kind {!r}: want one of {}".format(kind, ", ".join(_RULE_KINDS)))
    found = " (the rule reduce found: {})".format(rule["text"]) if rule.get("text") else ""
    assert ok, f"{_rule_subject(rule)} = {value!r}, want {want}{found}"


def check_distinct(values, ids):
    """Assert that the samples' values (sample_value's,
    one per id of `ids`) all differ (a "distinct" rule); the message names the ids that share a
    value."""
    values, ids = list(values), list(ids)
    if len(values) != len(ids):
        raise ValueError(f"check_distinct: {len(values)} values for {len(ids)} ids")
    groups, order = {}, []
    for v, i in zip(values, ids):
        try:
            key = (0, v)
            hash(key)
        except TypeError:  # a list: compared by its text
            key = (1, repr(v))
        if key not in groups:
            groups[key] = (v, [])
            order.append(key)
        groups[key][1].append(i)
    shared = [groups[k] for k in order if len(groups[k][1]) > 1]
    assert not shared, "samples share a value, want distinct values: {}".format("; ".join(
        "{} share {!r}".format(", ".join(repr(i) for i in same), v) for v, same in shared))




# The recorded failure --------------------------------------------------------------------------


class DifferentFailure(BaseException):
    """The minimal batch failed otherwise than recorded: a real failure, never an expected one (a
    BaseException, so that no xfail's raises= takes it for the recorded failure)."""


def _failure_class(name):
    """The class of the recorded failure, the xfail's raises=: the class `name` names (a builtin's
    name or a dotted path), ChildFailure when there is none (a crash of a child process)."""
    if not name:
        return ChildFailure
    cls = _exception_class(name)
    if cls is None:
        raise ImportError(f"cannot import the recorded exception class {name} (is its module on sys.path?)")
    return cls


def _mismatch(e, name, message=None, pattern=None):
    """Why exception e is not the failure fixture.json records, or None when it is: of the class
    `name` (its short name, and an instance of the class when it can be imported; None: a crash of
    the child process, a ChildFailure), with the exact `message` (which torch may follow with
    more lines, a C++ backtrace), or, without one, a text that `pattern` matches (a regular
    expression reduce computed where the message has volatile parts; searched in the exception's
    name, message and a child process's stderr). reduce's signatures decided that the failure
    reproduces; this compares what the record says, nothing more."""
    if not name:
        if not isinstance(e, ChildFailure):
            return f"raised {type(e).__name__}, not a crash of the child"
    elif type(e).__name__ != name.rpartition(".")[2]:
        return f"raised {type(e).__name__}: {e}; want {name}"
    elif not isinstance(e, _exception_class(name) or BaseException):
        return f"raised {type(e)}, not a {name}"
    text = str(e)
    if message is not None and text != message and not text.startswith(message + "\n"):
        return f"message {text!r}, want {message!r}"
    full = "{} {}\n{}".format(getattr(e, "name", ""), e, getattr(e, "child_stderr", "") or "")
    if message is None and pattern and not re.search(pattern, full, re.DOTALL):
        return f"its text does not match {pattern!r}"
    return None


# The fixtures ----------------------------------------------------------------------------------

_SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "ash", "busybox")
_FORMAT_EXT = {"": ".bin", "bin": ".bin", "npz": ".npz", "safetensors": ".safetensors"}
HOW_TO_SAMPLE = ("these tests check the culprit samples as your Dataset yields them: define once, in a "
                 "conftest.py of yours,\n    @pytest.fixture\n    def reduce_sample():\n        return lambda "
                 "sample_id: MyDataset(...)[index_of(sample_id)]  # the sample of that id, before collation")


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
                "reduced from), then remove this directory".format(self.rel, source, os.path.dirname(self.rel) or "."))
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
        # The recorded failure as the collector compares it: its class, and its exact message or the
        # pattern reduce computed.
        self.failure = (cpu or {}).get("exception") or sig.get("exception") or None
        self.pattern = r.get("message_pattern") or None
        self.message = None if self.pattern or not cpu else cpu.get("message") or None
        self.family = sig.get("family", "")
        # In a child process: a command of the user's, a failure on a device (or a crash, no
        # exception to catch here), a memory limit (the process's).
        self.child = self.exec or cpu is None or self.memory > 0
        device = (r.get("environment") or {}).get("device") or "cpu"
        self.device = os.environ.get("REDUCE_DEVICE", device if self.exec or cpu is None else "cpu")
        self.passing = [(b["file"], b.get("outputs")) for b in ([r["boundary"]] if r.get("boundary") else [])
                        + (r.get("neighbours") or [])]
        self.compare = r.get("size") is None and r.get("shape") is None and bool(r.get("boundary"))

    def no_device(self):
        """Why the batches cannot run here (a device this machine lacks), or ""."""
        if not self.device.startswith("cuda") or _torch().cuda.is_available():
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
        return why

    def path(self, name):
        return os.path.join(self.dir, name)

    def run_here(self, name, op=None, entry=None, seed=None):
        """Run a batch of the fixture in this process as reduce replayed it: seeded; the --entry
        function, else the op, else the recorded step. Returns the outputs."""
        if entry is not None and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        batch, fn = load_candidate(self.path(name), entry=entry)
        if seed is not None:
            _torch().manual_seed(seed)
        return fn(batch) if fn is not None else run_op(op, batch.tensors, batch.attrs)

    def run(self, name):
        """Run a batch as the fixture says: its outputs (in this process), their summary (in a child
        process), or [] (the user's command, whose exit status is what is checked)."""
        if not self.child:
            return self.run_here(name, self.op, self.entry, self.seed)
        if not self.exec:
            return run_in_child(self.path(name), self.device, self.entry, self.memory, seed=self.seed)
        path = self.path(os.path.splitext(name)[0] + self.ext)
        shell = os.path.basename(self.args[0]) in _SHELLS
        argv = [self.args[0]]
        for i, a in enumerate(self.args[1:], 1):  # {batch} in the script of sh -c is shell-quoted
            quoted = shlex.quote(path) if shell and i > 1 and self.args[i - 1] == "-c" else path
            argv.append(a.replace("{batch}", quoted))
        env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", AMD_SERIALIZE_KERNEL="3", PYTHONUNBUFFERED="1")
        p = subprocess.run(argv, capture_output=True, env=env, timeout=900, check=False)
        if p.returncode != 0:
            raise child_failure(p.returncode, p.stderr.decode("utf-8", "replace"))
        return []

    def check_minimal(self):
        """The minimal batch runs (as many trials as the failure needed to show) and its outputs
        are finite, shaped like the boundary batch's; a failure otherwise than recorded is a
        DifferentFailure, the recorded one while the fixture is fixed a BugBack."""
        try:
            for _ in range(self.trials):
                out = self.run("batch.bin")
            reference = None
            if self.compare and not self.exec:
                reference = self.run("boundary.bin") if self.child else summarize(self.run("boundary.bin"))
            check_result(out, reference)
        except Exception as e:
            why = _mismatch(e, self.failure, self.message, self.pattern)
            if why is not None:
                raise DifferentFailure("the minimal batch fails otherwise than recorded ({}): {}: {}".format(
                    why, type(e).__name__, ("{} {}\n{}".format(getattr(e, "name", ""), e, getattr(
                        e, "child_stderr", "") or "")).strip())) from e
            if self.status == "fixed":
                raise BugBack(f"the bug is back: the minimal batch fails as recorded ({type(e).__name__}: {e}), and "
                              f"{self.rel}/fixture.json says it is fixed") from e
            raise

    def check_passing(self, name, outputs):
        """A batch that passes runs, before and after the fix, with the recorded outputs (a built-in
        op, on the CPU) or finite ones."""
        if not self.child:
            check_passing(self.run(name), outputs)
        elif not self.exec and outputs is not None and self.memory == 0:
            check_passing(self.run_here(name, self.op), outputs)  # a built-in op's outputs, on the CPU
        elif self.no_device():
            pytest.skip(self.no_device())
        elif self.exec:
            self.run(name)  # the command's outputs are its own: its exit status is what is checked
        else:
            check_result(self.run(name))

    def data_cases(self):
        """The data tests' cases: each triggering element of the culprit samples with the rule found
        (a range, finiteness), and each relation (values that must differ). A shape finding gets no
        data test: a length the model cannot take is as often the step's to handle as the data's."""
        if getattr(self, "_cases", None) is not None:
            return self._cases
        r, self._cases = self.record, ([], [])
        culprits, k = r.get("culprits") or [], r.get("finding") or 0
        if len(culprits) <= k or r.get("partial") or (self.exec and not self.args):
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

        (cases, distinct), related = self._cases, set()
        rel = c.get("relation") or {}
        bd = batch_dim(rel["elements"][0]["tensor"]) if rel.get("elements") else None
        if bd is not None:
            distinct.append({"tensor": rel["elements"][0]["tensor"], "text": rel.get("text", ""),
                             "ids": [id_of.get(e["index"][bd]) for e in rel["elements"]],
                             "indices": [e["index"][:bd] + e["index"][bd + 1:] for e in rel["elements"]]})
            related = {(e["tensor"], tuple(e["index"])) for e in rel["elements"]}
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
            cases.append({"id": id_of.get(e["index"][bd]), "tensor": e["tensor"],
                          "index": e["index"][:bd] + e["index"][bd + 1:], "rule": rule})
        return self._cases


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


def check_passing(out, outputs=None):
    """A passing batch's outputs `out` are the recorded `outputs` (check_outputs), or, without
    them, finite (check_result)."""
    if outputs is not None:
        check_outputs(out, outputs)
    else:
        check_result(out)


def fixture_sample(request, how_to=HOW_TO_SAMPLE):
    """The user's reduce_sample fixture (a function of a sample id that returns the sample as the
    Dataset yields it), or skip the test with `how_to`."""
    try:
        return request.getfixturevalue("reduce_sample")
    except pytest.FixtureLookupError:
        pytest.skip(how_to)


def check_culprit_sample(get, case):
    """The culprit sample get(case["id"]) satisfies the rule found for case["tensor"] at
    case["index"] (check_sample_rule); skipped when the sample does not hold that tensor (one the
    collate makes)."""
    rule = case["rule"]
    try:
        value = sample_value(get(case["id"]), case["tensor"], case["index"], dim=rule.get("dim", 0))
    except KeyError as e:
        pytest.skip(str(e))
    check_sample_rule(value, dict(rule, sample=case["id"], tensor=case["tensor"], index=case["index"]))


def check_culprits_distinct(get, case):
    """The culprit samples case["ids"] hold distinct values of case["tensor"] at case["indices"]
    (check_distinct)."""
    check_distinct([sample_value(get(i), case["tensor"], idx) for i, idx in zip(case["ids"], case["indices"])],
                   case["ids"])


# The collector (pytest's doc/en/example/nonpython) ---------------------------------------------

if pytest is not None:

    class FixtureFile(pytest.File):
        """A fixture.json: its test items."""

        def collect(self):
            try:
                fx = Fixture(str(self.path))
            except (FixtureError, OSError, ValueError) as e:
                yield BrokenFixture.from_parent(self, name="fixture", error=e)
                return
            yield MinimalBatch.from_parent(self, name="minimal_batch", fixture=fx)
            if fx.exec and not fx.args:
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

    class FixtureItem(pytest.Item):
        """A test of a fixture's batches; its failures are reported as the check says them."""

        def __init__(self, *, fixture=None, **kwargs):
            super().__init__(**kwargs)
            self.fixture = fixture

        def reportinfo(self):
            return self.path, 0, f"{self.fixture.rel if self.fixture else self.path}::{self.name}"

        def repr_failure(self, excinfo, style=None):
            e = excinfo.value
            if isinstance(e, (FixtureError, DifferentFailure, BugBack, HarnessError, ChildFailure, AssertionError)):
                return str(e)
            return super().repr_failure(excinfo, style="short")

    class BrokenFixture(FixtureItem):
        def __init__(self, *, error, **kwargs):
            super().__init__(**kwargs)
            self.error = error

        def runtest(self):
            raise self.error if isinstance(self.error, FixtureError) else FixtureError(
                f"{self.path}: {type(self.error).__name__}: {self.error}")

    class MinimalBatch(FixtureItem):
        """The minimal batch: xfail(strict=True, raises=<the recorded class>) while the fixture is
        open, a guard once it is fixed."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            fx, self.error = self.fixture, None
            if fx.exec and not fx.args:
                self.add_marker(pytest.mark.skip(reason="the batch was reduced with a command of the user's own, and "
                                                        "the record does not say which"))
            elif fx.no_device():
                self.add_marker(pytest.mark.skip(reason=fx.no_device()))
            elif fx.status == "open":
                try:
                    raises = _failure_class(fx.failure)
                    self.add_marker(pytest.mark.xfail(reason=fx.open_reason(), raises=raises, strict=True))
                except ImportError as e:
                    self.error = FixtureError(f"{fx.rel}: {e}")

        def runtest(self):
            if self.error is not None:
                raise self.error
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
            return super().repr_failure(excinfo, style="short")

    def _culprit_test(case, request):
        check_culprit_sample(fixture_sample(request), case)

    def _distinct_test(case, request):
        check_culprits_distinct(fixture_sample(request), case)

    def pytest_configure(config):
        # A fixture is data too: its recorded step is imported only from a file of the repository
        # (pytest's root directory) that is not installed, as reduce's worker imports it.
        global step_check
        step_check = StepTrust(str(config.rootpath))

    def pytest_collect_file(parent, file_path):
        if file_path.name == "fixture.json":
            return FixtureFile.from_parent(parent, path=file_path)

    def pytest_ignore_collect(collection_path, config):
        # A fixture directory of an older reduce holds a generated test_*.py: its fixture.json's item
        # says to regenerate it, and the file, which imports helpers reduce_batch no longer has, is
        # not imported.
        if collection_path.name.startswith("test_") and collection_path.suffix == ".py" and (
                collection_path.parent / "fixture.json").is_file():
            return True
        return None
