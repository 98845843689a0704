"""Record a failing PyTorch batch for `reduce` (record_on_failure, save): `reduce recorder` prints
this file (the package's fileformat and record joined). reduce's docs/RECORDING.md and
docs/FORMAT.md; reading a file back (load) is the package's (reduce recorder --zip)."""

import contextlib
import importlib.util
import json
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
FORMAT_VERSION = 3  # reads 1 to 3; writes 1 for a flat dict of tensors without step, state or padding, 3 for a window
MAGIC = b"RDCBATCH"
HEADER = struct.Struct("<8sIIQII")  # magic, version, flags, manifest_length, manifest_crc32, reserved
HEADER_SIZE, ALIGN, MAX_MANIFEST, DEFAULT_MAX_SIZE, MAX_DIMS = HEADER.size, 64, 64 << 20, 4 << 30, 64  # HEADER_SIZE 32
MAX_DEPTH = 100  # docs/FORMAT.md: containers nested in a structure; the recorder skips a deeper part
_MAX_LEAF = 1 << 20  # the recorder skips a string leaf (or drops sample ids) longer than this
_MAX_TEXT = 1 << 16  # and cuts an error text to this many characters
MAX_ZSTD_WINDOW = 1 << 27  # the largest zstd window a reader accepts (libzstd's default limit)
_OFFSET_BYTES = 4096  # docs/FORMAT.md: saved storage offsets stay below 4096 bytes' worth of elements
INT64_MAX, ERROR_KEYS = (1 << 63) - 1, frozenset(["text", "exception", "exit_status"])
DTYPE_SIZES = {"bool": (1, "uint8"), "uint8": (1, "uint8"), "int8": (1, "int8"), "int16": (2, "int16"),
           "int32": (4, "int32"), "int64": (8, "int64"), "float16": (2, "int16"), "bfloat16": (2, "int16"),
           "float32": (4, "int32"), "float64": (8, "int64")}  # name -> (itemsize, same-size int dtype to move bytes)
DTYPES, CONTAINERS = tuple(DTYPE_SIZES), ("dict", "list", "tuple", "namedtuple", "mapping")
COMPRESSIONS, PAYLOAD_KEYS = ("none", "zstd"), ("offset", "length", "compression", "crc32")
_TENSOR_REQUIRED = ("name", "dtype", "shape", "strides", "offset", "storage_elements", "payload")
TENSOR_KEYS = frozenset(_TENSOR_REQUIRED + ("batch_dim", "recorded_offset", "pad"))
TOP_KEYS = frozenset(["samples", "sample_ids", "op", "attrs", "error", "meta", "tensors", "structure", "step", "state",
                      "window"])
MAX_JSON_DEPTH, MAX_TREE_VALUES = 512, 100_000  # docs/FORMAT.md: the manifest's nesting, its trees' JSON values
QUALNAME_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", re.ASCII)
CLASS_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", re.ASCII)
_EXCEPTION_NAME_RE = re.compile(
    r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:Error|Exception|Warning|Exit|Interrupt)):")
SCALARS = (str, int, float, bool, type(None))
_ID_KEYS = ("id", "ids", "sample_id", "sample_ids", "uid", "uids", "idx", "index", "key", "keys")
NODE_KEYS = {"tensor": {"name"}, "list": {"items"}, "tuple": {"items"}, "dict": {"keys", "items"},
              "namedtuple": {"keys", "items", "type"}, "mapping": {"keys", "items", "type"},
              "samples": {"values", "tuple"}, "value": {"value"}, "skipped": {"type", "reason"}}
SURROGATE_RE, _GIT = re.compile("[\ud800-\udfff]"), {}  # _GIT: the git revision of each directory a file was saved in


class BatchFileError(ValueError):
    """A batch file that breaks docs/FORMAT.md; the message names the file and the field."""


def torch_module():
    return importlib.import_module("torch")  # imported on first use: importing this module stays cheap


