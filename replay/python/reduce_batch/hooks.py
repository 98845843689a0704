"""Framework hooks for `reduce`: record the failing batch of a training framework's loop.

Printed by `reduce recorder --hooks` beside reduce_batch.py (`reduce recorder`), the two of the
same version. PyTorch Lightning (reduce's docs/RECORDING.md, "PyTorch Lightning"):

    trainer = L.Trainer(callbacks=[reduce_hooks.lightning_callback("crash.bin")])

A file written by the callback holds the batch as the Trainer handed it to
Strategy.batch_to_device (the loader's CPU batch, before the move: the device copy cannot be read
after a device-side assert); the step reduce_hooks:lightning_step, so that `reduce --batch FILE`
replays it with no flag; and the state: "lightning", what lightning_step needs to rebuild the
module (its class as a step entry, its hyperparameters, the batch index and the precision; in the
state tree, as hyperparameters are typed values and meta holds strings), "model" (state=True) the
module's state_dict at the crash, and "rng" the random generators before the batch was moved. The
optimizer's state is not recorded: the replay stops after backward, where the failures it is for
(an index out of range, a NaN loss, a shape error) happen. Lightning (the `lightning` package, or
`pytorch_lightning`) is imported only when a callback is made.

The Hugging Face Trainer (reduce's docs/RECORDING.md, "Hugging Face Trainer"), whose callbacks cannot catch an
exception:

    trainer = reduce_hooks.record_trainer(Trainer(model=model, args=args, ...), "crash.bin")

wraps that Trainer's training_step; a file it writes holds the batch as the data collator made it,
the step reduce_hooks:trainer_step, and the state "trainer" (the model's class as a step entry and
its config as JSON, how the Trainer called it), "model" (state=True) and "rng". A replay builds a
class the file names only when it is what the step expects (reduce_batch.steps.resolve_class): a
LightningModule of the user's tree; a PreTrainedModel of the installed transformers or of the
user's tree.
"""

import contextlib
import importlib
import os
import sys

import reduce_batch

__version__ = "0.21.0"  # reduce's version (replay.Version), as reduce_batch.__version__

_theirs = getattr(reduce_batch, "__version__", "an older one")
if _theirs != __version__:
    raise ImportError(f"reduce_hooks.py {__version__} needs reduce_batch.py of the same version, not {_theirs} "
                      f"({reduce_batch.__file__}): print both again with `reduce recorder > reduce_batch.py` and "
                      "`reduce recorder --hooks > reduce_hooks.py`")

warn = reduce_batch.warn



def _runtime():
    """The replay runtime's steps module and HarnessError: the steps below run only in reduce's
    replays and fixture tests, where reduce_batch is the package, never the vendored file."""
    return importlib.import_module("reduce_batch.steps"), importlib.import_module("reduce_batch.errors").HarnessError

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


def _lightning_info(trainer, pl_module, batch_idx):
    """The state's "lightning" entry, with a warning when the module cannot be rebuilt from it."""
    import inspect

    cls = type(pl_module)
    hparams = dict(getattr(pl_module, "hparams", None) or {})
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
    steps, HarnessError = _runtime()
    restore_rng = steps.restore_rng

    if state is None and _live:  # a window's later step: the module and optimizer the first one made
        module, optimizer, info, device, dtype, true_dtype = _live["run"]
        return _lightning_train(module, optimizer, batch, info, device, dtype, true_dtype)
    info = (state or {}).get("lightning") or {}
    if not info.get("module_class"):
        raise HarnessError("the file records no LightningModule class it can import (see the warning written "
                           "with it): replay it with --entry module:function")
    cls = steps.resolve_class(info["module_class"], "lightning")  # a LightningModule of the user's tree, or refused
    hparams = info.get("hparams") or {}
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
    _load_weights(module, state.get("model"), "module's", "its __init__")
    module.train()
    optimizer = _optimizer(module, state.get("optimizer")) if state.get("optimizer") else None
    restore_rng(state)  # building the module drew from the generators: start from the crash's again
    _live["run"] = (module, optimizer, info, device, dtype, true_dtype)
    return _lightning_train(module, optimizer, batch, info, device, dtype, true_dtype)


_live = {}  # the module and optimizer of a window's replay, which its later steps go on with


