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
tensor's dtype, shape, strides and storage offset as recorded.
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
# Command line


def _cmd_info(args):
    """info FILE...: validate batch files and print their manifests."""
    if not args:
        sys.stderr.write("usage: reduce_batch.py info FILE...\n")
        return 2
    status = 0
    for path in args:
        try:
            m, _ = read_raw(path)
        except (OSError, ValueError) as e:
            sys.stderr.write("%s\n" % e)
            status = 1
            continue
        sys.stdout.write(json.dumps(m, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return status


# ---------------------------------------------------------------------------------------------
# The replay worker: the torch backend of `reduce` runs each candidate batch through here, in a
# fresh process of its own (`replay`), or in a child forked from a long-lived parent that has
# imported torch once (`zygote`).

HARNESS_EXIT = 86  # replay.HarnessExitCode: the harness failed, the candidate was never run


class HarnessError(Exception):
    """The worker could not run the candidate at all (unreadable file, no op, bad --entry)."""


# op -> (required tensors, optional tensors, attributes, required attributes); the names are
# PyTorch's, as the Go kernels take them.
_OPS = {
    "cross_entropy": (("input", "target"), ("weight",), ("ignore_index", "reduction", "label_smoothing"), ()),
    "nll_loss": (("input", "target"), ("weight",), ("ignore_index", "reduction"), ()),
    "binary_cross_entropy": (("input", "target"), ("weight",), ("reduction",), ()),
    "embedding": (("input", "weight"), (), ("padding_idx", "scale_grad_by_freq", "sparse"), ()),
    "index_select": (("input", "index"), (), ("dim",), ("dim",)),
    "gather": (("input", "index"), (), ("dim", "sparse_grad"), ("dim",)),
    "scatter_add": (("input", "index", "src"), (), ("dim",), ("dim",)),
    "one_hot": (("tensor",), (), ("num_classes",), ()),
    "index": (("input", "index"), (), ("dim",), ()),
}
_TENSOR_ALIASES = {"one_hot": {"input": "tensor"}}


def _op_args(op, tensors, attrs):
    """Check the batch's tensors and attributes against the op: (tensors, attrs) by canonical name."""
    if op not in _OPS:
        raise HarnessError("unknown op %r (built-in ops: %s)" % (op, ", ".join(sorted(_OPS))))
    required, optional, names, required_attrs = _OPS[op]
    aliases = _TENSOR_ALIASES.get(op, {})
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
        if name not in names:
            raise HarnessError("%s takes no attribute %r (takes %s)" % (op, name, ", ".join(names) or "none"))
    for name in required_attrs:
        if name not in attrs:
            raise HarnessError("%s: missing attribute %r" % (op, name))
    return t, dict(attrs)


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
    # index: input[(slice(None),) * dim + (index,)]
    dim = a.get("dim", 0)
    return t["input"][(slice(None),) * dim + (t["index"],)]


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


def _cwd_on_path():
    # The script's directory is sys.path[0]; the user's project is the working directory.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def resolve_entry(entry):
    """The function of an --entry "module:function": module is a dotted name (imported from the
    working directory or PYTHONPATH) or a path to a .py file; function may be dotted. Raises
    HarnessError (an import error's traceback is printed to stderr first)."""
    import importlib
    import traceback

    mod_name, sep, attr = entry.rpartition(":")
    if not sep or not mod_name or not attr:
        raise HarnessError("--entry %r: want module:function" % entry)
    try:
        if mod_name.endswith(".py") or os.sep in mod_name:
            import importlib.util

            path = os.path.abspath(mod_name)
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
        raise HarnessError("--entry %r: cannot import %s: %s: %s" % (entry, mod_name, type(e).__name__, e))
    obj = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HarnessError("--entry %r: %s has no attribute %r" % (entry, mod_name, attr))
    if not callable(obj):
        raise HarnessError("--entry %r: %s.%s is not callable" % (entry, mod_name, attr))
    return obj


def _summary(out):
    torch = _torch()
    if isinstance(out, torch.Tensor):
        o = out.detach()
        if o.device.type != "cpu":
            o = o.cpu()
        flat = o.reshape(-1)
        first = flat[:4].tolist()
        if o.dtype.is_floating_point or o.dtype.is_complex:
            total = float(flat.double().sum()) if flat.numel() else 0.0
        else:
            total = int(flat.long().sum()) if flat.numel() else 0
        return "%s%s first=%s sum=%r" % (str(o.dtype).replace("torch.", ""), list(o.shape), first, total)
    if isinstance(out, (tuple, list)):
        return "(%s)" % ", ".join(_summary(x) for x in out)
    if isinstance(out, dict):
        return "{%s}" % ", ".join("%s: %s" % (k, _summary(v)) for k, v in out.items())
    text = repr(out)
    return text if len(text) <= 200 else text[:200] + "..."


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
    """Let this process allocate at most `nbytes` more on `device` from now on (--device-memory:
    emulating a device of that size, so that a failure that depends on the batch size alone
    reproduces). On cuda, the caching allocator's memory fraction: what it has reserved so far
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


def replay(path, device="cpu", entry=None, device_memory=0):
    """Run one candidate: load the batch with as_strided on `device`, run its built-in op (or the
    --entry function, called with the Batch), synchronize the device, print a summary line. A
    failure of the candidate is the exception the op raises; HarnessError when it cannot run.
    With device_memory (bytes), the op may allocate that much (limit_device_memory)."""
    torch = _torch()
    fn = resolve_entry(entry) if entry else None
    try:
        batch = load(path, device=device)
    except (OSError, BatchFileError) as e:
        raise HarnessError("cannot load the candidate: %s" % e)
    if fn is None and not batch.op:
        raise HarnessError("%s: the batch records no op (it was recorded for a step of its own): replay "
                           "it with --entry module:function or --backend exec" % path)
    seed = os.environ.get("REDUCE_SEED", "").strip()
    if seed:
        # reduce --seed: the step's random generators start the same in every replay.
        try:
            torch.manual_seed(int(seed))
        except ValueError:
            raise HarnessError("REDUCE_SEED=%r is not an integer" % seed)
    lift = limit_device_memory(device, device_memory) if device_memory and device_memory > 0 else None
    if fn is not None:
        out = fn(batch)
        what = entry
    else:
        out = run_op(batch.op, batch.tensors, batch.attrs)
        what = batch.op
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    if lift is not None:
        lift()
    sys.stdout.write("reduce_batch: ok %s (%s): %s\n" % (what, device, _summary(out)))
    return out


def _check_device(device):
    torch = _torch()
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise HarnessError("--device %r: %s" % (device, e))
    if d.type not in ("cpu", "cuda"):
        raise HarnessError("--device %r: want cpu or cuda[:N]" % device)
    return d


def _cmd_replay(args):
    """replay FILE [--device cpu|cuda[:N]] [--entry MODULE:FUNCTION] [--device-memory BYTES]: run one candidate batch."""
    import argparse

    p = argparse.ArgumentParser(prog="reduce_batch.py replay")
    p.add_argument("file")
    p.add_argument("--device", default="cpu")
    p.add_argument("--entry")
    p.add_argument("--device-memory", type=int, default=0, help="bytes the op may allocate (0: no limit)")
    o = p.parse_args(args)
    _cwd_on_path()
    try:
        _torch()
    except ImportError:
        import traceback

        traceback.print_exc()
        sys.stderr.write("reduce_batch: harness: cannot import torch with %s\n" % sys.executable)
        return HARNESS_EXIT
    try:
        _check_device(o.device)
        replay(o.file, o.device, o.entry, o.device_memory)
    except HarnessError as e:
        sys.stderr.write("reduce_batch: harness: %s\n" % e)
        return HARNESS_EXIT
    return 0  # any other exception propagates: Python prints its traceback and exits 1


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


def _run_candidate(path, device, entry, device_memory=0):
    """replay() in a forked child, ending as the interpreter would end: the exit status and the
    traceback of an uncaught exception, death by SIGINT after a KeyboardInterrupt."""
    import signal

    try:
        replay(path, device, entry, device_memory)
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


_PR_SET_PDEATHSIG = 1


class _Child(object):
    def __init__(self, pid, slot, req_w, status_r):
        self.pid = pid
        self.slot = slot
        self.req_w = req_w
        self.status_r = status_r
        self.id = None  # the request it runs
        self.ready = None  # True/False once it reported its device initialization


class _Zygote(object):
    """The torch backend's zygote. The parent has imported torch (and the --entry module) and
    never touches the device or runs an op: no CUDA context, no thread pool to break in a fork.
    It keeps one pre-forked child per slot, which initializes the device (and, with
    --slot-env, sees only its slot's GPU) and then waits for its one candidate on a pipe.

    Protocol: JSON lines. In (stdin): {"id", "slot", "path", "stdout", "stderr", "run_dir"}.
    Out (stdout): {"event": "hello", "pid", "torch", ...} once; {"event": "ready" |
    "init_error", "slot", "pid"} when a pre-forked child has initialized the device;
    {"event": "start", "id", "pid", "pgid", "slot"} when a request is handed to a child;
    {"event": "exit", "id", "pid", "status", "signal", "core"} when it is reaped (status is
    null when it was killed by a signal); {"event": "error", "id", "error"} for a request that
    could not be handed over. EOF on stdin: every child is killed, and the zygote exits."""

    def __init__(self, device, entry, slots, slot_env, proto_in, proto_out, device_memory=0):
        self.device = device
        self.entry = entry
        self.device_memory = device_memory
        self.slots = slots
        self.slot_env = slot_env
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.pid = os.getpid()
        self.children = {}  # pid -> _Child, until reaped
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
        for slot in range(self.slots):
            self.fork(slot)
        buf = b""
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
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.request(line)

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
                os._exit(code)
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
        data = b""
        while True:
            chunk = os.read(req_r, 1 << 16)
            if not chunk:
                break
            data += chunk
        os.close(req_r)
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
        return _run_candidate(req["path"], self.device, self.entry, self.device_memory)

    def init_device(self):
        torch = _torch()
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
            for key in ("path", "stdout", "stderr"):
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
                os.write(c.req_w, payload)  # a small write into an empty pipe: never blocks
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
            c = self.children.pop(pid, None)
            if c is None:
                continue
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

    p = argparse.ArgumentParser(prog="reduce_batch.py zygote")
    p.add_argument("--device", default="cpu")
    p.add_argument("--entry")
    p.add_argument("--slots", type=int, default=1)
    p.add_argument("--slot-env", default="[]", help="JSON list: the environment of each slot's children")
    p.add_argument("--device-memory", type=int, default=0, help="bytes each candidate's op may allocate (0: no limit)")
    o = p.parse_args(args)
    # The protocol moves off fds 0 and 1, so that nothing else (a print in an imported module, a
    # child before it redirects) can write into it.
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
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
        torch = _torch()
        import torch.nn.functional  # noqa: F401  (what replay() uses, imported once here)
    except BaseException as e:
        traceback.print_exc()
        hello["error"] = "cannot import torch with %s: %s: %s" % (sys.executable, type(e).__name__, e)
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
    if o.entry:
        try:
            resolve_entry(o.entry)  # imported once here; a failure is every child's to report
        except HarnessError as e:
            hello["entry_error"] = str(e)
    if torch.device(o.device).type == "cuda" and torch.cuda.is_initialized():
        hello["warning"] = ("CUDA was initialized in the zygote (by the --entry module's import?): "
                            "forked children cannot use it; pass --no-zygote")
    say(hello)
    return _Zygote(o.device, o.entry, o.slots, slot_env, proto_in, proto_out, o.device_memory).run()


# Subcommands by name.
COMMANDS = {"info": _cmd_info, "replay": _cmd_replay, "zygote": _cmd_zygote}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        sys.stderr.write("usage: reduce_batch.py COMMAND ARGS...\ncommands:\n")
        for name, fn in sorted(COMMANDS.items()):
            sys.stderr.write("  %s\n" % ((fn.__doc__ or name).strip().splitlines()[0],))
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
