"""reduce_batch.hook_torchrun: a torch.distributed run (torchrun, DDP). Each rank records its own
file (ranked: record_on_failure calls it), and a rank's recording replays alone, in a process group of
one (before_replay) (docs/RECORDING.md, "torchrun and DDP")."""

import importlib
import os
import re
import time

from .fileformat import torch_module

# reduce recorder joins what follows this line (replay.PythonModule): it uses the standard library
# imports above and fileformat's names, never another module.


def ranked(path, kwargs, when="failed_at"):
    """Under torch.distributed (or torchrun's variables) of several ranks: PATH.rank{R}.EXT, and save()'s
    kwargs with the meta rank, world_size, `when` (the time), run_id and dist_backend; else both as given."""
    dist, env = getattr(torch_module(), "distributed", None), os.environ
    on = dist is not None and dist.is_available() and dist.is_initialized()
    rank, size = (dist.get_rank(), dist.get_world_size()) if on else (int(env["RANK"]), int(env["WORLD_SIZE"])) if \
        re.fullmatch("[0-9]+", env.get("RANK", "")) and re.fullmatch("[0-9]+", env.get("WORLD_SIZE", "")) else (0, 1)
    if size < 2:
        return path, kwargs
    root, ext = os.path.splitext(os.fspath(path))
    meta = {"rank": rank, "world_size": size, when: f"{time.time():.6f}", "run_id": env.get("TORCHELASTIC_RUN_ID"),
            "dist_backend": dist.get_backend() if on else None}
    return f"{root}.rank{rank}{ext}", dict(kwargs, meta=dict(meta, **dict(kwargs.get("meta") or {})))


def before_replay(batch, check_only=False):
    """One rank's recording of a torch.distributed run (its meta's world_size over 1) replays
    alone: a process group of size 1 (gloo, nccl where the batch is on a CUDA device) in an
    in-process store, so that the step's DDP wrapping and collectives run; torchrun's variables
    say rank 0 of 1. HarnessError when this torch has no torch.distributed (check_only: that
    check alone, the worker's before any replay). It runs in reduce's replays only."""
    meta = batch.meta or {}
    if not re.fullmatch("[0-9]+", str(meta.get("world_size", ""))) or int(meta["world_size"]) < 2:
        return
    dist = getattr(torch_module(), "distributed", None)
    if dist is None or not dist.is_available():
        raise importlib.import_module("reduce_batch.errors").HarnessError(
            "the batch is rank {} of {}'s of a torch.distributed run, and this torch has no torch.distributed to "
            "replay its step alone in a process group of size 1: replay it with a torch built with it "
            "(--python)".format(meta.get("rank", "?"), meta["world_size"]))
    if check_only or dist.is_initialized():
        return
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    cuda = any(getattr(t, "is_cuda", False) for t in (batch.tensors or {}).values())
    dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1)
