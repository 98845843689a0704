"""A LightningCLI script, for TestRecordCommand: item 123 of the training set has a label past the classes."""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
try:
    import lightning.pytorch as L
    from lightning.pytorch.cli import LightningCLI
except ImportError:
    import pytorch_lightning as L
    from pytorch_lightning.cli import LightningCLI


class Pairs(Dataset):
    def __init__(self, n, bad=None):
        g = torch.Generator().manual_seed(n)
        self.x, self.y = torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)
        if bad is not None:
            self.y[bad] = 3
    def __len__(self):
        return len(self.y)
    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


class Data(L.LightningDataModule):
    def __init__(self, batch_size: int = 8):
        super().__init__()
        self.batch_size = batch_size
    def train_dataloader(self):
        return DataLoader(Pairs(200, bad=123), batch_size=self.batch_size, shuffle=True)
    def val_dataloader(self):
        return DataLoader(Pairs(40), batch_size=self.batch_size)


class Model(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 3))
    def training_step(self, batch, i):
        return F.cross_entropy(self.net(batch["x"]), batch["y"])
    def validation_step(self, batch, i):
        self.log("val", F.cross_entropy(self.net(batch["x"]), batch["y"]))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


if __name__ == "__main__":
    LightningCLI(Model, Data)
