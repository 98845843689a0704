"""The recorder writes whenever the destination is writable: each hostile batch below once lost its crash."""
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.record  # noqa: E402
import reduce_batch.fileformat  # noqa: E402

from check_recorder_faults import MIB, cases, step  # noqa: E402

CASES = cases()


def record(path, batch, exc=None, **kwargs):
    """Raise exc in a record_on_failure block; the very exception comes out, and the file is read back."""
    exc = exc or ValueError("boom")
    with pytest.raises(type(exc)) as info:
        with rb.record_on_failure(path, batch, **kwargs):
            raise exc
    assert info.value is exc
    assert os.path.exists(path), "the crash was not recorded"
    return rb.load(path)


def case(tmp_path, name):
    batch, exc, kwargs = CASES[name]
    return record(tmp_path / f"{name}.bin", batch, exc, **kwargs)


def skipped(b):
    """{path: reason} of the leaves the structure records as skipped."""
    out, todo = {}, [("", b.manifest.get("structure") or {})]
    for path, node in todo:
        if node.get("kind") == "skipped":
            out[path] = node["reason"]
        for k, c in zip(node.get("keys") or range(len(node.get("items", []))), node.get("items", [])):
            todo.append((f"{path}.{k}" if path else str(k), c))
    return out


def test_nested_tensor_is_skipped_and_named(tmp_path, capfd):
    b = case(tmp_path, "nested")
    assert torch.equal(b.data["y"], torch.arange(2))
    assert "nested" in skipped(b)["x"]
    assert "skipped x: layout nested" in capfd.readouterr().err


def test_huge_string_leaf_is_skipped(tmp_path):
    b = case(tmp_path, "huge-string")
    assert torch.equal(b.data["x"], torch.ones(2))
    assert f"a string of {70 * MIB} characters" in skipped(b)["doc"]


def test_huge_ids_are_dropped(tmp_path):
    b = case(tmp_path, "huge-ids")
    assert b.sample_ids is None and torch.equal(b.data["x"], torch.ones(3))
    b = case(tmp_path, "huge-id-values")
    assert "id" in skipped(b) and torch.equal(b.data["x"], torch.ones(3))


def test_huge_id_list_keeps_the_step(tmp_path, capfd):
    """1M ids whose JSON a manifest cannot hold: the ids alone are dropped, and named; the step, op,
    attributes and meta are recorded (once, the file held the tensors and the error alone)."""
    b = case(tmp_path, "huge-id-list")
    assert b.sample_ids is None and b.samples == 1 << 20 and b.data["x"].shape == (1 << 20,)
    assert b.step["qualname"] == "step" and b.step["module"] in ("check_recorder_faults", "__main__")
    assert b.op == "cross_entropy" and b.attrs == {"reduction": "mean"} and b.meta["run"] == "7"
    err = capfd.readouterr().err
    assert "sample_ids: 67.0 MiB of JSON, more than a manifest holds (64 MiB): not recorded" in err
    assert " alone" not in err


def test_lone_surrogates_are_written_as_replacement_characters(tmp_path, capfd, monkeypatch):
    """A str holding a lone surrogate (no Unicode text: both readers refuse it) is written with U+FFFD in its
    place, as Go writes bytes that are not UTF-8; a key that then equals another is skipped, and named; a step
    whose name is no dotted name (the readers refuse it) is not recorded."""
    b = case(tmp_path, "lone-surrogates")
    assert list(b.data) == ["x\ufffd", "d", "s", "h"] and torch.equal(b.data["x\ufffd"], torch.ones(2))
    assert b.data["d"] == {"k\ufffd": 1} and b.data["s"] == ["a\ufffd", "b"] and b.data["h"] is None
    assert skipped(b)["h"] == "RuntimeError: no \ufffd keys"
    assert b.sample_ids == ["i\ufffd", "j"] and b.op == "o\ufffd" and b.attrs == {"k\ufffd": "v\ufffd"}
    assert b.meta["m\ufffd"] == "\ufffd" and b.error["text"] == "ValueError: bad \ufffd value"
    assert b.step is None
    err = capfd.readouterr().err
    assert "key 'x\\ud801' (builtins:str) skipped" in err
    assert "key 'k\\ud800' (builtins:str) recorded as" in err
    assert "step: not recorded" in err
    here = tmp_path / "caf\udce9"  # a directory whose name is not UTF-8: the step's cwd
    here.mkdir()
    monkeypatch.chdir(here)
    b = record(here / "c.bin", {"x": torch.ones(2)}, step=step)
    assert b.step["cwd"].endswith("caf\ufffd") and b.step["qualname"] == "step"


def test_huge_exception_text_is_cut(tmp_path):
    b = case(tmp_path, "huge-text")
    text = b.error["text"]
    assert text.startswith("RuntimeError: xxx") and len(text) < 2 * rb.fileformat._MAX_TEXT
    assert text.endswith(f"[cut: {len('RuntimeError: ') + 80 * MIB - rb.fileformat._MAX_TEXT} more characters]")
    assert b.error["exception"] == "RuntimeError"


