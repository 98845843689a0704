"""reduce_batch.command: the startup hook of `reduce record -- COMMAND`, and of a recorded command's replay.

reduce starts the user's command with a sitecustomize.py of its own first on PYTHONPATH: every Python process the
command starts (torchrun's ranks, accelerate's, a console script's) calls install() and then chain(), which runs the
sitecustomize that was there before (Debian's, a virtual environment's). Nothing here imports torch: the loader is
patched when the program imports it (_Finder).

Recording (REDUCE_RECORD): every batch a DataLoader yields (or the --batch-fn function returns) is kept by reference
with the indices its batch sampler gave (dataset indices, through a Subset the wrapped dataset's too), the epoch and its
position; when the program dies of an exception, the batch whose step raised is written with the error and the command
that replays it (docs/RECORDING.md, "Recording a command"). The batch whose step raised: in a loop under grad, the one
at the position given by the steps completed since the loader's pass began (a backward that returned, counted once per
batch yielded since the last counted one: a loop that fetches its next batch before its backward, as GPT scripts do, or
a loader that fetches one ahead, as Lightning's and accelerate's do, is right); without grad, the last one yielded.

Replaying (REDUCE_HANDOVER): the first batch of the recorded loader (its dataset's type and length, and the grad mode it
yielded in) or the first return of the recorded function for the same arguments is the candidate; later batches of
it are the candidate again. The candidate passes when its step completed: an optimizer step returned after the
handover, or the loader was asked again after a backward, or twice more in the handover's grad mode; the process then
exits 0 at once.
An exception is the candidate's failure, as the program prints it. With serve set, the process becomes the torch
backend's fork server at the handover (worker._Zygote): each candidate is a child forked there."""

import collections
import contextlib
import importlib
import importlib.abc
import importlib.util
import json
import os
import re
import sys
import threading

from .record import tensor_ids

RECORD_ENV, HANDOVER_ENV = "REDUCE_RECORD", "REDUCE_HANDOVER"
PASSED = "reduce: the candidate's step completed"  # printed on stderr before the replay exits 0
# What the replay takes of the recorded environment: what the program read, and these, never what looks like a secret.
_ENV_PREFIXES = ("CUDA_", "PYTORCH_", "TORCH", "NCCL_", "OMP_", "MKL_", "HF_", "TRANSFORMERS_", "TOKENIZERS_",
                 "ACCELERATE_", "PL_", "LIGHTNING_", "WANDB_MODE", "PYTHONHASHSEED", "CUBLAS_", "HIP_")
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASS|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|_URL|URI|DSN|CONN|_PAT\b",
                     re.IGNORECASE)
_SHELL_ENV = ("PATH", "HOME", "SHELL", "TERM", "PWD", "OLDPWD", "SHLVL", "USER", "LOGNAME", "MAIL", "_", "HOSTNAME",
              "LS_COLORS", "DISPLAY", "EDITOR", "PAGER", "LESS", "TMUX", "STY", "COLORTERM")  # the shell's, not the run's
_RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
             "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
             "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE")
_MAX_ENTRIES = 10000  # of the directory a command starts in, recorded by name (more: all are linked in a replay)
_RING = 4  # yields kept per loader pass (by reference): the failing step's batch is among the last few



def startup(here):
    """What reduce's sitecustomize runs: install(), then the sitecustomize it shadows."""
    try:
        install()
    except Exception as e:  # noqa: BLE001  (the program runs all the same)
        _say(f"the startup hook failed ({type(e).__name__}: {e}): this process is not hooked")
    chain(here)


