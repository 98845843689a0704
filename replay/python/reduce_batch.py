"""Record a failing PyTorch batch to a `crash.bin` file for `reduce`, and read it back.

`reduce` replays subsets of a recorded batch to find the smallest input that still fails the
same way (a device-side assert, an index error, ...). This one file, printed by
`reduce recorder`, is the recorder: copy it into your training repository. It needs only the
standard library and torch (numpy is used when present). The file format is docs/FORMAT.md
of the reduce repository.

Training loop
-------------
Keep the batch on the CPU before moving it to the GPU: after a device-side assert the CUDA
context is dead and nothing on the GPU can be read any more, so `record_on_failure` only
reads the tensors you hand it::

    from reduce_batch import record_on_failure

    for ids, images, targets in loader:                 # CPU tensors from the DataLoader
        batch = {"input": images, "target": targets}    # the CPU copy, before .to(device)
        with record_on_failure("crash.bin", batch, sample_ids=ids):
            logits = model(images.to(device, non_blocking=True))
            loss = F.cross_entropy(logits, targets.to(device))
            loss.backward()
            optimizer.step()
            torch.cuda.synchronize()    # so an asynchronous CUDA error surfaces in the block

On an exception the block saves the batch with the error, then re-raises the exception
unchanged. Without `op` the file is replayed with a command of your own that runs the step on
a subset of the batch. To let `reduce` replay a single operator itself, record that
operator's arguments by PyTorch's names (a CPU copy of each) and name the operator::

    cpu = {"input": logits.detach().cpu(), "target": targets}   # a copy each step: debug runs
    with record_on_failure("crash.bin", cpu, op="cross_entropy",
                           attrs={"ignore_index": -100, "reduction": "mean"}):
        loss = F.cross_entropy(logits, targets.to(device))
        torch.cuda.synchronize()

`tensors` may also be a zero-argument callable that returns the dict; it is called only when
the block fails. A shared tensor (an embedding table, class weights) has no batch axis: pass
`batch_dims={"weight": None}`; every other tensor's batch axis defaults to 0.

`save(path, tensors, ...)` writes a file directly; `load(path)` reads one back with every
tensor's dtype, shape, strides and storage offset as recorded, and imports nothing the file
names (`types=` lists the named tuple and mapping classes you trust). `replay(path, device)`
runs a file's operator (or, with `entry=`, your step) as reduce's torch backend does; the
regression tests that reduce generates call it, `run_op`, `run_in_child` (the replay in a child
process, whose exception is raised again in the test), `sample_value` and the `check_*` helpers.

PyTorch Lightning: `Trainer(callbacks=[lightning_callback("crash.bin")])` records the failing
training batch with a step that rebuilds the LightningModule (see lightning_callback).
"""

import ctypes
import datetime
import json
import os
import platform
import re
import socket
import struct
import subprocess
import sys
import zlib

__all__ = [
    "save",
    "load",
    "record_on_failure",
    "Batch",
    "BatchFileError",
    "FORMAT_VERSION",
    "DTYPES",
    "run_op",
    "replay",
    "resolve_entry",
    "resolve_step",
    "run_step",
    "State",
    "check_exception",
    "check_outputs",
    "failure_matches",
    "failure_class",
    "check_same_failure",
    "DifferentFailure",
    "summarize",
    "check_result",
    "run_in_child",
    "child_failure",
    "exception_class",
    "ChildFailure",
    "limit_device_memory",
    "sample_value",
    "check_sample_rule",
    "check_distinct",
    "HarnessError",
    "lightning_callback",
    "lightning_step",
]

FORMAT_VERSION = 2  # reads 1 and 2; writes 1 for a flat dict of tensors without step, state or padding
MAGIC = b"RDCBATCH"
_HEADER = struct.Struct("<8sIIQII")  # magic, version, flags, manifest_length, manifest_crc32, reserved
HEADER_SIZE = _HEADER.size  # 32
ALIGN = 64
MAX_MANIFEST = 64 << 20
DEFAULT_MAX_SIZE = 4 << 30
MAX_DIMS = 64
# The largest zstd window a reader accepts (libzstd's default decoder limit, 2**27).
MAX_ZSTD_WINDOW = 1 << 27
# The storage offset rule of docs/FORMAT.md keeps offsets below 4096 bytes' worth of elements.
_OFFSET_BYTES = 4096
_INT64_MAX = (1 << 63) - 1

# dtype name -> (itemsize, same-size integer dtype used to move the raw bytes)
_DTYPES = {
    "bool": (1, "uint8"),
    "uint8": (1, "uint8"),
    "int8": (1, "int8"),
    "int16": (2, "int16"),
    "int32": (4, "int32"),
    "int64": (8, "int64"),
    "float16": (2, "int16"),
    "bfloat16": (2, "int16"),
    "float32": (4, "int32"),
    "float64": (8, "int64"),
}
DTYPES = tuple(_DTYPES)
_COMPRESSIONS = ("none", "zstd")
_TENSOR_KEYS = frozenset(
    ["name", "dtype", "shape", "strides", "offset", "batch_dim", "storage_elements", "payload",
     "recorded_offset", "pad"])
_TENSOR_REQUIRED = ("name", "dtype", "shape", "strides", "offset", "storage_elements", "payload")
_PAYLOAD_KEYS = frozenset(["offset", "length", "compression", "crc32"])
_ERROR_KEYS = frozenset(["text", "exception", "exit_status"])
_EXCEPTION_NAME_RE = re.compile(
    r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:Error|Exception|Warning|Exit|Interrupt)):")


class BatchFileError(ValueError):
    """A batch file that breaks docs/FORMAT.md; the message names the file and the field."""


def _torch():
    import torch  # imported on first use, so that importing this module stays cheap

    return torch


# ---------------------------------------------------------------------------------------------
# JSON, as Go's encoding/json writes it


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _clean_str(s):
    # A lone surrogate cannot be written as UTF-8 (Python's surrogateescape makes them from
    # undecodable bytes); Go writes U+FFFD for each invalid byte, and so does this.
    return _SURROGATE_RE.sub("\ufffd", s)


def encode_manifest(obj):
    """The manifest bytes, canonical as docs/FORMAT.md defines them.

    Compact JSON with keys sorted at every level, every character outside printable ASCII
    as a lowercase \\uXXXX escape (a surrogate pair beyond U+FFFF), which is what
    json.dumps writes with sort_keys and compact separators. NaN and infinities are refused.
    """
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("ascii")


# ---------------------------------------------------------------------------------------------
# Writing


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _dtype_name(torch, t):
    name = str(t.dtype)
    if name.startswith("torch."):
        name = name[len("torch."):]
    if name not in _DTYPES:
        raise TypeError("dtype %s is not supported (want one of %s)" % (t.dtype, ", ".join(DTYPES)))
    return name


def saved_offset(recorded_offset, itemsize):
    """(storage offset written to the file, first storage element saved) for a view whose
    storage offset is recorded_offset, by the rule of docs/FORMAT.md."""
    a = _OFFSET_BYTES // itemsize
    if recorded_offset < a:
        return recorded_offset, 0
    offset = a + recorded_offset % a
    return offset, recorded_offset - offset


def _storage_nbytes(t):
    try:
        if hasattr(t, "untyped_storage"):
            return t.untyped_storage().nbytes()
        if hasattr(t, "_storage"):
            return t._storage().nbytes()
        return t.storage().nbytes()
    except Exception:
        return None


def _raw_bytes(torch, span, dtname):
    """The little-endian bytes of a 1-D contiguous tensor, as a bytes-like object."""
    itemsize, raw_name = _DTYPES[dtname]
    raw = span.view(getattr(torch, raw_name))
    if raw.device.type != "cpu":
        raw = raw.cpu()
    raw = raw.contiguous()
    n = raw.numel() * itemsize
    if n == 0:
        return b""
    try:
        import numpy  # noqa: F401  (optional)

        arr = raw.numpy()
        if sys.byteorder != "little":
            arr = arr.byteswap()
        return memoryview(arr.view("uint8"))
    except (ImportError, RuntimeError, TypeError):
        data = ctypes.string_at(raw.data_ptr(), n)
        if sys.byteorder != "little":
            data = _byteswap(data, itemsize)
        return data


def _byteswap(data, itemsize):
    if itemsize == 1:
        return data
    import array

    code = {2: "h", 4: "i" if array.array("i").itemsize == 4 else "l", 8: "q"}[itemsize]
    a = array.array(code)
    a.frombytes(bytes(data))
    a.byteswap()
    return a.tobytes()