def _load_weights(module, weights, whose, maker):
    """Load the recorded state_dict, when there is one; a tensor that could not be read at the
    crash (None) keeps the value `maker` gave it."""
    if not weights:
        return
    kept = {k: v for k, v in weights.items() if v is not None}
    if len(kept) < len(weights):
        warn(f"{len(weights) - len(kept)} of the {whose} {len(weights)} recorded tensors could not be read when it "
             f"failed: they keep the values {maker} gives them")
    module.load_state_dict(kept, strict=len(kept) == len(weights))


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
lightning_step.rebuilds = "lightning"  # the kind of class it builds (reduce_batch.steps.resolve_class)


# The Hugging Face Trainer ---------------------------------------------------------------------


def record_trainer(trainer, path="crash.bin", state=False, **save_kwargs):
    """Record the failing batch of a Hugging Face Trainer (transformers.Trainer), whose callbacks
    can neither catch an exception nor see the batch: `trainer = reduce_hooks.record_trainer(trainer,
    "crash.bin")` wraps that instance's training_step (any signature: its arguments pass through).
    When it raises, `path` gets the batch as the data collator made it (a reference to it on the
    CPU; when the Trainer hands it over on a device already, a CPU copy made before each step), the
    generators as the step began, the error, and the step reduce_hooks:trainer_step with what it
    needs to rebuild the model: its class and config (state "trainer"); state=True adds its weights
    (state=False: the replay starts from the weights its config makes). Then the exception goes on.
    `reduce --batch crash.bin` needs no other flag. save_kwargs are save()'s (sample_ids=,
    batch_dims=, meta=, compression=); one given as a function is called with the batch when the
    failure is recorded (sample_ids=lambda batch: batch["idx"].tolist()). Under torch.distributed
    each rank writes its own file (record_on_failure). Returns the trainer."""
    import inspect

    for k in ("step", "error", "batch", "tensors", "window", "keep"):
        if k in save_kwargs:
            raise TypeError(f"record_trainer: {k}= is not an argument of it" + (
                " (a window of earlier steps, or a batch kept on disk, is record_on_failure's only)" if k in (
                    "window", "keep") else
                ": the recorder records it"))
    original = getattr(trainer, "training_step", None)
    if not callable(original):
        raise TypeError(f"record_trainer: want a transformers Trainer (with a training_step method), got "
                        f"{type(trainer).__name__}")
    original = getattr(original, "reduce_wrapped", original)  # wrapped again: this call's settings, once
    _trainer_info(trainer, None, start=True)  # what cannot be rebuilt is said now, not after hours of training
    try:
        sig = inspect.signature(original)
    except (TypeError, ValueError):
        sig = None
    torch, copying = reduce_batch.torch_module(), []

    def training_step(*args, **kwargs):
        inputs = _argument(sig, args, kwargs, "inputs", 1)
        try:
            kept = (_kept_on_cpu(torch, inputs, copying), reduce_batch.rng_state(torch))
        except Exception as e:  # noqa: BLE001  (training goes on; this step's failure is not recorded)
            warn(f"record_trainer: cannot keep the batch: {type(e).__name__}: {e}")
            kept = None
        try:
            return original(*args, **kwargs)
        except Exception as e:
            if kept is not None:
                n = _argument(sig, args, kwargs, "num_items_in_batch", 2)
                _record_trainer(trainer, path, state, save_kwargs, kept, n, e)
            raise

    training_step.reduce_wrapped = original
    trainer.training_step = training_step
    return trainer


def _argument(sig, args, kwargs, name, position):
    """The argument `name` of a call of training_step (by its signature, else by name or position)."""
    if sig is not None:
        try:
            bound = sig.bind(*args, **kwargs).arguments
            if name in bound:
                return bound[name]
        except TypeError:
            pass
    return kwargs[name] if name in kwargs else args[position] if len(args) > position else None


def _kept_on_cpu(torch, batch, copying):
    """The batch itself when its tensors are on the CPU (the collator's, not yet moved), else a CPU
    copy (the Trainer's loader moved it: the device's copy cannot be read after a device-side
    assert), said once."""
    queue, on_device = [batch], None
    for x in queue:
        if isinstance(x, torch.Tensor):
            if x.device.type != "cpu":
                on_device = x.device
                break
        elif isinstance(x, (list, tuple)):
            queue.extend(x)
        elif hasattr(x, "keys") and hasattr(x, "__getitem__"):
            queue.extend(x[k] for k in list(x.keys()))
    if on_device is None:
        return batch
    if not copying:
        copying.append(on_device)
        warn(f"record_trainer: the Trainer hands training_step its batch on {on_device}: keeping a CPU copy of each "
             "batch before its step")
    return reduce_batch.copied(torch, batch)