def fixture_run(command, batch, scratch):
    """How the collector runs a batch of a recorded command's fixture in a child process: (argv, cwd, env), the
    startup hook written into `scratch` (removed by the caller), the candidate `batch` handed over as in a replay.
    The recorded directory (a home redacted as ~) and interpreter where they are here, else pytest's and this one."""
    import pkgutil

    with open(os.path.join(scratch, "sitecustomize.py"), "wb") as f:  # the package's, as reduce writes it (HookDir)
        f.write(pkgutil.get_data(__package__, "sitecustomize.py"))
    cwd = os.path.expanduser(command.get("cwd") or "")
    exe = os.path.expanduser(command.get("executable") or "")
    cwd, exe = cwd if os.path.isdir(cwd) else os.getcwd(), exe if os.path.isfile(exe) else sys.executable
    package = os.path.dirname(os.path.abspath(__file__))  # this package alone, beside the hook (no other of its site)
    path = scratch
    if os.path.isdir(package):
        os.symlink(package, os.path.join(scratch, "reduce_batch"))
    else:  # a zip's: the zip
        path = os.pathsep.join((scratch, os.path.dirname(package)))
    env = dict(os.environ, **{k: v for k, v in (command.get("env") or {}).items() if k != "PYTHONPATH"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path, (command.get("env") or {}).get(
        "PYTHONPATH", os.environ.get("PYTHONPATH", ""))) if p)
    env[HANDOVER_ENV] = json.dumps({"command": dict(command, cwd=cwd), "batch": os.path.abspath(batch),
                                    "scratch": scratch})
    env.update(PYTHONUNBUFFERED="1", CUDA_LAUNCH_BLOCKING="1", AMD_SERIALIZE_KERNEL="3", REDUCE_REPLAY="1")
    return [exe, *command.get("argv", [])], cwd, env


def _say(msg):
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"reduce: {msg}\n")
        sys.stderr.flush()


class _State:
    def __init__(self):
        self.mode, self.conf = None, {}
        self.cwd, self.read = os.getcwd(), set()  # the directory the process started in; the variables it read
        self.lock = threading.RLock()
        self.passes = {}  # loader key -> [pass number, position of the pass's first yield in the backward count]
        self.last = None  # the pass that yielded last: _Pass
        self.backwards, self.counted_at = 0, -1  # steps completed; the yield serial at the last counted one
        self.serial = 0  # yields so far
        self.depth, self.pending = 0, collections.deque()  # inside a DataLoader subclass's own __iter__
        self.handed = None  # replay: the handover's grad mode, once it happened
        self.after = 0  # replay: fetches in the handover's grad mode since it
        self.entries = None  # the names in the directory the process started in, then
        self.iterating = 0  # os.environ is being iterated or copied
        self.backward_after = False  # replay: a backward returned after the handover


_S = _State()


class _Pass:  # one loader's pass (an epoch) or the --batch-fn function's returns
    def __init__(self, key, epoch, grad, start):
        self.key, self.epoch, self.grad, self.start = key, epoch, grad, start
        self.ring = collections.deque(maxlen=_RING)  # (position, batch, dataset, sampler index, serial)
        self.count = 0


def install():
    """Called by reduce's sitecustomize in every Python process of the command."""
    if os.environ.get(HANDOVER_ENV):
        _S.mode, conf = "replay", json.loads(os.environ.pop(HANDOVER_ENV))  # this process's alone
        cmd = conf.get("command") or {}
        call = cmd.get("batch_fn") or ""
        _S.conf = dict(conf, loader=cmd.get("loader"), batch_fn=call.partition("(")[0], batch_fn_call=call,
                       grad=bool(cmd.get("grad", True)), rank_alone="world_size" in cmd)
        os.environ.pop(RECORD_ENV, None)
        if _S.conf.get("serve"):
            _move_protocol()
        _group_of_one()
        _scratch_cwd(cmd)
        _never_handed()
    elif os.environ.get(RECORD_ENV):
        _S.mode, _S.conf = "record", json.loads(os.environ[RECORD_ENV])
        _S.conf["batch_fn"] = _as_main(_S.conf.get("batch_fn") or "")
        with contextlib.suppress(OSError):
            names = os.listdir(_S.cwd)
            _S.entries = sorted(names) if len(names) <= _MAX_ENTRIES else None
        _watch_environ()
        previous = sys.excepthook
        sys.excepthook = lambda tp, exc, tb: (_on_crash(exc), previous(tp, exc, tb))
    else:
        return
    sys.meta_path.insert(0, _Finder())
    for name in list(_PATCHES):
        if name in sys.modules:
            _PATCHES[name](sys.modules[name])
    _main_batch_fn()


