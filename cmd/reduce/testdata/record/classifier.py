"""An image classifier of the examples-repository shape, for TestRecordCommand: train(args, model, device,
loader, optimizer, epoch) over a random_split Subset; dataset item 357 has a label past the classes."""

import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, random_split


class Digits(Dataset):
    def __init__(self, n=600, bad=357):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 1, 8, 8, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.y[bad] = 10  # the data bug: a label past the classes
    def __len__(self):
        return len(self.y)
    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)
    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def train(args, model, device, loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % 10 == 0:
            print(f"epoch {epoch} batch {batch_idx} loss {loss.item():.3f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(1)
    ds = Digits()
    train_set, _ = random_split(ds, [500, 100], generator=torch.Generator().manual_seed(2))
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(1, args.epochs + 1):
        train(args, model, "cpu", loader, opt, epoch)


if __name__ == "__main__":
    main()