def test_self_referencing_list(tmp_path):
    b = case(tmp_path, "self-reference")
    assert skipped(b) == {"loop.1": "holds itself"}
    assert torch.equal(b.data["loop"][0], torch.zeros(1))


def test_deep_nesting_is_cut_at_the_depth_limit(tmp_path):
    b = case(tmp_path, "deep")
    (path, reason), = skipped(b).items()
    assert reason == f"nested over {rb.MAX_DEPTH} deep" and path.count(".") == rb.MAX_DEPTH - 1


@pytest.mark.parametrize("key, written", [((1, "a"), "(1, 'a')"), (2.5, "2.5"), (None, "None")])
def test_odd_key_is_recorded_as_a_string(tmp_path, key, written, capfd):
    b = record(tmp_path / "c.bin", {"x": torch.ones(2), key: torch.arange(2)})
    assert torch.equal(b.data[written], torch.arange(2)) and not skipped(b)
    assert f"key {key!r}" in capfd.readouterr().err


def test_odd_key_whose_string_is_taken_skips_its_leaf(tmp_path):
    b = case(tmp_path, "taken-key")
    assert list(b.data) == ["2.5"] and torch.equal(b.data["2.5"], torch.ones(2))


def test_a_part_that_raises_is_skipped(tmp_path):
    b = case(tmp_path, "hostile-mapping")
    assert "RuntimeError: no keys" in skipped(b)["h"]


def test_a_class_defined_in_a_function(tmp_path):
    """Its type is written as a reader reads a module:qualname, and the batch loads as a named tuple."""
    b = case(tmp_path, "local-class")
    node = b.manifest["structure"]["items"][b.manifest["structure"]["keys"].index("pair")]
    assert node["type"] == "check_recorder_faults:cases._locals_.Pair"
    assert b.data["pair"].b == 3 and torch.equal(b.data["pair"].a, torch.zeros(2))


def test_too_many_values_leave_the_tensors_and_the_error(tmp_path, capfd):
    """A structure a reader would refuse (over MAX_TREE_VALUES JSON values) is recorded as its tensors alone."""
    b = case(tmp_path, "many-values")
    assert list(b.data) == ["x"] and b.error["text"] == "ValueError: boom"
    assert "more than 100000 JSON values" in capfd.readouterr().err


def test_last_resort_writes_the_tensors_and_the_error(tmp_path, monkeypatch, capfd):
    """save() refusing the batch every way it is asked leaves the tensors and the error, not nothing."""
    real = rb.save

    def picky(path, batch=None, **kwargs):
        if isinstance(batch, dict) and "meta" in batch:
            raise ValueError("refused")
        return real(path, batch, **kwargs)

    monkeypatch.setattr(rb.record, "save", picky)  # what record_on_failure calls
    b = record(tmp_path / "c.bin", {"x": torch.ones(2), "meta": {"y": torch.zeros(3), "z": 1}})
    assert sorted(b.data) == ["meta.y", "x"] and b.error["text"] == "ValueError: boom"
    err = capfd.readouterr().err
    assert "recording the tensors and the error alone" in err and "saved the failing batch" in err


def test_unwritable_destination_still_raises_the_original(tmp_path):
    exc = ValueError("boom")
    with pytest.raises(ValueError) as info:
        with rb.record_on_failure(tmp_path / "missing" / "c.bin", {"x": torch.ones(2)}):
            raise exc
    assert info.value is exc


def test_an_attribute_json_cannot_hold_keeps_the_rest(tmp_path, capfd):
    """The op, the other attributes and the meta (a rank's too) are recorded; the one attribute is named."""
    b = record(tmp_path / "c.bin", {"x": torch.ones(2)}, op="clamp", attrs={"max": float("inf"), "min": 0},
               meta={"run": "7"})
    assert b.op == "clamp" and b.attrs == {"min": 0} and b.meta["run"] == "7"
    assert "attrs['max']: inf cannot be written as JSON: not recorded" in capfd.readouterr().err


def test_the_last_resorts_keep_the_op_and_the_meta(tmp_path, monkeypatch):
    real = rb.save

    def picky(path, batch=None, **kwargs):
        if kwargs.get("attrs") is not None or isinstance(batch, dict) and "meta" in batch:
            raise ValueError("refused")
        return real(path, batch, **kwargs)

    monkeypatch.setattr(rb.record, "save", picky)  # what record_on_failure calls
    b = record(tmp_path / "c.bin", {"x": torch.ones(2), "meta": {"y": 1}}, op="cross_entropy", attrs={"a": 1},
               meta={"rank": "3"})
    assert list(b.data) == ["x"] and b.op == "cross_entropy" and b.meta["rank"] == "3" and not b.attrs