def _as_main(fn):
    """--batch-fn train:get_batch where the command runs train.py: the script's module is __main__."""
    module, _, name = fn.partition(":")
    script, rest = "", list(getattr(sys, "orig_argv", ()))[1:]
    while rest:  # the interpreter's options, up to the script (-X and -W take a value; -c and -m run no script)
        a = rest.pop(0)
        if a in ("-c", "-m") or a.startswith(("-c", "-m")) and len(a) > 2:
            break
        if a in ("-X", "-W", "-Q"):
            rest = rest[1:]
        elif not a.startswith("-"):
            script = a
            break
    if script and os.path.splitext(os.path.basename(script))[0] == module:
        return "__main__:" + name
    return fn


def chain(here):
    """Run the sitecustomize that reduce's shadows (Debian's, a virtual environment's), as site would have."""
    here = os.path.realpath(os.path.dirname(here))
    ours, saved = sys.modules.pop("sitecustomize", None), list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError as e:
        if e.name != "sitecustomize":
            _say(f"the sitecustomize run after reduce's failed: {type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001  (as site does: said, and the program runs)
        _say(f"the sitecustomize run after reduce's failed: {type(e).__name__}: {e}")
    finally:
        sys.path[:] = saved + [p for p in sys.path if p not in saved]
        if ours is not None:
            sys.modules["sitecustomize"] = ours


# The patches, applied when the program imports their module.

def _patch_loader(dl):
    It = dl._BaseDataLoaderIter
    if getattr(It, "_reduce_patched", False):
        return
    next_index, next_batch, reset = It._next_index, It.__next__, It._reset

    def _reset(self, *args, **kwargs):  # a pass starts (persistent workers: each epoch): what it fetches from here
        self.__dict__["_reduce_indices"] = collections.deque()
        return reset(self, *args, **kwargs)

    def _next_index(self):
        index = next_index(self)
        self.__dict__.setdefault("_reduce_indices", collections.deque()).append(index)
        return index

    def __next__(self):
        if _S.mode == "replay" and _S.conf.get("loader") and _loader_key(self._dataset) == _S.conf["loader"]:
            return _handover(lambda: next_batch(self), self)
        data = next_batch(self)  # an error here is the loader's own: _on_crash tells it by this frame
        queue = self.__dict__.get("_reduce_indices")
        index = queue.popleft() if queue else None
        if _S.mode == "record":
            _yielded(_loader_key(self._dataset), self._dataset, data, index, getattr(self, "_num_yielded", 0))
        return data

    It._next_index, It.__next__, It._reset, It._reduce_patched = _next_index, __next__, _reset, True
    _LOADER_FRAMES.add(__next__.__code__)
    for sub in _subclasses(dl.DataLoader):
        _patch_iter(sub)
    init_subclass = dl.DataLoader.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        (init_subclass.__get__(cls) if init_subclass else super(dl.DataLoader, cls).__init_subclass__)(**kwargs)
        _patch_iter(cls)

    dl.DataLoader.__init_subclass__ = classmethod(__init_subclass__)


def _patch_iter(cls):
    """A DataLoader subclass's own __iter__ that is a generator (accelerate's, which moves each batch to the device
    and fetches one ahead): its yields are the program's batches. One that returns an iterator object of its own
    (torchdata's) is left as it is: its iterator's batches are noted as the program's."""
    import inspect

    own = cls.__dict__.get("__iter__")
    if own is None or getattr(own, "_reduce_patched", False) or not inspect.isgeneratorfunction(own):
        return

    def __iter__(self):
        with _S.lock:
            _S.pending.clear()  # a pass left early (a break) leaves what it fetched ahead
        it = own(self)
        while True:
            with _S.lock:
                _S.depth += 1
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                with _S.lock:
                    _S.depth -= 1
            if _S.mode == "record":
                with _S.lock:
                    inner = _S.pending.popleft() if _S.pending else None
                if inner is not None:
                    _keep(*inner)
            yield item

    __iter__._reduce_patched = True
    cls.__iter__ = __iter__


def _subclasses(cls):
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def _patch_autograd(autograd):
    backward = autograd.backward
    if getattr(backward, "_reduce_patched", False):
        return

    def wrapped(*args, **kwargs):
        out = backward(*args, **kwargs)
        _step_done()
        return out

    wrapped._reduce_patched = True
    autograd.backward = wrapped


def _patch_optim(optim):  # replay: an optimizer step that returned completes the candidate's step
    Optimizer = optim.Optimizer

    def patch(cls):
        own = cls.__dict__.get("step")
        if own is None or getattr(own, "_reduce_patched", False):
            return

        def step(self, *args, **kwargs):
            out = own(self, *args, **kwargs)
            if _S.mode == "replay" and _S.handed is not None:
                _passed()
            return out

        step._reduce_patched = True
        cls.step = step

    for sub in _subclasses(Optimizer):
        patch(sub)
    init_subclass = Optimizer.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        (init_subclass.__get__(cls) if init_subclass else super(Optimizer, cls).__init_subclass__)(**kwargs)
        patch(cls)

    Optimizer.__init_subclass__ = classmethod(__init_subclass__)


_PATCHES = {"torch.utils.data.dataloader": _patch_loader, "torch.autograd": _patch_autograd,
            "torch.optim.optimizer": _patch_optim}
_LOADER_FRAMES = set()  # code objects of the patched loader calls: an exception through one is the loader's


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a module of _PATCHES, or the --batch-fn module, once the program has imported it."""

    def find_spec(self, name, path=None, target=None):
        if name not in _PATCHES and name != _batch_fn()[0]:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader)
                return spec
            if spec is not None:
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            if module.__name__ in _PATCHES:
                _PATCHES[module.__name__](module)
            if module.__name__ == _batch_fn()[0]:
                _patch_batch_fn(module.__dict__)
        except Exception as e:  # noqa: BLE001  (the program runs all the same)
            _say(f"cannot hook {module.__name__}: {type(e).__name__}: {e}; this process is not recorded")

    def __getattr__(self, name):
        return getattr(self.loader, name)


def _batch_fn():
    fn = _S.conf.get("batch_fn") or ""
    module, _, name = fn.partition(":")
    return (module, name) if module and name else ("", "")


def _patch_batch_fn(namespace):
    module, name = _batch_fn()
    fn = namespace.get(name)
    if not callable(fn) or getattr(fn, "_reduce_patched", False):
        return False

    def wrapped(*args, **kwargs):
        key = f"{module}:{name}{_args_text(args, kwargs)}"
        if _S.mode == "replay":
            return _handover(lambda: fn(*args, **kwargs), None, key)
        data = fn(*args, **kwargs)
        _yielded(key, None, data, None, None)
        return data

    wrapped._reduce_patched, wrapped.__wrapped__ = True, fn
    namespace[name] = wrapped
    return True


def _args_text(args, kwargs):  # the call's arguments where they are plain values: get_batch('train') is not ('val')
    plain = (str, int, float, bool, type(None))
    parts = [repr(a) for a in args if isinstance(a, plain)] + [f"{k}={v!r}" for k, v in sorted(kwargs.items())
                                                                if isinstance(v, plain)]
    return "(" + ", ".join(parts) + ")"


def _main_batch_fn():
    """A --batch-fn in the program's __main__ (a script's function): patched where the script defines it, by a trace
    of the script's own frame that stops once it is."""
    module, name = _batch_fn()
    if module != "__main__" or not name:
        return

    def local(frame, event, arg):
        if _patch_batch_fn(frame.f_globals):
            sys.settrace(None)
            frame.f_trace = None
            return None
        return local

    def trace(frame, event, arg):
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            return local
        return None

    sys.settrace(trace)


