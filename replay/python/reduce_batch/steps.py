"""reduce_batch.steps: recorded steps and --entry functions: resolving them, restoring the generators, loading a
candidate and calling its step."""

import contextlib
import functools
import json
import os
import re
import sys

import reduce_batch

from . import hooks
from .errors import HarnessError
from .fileformat import torch_module
from .modules import HOOKS_MODULES, is_installed, module_files, under
from .ops import run_op
from .trust import Trust, file_digest, reduce_own, stored


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


def _step_paths(step, tree=None):
    """(folders, cwd): the folders the recorded step is imported from, first first (the root of
    its module's package, the folder of its file for a top-level module; then the working
    directory it ran in, as when the user ran their script), and that working directory. With a
    tree (step_check's: the worker's working directory, pytest's root directory) that holds the
    step's file at the place it had in the recorded checkout (_checkout_move: another checkout of
    the repository, whose code is the one under test), every recorded folder moves into the tree
    and one outside the recorded checkout is left out; a tree that does not hold it leaves them as
    recorded."""
    folders, cwd = [], step.get("cwd") or None
    f, mod = step.get("file"), step.get("module", "")
    rels = [os.path.basename(f)] if f and mod == "__main__" else _module_rels(mod)
    if f:
        root = os.path.dirname(os.path.abspath(f))
        if mod != "__main__":
            parts = mod.split(".")
            if os.path.splitext(os.path.basename(f))[0] == "__init__":
                parts = parts[:-1]
            for _ in parts[:-1]:
                root = os.path.dirname(root)
        folders.append(root)
    if cwd:
        folders.append(cwd)
    if tree and folders and not all(under(os.path.realpath(d), tree) for d in folders):
        move = _checkout_move(folders[0], rels, tree, cwd)
        if move is not None:
            folders = [m for m in map(move, folders) if m]
            cwd = move(cwd) if cwd else None
    return folders, cwd


def _module_rels(mod):
    """The paths, relative to a folder on sys.path, of the file of the module named mod."""
    base = os.path.join(*mod.split(".")) if mod else ""
    return [base + ".py", os.path.join(base, "__init__.py")] if base else []


def _in_tree(folder, rels, tree, within=None):
    """(the folder of `tree` that stands for `folder`, a recorded folder outside it, and the
    recorded checkout's root): the tree's subfolder named by the folder's last components, the
    longest such that holds one of rels, down to the tree itself, whose recorded root holds
    `within` too (the recorded working directory: the same checkout); (None, None) when none
    does."""
    parts = [p for p in os.path.abspath(folder).split(os.sep) if p]
    for k in range(len(parts), -1, -1):
        cand = os.path.join(tree, *parts[len(parts) - k:])
        recorded = os.sep + os.path.join(*parts[:len(parts) - k]) if len(parts) > k else os.sep
        if within and not under(os.path.abspath(within), recorded):
            continue
        if any(os.path.isfile(os.path.join(cand, r)) for r in rels):
            return cand, recorded
    return None, None


def _checkout_move(folder, rels, tree, within=None):
    """The function that moves a recorded folder into the tree (None for one outside the
    recorded checkout), when the tree holds rels where `folder` held them (_in_tree); None when
    it does not."""
    if under(os.path.realpath(folder), tree):
        return lambda d: d if under(os.path.realpath(d), tree) else None
    found, recorded = _in_tree(folder, rels, tree, within)
    if found is None:
        return None

    def move(d):
        if under(os.path.realpath(d), tree):
            return d
        a = os.path.abspath(d)
        return os.path.join(tree, os.path.relpath(a, recorded)) if under(a, recorded) else None

    return move


def _script(path, tree=None, within=None):
    """The recorded script, or the file of its name on sys.path (the working directory first)
    when the recorded path is gone: another checkout of the same repository, in CI. With a tree to
    trust, a script outside it stands for the tree's file at the same place (_in_tree, `within` the
    recorded working directory's checkout)."""
    if tree and not under(os.path.realpath(path), tree):
        found, _ = _in_tree(os.path.dirname(path), [os.path.basename(path)], tree, within)
        if found:
            return os.path.join(found, os.path.basename(path))
    if os.path.exists(path):
        return path
    base = os.path.basename(path)
    for d in [os.getcwd()] + sys.path:
        if d and os.path.isfile(os.path.join(d, base)):
            return os.path.join(d, base)
    return path


# Set by reduce's worker and by the collector: step_check(step, target, what) raises HarnessError for
# a recorded step (or class) of a file that is not the user's, before resolve_step imports anything
# for it (Trust). None: the caller's own call (steps.replay), which trusts as given; a
# function of reduce's own is refused all the same.
step_check = None


