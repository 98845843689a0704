"""A GPT training script of the top-level shape, for TestRecordCommand: get_batch makes the batches (no
DataLoader), the next one fetched before the backward; token 2500 of the data is past the vocabulary."""

import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size, block_size, vocab, max_iters = 8, 16, 50, 60
for arg in sys.argv[1:]:  # --key=value, as configurator scripts do
    k, v = arg[2:].split("=")
    globals()[k] = int(v)
torch.manual_seed(1337)
data = torch.randint(0, vocab, (4000,))
data[2500] = 77  # the data bug: a token past the vocabulary
val = torch.randint(0, vocab, (500,))


def get_batch(split):
    d = data if split == "train" else val
    ix = torch.randint(len(d) - block_size, (batch_size,))
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
    return x, y


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(vocab, 32)
        self.head = nn.Linear(32, vocab)

    def forward(self, idx, targets):
        logits = self.head(self.emb(idx))
        return logits, F.cross_entropy(logits.view(-1, vocab), targets.view(-1))


@torch.no_grad()
def estimate_loss():
    model.eval()
    out = sum(model(*get_batch(s))[1].item() for s in ("train", "val")) / 2
    model.train()
    return out


model = Tiny()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
X, Y = get_batch("train")
for it in range(max_iters):
    if it % 20 == 0:
        print(f"iter {it}: loss {estimate_loss():.3f}")
    logits, loss = model(X, Y)
    X, Y = get_batch("train")  # fetch the next batch before the backward
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