# Recording.

def _loader_key(dataset):
    try:
        n = len(dataset)
    except Exception:  # noqa: BLE001  (an IterableDataset)
        n = None
    return f"{type(dataset).__module__}.{type(dataset).__qualname__}:{n}"


def _grad():
    torch = sys.modules.get("torch")
    return bool(torch is None or torch.is_grad_enabled())


def _yielded(key, dataset, data, index, position):
    """A batch the loader (or the batch function) yielded: kept (by reference) with its sampler's index (made into
    ids only when a crash is recorded, _ids); under a DataLoader subclass's own __iter__ queued until that yields."""
    with _S.lock:
        if position is None:  # the batch function: one pass, counted here
            p = _S.passes.get((key, _grad()))
            position = (p.count if p is not None else 0) + 1
        item = (key, data, dataset, index, position, _grad())
        if _S.depth > 0:
            _S.pending.append(item)
        else:
            _keep(*item)


def _keep(key, data, dataset, index, position, grad):
    with _S.lock:
        p = _S.passes.get((key, grad))  # a loader's batches under no_grad (an evaluation) are a pass apart
        if p is None or position <= p.count:  # a new pass: an epoch
            p = _Pass(key, 0 if p is None else p.epoch + 1, grad, _S.backwards)
            _S.passes[(key, grad)] = p
        p.count, _S.serial = position, _S.serial + 1
        p.ring.append((position - 1, data, dataset, index, _S.serial))
        _S.last = p


