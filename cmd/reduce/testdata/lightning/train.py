"""A Lightning training script as a user has it: the LightningModule defined in the script
itself, over the test project's Dataset, padding collate and model (../project/textclf.py, copied
beside it), trained by a Trainer with reduce's callback. reduce's end-to-end test crashes it on
purpose (sample txt-037, in the third batch of 16):

    python train.py --crash label --out crash.bin
"""

import argparse
import sys

import torch
import torch.nn.functional as F

try:
    import lightning.pytorch as L
except ImportError:
    import pytorch_lightning as L

import reduce_hooks
import textclf


class Classifier(L.LightningModule):
    def __init__(self, lr=0.1, crash=None):
        super().__init__()
        self.save_hyperparameters()  # what reduce rebuilds the module from
        self.net = textclf.Classifier()

    def on_train_batch_start(self, batch, batch_idx):
        if self.hparams.crash == "nan" and batch_idx == 2:
            with torch.no_grad():
                self.net.tok.weight[13] = float("nan")  # the weights went bad before this step

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self.net(batch["tokens"], batch["lengths"]), batch["label"])
        if not torch.isfinite(loss):
            raise FloatingPointError("loss is %s" % loss.item())
        self.log("loss", loss)
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--crash", choices=["label", "length", "nan"], default=None)
    p.add_argument("--out", default="crash.bin")
    o = p.parse_args()
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(textclf.Texts(crash=o.crash), batch_size=16, collate_fn=textclf.collate)
    recorder = reduce_hooks.lightning_callback(o.out, padded={"tokens": 1}, lengths=lambda b: b["lengths"])
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[recorder])
    trainer.fit(Classifier(crash=o.crash), loader)
    return 0


if __name__ == "__main__":
    sys.exit(main())
