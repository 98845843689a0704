"""reduce_batch.hook_lightning: PyTorch Lightning. lightning_callback records the failing training
batch of a Trainer; lightning_step, the step its files name, rebuilds the LightningModule and runs its
training_step and backward (docs/RECORDING.md, "PyTorch Lightning")."""

import importlib
import os
import sys

import reduce_batch

from .hooks import hook_step, load_weights, runtime, warn

# reduce recorder joins what follows this line (replay.HooksModule, --hooks): it uses the standard library
# imports above and the hooks module's runtime, load_weights and warn, never another module.

_LIGHTNING_PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_lightning_classes = {}  # Callback base classes -> the callback class made from them


def lightning_callback(path="crash.bin", state=True, **save_kwargs):
    """A Lightning Callback (Trainer(callbacks=[reduce_hooks.lightning_callback("crash.bin")]))
    that, when training raises, writes the failing training batch to `path`, with the error and a
    step that replays the LightningModule's training_step and backward, then lets the exception
    go on. `reduce --batch crash.bin` needs no other flag when the module can be rebuilt as
    cls(**self.hparams): call self.save_hyperparameters() in its __init__.

    state=True records the module's weights at the crash (state=False: the replay starts from
    the weights its __init__ makes; for a failure that does not depend on them, a smaller file).
    window=K, as record_on_failure's, keeps the last K to 2K training batches and a copy of the
    module's weights and its optimizer's state every K steps: the file holds the steps since that
    copy, which a replay runs in order, each with its optimizer step, before the failing one.
    save_kwargs are save()'s (padded=, lengths=, sample_ids=, batch_dims=, meta=, compression=);
    one given as a function is called with the batch when the failure is recorded
    (lengths=lambda batch: batch["lengths"]). Under several processes (DDP) each rank writes its
    own file, PATH with .rankN before the extension. After a failure, `.saved` is the path
    written (None before)."""
    for k in ("step", "error", "batch", "tensors"):
        if k in save_kwargs:
            raise TypeError(f"lightning_callback: {k} is the callback's own to record")
    # The Callback of every Lightning package the training script imported, so that its Trainer
    # accepts the callback whichever name it came by; else the first one installed.
    bases = tuple(sys.modules[n].Callback for n in _LIGHTNING_PACKAGES
                  if hasattr(sys.modules.get(n), "Callback"))
    for n in () if bases else _LIGHTNING_PACKAGES:
        try:
            bases = (importlib.import_module(n).Callback,)
            break
        except ImportError:
            continue
    if not bases:
        raise ImportError("lightning_callback: neither lightning nor pytorch_lightning can be imported")
    cls = _lightning_classes.get(bases)
    if cls is None:
        cls = _lightning_classes[bases] = type("ReduceBatchCallback", (_LightningRecorder,) + bases,
                                               {"__module__": __name__})
    return cls(path, state, save_kwargs)


def __getattr__(name):
    """LightningCallback: lightning_callback's Callback as a class, for LightningCLI's command line or config
    (--trainer.callbacks+=reduce_batch.hooks.LightningCallback --trainer.callbacks.path=crash.bin)."""
    if name != "LightningCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _lightning_classes:
        made = type(lightning_callback())

        def __init__(self, path: str = "crash.bin", state: bool = True):
            made.__init__(self, path, state, {})

        _lightning_classes[name] = type(name, (made,), {"__init__": __init__, "__module__": __name__,
                                                        "__qualname__": name})
    return _lightning_classes[name]