def resolve_step(step, chdir=False, what="step"):
    """The function of a step recorded with a batch ({module, qualname, file, cwd}): its folders
    put first on sys.path (and, with chdir, the working directory it ran in made current), then
    imported by name, or from its file when it was defined in the script that was run. Raises
    HarnessError naming the module and the sys.path tried. `what` names it in errors (a
    LightningModule class is resolved the same way)."""
    if step_check is not None and not step_check.mine:  # refused before a folder goes on sys.path or is made current
        step_check(step, "{}:{}".format(step.get("module"), step.get("qualname")), what)
    tree = getattr(step_check, "tree", None)
    paths, cwd = _step_paths(step, tree)
    for d in reversed(paths):
        if d in sys.path:
            sys.path.remove(d)
        sys.path.insert(0, d)
    if chdir and cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    if step.get("module") == "__main__":
        if not step.get("file"):
            raise HarnessError("the {} {} was defined in an interactive session (module __main__ without a "
                               "file): define it in a file".format(what, step.get("qualname")))
        target = "{}:{}".format(_script(step["file"], tree, step.get("cwd")), step["qualname"])
    else:
        target = "{}:{}".format(step["module"], step["qualname"])
    if step_check is not None:
        step_check(step, target, what)
    elif reduce_own(step, target):
        raise HarnessError(f"the recorded {what} {target} is not run: {reduce_own(step, target)}, and reduce's own "
                           "functions are never a step")
    if step.get("module") in HOOKS_MODULES and step.get("qualname") in hooks.step_names():
        target = "reduce_batch.hooks:" + step["qualname"]  # the package's, never a vendored copy on sys.path
    argv, saved = _recorded_argv(), sys.argv
    try:
        if argv is not None:  # a module that reads its command line when imported reads the recorded one
            sys.argv = argv
        return resolve_entry(target)
    except HarnessError as e:
        why = str(e).replace(f"--entry {target!r}: ", "")
        script = step.get("module") == "__main__" and _script(step["file"], tree, step.get("cwd"))
        line = script and reduce_batch.runs_at_import(script)
        if line:
            why += f"; the script runs code when imported (line {line}): put it under `if __name__ == \"__main__\":`"
        why = why.replace("(sys.path: ", "(sys.path tried: ")
        raise HarnessError(f"the recorded {what} {target}: {why}")
    finally:
        sys.argv = saved


def _recorded_argv():
    """The sys.argv of the recorded process (meta "argv", given as REDUCE_ARGV), or None."""
    try:
        argv = json.loads(os.environ.get("REDUCE_ARGV") or "null")
    except ValueError:
        return None
    return [str(a) for a in argv] if isinstance(argv, list) and argv else None


_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")


def resolve_class(entry, kind):
    """The class a hook's step rebuilds (recorded as a step entry: {module, qualname, file, cwd}),
    returned only when it is what that step expects (kind: the hook's name, whose row in hooks.json
    says what its step rebuilds: hooks.class_kind): a subclass of the kind's base class, named by a
    file that is the user's (step_check, as resolve_step imports a step), defined in their code or, where the kind names one, in that
    installed package (transformers and its submodules, every file the import runs found installed
    before any runs, never a folder of that name). issubclass is checked after the import and
    before anything instantiates it. HarnessError otherwise."""
    import importlib

    what, packages, base_name, installed = hooks.class_kind(kind)
    mod, qual = str(entry.get("module") or ""), str(entry.get("qualname") or "")
    target, tree = f"{mod}:{qual}", getattr(step_check, "tree", None) or os.getcwd()
    if not (_DOTTED.match(mod) and _DOTTED.match(qual)):
        raise HarnessError(f"the recorded {what} {target!r} is not a module:qualname of Python names: the file is "
                           "damaged or was not written by reduce_hooks")
    if step_check is not None:
        step_check(entry, target, what)  # the user's file, and no function of reduce's
    if installed and (mod == installed or mod.startswith(installed + ".")):
        files = module_files(mod)
        if not files:
            raise HarnessError(f"the recorded {what} {target} needs {installed}, which {sys.executable} cannot "
                               f"import: install it (pip install {installed}), or replay with --python naming the "
                               "interpreter that recorded the batch")
        for name, origin in files:
            if origin not in ("built-in", "frozen") and not (
                    origin and os.path.isabs(origin) and is_installed(os.path.realpath(origin), tree)):
                raise HarnessError(f"the recorded {what} {target} is not run: {name} ({origin}) is not the "
                                   f"installed {installed}, which alone is taken under that name: rename the folder "
                                   "that shadows it")
        try:
            cls = resolve_entry(target)
        except HarnessError as e:
            why = str(e).replace(f"--entry {target!r}: ", "")
            raise HarnessError(f"the recorded {what} {target}: {why}")
    else:
        cls = resolve_step(entry, what=what)
    bases = []
    for p in packages:  # the installed package's base class, not one of a folder of the same name
        if not all(origin in ("built-in", "frozen") or is_installed(
                os.path.realpath(origin), tree) for _, origin in module_files(p) if origin):
            continue
        try:
            base = getattr(importlib.import_module(p), base_name, None)
        except ImportError:
            continue
        if isinstance(base, type):
            bases.append(base)
    if not bases:
        raise HarnessError(f"the recorded {what} {target} is a {base_name}, and {sys.executable} cannot import "
                           f"{' or '.join(packages)}: install it")
    if not (isinstance(cls, type) and issubclass(cls, tuple(bases))):
        raise HarnessError(f"the recorded {what} {target} is not run: it is not a {base_name} subclass, the only "
                           f"kind of class reduce_hooks' step rebuilds from a file (which may come from someone "
                           f"else); a file written by reduce_hooks names the model it trained")
    return cls




