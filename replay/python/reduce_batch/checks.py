"""reduce_batch.checks: the checks of a batch's outputs and of the culprit samples, and the recorded failure."""

import math
import re
import sys

from .fileformat import torch_module


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields") and hasattr(type(x), "_make")


def outputs(out):
    if isinstance(out, dict):
        return dict(out)
    if isinstance(out, (tuple, list)):
        return {f"output{i}": v for i, v in enumerate(out)}
    return {"output": out}


def output_values(out, recorded, limit=1 << 16):
    """The outputs `recorded` names (fixture.json's: name, and values or sum) of a step's outputs
    `out` as `reduce judge` reads them (regress.OutputValue): each tensor's dtype, shape, and its
    values in row-major order in float64, or, where the record keeps their sum or there are more
    than `limit`, their sum. An output that is no tensor, or not there, is left out."""
    torch, got, found = torch_module(), outputs(out), []
    for want in recorded:
        t = got.get(want.get("name"))
        if not isinstance(t, torch.Tensor):
            continue
        flat = t.detach().cpu().reshape(-1).to(torch.float64)
        o = {"name": want["name"], "dtype": str(t.dtype).replace("torch.", ""), "shape": [int(n) for n in t.shape]}
        if want.get("sum") is not None or flat.numel() > limit:
            o["sum"] = float(flat.sum())
        else:
            o["values"] = [float(v) for v in flat.tolist()]
        found.append(o)
    return found


def summarize(out):
    """A JSON-able description of a step's or an op's
    output, one dict per tensor or Python number found in it, walking dicts and mappings (keys
    sorted), lists, tuples and named tuples (other values are left out): {"path": where it is,
    its keys and positions joined by "." as reduce names a batch's tensors ("" for a bare
    tensor, "0.loss"), "dtype": torch's name ("float32"; "float", "int" or "bool" for a Python
    number), "shape": [...] ([] for a number), "finite": no element is NaN or infinite (True for
    integers and booleans)}."""
    torch = torch_module()
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
                walk(child, f"{path}.{name}" if path else name)

    walk(out, "")
    return found


def _children(x, sort=False):
    """[(name, part)] of a container as Flattener names a batch's parts: a dict's or a mapping's
    keys (sorted with sort), a named tuple's fields, a list's or a tuple's positions; None for
    anything else (a tensor, an array, a string: a leaf)."""
    torch = torch_module()
    if isinstance(x, (torch.Tensor, str, bytes)):
        return None
    if isinstance(x, getattr(sys.modules.get("numpy"), "ndarray", ())):
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