class _LightningRecorder:
    """The hooks of lightning_callback's Callback."""

    def __init__(self, path, state, save_kwargs):
        self.window_k = save_kwargs.pop("window", None)
        reduce_batch.record_on_failure(path, {}, window=self.window_k)  # the argument's checks
        self.path, self.record_state, self.save_kwargs = path, bool(state), save_kwargs
        self.saved = self.window = None
        self._pending = None   # (batch, rng) handed to batch_to_device, before its batch starts
        self._batch = self._rng = self._batch_idx = None
        self._ended = False    # the current batch's on_train_batch_end has run
        self._strategy = None

    def setup(self, trainer, pl_module, stage=None):
        # A Callback's batch hooks see the batch already on the device; the move is the
        # strategy's batch_to_device, so it is wrapped on this Trainer's strategy to keep a
        # reference to the CPU batch (no copy: the move makes new tensors on the device).
        strategy = trainer.strategy
        if stage in ("fit", None) and self.window_k is not None:
            self.window = reduce_batch.Window(self.window_k)  # the steps of an earlier fit are not this one's
        if stage not in ("fit", None) or "batch_to_device" in vars(strategy):
            return
        self._pending = self._batch = None  # a batch of an earlier fit is not this one's
        original = strategy.batch_to_device

        def batch_to_device(batch, *args, **kwargs):
            if trainer.training:  # validation batches go through here too
                # The generators before the step, not after the failure (about 40 us a step).
                self._pending = (batch, reduce_batch.rng_state(reduce_batch.torch_module()))
            return original(batch, *args, **kwargs)

        strategy.batch_to_device = batch_to_device
        self._strategy = strategy

    def teardown(self, trainer=None, pl_module=None, stage=None):
        if self._strategy is not None:
            vars(self._strategy).pop("batch_to_device", None)
            self._strategy = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, *rest):
        # Without a batch_to_device call (training_step(dataloader_iter)), the batch given here.
        self._batch, self._rng = self._pending or (batch, None)
        self._pending, self._batch_idx, self._ended = None, batch_idx, False
        if self.window is not None:  # the step's batch, and every K steps the module's and optimizer's state
            ids = self.save_kwargs.get("sample_ids")
            try:
                ids = ids(self._batch) if callable(ids) else ids
                optimizers = list(getattr(trainer, "optimizers", None) or [])
                self.window.enter(self._batch, dict({"model": pl_module}, **(
                    {"optimizer": optimizers[0]} if len(optimizers) == 1 else {})), ids)
            except Exception as e:  # noqa: BLE001  (training goes on; the crash is recorded without it)
                warn(f"window: {type(e).__name__}: {e}; the crash will be recorded without the steps before it")
                self.window = None

    def on_train_batch_end(self, trainer, pl_module, *rest):
        self._ended = True

    def on_exception(self, trainer, pl_module, exception):
        self.teardown()
        if not isinstance(exception, Exception):
            return  # Ctrl-C, SystemExit: nothing failed
        what = f"{type(exception).__name__}: {exception}"
        if self._batch is None:
            warn(f"{what} came before any training batch: nothing recorded")
            return
        if not trainer.training:
            warn(f"{what} came outside training ({trainer.state.stage}): nothing recorded")
            return
        if self._ended:
            warn(f"{what} came after training batch {self._batch_idx} had ended (in a hook, the loader, or reported "
                 "late by the device: CUDA_LAUNCH_BLOCKING=1 makes it prompt): recording that batch; reduce says so "
                 "if it does not fail")
        path = os.fspath(self.path)  # under DDP, record_on_failure writes this rank's own file (crash.rank1.bin)
        batch, kwargs = self._batch, {}
        for k, v in self.save_kwargs.items():
            try:
                kwargs[k] = v(batch) if callable(v) and not isinstance(v, type) else v
            except Exception as e:  # noqa: BLE001  (the crash is recorded without it)
                warn(f"{k}=: {type(e).__name__}: {e}; not recorded")
        state = {"lightning": _lightning_info(trainer, pl_module, self._batch_idx)}
        if self.record_state:
            state["model"] = pl_module
        if self._rng is not None:
            state["rng"] = self._rng
        meta = dict(kwargs.pop("meta", None) or {})
        meta.setdefault("lightning_module", reduce_batch.type_path(pl_module))
        rec = reduce_batch.record_on_failure(path, batch, step=lightning_step, state=state, meta=meta, **kwargs)
        rec.window = self.window  # its steps, and the state at their start for the keys it copied
        rec.__exit__(type(exception), exception, exception.__traceback__)
        if rec.saved:
            self.saved = rec.path


def _own_hparams(hparams):
    """The module's hyperparameters less Lightning's own entries in them (LightningCLI's _instantiator and
    _class_path), which no __init__ takes."""
    return {k: v for k, v in dict(hparams).items() if k not in ("_instantiator", "_class_path")}


