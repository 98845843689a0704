"""reduce_batch.reader: a batch file read back: load (the strict reader, the Go reader's checks: both
answer one corpus alike), read_raw, read_manifest, and Batch. Nothing a file names is imported."""

import importlib.util
import json
import keyword
import os
import re
import sys
import zlib

from .fileformat import (
    ALIGN,
    CLASS_RE,
    COMPRESSIONS,
    CONTAINERS,
    DEFAULT_MAX_SIZE,
    DTYPE_SIZES,
    DTYPES,
    ERROR_KEYS,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    INT64_MAX,
    MAGIC,
    MAX_DEPTH,
    MAX_DIMS,
    MAX_JSON_DEPTH,
    MAX_MANIFEST,
    MAX_TREE_VALUES,
    MAX_ZSTD_WINDOW,
    NODE_KEYS,
    PAYLOAD_KEYS,
    QUALNAME_RE,
    SCALARS,
    SURROGATE_RE,
    TENSOR_KEYS,
    TOP_KEYS,
    BatchFileError,
    State,
    aligned,
    is_i64,
    is_int,
    require,
    tensor_words,
    torch_module,
    tree_values,
    type_path,
    warn,
)

_made = {}  # ("module:qualname", fields) -> the named tuple class made for it



def _trusted(types):
    """load()'s `types` (classes, {"module:qualname": class}, or a function of one to a class or None), a function."""
    if callable(types) and not isinstance(types, type):
        return types
    if not isinstance(types, dict):
        types = {type_path(c): c for c in ([types] if isinstance(types, type) else types or ())}
    require(all(isinstance(c, type) for c in types.values()), TypeError, "load: types: want classes")
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

    def __init__(self, path, max_size):
        self.path, self.max_size, self.version = path, max_size, FORMAT_VERSION

    def need(self, ok, field, msg, *args):
        if not ok:
            raise BatchFileError(f"{self.path}: {field}: {msg % args if args else msg}")

    def keys(self, obj, allowed, where, nullable=()):  # keys spelt exactly, and no null standing for an absent one
        bad = [k for k in sorted(obj) if k not in allowed or obj[k] is None and k not in nullable][:1]
        self.need(not bad or bad[0] in allowed, where, "unknown key %s", json.dumps(bad[0] if bad else ""))
        self.need(not bad, f"{where}: {''.join(bad)}", "null (leave an absent key out)")

    def int_field(self, obj, key, where, minimum=0, maximum=INT64_MAX):
        self.need(is_int(v := obj.get(key)), where, "%s: want an integer, got %s", key, json.dumps(v))
        self.need(minimum <= v <= maximum, where, "%s: %d is out of range [%d, %d]", key, v, minimum, maximum)
        return v

    def manifest(self, mbytes):
        def bad_constant(name):
            raise ValueError(f"{name} is not JSON")
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
        self.need(set(m) <= TOP_KEYS, "manifest", "unknown key %s", json.dumps(sorted(set(m) - TOP_KEYS)[:1]))
        lone = [k for k in sorted(m) if (b"\\ud" in mbytes or b"\\uD" in mbytes) and SURROGATE_RE.search(
            json.dumps(m[k], ensure_ascii=False))][:1]  # Go would read U+FFFD, Python's json the surrogate
        self.need(not lone, "".join(lone), "a lone surrogate (\\ud800 to \\udfff) is no Unicode text")
        self.need(tree_values(m) <= MAX_TREE_VALUES, "manifest", "structure, state and window hold more than %d "
                  "JSON values", MAX_TREE_VALUES)
        self.keys(m, TOP_KEYS, "manifest")
        samples = self.int_field(m, "samples", "manifest")
        self.need(isinstance(ids := m.get("sample_ids", ()), list | tuple) and all(isinstance(s, str) for s in ids),
                  "sample_ids", "want an array of strings")
        self.need(len(ids) == samples or "sample_ids" not in m, "sample_ids", "%d ids for %d samples", len(ids),
                  samples)
        self.need(isinstance(m.get("op", ""), str), "op", "want a string")
        self.need(isinstance(attrs := m.get("attrs", {}), dict) and all(isinstance(v, SCALARS) or isinstance(
            v, list) and all(isinstance(x, SCALARS) for x in v) for v in attrs.values()), "attrs", "want an object of "
            "numbers, strings, booleans, null or arrays of those")
        if (err := m.get("error")) is not None:  # keys() refused a null
            self.need(isinstance(err, dict), "error", "want an object")
            self.keys(err, ERROR_KEYS, "error")
            self.need(isinstance(err.get("text"), str) and isinstance(err.get("exception", ""), str) and
                      is_i64(err.get("exit_status", 0)), "error", "want text, exception (strings), exit_status")
        self.need(isinstance(meta := m.get("meta", {}), dict) and all(isinstance(v, str) for v in meta.values()),
                  "meta", "want an object of strings")
        self.need(isinstance(tensors := m.get("tensors"), list), "tensors", "want an array")
        for key, v in (("structure", 2), ("step", 2), ("state", 2), ("window", 3)):
            self.need(key not in m or self.version >= v, key, "a version %d key in a version %d file", v, self.version)
        self.need(isinstance(step := m.get("step", {"module": "m", "qualname": "q"}), dict), "step", "want an object")
        self.keys(step, ("module", "qualname", "file", "cwd"), "step")
        self.need(all(isinstance(v, str) for v in step.values()) and all(QUALNAME_RE.fullmatch(step.get(k, "")) for k
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
            self.need(total <= self.max_size, tensor_words(e["name"]),
                      "storage_elements: the storage adds up to more than %d "
                      "bytes (the size limit)", self.max_size)
        late = [e["name"] for e in tensors[min([i for i, e in enumerate(tensors) if e["name"] in owner] or [0]):]
                if e["name"] not in owner and owner]
        self.need(not late, tensor_words(late[0] if late else ""),
                  "the batch's and the state's tensors come before the "
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
                    e, where = by_name[name], tensor_words(name)
                    self.need(name not in used, where, "named by the batch or the state and by window: steps[%d]", k)
                    self.need(e["batch_dim"] is None or e["shape"][e["batch_dim"]] == st["samples"], where,
                              "batch_dim: size %d along axis %d, but window: steps[%d] has %d samples",
                              e["shape"][e["batch_dim"] or 0], e["batch_dim"] or 0, k, st["samples"])
                    self.need("pad" not in e or len(e["pad"]["lengths"]) == st["samples"], where,
                              "pad: lengths: want one per sample of window: steps[%d]", k)
                used |= mine
            for e in tensors:
                self.need(e["name"] in used, tensor_words(e["name"]), "in neither the structure nor the state")
                self.need(e["name"] not in in_state or (e.get("batch_dim") is None and "pad" not in e),
                          tensor_words(e["name"]), "a state tensor has no batch axis (batch_dim null)")
        return m

    def node(self, node, where, samples, names, used, depth=0):  # a node's check: the Go reader's rules
        self.need(isinstance(node, dict), where, "want a node (an object)")
        self.need(isinstance(kind := node.get("kind"), str) and kind in NODE_KEYS, where, "unknown kind %s",
                  json.dumps(kind))
        self.need(not (extra := set(node) - NODE_KEYS[kind] - {"kind"}), where, "key %s does not belong to kind %s",
                  "".join(sorted(extra)[:1]), kind)
        types = {"name": str, "type": str, "reason": str, "tuple": bool, "keys": list, "items": list, "values": list}
        for k in sorted(set(node) & set(types)):
            self.need(isinstance(node[k], types[k]), f"{where}: {k}", "want a %s", types[k].__name__)
        self.need(all(isinstance(v, SCALARS) for v in node.get("values", ())), where,
                  "values: want strings, numbers, booleans or null")
        level, d = [node.get("value")], 0
        while level and kind == "value":  # a value without objects, its arrays nested at most MAX_DEPTH deep
            self.need(dict not in (t := set(map(type, level))) and (d < MAX_DEPTH or list not in t), where + ": value",
                      "want a JSON value without objects, its arrays nested at most %d deep", MAX_DEPTH)
            level, d = [c for x in level if isinstance(x, list) for c in x], d + 1
        self.need(kind not in CONTAINERS or depth < MAX_DEPTH, where, "more than %d containers deep", MAX_DEPTH)
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
            self.need(kind == "dict" or CLASS_RE.fullmatch(node.get("type", "")), where, "type %s: want "
                      "module:qualname", json.dumps(node.get("type")))
            self.need(len(keys) == len(items), where, "want as many keys as items")
            self.need(all(isinstance(k, str) or kind == "dict" and is_i64(k) for k in keys), where,
                      "keys: want strings (a dict's: or integers)")
            self.need(len(set(keys)) == len(keys), where, "duplicate keys")

    def tensor(self, e, i, names, owner, samples):  # owner: a window step's tensors' samples
        self.need(isinstance(e, dict), f"tensors[{i}]", "want an object")
        where = tensor_words(name) if isinstance(name := e.get("name"), str) and name else f"tensors[{i}]"
        self.keys(e, TENSOR_KEYS, where, ("batch_dim",))
        self.need(isinstance(name, str) and name, f"tensors[{i}]: name", "missing or empty")
        self.need(name not in names, f"tensors[{i}]: name", "%s already names another tensor", json.dumps(name))
        names.add(name)
        for key in TENSOR_KEYS - {"pad", "recorded_offset"}:
            self.need(key in e, f"{where}: {key}", "missing" + " (null for a shared tensor)" * (key == "batch_dim"))
        dt, shape, strides = e["dtype"], e["shape"], e["strides"]
        self.need(isinstance(dt, str) and dt in DTYPE_SIZES, where, "dtype: unknown dtype %s (want one of %s)",
                  json.dumps(dt), ", ".join(DTYPES))
        self.need(isinstance(shape, list) and len(shape) <= MAX_DIMS, where,
                  "shape: want an array of at most %d integers", MAX_DIMS)
        self.need(isinstance(strides, list) and len(strides) == len(shape), where,
                  "strides: want one integer per dim (%d)", len(shape))
        numel, itemsize = 1, DTYPE_SIZES[dt][0]
        for k, n in enumerate(shape):
            self.need(is_int(n) and n >= 0, where, "shape[%d]: %s, want an integer >= 0", k, json.dumps(n))
            numel *= n
            self.need(numel <= INT64_MAX, where, "shape: %s overflows", shape)
        for k, s in enumerate(strides):
            self.need(is_int(s) and 0 <= s <= INT64_MAX, where, "strides[%d]: %s, want an integer >= 0", k,
                      json.dumps(s))
        offset, elements = self.int_field(e, "offset", where), self.int_field(e, "storage_elements", where)
        self.need(elements * itemsize <= INT64_MAX, where, "storage_elements: %d overflows", elements)
        ro = self.int_field(e, "recorded_offset", where) if "recorded_offset" in e else 0
        self.need(ro == 0 or ro >= offset, where, "recorded_offset %d: below offset %d", ro, offset)
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides)) if numel > 0 else -1  # -1: reaches none
        self.need(last <= INT64_MAX and last + 1 <= elements, where, "offset %d and strides %s reach storage element "
                  "%d, outside the %d stored", offset, strides, last, elements)
        bd, pad = e["batch_dim"], e.get("pad")
        if bd is not None:
            self.need(is_int(bd) and 0 <= bd < len(shape), where, "batch_dim: %s is out of range for %d dims",
                      json.dumps(bd), len(shape))
            self.need(shape[bd] == samples or name in owner, where, "batch_dim: size %d along axis %d, but the batch "
                      "has %d samples", shape[bd], bd, samples)
        if pad is not None:
            self.need(self.version >= 2, where, "pad: a version 2 key in a version %d file", self.version)
            self.need(isinstance(pad, dict) and set(pad) == {"dim", "lengths"} and is_int(pad["dim"]) and
                      isinstance(pad["lengths"], list) and all(is_i64(n) for n in pad["lengths"]), where,
                      "pad: want {dim, lengths}, integers")
            self.need(bd is not None, where, "pad: a shared tensor has no samples to pad")
            self.need(0 <= pad["dim"] < len(shape) and pad["dim"] != bd, where, "pad: want a dim other than the "
                      "batch axis")
            ls, size = pad["lengths"], shape[pad["dim"]]
            self.need((len(ls) == samples or name in owner) and all(0 <= n <= size for n in ls), where,
                      "pad: lengths: want one length in [0, %d] per sample", size)
        self.need(isinstance(p := e["payload"], dict), where, "payload: want an object")
        self.keys(p, PAYLOAD_KEYS, f"{where}: payload")
        for key in PAYLOAD_KEYS:
            self.need(key in p, f"{where}: payload.{key}", "missing")
        poff = self.int_field(p, "offset", where + ": payload")
        self.need(poff % ALIGN == 0, where, "payload: offset %d is not a multiple of %d", poff, ALIGN)
        plen = self.int_field(p, "length", where + ": payload")
        self.int_field(p, "crc32", where + ": payload", 0, 0xFFFFFFFF)
        self.need(p["compression"] in COMPRESSIONS, where, "payload: unknown compression %s (want none or zstd)",
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
        _, self.version, flags, mlen, mcrc, reserved = HEADER.unpack(head)
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
        m, p = self.manifest(mbytes), aligned(HEADER_SIZE + len(mbytes))
        pos = 0  # the end of the previous payload, from P: each payload starts at the next multiple of 64
        for e in m["tensors"]:
            off, n, where = e["payload"]["offset"], e["payload"]["length"], tensor_words(e["name"])
            self.need(off >= pos, where, "payload: offset %d overlaps the previous payload, which ends at %d", off, pos)
            self.need(off == aligned(pos), where, "payload: offset %d leaves a gap (want %d): payloads follow each "
                      "other in tensor order", off, aligned(pos))
            self.need(p + off + n <= size, where, "payload: bytes [%d, %d) lie outside the file (%d bytes; "
                      "truncated?)", p + off, p + off + n, size)
            pos = off + n
        self.need(size <= p + pos, "payloads", "%d trailing bytes after the last payload", size - p - pos)
        self.need(size == p + pos, "padding", "truncated: the file ends at %d, before the payload area at %d", size, p)
        self.need(not any(f.read(p - HEADER_SIZE - len(mbytes))), "padding", "non-zero bytes between the manifest "
                  "and the payload area")
        return m, p

    def payload(self, f, e, p):
        where, pl, want = tensor_words(e["name"]), e["payload"], e["storage_elements"] * DTYPE_SIZES[e["dtype"]][0]
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
    nothing the file names: a named tuple or mapping is rebuilt with its class only when `types` lists it (docs/TRUST.md)."""
    torch, (m, storages) = torch_module(), read_raw(path, max_size)
    device, tensors, big = torch.device(device), {}, sys.byteorder != "little"
    for e, buf in zip(m["tensors"], storages):  # buf is empty where storage_elements is 0 (frombuffer refuses it)
        dt = getattr(torch, e["dtype"])
        st = torch.frombuffer(buf, dtype=torch.uint8 if big else dt) if buf else torch.empty(0, dtype=dt)
        st = st.view(-1, DTYPE_SIZES[e["dtype"]][0]).flip(1).contiguous().view(dt).view(-1) if big and buf else st
        tensors[e["name"]] = torch.as_strided(st.to(device), e["shape"], e["strides"], e["offset"])
    return Batch(os.fspath(path), m, tensors, types)