def _ids(dataset, index):
    """The dataset indices of a batch (the batch sampler's), and through Subsets those of the dataset they wrap."""
    if index is None:
        return None, None
    ids = list(index) if isinstance(index, (list, tuple)) else [index]
    if not all(isinstance(i, int) or hasattr(i, "__index__") for i in ids):
        return None, None  # an IterableDataset's (None), or a sampler's own kind: no dataset indices
    ids, wrapped, d = [int(i) for i in ids], None, dataset
    try:
        while hasattr(d, "indices") and hasattr(d, "dataset") and type(d).__name__ == "Subset":
            wrapped, d = [int((d.indices)[i]) for i in (wrapped or ids)], d.dataset
    except Exception:  # noqa: BLE001
        wrapped = None
    return ids, wrapped


def _step_done():
    """A backward returned: it completes one step, counted once per batch yielded since the last counted one."""
    with _S.lock:
        if _S.serial != _S.counted_at:
            _S.backwards, _S.counted_at = _S.backwards + 1, _S.serial
    if _S.mode == "replay" and _S.handed is not None:
        _S.backward_after = True  # the candidate's step completes at its optimizer step or the next fetch


def _failing(exc):
    """The batch whose step raised: (pass, (position, batch, dataset, sampler index, serial)), or None.
    - an evaluation's (a pass under no_grad) whose tensors the failing frames hold, where no training batch's are;
    - else the training pass's (under grad) at the position of the steps completed in it (the frames may hold the
      next batch already: a loop that fetches it before its backward);
    - else the one the frames hold, else the last one yielded."""
    held = _held(exc)
    found = [(p, item) for p in _S.passes.values() for item in p.ring if tensor_ids(item[1]) & held]
    evals = [f for f in found if not f[0].grad]
    if evals and len(evals) == len(found):
        return max(evals, key=lambda f: f[1][4])
    train = [p for p in _S.passes.values() if p.grad and p.ring]
    if train:
        p = max(train, key=lambda p: p.ring[-1][4])
        want = _S.backwards - p.start
        if want > 0 and _S.counted_at == _S.serial and _in_update(exc):  # raised after the batch's own backward
            want -= 1
        return p, next((item for item in p.ring if item[0] == want), p.ring[-1])
    if found:
        return max(found, key=lambda f: f[1][4])
    return (_S.last, _S.last.ring[-1]) if _S.last is not None and _S.last.ring else None


def _in_update(exc):
    """Whether the error came from an update after the backward: an optimizer's step, gradient clipping, the scaler."""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if "/torch/optim/" in name or "clip_grad" in name or "grad_scaler" in name:
            return True
        tb = tb.tb_next
    return False


def _held(exc):  # the tensors the traceback's frames hold (their locals, a level or two into containers)
    out, tb = set(), exc.__traceback__
    while tb is not None:
        with contextlib.suppress(Exception):
            for v in tb.tb_frame.f_locals.values():
                out |= tensor_ids(v, 2)
        tb = tb.tb_next
    return out


def _through_loader(exc):
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in _LOADER_FRAMES:
            return True
        tb = tb.tb_next
    return False


def _on_crash(exc):
    if _S.mode != "record" or not isinstance(exc, Exception):
        return
    try:
        _record(exc)
    except Exception as e:  # noqa: BLE001  (never mask the program's own exception)
        _say(f"could not record the failing batch: {type(e).__name__}: {e}")