def _trainer_info(trainer, num_items, start=False):
    """The state's "trainer" entry (the model's class and config, how the Trainer calls it), or None
    with a warning when the model cannot be rebuilt from it (start: record_trainer's call, which
    also warns of a loss the replay does not compute)."""
    model = getattr(trainer, "model", None)
    while hasattr(model, "module") and not hasattr(model, "config"):  # DataParallel, DDP
        model = model.module
    model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
    base = getattr(sys.modules.get("transformers"), "PreTrainedModel", None)
    problem, info = None, None
    if base is None or not isinstance(model, base):
        problem = f"the Trainer's model ({reduce_batch.type_path(model)}) is not a transformers PreTrainedModel"
    else:
        try:
            info = {"model_class": reduce_batch.step_entry(type(model))}
        except ValueError as e:
            problem = str(e).replace("step ", "the model class ", 1)
    if info is not None:
        try:
            info["config"] = model.config.to_json_string(use_diff=False)
        except Exception as e:  # noqa: BLE001
            problem, info = f"its config cannot be written as JSON: {type(e).__name__}: {e}", None
    if problem:
        warn(f"record_trainer: {problem}: reduce cannot rebuild it from a file, which will record the batch and "
             "the error only; replay it with reduce --entry module:function")
        return None
    args = getattr(trainer, "args", None)
    info["precision"] = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "32"
    info["loss_kwargs"] = bool(getattr(trainer, "model_accepts_loss_kwargs", False))
    if getattr(args, "torch_compile", False):  # TrainingArguments(torch_compile=True): the replay compiles it too
        info["compile"] = {"backend": str(getattr(args, "torch_compile_backend", None) or "inductor"),
                           "mode": str(getattr(args, "torch_compile_mode", None) or "")}
    if num_items is not None:
        with contextlib.suppress(Exception):  # a device's tensor after a device-side assert cannot be read
            info["num_items_in_batch"] = int(num_items)
    own = [name for name in ("compute_loss", "training_step") if getattr(type(trainer), name, None) is not getattr(
        sys.modules["transformers"].Trainer, name, None)]
    own += ["label smoothing"] * bool(getattr(trainer, "label_smoother", None)) + ["compute_loss_func"] * bool(
        getattr(trainer, "compute_loss_func", None))
    if own:  # in the file too: reduce names it when the replay does not fail as recorded
        info["own_loss"] = ", ".join(own)
    if start and own:
        warn("record_trainer: the Trainer computes its loss its own way ({}): reduce's replay runs the model's "
             "forward and backward of the loss it returns, and says so if that does not fail".format(info["own_loss"]))
    return info


def _record_trainer(trainer, path, record_state, save_kwargs, kept, num_items, exception):
    """Write the failing step's file (record_on_failure's rules: never in a replay, each rank's own)."""
    batch, rng = kept
    kwargs = {}
    for k, v in save_kwargs.items():
        try:
            kwargs[k] = v(batch) if callable(v) and not isinstance(v, type) else v
        except Exception as e:  # noqa: BLE001  (the crash is recorded without it)
            warn(f"{k}=: {type(e).__name__}: {e}; not recorded")
    info = _trainer_info(trainer, num_items)
    state = {"rng": rng}
    if info is not None:
        state["trainer"] = info
        if record_state:
            state["model"] = trainer.model
    meta = dict(kwargs.pop("meta", None) or {})
    meta.setdefault("trainer_model", reduce_batch.type_path(getattr(trainer, "model", None)))
    if info is not None and info.get("own_loss"):
        meta.setdefault("trainer_loss", info["own_loss"])  # reduce names it when the replay does not fail so
    rec = reduce_batch.record_on_failure(path, batch, step=trainer_step if info else None, state=state, meta=meta,
                                         **kwargs)
    rec.__exit__(type(exception), exception, exception.__traceback__)


