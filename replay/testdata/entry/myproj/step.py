"""The training step `reduce replay --backend torch --entry myproj.step:step` runs on a candidate."""

import torch
import torch.nn.functional as F


class TinyModel(torch.nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.linear = torch.nn.Linear(features, classes)

    def forward(self, x):
        return self.linear(torch.relu(x))


def step(batch):
    """One training step on the batch's input [N, C] and target [N]: the model maps the input to
    logits over as many classes, and cross_entropy raises on a target outside them."""
    x = batch.tensors["input"].float()
    target = batch.tensors["target"]
    torch.manual_seed(0)
    model = TinyModel(x.shape[1], x.shape[1]).to(x.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    logits = model(x)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    opt.step()
    return loss.detach()
