"""Record a failing PyTorch batch for `reduce` (record_on_failure, save) and read it back (load):
`reduce recorder` prints this file. reduce's README, "Recording a batch", and docs/FORMAT.md."""

import contextlib
import importlib.util
import json
import keyword
import math
import os
import platform
import re
import socket
import struct
import subprocess
import sys
import time
import zlib

__version__ = "0.21.0"  # reduce's version (replay.Version), which printed this file
__all__ = ["DTYPES", "FORMAT_VERSION", "Batch", "BatchFileError", "State", "load", "read_manifest", "read_raw",
           "record_on_failure", "save"]
FORMAT_VERSION = 3  # reads 1 to 3; writes 1 for a flat dict of tensors without step, state or padding, 3 for a window
MAGIC = b"RDCBATCH"
_HEADER = struct.Struct("<8sIIQII")  # magic, version, flags, manifest_length, manifest_crc32, reserved
HEADER_SIZE, ALIGN, MAX_MANIFEST, DEFAULT_MAX_SIZE, MAX_DIMS = _HEADER.size, 64, 64 << 20, 4 << 30, 64  # HEADER_SIZE 32
MAX_DEPTH = 100  # docs/FORMAT.md: containers nested in a structure; the recorder skips a deeper part
_MAX_LEAF = 1 << 20  # the recorder skips a string leaf (or drops sample ids) longer than this
_MAX_TEXT = 1 << 16  # and cuts an error text to this many characters
MAX_ZSTD_WINDOW = 1 << 27  # the largest zstd window a reader accepts (libzstd's default limit)
_OFFSET_BYTES = 4096  # docs/FORMAT.md: saved storage offsets stay below 4096 bytes' worth of elements
_INT64_MAX, _ERROR_KEYS = (1 << 63) - 1, frozenset(["text", "exception", "exit_status"])
_DTYPES = {"bool": (1, "uint8"), "uint8": (1, "uint8"), "int8": (1, "int8"), "int16": (2, "int16"),
           "int32": (4, "int32"), "int64": (8, "int64"), "float16": (2, "int16"), "bfloat16": (2, "int16"),
           "float32": (4, "int32"), "float64": (8, "int64")}  # name -> (itemsize, same-size int dtype to move bytes)
DTYPES, _CONTAINERS = tuple(_DTYPES), ("dict", "list", "tuple", "namedtuple", "mapping")
_COMPRESSIONS, _PAYLOAD_KEYS = ("none", "zstd"), ("offset", "length", "compression", "crc32")
_TENSOR_REQUIRED = ("name", "dtype", "shape", "strides", "offset", "storage_elements", "payload")
_TENSOR_KEYS = frozenset(_TENSOR_REQUIRED + ("batch_dim", "recorded_offset", "pad"))
_TOP_KEYS = frozenset(["samples", "sample_ids", "op", "attrs", "error", "meta", "tensors", "structure", "step", "state",
                      "window"])
MAX_JSON_DEPTH, MAX_TREE_VALUES = 512, 100_000  # docs/FORMAT.md: the manifest's nesting, its trees' JSON values
_QUALNAME_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", re.ASCII)
_CLASS_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", re.ASCII)
_EXCEPTION_NAME_RE = re.compile(
    r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:Error|Exception|Warning|Exit|Interrupt)):")
_SCALARS = (str, int, float, bool, type(None))
_ID_KEYS = ("id", "ids", "sample_id", "sample_ids", "uid", "uids", "idx", "index", "key", "keys")
_NODE_KEYS = {"tensor": {"name"}, "list": {"items"}, "tuple": {"items"}, "dict": {"keys", "items"},
              "namedtuple": {"keys", "items", "type"}, "mapping": {"keys", "items", "type"},
              "samples": {"values", "tuple"}, "value": {"value"}, "skipped": {"type", "reason"}}
_made = {}  # ("module:qualname", fields) -> the named tuple class made for it
_SURROGATE_RE, _GIT = re.compile("[\ud800-\udfff]"), {}  # _GIT: the git revision of each directory a file was saved in
class BatchFileError(ValueError):
    """A batch file that breaks docs/FORMAT.md; the message names the file and the field."""
def _torch(): return importlib.import_module("torch")  # imported on first use: importing this module stays cheap
def warn(msg):
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"reduce_batch: {msg}\n")
def _clean_str(s): return _SURROGATE_RE.sub("\ufffd", s)  # a lone surrogate is no UTF-8: U+FFFD, as Go writes it
def encode_manifest(obj):  # the manifest's canonical bytes (docs/FORMAT.md): compact ASCII JSON, sorted keys
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("ascii")
def _align(n): return (n + ALIGN - 1) // ALIGN * ALIGN
def _is_int(v): return isinstance(v, int) and not isinstance(v, bool)
def _is_i64(v): return _is_int(v) and -(1 << 63) <= v <= _INT64_MAX
def _tf(name): return "tensor " + json.dumps(name, ensure_ascii=False)  # a tensor in messages, as Go names it
def _need(ok, exc, msg, *args):  # raise exc(msg % args) unless ok: a writer's check of its arguments, on one line
    if not ok:
        raise exc(msg % args if args else msg)
