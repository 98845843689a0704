"""The training loop of the test project, recording the failing batch as the README says:

    python train.py --crash label --out crash.bin
"""

import argparse
import sys

import torch

import reduce_batch
import textclf


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--crash", choices=["label", "token", "length", "nan", "dupkey", "column", "ignored", "small", "renamed"], default=None)
    p.add_argument("--out", default="crash.bin")
    o = p.parse_args()
    loader = textclf.loader(o.crash)
    train_step = {"small": textclf.train_step_bn, "renamed": textclf.train_step_renamed}.get(o.crash, textclf.train_step)
    model, optimizer = textclf.model_and_optimizer()
    state = None
    for step, batch in enumerate(loader):
        if o.crash == "nan" and step == 2:
            with torch.no_grad():
                model.tok.weight[13] = float("nan")  # the weights went bad before this step
        if o.crash == "nan":
            state = {"model": model, "optimizer": optimizer}
        with reduce_batch.record_on_failure(o.out, batch, step=train_step, state=state,
                                            padded={"tokens": 1}, lengths=batch["lengths"]):
            train_step(batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
