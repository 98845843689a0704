"""reduce_batch.hook_trainer: the Hugging Face Trainer. record_trainer wraps a Trainer's
training_step to record its failing batch; trainer_step, the step its files name, rebuilds the model
from its class and config and runs its forward and backward (docs/RECORDING.md, "Hugging Face
Trainer")."""

import contextlib
import importlib
import os
import sys

import reduce_batch

from .hooks import hook_step, load_weights, runtime, warn

# reduce recorder joins what follows this line (replay.HooksModule, --hooks): it uses the standard library
# imports above and the hooks module's runtime, load_weights and warn, never another module.

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


@hook_step
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
    steps, HarnessError = runtime()
    info = (state or {}).get("trainer") or {}
    if not info.get("model_class"):
        raise HarnessError("the file records no model class it can rebuild (see the warning written with it): "
                              "replay it with --entry module:function")
    _offline()
    cls = steps.resolve_class(info["model_class"], "trainer")  # a PreTrainedModel, or refused
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
    load_weights(model, state.get("model"), "model's", "its config")
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


def _offline():
    """A replay downloads nothing: the Hub's library offline (its variable is read when it is
    imported; set on its constants too when it was imported already, by the user's conftest.py)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:
        hub.HF_HUB_OFFLINE = True


def _trainer_prepare():
    """Import transformers (offline) and its model base: reduce's replay worker calls this once
    before it forks a process per candidate."""
    _offline()
    with contextlib.suppress(ImportError):
        importlib.import_module("transformers").PreTrainedModel  # noqa: B018  (a lazy module: the import is the point)


trainer_step.zygote_prepare = _trainer_prepare