def _record(exc):
    from .fileformat import save
    from .hook_torchrun import ranked

    found = _failing(exc)
    if found is None:
        if type(exc).__module__.startswith("torch.distributed.elastic") or (
                type(exc).__name__ == "CalledProcessError" and _S.backwards == 0):
            return None  # a launcher's own process (torchrun, accelerate), telling of a rank's: the rank records its own
        if _S.conf.get("batch_fn"):
            return _say(f"the error came before {_S.conf['batch_fn']} returned a batch: nothing recorded")
        return _say("the error came before any DataLoader yielded a batch (in the program's setup?): nothing "
                    "recorded. A loop that makes its own batches names the function: reduce record --batch-fn "
                    "MODULE:FUNCTION -- ...")
    if _through_loader(exc):
        return _say("the error was raised by the DataLoader while it made a batch, not by a step: nothing recorded")
    p, (position, batch, dataset, index, _) = found
    ids, wrapped = _ids(dataset, index)
    where = {"epoch": p.epoch, "position": position}
    if wrapped is not None:
        where["wrapped"] = wrapped
    meta = {"command": json.dumps(_command(p), sort_keys=True), "sample_ids": "dataset index" if ids else None,
            "batch_position": json.dumps(where, sort_keys=True)}
    path, kwargs = ranked(os.path.abspath(os.path.join(_S.cwd, _S.conf["out"])), {"meta": meta})
    kwargs["meta"] = dict(meta, **kwargs.get("meta", {}))
    state = _state_of(exc) if _S.conf.get("state") else None
    tries = [dict(kwargs, sample_ids=ids, state=state), dict(kwargs, sample_ids=ids), dict(kwargs)]
    for i, kw in enumerate(tries):
        kw = {k: v for k, v in kw.items() if v is not None}
        try:
            save(path, batch, error=exc, _failed=True, **kw)
            break
        except Exception as e:
            if i == len(tries) - 1:
                raise
            _say(f"{type(e).__name__}: {str(e)[:300]}; recording {'without the state' if i == 0 else 'without ids'}")
    of = f" of the Subset; {_few(wrapped)} in the dataset it wraps" if wrapped else ""
    at = f"dataset indices {_few(ids)}{of}: batch {position + 1} of epoch {p.epoch + 1}" if ids else \
        f"{p.key.partition(':')[2]}, call {position + 1}" if p.key.split("(")[0] == _S.conf.get("batch_fn") else \
        f"batch {position + 1} of epoch {p.epoch + 1}"
    _say(f"recorded the batch whose step raised ({at}) to {path}")


def _few(ids):
    return ", ".join(map(str, ids[:6])) + (f", ... ({len(ids)} in all)" if len(ids) > 6 else "")


def _command(p):
    """What replays this process: its interpreter and command line, its directory, the environment it read (rank
    variables and secrets aside), and the loader (or batch function) whose batch is handed over."""
    read = set(_S.read)  # before the items below are read
    env = {k: v for k, v in os.environ.items() if (k in read or k.startswith(_ENV_PREFIXES)) and
           not _SECRET.search(k) and k not in _RANK_ENV and k not in _SHELL_ENV and not k.startswith(("REDUCE_", "SSH_",
           "XDG_", "LC_", "SLURM_", "OMPI_", "PMI_", "PMIX_")) and k not in ("PYTHONPATH", "CUDA_VISIBLE_DEVICES",
                                                                             "HIP_VISIBLE_DEVICES")}
    hook = os.path.realpath(_S.conf.get("hook_dir") or "")
    path = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e and
            os.path.realpath(e) != hook and not os.path.realpath(e).startswith(hook + os.sep)]
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    cmd = {"executable": sys.executable, "argv": list(getattr(sys, "orig_argv", sys.argv)[1:]), "cwd": _S.cwd,
           "env": env, "grad": p.grad, "entries": _S.entries}
    cmd["batch_fn" if p.key.split("(")[0] == _S.conf.get("batch_fn") else "loader"] = p.key
    if int(os.environ.get("WORLD_SIZE", "1") or "1") > 1:
        cmd["rank"], cmd["world_size"] = int(os.environ.get("RANK", 0)), int(os.environ["WORLD_SIZE"])
    return cmd


def _state_of(exc):
    """--state: the weights and optimizer state the failing frames hold, by the frame's function and local name."""
    torch, state, tb = sys.modules["torch"], {}, exc.__traceback__
    while tb is not None:
        f = tb.tb_frame
        for name, v in f.f_locals.items():
            if isinstance(v, (torch.nn.Module, torch.optim.Optimizer)) and f"{f.f_code.co_name}.{name}" not in state:
                state[f"{f.f_code.co_name}.{name}"] = v
        tb = tb.tb_next
    return state or None