def _sample_parts(x, rest):
    """The parts of a sample that the dotted name `rest` names, in the order Flattener meets
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
            yield from _sample_parts(child, rest[len(name) + 1:])


def _sample_missing(sample, tensor):
    """Why the sample has nothing named `tensor`: the key missing, and the keys there are."""
    x, done, rest = sample, "", tensor
    while rest:
        children = _children(x)
        where = "the sample" if not done else repr(done)
        if children is None:
            return f"{where} is a {type(x).__name__}, which has no {rest!r}"
        if _is_namedtuple(x):
            children = children + [(str(i), v) for i, v in enumerate(x)]
        matched = [(n, c) for n, c in children if rest == n or rest.startswith(n + ".")]
        if not matched:
            names = [n for n, _ in children]
            if isinstance(x, (list, tuple)) and not _is_namedtuple(x):
                has = f"{type(x).__name__} of {len(x)} items"
            else:
                has = "keys " + (", ".join(repr(n) for n in names[:20]) + (", ..." if len(names) > 20 else "")
                                 if names else "none")
            return "{} has no {!r} (it has {})".format(where, rest.split(".")[0], has)
        name, x = matched[0]
        done, rest = (done + "." + name) if done else name, rest[len(name) + 1:]
    return f"no part named {tensor!r}"


def sample_leaf(sample, tensor):
    parts = list(_sample_parts(sample, tensor))
    if parts:
        return parts[0]
    m = re.match(r"^(.+)#(\d+)$", tensor)  # Flattener's name of the n-th part named alike
    if m:
        parts = list(_sample_parts(sample, m.group(1)))
        if len(parts) >= int(m.group(2)):
            return parts[int(m.group(2)) - 1]
    if tensor == "batch" and _children(sample) is None:
        return sample  # a batch that is one tensor: Flattener names it "batch"
    raise KeyError(f"batch tensor {tensor!r}: {_sample_missing(sample, tensor)}. reduce_sample must return the "
                   "sample as the Dataset yields it, with the keys of the batch, or, where the collate renames or "
                   "makes keys, the collated one-sample batch (collate_fn([sample]))")


def is_array(x):
    return isinstance(x, (torch_module().Tensor, getattr(sys.modules.get("numpy"), "ndarray", ())))


def _python_value(x, tensor, index):
    if is_array(x):
        if tuple(x.shape) != ():
            raise IndexError(f"batch tensor {tensor!r}: index {index} names a part of shape {list(x.shape)} of the "
                             "sample, not one element: give one index per dim (without the batch dim)")
        return x.item()
    if hasattr(x, "item") and tuple(getattr(x, "shape", (None,))) == ():  # a numpy scalar (np.float64 is a float)
        return x.item()
    if isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"batch tensor {tensor!r}: index {index} names a {type(x).__name__} in the sample, not a number")


def _sample_element(leaf, tensor, index):
    x = leaf
    for k, i in enumerate(index):
        if is_array(x):
            rest = [int(j) for j in index[k:]]
            shape = list(x.shape)
            if len(rest) > len(shape) or any(not -n <= j < n for j, n in zip(rest, shape)):
                raise IndexError(f"batch tensor {tensor!r}: index {index} is outside the sample's {type(x).__name__} "
                                 f"of shape {shape} (is the batch's tensor padded past this sample?)")
            x = x[tuple(rest)]
            break
        if isinstance(x, (list, tuple)):
            if not -len(x) <= i < len(x):
                raise IndexError(f"batch tensor {tensor!r}: index {index} is outside the sample's list of {len(x)} "
                                 f"items at dim {k} (is the batch's tensor padded past this sample?)")
            x = x[i]
            continue
        raise IndexError(f"batch tensor {tensor!r}: index {index} goes into a {type(x).__name__} in the sample")
    return _python_value(x, tensor, index)


def _sample_size(x, tensor, dim):
    if is_array(x):
        if not 0 <= dim < len(x.shape):
            raise IndexError(f"batch tensor {tensor!r}: the sample's {type(x).__name__} of shape {list(x.shape)} has "
                             f"no dim {dim}")
        return int(x.shape[dim])
    if isinstance(x, (str, bytes, list, tuple)):
        if dim == 0:
            return len(x)
        if isinstance(x, (list, tuple)):
            return max([_sample_size(c, tensor, dim - 1) for c in x] or [0])  # the size a collate pads to
    raise IndexError(f"batch tensor {tensor!r}: the sample's {type(x).__name__} has no size along dim {dim}")


def _sample_rank(x):
    """The rank of a sample's part: a tensor's or array's dims, a nested list's depth, 0 for a number."""
    if is_array(x):
        return len(x.shape)
    if isinstance(x, (list, tuple)):
        return 1 + (_sample_rank(x[0]) if x else 0)
    return 0


def sample_value(sample, tensor, index, dim=0):
    """The element of one sample, as the user's
    Dataset yields it (before the collate), that the batch tensor `tensor` holds at `index`.
    `tensor` is reduce's name of the batch tensor: its dict keys, named tuple fields and list
    positions joined by "." ("label", "1.mask", "inputs.ids"; "batch" for a batch that is one
    tensor), found in the sample the same way (a dict, a mapping such as BatchEncoding, a list,
    a tuple, a named tuple). `index` is the element's index without the batch dim (a list, []
    for a sample that is one number); the part found is indexed (a tensor, a numpy array, nested
    lists) and the element returned as a Python int, float or bool (a str for a string). With
    index None, the part's size along `dim` (counted without the batch dim): a tensor's shape,
    a list's or a string's length, the longest of nested lists; with index "rank", the part's rank
    (a tensor's dims, a nested list's depth, 0 for a number). KeyError when the sample has no
    such part, naming the key missing and the keys there are."""
    leaf = sample_leaf(sample, tensor)
    if index == "rank":
        return _sample_rank(leaf)
    if index is None:
        return _sample_size(leaf, tensor, int(dim))
    return _sample_element(leaf, tensor, [int(i) for i in index])


_RULE_KINDS = ("range", "finite", "max_size", "rank", "distinct")


def _rule_subject(rule):
    """What a rule's check is about, for its message: "sample 'txt-037': label" from the rule's
    optional "sample", "tensor", "index" and "dim" keys."""
    head = "sample {!r}: ".format(rule["sample"]) if rule.get("sample") is not None else ""
    what = rule.get("tensor") or "the value"
    if what[:1].isdigit():  # an item of a tuple sample: "1" is its [1]
        first, _, rest = what.partition(".")
        what = f"[{first}]" + (f".{rest}" if rest else "")
    if rule.get("kind") == "max_size":
        return f"{head}size of {what} along dim {int(rule.get('dim') or 0)}"
    if rule.get("kind") == "rank":
        return f"{head}rank of {what}"
    if rule.get("index"):
        what = "{}{}".format(what, list(rule["index"]))
    return head + what


def number_text(v):
    return f"{v!r}"


def check_sample_rule(value, rule):
    """Assert that one sample's value (sample_value's)
    obeys the rule reduce found for the failure, a dict: {"kind": "range", "lo", "hi",
    "hi_inclusive"} (lo inclusive; lo or hi None: unbounded), {"kind": "finite"}, or {"kind":
    "max_size", "max", "dim"} (value is a size: sample_value with index None and this dim), or
    {"kind": "rank", "rank"} (value is a rank: sample_value with index "rank"). Its
    optional keys "sample" (the sample's id), "tensor", "index" and "text" (the rule in words)
    go into the message. A "distinct" rule is about several samples: check_distinct."""
    kind = rule.get("kind")
    if kind == "distinct":
        raise ValueError("a distinct rule is about several samples: check it with check_distinct(values, ids)")
    number = isinstance(value, (int, float))  # a bool too
    if kind == "range":
        lo, hi, hi_inclusive = rule.get("lo"), rule.get("hi"), bool(rule.get("hi_inclusive"))
        want = "a value in {}{}, {}{}".format("(-inf" if lo is None else "[", "" if lo is None else number_text(lo),
                                          "inf)" if hi is None else number_text(hi),
                                          "" if hi is None else "]" if hi_inclusive else ")")
        ok = number and not math.isnan(value) and (lo is None or value >= lo) and (
            hi is None or (value <= hi if hi_inclusive else value < hi))
    elif kind == "finite":
        want = "a finite value"
        ok = number and math.isfinite(value)
    elif kind == "max_size":
        want = f"at most {rule['max']}"
        ok = number and value <= rule["max"]
    elif kind == "rank":
        want = "{} ({} dim{})".format(rule["rank"], "no" if rule["rank"] == 0 else rule["rank"],
                                     "" if rule["rank"] == 1 else "s")
        ok = number and value == rule["rank"]
    else:
        raise ValueError("rule kind {!r}: want one of {}".format(kind, ", ".join(_RULE_KINDS)))
    found = " (the rule reduce found: {})".format(rule["text"]) if rule.get("text") else ""
    assert ok, f"{_rule_subject(rule)} = {value!r}, want {want}{found}"


def check_distinct(values, ids):
    """Assert that the samples' values (sample_value's,
    one per id of `ids`) all differ (a "distinct" rule); the message names the ids that share a
    value."""
    values, ids = list(values), list(ids)
    if len(values) != len(ids):
        raise ValueError(f"check_distinct: {len(values)} values for {len(ids)} ids")
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
    assert not shared, "samples share a value, want distinct values: {}".format("; ".join(
        "{} share {!r}".format(", ".join(repr(i) for i in same), v) for v, same in shared))