def restore_rng(state):
    """Set the random generators (torch, CUDA, random, numpy) to their states at the crash, as a
    State (reduce_batch.load's .state) records them under "rng"."""
    rng, torch = state.get("rng") or {}, torch_module()
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


def _eager_when_asked(call_step):
    """call_step with its compiled frames run eager when the batch's meta says replay_compile=eager:
    reduce's probe of whether a failure of a step compiled with torch.compile needs the compile.
    torch.compiler.set_stance("force_eager") (torch 2.6+), which leaves the frames to compile when
    the step runs again; else torch._dynamo.config.disable, after which a frame it ran stays eager."""

    @functools.wraps(call_step)
    def wrapper(fn, batch):
        if (batch.meta or {}).get("replay_compile") != "eager":
            return call_step(fn, batch)
        import torch._dynamo

        stance = getattr(torch.compiler, "set_stance", None)
        with stance("force_eager") if stance else torch._dynamo.config.patch(disable=True):
            return call_step(fn, batch)

    return wrapper


@_eager_when_asked
def _call_step(fn, batch):
    """The recorded step's contract: step(batch) with the batch as the loader yielded it, or
    step(batch, state) when a state was recorded (the random generators restored first), unless
    the batch's meta says replay_state=fresh (reduce's probe of whether the recorded state is the
    cause: the step starts from the weights it builds). A recorded window's steps run first, in
    order, each with samples (the first one given the state, the others the batch alone: the
    objects the state was restored into carry on), and then the failing step's batch; an
    exception in an earlier step is another failure than the recorded one (WindowStepError)."""
    state = batch.state if (batch.meta or {}).get("replay_state") != "fresh" else None
    hooks.before_replay(batch)  # no module of another replay goes on; a rank's replay gets its group
    if state is not None:
        restore_rng(state)
    for index, data, _, samples in getattr(batch, "window", ()):
        if not samples:
            continue
        try:
            fn(data) if state is None else fn(data, state)
        except Exception as e:  # noqa: BLE001  (its text left out: a replay would take it for the recorded one)
            raise WindowStepError(f"the window's step {index} raised {type(e).__name__}, before the failing "
                                  f"step {batch.failed_step}") from None
        state = None
    return fn(batch.data) if state is None else fn(batch.data, state)


class WindowStepError(RuntimeError):
    """An earlier step of a recorded window raised: not the failure recorded at the failing step."""


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
    if not isinstance(source, dict):  # the collector's runs: this file's recorded command line (resolve_step)
        os.environ.pop("REDUCE_ARGV", None)
        if (m.get("meta") or {}).get("argv"):
            os.environ["REDUCE_ARGV"] = m["meta"]["argv"]
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
    torch = torch_module()
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
    CUDA context is unusable: run_in_child replays in a child process. The step a file records runs
    only where the file is the user's (its bytes in their trust store, as `reduce --batch` decides:
    trust.Of), and never a function of reduce's own; an entry or step given is the caller's own."""
    global step_check
    old = step_check
    if entry is None and step is None:
        step_check = Trust(os.getcwd(), stored(file_digest(path)) is not None,
                           "not in your trust store: reduce trust FILE allows it, once you have read what it runs")
    try:
        batch, fn = load_candidate(path, device, entry, step)
        return run_loaded(batch, fn, device)
    finally:
        step_check = old