class _Reading(type(os.environ)):
    """os.environ, noting the variables the program reads by name (the environment that matters); not those a
    copy or an iteration of the whole reads."""

    def __getitem__(self, key):
        if not _S.iterating:
            _S.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        _S.read.add(key)
        return super().__contains__(key)

    def __iter__(self):
        _S.iterating += 1
        try:
            yield from super().__iter__()
        finally:
            _S.iterating -= 1

    def copy(self):
        _S.iterating += 1
        try:
            return dict(self)
        finally:
            _S.iterating -= 1


def _watch_environ():
    with contextlib.suppress(TypeError):
        os.environ.__class__ = _Reading


# Replaying.

def _group_of_one():  # a rank's recording replays that rank alone, in a process group of one
    if not _S.conf.get("rank_alone"):
        return
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", GROUP_RANK="0",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def _scratch_cwd(cmd, base=None):
    """A replay runs in a scratch copy of the recorded directory made of links: to what the directory held when the
    recorded process started, and at each directory above it to what else that one holds, so that a path relative
    to it (data/, ../data) reads what it read. What the program writes there (a config, logs, checkpoints) is the
    replay's, removed with it, and what the recorded run wrote there (a config a second run refuses to write over)
    is not seen."""
    src, base = cmd.get("cwd"), base or _S.conf.get("scratch") or os.environ.get("REDUCE_RUN_DIR")
    if not src or not base or not os.path.isdir(src):
        return
    _S.conf["real_cwd"] = src
    real, farm = os.path.realpath(src), os.path.join(base, "root")
    try:
        up, here = os.sep, farm
        for part in [p for p in real.split(os.sep) if p]:
            os.makedirs(here, exist_ok=True)
            _links(up, here, [n for n in _listed(up) if n != part])
            up, here = os.path.join(up, part), os.path.join(here, part)
        os.makedirs(here, exist_ok=True)
        names = cmd.get("entries")
        _links(real, here, _listed(real) if names is None else names)
        os.chdir(here)
        os.environ["PWD"] = here
        _S.farm = (farm, real)
        if not getattr(_S, "audit", False):
            sys.addaudithook(_copy_on_write)
            _S.audit = True
    except OSError as e:
        from .errors import HARNESS_EXIT

        _say(f"harness: cannot make the replay's scratch directory under {base}: {e}")
        os._exit(HARNESS_EXIT)


def _copy_on_write(event, args):
    """A replay writes into its scratch directory, never through its links into yours: a file opened for writing (or
    a directory made) under a linked directory gets a directory of its own, of links, and a linked file opened for
    writing is replaced by a copy first."""
    if event not in ("open", "os.mkdir", "os.rename", "os.remove", "os.rmdir") or not getattr(_S, "farm", None):
        return
    path = args[0]
    if event == "open":
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
        if not (flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND) or set(mode) & set("wax+")):
            return
    if not isinstance(path, (str, bytes, os.PathLike)) or isinstance(path, int):
        return
    with contextlib.suppress(OSError, ValueError):
        _privatize(os.path.abspath(os.fsdecode(path)), event == "open")


def _privatize(path, file):
    import shutil

    farm = _S.farm[0]
    if not path.startswith(farm + os.sep):
        return
    parts = os.path.relpath(path, farm).split(os.sep)
    here = farm
    for i, part in enumerate(parts):
        nxt = os.path.join(here, part)
        if not os.path.islink(nxt):
            here = nxt
            continue
        target = os.readlink(nxt)
        last = i == len(parts) - 1
        if last and not file:
            return  # a link itself renamed or removed: the link goes, not what it names
        os.unlink(nxt)
        if os.path.isdir(target) and not last:
            os.mkdir(nxt)
            _links(target, nxt, _listed(target))
        elif last and os.path.isfile(target):
            shutil.copy2(target, nxt)
        here = nxt


def _listed(d):
    with contextlib.suppress(OSError):
        names = os.listdir(d)
        return names if len(names) <= _MAX_ENTRIES else []
    return []