def _lightning_info(trainer, pl_module, batch_idx):
    """The state's "lightning" entry, with a warning when the module cannot be rebuilt from it."""
    import inspect

    cls = type(pl_module)
    hparams = _own_hparams(getattr(pl_module, "hparams", None) or {})
    info = {"hparams": hparams, "batch_idx": int(batch_idx or 0),
            "precision": str(getattr(trainer, "precision", "32"))}
    problems = []
    try:
        info["module_class"] = reduce_batch.step_entry(cls)
    except ValueError as e:
        problems.append(str(e).replace("step ", "the class ", 1))
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    missing = [p.name for p in params if p.default is p.empty and p.name not in hparams
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing:
        problems.append("its __init__ needs {}, not in self.hparams".format(", ".join(missing)))
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        extra = [k for k in hparams if k not in {p.name for p in params}]
        if extra:
            problems.append("self.hparams has {}, not an argument of its __init__".format(", ".join(extra)))
    probe = reduce_batch.Flattener(reduce_batch.torch_module(), "", None)
    probe.node(hparams)
    if probe.skipped:
        problems.append("hyperparameter {} is a {}, which is not recorded".format(*probe.skipped[0][:2]))
    if problems:
        warn("the LightningModule {} cannot be rebuilt as cls(**self.hparams): {}. Call "
             "self.save_hyperparameters() in its __init__ (for every argument), or replay the file "
             "with reduce --entry module:function".format(reduce_batch.type_path(cls), "; ".join(problems)))
    return info


@hook_step
def lightning_step(batch, state=None):
    """The step of a file written by lightning_callback: rebuild the LightningModule as
    cls(**hparams) on the batch's device (with the recorded weights, and the precision's dtype or
    autocast), then run its transfer_batch_to_device and on_after_batch_transfer hooks,
    training_step(batch, batch_idx) and backward of its loss (the tensor returned, or its
    "loss"). With a recorded optimizer state (a window's), the optimizer configure_optimizers
    makes takes it, and steps after the backward; a window's later steps (state None) go on with
    the same module and optimizer. Returns the detached loss (None when training_step returned
    None: Lightning skips that batch too). HarnessError when the module cannot be rebuilt. It runs
    in reduce's replays and fixture tests, where reduce_batch is the package (the
    worker's, or the pytest plugin's), whose runtime rebuilds the class and the generators."""
    import torch
    steps, HarnessError = runtime()
    restore_rng = steps.restore_rng

    if state is None and _live:  # a window's later step: the module and optimizer the first one made
        module, optimizer, info, device, dtype, true_dtype = _live["run"]
        return _lightning_train(module, optimizer, batch, info, device, dtype, true_dtype)
    info = (state or {}).get("lightning") or {}
    if not info.get("module_class"):
        raise HarnessError("the file records no LightningModule class it can import (see the warning written "
                           "with it): replay it with --entry module:function")
    cls = steps.resolve_class(info["module_class"], "lightning")  # a LightningModule of the user's tree, or refused
    hparams = _own_hparams(info.get("hparams") or {})
    try:
        module = cls(**hparams)
    except TypeError as e:
        names = ", ".join(sorted(hparams)) or "none"
        raise HarnessError(f"cannot rebuild {cls.__qualname__} as cls(**hparams) with the recorded hyperparameters "
                           f"({names}): {e}; call self.save_hyperparameters() in its __init__, or replay with --entry "
                           "module:function") from e
    probe = reduce_batch.Flattener(torch, "", None)
    probe.node(batch)
    device = probe.tensors[0][1].device if probe.tensors else torch.device("cpu")
    precision = str(info.get("precision", "32"))
    kind = precision.split("-")[0]
    dtype = {"16": torch.float16, "bf16": torch.bfloat16, "64": torch.float64}.get(kind)
    true_dtype = dtype is not None and (kind == "64" or precision.endswith("-true"))
    module.to(device)
    if true_dtype:
        module.to(dtype)
    load_weights(module, state.get("model"), "module's", "its __init__")
    module.train()
    optimizer = _optimizer(module, state.get("optimizer")) if state.get("optimizer") else None
    restore_rng(state)  # building the module drew from the generators: start from the crash's again
    _live["run"] = (module, optimizer, info, device, dtype, true_dtype)
    return _lightning_train(module, optimizer, batch, info, device, dtype, true_dtype)


_live = {}  # the module and optimizer of a window's replay, which its later steps go on with



def before_replay(batch, check_only=False):
    """Before each replay: no module or optimizer of another replay's window goes on."""
    _live.clear()


def _optimizer(module, recorded):
    """The optimizer module.configure_optimizers() makes (the first, in any of its return forms),
    with the recorded state."""
    made = module.configure_optimizers()
    while isinstance(made, (list, tuple)) and made:
        made = made[0]
    if isinstance(made, dict):
        made = made.get("optimizer")
    if not hasattr(made, "load_state_dict"):
        warn("configure_optimizers() gave no optimizer reduce can rebuild: the window's steps run without updates")
        return None
    made.load_state_dict(recorded)
    return made


def _lightning_train(module, optimizer, batch, info, device, dtype, true_dtype):
    """One training step of the rebuilt module: its batch hooks, training_step, backward, and the
    optimizer's step when there is one."""
    import collections.abc
    import contextlib
    import inspect

    import torch
    # The module's own hooks after the point where the batch was kept (the move itself is a no-op:
    # the batch was loaded on the device).
    batch = module.on_after_batch_transfer(module.transfer_batch_to_device(batch, device, 0), 0)
    args = (batch, int(info.get("batch_idx", 0)))
    try:
        params = inspect.signature(module.training_step).parameters.values()
        if sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) < 2 and not any(
                p.kind == p.VAR_POSITIONAL for p in params):
            args = args[:1]  # training_step(self, batch): as Lightning, no batch_idx
    except (TypeError, ValueError):
        pass
    autocast = contextlib.nullcontext()
    if dtype in (torch.float16, torch.bfloat16) and not true_dtype:
        autocast = torch.autocast(device.type, dtype=dtype)
    with autocast:
        out = module.training_step(*args)
    loss = out.get("loss") if isinstance(out, collections.abc.Mapping) else out
    if loss is None:
        return None
    loss.backward()
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad()
    return loss.detach()


def _lightning_prepare():
    """Import the installed Lightning packages: reduce's replay worker calls this once before it
    forks a process per candidate, which then finds them imported."""
    for n in _LIGHTNING_PACKAGES:
        try:
            importlib.import_module(n)
        except ImportError:
            pass


lightning_step.zygote_prepare = _lightning_prepare

