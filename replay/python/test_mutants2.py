"""The recorder's last resort, to its end: what the mutants of reduce_batch.py (scripts/mutants.sh) need."""
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.record  # noqa: E402


def test_last_resort_writes_the_error_alone(tmp_path, monkeypatch, capfd):
    """save() refusing every batch that holds anything, the tensors alone too, still leaves the error."""
    real = rb.save

    def picky(path, batch=None, **kwargs):
        if batch:
            raise ValueError("refused")
        return real(path, batch, **kwargs)

    monkeypatch.setattr(rb.record, "save", picky)  # what record_on_failure calls
    path, exc = tmp_path / "c.bin", ValueError("boom")
    with pytest.raises(ValueError) as info:
        with rb.record_on_failure(path, {"x": torch.ones(2), "meta": {"y": torch.zeros(3)}}):
            raise exc
    assert info.value is exc
    b = rb.load(path)
    assert not b.data and b.error["text"] == "ValueError: boom"
    err = capfd.readouterr().err
    assert "recording the tensors and the error alone" in err and "recording the error alone" in err
    assert "saved the failing batch" in err