def trainer_step(batch, state=None):
    """The step of a file written by record_trainer: rebuild the Trainer's model from its recorded
    class and config (cls.config_class.from_dict: nothing downloaded, no code the file names), with
    the recorded weights when there are, on the batch's device, in training mode, the generators
    as the step began; then the forward and backward of Trainer.training_step and compute_loss by
    default: model(**batch) (with num_items_in_batch where the Trainer passed it), its loss
    (outputs["loss"], or the first output), under the precision's autocast. Returns the detached
    loss. HarnessError when the model cannot be rebuilt. It runs in reduce's replays and fixture
    tests, where reduce_batch is the package."""
    import json

    import torch
    steps, HarnessError = _runtime()
    info = (state or {}).get("trainer") or {}
    if not info.get("model_class"):
        raise HarnessError("the file records no model class it can rebuild (see the warning written with it): "
                              "replay it with --entry module:function")
    cls = steps.resolve_class(info["model_class"], "transformers")  # a PreTrainedModel, or refused
    transformers = importlib.import_module("transformers")
    config_cls = getattr(cls, "config_class", None)
    if not (isinstance(config_cls, type) and issubclass(config_cls, transformers.PretrainedConfig)):
        raise HarnessError(f"{cls.__qualname__}.config_class is not a PretrainedConfig: reduce cannot rebuild it "
                              "from its recorded config; replay with --entry module:function")
    try:
        recorded = json.loads(info.get("config") or "")
    except (TypeError, ValueError) as e:
        raise HarnessError(f"the recorded config of {cls.__qualname__} is not JSON: {e}") from e
    if not isinstance(recorded, dict):
        raise HarnessError(f"the recorded config of {cls.__qualname__} is not a JSON object")
    config = config_cls.from_dict(_no_code(recorded))
    if not isinstance(batch, dict) and not (hasattr(batch, "keys") and hasattr(batch, "__getitem__")):
        raise HarnessError(f"the recorded batch is a {type(batch).__name__}: the Trainer calls the model with a "
                              "mapping of its arguments")
    probe = reduce_batch.Flattener(torch, "", None)
    probe.node(batch)
    device = probe.tensors[0][1].device if probe.tensors else torch.device("cpu")
    model = cls(config).to(device)
    _load_weights(model, state.get("model"), "model's", "its config")
    model.train()
    compiled = info.get("compile") or {}
    if compiled:  # TrainingArguments(torch_compile=True): compiled as the Trainer compiled it
        backend = str(compiled.get("backend") or "inductor")
        import torch._dynamo

        if backend not in torch._dynamo.list_backends(exclude_tags=()):  # a name the file gives runs no code here
            raise HarnessError(f"the recorded torch.compile backend {backend!r} is not one of this torch's")
        model = torch.compile(model, backend=backend, mode=compiled.get("mode") or None)
    steps.restore_rng(state)  # building the model drew from the generators: start from the step's again
    inputs = {k: batch[k] for k in list(batch.keys())}
    if info.get("loss_kwargs") and info.get("num_items_in_batch") is not None:
        inputs["num_items_in_batch"] = int(info["num_items_in_batch"])
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(info.get("precision")))
    autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
    with autocast:
        outputs = model(**inputs)
    if isinstance(outputs, dict) and "loss" not in outputs:
        raise ValueError("The model did not return a loss from the inputs, only the following keys: "
                         f"{','.join(outputs.keys())}. For reference, the inputs it received are {','.join(inputs)}.")
    loss = outputs["loss"] if isinstance(outputs, dict) else outputs[0]
    loss.backward()
    return loss.detach()


def _no_code(config):
    """A recorded config without the keys that name code or a download (a Hub attention kernel,
    remote classes), at any depth (a sub-model's config): never taken from a file."""
    return {k: _no_code(v) if isinstance(v, dict) else v for k, v in config.items()
            if k != "auto_map" and "implementation" not in k}


def _trainer_prepare():
    """Import transformers (offline) and its model base: reduce's replay worker calls this once
    before it forks a process per candidate."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    with contextlib.suppress(ImportError):
        importlib.import_module("transformers").PreTrainedModel  # noqa: B018  (a lazy module: the import is the point)


trainer_step.zygote_prepare = _trainer_prepare
trainer_step.rebuilds = "transformers"  # the kind of class it builds (reduce_batch.steps.resolve_class)