def saved_offset(recorded_offset, itemsize):
    """(the offset written, the first storage element saved) of a view at recorded_offset (FORMAT.md)."""
    offset = recorded_offset if recorded_offset < (a := _OFFSET_BYTES // itemsize) else a + recorded_offset % a
    return offset, recorded_offset - offset
def _encode_tensor(torch, name, t, batch_dim, compression):
    """(entry, bytes) of t: the storage from the first element FORMAT.md saves to the last it reaches, little-endian."""
    where, dtname, data = f"tensor {name!r}", str(t.dtype).replace("torch.", ""), b""
    _need(t.dim() <= MAX_DIMS, ValueError, "%s: %d dims, at most %d are supported", where, t.dim(), MAX_DIMS)
    t, (itemsize, raw_name) = t.detach().resolve_neg(), _DTYPES[dtname]
    shape, strides, recorded = [int(n) for n in t.shape], [int(s) for s in t.stride()], int(t.storage_offset())
    _need(all(s >= 0 for s in strides), ValueError, "%s: negative strides %s are not supported", where, strides)
    offset, start = saved_offset(recorded, itemsize)
    # An empty view keeps the prefix up to its offset; what lies past the storage's end is written as zeros.
    elements = (recorded + 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if t.numel() > 0 else recorded) - start
    have = elements  # what the storage holds of them: torch 2's untyped_storage, torch 1.13's _storage
    with contextlib.suppress(AttributeError, RuntimeError, TypeError):
        nbytes = (t.untyped_storage() if hasattr(t, "untyped_storage") else t._storage()).nbytes()
        have = max(0, min(elements, nbytes // itemsize - start))
    try:
        if have > 0:
            raw = torch.as_strided(t, (have,), (1,), start).view(getattr(torch, raw_name)).cpu().contiguous()
            if sys.byteorder != "little" and itemsize > 1:
                raw = raw.view(torch.uint8).view(-1, itemsize).flip(1).contiguous()
            try:  # numpy, where it is there
                data = memoryview(raw.numpy().view("uint8"))
            except (ImportError, RuntimeError, TypeError):
                data = importlib.import_module("ctypes").string_at(raw.data_ptr(), have * itemsize)
    except Exception as e:
        _need(t.device.type == "cpu", RuntimeError, "%s: cannot copy it from %s (%s: %s); after a CUDA error (a "
              "device-side assert) the GPU memory cannot be read: keep a CPU copy of the batch and pass that", where,
              t.device, type(e).__name__, e)
        raise
    data = bytes(data) + bytes((elements - have) * itemsize) if have < elements else data
    if compression == "zstd":
        _need(importlib.util.find_spec("zstandard"), RuntimeError, "compression 'zstd' needs the Python module "
              "'zstandard' (pip install zstandard); write with compression='none' instead")
        zc = importlib.import_module("zstandard").ZstdCompressor(level=3, write_content_size=True)
        data = zc.compress(bytes(data))
    payload = {"offset": 0, "length": len(data), "compression": compression, "crc32": zlib.crc32(data) & 0xFFFFFFFF}
    entry = {"name": name, "dtype": dtname, "shape": shape, "strides": strides, "offset": offset,
             "batch_dim": batch_dim, "storage_elements": elements, "payload": payload}
    return (dict(entry, recorded_offset=recorded) if recorded != offset else entry), data  # as docs/FORMAT.md says
def _attr_value(v, where):
    if v is None or isinstance(v, (bool, str, int, float)):
        _need(not isinstance(v, float) or math.isfinite(v), ValueError, "%s: %r cannot be written as JSON", where, v)
        return _clean_str(v) if isinstance(v, str) else int(v) if _is_int(v) else v
    if isinstance(v, (list, tuple)):
        return [_attr_value(x, where) for x in v]
    if hasattr(v, "tolist") and hasattr(v, "shape"):  # numpy and torch scalars, small arrays and tensors
        return _attr_value(v.tolist(), where)
    raise TypeError(f"{where}: {v!r} is not a JSON number, string, boolean, null or array of those")
def _error_entry(error):
    if isinstance(error, BaseException):
        name = type(error).__name__
        try:
            msg = str(error)
        except Exception:  # noqa: BLE001  (whatever a broken __str__ raises)
            msg = f"<unprintable {name}>"
        lines = [ln for ln in (f"{name}: {msg}" if msg else name).splitlines() if ln.strip()]
        out = {"text": lines[0].rstrip() if lines else name, "exception": name,  # the status the interpreter exits
               "exit_status": (error.code if _is_int(error.code) else None) if isinstance(error, SystemExit) else 1}
    elif isinstance(error, str):
        m = _EXCEPTION_NAME_RE.match(error)
        out = {"text": error.rstrip("\r\n"), "exception": m.group(1).rsplit(".", 1)[-1] if m else None}
    elif isinstance(error, dict):
        _need(not set(error) - _ERROR_KEYS, ValueError, "error: unknown keys %s (want text, exception, exit_status)",
              sorted(set(error) - _ERROR_KEYS))
        out = dict(error, text=error.get("text"))
        for k, typ, want in (("text", str, "a string"), ("exception", str, "a string"), ("exit_status", int, "an int")):
            v = out.get(k)  # None: left out, but for text
            _need(isinstance(v, typ) and not isinstance(v, bool) or v is None and k != "text", TypeError,
                  "error: %r must be %s", k, want)
    else:
        raise TypeError(f"error: want a str, an exception or a dict, got {type(error).__name__}")
    t = out["text"]  # None drops a key but text, and an empty exception goes too, as with Go's omitempty
    out["text"] = t if len(t) <= _MAX_TEXT else f"{t[:_MAX_TEXT]} [cut: {len(t) - _MAX_TEXT} more characters]"
    return {k: (_clean_str(v) if isinstance(v, str) else v) for k, v in out.items()
            if k == "text" or v is not None and (k != "exception" or v != "")}
def _provenance(torch, items, failed=False):
    meta = {"torch": str(torch.__version__), "python": platform.python_version(), "device": "cpu",
            "executable": sys.executable,  # the user's interpreter: reduce replays the step with it
            "host": socket.gethostname(), "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with contextlib.suppress(Exception):  # the GPU the step ran on, when one can still be named
        cuda = next((t.device for _, t in items if isinstance(t, torch.Tensor) and t.device.type == "cuda"), None)
        if cuda is not None or failed and torch.cuda.is_initialized():  # a query, launching nothing on a failed GPU
            meta["device"] = torch.cuda.get_device_name(torch.cuda.current_device() if cuda is None else cuda)
    meta.update((k, str(v)) for k in ("cuda", "hip") for v in [getattr(getattr(torch, "version", None), k, None)] if v)
    if (dyn := sys.modules.get("torch._dynamo.utils")) and dyn.counters["stats"].get("unique_graphs"):  # torch.compile
        meta["compiled"] = "inductor" if dyn.counters["inductor"] else "1"  # Inductor counts its work, others do not
    if (cwd := os.getcwd()) not in _GIT:  # asked once a directory (keep="disk" saves before every step)
        _GIT[cwd] = None
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            rev = subprocess.check_output(["git", "rev-parse", "HEAD"], stderr=subprocess.DEVNULL,
                                          stdin=subprocess.DEVNULL, timeout=2).decode("ascii", "replace").strip()
            _GIT[cwd] = rev if re.match(r"^[0-9a-f]{40,64}$", rev) else None
    return dict(meta, git=_GIT[cwd])
def _axes(items, batch_dims, lenient, notes, samples=None):
    """(name -> batch axis or None, sample count); a tensor that disagrees raises, or, lenient, is noted as shared."""
    batch_dims, names, axes, first = dict(batch_dims or {}), sorted(n for n, _ in items), {}, None
    for k in batch_dims:
        _need(k in names, ValueError, "batch_dims: no tensor named %r (tensors: %s)", k, ", ".join(names))
    for name, t in items:
        d = batch_dims.get(name, 0 if t.dim() > 0 else None)  # a 0-d tensor has no axis to batch along
        if d is not None:
            _need(_is_int(d), TypeError, "batch_dims[%r]: want an int or None, got %r", name, d)
            _need(-t.dim() <= d < t.dim(), ValueError, "batch_dims[%r]: axis %r is out of range for a %d-dim tensor",
                  name, d, t.dim())
        axes[name] = d + t.dim() if d is not None and d < 0 else d
    for name, t in [x for x in items if axes[x[0]] is not None]:
        d, n = axes[name], int(t.shape[axes[name]])
        if samples is None:
            samples, first = n, name
        elif n != samples:
            _need(lenient, ValueError, "tensor %r: %d samples along batch axis %d, but %s %d; mark a shared tensor "
                  "with batch_dims={%r: None}", name, n, d, f"tensor {first!r} has" if first else "the batch has",
                  samples, name)
            axes[name] = None
            notes.append(f"{name}: recorded as shared: {n} along axis {d}, the batch has {samples} samples")
    return axes, samples
def _pads(items, axes, samples, padded, lengths):
    _need(lengths is not None, ValueError, "padded: give lengths=, one length per sample along the padded dims")
    lengths = [int(n) for n in (lengths.tolist() if hasattr(lengths, "tolist") else lengths)]
    _need(len(lengths) == samples, ValueError, "lengths: %d lengths for %d samples", len(lengths), samples)
    tensors, out = dict(items), {}
    for name, d in dict(padded).items():
        _need(name in tensors, ValueError, "padded: no tensor named %r (tensors: %s)", name, ", ".join(sorted(tensors)))
        _need(_is_int(d), TypeError, "padded[%r]: want a dim (an int), got %r", name, d)
        t, d = tensors[name], d + tensors[name].dim() if d < 0 else d
        _need(axes[name] is not None and 0 <= d < t.dim() and d != axes[name], ValueError,
              "padded[%r]: dim %r is not a dim of this batched tensor other than its batch axis", name, padded[name])
        long = [n for n in lengths if not 0 <= n <= t.shape[d]] + [0]
        _need(len(long) == 1, ValueError, "padded[%r]: length %d outside [0, %d], the padded size", name, long[0],
              t.shape[d])
        out[name] = {"dim": d, "lengths": lengths}
    return out
@contextlib.contextmanager
def _noted(lenient, notes, note, excs=Exception):  # lenient: an exception in the block is a note, not raised
    try:
        yield
    except excs as e:
        if not lenient:
            raise
        notes.append(note.format(e=e, t=type(e).__name__))
def save(path, batch=None, *, op=None, attrs=None, batch_dims=None, sample_ids=None, error=None,
         meta=None, step=None, state=None, padded=None, lengths=None, provenance=True,
         compression="none", tensors=None, _failed=False, _window=None):
    """Write one batch to `path` atomically: `batch` as the loader yields it (tensors batched along axis 0 unless
    batch_dims says otherwise), with op and attrs or the step, state, error and meta: README, "Recording a batch"."""
    torch, lenient = _torch(), bool(_failed)  # lenient (recording a crash): what cannot be encoded is noted
    _need(batch is None or tensors is None, TypeError, "save: give the batch once (batch or tensors=)")
    batch = tensors if batch is None else batch
    _need(batch is not None and (lenient or not isinstance(batch, (dict, list, tuple)) or len(batch) > 0), ValueError,
          "no batch to save (it is empty)")
    _need(compression in _COMPRESSIONS, ValueError, "compression: %r, want one of %s", compression,
          ", ".join(_COMPRESSIONS))
    fl = Flattener(torch, "", _count_samples(torch, batch, batch_dims, sample_ids))
    tree, items = fl.node(batch), fl.tensors
    notes = [f"skipped {p}: {r} ({t})" for p, t, r in fl.skipped] + fl.notes  # for stderr: what was left out, why
    flat = (type(batch) is dict and batch and all(isinstance(k, str) and k for k in batch) and not fl.skipped
            and all(isinstance(v, torch.Tensor) for v in batch.values()) and step is None and state is None
            and _window is None)  # a dict of tensors by name is written as version 1 wrote it, without a structure
    # The count, where a tensor is batched; a flat batch's tensors are compared with one another.
    batched = any(batch_dims is None or batch_dims.get(n, 0) is not None for n, t in items if t.dim() > 0)
    axes, samples = _axes(items, batch_dims, lenient, notes, None if flat or not batched else fl.samples)
    if not flat:
        samples = fl.samples if samples is None else samples
        sample_ids = _ids_of(fl, samples, sample_ids)
    ids = None if sample_ids is None else [_clean_str(s if isinstance(s, str) else str(s)) for s in (
        sample_ids.tolist() if hasattr(sample_ids, "tolist") else sample_ids)]
    samples = len(ids) if samples is None and ids is not None else samples or 0
    long, size = max(map(len, ids or [""])) > _MAX_LEAF, len(encode_manifest(ids)) if ids else 0  # one part
    why = (f"an id over {_MAX_LEAF} characters" if long else f"{_size(size)} of JSON, more than a manifest "
           "holds (64 MiB)" if size > MAX_MANIFEST else f"{len(ids or ())} ids for {samples} samples")
    if ids is not None and (len(ids) != samples or long or size > MAX_MANIFEST):  # dropped alone, and named
        _need(lenient, ValueError, "sample_ids: %s", why)
        notes.append(f"sample_ids: {why}: not recorded")
        ids = None
    pads, state_items = {}, []
    with _noted(lenient, notes, "padded: {e}: the batch is reduced without re-padding", (TypeError, ValueError)):
        pads = _pads(items, axes, samples, padded, lengths) if padded else {}
    _need(op is None or isinstance(op, str), TypeError, "op: want a string, got %s", type(op).__name__)
    for k, v in (dict(attrs or {}), attrs := {})[0].items():  # lenient: an attribute JSON cannot hold is noted
        with _noted(lenient, notes, "{e}: not recorded", (TypeError, ValueError)):
            attrs[_clean_str(str(k))] = _attr_value(v, f"attrs[{k!r}]")
    manifest = {"samples": samples, "sample_ids": ids or None, "op": _clean_str(op) if op else None, "attrs": attrs,
                "error": None if error is None else _error_entry(error), "structure": None if flat else tree}
    manifest = {k: v for k, v in manifest.items() if v not in (None, {})}  # what is not given is left out
    if step is not None:
        with _noted(lenient, notes, "step: not recorded: {e}", ValueError):
            manifest["step"] = {k: _clean_str(v) for k, v in step_entry(step).items()}  # no text in a path
    if state is not None:
        with _noted(lenient, notes, "state: not recorded: {t}: {e}"):
            _need(isinstance(state, dict), TypeError, "state: want a dict name -> model, optimizer, ... or state_dict, "
                  "such as state={\"model\": model, \"optimizer\": optimizer}; got %s", type(state).__name__)
            values = {str(k): (v.state_dict() if callable(getattr(v, "state_dict", None)) else v)
                      for k, v in state.items()}
            values.setdefault("rng", rng_state(torch))
            sfl = Flattener(torch, "state.", None, fl.names)
            manifest["state"], state_items = sfl.node(values), sfl.tensors
            notes.extend(f"skipped state.{p}: {r} ({t})" for p, t, r in sfl.skipped)
    window_items = []  # (name, t, axis, compression, False); _window: (failed index, [(index, batch, ids)])
    for k, (index, wbatch, wids) in enumerate(_window[2] if _window else ()):
        wfl = Flattener(torch, f"window.{k}.", _count_samples(torch, wbatch, batch_dims, wids), fl.names)
        node, n = wfl.node(wbatch), wfl.samples
        mine = {nm for nm, _ in wfl.tensors}  # batch_dims by the batch's names, for this step's tensors
        dims = {f"window.{k}.{a}": d for a, d in (batch_dims or {}).items() if f"window.{k}.{a}" in mine}
        wax, wids = _axes(wfl.tensors, dims, True, notes, n)[0], _ids_of(wfl, n, wids)
        manifest.setdefault("window", {"failed": _window[0], "start": _window[1], "steps": []})["steps"].append(dict(
            {"index": index, "samples": n, "structure": node},
            **({"sample_ids": [_clean_str(str(i)) for i in wids]} if wids is not None and len(wids) == n else {})))
        window_items += [(nm, t, wax[nm], compression, False) for nm, t in wfl.tensors]
    for k in dict(meta or {}):
        _need(isinstance(k, str), TypeError, "meta: keys must be strings, got %r", k)
    m = {_clean_str(k): _clean_str(v if isinstance(v, str) else str(v)) for k, v in dict(  # None drops a key
        _provenance(torch, items, _failed) if provenance else {}, **dict(meta or {})).items() if v is not None}
    manifest.update({"meta": m} if m else {})
    zstd = compression == "zstd" or importlib.util.find_spec("zstandard") is not None  # for the state, where it can be
    entries, blobs, cursor, state_bytes, failed = [], [], 0, [0, 0], {}  # blobs: each payload after its padding
    for name, t, axis, comp, in_state in [(n, t, axes[n], compression, False) for n, t in items] + [
            (n, t, None, "zstd" if zstd else compression, True) for n, t in state_items] + window_items:
        try:
            entry, blob = _encode_tensor(torch, name, t, axis, comp)
        except Exception as e:  # unreadable (a GPU copy after a device error): the crash is recorded without it
            if not lenient:
                raise
            why = _clean_str(f"{type(e).__name__}: {e}")  # an exception's text may be no Unicode text
            failed[name] = {"kind": "skipped", "type": "torch:Tensor", "reason": why}
            notes.append(f"skipped {name}: {why} (torch:Tensor)")
            continue
        blobs += [bytes(_align(cursor) - cursor), blob]
        entry["payload"]["offset"] = cursor = _align(cursor)
        cursor += entry["payload"]["length"]
        entries.append(dict(entry, **({"pad": pads[name]} if name in pads else {})))
        if in_state:
            state_bytes[0] += entry["storage_elements"] * _DTYPES[entry["dtype"]][0]
            state_bytes[1] += entry["payload"]["length"]
    manifest["tensors"] = entries
    if failed:
        manifest["structure"] = tree  # a flat batch too: its skipped leaf needs one
        for node in [manifest.get("structure"), manifest.get("state")] + [
                s["structure"] for s in manifest.get("window", {}).get("steps", [])]:
            _replace_leaves(node, failed)
    _need(_tree_values(manifest) <= MAX_TREE_VALUES, ValueError, "structure, state and window: more than %d JSON "
          "values (a reader refuses them): pass fewer per-sample values, or the tensors alone", MAX_TREE_VALUES)
    version = 3 if "window" in manifest else 2 if {"structure", "step", "state"} & set(manifest) or pads else 1
    _need(len(mbytes := encode_manifest(manifest)) <= MAX_MANIFEST, ValueError, "manifest: %d bytes, at most %d are "
          "allowed", len(mbytes), MAX_MANIFEST)
    head = _HEADER.pack(MAGIC, version, 0, len(mbytes), zlib.crc32(mbytes) & 0xFFFFFFFF, 0) + mbytes
    digest = _atomic_write(os.fspath(path), [head + bytes(_align(len(head)) - len(head))] + blobs)  # payloads at P
    try:  # the file is the user's, so that reduce runs the step it names, with no flag
        _sign(path, digest)
    except OSError as e:  # the recording is kept all the same
        notes.append(f"{path}: not marked as yours in {trust_dir()} ({e}): reduce asks you to `reduce trust` it")
    for note in notes if _failed != "kept" else ():  # a batch kept before its step is saved quietly
        warn(note)
    if "state" in manifest and _failed != "kept":
        keys, (size, stored) = ", ".join(manifest["state"].get("keys", [])), (_size(n) for n in state_bytes)
        warn(f"recorded the state{' at the window start' if _window else ''} ({keys}): {size}, {stored} in the file")
    return path
def _size(n): return f"{n / 2.0**20:.1f} MiB" if n >= 2**20 else f"{n / 2.0**10:.1f} KiB"
def _ids_of(fl, samples, sample_ids):
    """The sample ids: the given ones, else a per-sample list under an id key (_ID_KEYS) or of distinct strings."""
    lists = [(p.rpartition(".")[2], v) for p, v in fl.per_sample if len(v) == samples] if sample_ids is None else []
    return ([v for k, v in lists if k in _ID_KEYS and all(_is_int(x) or isinstance(x, str) for x in v)] +
            [v for k, v in lists if all(isinstance(x, str) for x in v) and len(set(v)) == len(v)] + [sample_ids])[0]
def _replace_leaves(node, by_name):
    for i, c in enumerate((node or {}).get("items", [])):
        if c["kind"] == "tensor" and c["name"] in by_name:
            node["items"][i] = by_name[c["name"]]
        else:
            _replace_leaves(c, by_name)
def _atomic_write(path, chunks):  # returns the SHA-256 of the bytes written, "sha256:<hex>"
    directory, digest = os.path.dirname(os.path.abspath(path)), importlib.import_module("hashlib").sha256()
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(8).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                digest.update(chunk)
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable; not possible everywhere (Windows)
        os.fsync(dfd := os.open(directory, os.O_RDONLY))
        os.close(dfd)
    return "sha256:" + digest.hexdigest()
_signed = {}  # path -> the digest save() recorded as the user's for the file it wrote there (keep="disk" forgets it)
def trust_dir():  # the user's trust store, where what their recorder writes is theirs (internal/trust: DefaultStore)
    env, xdg, home = (os.environ.get(k, "") for k in ("REDUCE_TRUST_DIR", "XDG_DATA_HOME", "HOME"))
    d = env or os.path.join(xdg if os.path.isabs(xdg) else os.path.join(home, ".local", "share"), "reduce", "trusted")
    _need(os.path.isabs(d), OSError, "no trust store: set REDUCE_TRUST_DIR (or HOME) to an absolute path")
    return d
def _sign(path, digest=None):  # README, "A batch file from someone else"; without a digest, forget path's
    if digest is None:  # keep="disk": the batch kept for a step that ended goes, and its entry with it
        return os.unlink(os.path.join(trust_dir(), _signed.pop(os.path.abspath(path))[7:] + ".json"))
    os.makedirs(trust_dir(), 0o700, exist_ok=True)
    entry = {"digest": digest, "kind": "recording", "path": os.path.abspath(path)}
    _atomic_write(os.path.join(trust_dir(), digest[7:] + ".json"), [json.dumps(entry).encode()])
    _signed[entry["path"]] = digest
def _is_scalar(v): return isinstance(v, _SCALARS) and not (isinstance(v, float) and not math.isfinite(v))
def type_path(obj):  # module:qualname, each part as _CLASS_RE reads it ("f.<locals>.Rec": "f._locals_.Rec")
    t = obj if isinstance(obj, type) else type(obj)
    return ":".join(re.sub(r"^(?![A-Za-z_])|[^\w.]", "_", p, flags=re.ASCII) for p in (t.__module__, t.__qualname__))
class Flattener:
    """A batch (or a state) as a structure node, its tensors by path name, what it cannot encode."""
    def __init__(self, torch, prefix, samples, names=None):  # names: a set shared with another Flattener
        self.torch, self.prefix, self.samples, self.names = torch, prefix, samples, set() if names is None else names
        self.tensors, self.skipped, self.per_sample = [], [], []  # (name, t), (path, type, why), (path, values)
        self.open, self.notes = set(), []  # the containers the walk is inside; keys written as strings
    def name(self, path):
        name, n = (base := _clean_str(self.prefix + (path or "batch"))), 2
        while name in self.names:
            name, n = f"{base}#{n}", n + 1
        self.names.add(name)
        return name
    def skip(self, path, x, reason):
        self.skipped.append((path or "batch", type_path(x), reason))
        return {"kind": "skipped", "type": type_path(x), "reason": _clean_str(reason)}
    def items(self, keys, values, path):
        return [self.node(v, f"{path}.{k}" if path else str(k)) for k, v in zip(keys, values)]
    def node(self, x, path=""):  # bounded: a part too deep, holding itself or raising is skipped (named)
        if len(self.open) >= MAX_DEPTH or id(x) in self.open:
            return self.skip(path, x, f"nested over {MAX_DEPTH} deep" if id(x) not in self.open else "holds itself")
        try:
            return self.open.add(id(x)) or self._node(x, path)
        except Exception as e:  # noqa: BLE001  (a broken __len__, keys(), __getitem__ ...: this part alone)
            return self.skip(path, x, f"{type(e).__name__}: {e}"[:200])
        finally:
            self.open.discard(id(x))
    def _node(self, x, path):
        if isinstance(x, getattr(sys.modules.get("numpy"), "ndarray", ())):
            try:
                x = self.torch.from_numpy(x)
            except (TypeError, RuntimeError, ValueError) as e:
                return self.skip(path, x, f"numpy array: {e}")
        if isinstance(x, self.torch.Tensor):
            if str(x.dtype).replace("torch.", "") not in _DTYPES:
                return self.skip(path, x, f"dtype {x.dtype} is not supported (want one of {', '.join(DTYPES)})")
            if x.layout != self.torch.strided or getattr(x, "is_nested", False):
                return self.skip(path, x, f"layout {'nested' if x.is_nested else x.layout} (only strided tensors "
                                 "are recorded)")
            self.tensors.append((self.name(path), x))
            return {"kind": "tensor", "name": self.tensors[-1][0]}
        if isinstance(x, tuple) and hasattr(type(x), "_fields") and hasattr(type(x), "_make"):  # a named tuple
            keys = list(type(x)._fields)
            return {"kind": "namedtuple", "type": type_path(x), "keys": keys, "items": self.items(keys, list(x), path)}
        if isinstance(x, (list, tuple)):
            if x and all(isinstance(v, _SCALARS) for v in x) and len(x) == self.samples:
                if not all(_is_scalar(v) and not (isinstance(v, str) and len(v) > _MAX_LEAF) for v in x):
                    return self.skip(path, x, f"a non-finite float has no JSON form, or a string is over {_MAX_LEAF}")
                self.per_sample.append((path, list(x)))
                node = {"kind": "samples", "values": [_clean_str(v) if isinstance(v, str) else v for v in x]}
                return dict(node, tuple=True) if isinstance(x, tuple) else node
            node = {"kind": "tuple" if isinstance(x, tuple) else "list"}
            return dict(node, items=self.items(range(len(x)), list(x), path)) if x else node
        if isinstance(x, dict) or (hasattr(x, "keys") and hasattr(x, "__getitem__")):
            keys, values = list(x.keys()), [x[k] for k in list(x.keys())]
            for i, k in enumerate(keys):  # an int, or a str that is text; else its str(), unless taken
                if not (isinstance(k, str) and _clean_str(k) == k or _is_int(k)):
                    keys[i] = None if (s := _clean_str(str(k))) in keys else s
                    self.notes.append(f"{path or 'batch'}: key {k!r} ({type_path(k)}) " + (
                        f"recorded as {keys[i]!r}" if keys[i] else "skipped: its str() is another key"))
            keys, values = [k for k in keys if k is not None], [v for k, v in zip(keys, values) if k is not None]
            # A dict, or a subclass of it (OrderedDict, a state_dict); another mapping needs str keys.
            node = {"kind": "dict"} if isinstance(x, dict) else {"kind": "mapping", "type": type_path(x)}
            if node["kind"] == "mapping" and any(not isinstance(k, str) for k in keys):
                return self.skip(path, x, "a mapping object with a key that is not a str")
            return dict(node, keys=keys, items=self.items(keys, values, path)) if keys else node
        if isinstance(x, _SCALARS):
            if not _is_scalar(x) or isinstance(x, str) and len(x) > _MAX_LEAF:
                return self.skip(path, x, f"a string of {len(x)} characters, over {_MAX_LEAF}" if isinstance(x, str)
                                 else "a non-finite float has no JSON form")
            return {"kind": "value", "value": _clean_str(x) if isinstance(x, str) else x}
        return self.skip(path, x, "not a tensor, a container or a Python scalar")
def _count_samples(torch, batch, batch_dims, sample_ids):
    """The batch's size: along its tensors' batch axis, else the ids', else a list of Python values'."""
    (probe := Flattener(torch, "", None)).node(batch)
    for name, t in probe.tensors:
        if (d := (batch_dims or {}).get(name, 0 if t.dim() > 0 else None)) is not None and -t.dim() <= d < t.dim():
            return int(t.shape[d])
    if sample_ids is not None:
        return len(sample_ids)
    queue, seen = [batch], set()
    for x in queue:  # breadth first, each container once
        if isinstance(x, (list, tuple)) and x and all(isinstance(v, _SCALARS) for v in x):
            return len(x)
        if id(x) not in seen and len(seen) < 1 << 16 and not seen.add(id(x)):
            queue.extend(x if isinstance(x, (list, tuple)) else x.values() if isinstance(x, dict) else ())
    return 0
def _trusted(types):
    """load()'s `types` (classes, {"module:qualname": class}, or a function of one to a class or None), a function."""
    if callable(types) and not isinstance(types, type):
        return types
    if not isinstance(types, dict):
        types = {type_path(c): c for c in ([types] if isinstance(types, type) else types or ())}
    _need(all(isinstance(c, type) for c in types.values()), TypeError, "load: types: want classes")
    return types.get
def _build(node, tensors, types):
    """A node's value: a named tuple or mapping of the class types("module:qualname") gives, else one made here of the
    recorded name and fields, or a dict: nothing a file names is imported."""
    if (kind := node["kind"]) in ("tensor", "samples", "value", "skipped"):  # a leaf
        return tensors[node["name"]] if kind == "tensor" else node.get("value") if kind != "samples" else (
            tuple if node.get("tuple") else list)(node.get("values", ()))
    items = [_build(c, tensors, types) for c in node.get("items", [])]
    if kind in ("list", "tuple"):
        return items if kind == "list" else tuple(items)
    keys, cls = node.get("keys", []), types(node["type"]) if kind != "dict" else None
    if cls is not None:
        try:
            return cls(*items) if kind == "namedtuple" else cls(dict(zip(keys, items)))
        except Exception as e:  # noqa: BLE001  (whatever a trusted class's constructor raises)
            warn(f"{kind} {node['type']} rebuilt without its class ({type(e).__name__}: {e})")
    if kind != "namedtuple":
        return dict(zip(keys, items))
    key = (node["type"], tuple(str(k) for k in keys))
    if key not in _made:  # the recorded name made an identifier: 9lives -> _9lives, class -> _class
        name = re.sub(rf"\W|^(?=\d)|^(?=(?:{'|'.join(keyword.kwlist)})$)", "_", re.split(r"[:.]", key[0])[-1])
        _made[key] = importlib.import_module("collections").namedtuple(name or "_", key[1], rename=True)
    return _made[key](*items)
def _tree(node, path, tensors, skipped, types):
    """Collect a structure's tensor names, skipped leaves [(path, type, reason)], named tuples' and mappings' types."""
    kind, where = node.get("kind"), path or "batch"
    types.update({where: node.get("type", "")} if kind in ("namedtuple", "mapping") else {})
    tensors.extend([node["name"]] if kind == "tensor" else [])
    skipped.extend([(where, node.get("type", ""), node.get("reason", ""))] if kind == "skipped" else [])
    keys = node.get("keys") or list(range(len(node.get("items", []))))
    for k, c in zip(keys, node.get("items", [])):
        _tree(c, f"{path}.{k}" if path else str(k), tensors, skipped, types)
class State(dict):
    """save(state=)'s record: name -> state_dict ("rng": the generators'); restore(model=m) loads one."""
    def restore(self, **objects):
        for k, obj in objects.items():
            _need(k in self, KeyError, "state: nothing recorded under %r (recorded: %s)", k, ", ".join(sorted(self)))
            obj.load_state_dict(self[k])
        return self
def rng_state(torch):
    rng = {"torch": torch.get_rng_state()}
    with contextlib.suppress(RuntimeError):  # after a device error the CUDA generators cannot be read
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["cuda"] = list(torch.cuda.get_rng_state_all())
    rng["random"] = [(v := importlib.import_module("random").getstate())[0], list(v[1]), v[2]]
    if sys.modules.get("numpy") is not None:
        s = sys.modules["numpy"].random.get_state()
        rng["numpy"] = [s[0], torch.from_numpy(s[1].astype("int64")), int(s[2]), int(s[3]), float(s[4])]
    return rng
def step_entry(step):  # the manifest's step of a function (or "module:qualname"); ValueError without an import name
    fn = None if isinstance(step, str) else getattr(step, "__func__", step)  # a str's file: its module's
    mod, qual = step.rpartition(":")[::2] if fn is None else (getattr(fn, "__module__", None),
                                                              getattr(fn, "__qualname__", None))
    _need(fn is not None or _QUALNAME_RE.fullmatch(mod) and _QUALNAME_RE.fullmatch(qual), ValueError, f"step "
          f"{step!r}: want module:qualname, dotted Python names")
    _need(getattr(step, "__self__", None) is None or isinstance(step.__self__, type), ValueError, f"step {step!r} is a "
          "bound method: pass a function of the batch (reduce cannot rebuild the object it is bound to)")
    _need(mod and qual and "<" not in qual, ValueError, f"step {step!r} cannot be imported by name (a lambda or a "
          "function defined inside another): define it at the top level of a module")
    entry = {"module": mod, "qualname": qual, "cwd": os.getcwd()}
    src = getattr(getattr(fn, "__code__", None), "co_filename", "") or getattr(sys.modules.get(mod), "__file__", "")
    if src and os.path.isfile(src):  # a class (the LightningModule) has its module's file
        entry["file"] = os.path.abspath(src)
        if mod == "__main__" and (line := runs_at_import(src)):
            warn(f"warning: {src} runs code when it is imported (line {line}): reduce imports it to replay {qual} "
                  "and would run that again; put it under `if __name__ == \"__main__\":`, or define the step in a "
                  "module of its own")
    return entry
def runs_at_import(path):
    """The line of the first top-level statement that trains when imported (a loop, a with, main() not a.b()), or 0."""
    import ast
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return 0
    blocks = (ast.For, ast.While, ast.With, ast.AsyncFor, ast.AsyncWith)
    return next((node.lineno for node in tree.body if isinstance(node, blocks) or isinstance(node, ast.Expr) and
                 isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)), 0)
class Batch:
    """A batch read by load(): .data in its recorded structure (a skipped leaf None), .tensors by name (the recorded
    dtype, shape, strides, saved offset), .batch_dims, .pads, .samples, .sample_ids, .op, .attrs, .meta, .error, .step,
    .state (a State), .skipped, .recorded_offsets, .manifest, .types (module:qualname by path), .window, .failed_step"""
    def __init__(self, path, manifest, tensors, types=None):
        self.path, self.manifest, self.tensors, entries = path, manifest, tensors, manifest["tensors"]
        self.batch_dims = {e["name"]: e.get("batch_dim") for e in entries}
        self.recorded_offsets = {e["name"]: e["recorded_offset"] for e in entries if "recorded_offset" in e}
        self.pads = {e["name"]: e["pad"] for e in entries if "pad" in e}
        self.samples, self.sample_ids, self.step = manifest["samples"], manifest.get("sample_ids"), manifest.get("step")
        self.op, self.attrs, self.meta = (manifest.get(k) or d for k, d in (("op", None), ("attrs", {}), ("meta", {})))
        self.error = None if (err := manifest.get("error")) is None else {
            "text": err.get("text", ""), "exception": err.get("exception", ""), "exit_status": err.get("exit_status")}
        self.skipped, self.state, self.types, types, apart = [], None, {}, _trusted(types), []
        self.data = _build(manifest["structure"], tensors, types) if "structure" in manifest else dict(tensors)
        _tree(manifest.get("structure") or {}, "", [], self.skipped, self.types)
        if "state" in manifest:
            _tree(manifest["state"], "state", apart, self.skipped, self.types)
            self.state = State(_build(manifest["state"], tensors, types))
        win = manifest.get("window") or {}  # the steps before the failed one: [(index, data, sample_ids, samples)]
        self.failed_step, self.window = win.get("failed"), []
        for s in win.get("steps", ()):
            _tree(s["structure"], "", apart, self.skipped, {})
            self.window.append((s["index"], _build(s["structure"], tensors, types), s.get("sample_ids"), s["samples"]))
        for name in apart:
            self.tensors.pop(name, None)  # tensors holds the batch's; the state's and the window's are apart
    def __repr__(self):
        parts = [f"{n} {str(t.dtype).replace('torch.', '')}{list(t.shape)}" for n, t in self.tensors.items()]
        return f"<Batch {self.path}: {self.samples} samples, op={self.op!r}, tensors: {', '.join(parts)}>"
class _Reader:
    """The strict reader: every rule of docs/FORMAT.md the Go reader checks, a BatchFileError each naming the field."""
    def __init__(self, path, max_size): self.path, self.max_size, self.version = path, max_size, FORMAT_VERSION
    def need(self, ok, field, msg, *args):
        if not ok:
            raise BatchFileError(f"{self.path}: {field}: {msg % args if args else msg}")
    def keys(self, obj, allowed, where, nullable=()):  # keys spelt exactly, and no null standing for an absent one
        bad = [k for k in sorted(obj) if k not in allowed or obj[k] is None and k not in nullable][:1]
        self.need(not bad or bad[0] in allowed, where, "unknown key %s", json.dumps(bad[0] if bad else ""))
        self.need(not bad, f"{where}: {''.join(bad)}", "null (leave an absent key out)")
    def int_field(self, obj, key, where, minimum=0, maximum=_INT64_MAX):
        self.need(_is_int(v := obj.get(key)), where, "%s: want an integer, got %s", key, json.dumps(v))
        self.need(minimum <= v <= maximum, where, "%s: %d is out of range [%d, %d]", key, v, minimum, maximum)
        return v
    def manifest(self, mbytes):
        def bad_constant(name): raise ValueError(f"{name} is not JSON")
        try:
            m = json.loads(mbytes.decode("utf-8"), parse_constant=bad_constant)
        except (RecursionError, ValueError) as e:  # a RecursionError is no ValueError
            self.need(False, "manifest", f"malformed JSON: {e}" if isinstance(e, ValueError) else
                      f"JSON nested over {MAX_JSON_DEPTH} deep")
        level, depth = [m], 1
        while level:  # the Go reader checks this before parsing
            self.need(depth <= MAX_JSON_DEPTH, "manifest", "JSON nested over %d deep", MAX_JSON_DEPTH)
            level, depth = [c for x in level for c in (x.values() if isinstance(x, dict) else x)
                            if isinstance(c, (dict, list))], depth + 1
        self.need(isinstance(m, dict), "manifest", "want a JSON object")
        self.need(set(m) <= _TOP_KEYS, "manifest", "unknown key %s", json.dumps(sorted(set(m) - _TOP_KEYS)[:1]))
        lone = [k for k in sorted(m) if (b"\\ud" in mbytes or b"\\uD" in mbytes) and _SURROGATE_RE.search(
            json.dumps(m[k], ensure_ascii=False))][:1]  # Go would read U+FFFD, Python's json the surrogate
        self.need(not lone, "".join(lone), "a lone surrogate (\\ud800 to \\udfff) is no Unicode text")
        self.need(_tree_values(m) <= MAX_TREE_VALUES, "manifest", "structure, state and window hold more than %d "
                  "JSON values", MAX_TREE_VALUES)
        self.keys(m, _TOP_KEYS, "manifest")
        samples = self.int_field(m, "samples", "manifest")
        self.need(isinstance(ids := m.get("sample_ids", ()), list | tuple) and all(isinstance(s, str) for s in ids),
                  "sample_ids", "want an array of strings")
        self.need(len(ids) == samples or "sample_ids" not in m, "sample_ids", "%d ids for %d samples", len(ids),
                  samples)
        self.need(isinstance(m.get("op", ""), str), "op", "want a string")
        self.need(isinstance(attrs := m.get("attrs", {}), dict) and all(isinstance(v, _SCALARS) or isinstance(
            v, list) and all(isinstance(x, _SCALARS) for x in v) for v in attrs.values()), "attrs", "want an object of "
            "numbers, strings, booleans, null or arrays of those")
        if (err := m.get("error")) is not None:  # keys() refused a null
            self.need(isinstance(err, dict), "error", "want an object")
            self.keys(err, _ERROR_KEYS, "error")
            self.need(isinstance(err.get("text"), str) and isinstance(err.get("exception", ""), str) and
                      _is_i64(err.get("exit_status", 0)), "error", "want text, exception (strings), exit_status")
        self.need(isinstance(meta := m.get("meta", {}), dict) and all(isinstance(v, str) for v in meta.values()),
                  "meta", "want an object of strings")
        self.need(isinstance(tensors := m.get("tensors"), list), "tensors", "want an array")
        for key, v in (("structure", 2), ("step", 2), ("state", 2), ("window", 3)):
            self.need(key not in m or self.version >= v, key, "a version %d key in a version %d file", v, self.version)
        self.need(isinstance(step := m.get("step", {"module": "m", "qualname": "q"}), dict), "step", "want an object")
        self.keys(step, ("module", "qualname", "file", "cwd"), "step")
        self.need(all(isinstance(v, str) for v in step.values()) and all(_QUALNAME_RE.fullmatch(step.get(k, "")) for k
                  in ("module", "qualname")), "step", "want module and qualname, dotted Python names (and file, cwd)")
        self.need("state" not in m or "structure" in m, "state", "a state needs the batch's structure")
        win, owner = m.get("window"), {}  # a window step's tensors are batched along its samples
        self.need(win is None or isinstance(win, dict), "window", "want an object")
        self.keys(win or {}, ("failed", "start", "steps"), "window")
        self.need(win is None or isinstance(win.get("steps"), list) and win["steps"] and m.get("step") and "structure"
                  in m, "window", "want {failed, start, steps} with a step, and the batch's step and structure")
        failed = self.int_field(win, "failed", "window") if win else 0
        for k, st in enumerate(win["steps"] if win else ()):
            self.need(isinstance(st, dict), where := f"window: steps[{k}]", "want an object")
            self.keys(st, ("index", "samples", "sample_ids", "structure"), where)
            self.need(isinstance(st.get("structure"), dict), where, "want index, samples, structure (and sample_ids)")
            self.int_field(st, "index", where, win["steps"][k - 1]["index"] + 1 if k else 0, failed - 1)
            n, ids = self.int_field(st, "samples", where), st.get("sample_ids")
            self.need(ids is None or isinstance(ids, list) and len(ids) == n and all(isinstance(i, str) for i in ids),
                      where, "sample_ids: want one string per sample")
            self.node(st["structure"], f"{where}: structure", n, False, set())
            _tree(st["structure"], "", in_step := [], [], {})
            owner.update((name, n) for name in in_step)
        _ = win and self.int_field(win, "start", "window", 0, min(failed, win["steps"][0]["index"]))
        names, total, used = set(), 0, set()
        for i, e in enumerate(tensors):
            total += self.tensor(e, i, names, owner, samples)
            self.need(total <= self.max_size, _tf(e["name"]), "storage_elements: the storage adds up to more than %d "
                      "bytes (the size limit)", self.max_size)
        late = [e["name"] for e in tensors[min([i for i, e in enumerate(tensors) if e["name"] in owner] or [0]):]
                if e["name"] not in owner and owner]
        self.need(not late, _tf(late[0] if late else ""), "the batch's and the state's tensors come before the "
                  "window's")
        if "structure" in m:
            self.node(m["structure"], "structure", samples, names, used)
            in_batch = set(used)
            if "state" in m:
                self.node(m["state"], "state", 0, names, used)
                self.need(m["state"]["kind"] == "dict", "state", "want a dict node (the state by name)")
            in_state, by_name = used - in_batch, {e["name"]: e for e in tensors}
            for k, st in enumerate(win["steps"] if win else ()):
                self.node(st["structure"], f"window: steps[{k}]: structure", st["samples"], names, mine := set())
                for name in sorted(mine, key=[e["name"] for e in tensors].index):
                    e, where = by_name[name], _tf(name)
                    self.need(name not in used, where, "named by the batch or the state and by window: steps[%d]", k)
                    self.need(e["batch_dim"] is None or e["shape"][e["batch_dim"]] == st["samples"], where,
                              "batch_dim: size %d along axis %d, but window: steps[%d] has %d samples",
                              e["shape"][e["batch_dim"] or 0], e["batch_dim"] or 0, k, st["samples"])
                    self.need("pad" not in e or len(e["pad"]["lengths"]) == st["samples"], where,
                              "pad: lengths: want one per sample of window: steps[%d]", k)
                used |= mine
            for e in tensors:
                self.need(e["name"] in used, _tf(e["name"]), "in neither the structure nor the state")
                self.need(e["name"] not in in_state or (e.get("batch_dim") is None and "pad" not in e),
                          _tf(e["name"]), "a state tensor has no batch axis (batch_dim null)")
        return m
    def node(self, node, where, samples, names, used, depth=0):  # a node's check: the Go reader's rules
        self.need(isinstance(node, dict), where, "want a node (an object)")
        self.need(isinstance(kind := node.get("kind"), str) and kind in _NODE_KEYS, where, "unknown kind %s",
                  json.dumps(kind))
        self.need(not (extra := set(node) - _NODE_KEYS[kind] - {"kind"}), where, "key %s does not belong to kind %s",
                  "".join(sorted(extra)[:1]), kind)
        types = {"name": str, "type": str, "reason": str, "tuple": bool, "keys": list, "items": list, "values": list}
        for k in sorted(set(node) & set(types)):
            self.need(isinstance(node[k], types[k]), f"{where}: {k}", "want a %s", types[k].__name__)
        self.need(all(isinstance(v, _SCALARS) for v in node.get("values", ())), where,
                  "values: want strings, numbers, booleans or null")
        level, d = [node.get("value")], 0
        while level and kind == "value":  # a value without objects, its arrays nested at most MAX_DEPTH deep
            self.need(dict not in (t := set(map(type, level))) and (d < MAX_DEPTH or list not in t), where + ": value",
                      "want a JSON value without objects, its arrays nested at most %d deep", MAX_DEPTH)
            level, d = [c for x in level if isinstance(x, list) for c in x], d + 1
        self.need(kind not in _CONTAINERS or depth < MAX_DEPTH, where, "more than %d containers deep", MAX_DEPTH)
        for i, c in enumerate(node.get("items", ())):
            self.node(c, f"{where}.items[{i}]", samples, names, used, depth + 1)
        self.need(kind != "tensor" or isinstance(node.get("name"), str) and (names is False or node["name"] in names),
                  where, "no tensor named %s", json.dumps(node.get("name")))
        if names is False:  # the JSON alone (a window step's, before its tensors are known)
            return
        if kind == "tensor":
            self.need(node["name"] not in used, where, "tensor %r appears twice", node["name"])
            used.add(node["name"])
        elif kind == "samples":
            self.need(len(node.get("values", ())) == samples, where, "want one value per sample (%d)", samples)
        elif kind == "value":
            self.need("value" in node, where, "value: missing")
        elif kind in ("dict", "namedtuple", "mapping"):
            keys, items = node.get("keys", []), node.get("items", [])
            self.need(kind == "dict" or _CLASS_RE.fullmatch(node.get("type", "")), where, "type %s: want "
                      "module:qualname", json.dumps(node.get("type")))
            self.need(len(keys) == len(items), where, "want as many keys as items")
            self.need(all(isinstance(k, str) or kind == "dict" and _is_i64(k) for k in keys), where,
                      "keys: want strings (a dict's: or integers)")
            self.need(len(set(keys)) == len(keys), where, "duplicate keys")
    def tensor(self, e, i, names, owner, samples):  # owner: a window step's tensors' samples
        self.need(isinstance(e, dict), f"tensors[{i}]", "want an object")
        where = _tf(name) if isinstance(name := e.get("name"), str) and name else f"tensors[{i}]"
        self.keys(e, _TENSOR_KEYS, where, ("batch_dim",))
        self.need(isinstance(name, str) and name, f"tensors[{i}]: name", "missing or empty")
        self.need(name not in names, f"tensors[{i}]: name", "%s already names another tensor", json.dumps(name))
        names.add(name)
        for key in _TENSOR_KEYS - {"pad", "recorded_offset"}:
            self.need(key in e, f"{where}: {key}", "missing" + " (null for a shared tensor)" * (key == "batch_dim"))
        dt, shape, strides = e["dtype"], e["shape"], e["strides"]
        self.need(isinstance(dt, str) and dt in _DTYPES, where, "dtype: unknown dtype %s (want one of %s)",
                  json.dumps(dt), ", ".join(DTYPES))
        self.need(isinstance(shape, list) and len(shape) <= MAX_DIMS, where,
                  "shape: want an array of at most %d integers", MAX_DIMS)
        self.need(isinstance(strides, list) and len(strides) == len(shape), where,
                  "strides: want one integer per dim (%d)", len(shape))
        numel, itemsize = 1, _DTYPES[dt][0]
        for k, n in enumerate(shape):
            self.need(_is_int(n) and n >= 0, where, "shape[%d]: %s, want an integer >= 0", k, json.dumps(n))
            numel *= n
            self.need(numel <= _INT64_MAX, where, "shape: %s overflows", shape)
        for k, s in enumerate(strides):
            self.need(_is_int(s) and 0 <= s <= _INT64_MAX, where, "strides[%d]: %s, want an integer >= 0", k,
                      json.dumps(s))
        offset, elements = self.int_field(e, "offset", where), self.int_field(e, "storage_elements", where)
        self.need(elements * itemsize <= _INT64_MAX, where, "storage_elements: %d overflows", elements)
        ro = self.int_field(e, "recorded_offset", where) if "recorded_offset" in e else 0
        self.need(ro == 0 or ro >= offset, where, "recorded_offset %d: below offset %d", ro, offset)
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides)) if numel > 0 else -1  # -1: reaches none
        self.need(last <= _INT64_MAX and last + 1 <= elements, where, "offset %d and strides %s reach storage element "
                  "%d, outside the %d stored", offset, strides, last, elements)
        bd, pad = e["batch_dim"], e.get("pad")
        if bd is not None:
            self.need(_is_int(bd) and 0 <= bd < len(shape), where, "batch_dim: %s is out of range for %d dims",
                      json.dumps(bd), len(shape))
            self.need(shape[bd] == samples or name in owner, where, "batch_dim: size %d along axis %d, but the batch "
                      "has %d samples", shape[bd], bd, samples)
        if pad is not None:
            self.need(self.version >= 2, where, "pad: a version 2 key in a version %d file", self.version)
            self.need(isinstance(pad, dict) and set(pad) == {"dim", "lengths"} and _is_int(pad["dim"]) and
                      isinstance(pad["lengths"], list) and all(_is_i64(n) for n in pad["lengths"]), where,
                      "pad: want {dim, lengths}, integers")
            self.need(bd is not None, where, "pad: a shared tensor has no samples to pad")
            self.need(0 <= pad["dim"] < len(shape) and pad["dim"] != bd, where, "pad: want a dim other than the "
                      "batch axis")
            ls, size = pad["lengths"], shape[pad["dim"]]
            self.need((len(ls) == samples or name in owner) and all(0 <= n <= size for n in ls), where,
                      "pad: lengths: want one length in [0, %d] per sample", size)
        self.need(isinstance(p := e["payload"], dict), where, "payload: want an object")
        self.keys(p, _PAYLOAD_KEYS, f"{where}: payload")
        for key in _PAYLOAD_KEYS:
            self.need(key in p, f"{where}: payload.{key}", "missing")
        poff = self.int_field(p, "offset", where + ": payload")
        self.need(poff % ALIGN == 0, where, "payload: offset %d is not a multiple of %d", poff, ALIGN)
        plen = self.int_field(p, "length", where + ": payload")
        self.int_field(p, "crc32", where + ": payload", 0, 0xFFFFFFFF)
        self.need(p["compression"] in _COMPRESSIONS, where, "payload: unknown compression %s (want none or zstd)",
                  json.dumps(p["compression"]))
        self.need(p["compression"] != "none" or plen == elements * itemsize, where,
                  "payload: %d bytes, but %d elements of %s take %d", plen, elements, dt, elements * itemsize)
        return elements * itemsize
    def checked(self, f):  # (manifest, P) of the open file f, its header, manifest and payloads' places checked
        size = os.fstat(f.fileno()).st_size
        self.need(head := f.read(HEADER_SIZE), "header", "truncated: the file is empty")
        self.need(MAGIC.startswith(head[:8]), "header: magic", "got %r, want %r: not a reduce batch file", head[:8],
                  MAGIC)
        self.need(len(head) == HEADER_SIZE, "header", "truncated: the file has %d bytes, the header needs %d",
                  size, HEADER_SIZE)
        _, self.version, flags, mlen, mcrc, reserved = _HEADER.unpack(head)
        self.need(1 <= self.version <= FORMAT_VERSION, "header: version", "%d, this reader reads versions 1 to %d (a "
                  "newer reduce_batch.py reads it: `reduce recorder`)", self.version, FORMAT_VERSION)
        self.need(flags == 0, "header: flags", "0x%x, want 0", flags)
        self.need(reserved == 0, "header: reserved", "0x%x, want 0", reserved)
        self.need(mlen <= MAX_MANIFEST, "header: manifest_length", "%d bytes, at most %d are allowed", mlen,
                  MAX_MANIFEST)
        self.need(HEADER_SIZE + mlen <= size, "header: manifest_length", "truncated: the manifest needs %d bytes, the "
                  "file has %d after the header", mlen, size - HEADER_SIZE)
        self.need(len(mbytes := f.read(mlen)) == mlen, "header: manifest_length", "truncated while reading")
        self.need((got := zlib.crc32(mbytes) & 0xFFFFFFFF) == mcrc, "header: manifest_crc32", "checksum 0x%08x of the "
                  "manifest, the header says 0x%08x", got, mcrc)
        m, p = self.manifest(mbytes), _align(HEADER_SIZE + len(mbytes))
        pos = 0  # the end of the previous payload, from P: each payload starts at the next multiple of 64
        for e in m["tensors"]:
            off, n, where = e["payload"]["offset"], e["payload"]["length"], _tf(e["name"])
            self.need(off >= pos, where, "payload: offset %d overlaps the previous payload, which ends at %d", off, pos)
            self.need(off == _align(pos), where, "payload: offset %d leaves a gap (want %d): payloads follow each "
                      "other in tensor order", off, _align(pos))
            self.need(p + off + n <= size, where, "payload: bytes [%d, %d) lie outside the file (%d bytes; "
                      "truncated?)", p + off, p + off + n, size)
            pos = off + n
        self.need(size <= p + pos, "payloads", "%d trailing bytes after the last payload", size - p - pos)
        self.need(size == p + pos, "padding", "truncated: the file ends at %d, before the payload area at %d", size, p)
        self.need(not any(f.read(p - HEADER_SIZE - len(mbytes))), "padding", "non-zero bytes between the manifest "
                  "and the payload area")
        return m, p
    def payload(self, f, e, p):
        where, pl, want = _tf(e["name"]), e["payload"], e["storage_elements"] * _DTYPES[e["dtype"]][0]
        self.need(not any(f.read(p + pl["offset"] - f.tell())), where + ": padding", "non-zero bytes before the "
                  "payload")
        buf = bytearray(pl["length"])
        self.need(not pl["length"] or f.readinto(buf) == pl["length"], where, "payload: truncated")
        got = zlib.crc32(buf) & 0xFFFFFFFF
        self.need(got == pl["crc32"], where, "payload: checksum 0x%08x, the manifest says 0x%08x", got, pl["crc32"])
        if pl["compression"] == "zstd":
            self.need(importlib.util.find_spec("zstandard"), where, "payload: zstd-compressed, and no Python "
                      "module 'zstandard' to read it: pip install zstandard, or `reduce convert` the file")
            zstandard = importlib.import_module("zstandard")
            try:
                params = zstandard.get_frame_parameters(bytes(buf))
            except zstandard.ZstdError as err:
                self.need(False, where, f"payload: not a zstd frame: {err}")
            self.need(params.content_size != zstandard.CONTENTSIZE_UNKNOWN, where,
                      "payload: the zstd frame does not declare its decompressed size")
            self.need(params.content_size == want, where, "payload: the zstd frame declares %d bytes, want %d",
                      params.content_size, want)
            self.need(params.window_size <= MAX_ZSTD_WINDOW, where, "payload: zstd window of %d bytes, at most %d are "
                      "allowed", params.window_size, MAX_ZSTD_WINDOW)
            try:  # a block at a time: libzstd lets a block outgrow the window, RFC 8878 3.1.1.2.4 does not
                d = zstandard.ZstdDecompressor(max_window_size=MAX_ZSTD_WINDOW).decompressobj()
                buf, most, reserved = _zstd_blocks(d, z := bytes(buf), zstandard.frame_header_size(z))
            except zstandard.ZstdError as err:
                self.need(False, where, f"payload: corrupt zstd frame: {err}")
            self.need(d.eof, where, "payload: the zstd frame is incomplete")
            self.need(not reserved, where, "payload: corrupt zstd frame: reserved bits not zero")
            self.need(most <= (bms := min(max(params.window_size, 1024), 1 << 17)), where, "payload: a zstd "
                      "block of %d bytes, over the frame's Block_Maximum_Size of %d bytes", most, bms)
            self.need(not d.unused_data, where, "payload: %d bytes after the zstd frame", len(d.unused_data))
        self.need(len(buf) == want, where, "payload: %d bytes of storage, want %d", len(buf), want)
        self.need(e["dtype"] != "bool" or not bytes(buf).translate(None, b"\x00\x01"), where,
                  "payload: a bool element is neither 0 nor 1")
        return buf
def _tree_values(m):  # the JSON values of a manifest's trees (structure, state, window), counted to one past the limit
    todo, n = [m[k] for k in ("structure", "state", "window") if k in m], 0
    while todo and n <= MAX_TREE_VALUES:
        x, n = todo.pop(), n + 1
        todo.extend(x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())
    return n
def _zstd_blocks(d, f, pos):  # f, a zstd frame whose blocks start at pos, decoded by d a block at a time
    out, most, reserved, fed = bytearray(), 0, False, 0  # (the last with what follows it): its bytes, the
    while fed < len(f):  # most a block holds (stored or decoded), whether reserved bits are set
        h = int.from_bytes(f[pos:pos + 3], "little") if pos + 3 <= len(f) else 1  # cut short: the rest
        kind, size, pos = h >> 1 & 3, h >> 3, pos + 3
        end = len(f) if h & 1 else pos + (1 if kind == 1 else size)
        out += (block := d.decompress(f[fed:end]))
        most, fed = max(most, size, len(block)), end
        if kind == 2 and pos + size <= len(f):  # decoded: its literals section's header (Raw, RLE: 1-3 bytes;
            lt, sf = f[pos] & 3, f[pos] >> 2 & 3  # Compressed, Treeless: 3-5), then the sequences'
            n, bits = ((1, 2, 1, 3)[sf], 0) if lt < 2 else ((3, 3, 4, 5)[sf], (10, 10, 14, 18)[sf])
            v = int.from_bytes(f[pos:pos + n], "little")
            s = pos + n + (v >> (3 if sf in (0, 2) else 4) if lt == 0 else 1 if lt == 1 else
                           v >> 4 + bits & (1 << bits) - 1)  # RFC 8878 3.1.1.3.2.1: Symbol_Compression_Modes
            reserved = reserved or bool(f[s] and f[s + (1 if f[s] < 128 else 2 if f[s] < 255 else 3)] & 3)
        pos += 1 if kind == 1 else size
    return out, most, reserved
def read_manifest(path, max_size=DEFAULT_MAX_SIZE):
    """(manifest, P: its payload area's offset) of a batch file, checked but for the payloads' bytes."""
    with open(path, "rb") as f:
        return _Reader(os.fspath(path), max_size).checked(f)
def read_raw(path, max_size=DEFAULT_MAX_SIZE):
    """Read and validate a batch file without torch: (manifest, [storage bytes per tensor])."""
    with open(path, "rb") as f:
        m, p = (r := _Reader(os.fspath(path), max_size)).checked(f)
        return m, [r.payload(f, e, p) for e in m["tensors"]]
def load(path, device="cpu", *, types=None, max_size=DEFAULT_MAX_SIZE):
    """A batch file as a Batch, each tensor rebuilt on `device` (BatchFileError names the file and field). It imports
    nothing the file names: a named tuple or mapping is rebuilt with its class only when `types` lists it (README)."""
    torch, (m, storages) = _torch(), read_raw(path, max_size)
    device, tensors, big = torch.device(device), {}, sys.byteorder != "little"
    for e, buf in zip(m["tensors"], storages):  # buf is empty where storage_elements is 0 (frombuffer refuses it)
        dt = getattr(torch, e["dtype"])
        st = torch.frombuffer(buf, dtype=torch.uint8 if big else dt) if buf else torch.empty(0, dtype=dt)
        st = st.view(-1, _DTYPES[e["dtype"]][0]).flip(1).contiguous().view(dt).view(-1) if big and buf else st
        tensors[e["name"]] = torch.as_strided(st.to(device), e["shape"], e["strides"], e["offset"])
    return Batch(os.fspath(path), m, tensors, types)
class record_on_failure:
    """On an exception in the block, save the batch (a CPU copy, or a callable returning it) to `path` with the error,
    and let it go on; other keywords are save()'s; `.saved`: whether it wrote (never in a replay: REDUCE_REPLAY).
    window=K: the steps since the older of the last two copies of state= (one every K steps) too (README, "window").
    keep="disk" writes the batch before the step, removed after it: left by a process that aborts (C++ terminate)."""
    def __init__(self, path, batch=None, *, tensors=None, window=None, keep=None, **kwargs):
        _need("error" not in kwargs, TypeError, "record_on_failure: error is the exception raised in the block")
        _need(keep in (None, "disk"), ValueError, "keep: want None or 'disk' (the batch written before the step)")
        self.keep = keep == "disk" and not os.environ.get("REDUCE_REPLAY")
        _need(window is None or _is_int(window) and window > 0, ValueError, "window: want a number of steps > 0")
        self.path, self.batch, self.kwargs, self.saved = path, tensors if batch is None else batch, kwargs, False
        self.window = None if window is None or os.environ.get("REDUCE_REPLAY") else \
            Window.of(path, window, kwargs.get("state"))
    def __enter__(self):
        if self.window is not None:
            try:
                self.batch = _called(self.batch)
                self.window.enter(self.batch, self.kwargs.get("state"), self.kwargs.get("sample_ids"))
            except Exception as e:  # noqa: BLE001  (the training step runs all the same)
                warn(f"warning: window for {self.path}: {type(e).__name__}: {e}; recording this step alone")
                self.window = None
        try:  # keep="disk": as a failure would record it, less the error (reduce takes the first replay's), quietly
            if self.keep:
                self.batch, (self.kept, kwargs) = _called(self.batch), _ranked(self.path, self.kwargs, "kept_at")
                save(self.kept, self.batch, _failed="kept", **kwargs)
        except Exception as e:  # noqa: BLE001  (the training step runs all the same)
            self.keep = warn(f"warning: keep=\"disk\" for {self.path}: {type(e).__name__}: {e}; not kept this step")
        return self
    def __exit__(self, exc_type, exc, tb):
        if exc is None or not isinstance(exc, Exception):
            if self.keep and os.path.lexists(self.kept):
                os.unlink(self.kept)
                with contextlib.suppress(OSError, KeyError):
                    _sign(self.kept)
            return False  # KeyboardInterrupt, SystemExit, GeneratorExit: nothing to record
        if os.environ.get("REDUCE_REPLAY"):  # recording would write over the very batch being reduced
            warn(f"not recording to {self.path}: this is a replay of reduce's (REDUCE_REPLAY is set)")
            return False
        try:
            self.saved, steps = True, self._record(exc)
            warn(f"saved the failing batch{steps} to {self.path}")
        except BaseException as e:  # never mask the original exception
            warn(f"warning: could not save the failing batch to {self.path}: {type(e).__name__}: {e}")
            if not isinstance(e, Exception):
                raise
        return False
    def _record(self, exc):
        self.path, self.kwargs = _ranked(self.path, self.kwargs)  # under torch.distributed, each rank's own file
        try:
            batch = _called(self.batch)
        except Exception as e:  # noqa: BLE001  (the crash is recorded all the same)
            batch = warn(f"the batch callable raised {type(e).__name__}: {e}; recording the error alone") or {}
        keep = {k: v for k, v in self.kwargs.items() if k in ("step", "sample_ids", "op", "attrs", "meta")}
        first, w = self.kwargs, self.window
        if w is not None and w.steps:  # with the steps since the older state copy, and that copy as the state
            start, state = w.copies[0]  # the older copy: the first step's holds one
            given = self.kwargs.get("state")  # its keys the copy has not (a Lightning module's record) kept
            first = dict(self.kwargs, state=None if given is None else dict(
                         {k: v for k, v in given.items() if k not in (state or {})}, **(state or {})),
                         _window=(w.count - 1, start, [s for s in w.steps[:-1] if s[0] >= start]))
        tries = [(first, batch, "")] * (first is not self.kwargs) + [(self.kwargs, batch, ""), (keep, batch, ""), (
            {k: keep[k] for k in ("op", "meta") if k in keep}, lambda: _tensors_alone(_torch(), batch),
            "the tensors and the error"), ({}, dict, "the error")]  # the last resorts keep the op and a rank's meta
        for i, (kwargs, b, what) in enumerate(tries):
            try:  # an argument save() refuses: with the step if it can be; the last resorts: the tensors, the error
                save(self.path, b() if what else b, error=exc, _failed=True, **kwargs)
                n = len(kwargs.get("_window", (0, 0, ()))[2])  # what the message says of the steps it holds
                return f" and the {n} step{'s' * (n > 1)} before it" if n else ""
            except Exception as e:
                if i == len(tries) - 1:
                    raise
                then = tries[i + 1][2] or f"the batch with {' and '.join(tries[i + 1][0]) or 'the error'}"
                warn(f"{type(e).__name__}: {str(e)[:500]}; recording {then} alone")
def _tensors_alone(torch, batch):  # the recorder's last resort: the tensors a batch holds, by path
    return (fl := Flattener(torch, "", None)).node(batch) and dict(fl.tensors)
def _called(batch): return batch() if callable(batch) and not hasattr(batch, "__getitem__") else batch
def _ranked(path, kwargs, when="failed_at"):  # under torch.distributed (or torchrun's env) of several ranks:
    dist, env = getattr(_torch(), "distributed", None), os.environ  # PATH.rank{R}.EXT, its meta: rank, run, time
    on = dist is not None and dist.is_available() and dist.is_initialized()
    rank, size = (dist.get_rank(), dist.get_world_size()) if on else (int(env["RANK"]), int(env["WORLD_SIZE"])) if \
        re.fullmatch("[0-9]+", env.get("RANK", "")) and re.fullmatch("[0-9]+", env.get("WORLD_SIZE", "")) else (0, 1)
    if size < 2:
        return path, kwargs
    root, ext = os.path.splitext(os.fspath(path))
    meta = {"rank": rank, "world_size": size, when: f"{time.time():.6f}", "run_id": env.get("TORCHELASTIC_RUN_ID"),
            "dist_backend": dist.get_backend() if on else None}
    return f"{root}.rank{rank}{ext}", dict(kwargs, meta=dict(meta, **dict(kwargs.get("meta") or {})))
def __getattr__(name):  # the hooks' names, where a user of the recorder alone looks for them
    if name in ("record_trainer", "lightning_callback"):
        raise AttributeError(f"reduce_batch.{name} is in the hooks: reduce_batch.hooks.{name} where the package is "
                             f"installed, reduce_hooks.{name} where they are vendored (reduce recorder --hooks > "
                             "reduce_hooks.py)")
    raise AttributeError(f"module 'reduce_batch' has no attribute {name!r}")


def copied(torch, x):
    """A CPU copy of a batch or a state dict, in its structure (a class that cannot be rebuilt: a dict or list)."""
    if not (isinstance(x, (list, tuple, dict)) or hasattr(x, "keys") and hasattr(x, "__getitem__")):
        return x.detach().to("cpu", copy=True) if isinstance(x, torch.Tensor) else x
    items = [copied(torch, v) for v in (x.values() if hasattr(x, "keys") else x)]
    try:
        return (type(x)(*items) if hasattr(type(x), "_fields") else type(x)(zip(x.keys(), items))
                if hasattr(x, "keys") else type(x)(items))
    except Exception:  # noqa: BLE001
        return dict(zip(x.keys(), items)) if hasattr(x, "keys") else list(items)
def _nbytes(torch, x):  # the bytes of the tensors of a copied batch or state
    values = x.values() if hasattr(x, "keys") else x if isinstance(x, (list, tuple)) else ()
    return x.element_size() * x.nelement() if isinstance(x, torch.Tensor) else sum(_nbytes(torch, v) for v in values)
class Window:  # window=K's steps [(index, batch copy, ids)] since the older of 2 state copies [(index, state)]
    _by_path = {}  # noqa: RUF012  (shared on purpose: a path's window outlives each record_on_failure block)
    @classmethod
    def of(cls, path, k, state):  # afresh for another K or other state objects (another model: another run)
        key, path = (k, tuple(map(id, (state or {}).values()))), os.fspath(path)
        if getattr(cls._by_path.get(path), "key", None) != key:
            cls._by_path[path] = cls(k, key)
        return cls._by_path[path]
    def __init__(self, k, key=None):
        self.k, self.key, self.count, self.copies, self.steps, self.said = k, key, 0, [], [], False
    def enter(self, batch, state, sample_ids):
        torch = _torch()
        if self.count % self.k == 0:
            values = dict({str(n): copied(torch, v.state_dict() if callable(getattr(v, "state_dict", None)) else v)
                           for n, v in (state or {}).items()}, rng=copied(torch, rng_state(torch)))
            self.copies = (self.copies + [(self.count, values)])[-2:]
            self.steps = [s for s in self.steps if s[0] >= self.copies[0][0]]
        self.steps, self.count = self.steps + [(self.count, copied(torch, batch), sample_ids)], self.count + 1
        if not self.said and len(self.steps) > 1:
            self.said, size = True, [_size(_nbytes(torch, x)) for x in (self.steps[0][1], self.copies[-1][1])]
            warn(f"a window of {self.k} steps: CPU copies of the last {self.k} to {2 * self.k} batches "
                  f"({size[0]} each) and of the state every {self.k} steps ({size[1]}, two held)")