def _links(src, dst, names):
    for name in names:
        if os.path.lexists(os.path.join(src, name)) and not os.path.lexists(os.path.join(dst, name)):
            os.symlink(os.path.join(src, name), os.path.join(dst, name))


def _never_handed():
    """A replay whose program ends, or dies, before the recorded loader (or function) gave its first batch ran no
    candidate: the harness's exit, naming what never came (the program changed, or failed in its setup)."""
    import atexit

    from .errors import HARNESS_EXIT

    what = _S.conf.get("batch_fn_call") or _S.conf.get("loader")

    def check(exc=None):
        if _S.handed is None:
            raised = f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}" if exc \
                else "ended"
            _say(f"harness: the program {raised.rstrip(': ')} before {what} gave its first batch: no candidate ran "
                 "(has the program changed since the recording?)")
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(HARNESS_EXIT)

    previous = sys.excepthook
    sys.excepthook = lambda tp, exc, tb: (previous(tp, exc, tb), check(exc))
    atexit.register(check)


def _move_protocol():  # serve: the fork server's protocol is fds 0 and 1 as reduce started the process
    _S.proto = (os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)


def _handover(real, it, key=None):
    """The recorded loader's or function's next batch, in a replay: the candidate from the first in the recorded grad
    mode on; a call in the other mode gets the real batch (an evaluation between the steps)."""
    grad = _grad()
    if key is not None and key != _S.conf.get("batch_fn_call", key) or grad != _S.conf.get("grad", grad):
        return real()
    if _S.handed is None:
        _S.handed = grad
        if _S.conf.get("serve"):
            _serve()  # returns in each forked child, with its candidate's path set
        return _load_candidate(state=True)
    _S.after += 1
    if _S.after >= 2 or _S.backward_after:
        _passed()
    return _load_candidate()


def _load_candidate(state=False):
    """The candidate's batch; with state (the handover), the weights and optimizer state it records (--state) loaded
    into the objects of the same names in the frames that asked for the batch (their function and local name)."""
    from .reader import load

    path = _S.conf["batch"]
    if not os.path.isabs(path):
        path = os.path.join(os.environ.get("REDUCE_RUN_DIR", ""), path)
    b = load(path)
    if state and b.state:
        from .steps import restore_rng

        restore_rng(b.state)  # the random generators as they were at the crash
        f, left = sys._getframe(1), {k: v for k, v in b.state.items() if k != "rng"}
        while f is not None and left:
            for name, v in f.f_locals.items():
                key = f"{f.f_code.co_name}.{name}"
                if key in left and callable(getattr(v, "load_state_dict", None)):
                    v.load_state_dict(left.pop(key))
            f = f.f_back
        if left:
            _say(f"the recorded state of {', '.join(sorted(left))} found nothing of that name to load into")
    return b.data


def _passed():
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # a device error the step queued shows here
        torch.cuda.synchronize()
    _say(PASSED)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(0)


def _serve():
    """The fork server at the handover; in each child, the candidate's path, and an exit with no teardown of the
    server's: an uncaught exception printed and 1, the program's end 0 (its atexit work is the server's)."""
    import atexit
    import traceback

    from .worker import serve_handover

    proto_in, proto_out = _S.proto
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    why = "the program initialized CUDA before its first batch" if torch is not None and \
        torch.cuda.is_initialized() else "the program started a torch.distributed process group before its first " \
        "batch" if dist is not None and dist.is_available() and dist.is_initialized() else ""
    req = serve_handover(proto_in, proto_out, int(_S.conf.get("slots", 1)), why)  # returns in a child only
    _S.conf["batch"] = req["path"]
    if req.get("run_dir"):  # a scratch directory of its own: concurrent candidates write apart
        _scratch_cwd(dict(_S.conf.get("command") or {}, cwd=_S.conf.get("real_cwd")), req["run_dir"])

    def leave(code=0):  # sys.exit in the child: its status, with no teardown of the server's
        code = 0 if code is None else code if isinstance(code, int) else (_say(str(code)) or 1)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

    sys.exit = leave

    def excepthook(tp, exc, tb):
        with contextlib.suppress(BaseException):
            traceback.print_exception(tp, exc, tb)
            sys.stderr.flush()
        os._exit(1)

    sys.excepthook = excepthook
    atexit.register(lambda: (sys.stdout.flush(), os._exit(0)))
