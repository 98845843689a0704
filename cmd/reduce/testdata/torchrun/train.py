"""A data-parallel training run, as torchrun starts it: `torchrun --standalone --nproc_per_node=2
train.py` (gloo on the CPU). Each rank trains a DistributedDataParallel classifier on its shard of
the data; one sample, which DistributedSampler hands to rank 1 only, has a label out of range.
Rank 1's cross_entropy raises; rank 0, waiting in backward's all-reduce, fails after it. Each
rank records its own file: crash.rank0.bin, crash.rank1.bin."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import reduce_batch

CLASSES, FEATURES = 4, 8
BAD = 37  # odd: DistributedSampler (no shuffle) gives rank 1 the odd indices


class Points(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        label = 9 if i == BAD else i % CLASSES
        return {"x": torch.randn(FEATURES, generator=g), "label": label, "id": f"point-{i}"}


_run = {}


def model_and_optimizer():
    """The run's DDP model and optimizer, made once per process (the replay's process too)."""
    if not _run:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, CLASSES))
        model = DistributedDataParallel(net)
        _run.update(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    return _run["model"], _run["optimizer"]


def train_step(batch, state=None):
    model, optimizer = model_and_optimizer()
    if state is not None:
        state.restore(model=model, optimizer=optimizer)
    loss = F.cross_entropy(model(batch["x"]), batch["label"])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def main():
    dist.init_process_group("gloo")
    data = Points()
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False))
    model, optimizer = model_and_optimizer()
    for batch in loader:
        with reduce_batch.record_on_failure("crash.bin", batch, step=train_step,
                                            state={"model": model, "optimizer": optimizer}):
            train_step(batch)
    dist.destroy_process_group()
    print(f"rank {dist.get_rank() if dist.is_initialized() else os.environ.get('RANK')}: done", file=sys.stderr)


if __name__ == "__main__":
    main()
