"""reduce_batch.worker: the replay worker and fork server of reduce's torch backend; users never call it.

reduce embeds the package, writes it as a zip beside a launcher, reduce_replay.py, which puts the
zip first on sys.path and calls main here (replay.WorkerModule). Commands:

    reduce_replay.py replay FILE [--device cpu|cuda[:N]] [--entry MODULE:FUNCTION | --step JSON [--step-class JSON]] [--trusted] [--device-memory BYTES]
    reduce_replay.py zygote [--device D] [--entry MODULE:FUNCTION | --step JSON [--step-class JSON] | --exec JSON [--warm-import M,...]] [--trusted] [--slots N] [--slot-env JSON] [--device-memory BYTES]
    reduce_replay.py info FILE...
    reduce_replay.py entry [MODULE:FUNCTION | --entry MODULE:FUNCTION | --step JSON [--step-class JSON]] [--trusted]

`replay` runs one candidate batch in this process; `zygote` imports torch once and forks a
child per candidate (the protocol is _Zygote's); with --exec its children run the exec
backend's Python command (`python step.py {batch}`) as the interpreter would (_run_program). A
candidate that fails exits as the interpreter would (1 and the traceback, or death by a
signal); HARNESS_EXIT says that it never ran (replay.HarnessExitCode on the Go side).

A batch file is data (see trust.Trust): a recorded step, and the class a step of
reduce_hooks rebuilds, are imported only with --trusted, which reduce gives for a file that is the
user's (internal/trust decided), and never a function of reduce's own; a named tuple or mapping in
a batch is rebuilt with its class only when the step's import already brought that class
(steps.imported_type), never by importing what the file names.
"""

import ctypes
import json
import math
import os
import platform
import sys
import types

import reduce_batch as rb

from . import checks, hooks, memory, ops, steps, trust
from .errors import HARNESS_EXIT, HarnessError
from .modules import HOOKS_MODULES

# Where this package was imported from (the zip reduce writes beside its launcher, or a folder):
# the launcher put it first on sys.path, and an exec program's own sys.path goes without it.
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(rb.__file__)))
# A user module's `import reduce_hooks` (a vendored copy, maybe of another version) gets the
# package's, as a recorded reduce_hooks:lightning_step does (steps.resolve_step).
sys.modules.setdefault("reduce_hooks", hooks)

_INT64_MAX = (1 << 63) - 1


def _trust_args(p):
    """The arguments of a command that imports a recorded step."""
    p.add_argument("--step-class", type=_step_arg,
                   help="the class the recorded step rebuilds (a LightningModule), as JSON: checked and imported "
                        "with the step")
    p.add_argument("--trusted", action="store_true",
                   help="the file is the user's (reduce decided): import the step (and class) it records")


def _set_trust(trusted):
    """Install the step check of a file that is (trusted) or is not the user's; returns the one it
    replaces."""
    old = steps.step_check
    steps.step_check = trust.Trust(os.getcwd(), trusted, "reduce did not find the file yours (reduce trust FILE "
                                                    "allows one)")
    return old


def _resolve(o):
    """The --entry function, else the recorded step's (and its class, imported once), as a
    replay will resolve them; HarnessError when one cannot be."""
    if o.entry:
        return steps.resolve_entry(o.entry)
    # What each hook checks before any replay (one rank's recording: replayed alone only with torch.distributed).
    hooks.before_replay(types.SimpleNamespace(meta={"world_size": os.environ.get("REDUCE_WORLD_SIZE", ""),
                                                    "rank": os.environ.get("REDUCE_RANK") or "?"}, tensors={}),
                        check_only=True)
    fn = steps.resolve_step(o.step, chdir=True) if o.step else None
    if o.step_class:
        # Built only as the kind of class the step rebuilds (its hook's row in hooks.json: lightning_step's
        # LightningModule, trainer_step's PreTrainedModel), checked before any replay.
        step = o.step or {}
        row = hooks.of_step(step.get("qualname")) if step.get("module") in HOOKS_MODULES else None
        if row is None or not row["rebuilds"]:
            raise HarnessError("the file names a class to rebuild ({}:{}), and its step {}:{} rebuilds none: a file "
                                  "written by reduce_hooks names reduce_hooks' step".format(
                                      o.step_class.get("module"), o.step_class.get("qualname"),
                                      step.get("module"), step.get("qualname")))
        steps.resolve_class(o.step_class, row["name"])
    return fn


