"""Framework hooks for `reduce`: record the failing batch of a training framework's loop.

One module a framework, each registered in hooks.json (docs/ARCHITECTURE.md, "Adding a framework
hook"): hook_lightning (PyTorch Lightning), hook_trainer (the Hugging Face Trainer), hook_torchrun
(a torch.distributed run's ranks). This module gives their functions under one name, and
`reduce recorder --hooks` prints it with the vendored ones as one file, reduce_hooks.py, beside
reduce_batch.py (`reduce recorder`), the two of the same version. PyTorch Lightning (reduce's
docs/RECORDING.md, "PyTorch Lightning"):

    trainer = L.Trainer(callbacks=[reduce_hooks.lightning_callback("crash.bin")])

A file written by the callback holds the batch as the Trainer handed it to
Strategy.batch_to_device (the loader's CPU batch, before the move: the device copy cannot be read
after a device-side assert); the step reduce_hooks:lightning_step, so that `reduce --batch FILE`
replays it with no flag; and the state: "lightning", what lightning_step needs to rebuild the
module (its class as a step entry, its hyperparameters, the batch index and the precision), "model"
(state=True) the module's state_dict at the crash, and "rng" the random generators before the batch
was moved. The Hugging Face Trainer (reduce's docs/RECORDING.md, "Hugging Face Trainer"), whose
callbacks cannot catch an exception:

    trainer = reduce_hooks.record_trainer(Trainer(model=model, args=args, ...), "crash.bin")

wraps that Trainer's training_step; a file it writes holds the batch as the data collator made it,
the step reduce_hooks:trainer_step, and the state "trainer" (the model's class as a step entry and
its config as JSON), "model" (state=True) and "rng". A replay builds a class the file names only
when it is what the step expects (reduce_batch.steps.resolve_class, by the hook's row in
hooks.json).
"""

import importlib

import reduce_batch

__version__ = "0.21.0"  # reduce's version (replay.Version), as reduce_batch.__version__

_theirs = getattr(reduce_batch, "__version__", "an older one")
if _theirs != __version__:
    raise ImportError(f"reduce_hooks.py {__version__} needs reduce_batch.py of the same version, not {_theirs} "
                      f"({reduce_batch.__file__}): print both again with `reduce recorder > reduce_batch.py` and "
                      "`reduce recorder --hooks > reduce_hooks.py`")

warn = reduce_batch.warn


def runtime():
    """The replay runtime's steps module and HarnessError: a hook's step runs only in reduce's
    replays and fixture tests, where reduce_batch is the package, never the vendored file."""
    return importlib.import_module("reduce_batch.steps"), importlib.import_module("reduce_batch.errors").HarnessError


def hook_step(fn):
    """A hook's step as its recordings name it: of this module (reduce_batch.hooks, or a vendored
    reduce_hooks), whichever hook module defines it, a name that stays when hooks move."""
    fn.__module__ = __name__
    return fn


def load_weights(module, weights, whose, maker):
    """Load the recorded state_dict, when there is one; a tensor that could not be read at the
    crash (None) keeps the value `maker` gave it."""
    if not weights:
        return
    kept = {k: v for k, v in weights.items() if v is not None}
    if len(kept) < len(weights):
        warn(f"{len(weights) - len(kept)} of the {whose} {len(weights)} recorded tensors could not be read when it "
             f"failed: they keep the values {maker} gives them")
    module.load_state_dict(kept, strict=len(kept) == len(weights))



# reduce recorder --hooks prints what is above this line, then what follows that line in each hook
# module that hooks.json vendors with the hooks (replay.HooksModule). What follows is the package's.


def table():
    """The rows of hooks.json, one a hook: its name, its module, the functions it exports here, the
    step its recordings name, the class that step rebuilds and where the state names it, whether
    its fixtures run in a child process, and its before_replay function."""
    import json
    import pkgutil

    if not _table:
        _table.extend(json.loads(pkgutil.get_data("reduce_batch", "hooks.json"))["hooks"])
    return _table


_table = []


def hook_module(row):
    """The module of a row of the table, imported."""
    return importlib.import_module("reduce_batch." + row["module"])


def __getattr__(name):  # a hook's function, or a class made on demand (its framework imported): the table's
    for row in () if name.startswith("__") else table():  # the import system's questions are not the table's
        if name in row["exports"] + row.get("classes", []):
            return getattr(hook_module(row), name)
    raise AttributeError(f"module 'reduce_batch.hooks' has no attribute {name!r}")


def step_names():
    """The steps the hooks' recordings name (lightning_step, trainer_step): reduce's own, yet steps."""
    return tuple(row["step"] for row in table() if row["step"])


def of_step(qualname):
    """The row of the hook whose step is qualname, or None."""
    return next((row for row in table() if row["step"] and row["step"] == qualname), None)


def class_kind(name):
    """What the step of the hook `name` rebuilds (its row's "rebuilds"): the class's description, the
    packages whose base class it subclasses, that class's name, and the one installed package it may
    come from besides the user's tree; KeyError when it rebuilds none."""
    row = next((row for row in table() if row["name"] == name and row["rebuilds"]), None)
    if row is None:
        raise KeyError(name)
    r = row["rebuilds"]
    return r["what"], tuple(r["packages"]), r["base"], r["installed"]


def before_replay(batch, check_only=False):
    """Each hook's before_replay, before a replay of batch (check_only: the worker's checks before
    any, with a batch of meta alone): a window's module goes, a rank's replay gets its group."""
    for row in table():
        if row["before_replay"]:
            getattr(hook_module(row), row["before_replay"])(batch, check_only)
