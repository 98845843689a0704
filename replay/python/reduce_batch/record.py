"""reduce_batch.record: record_on_failure, and the window of earlier steps it keeps."""

import contextlib
import json
import os
import sys

from .fileformat import (
    Flattener,
    human_size,
    is_int,
    require,
    rng_state,
    save,
    sign_as_mine,
    torch_module,
    warn,
)
from .hook_torchrun import ranked

# reduce recorder joins what follows this line (replay.PythonModule): it uses the standard library
# imports above, fileformat's names and hook_torchrun's, never another module.


class record_on_failure:
    """On an exception in the block, save the batch (a CPU copy, or a callable returning it) to `path` with the error,
    and let it go on; other keywords are save()'s; `.saved`: whether it wrote (never in a replay: REDUCE_REPLAY).
    window=K: the steps since the older of the last two copies of state= (one every K steps) too
    (docs/RECORDING.md, "window").
    keep="disk" writes the batch before the step, removed after it: left by a process that aborts (C++ terminate)."""

    def __init__(self, path, batch=None, *, tensors=None, window=None, keep=None, **kwargs):
        Yielded.watch()
        require("error" not in kwargs, TypeError, "record_on_failure: error is the exception raised in the block")
        require(keep in (None, "disk"), ValueError, "keep: want None or 'disk' (the batch written before the step)")
        self.keep = keep == "disk" and not os.environ.get("REDUCE_REPLAY")
        require(window is None or is_int(window) and window > 0, ValueError, "window: want a number of steps > 0")
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
                self.batch, (self.kept, kwargs) = _called(self.batch), ranked(self.path, self.kwargs, "kept_at")
                save(self.kept, self.batch, _failed="kept", **kwargs)
        except Exception as e:  # noqa: BLE001  (the training step runs all the same)
            self.keep = warn(f"warning: keep=\"disk\" for {self.path}: {type(e).__name__}: {e}; not kept this step")
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or not isinstance(exc, Exception):
            if self.keep and os.path.lexists(self.kept):
                os.unlink(self.kept)
                with contextlib.suppress(OSError, KeyError):
                    sign_as_mine(self.kept)
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
        self.path, self.kwargs = ranked(self.path, self.kwargs)  # under torch.distributed, each rank's own file
        try:
            batch = _called(self.batch)
        except Exception as e:  # noqa: BLE001  (the crash is recorded all the same)
            batch = warn(f"the batch callable raised {type(e).__name__}: {e}; recording the error alone") or {}
        ids, meta = Yielded.of(batch)
        if ids:  # the batch a DataLoader yielded: its dataset indices, where no ids are given or in the batch
            self.kwargs = dict(self.kwargs, _loader=(ids, meta))
        keep = {k: v for k, v in self.kwargs.items() if k in ("step", "sample_ids", "op", "attrs", "meta", "_loader")}
        first, w = self.kwargs, self.window
        if w is not None and w.steps:  # with the steps since the older state copy, and that copy as the state
            start, state = w.copies[0]  # the older copy: the first step's holds one
            given = self.kwargs.get("state")  # its keys the copy has not (a Lightning module's record) kept
            first = dict(self.kwargs, state=None if given is None else dict(
                         {k: v for k, v in given.items() if k not in (state or {})}, **(state or {})),
                         _window=(w.count - 1, start, [s for s in w.steps[:-1] if s[0] >= start]))
        tries = [(first, batch, "")] * (first is not self.kwargs) + [(self.kwargs, batch, ""), (keep, batch, ""), (
            {k: keep[k] for k in ("op", "meta") if k in keep}, lambda: _tensors_alone(torch_module(), batch),
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


class Yielded:
    """The batches DataLoaders yielded last with the dataset indices their batch samplers gave (through a Subset the
    wrapped dataset's too), found again by a tensor a batch holds: record_on_failure's and the hooks' sample ids where
    none are given (docs/RECORDING.md, "Sample ids")."""

    recent = []  # noqa: RUF012  [(batch, indices, wrapped, position)], the last few: a loader may fetch ahead

    @classmethod
    def watch(cls):
        """Once torch's DataLoader is imported (at this module's import, or a record_on_failure's): the iterators
        made from then on note the indices of what they yield (an iterator made before has none)."""
        it = getattr(sys.modules.get("torch.utils.data.dataloader"), "_BaseDataLoaderIter", None)
        if it is None or it.__dict__.get("_reduce_yielded"):
            return
        next_index, next_batch, reset = it._next_index, it.__next__, it._reset

        def _reset(self, *args, **kwargs):  # a pass starts (and fetches ahead): its indices from here on
            self.__dict__["_reduce_yielded_q"] = []
            return reset(self, *args, **kwargs)

        def _next_index(self):  # a pass's first (a single-process iterator has no _reset at its start)
            if not getattr(self, "_send_idx", 0) and not getattr(self, "_num_yielded", 1):
                self.__dict__.setdefault("_reduce_yielded_q", [])
            index = next_index(self)
            if "_reduce_yielded_q" in self.__dict__:
                self._reduce_yielded_q.append(index)
            return index

        def __next__(self):
            data = next_batch(self)
            queue = self.__dict__.get("_reduce_yielded_q")
            if queue:
                cls.kept(data, queue.pop(0), self._dataset, getattr(self, "_num_yielded", 0))
            return data

        it._next_index, it.__next__, it._reset, it._reduce_yielded = _next_index, __next__, _reset, True

    @classmethod
    def kept(cls, data, index, dataset, position):
        with contextlib.suppress(Exception):  # a sampler's own kind of index: no ids
            ids, wrapped, d = [int(i) for i in (index if isinstance(index, (list, tuple)) else [index])], None, dataset
            while type(d).__name__ == "Subset" and hasattr(d, "indices"):
                wrapped, d = [int(d.indices[i]) for i in (wrapped or ids)], d.dataset
            cls.recent = [*cls.recent[-2:], (data, ids, wrapped, position)]

    @classmethod
    def of(cls, batch):
        """(sample ids, meta) of a batch a DataLoader yielded lately, by a tensor both hold; else (None, None)."""
        held = tensor_ids(batch)
        for data, ids, wrapped, position in reversed(cls.recent):
            if held & tensor_ids(data):
                where = dict({"position": position - 1}, **({"wrapped": wrapped} if wrapped else {}))
                return [str(i) for i in ids], {"sample_ids": "dataset index", "batch_position": json.dumps(where)}
        return None, None


def tensor_ids(x, depth=0):  # the ids of the tensors a batch holds (its containers, a few levels down)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return {id(x)}
    values = () if depth > 3 else x.values() if hasattr(x, "keys") and hasattr(x, "values") else \
        x if isinstance(x, (list, tuple)) else ()
    out = set()
    with contextlib.suppress(Exception):
        for v in values:
            out |= tensor_ids(v, depth + 1)
    return out


Yielded.watch()


def _tensors_alone(torch, batch):  # the recorder's last resort: the tensors a batch holds, by path
    return (fl := Flattener(torch, "", None)).node(batch) and dict(fl.tensors)


def _called(batch):
    return batch() if callable(batch) and not hasattr(batch, "__getitem__") else batch


def __getattr__(name):  # a hook's name, where a user of the recorder alone may look for it
    raise AttributeError(f"module 'reduce_batch' has no attribute {name!r}" + ("" if name.startswith("_") else (
        f": a framework hook's is reduce_batch.hooks.{name} where the package is installed, reduce_hooks.{name} "
        "where the hooks are vendored (reduce recorder --hooks > reduce_hooks.py)")))


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
        torch = torch_module()
        if self.count % self.k == 0:
            values = dict({str(n): copied(torch, v.state_dict() if callable(getattr(v, "state_dict", None)) else v)
                           for n, v in (state or {}).items()}, rng=copied(torch, rng_state(torch)))
            self.copies = (self.copies + [(self.count, values)])[-2:]
            self.steps = [s for s in self.steps if s[0] >= self.copies[0][0]]
        self.steps, self.count = self.steps + [(self.count, copied(torch, batch), sample_ids)], self.count + 1
        if not self.said and len(self.steps) > 1:
            self.said, size = True, [human_size(_nbytes(torch, x)) for x in (self.steps[0][1], self.copies[-1][1])]
            warn(f"a window of {self.k} steps: CPU copies of the last {self.k} to {2 * self.k} batches "
                 f"({size[0]} each) and of the state every {self.k} steps ({size[1]}, two held)")