def _cmd_info(args):
    """info FILE...: validate batch files and print their manifests."""
    if not args:
        sys.stderr.write("usage: reduce_replay.py info FILE...\n")
        return 2
    status = 0
    for path in args:
        try:
            m, _ = rb.read_raw(path)
        except (OSError, ValueError) as e:
            sys.stderr.write("%s\n" % e)
            status = 1
            continue
        sys.stdout.write(json.dumps(m, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return status


def _map_source(path):
    """(manifest, [1-D storage tensor per tensor], [each storage's first byte in the file]) of a
    batch file whose payloads are all
    uncompressed, the storages over a private copy-on-write mapping of the file: nothing is read
    until a tensor is, and a step that writes into its batch never reaches the file. The header,
    the manifest and the payloads' places are checked as load() checks them; the payloads'
    checksums were checked by reduce, which made the plan."""
    import mmap

    import torch

    m, p = rb.read_manifest(path, max_size=_INT64_MAX)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    storages, payloads = [], []
    for e in m["tensors"]:
        payloads.append(p + e["payload"]["offset"])
        dt = getattr(torch, e["dtype"])
        n = e["storage_elements"]
        if e["payload"]["compression"] != "none":
            raise rb.BatchFileError("%s: tensor %r: payload: compressed; a plan's source is uncompressed"
                                    % (path, e["name"]))
        if n == 0:
            storages.append(torch.empty(0, dtype=dt))
        else:
            storages.append(torch.frombuffer(mm, dtype=dt, count=n, offset=p + e["payload"]["offset"]))
    return m, storages, payloads


def _read_runs(path, at, e, tp, dt):
    """The storage of a plan's tensor whose samples are dense blocks along its batch axis, read
    from the file at path (the recorded storage starts at byte `at`) straight into place: its
    prefix, then each run of kept samples; the rest stays zero."""
    import torch

    st = torch.zeros(e["storage_elements"], dtype=dt)
    raw = memoryview(st.view(torch.uint8).numpy()) if st.numel() else memoryview(b"")
    es, off = st.element_size(), e["offset"]
    stride = e["strides"][e["batch_dim"]]
    spans = [(0, 0, tp.get("prefix", 0))]
    spans += [(off + k * stride, off + i * stride, n * stride) for k, i, n in tp["runs"]]
    with open(path, "rb") as f:
        for to, frm, n in spans:
            if n:
                f.seek(at + frm * es)
                if f.readinto(raw[to * es:(to + n) * es]) != n * es:
                    raise rb.BatchFileError("%s: truncated while reading a candidate's samples" % path)
    return st


def _copy_into(storage, dst, src):
    """dst.copy_(src), where dst is a view of storage (a 1-D tensor): a dim dst stores once
    (stride 0, an expanded dim) is copied once, and a dst whose elements share storage in other
    ways (a window view) is written through its storage indices, which copy_ refuses."""
    import torch

    for d in range(dst.dim()):
        if dst.stride(d) == 0 and dst.size(d) > 1:
            dst, src = dst.narrow(d, 0, 1), src.narrow(d, 0, 1)
    try:
        dst.copy_(src)
    except RuntimeError:
        where = torch.as_strided(torch.arange(storage.numel()), dst.shape, dst.stride(), dst.storage_offset())
        storage[where.reshape(-1)] = src.reshape(-1)


def load_view(plan, device="cpu", types=None):
    """The candidate batch a reduce plan describes (fixtures.Plan: {source, manifest, tensors}),
    built from the recorded file it names: a tensor the candidate keeps whole is the mapped
    storage itself; another gets a storage of its own laid out as the manifest says (the
    storage's prefix copied, the kept samples' elements copied run by run, the elements set
    written bit for bit), so that it is the tensor reduce would have written to a candidate
    file, without the file. Returns a Batch; `types` as reduce_batch.load's."""
    import base64

    import torch

    if sys.byteorder != "little":
        raise rb.BatchFileError("%s: a plan is built on a little-endian host only" % plan["source"])
    src_m, src, payloads = _map_source(plan["source"])
    m = plan["manifest"]
    if isinstance(m, (str, bytes)):
        m = json.loads(m)
    device = torch.device(device)
    tensors = {}
    for e, tp, se, s, at in zip(m["tensors"], plan["tensors"], src_m["tensors"], src, payloads):
        dt = getattr(torch, e["dtype"])
        if tp.get("whole"):
            st = s
        elif tp.get("copy"):
            st = s.clone()
        elif tp.get("read"):
            st = _read_runs(plan["source"], at, e, tp, dt)
        else:
            st = torch.zeros(e["storage_elements"], dtype=dt)
            prefix = tp.get("prefix", 0)
            if prefix:
                st[:prefix] = s[:prefix]
            dst = torch.as_strided(st, e["shape"], e["strides"], e["offset"])
            view = torch.as_strided(s, se["shape"], se["strides"], se["offset"])
            if tp.get("squeeze") is not None:  # a dim of size 1 the candidate drops
                view = view.squeeze(tp["squeeze"])
            bd, runs = e.get("batch_dim"), tp.get("runs")
            for d, n in enumerate(e["shape"]):
                if runs is None or d != bd:
                    view = view.narrow(d, 0, n)
            if runs is None:
                _copy_into(st, dst, view)
            else:
                for at, frm, n in runs:
                    _copy_into(st, dst.narrow(bd, at, n), view.narrow(bd, frm, n))
        sets = tp.get("set")
        if sets:
            at = torch.frombuffer(bytearray(base64.b64decode(sets["at"])), dtype=torch.int64)
            st[at] = torch.frombuffer(bytearray(base64.b64decode(sets["bits"])), dtype=dt)
        st = st.to(device)
        tensors[e["name"]] = torch.as_strided(st, e["shape"], e["strides"], e["offset"])
    return rb.Batch(plan["source"], m, tensors, types)


def _cwd_on_path():
    # The script's directory is sys.path[0]; the user's project is the working directory.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _summary(out):
    import torch

    if isinstance(out, torch.Tensor):
        o = out.detach()
        first = o.reshape(-1)[:4].cpu().tolist()
        return "%s%s first=%s sum=%r" % (str(o.dtype).replace("torch.", ""), list(o.shape), first, _sums(o)[0])
    if isinstance(out, (tuple, list)):
        return "(%s)" % ", ".join(_summary(x) for x in out)
    if isinstance(out, dict):
        return "{%s}" % ", ".join("%s: %s" % (k, _summary(v)) for k, v in out.items())
    text = repr(out)
    return text if len(text) <= 200 else text[:200] + "..."


def replay(path, device="cpu", entry=None, device_memory=0, step=None):
    """Run one candidate (a file's path, or a plan for load_view) as steps.replay does,
    with reduce's --seed (REDUCE_SEED) and --device-memory (limit_device_memory, set once the batch
    is loaded) around the step, and a summary line of the output on stdout. A failure of the
    candidate is the exception the op raises; HarnessError when it cannot run."""
    import torch

    try:
        batch, fn = steps.load_candidate(path, device, entry, step, load=load_view if isinstance(path, dict) else None)
    except MemoryError as e:
        # The worker's own allocation, before the step runs: a fault of the harness, not the step's.
        raise HarnessError("cannot load the candidate: out of memory (%s)" % (e or "MemoryError"))
    seed = os.environ.get("REDUCE_SEED", "").strip()
    if seed:
        # reduce --seed: the step's random generators start the same in every replay.
        try:
            torch.manual_seed(int(seed))
        except ValueError:
            raise HarnessError("REDUCE_SEED=%r is not an integer" % seed)
    lift = memory.limit_device_memory(device, device_memory) if device_memory and device_memory > 0 else None
    try:
        out = steps.run_loaded(batch, fn, device)
    except Exception as e:
        # A built-in op's failure on the CPU, exactly: what a fixture's test expects there. On
        # another device, that of the same candidate loaded and run again on the CPU (a broken
        # CUDA context leaves the CPU usable), when it fails there too.
        # Not after running out of memory: the host would run the batch too large for the device.
        oom = isinstance(e, (MemoryError, getattr(torch.cuda, "OutOfMemoryError", MemoryError)))  # by class, not text
        if fn is None and not isinstance(e, HarnessError) and (torch.device(device).type == "cpu" or not oom):
            cpu = e if torch.device(device).type == "cpu" else _cpu_failure(path, step)
            if cpu is not None:
                _report({"cpu": {"exception": type(cpu).__name__, "message": str(cpu)}})
        raise
    if lift is not None:
        lift()
    sys.stdout.write("reduce_batch: ok %s (%s): %s\n" % (entry or _step_name(step or batch.step) or batch.op, device, _summary(out)))
    if fn is None:
        _report({"outputs": _report_outputs(out)})
    return out


def _cpu_failure(path, step):
    """The exception a built-in op's candidate raises on the CPU, or None when it passes there or
    cannot be run again."""
    try:
        batch, _ = steps.load_candidate(path, "cpu", None, step, load=load_view if isinstance(path, dict) else None)
        ops.run_op(batch.op, batch.tensors, batch.attrs)
    except HarnessError:
        return None
    except Exception as e:  # noqa: BLE001 - whatever the op raises is its failure on the CPU
        return e
    return None


REPORT_PREFIX = "reduce-report: "  # replay.ReportPrefix
MAX_REPORT_VALUES = 64  # replay.MaxReportValues


def _report(report):
    """The report line (replay.Report) on stdout, flushed: the last line the Go side reads. A
    report is information, never the verdict: one that cannot be written is left out."""
    if report.get("outputs") == []:
        return
    try:
        line = REPORT_PREFIX + json.dumps(report, allow_nan=False) + "\n"
    except ValueError:  # a sum past float64's range
        return
    sys.stdout.write(line)
    sys.stdout.flush()


RETURNED_LINE = "reduce-returned"  # replay.ReturnedLine


def _returned():
    """The line that says the step returned (replay.ReturnedLine), flushed: without it an exit 0 is
    the worker's fault (the step called os._exit(0) or sys.exit(0) halfway), never a pass."""
    sys.stdout.write("\n" + RETURNED_LINE + "\n")
    sys.stdout.flush()


def _sums(t):
    """(sum, sum of magnitudes) of a tensor's values, as cheaply as the tensor allows (an output
    may be large, and on a GPU): on its own device, float32 and float64 in their own dtype, the
    other floating types in float64, a complex one's real part, integers exactly; no copy of it."""
    import torch

    if t.dtype in (torch.float32, torch.float64):
        return float(t.sum()), float(torch.linalg.vector_norm(t, 1))
    if t.dtype.is_complex:
        return float(t.real.sum(dtype=torch.float64)), float(t.abs().sum(dtype=torch.float64))
    if t.dtype.is_floating_point:
        return float(t.sum(dtype=torch.float64)), float(t.abs().sum(dtype=torch.float64))
    return int(t.sum()), int((t if t.dtype == torch.bool else t.abs()).sum())


def _report_outputs(out):
    """A built-in op's outputs as replay.Output: by name (checks.outputs' names), each tensor's
    dtype, shape, values in row-major order (at most MAX_REPORT_VALUES, else none), sum and sum of
    magnitudes; an output with a NaN or an infinity is left out."""
    import torch

    found = []
    for name, t in sorted(checks.outputs(out).items()):
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach()
        # A NaN or an infinity among the values makes the sum of magnitudes NaN or infinite, as a
        # sum past float64's range does: then there is nothing to check, and the output is left out.
        total, mag = _sums(t)
        if not (math.isfinite(total) and math.isfinite(mag)):
            continue
        o = {"name": name, "dtype": str(t.dtype).replace("torch.", ""), "shape": [int(n) for n in t.shape],
             "sum": float(total), "sum_abs": float(mag)}
        if t.numel() <= MAX_REPORT_VALUES:
            o["values"] = [float(v) for v in t.reshape(-1).to(torch.float64).cpu().tolist()]
        found.append(o)
    return found


def _step_name(step):
    return step and "%s:%s" % (step.get("module"), step.get("qualname"))


def _step_arg(text):
    """--step: the step a batch records (docs/FORMAT.md, step), as JSON."""
    import json

    step = json.loads(text)
    if not isinstance(step, dict) or not step.get("module") or not step.get("qualname"):
        raise ValueError("want a JSON object with module and qualname")
    return step


def _check_device(device):
    import torch

    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise HarnessError("--device %r: %s" % (device, e))
    if d.type not in ("cpu", "cuda"):
        raise HarnessError("--device %r: want cpu or cuda[:N]" % device)
    return d


def _cmd_replay(args):
    """replay FILE|- [--device cpu|cuda[:N]] [--entry MODULE:FUNCTION | --step JSON [--step-class JSON]] [--trusted] [--device-memory BYTES]: run one candidate
    batch; - reads a plan (load_view) on stdin instead of a file."""
    import argparse

    p = argparse.ArgumentParser(prog="reduce_replay.py replay")
    p.add_argument("file")
    p.add_argument("--device", default="cpu")
    p.add_argument("--entry")
    p.add_argument("--step", type=_step_arg, help="the batch's recorded step, as JSON (the file's own by default)")
    _trust_args(p)
    p.add_argument("--device-memory", type=int, default=0, help="bytes the op may allocate (0: no limit)")
    o = p.parse_args(args)
    old = _set_trust(o.trusted)
    try:
        return _replay_command(o)
    finally:
        steps.step_check = old  # the command may run in a process of the caller's (the tests)


def _replay_command(o):
    _cwd_on_path()
    try:
        import torch  # noqa: F401
    except ImportError:
        import traceback

        traceback.print_exc()
        sys.stderr.write("reduce_batch: harness: cannot import torch with %s\n" % sys.executable)
        return HARNESS_EXIT
    try:
        _check_device(o.device)
        if o.step_class:
            _resolve(o)
        what = o.file
        if what == "-":
            try:
                what = json.load(sys.stdin)
            except ValueError as e:
                raise HarnessError("the plan on stdin: %s" % e)
        replay(what, o.device, o.entry, o.device_memory, o.step)
        _returned()
    except HarnessError as e:
        sys.stderr.write("reduce_batch: harness: %s\n" % e)
        return HARNESS_EXIT
    return 0  # any other exception propagates: Python prints its traceback and exits 1


def _write_all(fd, data):
    """os.write until every byte of data is in fd (a pipe takes a large request in parts)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _exit_code(e):
    """What the interpreter exits with for an uncaught SystemExit (printing a non-int code)."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    try:
        sys.stderr.write("%s\n" % (code,))
    except Exception:
        pass
    return 1


def _flush():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass


def _run_candidate(path, device, entry, device_memory=0, step=None):
    """replay() in a forked child, ending as the interpreter would end: the exit status and the
    traceback of an uncaught exception, death by SIGINT after a KeyboardInterrupt."""
    import signal

    try:
        replay(path, device, entry, device_memory, step)
        _returned()
        code = 0
    except HarnessError as e:
        sys.stderr.write("reduce_batch: harness: %s\n" % e)
        code = HARNESS_EXIT
    except SystemExit as e:
        code = _exit_code(e)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 128 + signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    _flush()
    return code


def _program_arg(text):
    """--exec: the exec backend's Python program, as JSON: {"kind": "path" | "module", "target":
    the script or module, "argv": sys.argv ({rundir} standing for the candidate's run directory;
    argv[0] of a module is set by runpy), "dont_write_bytecode": -B}."""
    prog = json.loads(text)
    if not isinstance(prog, dict) or prog.get("kind") not in ("path", "module") or not prog.get("target") \
            or not isinstance(prog.get("argv"), list):
        raise ValueError("want a JSON object with kind (path or module), target and argv")
    return prog


def _program_path0(prog):
    """What the interpreter puts first on sys.path for prog: the script's directory (symbolic
    links resolved), or for -m the working directory; None with -P or PYTHONSAFEPATH."""
    if getattr(sys.flags, "safe_path", False):
        return None
    if prog["kind"] == "module":
        return os.getcwd()
    return os.path.dirname(os.path.realpath(prog["target"]))


def _set_path0(path0):
    """Replace this package's place, which the launcher put first on sys.path, by path0."""
    if sys.path and sys.path[0] and os.path.realpath(sys.path[0]) == os.path.realpath(_HERE):
        del sys.path[0]
    if path0 is not None:
        sys.path.insert(0, path0)


def _print_uncaught(e, skip):
    """Print e as the interpreter prints an uncaught exception: its traceback starts at the
    program's own frames, not at those of the modules whose globals are in skip."""
    tb = e.__traceback__
    while tb is not None and any(tb.tb_frame.f_globals is g for g in skip):
        tb = tb.tb_next
    e.__traceback__ = tb  # what the interpreter prints (3.11's excepthook reads it, not its argument)
    sys.excepthook(type(e), e, tb)


def _run_script(path):
    """Run the script at path as `python path` runs it: in a fresh __main__ module whose
    __file__ (and code's file name) is the absolute path (the path as given before Python 3.9),
    its loader a SourceFileLoader, __spec__ None; sys.argv[0] stays as given (runpy.run_path
    would set it to the path it is passed)."""
    import builtins
    import importlib.machinery
    import types

    name = os.path.abspath(path) if sys.version_info >= (3, 9) else path
    with open(path, "rb") as f:  # bytes: compile honours the coding cookie
        source = f.read()
    code = compile(source, name, "exec", dont_inherit=True)
    mod = types.ModuleType("__main__")
    mod.__dict__.update({"__file__": name, "__cached__": None, "__spec__": None, "__package__": None,
                         "__builtins__": builtins,
                         "__loader__": importlib.machinery.SourceFileLoader("__main__", name)})
    sys.modules["__main__"] = mod
    exec(code, mod.__dict__)


def _interpreter_exit(code):
    """What the interpreter does at exit before its status: wait for non-daemon threads, run the
    atexit functions, flush the streams."""
    try:
        t = sys.modules.get("threading")
        if t is not None and hasattr(t, "_shutdown"):
            t._shutdown()
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    _flush()
    return code


def _run_program(prog, run_dir):
    """The exec backend's command in a forked child, as `python [-u] [-B] SCRIPT ARGS...` or
    `python -m MODULE ARGS...` would run it: sys.argv, __name__ == "__main__", the script run
    as the interpreter runs it (_run_script) or the module by runpy._run_module_as_main (as -m
    does), the exit status of SystemExit, the traceback and 1 of an uncaught exception, death
    by SIGINT after a KeyboardInterrupt."""
    import runpy
    import signal

    sys.argv = [a.replace("{rundir}", run_dir) for a in prog["argv"]]
    if prog.get("dont_write_bytecode"):
        sys.dont_write_bytecode = True
    skip = [globals()]
    try:
        if prog["kind"] == "module":
            runpy._run_module_as_main(prog["target"], alter_argv=True)
        else:
            _run_script(prog["target"])
        code = 0
    except SystemExit as e:
        code = _exit_code(e)
    except KeyboardInterrupt as e:
        _print_uncaught(e, skip)
        _interpreter_exit(0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 128 + signal.SIGINT
    except BaseException as e:
        _print_uncaught(e, skip)
        code = 1
    return _interpreter_exit(code)


_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
SWEEP_WAIT = 2.0  # seconds the zygote's sweep waits for a killed stray to die (Go's killWait)


def _children_of(ppid):
    """The pids whose parent is ppid, from /proc."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(ppid).encode():
            out.append(int(name))
    return out


_HANDOVER = "handover"  # the program of a recorded command's fork server: its children go on with the program


class _Resume(BaseException):  # raised in a recorded command's child, through the zygote's frames, to serve_handover
    def __init__(self, req):
        super().__init__(req)
        self.req = req


def serve_handover(proto_in, proto_out, slots, why=""):
    """A recorded command's replay, at the handover of its first batch (reduce_batch.command): this process becomes
    the fork server, and returns only in a child, with its request (the candidate's "path"). Torch runs on one thread
    in a child: GNU OpenMP's pool, used before the fork, hangs a child's first parallel op."""
    import torch

    hello = {"event": "hello", "pid": os.getpid(), "python": platform.python_version(), "executable": sys.executable,
             "device": "cpu", "torch": str(torch.__version__)}
    if why:
        hello["error"] = "the recorded command cannot fork at its first batch: " + why
    _write_all(proto_out, (json.dumps(hello, sort_keys=True) + "\n").encode())
    if why:
        os._exit(HARNESS_EXIT)
    try:
        _Zygote("cpu", None, slots, [], proto_in, proto_out, program=_HANDOVER, threads=1).run()
    except _Resume as r:
        return r.req
    os._exit(0)  # reduce closed the protocol: every child is gone


class _Child:
    def __init__(self, pid, slot, req_w, status_r):
        self.pid = pid
        self.slot = slot
        self.req_w = req_w
        self.status_r = status_r
        self.id = None  # the request it runs
        self.ready = None  # True/False once it reported its device initialization


class _Zygote:
    """The torch backend's zygote. The parent has imported torch (and the --entry module) and
    never touches the device or runs an op: no CUDA context, no thread pool to break in a fork.
    It keeps one pre-forked child per slot, which initializes the device (and, with
    --slot-env, sees only its slot's GPU) and then waits for its one candidate on a pipe.

    Protocol: JSON lines. In (stdin): {"id", "slot", "path" | "plan" | "plan_path", "stdout", "stderr",
    "run_dir"}: the candidate's file, its plan (load_view), or a file holding the plan.
    Out (stdout): {"event": "hello", "pid", "torch", ...} once; {"event": "ready" |
    "init_error", "slot", "pid"} when a pre-forked child has initialized the device;
    {"event": "start", "id", "pid", "pgid", "slot"} when a request is handed to a child;
    {"event": "exit", "id", "pid", "status", "signal", "core"} when it is reaped (status is
    null when it was killed by a signal); {"event": "error", "id", "error"} for a request that
    could not be handed over. EOF on stdin: every child is killed, and the zygote exits."""

    def __init__(self, device, entry, slots, slot_env, proto_in, proto_out, device_memory=0, step=None, program=None,
                 threads=0):
        self.device = device
        self.threads = threads  # torch's thread count, set again in each child (0: the zygote never set it)
        self.program = program  # the exec backend's Python program (--exec), run in place of a replay
        self.entry = entry
        self.step = step
        self.device_memory = device_memory
        self.slots = slots
        self.slot_env = slot_env
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.pid = os.getpid()
        self.children = {}  # pid -> _Child, until reaped
        self.stuck = set()  # strays SIGKILL did not end within SWEEP_WAIT: reap() takes them once dead
        self.idle = {}  # slot -> _Child waiting for a request
        self.status = {}  # status pipe fd -> _Child
        self.broken = False
        try:
            self.libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            self.libc = None

    def send(self, obj):
        if self.broken:
            return
        data = (json.dumps(obj, sort_keys=True) + "\n").encode()
        try:
            while data:
                n = os.write(self.proto_out, data)
                data = data[n:]
        except OSError:
            self.broken = True  # the reducer is gone; EOF on stdin follows

    def run(self):
        import select
        import signal

        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_w)
        if self.libc is not None:
            # What a dead child left outside its group (setsid) comes here, not to init: sweep.
            self.libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        for slot in range(self.slots):
            self.fork(slot)
        buf = bytearray()
        while True:
            fds = [self.proto_in, self.wake_r] + list(self.status)
            ready, _, _ = select.select(fds, [], [])
            if self.wake_r in ready:
                try:
                    while os.read(self.wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            for fd in ready:
                if fd in self.status:
                    self.read_status(fd)
            self.reap()
            if self.proto_in in ready:
                data = os.read(self.proto_in, 1 << 16)
                if not data:
                    self.shutdown()
                    return 0
                # A bytearray, searched from where the last search ended:
                # a long line costs its length, not its length squared.
                start = len(buf)
                buf += data
                end = buf.find(b"\n", start)
                while end >= 0:
                    line = bytes(buf[:end])
                    del buf[:end + 1]
                    self.request(line)
                    end = buf.find(b"\n")

    def fork(self, slot):
        req_r, req_w = os.pipe()
        st_r, st_w = os.pipe()
        _flush()
        pid = os.fork()
        if pid == 0:  # the child
            code = HARNESS_EXIT
            try:
                os.close(req_w)
                os.close(st_r)
                code = self.child(slot, req_r, st_w)
            except BaseException:
                try:
                    import traceback

                    traceback.print_exc()
                    _flush()
                except BaseException:
                    pass
            finally:
                if not isinstance(code, _Resume):
                    os._exit(code)
            raise code  # a recorded command's child: back into the program (serve_handover)
        os.close(req_r)
        os.close(st_w)
        try:
            os.setpgid(pid, pid)  # also done by the child: whichever runs first
        except OSError:
            pass
        c = _Child(pid, slot, req_w, st_r)
        self.children[pid] = c
        self.idle[slot] = c
        self.status[st_r] = c
        return c

    def child(self, slot, req_r, st_w):
        """A pre-forked child: initialize the device, wait for one request, run it, return the
        exit status (the caller _exits with it: no interpreter teardown in a fork)."""
        import signal

        try:
            os.setpgid(0, 0)
        except OSError:
            pass
        if self.libc is not None:
            self.libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            # Its own strays stay its own while it runs: the zygote's sweep never takes another's.
            self.libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        if os.getppid() != self.pid:
            return 0  # the zygote died before the death signal was armed
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        keep = (req_r, st_w)
        for fd in [self.proto_in, self.proto_out, self.wake_r, self.wake_w] + list(self.status) + \
                [c.req_w for c in self.children.values() if c.req_w is not None]:
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.children, self.idle, self.status = {}, {}, {}
        if self.threads:
            # The zygote set torch's thread count, which made its thread pool; a fork leaves the
            # child a flag that makes the next user of that pool replace it. Replaced here, on the
            # child's only thread: else a thread torch starts (the autograd engine's, while
            # Inductor compiles) could find no pool while another replaces it and abort with
            # "pool INTERNAL ASSERT FAILED at ParallelOpenMP.cpp ... Invalid thread pool!".
            import torch

            torch.set_num_threads(self.threads)
        if self.slot_env:
            os.environ.update(self.slot_env[slot % len(self.slot_env)])
        init_error = None
        try:
            self.init_device()
            msg = {"ok": True}
        except BaseException as e:
            import traceback

            init_error = traceback.format_exc()
            msg = {"ok": False, "error": "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")}
        try:
            os.write(st_w, (json.dumps(msg) + "\n").encode())
        except OSError:
            pass
        os.close(st_w)
        chunks = []
        while True:
            chunk = os.read(req_r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(req_r)
        data = b"".join(chunks)
        if not data.strip():
            return 0  # the zygote shut down
        req = json.loads(data.decode())
        try:
            self.redirect(req)
        except OSError as e:
            sys.stderr.write("reduce_batch: harness: child %d cannot open its output: %s\n" % (os.getpid(), e))
            return HARNESS_EXIT
        if init_error is not None:
            sys.stderr.write(init_error)
            sys.stderr.write("reduce_batch: harness: cannot initialize device %s\n" % self.device)
            _flush()
            return HARNESS_EXIT
        if self.program is _HANDOVER:
            return _Resume(req)
        if self.program is not None:
            return _run_program(self.program, req.get("run_dir") or os.path.dirname(req["path"]))
        what = req.get("plan") or req.get("path")
        if "plan_path" in req:
            with open(req["plan_path"]) as f:
                what = json.load(f)
        return _run_candidate(what, self.device, self.entry, self.device_memory, self.step)

    def init_device(self):
        import torch

        d = torch.device(self.device)
        if d.type == "cuda":
            torch.cuda.init()
            if d.index is not None:
                torch.cuda.set_device(d)
            torch.empty(1, device=d)  # create the context now, ahead of the candidate

    def redirect(self, req):
        import faulthandler

        flags = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        out = os.open(req["stdout"], flags)  # FIFOs the reducer reads: never block on a gone reader
        err = os.open(req["stderr"], flags)
        os.set_blocking(out, True)
        os.set_blocking(err, True)
        _flush()
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if faulthandler.is_enabled():
            faulthandler.enable(all_threads=True)  # onto the new fd 2
        run_dir = req.get("run_dir")
        if run_dir:
            os.environ["REDUCE_RUN_DIR"] = run_dir
            os.environ["TMPDIR"] = run_dir
            if "tempfile" in sys.modules:
                sys.modules["tempfile"].tempdir = None

    def read_status(self, fd):
        c = self.status.pop(fd)
        try:
            data = os.read(fd, 1 << 16)
        except OSError:
            data = b""
        os.close(fd)
        c.status_r = None
        try:
            msg = json.loads(data.decode() or "{}")
        except ValueError:
            msg = {}
        c.ready = bool(msg.get("ok"))
        ev = {"event": "ready" if c.ready else "init_error", "slot": c.slot, "pid": c.pid}
        if not c.ready:
            ev["error"] = msg.get("error") or "the child exited during device initialization"
        self.send(ev)

    def request(self, line):
        line = line.strip()
        if not line:
            return
        rid = None
        try:
            req = json.loads(line.decode())
            rid = req["id"]
            slot = int(req.get("slot", 0))
            if not isinstance(req.get("plan"), (dict, type(None))):
                raise ValueError("plan: want an object")
            what = () if req.get("plan") else ("plan_path",) if "plan_path" in req else ("path",)
            for key in ("stdout", "stderr") + what:
                if not isinstance(req.get(key), str):
                    raise ValueError("%s: want a string" % key)
            if not 0 <= slot < self.slots:
                raise ValueError("slot %d: the zygote has %d" % (slot, self.slots))
        except (ValueError, KeyError, TypeError) as e:
            self.send({"event": "error", "id": rid, "error": "bad request: %s" % e})
            return
        payload = (json.dumps(req) + "\n").encode()
        for _ in range(3):
            c = self.idle.pop(slot, None)
            try:
                if c is None:
                    c = self.fork(slot)
                    del self.idle[slot]
                # At most a pipe's 64 KiB (reduce sends a larger plan as a file), so
                # that the write never waits for a child still initializing its device.
                _write_all(c.req_w, payload)
            except OSError as e:
                err = e
                if c is not None and c.req_w is not None:
                    os.close(c.req_w)
                    c.req_w = None
                continue  # the idle child died (not reaped yet): take a fresh one
            os.close(c.req_w)
            c.req_w = None
            c.id = rid
            self.send({"event": "start", "id": rid, "pid": c.pid, "pgid": c.pid, "slot": slot})
            try:
                self.fork(slot)  # the next candidate's child, ahead of need
            except OSError:
                pass
            return
        self.send({"event": "error", "id": rid, "error": "cannot hand the request to a child: %s" % err})

    def reap(self):
        import signal

        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or not info.si_pid:
                return
            pid = info.si_pid
            try:  # the child is a zombie: its group id cannot be reused yet
                os.killpg(pid, signal.SIGKILL)  # whatever it left running in its group
            except OSError:
                pass
            _, st = os.waitpid(pid, 0)
            self.stuck.discard(pid)
            c = self.children.pop(pid, None)
            if c is None:
                continue
            self.sweep()
            if c.req_w is not None:
                os.close(c.req_w)
                c.req_w = None
            if c.status_r is not None:
                self.read_status(c.status_r)
            if c.id is not None:
                self.send({
                    "event": "exit", "id": c.id, "pid": pid,
                    "status": os.WEXITSTATUS(st) if os.WIFEXITED(st) else None,
                    "signal": os.WTERMSIG(st) if os.WIFSIGNALED(st) else 0,
                    "core": bool(os.WIFSIGNALED(st) and os.WCOREDUMP(st)),
                })
            elif self.idle.get(c.slot) is c:
                del self.idle[c.slot]  # died waiting: a new one is forked on demand
                self.send({"event": "idle_exit", "slot": c.slot, "pid": pid})

    def sweep(self):
        """Kill and reap what dead children left: the zygote is a subreaper, so a process a replay
        left outside its group (setsid) is re-parented here when its child dies, and is no child of
        self.children. Before the child's exit is reported, so that no stray holds its output. A
        stray not dead within SWEEP_WAIT of SIGKILL (uninterruptible sleep) is left to reap() and
        not waited for again: no replay waits on it."""
        import signal
        import time

        for _ in range(16):
            strays = [pid for pid in _children_of(self.pid) if pid not in self.children and pid not in self.stuck]
            if not strays:
                return
            for pid in strays:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            deadline = time.monotonic() + SWEEP_WAIT
            left = set(strays)
            while left:
                for pid in list(left):
                    try:
                        if os.waitpid(pid, os.WNOHANG)[0] == pid:
                            left.discard(pid)
                    except ChildProcessError:
                        left.discard(pid)
                if not left or time.monotonic() >= deadline:
                    break
                time.sleep(0.002)
            self.stuck |= left

    def shutdown(self):
        import signal

        for c in list(self.children.values()):
            for kill in (os.killpg, os.kill):
                try:
                    kill(c.pid, signal.SIGKILL)
                except OSError:
                    pass
        for pid, c in list(self.children.items()):
            try:
                _, st = os.waitpid(pid, 0)
            except ChildProcessError:
                continue
            if c.id is not None:
                self.send({"event": "exit", "id": c.id, "pid": pid, "status": None,
                           "signal": int(signal.SIGKILL), "core": False})
        self.children = {}


def _cmd_zygote(args):
    """zygote [--device D] [--entry MODULE:FUNCTION] [--slots N] [--slot-env JSON] [--device-memory BYTES]: fork a child per candidate."""
    import argparse
    import traceback

    p = argparse.ArgumentParser(prog="reduce_replay.py zygote")
    p.add_argument("--device", default="cpu")
    p.add_argument("--entry")
    p.add_argument("--step", type=_step_arg, help="the batch's recorded step, as JSON")
    _trust_args(p)
    p.add_argument("--slots", type=int, default=1)
    p.add_argument("--slot-env", default="[]", help="JSON list: the environment of each slot's children")
    p.add_argument("--device-memory", type=int, default=0, help="bytes each candidate's op may allocate (0: no limit)")
    p.add_argument("--exec", type=_program_arg, dest="program", help="the exec backend's Python program, as JSON (_program_arg)")
    p.add_argument("--warm-import", default="", help="modules to import once besides torch, comma-separated (with --exec)")
    o = p.parse_args(args)
    # The protocol moves off fds 0 and 1, so that nothing else (a print in an imported module, a
    # child before it redirects) can write into it.
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    if o.program is None:
        _cwd_on_path()
    hello = {"event": "hello", "pid": os.getpid(), "python": platform.python_version(),
             "executable": sys.executable, "device": o.device}

    def say(obj):
        data = (json.dumps(obj, sort_keys=True) + "\n").encode()
        os.write(proto_out, data)

    try:
        slot_env = json.loads(o.slot_env)
        if not isinstance(slot_env, list) or not all(isinstance(e, dict) for e in slot_env):
            raise ValueError("want a list of objects")
        slot_env = [{str(k): str(v) for k, v in e.items()} for e in slot_env]
    except ValueError as e:
        hello["error"] = "--slot-env: %s" % e
        say(hello)
        return 2
    if o.slots < 1:
        hello["error"] = "--slots %d: want at least 1" % o.slots
        say(hello)
        return 2
    try:
        import torch
        import torch.nn.functional
    except BaseException as e:
        traceback.print_exc()
        hello["error"] = "cannot import torch with %s: %s: %s" % (sys.executable, type(e).__name__, e)
        hello["no_torch"] = True
        say(hello)
        return HARNESS_EXIT
    hello["torch"] = str(torch.__version__)
    hello["cuda"] = getattr(torch.version, "cuda", None)
    hello["hip"] = getattr(torch.version, "hip", None)
    try:
        _check_device(o.device)
    except HarnessError as e:
        hello["error"] = str(e)
        say(hello)
        return HARNESS_EXIT
    # The --entry or step module is imported on one thread: torch's CPU thread pool (GNU OpenMP)
    # is not fork-safe, and one started here by an op it runs at import would hang every child in
    # its first parallel op. Without one, nothing changes (torch 1.13's set_num_threads maps 8 MiB).
    warm = [m.strip() for m in o.warm_import.split(",") if m.strip()] if o.program is not None else []
    if o.program is not None:
        # The program's own sys.path, and its own reduce_batch (or reduce_hooks) if it imports one
        # (the copies this file imported are not on its path).
        for name in [n for n in sys.modules if n.partition(".")[0] in ("reduce_batch", "reduce_hooks")]:
            sys.modules.pop(name, None)
        _set_path0(_program_path0(o.program))
    threads = torch.get_num_threads() if o.entry or o.step or warm else 0
    if threads:
        torch.set_num_threads(1)
    for name in warm:
        try:
            __import__(name)
        except BaseException as e:
            traceback.print_exc()
            hello["entry_error"] = "--warm-import %s: cannot import it with %s: %s: %s" % (name, sys.executable, type(e).__name__, e)
            break
    if o.entry or o.step:
        # A training step's first optimizer.step() imports torch._dynamo in torch 2.x (about 800
        # modules, most of a second): imported once here, every child has it.
        try:
            import torch._dynamo

            if os.environ.get("REDUCE_COMPILED") and not torch._dynamo.config.disable:
                # A step compiled with torch.compile (the batch's meta "compiled"): Inductor's
                # modules (0.7 s), imported once here rather than by every child's first compile.
                import torch._inductor.compile_fx
        except Exception:
            pass
    _set_trust(o.trusted)  # the children inherit it
    if o.entry:
        try:
            steps.resolve_entry(o.entry)  # imported once here; a failure is every child's to report
        except HarnessError as e:
            hello["entry_error"] = str(e)
    elif o.step:
        try:
            # The children inherit the module and the folder; a step (or class) that is not
            # trusted is refused here, before any candidate.
            fn = _resolve(o)
            # What every candidate of this step would import (reduce_hooks.lightning_step: the
            # Lightning package, 1.5 s), imported once here instead.
            if callable(getattr(fn, "zygote_prepare", None)):
                fn.zygote_prepare()
        except HarnessError as e:
            hello["entry_error"] = str(e)
    if threads and torch.get_num_threads() == 1:  # unless the module set a number of its own
        torch.set_num_threads(threads)
    if torch.device(o.device).type == "cuda" and torch.cuda.is_initialized():
        hello["warning"] = ("CUDA was initialized in the zygote (by the --entry module's import?): "
                            "forked children cannot use it; pass --no-zygote")
    say(hello)
    return _Zygote(o.device, o.entry, o.slots, slot_env, proto_in, proto_out, o.device_memory, o.step, o.program,
                   torch.get_num_threads() if threads else 0).run()


def _cmd_entry(args):
    """entry [MODULE:FUNCTION | --entry MODULE:FUNCTION | --step JSON [--step-class JSON]] [--trusted]: import
    the --entry function, or the recorded step (checked as a replay checks it), as a replay would, once, before any
    replay."""
    import argparse

    p = argparse.ArgumentParser(prog="reduce_replay.py entry")
    p.add_argument("function", nargs="?")
    p.add_argument("--entry")
    p.add_argument("--step", type=_step_arg)
    _trust_args(p)
    o = p.parse_args(args)
    o.entry = o.entry or o.function
    if not o.entry and not o.step:
        sys.stderr.write("usage: reduce_replay.py entry MODULE:FUNCTION\n")
        return 2
    _cwd_on_path()
    old = _set_trust(o.trusted)
    try:
        _resolve(o)
    except HarnessError as e:
        sys.stderr.write("reduce_batch: harness: %s\n" % e)
        return HARNESS_EXIT
    finally:
        steps.step_check = old
    return 0


# Subcommands by name.
COMMANDS = {"entry": _cmd_entry, "info": _cmd_info, "replay": _cmd_replay, "zygote": _cmd_zygote}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        sys.stderr.write("usage: reduce_replay.py COMMAND ARGS...\ncommands:\n")
        for name, fn in sorted(COMMANDS.items()):
            sys.stderr.write("  %s\n" % ((fn.__doc__ or name).strip().splitlines()[0],))
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