def _encode_tensor(torch, name, t, batch_dim, compression):
    """The manifest entry (without payload.offset) and the stored bytes of one tensor."""
    where = "tensor %r" % name
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: want a torch.Tensor, got %s" % (where, type(t).__name__))
    if t.layout != torch.strided:
        raise TypeError("%s: layout %s is not supported (want a strided tensor)" % (where, t.layout))
    try:
        dtname = _dtype_name(torch, t)
    except TypeError as e:
        raise TypeError("%s: %s" % (where, e))
    if t.dim() > MAX_DIMS:
        raise ValueError("%s: %d dims, at most %d are supported" % (where, t.dim(), MAX_DIMS))
    t = t.detach()
    if getattr(t, "is_neg", None) is not None and t.is_neg():
        t = t.resolve_neg()
    itemsize = _DTYPES[dtname][0]
    shape = [int(n) for n in t.shape]
    strides = [int(s) for s in t.stride()]
    if any(s < 0 for s in strides):
        raise ValueError("%s: negative strides %s are not supported" % (where, strides))
    recorded = int(t.storage_offset())
    offset, start = saved_offset(recorded, itemsize)
    if t.numel() > 0:
        end = recorded + 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    else:
        end = recorded  # an empty view reaches nothing; keep the prefix up to its offset
    elements = end - start

    # Copy the span [start, end) of the storage; only what the storage holds (an empty view
    # may have an offset past the end of its storage: the missing prefix is written as zeros).
    have = elements
    nbytes = _storage_nbytes(t)
    if nbytes is not None:
        have = max(0, min(elements, nbytes // itemsize - start))
    if have > 0:
        try:
            span = torch.as_strided(t, (have,), (1,), start)
            data = _raw_bytes(torch, span, dtname)
        except Exception as e:
            if t.device.type != "cpu":
                raise RuntimeError(
                    "%s: cannot copy it from %s (%s: %s); after a CUDA error (a device-side "
                    "assert) the GPU memory cannot be read: keep a CPU copy of the batch and "
                    "pass that" % (where, t.device, type(e).__name__, e))
            raise
    else:
        data = b""
    if have < elements:
        data = bytes(data) + bytes((elements - have) * itemsize)

    if compression == "zstd":
        try:
            import zstandard
        except ImportError:
            raise RuntimeError("compression 'zstd' needs the Python module 'zstandard' (pip install "
                               "zstandard); write with compression='none' instead")
        stored = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(bytes(data))
    else:
        stored = data
    entry = {
        "name": name,
        "dtype": dtname,
        "shape": shape,
        "strides": strides,
        "offset": offset,
        "batch_dim": batch_dim,
        "storage_elements": elements,
        "payload": {
            "offset": 0,
            "length": len(stored),
            "compression": compression,
            "crc32": zlib.crc32(stored) & 0xFFFFFFFF,
        },
    }
    if recorded != offset:  # docs/FORMAT.md: written only when it differs from offset
        entry["recorded_offset"] = recorded
    return entry, stored


def _tensor_items(torch, tensors):
    if hasattr(tensors, "items"):
        items = list(tensors.items())
    else:
        items = list(tensors)
    if not items:
        raise ValueError("no tensors to save")
    seen = set()
    out = []
    for item in items:
        try:
            name, t = item
        except (TypeError, ValueError):
            raise TypeError("tensors: want a dict of name -> torch.Tensor")
        if not isinstance(name, str) or not name:
            raise ValueError("tensors: names must be non-empty strings, got %r" % (name,))
        if name in seen:
            raise ValueError("tensors: duplicate name %r" % name)
        seen.add(name)
        out.append((_clean_str(name), t))
    return out


def _batch_axes(items, batch_dims):
    batch_dims = dict(batch_dims or {})
    names = set(n for n, _ in items)
    for k in batch_dims:
        if k not in names:
            raise ValueError("batch_dims: no tensor named %r (tensors: %s)" % (k, ", ".join(sorted(names))))
    axes = {}
    for name, t in items:
        ndim = t.dim()
        if name in batch_dims:
            d = batch_dims[name]
            if d is not None:
                if isinstance(d, bool) or not isinstance(d, int):
                    raise TypeError("batch_dims[%r]: want an int or None, got %r" % (name, d))
                if d < 0:
                    d += ndim
                if not 0 <= d < ndim:
                    raise ValueError("batch_dims[%r]: axis %r is out of range for a %d-dim tensor"
                                     % (name, batch_dims[name], ndim))
        else:
            d = 0 if ndim > 0 else None  # a 0-d tensor has no axis to batch along
        axes[name] = d
    return axes


def _attr_value(v, where):
    if v is None or isinstance(v, (bool, str)):
        return _clean_str(v) if isinstance(v, str) else v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("%s: %r cannot be written as JSON" % (where, v))
        return v
    if isinstance(v, (list, tuple)):
        return [_attr_value(x, where) for x in v]
    if hasattr(v, "item") and tuple(getattr(v, "shape", (None,))) == ():  # numpy and torch scalars
        return _attr_value(v.item(), where)
    if hasattr(v, "tolist") and hasattr(v, "shape"):  # small arrays and tensors
        return _attr_value(v.tolist(), where)
    raise TypeError("%s: %r is not a JSON number, string, boolean, null or array of those" % (where, v))


def _error_entry(error):
    if error is None:
        return None
    if isinstance(error, BaseException):
        name = type(error).__name__
        try:
            msg = str(error)
        except Exception:
            msg = "<unprintable %s>" % name
        text = "%s: %s" % (name, msg) if msg else name
        lines = [ln for ln in text.splitlines() if ln.strip()]
        out = {"text": lines[0].rstrip() if lines else name, "exception": name}
        if isinstance(error, SystemExit):
            if isinstance(error.code, int) and not isinstance(error.code, bool):
                out["exit_status"] = error.code
        else:
            out["exit_status"] = 1  # what the interpreter exits with on an uncaught exception
    elif isinstance(error, str):
        out = {"text": error.rstrip("\r\n")}
        m = _EXCEPTION_NAME_RE.match(error)
        if m:
            out["exception"] = m.group(1).rsplit(".", 1)[-1]
    elif isinstance(error, dict):
        unknown = set(error) - _ERROR_KEYS
        if unknown:
            raise ValueError("error: unknown keys %s (want text, exception, exit_status)" % sorted(unknown))
        if not isinstance(error.get("text"), str):
            raise TypeError("error: 'text' must be a string")
        out = {"text": error["text"]}
        exc = error.get("exception")
        if exc is not None:
            if not isinstance(exc, str):
                raise TypeError("error: 'exception' must be a string")
            out["exception"] = exc
        st = error.get("exit_status")
        if st is not None:
            if isinstance(st, bool) or not isinstance(st, int):
                raise TypeError("error: 'exit_status' must be an int")
            out["exit_status"] = st
    else:
        raise TypeError("error: want a str, an exception or a dict, got %s" % type(error).__name__)
    out = {k: (_clean_str(v) if isinstance(v, str) else v) for k, v in out.items()}
    if out.get("exception") == "":
        del out["exception"]  # Go's omitempty drops it too
    return out


def _git_revision():
    try:
        p = subprocess.run(["git", "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=2)
    except Exception:
        return None
    rev = p.stdout.decode("ascii", "replace").strip()
    if p.returncode != 0 or not re.match(r"^[0-9a-f]{40,64}$", rev):
        return None
    return rev


def _device_name(torch, items, failed=False):
    """The GPU the step ran on, when one can still be named, else "cpu"."""
    cuda = None
    for _, t in items:
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            cuda = t.device
            break
    try:
        if cuda is not None:
            return torch.cuda.get_device_name(cuda)
        if failed and torch.cuda.is_initialized():
            # A property query: it launches nothing on a device that may be in an error state.
            return torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:
        pass
    return "cpu"


def _provenance(torch, items, failed=False):
    meta = {
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "executable": sys.executable,  # the user's interpreter: reduce replays the step with it
        "device": _device_name(torch, items, failed),
        "host": socket.gethostname(),
        "recorded_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    version = getattr(torch, "version", None)
    for key in ("cuda", "hip"):
        v = getattr(version, key, None)
        if v:
            meta[key] = str(v)
    git = _git_revision()
    if git:
        meta["git"] = git
    return meta


def _samples_of(items, axes, lenient, notes, samples=None):
    """The sample count the batched tensors agree on. A tensor that disagrees is an error, or, when
    recording a crash (lenient), recorded as shared with a note (a line for stderr): the file is
    written all the same."""
    first = None
    for name, t in items:
        d = axes[name]
        if d is None:
            continue
        n = int(t.shape[d])
        if samples is None:
            samples, first = n, name
        elif n != samples:
            if not lenient:
                raise ValueError("tensor %r: %d samples along batch axis %d, but %s %d; mark a shared tensor "
                                 "with batch_dims={%r: None}"
                                 % (name, n, d, "tensor %r has" % first if first else "the batch has", samples, name))
            axes[name] = None
            notes.append("%s: recorded as shared: %d along axis %d, the batch has %d samples" % (name, n, d, samples))
    return samples


def _skipped_note(where, typ, reason):
    return "skipped %s: %s (%s)" % (where, reason, typ)


def _pads(items, axes, samples, padded, lengths):
    if not padded:
        return {}
    if lengths is None:
        raise ValueError("padded: give lengths=, one length per sample along the padded dims")
    if hasattr(lengths, "tolist"):
        lengths = lengths.tolist()
    lengths = [int(n) for n in lengths]
    if len(lengths) != samples:
        raise ValueError("lengths: %d lengths for %d samples" % (len(lengths), samples))
    tensors = dict(items)
    out = {}
    for name, d in dict(padded).items():
        if name not in tensors:
            raise ValueError("padded: no tensor named %r (tensors: %s)" % (name, ", ".join(sorted(tensors))))
        t = tensors[name]
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError("padded[%r]: want a dim (an int), got %r" % (name, d))
        if d < 0:
            d += t.dim()
        if axes[name] is None or not 0 <= d < t.dim() or d == axes[name]:
            raise ValueError("padded[%r]: dim %r is not a dim of this batched tensor other than its batch axis"
                             % (name, padded[name]))
        long = [n for n in lengths if not 0 <= n <= t.shape[d]]
        if long:
            raise ValueError("padded[%r]: length %d outside [0, %d], the padded size" % (name, long[0], t.shape[d]))
        out[name] = {"dim": d, "lengths": lengths}
    return out


def save(path, batch=None, *, op=None, attrs=None, batch_dims=None, sample_ids=None, error=None,
         meta=None, step=None, state=None, padded=None, lengths=None, provenance=True,
         compression="none", tensors=None, _failed=False):
    """Write one batch to `path` (atomically: a temporary file, fsync, rename).

    batch       what the loader yields: a dict of tensors by name, or any nesting of dict, list,
                tuple, named tuple and mapping object (a BatchEncoding) whose leaves are tensors
                (batched along axis 0 unless batch_dims says otherwise), lists of Python values
                with one per sample (strings, numbers, booleans, None) or values shared by the
                batch. Each tensor is saved with its dtype, shape, strides and storage offset,
                and the span of its storage the view reaches (not a contiguous copy). A tensor is
                named by its path in the batch ("input_ids", "0", "1.mask"). A GPU tensor is
                copied to the CPU, which is impossible after a device-side assert: pass the CPU
                copy. A leaf that cannot be encoded is recorded as skipped (named on stderr).
    op, attrs   a built-in operator (cross_entropy, nll_loss, embedding, ...) and its keyword
                arguments, to replay one operator instead of a step.
    step        the training step (a top-level function of the batch, or "module:qualname"):
                `reduce --batch FILE` imports it and calls step(batch) on each candidate, or
                step(batch, state) when a state was recorded.
    state       dict name -> a model, an optimizer, a grad scaler or any object with a
                state_dict() (or a state_dict itself); recorded as data (tensors and values, no
                pickle, zstd-compressed when zstandard is installed) with the random generators'
                states, so that every candidate replays from the state at the crash.
    padded, lengths
                padded={"input_ids": 1, "attention_mask": 1}: tensors padded along that dim to
                the batch's longest sample, and lengths= the samples' own lengths: every
                candidate is padded afresh to its longest sample, as a collate would pad it.
    batch_dims  dict name -> batch axis, or None for a tensor shared by all samples (an
                embedding table, class weights); a tensor not named is batched along axis 0
                (a 0-d tensor is shared).
    sample_ids  one id per sample (ints are written as strings); by default a per-sample list
                under a key such as "id" or "ids".
    error       the failure: an exception, its text, or a dict {text, exception, exit_status}.
    meta        provenance of your own (str values). With provenance=True (the default) the
                torch, cuda/hip, python, git, device, host and recorded_at keys are filled in;
                meta overrides them, and a None value drops one. provenance=False writes meta
                alone, so that the same arguments give the same bytes.
    compression "none" (the default) or "zstd" (needs the zstandard module).
    """
    torch = _torch()
    lenient = bool(_failed)  # recording a crash: what cannot be encoded is noted, never fatal
    if batch is None:
        batch = tensors
    elif tensors is not None:
        raise TypeError("save: give the batch once (batch or tensors=)")
    if batch is None or (not lenient and isinstance(batch, (dict, list, tuple)) and len(batch) == 0):
        raise ValueError("no batch to save (it is empty)")
    if compression not in _COMPRESSIONS:
        raise ValueError("compression: %r, want one of %s" % (compression, ", ".join(_COMPRESSIONS)))
    notes = []  # lines for stderr: what was skipped or left out, and why
    structure = None
    if _is_flat(batch) and step is None and state is None:
        items = _tensor_items(torch, batch)
        axes = _batch_axes(items, batch_dims)
        samples = _samples_of(items, axes, lenient, notes)
    else:
        counted = _count_samples(torch, batch, batch_dims, sample_ids)
        fl = _Flattener(torch, "", counted)
        structure = fl.node(batch)
        items = fl.tensors
        notes.extend(_skipped_note(*leaf) for leaf in fl.skipped)
        axes = _batch_axes(items, batch_dims)
        samples = _samples_of(items, axes, lenient, notes, counted if any(axes[n] is not None for n, _ in items)
                              else None)
        if samples is None:
            samples = counted
        if sample_ids is None:
            # The ids: a per-sample leaf under an id key, else the first one of distinct strings
            # (the ids of a default-collated (image, label, id) tuple).
            for p, values in fl.per_sample:
                if p.rpartition(".")[2] in _ID_KEYS and len(values) == samples and all(
                        isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
                    sample_ids = values
                    break
            else:
                for p, values in fl.per_sample:
                    if len(values) == samples and all(isinstance(v, str) for v in values) and \
                            len(set(values)) == len(values):
                        sample_ids = values
                        break
    ids = None
    if sample_ids is not None:
        if hasattr(sample_ids, "tolist"):
            sample_ids = sample_ids.tolist()
        ids = [_clean_str(s if isinstance(s, str) else str(s)) for s in sample_ids]
        if samples is None:
            samples = len(ids)
        elif len(ids) != samples:
            if not lenient:
                raise ValueError("sample_ids: %d ids for %d samples" % (len(ids), samples))
            notes.append("sample_ids: %d ids for %d samples: not recorded" % (len(ids), samples))
            ids = None
    if samples is None:
        samples = 0
    try:
        pads = _pads(items, axes, samples, padded, lengths)
    except (TypeError, ValueError) as e:
        if not lenient:
            raise
        notes.append("padded: %s: the batch is reduced without re-padding" % e)
        pads = {}

    manifest = {"samples": samples}
    if ids:
        manifest["sample_ids"] = ids
    if op is not None:
        if not isinstance(op, str):
            raise TypeError("op: want a string, got %s" % type(op).__name__)
        if op:
            manifest["op"] = _clean_str(op)
    if attrs:
        manifest["attrs"] = {_clean_str(str(k)): _attr_value(v, "attrs[%r]" % k) for k, v in dict(attrs).items()}
    err = _error_entry(error)
    if err is not None:
        manifest["error"] = err
    if step is not None:
        try:
            manifest["step"] = _step_entry(step)
        except ValueError as e:
            if not lenient:
                raise
            notes.append("step: not recorded: %s" % e)
    state_items = []
    if state is not None:
        try:
            if not isinstance(state, dict):
                raise TypeError("state: want a dict name -> model, optimizer, ... or state_dict, such as "
                                "state={\"model\": model, \"optimizer\": optimizer}; got %s" % type(state).__name__)
            values = {str(k): _state_value(v) for k, v in state.items()}
            values.setdefault("rng", _rng_state(torch))
            sfl = _Flattener(torch, "state.", None)
            sfl.names = fl.names
            manifest["state"] = sfl.node(values)
            state_items = sfl.tensors
            notes.extend(_skipped_note("state." + p, t, r) for p, t, r in sfl.skipped)
        except Exception as e:
            if not lenient:
                raise
            notes.append("state: not recorded: %s: %s" % (type(e).__name__, e))
            state_items = []
    if structure is not None:
        manifest["structure"] = structure
    m = _provenance(torch, items, _failed) if provenance else {}
    for k, v in dict(meta or {}).items():
        if not isinstance(k, str):
            raise TypeError("meta: keys must be strings, got %r" % (k,))
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v if isinstance(v, str) else str(v)
    if m:
        manifest["meta"] = {_clean_str(k): _clean_str(v) for k, v in m.items()}

    state_compression = compression
    if state_items and compression == "none":
        try:
            import zstandard  # noqa: F401 (the state is compressed when it can be)

            state_compression = "zstd"
        except ImportError:
            pass
    entries, blobs = [], []
    cursor = 0
    state_bytes = [0, 0]
    state_names = set(n for n, _ in state_items)
    failed = {}
    for name, t, axis, comp in [(n, t, axes[n], compression) for n, t in items] + \
                               [(n, t, None, state_compression) for n, t in state_items]:
        try:
            entry, blob = _encode_tensor(torch, name, t, axis, comp)
        except Exception as e:
            if not lenient:
                raise
            # A tensor that cannot be read (a GPU copy after a device error): the crash is still
            # recorded, with this leaf skipped.
            failed[name] = {"kind": "skipped", "type": "torch:Tensor", "reason": "%s: %s" % (type(e).__name__, e)}
            notes.append(_skipped_note(name, "torch:Tensor", failed[name]["reason"]))
            continue
        if name in pads:
            entry["pad"] = pads[name]
        cursor = _align(cursor)
        entry["payload"]["offset"] = cursor
        cursor += entry["payload"]["length"]
        entries.append(entry)
        blobs.append(blob)
        if name in state_names:
            state_bytes[0] += entry["storage_elements"] * _DTYPES[entry["dtype"]][0]
            state_bytes[1] += entry["payload"]["length"]
    manifest["tensors"] = entries
    if failed:
        if structure is None:
            structure = {"kind": "dict", "keys": [n for n, _ in items],
                         "items": [{"kind": "tensor", "name": n} for n, _ in items]}
            manifest["structure"] = structure
        for tree in (manifest.get("structure"), manifest.get("state")):
            _replace_leaves(tree, failed)
    version = 2 if (structure is not None or "step" in manifest or "state" in manifest or pads) else 1

    mbytes = encode_manifest(manifest)
    if len(mbytes) > MAX_MANIFEST:
        raise ValueError("manifest: %d bytes, at most %d are allowed" % (len(mbytes), MAX_MANIFEST))
    header = _HEADER.pack(MAGIC, version, 0, len(mbytes), zlib.crc32(mbytes) & 0xFFFFFFFF, 0)
    p = _align(HEADER_SIZE + len(mbytes))

    def write(f):
        f.write(header)
        f.write(mbytes)
        f.write(bytes(p - HEADER_SIZE - len(mbytes)))
        pos = 0
        for entry, blob in zip(entries, blobs):
            off = entry["payload"]["offset"]
            if off > pos:
                f.write(bytes(off - pos))
            f.write(blob)
            pos = off + entry["payload"]["length"]

    _atomic_write(os.fspath(path), write)
    for note in notes:
        _warn(note)
    if "state" in manifest:
        _warn("recorded the state (%s): %s, %s in the file" % (
            ", ".join(k for k in manifest["state"].get("keys", [])), _size(state_bytes[0]), _size(state_bytes[1])))
    return path


def _replace_leaves(node, by_name):
    if not node:
        return
    for i, c in enumerate(node.get("items", [])):
        if c["kind"] == "tensor" and c["name"] in by_name:
            node["items"][i] = by_name[c["name"]]
        else:
            _replace_leaves(c, by_name)


def _size(n):
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "bytes" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def _atomic_write(path, write):
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    tmp = None
    for _ in range(100):
        candidate = os.path.join(directory, ".%s.%d.%s.tmp" % (base, os.getpid(), os.urandom(4).hex()))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue
        tmp = candidate
        break
    if tmp is None:
        raise OSError("cannot create a temporary file in %s" % directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename durable; not possible everywhere (Windows)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# The batch as the loader yields it (docs/FORMAT.md, "The structure")

_SCALARS = (str, int, float, bool, type(None))
# Keys of a per-sample leaf that hold the samples' ids, when sample_ids is not given.
_ID_KEYS = ("id", "ids", "sample_id", "sample_ids", "uid", "uids", "idx", "index", "key", "keys")


def _is_scalar(v):
    return isinstance(v, _SCALARS) and not (isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))))


def _type_path(obj):
    cls = obj if isinstance(obj, type) else type(obj)
    return "%s:%s" % (cls.__module__, cls.__qualname__)


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields") and hasattr(type(x), "_make")


def _is_flat(batch):
    """A dict of tensors by name: written as version 1 wrote it, without a structure."""
    torch = _torch()
    return (type(batch) is dict and batch and all(isinstance(k, str) and k for k in batch)
            and all(isinstance(v, torch.Tensor) for v in batch.values()))


class _Flattener(object):
    """Walks a batch (or a state) into a structure node, collecting its tensors by path name and
    what it cannot encode. `samples` decides which lists of Python values are per-sample."""

    def __init__(self, torch, prefix, samples):
        self.torch = torch
        self.prefix = prefix
        self.samples = samples
        self.tensors = []      # (name, tensor)
        self.skipped = []      # (path, type, reason)
        self.per_sample = []   # (path, values)
        self.names = set()

    def name(self, path):
        base = self.prefix + (path or "batch")
        name, n = base, 2
        while name in self.names:
            name, n = "%s#%d" % (base, n), n + 1
        self.names.add(name)
        return name

    def skip(self, path, x, reason):
        self.skipped.append((path or "batch", _type_path(x), reason))
        return {"kind": "skipped", "type": _type_path(x), "reason": reason}

    def items(self, keys, values, path):
        out = []
        for k, v in zip(keys, values):
            out.append(self.node(v, "%s.%s" % (path, k) if path else str(k)))
        return out

    def node(self, x, path=""):
        torch = self.torch
        if isinstance(x, torch.Tensor):
            try:
                _dtype_name(torch, x)
            except TypeError as e:
                return self.skip(path, x, str(e))
            if x.layout != torch.strided:
                return self.skip(path, x, "layout %s (only strided tensors are recorded)" % x.layout)
            name = self.name(path)
            self.tensors.append((name, x))
            return {"kind": "tensor", "name": name}
        if "numpy" in sys.modules and isinstance(x, sys.modules["numpy"].ndarray):
            try:
                return self.node(torch.from_numpy(x), path)
            except Exception as e:
                return self.skip(path, x, "numpy array: %s" % e)
        if _is_namedtuple(x):
            fields = list(type(x)._fields)
            return {"kind": "namedtuple", "type": _type_path(x), "keys": fields,
                    "items": self.items(fields, list(x), path)}
        if isinstance(x, (list, tuple)):
            if x and all(isinstance(v, _SCALARS) for v in x) and len(x) == self.samples:
                if not all(_is_scalar(v) for v in x):
                    return self.skip(path, x, "a non-finite float has no JSON form")
                self.per_sample.append((path, list(x)))
                node = {"kind": "samples", "values": [_clean_str(v) if isinstance(v, str) else v for v in x]}
                if isinstance(x, tuple):
                    node["tuple"] = True
                return node
            node = {"kind": "tuple" if isinstance(x, tuple) else "list"}
            if x:
                node["items"] = self.items(range(len(x)), list(x), path)
            return node
        if isinstance(x, dict) or (hasattr(x, "keys") and hasattr(x, "__getitem__")):
            keys = list(x.keys())
            bad = [k for k in keys if not (isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool)))]
            if bad:
                return self.skip(path, x, "key %r is not a str or an int" % (bad[0],))
            node = {"kind": "dict"}  # a dict, or a subclass of it (OrderedDict, a state_dict)
            if not isinstance(x, dict):
                if any(not isinstance(k, str) for k in keys):
                    return self.skip(path, x, "a mapping object with a key that is not a str")
                node = {"kind": "mapping", "type": _type_path(x)}
            if keys:
                node["keys"] = [_clean_str(k) if isinstance(k, str) else k for k in keys]
                node["items"] = self.items(keys, [x[k] for k in keys], path)
            return node
        if isinstance(x, _SCALARS):
            if not _is_scalar(x):
                return self.skip(path, x, "a non-finite float has no JSON form")
            return {"kind": "value", "value": _clean_str(x) if isinstance(x, str) else x}
        return self.skip(path, x, "not a tensor, a container or a Python scalar")


def _count_samples(torch, batch, batch_dims, sample_ids):
    """The batch's size: along the batch axis of its tensors, else the ids', else the first list of
    Python values."""
    probe = _Flattener(torch, "", None)
    probe.node(batch)
    for name, t in probe.tensors:
        d = (batch_dims or {}).get(name, 0 if t.dim() > 0 else None)
        if d is not None and -t.dim() <= d < t.dim():
            return int(t.shape[d])
    if sample_ids is not None:
        return len(sample_ids)
    stack = [batch]
    while stack:
        x = stack.pop(0)
        if isinstance(x, (list, tuple)) and x and all(isinstance(v, _SCALARS) for v in x):
            return len(x)
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    return 0


def _trusted_types(types):
    """load()'s `types` as a function of a recorded "module:qualname" that returns the class to
    rebuild it with, or None: nothing (None), classes (a list, or one), a dict from
    "module:qualname" to the class, or such a function."""
    if types is None:
        return lambda type_path: None
    if callable(types) and not isinstance(types, type):
        return types
    if isinstance(types, type):
        types = [types]
    if not isinstance(types, dict):
        types = dict((_type_path(c) if isinstance(c, type) else c, c) for c in types)
    for k, c in types.items():
        if not isinstance(k, str) or not isinstance(c, type):
            raise TypeError("load: types: want classes, or a dict from 'module:qualname' to a class; got %r: %r"
                            % (k, c))
    return types.get


_made_types = {}  # ("module:qualname", fields) -> the named tuple class made for it


def _made_namedtuple(type_path, keys):
    """A named tuple class of the recorded name (its last part, made an identifier) and fields,
    made here: a file names its class, and load() imports nothing a file names."""
    import collections
    import keyword

    key = (type_path, tuple(str(k) for k in keys))
    cls = _made_types.get(key)
    if cls is None:
        name = re.sub(r"\W", "_", re.split(r"[:.]", type_path)[-1]) or "_"
        if name[0].isdigit() or keyword.iskeyword(name):
            name = "_" + name
        if not name.isidentifier():
            name = "Record"
        cls = _made_types[key] = collections.namedtuple(name, key[1], rename=True)
    return cls


def _imported_type(type_path):
    """The class a replay rebuilds a recorded named tuple or mapping with (load()'s types), so that
    the step gets the batch as the loader yielded it: the class of that "module:qualname" when the
    step's own import already brought it (its module in sys.modules, or the attribute of that name
    on its imported top-level package: transformers.BatchEncoding, which a lazily loaded package
    imports on access), and only a named tuple or Mapping class. Nothing is imported by name;
    another type is rebuilt as load() rebuilds it by default (a named tuple of its fields, a
    dict)."""
    import collections.abc

    mod, _, qual = type_path.partition(":")
    names = qual.split(".")
    owner = sys.modules.get(mod)
    if owner is None and "." in mod:
        owner = sys.modules.get(mod.split(".")[0])
    obj = owner
    try:
        for n in names if owner is not None else ():
            obj = getattr(obj, n, None)
    except Exception:  # a lazy attribute whose import failed
        obj = None
    if not isinstance(obj, type) or _type_path(obj) != type_path or not (
            issubclass(obj, collections.abc.Mapping) or (issubclass(obj, tuple) and hasattr(obj, "_fields"))):
        if type_path not in _imported_type.warned:
            _imported_type.warned.add(type_path)
            _warn("%s is rebuilt without its class (a named tuple of its fields, or a dict): the step's "
                  "import did not bring it (import it in the step's module to replay it as recorded)" % type_path)
        return None
    return obj


_imported_type.warned = set()


def _build(node, tensors, warn, types):
    """The Python value of a structure node over the loaded tensors. A named tuple or mapping is
    rebuilt with the class types(its recorded "module:qualname") gives (the caller's trusted
    classes), else as a named tuple made of its recorded name and fields, or a dict."""
    kind = node["kind"]
    if kind == "tensor":
        return tensors[node["name"]]
    if kind == "samples":
        return tuple(node["values"]) if node.get("tuple") else list(node["values"])
    if kind == "value":
        return node["value"]
    if kind == "skipped":
        return None
    items = [_build(c, tensors, warn, types) for c in node.get("items", [])]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    keys = node.get("keys", [])
    if kind == "dict":
        return dict(zip(keys, items))
    cls = types(node["type"])
    if cls is not None:
        try:
            return cls(*items) if kind == "namedtuple" else cls(dict(zip(keys, items)))
        except Exception as e:
            warn("%s %s rebuilt as a %s (%s: %s)" % (kind, node["type"], "named tuple" if kind == "namedtuple"
                                                    else "dict", type(e).__name__, e))
    if kind == "namedtuple":
        return _made_namedtuple(node["type"], keys)(*items)
    return dict(zip(keys, items))


def _node_types(node, path, out):
    """out[path] = the recorded "module:qualname" of every named tuple and mapping under node."""
    if node.get("kind") in ("namedtuple", "mapping"):
        out[path or "batch"] = node.get("type", "")
    keys = node.get("keys") or list(range(len(node.get("items", []))))
    for k, c in zip(keys, node.get("items", [])):
        _node_types(c, "%s.%s" % (path, k) if path else str(k), out)


def _check_node(r, node, where, samples, names, used):
    """Reader-side check of a structure node (the Go reader's rules, docs/FORMAT.md)."""
    if not isinstance(node, dict):
        r.fail(where, "want an object")
    kind = node.get("kind")
    allowed = {"tensor": {"name"}, "list": {"items"}, "tuple": {"items"}, "dict": {"keys", "items"},
               "namedtuple": {"keys", "items", "type"}, "mapping": {"keys", "items", "type"},
               "samples": {"values", "tuple"}, "value": {"value"}, "skipped": {"type", "reason"}}
    if kind not in allowed:
        r.fail(where, "unknown kind %s" % json.dumps(kind))
    extra = set(node) - allowed[kind] - {"kind"}
    if extra:
        r.fail(where, "key %s does not belong to kind %s" % (sorted(extra)[0], kind))
    if kind == "tensor":
        if node.get("name") not in names:
            r.fail(where, "no tensor named %s" % json.dumps(node.get("name")))
        if node["name"] in used:
            r.fail(where, "tensor %r appears twice" % node["name"])
        used.add(node["name"])
    elif kind == "samples":
        vals = node.get("values", [])
        if not isinstance(vals, list) or len(vals) != samples:
            r.fail(where, "want one value per sample (%d)" % samples)
        if not all(isinstance(v, _SCALARS) for v in vals):
            r.fail(where, "values: want strings, numbers, booleans or null")
    elif kind in ("dict", "namedtuple", "mapping"):
        keys, items = node.get("keys", []), node.get("items", [])
        if not isinstance(keys, list) or not isinstance(items, list) or len(keys) != len(items):
            r.fail(where, "want as many keys as items")
        if len(set(json.dumps(k) for k in keys)) != len(keys):
            r.fail(where, "duplicate keys")
    if not isinstance(node.get("items", []), list):
        r.fail(where, "items: want an array")
    for i, c in enumerate(node.get("items", [])):
        _check_node(r, c, "%s.items[%d]" % (where, i), samples, names, used)


class State(dict):
    """The state recorded with a batch (save(..., state=)): name -> the state_dict recorded for it
    (tensors and Python values, no pickle); "rng" holds the random generators' states, which
    reduce restores before it calls the step. restore(model=m, optimizer=o) loads each named
    state_dict into the object given for it."""

    def restore(self, **objects):
        for name, obj in objects.items():
            if name not in self:
                raise KeyError("state: nothing recorded under %r (recorded: %s)" % (name, ", ".join(sorted(self))))
            obj.load_state_dict(self[name])
        return self

    def restore_rng(self):
        """Set the random generators (torch, CUDA, random, numpy) to their states at the crash."""
        rng = self.get("rng") or {}
        torch = _torch()
        if rng.get("torch") is not None:
            torch.set_rng_state(rng["torch"].cpu())
        if rng.get("cuda") and torch.cuda.is_available():
            try:
                torch.cuda.set_rng_state_all([t.cpu() for t in rng["cuda"]])
            except Exception:
                pass
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


def _rng_state(torch):
    import random

    rng = {"torch": torch.get_rng_state()}
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["cuda"] = list(torch.cuda.get_rng_state_all())
    except Exception:
        pass  # after a device error the CUDA generators cannot be read: the CPU ones still are
    v = random.getstate()
    rng["random"] = [v[0], list(v[1]), v[2]]
    if "numpy" in sys.modules:
        np = sys.modules["numpy"]
        s = np.random.get_state()
        rng["numpy"] = [s[0], torch.from_numpy(s[1].astype("int64")), int(s[2]), int(s[3]), float(s[4])]
    return rng


def _state_value(obj):
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        return obj.state_dict()
    return obj


def _step_entry(step):
    """The manifest's step for a step function (or "module:qualname"), or raises ValueError saying
    why it cannot be imported by name."""
    if isinstance(step, str):
        mod, sep, qual = step.rpartition(":")
        if not sep or not mod or not qual:
            raise ValueError("step %r: want module:qualname" % step)
        entry = {"module": mod, "qualname": qual, "cwd": os.getcwd()}
        m = sys.modules.get(mod)
        if getattr(m, "__file__", None):
            entry["file"] = os.path.abspath(m.__file__)
        return entry
    fn = getattr(step, "__func__", step)
    if getattr(step, "__self__", None) is not None and not isinstance(step.__self__, type):
        raise ValueError("step %r is a bound method: pass a function of the batch (reduce cannot rebuild "
                         "the object it is bound to)" % (step,))
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not mod or not qual or "<" in qual:
        raise ValueError("step %r cannot be imported by name (a lambda or a function defined inside another): "
                         "define it at the top level of a module" % (step,))
    entry = {"module": mod, "qualname": qual, "cwd": os.getcwd()}
    try:
        import inspect

        src = inspect.getsourcefile(fn)
    except TypeError:
        src = None
    if src:
        entry["file"] = os.path.abspath(src)
        if mod == "__main__":
            line = _runs_at_import(src)
            if line:
                _warn("warning: %s runs code when it is imported (line %d): reduce imports it to replay %s and would "
                      "run that again; put it under `if __name__ == \"__main__\":`, or define the step in a module of "
                      "its own" % (src, line, qual))
    return entry


def _runs_at_import(path):
    """The line of the first top-level statement of a script that would train when imported (a
    loop, a with block, a call of a plain function such as main()) outside `if __name__ ==
    "__main__":`, or 0. Calls of a module's function (sys.path.insert, torch.manual_seed) are
    set-up, not training."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return 0
    for node in tree.body:
        if isinstance(node, (ast.For, ast.While, ast.With, ast.AsyncFor, ast.AsyncWith)):
            return node.lineno
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            return node.lineno
    return 0


def _warn(msg):
    try:
        sys.stderr.write("reduce_batch: %s\n" % msg)
    except Exception:
        pass


# ---------------------------------------------------------------------------------------------
# Reading


class Batch(object):
    """A batch read by load().

    tensors          dict name -> torch.Tensor, in file order, with the recorded dtype, shape,
                     strides and storage offset (the saved offset, see docs/FORMAT.md)
    batch_dims       dict name -> batch axis or None
    samples          number of samples
    sample_ids       list of str, or None
    op, attrs        the operator (or None) and its keyword arguments (a dict, maybe empty)
    error            dict with text, exception ("" when absent) and exit_status (or None), or None
    meta             dict of str -> str
    recorded_offsets dict name -> the storage offset the recorder saw, for tensors whose offset
                     was 4096 bytes or more (the file keeps a shorter prefix, docs/FORMAT.md)
    data             the batch in the structure it was recorded in (a dict, list, tuple, named
                     tuple or mapping object, with its per-sample and shared values; a skipped
                     leaf is None); for a file without a structure, the dict of tensors. A named
                     tuple or mapping is an object of its class only when load() was given that
                     class (types=); else a named tuple of the recorded name and fields made
                     here, or a dict
    types            dict path -> the "module:qualname" the file records for each named tuple
                     and mapping (paths as skipped's; "batch" for the whole batch)
    step             the recorded step {module, qualname, file, cwd}, or None
    state            the recorded State (name -> state_dict, "rng"), or None
    skipped          [(path, type, reason)] of the leaves the recorder could not encode
    pads             dict name -> {dim, lengths} for the tensors padded to the longest sample
    manifest         the manifest as read
    """

    def __init__(self, path, manifest, tensors, types=None):
        self.path = path
        self.manifest = manifest
        self.tensors = tensors
        self.batch_dims = {e["name"]: e.get("batch_dim") for e in manifest["tensors"]}
        self.recorded_offsets = {e["name"]: e["recorded_offset"] for e in manifest["tensors"]
                                 if "recorded_offset" in e}
        self.samples = manifest["samples"]
        self.sample_ids = manifest.get("sample_ids")
        self.op = manifest.get("op") or None
        self.attrs = manifest.get("attrs") or {}
        err = manifest.get("error")
        self.error = None if err is None else {
            "text": err.get("text", ""), "exception": err.get("exception", ""),
            "exit_status": err.get("exit_status")}
        self.meta = manifest.get("meta") or {}
        self.step = manifest.get("step")
        self.pads = {e["name"]: e["pad"] for e in manifest["tensors"] if "pad" in e}
        self.skipped = []
        self.types = {}
        for key in ("structure", "state"):
            if key in manifest:
                _skipped_leaves(manifest[key], "" if key == "structure" else "state", self.skipped)
                _node_types(manifest[key], "" if key == "structure" else "state", self.types)
        trusted = _trusted_types(types)
        if "structure" in manifest:
            self.data = _build(manifest["structure"], tensors, _warn, trusted)
        else:
            self.data = dict(tensors)
        self.state = None
        if "state" in manifest:
            self.state = State(_build(manifest["state"], tensors, _warn, trusted))
            for name in _tree_tensors(manifest["state"]):
                self.tensors.pop(name, None)  # tensors holds the batch's; the state's are in state

    def __repr__(self):
        parts = ["%s %s%s" % (n, str(t.dtype).replace("torch.", ""), list(t.shape))
                 for n, t in self.tensors.items()]
        return "<Batch %s: %d samples, op=%r, tensors: %s>" % (self.path, self.samples, self.op, ", ".join(parts))


def _skipped_leaves(node, path, out):
    if node.get("kind") == "skipped":
        out.append((path or "batch", node.get("type", ""), node.get("reason", "")))
    keys = node.get("keys") or list(range(len(node.get("items", []))))
    for k, c in zip(keys, node.get("items", [])):
        _skipped_leaves(c, "%s.%s" % (path, k) if path else str(k), out)


def _tree_tensors(node):
    if node.get("kind") == "tensor":
        return [node["name"]]
    return [n for c in node.get("items", []) for n in _tree_tensors(c)]


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


class _Reader(object):
    def __init__(self, path, max_size):
        self.path = path
        self.max_size = max_size

    def fail(self, field, msg):
        raise BatchFileError("%s: %s: %s" % (self.path, field, msg))

    def int_field(self, obj, key, where, minimum=0, maximum=_INT64_MAX):
        v = obj.get(key)
        if not _is_int(v):
            self.fail(where, "%s: want an integer, got %s" % (key, json.dumps(v)))
        if v < minimum or v > maximum:
            self.fail(where, "%s: %d is out of range [%d, %d]" % (key, v, minimum, maximum))
        return v

    def header(self, f, size):
        head = f.read(HEADER_SIZE)
        if not head:
            self.fail("header", "truncated: the file is empty")
        if head[:len(MAGIC)] != MAGIC[:len(head[:len(MAGIC)])]:
            self.fail("magic", "got %r, want %r: not a reduce batch file" % (head[:len(MAGIC)], MAGIC))
        if len(head) < HEADER_SIZE:
            self.fail("header", "truncated: the file has %d bytes, the header needs %d" % (size, HEADER_SIZE))
        magic, version, flags, mlen, mcrc, reserved = _HEADER.unpack(head)
        if magic != MAGIC:
            self.fail("magic", "got %r, want %r: not a reduce batch file" % (magic, MAGIC))
        if not 1 <= version <= FORMAT_VERSION:
            self.fail("version", "%d, this reader reads versions 1 to %d (a newer reduce_batch.py reads it: "
                      "`reduce recorder`)" % (version, FORMAT_VERSION))
        self.version = version
        if flags != 0:
            self.fail("flags", "0x%x, want 0" % flags)
        if reserved != 0:
            self.fail("reserved", "0x%x, want 0" % reserved)
        if mlen > MAX_MANIFEST:
            self.fail("manifest_length", "%d bytes, at most %d are allowed" % (mlen, MAX_MANIFEST))
        if HEADER_SIZE + mlen > size:
            self.fail("manifest", "truncated: the manifest needs %d bytes, the file has %d after the header"
                      % (mlen, size - HEADER_SIZE))
        mbytes = f.read(mlen)
        if len(mbytes) != mlen:
            self.fail("manifest", "truncated while reading")
        got = zlib.crc32(mbytes) & 0xFFFFFFFF
        if got != mcrc:
            self.fail("manifest_crc32", "checksum 0x%08x of the manifest, the header says 0x%08x" % (got, mcrc))
        return mbytes

    def manifest(self, mbytes):
        def bad_constant(name):
            raise ValueError("%s is not JSON" % name)

        try:
            text = mbytes.decode("utf-8")
            m = json.loads(text, parse_constant=bad_constant)
        except ValueError as e:
            self.fail("manifest", "malformed JSON: %s" % e)
        if not isinstance(m, dict):
            self.fail("manifest", "want a JSON object")
        samples = self.int_field(m, "samples", "manifest")
        ids = m.get("sample_ids")
        if ids is not None:
            if not isinstance(ids, list) or not all(isinstance(s, str) for s in ids):
                self.fail("sample_ids", "want an array of strings")
            if len(ids) != samples:
                self.fail("sample_ids", "%d ids for %d samples" % (len(ids), samples))
        op = m.get("op")
        if op is not None and not isinstance(op, str):
            self.fail("op", "want a string")
        attrs = m.get("attrs")
        if attrs is not None and not isinstance(attrs, dict):
            self.fail("attrs", "want an object")
        err = m.get("error")
        if err is not None:
            if not isinstance(err, dict):
                self.fail("error", "want an object")
            if not isinstance(err.get("text", ""), str):
                self.fail("error", "text: want a string")
            if not isinstance(err.get("exception", ""), str):
                self.fail("error", "exception: want a string")
            if err.get("exit_status") is not None and not _is_int(err.get("exit_status")):
                self.fail("error", "exit_status: want an integer")
        meta = m.get("meta")
        if meta is not None:
            if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
                self.fail("meta", "want an object of strings")
        tensors = m.get("tensors")
        if not isinstance(tensors, list):
            self.fail("tensors", "want an array")
        for key in ("structure", "step", "state"):
            if key in m and getattr(self, "version", FORMAT_VERSION) < 2:
                self.fail(key, "a version 2 key in a version %d file" % self.version)
        names = set()
        total = 0
        for i, e in enumerate(tensors):
            total += self.tensor(e, i, names, samples)
            if total > self.max_size:
                self.fail("tensors", "the storage adds up to more than %d bytes (the size limit)" % self.max_size)
        step = m.get("step")
        if step is not None:
            if not isinstance(step, dict) or set(step) - {"module", "qualname", "file", "cwd"} or \
                    not all(isinstance(step.get(k), str) and step.get(k) for k in ("module", "qualname")):
                self.fail("step", "want an object with module and qualname (and file, cwd)")
        if "state" in m and "structure" not in m:
            self.fail("state", "a state needs the batch's structure")
        if "structure" in m:
            used = set()
            _check_node(self, m["structure"], "structure", samples, names, used)
            in_batch = set(used)
            if "state" in m:
                _check_node(self, m["state"], "state", 0, names, used)
            for e in tensors:
                if e["name"] not in used:
                    self.fail("tensor %r" % e["name"], "in neither the structure nor the state")
                if e["name"] not in in_batch and (e.get("batch_dim") is not None or "pad" in e):
                    self.fail("tensor %r" % e["name"], "a state tensor has no batch axis (batch_dim null)")
        return m

    def tensor(self, e, i, names, samples):
        if not isinstance(e, dict):
            self.fail("tensors[%d]" % i, "want an object")
        name = e.get("name")
        if not isinstance(name, str) or not name:
            self.fail("tensors[%d]" % i, "name: missing or empty")
        where = "tensor %r" % name
        if name in names:
            self.fail(where, "duplicate name")
        names.add(name)
        unknown = set(e) - _TENSOR_KEYS
        if unknown:
            self.fail(where, "unknown keys %s" % ", ".join(sorted(unknown)))
        for key in _TENSOR_REQUIRED:
            if key not in e:
                self.fail(where, "missing key %s" % key)
        dt = e["dtype"]
        if dt not in _DTYPES:
            self.fail(where, "dtype: unknown dtype %s (want one of %s)" % (json.dumps(dt), ", ".join(DTYPES)))
        itemsize = _DTYPES[dt][0]
        shape, strides = e["shape"], e["strides"]
        if not isinstance(shape, list) or len(shape) > MAX_DIMS:
            self.fail(where, "shape: want an array of at most %d integers" % MAX_DIMS)
        if not isinstance(strides, list) or len(strides) != len(shape):
            self.fail(where, "strides: want one integer per dim (%d)" % len(shape))
        numel = 1
        for k, n in enumerate(shape):
            if not _is_int(n) or n < 0:
                self.fail(where, "shape[%d]: %s, want an integer >= 0" % (k, json.dumps(n)))
            numel *= n
            if numel > _INT64_MAX:
                self.fail(where, "shape: %s overflows" % shape)
        for k, s in enumerate(strides):
            if not _is_int(s) or s < 0 or s > _INT64_MAX:
                self.fail(where, "strides[%d]: %s, want an integer >= 0" % (k, json.dumps(s)))
        offset = self.int_field(e, "offset", where)
        elements = self.int_field(e, "storage_elements", where)
        if elements * itemsize > _INT64_MAX:
            self.fail(where, "storage_elements: %d overflows" % elements)
        if "recorded_offset" in e:
            self.int_field(e, "recorded_offset", where)
        if numel > 0:
            last = offset + sum((n - 1) * s for n, s in zip(shape, strides))
            if last > _INT64_MAX or last + 1 > elements:
                self.fail(where, "offset %d and strides %s reach storage element %d, outside the %d stored"
                          % (offset, strides, last, elements))
        bd = e.get("batch_dim")
        if bd is not None:
            if not _is_int(bd) or not 0 <= bd < len(shape):
                self.fail(where, "batch_dim: %s is out of range for %d dims" % (json.dumps(bd), len(shape)))
            if shape[bd] != samples:
                self.fail(where, "batch_dim: size %d along axis %d, but the batch has %d samples"
                          % (shape[bd], bd, samples))
        pad = e.get("pad")
        if pad is not None:
            if getattr(self, "version", FORMAT_VERSION) < 2:
                self.fail(where, "pad: a version 2 key in a version %d file" % self.version)
            if bd is None:
                self.fail(where, "pad: a shared tensor has no samples to pad")
            if not isinstance(pad, dict) or set(pad) != {"dim", "lengths"} or not _is_int(pad["dim"]) or \
                    not 0 <= pad["dim"] < len(shape) or pad["dim"] == bd:
                self.fail(where, "pad: want {dim, lengths}, dim a dim other than the batch axis")
            ls = pad["lengths"]
            if not isinstance(ls, list) or len(ls) != samples or \
                    not all(_is_int(n) and 0 <= n <= shape[pad["dim"]] for n in ls):
                self.fail(where, "pad: lengths: want one length in [0, %d] per sample" % shape[pad["dim"]])
        p = e["payload"]
        if not isinstance(p, dict):
            self.fail(where, "payload: want an object")
        unknown = set(p) - _PAYLOAD_KEYS
        if unknown:
            self.fail(where, "payload: unknown keys %s" % ", ".join(sorted(unknown)))
        for key in ("offset", "length", "compression", "crc32"):
            if key not in p:
                self.fail(where, "payload: missing key %s" % key)
        poff = self.int_field(p, "offset", where + ": payload")
        if poff % ALIGN:
            self.fail(where, "payload: offset %d is not a multiple of %d" % (poff, ALIGN))
        plen = self.int_field(p, "length", where + ": payload")
        self.int_field(p, "crc32", where + ": payload", 0, 0xFFFFFFFF)
        comp = p["compression"]
        if comp not in _COMPRESSIONS:
            self.fail(where, "payload: unknown compression %s (want none or zstd)" % json.dumps(comp))
        if comp == "none" and plen != elements * itemsize:
            self.fail(where, "payload: %d bytes, but %d elements of %s take %d"
                      % (plen, elements, dt, elements * itemsize))
        return elements * itemsize

    def layout(self, m, mlen, p, size):
        spans = sorted((e["payload"]["offset"], e["payload"]["offset"] + e["payload"]["length"], e["name"])
                       for e in m["tensors"])
        prev_end, prev_name = 0, None
        for start, end, name in spans:
            if p + end > size:
                self.fail("tensor %r" % name, "payload: bytes [%d, %d) lie outside the file (%d bytes; truncated?)"
                          % (p + start, p + end, size))
            if start < prev_end:
                self.fail("tensor %r" % name, "payload: overlaps the payload of tensor %r" % prev_name)
            prev_end, prev_name = max(prev_end, end), name
        if spans:
            ends = (p + prev_end,)
        else:  # no payload: the file ends at P (or, read leniently, right after the manifest)
            ends = (p, HEADER_SIZE + mlen)
        if size not in ends:
            if size > ends[0]:
                self.fail("file", "%d trailing bytes after the last payload" % (size - ends[0]))
            self.fail("file", "truncated: %d bytes, want %d" % (size, ends[0]))

    def checked(self, f):
        """(manifest, P) of the open file f, its header, manifest and payloads' places checked."""
        size = os.fstat(f.fileno()).st_size
        mbytes = self.header(f, size)
        m = self.manifest(mbytes)
        p = _align(HEADER_SIZE + len(mbytes))
        self.layout(m, len(mbytes), p, size)
        return m, p

    def payload(self, f, e, p):
        where = "tensor %r" % e["name"]
        pl = e["payload"]
        itemsize = _DTYPES[e["dtype"]][0]
        want = e["storage_elements"] * itemsize
        f.seek(p + pl["offset"])
        buf = bytearray(pl["length"])
        if pl["length"] and f.readinto(buf) != pl["length"]:
            self.fail(where, "payload: truncated")
        got = zlib.crc32(buf) & 0xFFFFFFFF
        if got != pl["crc32"]:
            self.fail(where, "payload: checksum 0x%08x, the manifest says 0x%08x" % (got, pl["crc32"]))
        if pl["compression"] == "zstd":
            buf = self.unzstd(buf, want, where)
        if len(buf) != want:
            self.fail(where, "payload: %d bytes of storage, want %d" % (len(buf), want))
        if e["dtype"] == "bool" and bytes(buf).translate(None, b"\x00\x01"):
            self.fail(where, "payload: a bool element is neither 0 nor 1")
        return buf

    def unzstd(self, data, want, where):
        try:
            import zstandard
        except ImportError:
            self.fail(where, "payload: it is zstd-compressed, and the Python module 'zstandard' is not "
                      "installed: install it (pip install zstandard) or rewrite the file uncompressed "
                      "with `reduce convert`")
        try:
            params = zstandard.get_frame_parameters(bytes(data))
        except zstandard.ZstdError as e:
            self.fail(where, "payload: not a zstd frame: %s" % e)
        if params.content_size == zstandard.CONTENTSIZE_UNKNOWN:
            self.fail(where, "payload: the zstd frame does not declare its decompressed size")
        if params.content_size != want:
            self.fail(where, "payload: the zstd frame declares %d bytes, want %d" % (params.content_size, want))
        if params.window_size > MAX_ZSTD_WINDOW:
            self.fail(where, "payload: zstd window of %d bytes, at most %d are allowed"
                      % (params.window_size, MAX_ZSTD_WINDOW))
        try:
            d = zstandard.ZstdDecompressor(max_window_size=MAX_ZSTD_WINDOW).decompressobj()
            out = d.decompress(bytes(data))
            if not d.eof:
                self.fail(where, "payload: the zstd frame is incomplete")
            if d.unused_data:
                self.fail(where, "payload: %d bytes after the zstd frame" % len(d.unused_data))
        except zstandard.ZstdError as e:
            self.fail(where, "payload: corrupt zstd frame: %s" % e)
        return bytearray(out)


def read_raw(path, max_size=DEFAULT_MAX_SIZE):
    """Read and validate a batch file without torch: (manifest, [storage bytes per tensor])."""
    r = _Reader(os.fspath(path), max_size)
    with open(path, "rb") as f:
        m, p = r.checked(f)
        storages = [r.payload(f, e, p) for e in m["tensors"]]
    return m, storages


def load(path, device="cpu", *, types=None, max_size=DEFAULT_MAX_SIZE):
    """Read a batch file. Every tensor is rebuilt on `device` with torch.as_strided over a storage
    of storage_elements elements: the dtype, shape, strides and (saved) storage offset are the
    recorded ones. Raises BatchFileError (a ValueError) naming the file and the field.

    A file is data: load() imports and calls nothing it names. A named tuple comes back as a
    named tuple of the recorded name and fields made here, a mapping object (a BatchEncoding) as
    a dict, unless `types` holds its class: the classes you trust, as a list
    (types=[MyBatch, BatchEncoding]) or a dict from the "module:qualname" a file records to the
    class; a trusted class is called with the fields (a named tuple) or the dict (a mapping).
    Batch.types says what the file records."""
    torch = _torch()
    m, storages = read_raw(path, max_size)
    device = torch.device(device)
    tensors = {}
    for e, buf in zip(m["tensors"], storages):
        dt = getattr(torch, e["dtype"])
        if e["storage_elements"] == 0:
            st = torch.empty(0, dtype=dt)
        else:
            if sys.byteorder != "little":
                buf = bytearray(_byteswap(buf, _DTYPES[e["dtype"]][0]))
            st = torch.frombuffer(buf, dtype=dt)
        st = st.to(device)
        tensors[e["name"]] = torch.as_strided(st, e["shape"], e["strides"], e["offset"])
    return Batch(os.fspath(path), m, tensors, types)


def _map_source(path):
    """(manifest, [1-D storage tensor per tensor], [each storage's first byte in the file]) of a
    batch file whose payloads are all
    uncompressed, the storages over a private copy-on-write mapping of the file: nothing is read
    until a tensor is, and a step that writes into its batch never reaches the file. The header,
    the manifest and the payloads' places are checked as load() checks them; the payloads'
    checksums were checked by reduce, which made the plan."""
    import mmap

    torch = _torch()
    r = _Reader(os.fspath(path), _INT64_MAX)
    with open(path, "rb") as f:
        m, p = r.checked(f)
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    storages, payloads = [], []
    for e in m["tensors"]:
        payloads.append(p + e["payload"]["offset"])
        dt = getattr(torch, e["dtype"])
        n = e["storage_elements"]
        if e["payload"]["compression"] != "none":
            r.fail("tensor %r" % e["name"], "payload: compressed; a plan's source is uncompressed")
        if n == 0:
            storages.append(torch.empty(0, dtype=dt))
        else:
            storages.append(torch.frombuffer(mm, dtype=dt, count=n, offset=p + e["payload"]["offset"]))
    return m, storages, payloads


def _read_runs(path, at, e, tp, dt):
    """The storage of a plan's tensor whose samples are dense blocks along its batch axis, read
    from the file at path (the recorded storage starts at byte `at`) straight into place: its
    prefix, then each run of kept samples; the rest stays zero."""
    torch = _torch()
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
                    raise BatchFileError("%s: truncated while reading a candidate's samples" % path)
    return st


def _copy_into(storage, dst, src):
    """dst.copy_(src), where dst is a view of storage (a 1-D tensor): a dim dst stores once
    (stride 0, an expanded dim) is copied once, and a dst whose elements share storage in other
    ways (a window view) is written through its storage indices, which copy_ refuses."""
    torch = _torch()
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
    file, without the file. Returns a Batch; `types` as load()'s."""
    import base64

    torch = _torch()
    if sys.byteorder != "little":
        raise BatchFileError("%s: a plan is built on a little-endian host only" % plan["source"])
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
    return Batch(plan["source"], m, tensors, types)


# ---------------------------------------------------------------------------------------------
# The training-loop hook


class record_on_failure(object):
    """Context manager: on an exception in the block, save the batch to `path` with the error,
    then let the exception propagate unchanged. `batch` is what the loader yielded (its CPU copy:
    the device is unusable after a CUDA error), or a zero-argument callable returning it; the
    keyword arguments are save()'s (step=, state=, padded=, ...). The file is always written:
    a leaf that cannot be encoded (a GPU tensor after a device error, a complex tensor, an object)
    is recorded as skipped and named on stderr. Only if writing the file itself fails (a full
    disk), a warning goes to stderr; the original exception is re-raised all the same. After the
    block, `.saved` tells whether a file was written."""

    def __init__(self, path, batch=None, *, tensors=None, **kwargs):
        if "error" in kwargs:
            raise TypeError("record_on_failure: error is the exception raised in the block")
        if batch is None:
            batch = tensors
        self.path = path
        self.batch = batch
        self.kwargs = kwargs
        self.saved = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or not isinstance(exc, Exception):
            return False  # KeyboardInterrupt, SystemExit, GeneratorExit: nothing to record
        if os.environ.get("REDUCE_REPLAY"):
            # Inside one of reduce's replays (a script that trains when its step is imported):
            # recording would write over the very batch being reduced.
            sys.stderr.write("reduce_batch: not recording to %s: this is a replay of reduce's "
                             "(REDUCE_REPLAY is set)\n" % (self.path,))
            return False
        try:
            self._record(exc)
            self.saved = True
            sys.stderr.write("reduce_batch: saved the failing batch to %s\n" % (self.path,))
        except BaseException as e:  # never mask the original exception
            try:
                sys.stderr.write("reduce_batch: warning: could not save the failing batch to %s: %s: %s\n"
                                 % (self.path, type(e).__name__, e))
            except Exception:
                pass
            if not isinstance(e, Exception):
                raise
        return False

    def _record(self, exc):
        batch = self.batch
        if callable(batch) and not hasattr(batch, "__getitem__"):
            try:
                batch = batch()
            except Exception as e:
                _warn("the batch callable raised %s: %s; recording the failure without a batch" % (type(e).__name__, e))
                batch = {}
        try:
            save(self.path, batch, error=exc, _failed=True, **self.kwargs)
        except Exception as e:
            # An argument save() refuses (a bad op name, ...): the crash is still recorded, with
            # the step if it can be, else bare.
            keep = {k: v for k, v in self.kwargs.items() if k in ("step", "sample_ids")}
            _warn("%s: %s; recording the batch with %s only" % (type(e).__name__, e, " and ".join(keep) or "the error"))
            try:
                save(self.path, batch, error=exc, _failed=True, **keep)
            except Exception:
                save(self.path, batch, error=exc, _failed=True)


# ---------------------------------------------------------------------------------------------
# Running a batch: the built-in ops, an --entry function, and the checks of the regression tests
# that reduce generates. reduce's torch backend runs its candidates through these too.


class HarnessError(Exception):
    """A batch could not be run at all (an unreadable file, no op, a bad --entry): a failure of
    the harness, not of the step."""


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
        raise HarnessError("unknown op %r (built-in ops: %s)" % (op, ", ".join(sorted(_OPS))))
    required, optional, aliases, defaults = _OPS[op]
    t = {}
    for name, v in tensors.items():
        canon = aliases.get(name, name)
        if canon not in required and canon not in optional:
            raise HarnessError("%s takes no tensor %r (takes %s)" % (op, name, ", ".join(required + optional)))
        if canon in t:
            raise HarnessError("%s: tensor %r given twice (under an alias)" % (op, canon))
        t[canon] = v
    for name in required:
        if name not in t:
            raise HarnessError("%s: missing tensor %r" % (op, name))
    for name in attrs:
        if name not in defaults:
            raise HarnessError("%s takes no attribute %r (takes %s)" % (op, name, ", ".join(defaults) or "none"))
    a = {}
    for name, default in defaults.items():
        if name in attrs:
            a[name] = attrs[name]
        elif default is _REQUIRED:
            raise HarnessError("%s: missing attribute %r" % (op, name))
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
    raise HarnessError("%s is in the op table but run_op does not run it" % op)


def exception_class(name):
    """For the regression tests reduce generates: the exception class a dotted name
    (torch.cuda.OutOfMemoryError) or a builtin's name names, or None."""
    return _exception_class(name)


def _exception_class(name):
    """The class a dotted name (torch.cuda.OutOfMemoryError) or a builtin's name names, or None."""
    import builtins
    import importlib

    if "." not in name:
        cls = getattr(builtins, name, None)
        return cls if isinstance(cls, type) else None
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part, None)
        return obj if isinstance(obj, type) else None
    return None


def check_exception(e, name, message):
    """For the regression tests reduce generates: assert that exception e is of the class `name`
    (a builtin's name or a dotted path) and carries `message` (None: any), which torch may follow
    with more lines (a C++ backtrace)."""
    why = _failure_mismatch(e, name, message)
    assert why is None, why


def _outputs(out):
    if isinstance(out, dict):
        return dict(out)
    if isinstance(out, (tuple, list)):
        return {"output%d" % i: v for i, v in enumerate(out)}
    return {"output": out}


def check_outputs(out, expected):
    """For the regression tests reduce generates: assert that a step's outputs (a tensor, a
    tuple or list, or a dict of them) match `expected`, fixture.json's boundary outputs: for each,
    name, dtype, shape, and its values (or their sum) within rtol/atol, compared in float64."""
    torch = _torch()
    got = _outputs(out)
    for want in expected:
        name = want["name"]
        assert name in got, "no output %r (got %s)" % (name, sorted(got))
        t = got[name]
        assert isinstance(t, torch.Tensor), "output %r is a %s, not a tensor" % (name, type(t).__name__)
        t = t.detach().cpu()
        assert str(t.dtype).replace("torch.", "") == want["dtype"], "output %r: dtype %s" % (name, t.dtype)
        assert list(t.shape) == want["shape"], "output %r: shape %s" % (name, list(t.shape))
        flat = t.reshape(-1).to(torch.float64)
        if want.get("sum") is not None:
            got_v, want_v = flat.sum(), torch.tensor(want["sum"], dtype=torch.float64)
        else:
            got_v, want_v = flat, torch.tensor(want["values"], dtype=torch.float64)
        torch.testing.assert_close(got_v, want_v, rtol=want["rtol"], atol=want["atol"], equal_nan=True,
                                   msg=lambda m: "output %r: %s" % (name, m))


# The helpers below are for the regression tests reduce generates (internal/regress), which
# write a known failure the pytest way: the minimal batch's test asserts the correct behaviour
# and is marked pytest.mark.xfail(strict=True, raises=<the recorded class>). run_in_child runs a
# batch in a fresh process (a device-side assert leaves the CUDA context unusable) and raises
# the child's exception again here, so that raises= can judge it; summarize and check_result
# describe and check an output, across the process boundary too; failure_matches is
# check_exception's rule without the assert; sample_value, check_sample_rule and check_distinct
# check the samples the user's Dataset yields against the rule reduce found.


def failure_matches(e, name, message=None, pattern=None):
    """For the regression tests reduce generates: whether exception e is the recorded failure.
    True when e is of the class `name` as check_exception judges it (the short name equal, and an
    instance of the class the name resolves to, when it resolves) and its text matches: `message`
    exactly, or as its first line followed by more (a C++ backtrace), when given; else
    re.search(pattern, str(e)) when `pattern` is given; else any text. Asserts nothing."""
    return _failure_mismatch(e, name, message, pattern) is None


def _failure_mismatch(e, name, message=None, pattern=None):
    """Why e is not the failure (failure_matches' rule), or None when it is: the one rule of
    check_exception and failure_matches."""
    short = name.rpartition(".")[2]
    if type(e).__name__ != short:
        return "raised %s: %s; want %s" % (type(e).__name__, e, name)
    cls = _exception_class(name)
    if cls is not None and not isinstance(e, cls):
        return "raised %s, not a %s" % (type(e), name)
    if message is not None:
        text = str(e)
        if text != message and not text.startswith(message + "\n"):
            return "message %r, want %r" % (text, message)
    elif pattern is not None:
        text = str(e)
        if not re.search(pattern, text):
            return "message %r does not match %r" % (text, pattern)
    return None


class DifferentFailure(BaseException):
    """For the regression tests reduce generates: the minimal batch failed otherwise than recorded.
    A real failure, never an expected one: a BaseException, so that no xfail's raises= (not even
    Exception) takes it for the recorded failure."""


def failure_class(name):
    """For the regression tests reduce generates: the class of the recorded failure, the xfail's
    raises=: the class `name` names (a builtin's name or a dotted path), ChildFailure when name is
    None (a crash of a child process). ImportError when the class cannot be imported."""
    if name is None:
        return ChildFailure
    cls = _exception_class(name)
    if cls is None:
        raise ImportError("cannot import the recorded exception class %s (is its module on sys.path?)" % name)
    return cls


def check_same_failure(e, name, message=None, pattern=None):
    """For the regression tests reduce generates: raise DifferentFailure (from e) unless exception
    e is the recorded failure: of the class `name` (None: a ChildFailure, a crash), with `message`
    exactly (failure_matches' rule), else with a text that matches `pattern` (a regular expression,
    searched in the exception's name, message and a child process's stderr together)."""
    text = "%s %s\n%s" % (getattr(e, "name", ""), e, getattr(e, "child_stderr", "") or "")
    if name is None:
        why = None if isinstance(e, ChildFailure) else "raised %s, not a crash of the child" % type(e).__name__
    else:
        why = _failure_mismatch(e, name, message)
    if why is None and message is None and pattern is not None and not re.search(pattern, text, re.S):
        why = "its text does not match %r" % pattern
    if why is not None:
        raise DifferentFailure("the minimal batch fails otherwise than recorded (%s): %s: %s"
                               % (why, type(e).__name__, text.strip())) from e


_SUMMARY_KEYS = frozenset(["path", "dtype", "shape", "finite"])


def summarize(out):
    """For the regression tests reduce generates: a JSON-able description of a step's or an op's
    output, one dict per tensor or Python number found in it, walking dicts and mappings (keys
    sorted), lists, tuples and named tuples (other values are left out): {"path": where it is,
    its keys and positions joined by "." as reduce names a batch's tensors ("" for a bare
    tensor, "0.loss"), "dtype": torch's name ("float32"; "float", "int" or "bool" for a Python
    number), "shape": [...] ([] for a number), "finite": no element is NaN or infinite (True for
    integers and booleans)}."""
    import math

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
                walk(child, "%s.%s" % (path, name) if path else name)

    walk(out, "")
    return found


def _children(x, sort=False):
    """[(name, part)] of a container as _Flattener names a batch's parts: a dict's or a mapping's
    keys (sorted with sort), a named tuple's fields, a list's or a tuple's positions; None for
    anything else (a tensor, an array, a string: a leaf)."""
    torch = _torch()
    if isinstance(x, (torch.Tensor, str, bytes)):
        return None
    if "numpy" in sys.modules and isinstance(x, sys.modules["numpy"].ndarray):
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
    return "output %r" % path if path else "the output"


def check_result(out, like=None):
    """For the regression tests reduce generates: assert that an output (a live one, or its
    summary: run_in_child's result) holds no NaN or infinity, and, when `like` is given (a
    summary, or an output, which is summarized), that it has the same paths, with the same dtypes
    and shapes. Returns the output's summary."""
    got = _summary_of(out)
    for d in got:
        assert d["finite"], "%s (%s%s) is not finite: it holds NaN or an infinity" % (
            _output_name(d["path"]), d["dtype"], list(d["shape"]))
    if like is not None:
        want = _summary_of(like)
        by_path = dict((d["path"], d) for d in got)
        want_paths = set(d["path"] for d in want)
        missing = [d["path"] for d in want if d["path"] not in by_path]
        extra = [d["path"] for d in got if d["path"] not in want_paths]
        diff = []
        if missing:
            diff.append("missing %s" % ", ".join(map(repr, missing)))
        if extra:
            diff.append("unexpected %s" % ", ".join(map(repr, extra)))
        assert not diff, "the output's parts differ: %s" % "; ".join(diff)
        for w in want:
            g = by_path[w["path"]]
            assert (g["dtype"], list(g["shape"])) == (w["dtype"], list(w["shape"])), "%s: %s%s, want %s%s" % (
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
            for part in _sample_parts(child, rest[len(name) + 1:]):
                yield part


def _sample_missing(sample, tensor):
    """Why the sample has nothing named `tensor`: the key missing, and the keys there are."""
    x, done, rest = sample, "", tensor
    while rest:
        children = _children(x)
        where = "the sample" if not done else repr(done)
        if children is None:
            return "%s is a %s, which has no %r" % (where, type(x).__name__, rest)
        if _is_namedtuple(x):
            children = children + [(str(i), v) for i, v in enumerate(x)]
        matched = [(n, c) for n, c in children if rest == n or rest.startswith(n + ".")]
        if not matched:
            names = [n for n, _ in children]
            if isinstance(x, (list, tuple)) and not _is_namedtuple(x):
                has = "%s of %d items" % (type(x).__name__, len(x))
            else:
                has = "keys " + (", ".join(repr(n) for n in names[:20]) + (", ..." if len(names) > 20 else "")
                                 if names else "none")
            return "%s has no %r (it has %s)" % (where, rest.split(".")[0], has)
        name, x = matched[0]
        done, rest = (done + "." + name) if done else name, rest[len(name) + 1:]
    return "no part named %r" % tensor


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
    raise KeyError("batch tensor %r: %s. reduce_sample must return the sample as the Dataset yields it "
                   "(before the collate), with the keys of the batch" % (tensor, _sample_missing(sample, tensor)))


def _is_array(x):
    return isinstance(x, _torch().Tensor) or ("numpy" in sys.modules and isinstance(x, sys.modules["numpy"].ndarray))


def _python_value(x, tensor, index):
    if _is_array(x):
        if tuple(x.shape) != ():
            raise IndexError("batch tensor %r: index %s names a part of shape %s of the sample, not one element: "
                             "give one index per dim (without the batch dim)" % (tensor, index, list(x.shape)))
        return x.item()
    if hasattr(x, "item") and tuple(getattr(x, "shape", (None,))) == ():  # a numpy scalar (np.float64 is a float)
        return x.item()
    if isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError("batch tensor %r: index %s names a %s in the sample, not a number" % (tensor, index, type(x).__name__))


def _sample_element(leaf, tensor, index):
    x = leaf
    for k, i in enumerate(index):
        if _is_array(x):
            rest = [int(j) for j in index[k:]]
            shape = list(x.shape)
            if len(rest) > len(shape) or any(not -n <= j < n for j, n in zip(rest, shape)):
                raise IndexError("batch tensor %r: index %s is outside the sample's %s of shape %s (is the batch's "
                                 "tensor padded past this sample?)" % (tensor, index, type(x).__name__, shape))
            x = x[tuple(rest)]
            break
        if isinstance(x, (list, tuple)):
            if not -len(x) <= i < len(x):
                raise IndexError("batch tensor %r: index %s is outside the sample's list of %d items at dim %d (is the "
                                 "batch's tensor padded past this sample?)" % (tensor, index, len(x), k))
            x = x[i]
            continue
        raise IndexError("batch tensor %r: index %s goes into a %s in the sample" % (tensor, index, type(x).__name__))
    return _python_value(x, tensor, index)


def _sample_size(x, tensor, dim):
    if _is_array(x):
        if not 0 <= dim < len(x.shape):
            raise IndexError("batch tensor %r: the sample's %s of shape %s has no dim %d"
                             % (tensor, type(x).__name__, list(x.shape), dim))
        return int(x.shape[dim])
    if isinstance(x, (str, bytes, list, tuple)):
        if dim == 0:
            return len(x)
        if isinstance(x, (list, tuple)):
            return max([_sample_size(c, tensor, dim - 1) for c in x] or [0])  # the size a collate pads to
    raise IndexError("batch tensor %r: the sample's %s has no size along dim %d" % (tensor, type(x).__name__, dim))


def sample_value(sample, tensor, index, dim=0):
    """For the regression tests reduce generates: the element of one sample, as the user's
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
    head = "sample %r: " % (rule["sample"],) if rule.get("sample") is not None else ""
    what = rule.get("tensor") or "the value"
    if rule.get("kind") == "max_size":
        return "%ssize of %s along dim %d" % (head, what, int(rule.get("dim") or 0))
    if rule.get("index"):
        what = "%s%s" % (what, list(rule["index"]))
    return head + what


def _number(v):
    return "%r" % (v,)


def check_sample_rule(value, rule):
    """For the regression tests reduce generates: assert that one sample's value (sample_value's)
    obeys the rule reduce found for the failure, a dict: {"kind": "range", "lo", "hi",
    "hi_inclusive"} (lo inclusive; lo or hi None: unbounded), {"kind": "finite"}, or {"kind":
    "max_size", "max", "dim"} (value is a size: sample_value with index None and this dim). Its
    optional keys "sample" (the sample's id), "tensor", "index" and "text" (the rule in words)
    go into the message. A "distinct" rule is about several samples: check_distinct."""
    import math

    kind = rule.get("kind")
    if kind == "distinct":
        raise ValueError("a distinct rule is about several samples: check it with check_distinct(values, ids)")
    number = isinstance(value, (int, float))  # a bool too
    if kind == "range":
        lo, hi, hi_inclusive = rule.get("lo"), rule.get("hi"), bool(rule.get("hi_inclusive"))
        want = "a value in %s%s, %s%s" % ("(-inf" if lo is None else "[", "" if lo is None else _number(lo),
                                          "inf)" if hi is None else _number(hi),
                                          "" if hi is None else "]" if hi_inclusive else ")")
        ok = number and value == value and (lo is None or value >= lo) and (
            hi is None or (value <= hi if hi_inclusive else value < hi))
    elif kind == "finite":
        want = "a finite value"
        ok = number and math.isfinite(value)
    elif kind == "max_size":
        want = "at most %d" % rule["max"]
        ok = number and value <= rule["max"]
    else:
        raise ValueError("rule kind %r: want one of %s" % (kind, ", ".join(_RULE_KINDS)))
    found = " (the rule reduce found: %s)" % rule["text"] if rule.get("text") else ""
    assert ok, "%s = %r, want %s%s" % (_rule_subject(rule), value, want, found)


def check_distinct(values, ids):
    """For the regression tests reduce generates: assert that the samples' values (sample_value's,
    one per id of `ids`) all differ (a "distinct" rule); the message names the ids that share a
    value."""
    values, ids = list(values), list(ids)
    if len(values) != len(ids):
        raise ValueError("check_distinct: %d values for %d ids" % (len(values), len(ids)))
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
    assert not shared, "samples share a value, want distinct values: %s" % "; ".join(
        "%s share %r" % (", ".join(repr(i) for i in same), v) for v, same in shared)


def run_fixture(path, op=None, entry=None, seed=None):
    """For the regression tests reduce generates: run the batch file at path in this process as
    reduce replayed it and return the outputs: `seed` (or None) seeds torch first; then the
    --entry function `entry` ("module:function", the working directory on sys.path) is called with
    the Batch, else the batch's op `op`, else the step recorded with the batch (run_step)."""
    torch = _torch()
    if entry is not None and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # The step first: the batch is rebuilt with the classes its import brought (_imported_type).
    fn = resolve_entry(entry) if entry is not None else None
    step = _read_manifest(os.fspath(path)).get("step") if entry is None and op is None else None
    sfn = resolve_step(step) if step else None
    batch = load(path, types=_imported_type)
    if seed is not None:
        torch.manual_seed(seed)
    if fn is not None:
        return fn(batch)
    if op is None:
        if sfn is None:
            raise HarnessError("%s records no step" % batch.path)
        return _call_step(sfn, batch)
    return run_op(op, batch.tensors, batch.attrs)


def check_passing(out, outputs=None):
    """For the regression tests reduce generates: a passing batch's outputs `out` are the recorded
    `outputs` (check_outputs), or, without them, finite (check_result)."""
    if outputs is not None:
        check_outputs(out, outputs)
    else:
        check_result(out)


def fixture_sample(request, how_to):
    """For the regression tests reduce generates: the user's reduce_sample fixture (a function of a
    sample id that returns the sample as the Dataset yields it), or skip the test with `how_to`."""
    import pytest

    try:
        return request.getfixturevalue("reduce_sample")
    except pytest.FixtureLookupError:
        pytest.skip(how_to)


def check_culprit_sample(get, case):
    """For the regression tests reduce generates: the culprit sample get(case["id"]) satisfies the
    rule found for case["tensor"] at case["index"] (check_sample_rule); skipped when the sample does
    not hold that tensor (one the collate makes)."""
    import pytest

    rule = case["rule"]
    try:
        value = sample_value(get(case["id"]), case["tensor"], case["index"], dim=rule.get("dim", 0))
    except KeyError as e:
        pytest.skip(str(e))
    check_sample_rule(value, dict(rule, sample=case["id"], tensor=case["tensor"], index=case["index"]))


def check_culprits_distinct(get, case):
    """For the regression tests reduce generates: the culprit samples case["ids"] hold distinct
    values of case["tensor"] at case["indices"] (check_distinct)."""
    check_distinct([sample_value(get(i), case["tensor"], idx) for i, idx in zip(case["ids"], case["indices"])],
                   case["ids"])


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
    failure that depends on the batch size alone reproduces). On cuda, the caching allocator's memory fraction: what it has reserved so far
    (the CUDA context's first block, the loaded batch) plus nbytes. On the CPU, RLIMIT_DATA:
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
        head = "the child process ended with %s" % name + (": %s" % message if message else "")
        tail = _tail(stderr)
        Exception.__init__(self, head + ("\n--- the end of its stderr ---\n" + tail if tail else
                                         "\n(its stderr is empty)"))


def _tail(text, lines=40, chars=4000):
    out = "\n".join(text.rstrip().splitlines()[-lines:])
    return out if len(out) <= chars else "..." + out[-chars:]


_SUMMARY_LINE = "reduce_batch-summary: "
_TRACEBACK_HEAD = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::(?: (.*))?)?$")
# The child: this very reduce_batch (its folder first on sys.path), the working directory next
# (where an --entry module is, as reduce's replays have it), then _child_replay.
_CHILD_CODE = """import os, sys
sys.path[:0] = [sys.argv[1], os.getcwd()]
import reduce_batch
reduce_batch._child_replay(*sys.argv[2:])
"""


def _child_replay(path, device, entry, device_memory, seed=""):
    """run_in_child's child: replay(path, device, entry) with the limit of --device-memory set
    between the load and the run and the seed of --seed before it, as reduce_replay.replay does;
    then the summary line."""
    batch, fn = _load_candidate(path, device, entry or None)
    if seed:
        _torch().manual_seed(int(seed))
    nbytes = int(device_memory)
    lift = limit_device_memory(device, nbytes) if nbytes > 0 else None
    out = _run_loaded(batch, fn, device)
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

    try:
        cls = _exception_class(name)
    except Exception:
        return None
    if not isinstance(cls, type) or not issubclass(cls, Exception):
        return None
    try:
        e = cls(message)
    except Exception:
        return None
    if str(e) != message and len(message) < 10000:
        try:
            again = cls(ast.literal_eval(message))
            if str(again) == message:
                e = again
        except Exception:
            pass
    return e


def _signal_name(n):
    import signal

    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


def run_in_child(path, device="cpu", entry=None, device_memory=0, timeout=900, seed=None):
    """For the regression tests reduce generates: replay(path, device, entry) in a fresh Python
    process (sys.executable, this reduce_batch, the working directory and environment of this
    one, with CUDA_LAUNCH_BLOCKING=1 and AMD_SERIALIZE_KERNEL=3), with device_memory > 0 limiting
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
    cmd = [sys.executable, "-c", _CHILD_CODE, os.path.dirname(os.path.abspath(__file__)),
           os.path.abspath(os.fspath(path)), str(device), entry or "", str(int(device_memory or 0)),
           "" if seed is None else str(int(seed))]
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", AMD_SERIALIZE_KERNEL="3", REDUCE_REPLAY="1")
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
        raise ChildFailure("timeout", "no end within %s seconds: killed" % timeout, stderr)
    if p.returncode == 0:
        for line in reversed(stdout.splitlines()):
            if line.startswith(_SUMMARY_LINE):
                return json.loads(line[len(_SUMMARY_LINE):])
        raise HarnessError("the child process exited 0 without its summary line (did the step exit the "
                           "process?); its stderr ends:\n%s" % _tail(stderr))
    raise child_failure(p.returncode, stderr)


def child_failure(returncode, stderr):
    """The exception a child process's failure stands for, to raise here: a new exception of the
    class its last traceback names (with child_stderr, and a ChildFailure as its cause),
    HarnessError when reduce_batch could not run the batch, else ChildFailure (a signal, an exit
    status with no traceback, a class that cannot be made here). For the generated tests of a
    command of the user's own (reduce's exec backend) and for run_in_child."""
    failure = _child_exception(stderr)
    if failure is not None:
        name, message = failure
        if name == "reduce_batch.HarnessError":
            return HarnessError("the batch could not run in the child process: %s\n--- the end of its stderr ---\n%s"
                                % (message, _tail(stderr)))
        e = _exception_of(name, message)
        if e is None:
            return ChildFailure(name, message, stderr)
        e.child_stderr = stderr
        e.__cause__ = ChildFailure(name, message, stderr)
        return e
    if returncode < 0:
        return ChildFailure("signal " + _signal_name(-returncode), "", stderr)
    return ChildFailure("exit %d" % returncode, "", stderr)


def resolve_entry(entry):
    """The function of an --entry "module:function": module is a dotted name (imported from the
    working directory or PYTHONPATH) or a path to a .py file, whose folder goes first on sys.path;
    function may be dotted. Raises HarnessError (an import error's traceback is printed to stderr
    first)."""
    import importlib
    import traceback

    mod_name, sep, attr = entry.rpartition(":")
    if not sep or not mod_name or not attr:
        raise HarnessError("--entry %r: want module:function" % entry)
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
                    raise HarnessError("--entry %r: cannot import %s" % (entry, path))
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
    except Exception as e:
        traceback.print_exc()
        raise HarnessError("--entry %r: cannot import %s: %s: %s (sys.path: %s)"
                           % (entry, mod_name, type(e).__name__, e, ", ".join(sys.path)))
    obj = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HarnessError("--entry %r: %s has no attribute %r" % (entry, mod_name, attr))
    if not callable(obj):
        raise HarnessError("--entry %r: %s.%s is not callable" % (entry, mod_name, attr))
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


# Set by reduce's replay worker: step_check(step, target, what) raises HarnessError for a recorded
# step (or class) it does not trust, before resolve_step imports anything for it.
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
            raise HarnessError("the step %s was defined in an interactive session (module __main__ without a "
                               "file): define it in a file" % step.get("qualname"))
        target = "%s:%s" % (_script(step["file"]), step["qualname"])
    else:
        target = "%s:%s" % (step["module"], step["qualname"])
    if step_check is not None:
        step_check(step, target, what)
    try:
        return resolve_entry(target)
    except HarnessError as e:
        why = str(e).replace("--entry %r: " % target, "")
        line = step.get("module") == "__main__" and _runs_at_import(_script(step["file"]))
        if line:
            why += "; the script runs code when imported (line %d): put it under `if __name__ == \"__main__\":`" % line
        raise HarnessError("the recorded %s %s: %s" % (what, target, why.replace("(sys.path: ", "(sys.path tried: ")))


def _call_step(fn, batch):
    """The recorded step's contract: step(batch) with the batch as the loader yielded it, or
    step(batch, state) when a state was recorded (the random generators restored first)."""
    if batch.state is not None:
        batch.state.restore_rng()
        return fn(batch.data, batch.state)
    return fn(batch.data)


def run_step(batch):
    """Run the step a Batch records, as reduce replays it: imported by name (resolve_step), called
    with the batch as the loader yielded it (and the recorded state). The regression tests that
    reduce writes for a recorded step call it."""
    if not batch.step:
        raise HarnessError("%s records no step" % batch.path)
    return _call_step(resolve_step(batch.step), batch)


def _load_candidate(path, device, entry, step=None):
    """(the batch loaded on device (from a file's path, or a plan: load_view), a function of the Batch that runs it) for replay(): the --entry
    function (called with the Batch), else the step (`step`, or the one the file records) called
    as _call_step does, else None for the batch's op. The function is resolved before the batch
    is built, with the classes its import brought (_imported_type). HarnessError when
    the batch cannot run: the entry or step does not resolve, the file does not load, or it
    records no op, no step and no entry is given."""
    plan = path if isinstance(path, dict) else None
    if plan is None:
        path = os.path.abspath(path)
    fn = resolve_entry(entry) if entry else None
    try:
        if fn is None and step is None:  # the file's own step, if it replays one
            m = plan["manifest"] if plan is not None else _read_manifest(path)
            m = json.loads(m) if isinstance(m, (str, bytes)) else m
            step = m.get("step") if not m.get("op") else None
    except (OSError, BatchFileError, KeyError, TypeError) as e:
        raise HarnessError("cannot load the candidate: %s" % e)
    if fn is None and step is not None:
        sfn = resolve_step(step, chdir=True)
        fn = lambda b: _call_step(sfn, b)  # noqa: E731
    try:
        batch = (load(path, device=device, types=_imported_type) if plan is None
                 else load_view(plan, device=device, types=_imported_type))
    except (OSError, BatchFileError, KeyError, TypeError) as e:
        raise HarnessError("cannot load the candidate: %s" % e)
    if fn is None and not batch.op:
        raise HarnessError("%s: the batch records no op and no step: replay it with --entry module:function "
                           "or --backend exec, or record it with step=" % path)
    return batch, fn


def _read_manifest(path):
    """The checked manifest of the batch file at path, without its payloads."""
    with open(path, "rb") as f:
        return _Reader(path, DEFAULT_MAX_SIZE).checked(f)[0]


def _run_loaded(batch, fn, device):
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
    synchronize the device. Returns the output; a
    failure of the step is the exception it raises, HarnessError when the batch cannot run.

    After a device-side assert the process's CUDA context is unusable: run it in a child process
    (the generated regression tests do) and judge the child's exit status and traceback."""
    batch, fn = _load_candidate(path, device, entry, step)
    return _run_loaded(batch, fn, device)


# ---------------------------------------------------------------------------------------------
# PyTorch Lightning: lightning_callback records the failing training batch, lightning_step
# replays it. Lightning (the `lightning` package, or `pytorch_lightning`) is imported only when
# a callback is created: this file still needs nothing but the standard library and torch.
#
# A file written by the callback holds:
#   the batch    as the Trainer handed it to Strategy.batch_to_device: the loader's CPU batch,
#                after the precision plugin and on_before_batch_transfer, before the move (the
#                device copy cannot be read after a device-side assert);
#   the step     reduce_batch:lightning_step, so that `reduce --batch FILE` replays it with no
#                flag (the replay worker imports reduce_batch anyway);
#   the state    "lightning": what lightning_step needs to rebuild the module, namely its class
#                (a step entry: module, qualname, file, cwd, so that a class defined in the
#                training script is imported from its file as resolve_step imports a step),
#                its hyperparameters (save_hyperparameters()), the batch index and the precision;
#                "model" (state=True): the module's state_dict at the crash; "rng": the random
#                generators as they were before the batch was moved.
# The class and hyperparameters live in the state tree rather than in meta because meta holds
# strings only, and hyperparameters are typed values (ints, floats, lists, tensors). The
# optimizer's state is not recorded: the replay stops after backward, as the failures it is
# for (an index out of range, a NaN loss, a shape error) happen in training_step or backward.

_LIGHTNING_PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_lightning_classes = {}  # Callback base classes -> the callback class made from them


def lightning_callback(path="crash.bin", state=True, **save_kwargs):
    """A Lightning Callback (Trainer(callbacks=[reduce_batch.lightning_callback("crash.bin")]))
    that, when training raises, writes the failing training batch to `path`, with the error and a
    step that replays the LightningModule's training_step and backward, then lets the exception
    go on. `reduce --batch crash.bin` needs no other flag when the module can be rebuilt as
    cls(**self.hparams): call self.save_hyperparameters() in its __init__.

    state=True records the module's weights at the crash (state=False: the replay starts from
    the weights its __init__ makes; for a failure that does not depend on them, a smaller file).
    save_kwargs are save()'s (padded=, lengths=, sample_ids=, batch_dims=, meta=, compression=);
    one given as a function is called with the batch when the failure is recorded
    (lengths=lambda batch: batch["lengths"]). Under several processes (DDP) each rank writes its
    own file, PATH with .rankN before the extension. After a failure, `.saved` is the path
    written (None before)."""
    import importlib

    for k in ("step", "error", "batch", "tensors"):
        if k in save_kwargs:
            raise TypeError("lightning_callback: %s is the callback's own to record" % k)
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


class _LightningRecorder(object):
    """The hooks of lightning_callback's Callback."""

    def __init__(self, path, state, save_kwargs):
        self.path, self.record_state, self.save_kwargs = path, bool(state), save_kwargs
        self.saved = None
        self._pending = None   # (batch, rng) handed to batch_to_device, before its batch starts
        self._batch = self._rng = self._batch_idx = None
        self._ended = False    # the current batch's on_train_batch_end has run
        self._strategy = None

    def setup(self, trainer, pl_module, stage=None):
        # A Callback's batch hooks see the batch already on the device; the move is the
        # strategy's batch_to_device, so it is wrapped on this Trainer's strategy to keep a
        # reference to the CPU batch (no copy: the move makes new tensors on the device).
        strategy = trainer.strategy
        if stage not in ("fit", None) or "batch_to_device" in vars(strategy):
            return
        self._pending = self._batch = None  # a batch of an earlier fit is not this one's
        original = strategy.batch_to_device

        def batch_to_device(batch, *args, **kwargs):
            if trainer.training:  # validation batches go through here too
                # The generators before the step, not after the failure (about 40 us a step).
                self._pending = (batch, _rng_state(_torch()))
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

    def on_train_batch_end(self, trainer, pl_module, *rest):
        self._ended = True

    def on_exception(self, trainer, pl_module, exception):
        self.teardown()
        if not isinstance(exception, Exception):
            return  # Ctrl-C, SystemExit: nothing failed
        what = "%s: %s" % (type(exception).__name__, exception)
        if self._batch is None:
            _warn("%s came before any training batch: nothing recorded" % what)
            return
        if not trainer.training:
            _warn("%s came outside training (%s): nothing recorded" % (what, trainer.state.stage))
            return
        if self._ended:
            _warn("%s came after training batch %d had ended (in a hook, the loader, or reported late "
                  "by the device: CUDA_LAUNCH_BLOCKING=1 makes it prompt): recording that batch; reduce "
                  "says so if it does not fail" % (what, self._batch_idx))
        path = os.fspath(self.path)
        if getattr(trainer, "world_size", 1) > 1:
            root, ext = os.path.splitext(path)
            path = "%s.rank%d%s" % (root, trainer.global_rank, ext)
        batch, kwargs = self._batch, {}
        for k, v in self.save_kwargs.items():
            try:
                kwargs[k] = v(batch) if callable(v) and not isinstance(v, type) else v
            except Exception as e:
                _warn("%s=: %s: %s; not recorded" % (k, type(e).__name__, e))
        state = {"lightning": _lightning_info(trainer, pl_module, self._batch_idx)}
        if self.record_state:
            state["model"] = pl_module
        if self._rng is not None:
            state["rng"] = self._rng
        meta = dict(kwargs.pop("meta", None) or {})
        meta.setdefault("lightning_module", _type_path(pl_module))
        rec = record_on_failure(path, batch, step=lightning_step, state=state, meta=meta, **kwargs)
        rec.__exit__(type(exception), exception, exception.__traceback__)
        if rec.saved:
            self.saved = path


def _lightning_info(trainer, pl_module, batch_idx):
    """The state's "lightning" entry, with a warning when the module cannot be rebuilt from it."""
    import inspect

    cls = type(pl_module)
    hparams = dict(getattr(pl_module, "hparams", None) or {})
    info = {"hparams": hparams, "batch_idx": int(batch_idx or 0),
            "precision": str(getattr(trainer, "precision", "32"))}
    problems = []
    try:
        info["module_class"] = _step_entry(cls)
    except ValueError as e:
        problems.append(str(e).replace("step ", "the class ", 1))
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    missing = [p.name for p in params if p.default is p.empty and p.name not in hparams
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing:
        problems.append("its __init__ needs %s, not in self.hparams" % ", ".join(missing))
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        extra = [k for k in hparams if k not in set(p.name for p in params)]
        if extra:
            problems.append("self.hparams has %s, not an argument of its __init__" % ", ".join(extra))
    probe = _Flattener(_torch(), "", None)
    probe.node(hparams)
    if probe.skipped:
        problems.append("hyperparameter %s is a %s, which is not recorded" % probe.skipped[0][:2])
    if problems:
        _warn("the LightningModule %s cannot be rebuilt as cls(**self.hparams): %s. Call "
              "self.save_hyperparameters() in its __init__ (for every argument), or replay the file "
              "with reduce --entry module:function" % (_type_path(cls), "; ".join(problems)))
    return info


def lightning_step(batch, state):
    """The step of a file written by lightning_callback: rebuild the LightningModule as
    cls(**hparams) on the batch's device (with the recorded weights, and the precision's dtype or
    autocast), then run its transfer_batch_to_device and on_after_batch_transfer hooks,
    training_step(batch, batch_idx) and backward of its loss (the tensor returned, or its
    "loss"). Returns the detached loss (None when training_step returned None: Lightning skips
    that batch too). HarnessError when the module cannot be rebuilt."""
    import collections.abc
    import contextlib
    import inspect

    torch = _torch()
    info = (state or {}).get("lightning") or {}
    if not info.get("module_class"):
        raise HarnessError("the file records no LightningModule class it can import (see the warning written "
                           "with it): replay it with --entry module:function")
    cls = resolve_step(info["module_class"], what="LightningModule class")
    hparams = info.get("hparams") or {}
    try:
        module = cls(**hparams)
    except TypeError as e:
        raise HarnessError("cannot rebuild %s as cls(**hparams) with the recorded hyperparameters (%s): %s; call "
                           "self.save_hyperparameters() in its __init__, or replay with --entry module:function"
                           % (cls.__qualname__, ", ".join(sorted(hparams)) or "none", e))
    probe = _Flattener(torch, "", None)
    probe.node(batch)
    device = probe.tensors[0][1].device if probe.tensors else torch.device("cpu")
    precision = str(info.get("precision", "32"))
    kind = precision.split("-")[0]
    dtype = {"16": torch.float16, "bf16": torch.bfloat16, "64": torch.float64}.get(kind)
    true_dtype = dtype is not None and (kind == "64" or precision.endswith("-true"))
    module.to(device)
    if true_dtype:
        module.to(dtype)
    weights = state.get("model")
    if weights:
        kept = {k: v for k, v in weights.items() if v is not None}
        if len(kept) < len(weights):
            _warn("%d of the module's %d recorded tensors could not be read when it failed: they keep the "
                  "values its __init__ gives them" % (len(weights) - len(kept), len(weights)))
        module.load_state_dict(kept, strict=len(kept) == len(weights))
    module.train()
    state.restore_rng()  # building the module drew from the generators: start from the crash's again
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
    return loss.detach()


def _lightning_prepare():
    """Import the installed Lightning packages: reduce's replay worker calls this once before it
    forks a process per candidate, which then finds them imported."""
    import importlib

    for n in _LIGHTNING_PACKAGES:
        try:
            importlib.import_module(n)
        except ImportError:
            pass


lightning_step.zygote_prepare = _lightning_prepare
