"""The hostile batches the recorder once lost, recorded: check_recorder_faults.py DIR writes DIR/<case>.bin.

Each case is a batch (with the exception raised in its step and save()'s keywords) that a recorder must write
whenever the destination is writable: the Go reader's test reads every file back (fixtures/recorder_test.go),
and test_recorder_faults.py checks what each one holds.
"""

import os
import sys
import typing
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reduce_batch as rb  # noqa: E402

MIB = 1 << 20


class Hostile(dict):
    """A mapping that breaks every walk of it."""
    def keys(self):
        raise RuntimeError("no keys")

    def items(self):
        raise RuntimeError("no items")


class Lone(Hostile):
    """A mapping whose walk raises an error whose text holds a lone surrogate."""
    def keys(self):
        raise RuntimeError("no \udcff keys")


def step(batch):
    """A training step, recorded by name."""


def cases():
    """{name: (batch, exception, save keywords)}."""
    class Pair(typing.NamedTuple):  # its qualname, "cases.<locals>.Pair", is no module:qualname as written
        a: torch.Tensor
        b: int
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype
        nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    loop, deep = [torch.zeros(1)], torch.ones(2)
    loop.append(loop)
    for _ in range(3000):
        deep = [deep]
    ids = ["a" * (24 * MIB) + str(i) for i in range(3)]
    boom = ValueError("boom")
    return {
        "nested": ({"x": nested, "y": torch.arange(2)}, boom, {}),
        "huge-string": ({"x": torch.ones(2), "doc": "a" * (70 * MIB)}, boom, {}),
        "huge-ids": ({"x": torch.ones(3)}, boom, {"sample_ids": ids}),
        "huge-id-values": ({"x": torch.ones(3), "id": ids}, boom, {}),
        "huge-text": ({"x": torch.ones(2)}, RuntimeError("x" * (80 * MIB)), {}),
        "self-reference": ({"x": torch.ones(2), "loop": loop}, boom, {}),
        "deep": ({"x": torch.ones(2), "deep": deep}, boom, {}),
        "odd-keys": ({"x": torch.ones(2), (1, "a"): torch.arange(2), 2.5: torch.zeros(2), None: 1}, boom, {}),
        "taken-key": ({"2.5": torch.ones(2), 2.5: torch.zeros(2)}, boom, {}),
        "hostile-mapping": ({"x": torch.ones(2), "h": Hostile(a=1)}, boom, {}),
        "local-class": ({"x": torch.ones(2), "pair": Pair(torch.zeros(2), 3)}, boom, {}),
        "many-values": ({"x": torch.ones(2), "rows": [[i] for i in range(60_000)]}, boom, {}),
        # 1M ids whose JSON (67 bytes each) is more than a manifest holds: they alone are dropped.
        "huge-id-list": ({"x": torch.zeros(1, dtype=torch.uint8).expand(1 << 20)}, boom, {
            "sample_ids": [f"{k:064d}" for k in range(1 << 20)], "step": step, "op": "cross_entropy",
            "attrs": {"reduction": "mean"}, "meta": {"run": "7"}}),
        # Lone surrogates (no Unicode text) in every string: keys that differ only by them, values, per-sample
        # values, the text of a part that raises, ids, op, attrs, meta, the error, the step's name.
        "lone-surrogates": ({"x\ud800": torch.ones(2), "x\ud801": torch.zeros(2),
                             "d": {"k\ud800": 1, "k\udbff": 2}, "s": ["a\udc00", "b"], "h": Lone(a=1)},
                            ValueError("bad \ud800 value"), {
            "sample_ids": ["i\ud800", "j"], "op": "o\udfff", "attrs": {"k\ud800": "v\udc00"},
            "meta": {"m\ud800": "\udfff"}, "step": "m\ud800:f"}),
    }


def record(path, batch, exc, **kwargs):
    """Raise exc in a record_on_failure block; True when the very exception came out and the file is there."""
    try:
        with rb.record_on_failure(path, batch, **kwargs):
            raise exc
    except BaseException as e:  # noqa: BLE001
        return e is exc and os.path.exists(path)
    return False


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: check_recorder_faults.py DIR")
    lost = [name for name, (batch, exc, kw) in cases().items()
            if not record(os.path.join(sys.argv[1], name + ".bin"), batch, exc, **kw)]
    sys.exit(f"lost: {', '.join(lost)}" if lost else 0)
