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
tensor's dtype, shape, strides and storage offset as recorded. `replay(path, device)` runs a
file's operator (or, with `entry=`, your step) as reduce's torch backend does; the regression
tests that reduce generates call it, `run_op` and the `check_*` helpers.
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
    "check_exception",
    "check_outputs",
    "HarnessError",
]

FORMAT_VERSION = 1
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
     "recorded_offset"])
_TENSOR_REQUIRED = ("name", "dtype", "shape", "strides", "offset", "storage_elements", "payload")
_PAYLOAD_KEYS = frozenset(["offset", "length", "compression", "crc32"])
_ERROR_KEYS = frozenset(["text", "exception", "exit_status"])
_CUDA_ERROR_RE = re.compile(r"CUDA error|device-side assert|HIP error|cudaError|CUBLAS_STATUS|CUDNN_STATUS")
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


def save(path, tensors, *, op=None, attrs=None, batch_dims=None, sample_ids=None, error=None,
         meta=None, provenance=True, compression="none", _failed=False):
    """Write one batch to `path` (atomically: a temporary file, fsync, rename).

    tensors     dict name -> torch.Tensor, by PyTorch's argument names, in the order the step
                takes them. Each is saved with its dtype, shape, strides and storage offset, and
                the span of its storage the view reaches (not a contiguous copy). A GPU tensor
                is copied to the CPU, which is impossible after a device-side assert: pass the
                CPU copy of the batch.
    op, attrs   a built-in operator (cross_entropy, nll_loss, embedding, ...) and its keyword
                arguments; leave op out when the batch is replayed with your own command.
    batch_dims  dict name -> batch axis, or None for a tensor shared by all samples (an
                embedding table, class weights); a tensor not named is batched along axis 0
                (a 0-d tensor is shared).
    sample_ids  one id per sample (ints are written as strings).
    error       the failure: an exception, its text, or a dict {text, exception, exit_status}.
    meta        provenance of your own (str values). With provenance=True (the default) the
                torch, cuda/hip, python, git, device, host and recorded_at keys are filled in;
                meta overrides them, and a None value drops one. provenance=False writes meta
                alone, so that the same arguments give the same bytes.
    compression "none" (the default) or "zstd" (needs the zstandard module).
    """
    torch = _torch()
    if compression not in _COMPRESSIONS:
        raise ValueError("compression: %r, want one of %s" % (compression, ", ".join(_COMPRESSIONS)))
    items = _tensor_items(torch, tensors)
    for name, t in items:
        if not isinstance(t, torch.Tensor):
            raise TypeError("tensor %r: want a torch.Tensor, got %s" % (name, type(t).__name__))
    axes = _batch_axes(items, batch_dims)

    samples = None
    first = None
    for name, t in items:
        d = axes[name]
        if d is None:
            continue
        n = int(t.shape[d])
        if samples is None:
            samples, first = n, name
        elif n != samples:
            raise ValueError("tensor %r: %d samples along batch axis %d, but tensor %r has %d; mark a "
                             "shared tensor with batch_dims={%r: None}" % (name, n, d, first, samples, name))
    ids = None
    if sample_ids is not None:
        ids = [_clean_str(s if isinstance(s, str) else str(s)) for s in sample_ids]
        if samples is None:
            samples = len(ids)
        elif len(ids) != samples:
            raise ValueError("sample_ids: %d ids for %d samples" % (len(ids), samples))
    if samples is None:
        samples = 0

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

    entries, blobs = [], []
    cursor = 0
    for name, t in items:
        entry, blob = _encode_tensor(torch, name, t, axes[name], compression)
        cursor = _align(cursor)
        entry["payload"]["offset"] = cursor
        cursor += entry["payload"]["length"]
        entries.append(entry)
        blobs.append(blob)
    manifest["tensors"] = entries

    mbytes = encode_manifest(manifest)
    if len(mbytes) > MAX_MANIFEST:
        raise ValueError("manifest: %d bytes, at most %d are allowed" % (len(mbytes), MAX_MANIFEST))
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(mbytes), zlib.crc32(mbytes) & 0xFFFFFFFF, 0)
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
    return path


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
    manifest         the manifest as read
    """

    def __init__(self, path, manifest, tensors):
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

    def __repr__(self):
        parts = ["%s %s%s" % (n, str(t.dtype).replace("torch.", ""), list(t.shape))
                 for n, t in self.tensors.items()]
        return "<Batch %s: %d samples, op=%r, tensors: %s>" % (self.path, self.samples, self.op, ", ".join(parts))


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
        if version != FORMAT_VERSION:
            self.fail("version", "%d, this reader reads version %d" % (version, FORMAT_VERSION))
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
        names = set()
        total = 0
        for i, e in enumerate(tensors):
            total += self.tensor(e, i, names, samples)
            if total > self.max_size:
                self.fail("tensors", "the storage adds up to more than %d bytes (the size limit)" % self.max_size)
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
        size = os.fstat(f.fileno()).st_size
        mbytes = r.header(f, size)
        m = r.manifest(mbytes)
        p = _align(HEADER_SIZE + len(mbytes))
        r.layout(m, len(mbytes), p, size)
        storages = [r.payload(f, e, p) for e in m["tensors"]]
    return m, storages


def load(path, device="cpu", *, max_size=DEFAULT_MAX_SIZE):
    """Read a batch file. Every tensor is rebuilt on `device` with torch.as_strided over a storage
    of storage_elements elements: the dtype, shape, strides and (saved) storage offset are the
    recorded ones. Raises BatchFileError (a ValueError) naming the file and the field."""
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
    return Batch(os.fspath(path), m, tensors)


# ---------------------------------------------------------------------------------------------
# The training-loop hook


def _is_device_error(exc):
    try:
        text = "%s: %s" % (type(exc).__name__, exc)
    except Exception:
        return False
    return bool(_CUDA_ERROR_RE.search(text)) or "AcceleratorError" in type(exc).__name__


class record_on_failure(object):
    """Context manager: on an exception in the block, save the batch to `path` with the error,
    then let the exception propagate unchanged. `tensors` is a dict (CPU tensors: the device is
    unusable after a CUDA error) or a zero-argument callable returning one; the keyword arguments
    are save()'s. If saving fails, a warning goes to stderr and the original exception is
    re-raised all the same. After the block, `.saved` tells whether a file was written."""

    def __init__(self, path, tensors, **kwargs):
        if "error" in kwargs:
            raise TypeError("record_on_failure: error is the exception raised in the block")
        self.path = path
        self.tensors = tensors
        self.kwargs = kwargs
        self.saved = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or not isinstance(exc, Exception):
            return False  # KeyboardInterrupt, SystemExit, GeneratorExit: nothing to record
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
        torch = _torch()
        tensors = self.tensors() if callable(self.tensors) else self.tensors
        if _is_device_error(exc):
            items = list(tensors.items()) if hasattr(tensors, "items") else list(tensors)
            for name, t in items:
                if isinstance(t, torch.Tensor) and t.device.type != "cpu":
                    raise RuntimeError(
                        "tensor %r is on %s, and after a device error its memory cannot be read: pass "
                        "the CPU copy of the batch (keep it before .to(device))" % (name, t.device))
        save(self.path, tensors, error=exc, _failed=True, **self.kwargs)


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
    short = name.rpartition(".")[2]
    assert type(e).__name__ == short, "raised %s: %s; want %s" % (type(e).__name__, e, name)
    cls = _exception_class(name)
    if cls is not None:
        assert isinstance(e, cls), "raised %s, not a %s" % (type(e), name)
    if message is not None:
        text = str(e)
        assert text == message or text.startswith(message + "\n"), "message %r, want %r" % (text, message)


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



def _load_candidate(path, device, entry):
    """(the batch loaded on device, the --entry function or None) for replay(); HarnessError when
    the batch cannot run: the entry does not resolve, the file does not load, or it records no op
    and no entry is given."""
    fn = resolve_entry(entry) if entry else None
    try:
        batch = load(path, device=device)
    except (OSError, BatchFileError) as e:
        raise HarnessError("cannot load the candidate: %s" % e)
    if fn is None and not batch.op:
        raise HarnessError("%s: the batch records no op (it was recorded for a step of its own): replay "
                           "it with --entry module:function or --backend exec" % path)
    return batch, fn


def _run_loaded(batch, fn, device):
    """Run the batch's op (or fn, called with the batch), then wait for the device: a CUDA
    kernel's failure is reported asynchronously, so it must surface here, not later."""
    torch = _torch()
    out = fn(batch) if fn is not None else run_op(batch.op, batch.tensors, batch.attrs)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return out


def replay(path, device="cpu", entry=None):
    """Run a batch file as reduce's torch backend does: load it on `device` (its tensors rebuilt
    with as_strided), run its op through run_op, or the function of `entry` ("module:function",
    see resolve_entry) called with the Batch, and synchronize the device. Returns the output; a
    failure of the step is the exception it raises, HarnessError when the batch cannot run.

    After a device-side assert the process's CUDA context is unusable: run it in a child process
    (the generated regression tests do) and judge the child's exit status and traceback."""
    batch, fn = _load_candidate(path, device, entry)
    return _run_loaded(batch, fn, device)