def warn(msg):
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"reduce_batch: {msg}\n")


def _clean_str(s):
    return SURROGATE_RE.sub("\ufffd", s)  # a lone surrogate is no UTF-8: U+FFFD, as Go writes it


def encode_manifest(obj):  # the manifest's canonical bytes (docs/FORMAT.md): compact ASCII JSON, sorted keys
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("ascii")


def aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_i64(v):
    return is_int(v) and -(1 << 63) <= v <= INT64_MAX


def tensor_words(name):
    return "tensor " + json.dumps(name, ensure_ascii=False)  # a tensor in messages, as Go names it


def require(ok, exc, msg, *args):  # raise exc(msg % args) unless ok: a writer's check of its arguments, on one line
    if not ok:
        raise exc(msg % args if args else msg)


def saved_offset(recorded_offset, itemsize):
    """(the offset written, the first storage element saved) of a view at recorded_offset (FORMAT.md)."""
    offset = recorded_offset if recorded_offset < (a := _OFFSET_BYTES // itemsize) else a + recorded_offset % a
    return offset, recorded_offset - offset


def _encode_tensor(torch, name, t, batch_dim, compression):
    """(entry, bytes) of t: the storage from the first element FORMAT.md saves to the last it reaches, little-endian."""
    where, dtname, data = f"tensor {name!r}", str(t.dtype).replace("torch.", ""), b""
    require(t.dim() <= MAX_DIMS, ValueError, "%s: %d dims, at most %d are supported", where, t.dim(), MAX_DIMS)
    t, (itemsize, raw_name) = t.detach().resolve_neg(), DTYPE_SIZES[dtname]
    shape, strides, recorded = [int(n) for n in t.shape], [int(s) for s in t.stride()], int(t.storage_offset())
    require(all(s >= 0 for s in strides), ValueError, "%s: negative strides %s are not supported", where, strides)
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
        require(t.device.type == "cpu", RuntimeError, "%s: cannot copy it from %s (%s: %s); after a CUDA error (a "
                "device-side assert) the GPU memory cannot be read: keep a CPU copy of the batch and pass that", where,
                t.device, type(e).__name__, e)
        raise
    data = bytes(data) + bytes((elements - have) * itemsize) if have < elements else data
    if compression == "zstd":
        require(importlib.util.find_spec("zstandard"), RuntimeError, "compression 'zstd' needs the Python module "
                "'zstandard' (pip install zstandard); write with compression='none' instead")
        zc = importlib.import_module("zstandard").ZstdCompressor(level=3, write_content_size=True)
        data = zc.compress(bytes(data))
    payload = {"offset": 0, "length": len(data), "compression": compression, "crc32": zlib.crc32(data) & 0xFFFFFFFF}
    entry = {"name": name, "dtype": dtname, "shape": shape, "strides": strides, "offset": offset,
             "batch_dim": batch_dim, "storage_elements": elements, "payload": payload}
    return (dict(entry, recorded_offset=recorded) if recorded != offset else entry), data  # as docs/FORMAT.md says


def _attr_value(v, where):
    if v is None or isinstance(v, (bool, str, int, float)):
        require(not isinstance(v, float) or math.isfinite(v), ValueError, "%s: %r cannot be written as JSON", where, v)
        return _clean_str(v) if isinstance(v, str) else int(v) if is_int(v) else v
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
               "exit_status": (error.code if is_int(error.code) else None) if isinstance(error, SystemExit) else 1}
    elif isinstance(error, str):
        m = _EXCEPTION_NAME_RE.match(error)
        out = {"text": error.rstrip("\r\n"), "exception": m.group(1).rsplit(".", 1)[-1] if m else None}
    elif isinstance(error, dict):
        require(not set(error) - ERROR_KEYS, ValueError, "error: unknown keys %s (want text, exception, exit_status)",
                sorted(set(error) - ERROR_KEYS))
        out = dict(error, text=error.get("text"))
        for k, typ, want in (("text", str, "a string"), ("exception", str, "a string"), ("exit_status", int, "an int")):
            v = out.get(k)  # None: left out, but for text
            require(isinstance(v, typ) and not isinstance(v, bool) or v is None and k != "text", TypeError,
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
            "argv": json.dumps([str(a) for a in sys.argv]),  # sys.argv again while a replay imports the step's module
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
        require(k in names, ValueError, "batch_dims: no tensor named %r (tensors: %s)", k, ", ".join(names))
    for name, t in items:
        d = batch_dims.get(name, 0 if t.dim() > 0 else None)  # a 0-d tensor has no axis to batch along
        if d is not None:
            require(is_int(d), TypeError, "batch_dims[%r]: want an int or None, got %r", name, d)
            require(-t.dim() <= d < t.dim(), ValueError, "batch_dims[%r]: axis %r is out of range for a %d-dim tensor",
                    name, d, t.dim())
        axes[name] = d + t.dim() if d is not None and d < 0 else d
    for name, t in [x for x in items if axes[x[0]] is not None]:
        d, n = axes[name], int(t.shape[axes[name]])
        if samples is None:
            samples, first = n, name
        elif n != samples:
            require(lenient, ValueError, "tensor %r: %d samples along batch axis %d, but %s %d; mark a shared tensor "
                    "with batch_dims={%r: None}", name, n, d, f"tensor {first!r} has" if first else "the batch has",
                    samples, name)
            axes[name] = None
            notes.append(f"{name}: recorded as shared: {n} along axis {d}, the batch has {samples} samples")
    return axes, samples


def _pads(items, axes, samples, padded, lengths):
    require(lengths is not None, ValueError, "padded: give lengths=, one length per sample along the padded dims")
    lengths = [int(n) for n in (lengths.tolist() if hasattr(lengths, "tolist") else lengths)]
    require(len(lengths) == samples, ValueError, "lengths: %d lengths for %d samples", len(lengths), samples)
    tensors, out = dict(items), {}
    for name, d in dict(padded).items():
        require(name in tensors, ValueError, "padded: no tensor named %r (tensors: %s)", name,
                ", ".join(sorted(tensors)))
        require(is_int(d), TypeError, "padded[%r]: want a dim (an int), got %r", name, d)
        t, d = tensors[name], d + tensors[name].dim() if d < 0 else d
        require(axes[name] is not None and 0 <= d < t.dim() and d != axes[name], ValueError,
                "padded[%r]: dim %r is not a dim of this batched tensor other than its batch axis", name, padded[name])
        long = [n for n in lengths if not 0 <= n <= t.shape[d]] + [0]
        require(len(long) == 1, ValueError, "padded[%r]: length %d outside [0, %d], the padded size", name, long[0],
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
         compression="none", tensors=None, _failed=False, _window=None, _loader=None):
    """Write one batch to `path` atomically: `batch` as the loader yields it (tensors batched along axis 0 unless
    batch_dims says otherwise), with op and attrs or the step, state, error and meta: docs/RECORDING.md."""
    torch, lenient = torch_module(), bool(_failed)  # lenient (recording a crash): what cannot be encoded is noted
    require(batch is None or tensors is None, TypeError, "save: give the batch once (batch or tensors=)")
    batch = tensors if batch is None else batch
    require(batch is not None and (lenient or not isinstance(batch, (dict, list, tuple)) or len(batch) > 0), ValueError,
            "no batch to save (it is empty)")
    require(compression in COMPRESSIONS, ValueError, "compression: %r, want one of %s", compression,
            ", ".join(COMPRESSIONS))
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
    if sample_ids is None and _loader is not None:  # none given or in the batch: the DataLoader's dataset indices
        sample_ids, meta = _loader[0], dict(_loader[1], **dict(meta or {}))
    ids = None if sample_ids is None else [_clean_str(s if isinstance(s, str) else str(s)) for s in (
        sample_ids.tolist() if hasattr(sample_ids, "tolist") else sample_ids)]
    samples = len(ids) if samples is None and ids is not None else samples or 0
    long, size = max(map(len, ids or [""])) > _MAX_LEAF, len(encode_manifest(ids)) if ids else 0  # one part
    why = (f"an id over {_MAX_LEAF} characters" if long else f"{human_size(size)} of JSON, more than a manifest "
           "holds (64 MiB)" if size > MAX_MANIFEST else f"{len(ids or ())} ids for {samples} samples")
    if ids is not None and (len(ids) != samples or long or size > MAX_MANIFEST):  # dropped alone, and named
        require(lenient, ValueError, "sample_ids: %s", why)
        notes.append(f"sample_ids: {why}: not recorded")
        ids = None
    pads, state_items = {}, []
    with _noted(lenient, notes, "padded: {e}: the batch is reduced without re-padding", (TypeError, ValueError)):
        pads = _pads(items, axes, samples, padded, lengths) if padded else {}
    require(op is None or isinstance(op, str), TypeError, "op: want a string, got %s", type(op).__name__)
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
            require(isinstance(state, dict), TypeError,
                    "state: want a dict name -> model, optimizer, ... or state_dict, "
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
        require(isinstance(k, str), TypeError, "meta: keys must be strings, got %r", k)
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
        blobs += [bytes(aligned(cursor) - cursor), blob]
        entry["payload"]["offset"] = cursor = aligned(cursor)
        cursor += entry["payload"]["length"]
        entries.append(dict(entry, **({"pad": pads[name]} if name in pads else {})))
        if in_state:
            state_bytes[0] += entry["storage_elements"] * DTYPE_SIZES[entry["dtype"]][0]
            state_bytes[1] += entry["payload"]["length"]
    manifest["tensors"] = entries
    if failed:
        manifest["structure"] = tree  # a flat batch too: its skipped leaf needs one
        for node in [manifest.get("structure"), manifest.get("state")] + [
                s["structure"] for s in manifest.get("window", {}).get("steps", [])]:
            _replace_leaves(node, failed)
    require(tree_values(manifest) <= MAX_TREE_VALUES, ValueError, "structure, state and window: more than %d JSON "
            "values (a reader refuses them): pass fewer per-sample values, or the tensors alone", MAX_TREE_VALUES)
    version = 3 if "window" in manifest else 2 if {"structure", "step", "state"} & set(manifest) or pads else 1
    require(len(mbytes := encode_manifest(manifest)) <= MAX_MANIFEST, ValueError, "manifest: %d bytes, at most %d are "
            "allowed", len(mbytes), MAX_MANIFEST)
    head = HEADER.pack(MAGIC, version, 0, len(mbytes), zlib.crc32(mbytes) & 0xFFFFFFFF, 0) + mbytes
    digest = _atomic_write(os.fspath(path), [head + bytes(aligned(len(head)) - len(head))] + blobs)  # payloads at P
    try:  # the file is the user's, so that reduce runs the step it names, with no flag
        sign_as_mine(path, digest)
    except OSError as e:  # the recording is kept all the same
        notes.append(f"{path}: not marked as yours in {trust_dir()} ({e}): reduce asks you to `reduce trust` it")
    for note in notes if _failed != "kept" else ():  # a batch kept before its step is saved quietly
        warn(note)
    if "state" in manifest and _failed != "kept":
        keys, (size, stored) = ", ".join(manifest["state"].get("keys", [])), (human_size(n) for n in state_bytes)
        warn(f"recorded the state{' at the window start' if _window else ''} ({keys}): {size}, {stored} in the file")
    return path


def human_size(n):
    return f"{n / 2.0**20:.1f} MiB" if n >= 2**20 else f"{n / 2.0**10:.1f} KiB"


def _ids_of(fl, samples, sample_ids):
    """The sample ids: the given ones, else a per-sample list under an id key (_ID_KEYS) or of distinct strings."""
    lists = [(p.rpartition(".")[2], v) for p, v in fl.per_sample if len(v) == samples] if sample_ids is None else []
    return ([v for k, v in lists if k in _ID_KEYS and all(is_int(x) or isinstance(x, str) for x in v)] +
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
    require(os.path.isabs(d), OSError, "no trust store: set REDUCE_TRUST_DIR (or HOME) to an absolute path")
    return d


def sign_as_mine(path, digest=None):  # docs/TRUST.md; without a digest, forget path's
    if digest is None:  # keep="disk": the batch kept for a step that ended goes, and its entry with it
        return os.unlink(os.path.join(trust_dir(), _signed.pop(os.path.abspath(path))[7:] + ".json"))
    os.makedirs(trust_dir(), 0o700, exist_ok=True)
    entry = {"digest": digest, "kind": "recording", "path": os.path.abspath(path)}
    _atomic_write(os.path.join(trust_dir(), digest[7:] + ".json"), [json.dumps(entry).encode()])
    _signed[entry["path"]] = digest


def _is_scalar(v):
    return isinstance(v, SCALARS) and not (isinstance(v, float) and not math.isfinite(v))


def type_path(obj):  # module:qualname, each part as CLASS_RE reads it ("f.<locals>.Rec": "f._locals_.Rec")
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
            if str(x.dtype).replace("torch.", "") not in DTYPE_SIZES:
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
            if x and all(isinstance(v, SCALARS) for v in x) and len(x) == self.samples:
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
                if not (isinstance(k, str) and _clean_str(k) == k or is_int(k)):
                    keys[i] = None if (s := _clean_str(str(k))) in keys else s
                    self.notes.append(f"{path or 'batch'}: key {k!r} ({type_path(k)}) " + (
                        f"recorded as {keys[i]!r}" if keys[i] else "skipped: its str() is another key"))
            keys, values = [k for k in keys if k is not None], [v for k, v in zip(keys, values) if k is not None]
            # A dict, or a subclass of it (OrderedDict, a state_dict); another mapping needs str keys.
            node = {"kind": "dict"} if isinstance(x, dict) else {"kind": "mapping", "type": type_path(x)}
            if node["kind"] == "mapping" and any(not isinstance(k, str) for k in keys):
                return self.skip(path, x, "a mapping object with a key that is not a str")
            return dict(node, keys=keys, items=self.items(keys, values, path)) if keys else node
        if isinstance(x, SCALARS):
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
        if isinstance(x, (list, tuple)) and x and all(isinstance(v, SCALARS) for v in x):
            return len(x)
        if id(x) not in seen and len(seen) < 1 << 16 and not seen.add(id(x)):
            queue.extend(x if isinstance(x, (list, tuple)) else x.values() if isinstance(x, dict) else ())
    return 0


class State(dict):
    """save(state=)'s record: name -> state_dict ("rng": the generators'); restore(model=m) loads one."""

    def restore(self, **objects):
        for k, obj in objects.items():
            require(k in self, KeyError, "state: nothing recorded under %r (recorded: %s)", k, ", ".join(sorted(self)))
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
    require(fn is not None or QUALNAME_RE.fullmatch(mod) and QUALNAME_RE.fullmatch(qual), ValueError, f"step "
            f"{step!r}: want module:qualname, dotted Python names")
    require(getattr(step, "__self__", None) is None or isinstance(step.__self__, type), ValueError,
            f"step {step!r} is a "
            "bound method: pass a function of the batch (reduce cannot rebuild the object it is bound to)")
    require(mod and qual and "<" not in qual, ValueError, f"step {step!r} cannot be imported by name (a lambda or a "
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


def tree_values(m):  # the JSON values of a manifest's trees (structure, state, window), counted to one past the limit
    todo, n = [m[k] for k in ("structure", "state", "window") if k in m], 0
    while todo and n <= MAX_TREE_VALUES:
        x, n = todo.pop(), n + 1
        todo.extend(x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())
    return n
