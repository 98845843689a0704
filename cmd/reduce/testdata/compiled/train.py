"""A training script whose step is compiled with torch.compile (Inductor, on the CPU), recorded with
reduce_batch.record_on_failure as the README's "Recording a batch" says: a bag-of-tokens classifier
over batches of 16 samples, one of which (id tok-043) holds a token id past the vocabulary.

    python train.py --model bag|embedding --out crash.bin

--model bag: nn.EmbeddingBag, whose lookup Inductor leaves to ATen (the same check eager);
--model embedding: nn.Embedding, which Inductor generates C++ for, with its own bound check ("index
out of bounds: 0 <= tmp < 50"; eager says "index out of range in self"): with more than one OpenMP
thread that check throws inside the kernel's parallel region and the process aborts, so the cmd
tests run it with OMP_NUM_THREADS=1.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import reduce_batch

VOCAB, CLASSES, TOKENS = 50, 4, 8


class Classifier(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.emb = nn.EmbeddingBag(VOCAB, 16, mode="mean") if kind == "bag" else nn.Embedding(VOCAB, 16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, tokens):
        h = self.emb(tokens) if self.kind == "bag" else self.emb(tokens).mean(1)
        return self.head(h)


_models = {}


def model_for(kind):
    """The model, its compiled module and its optimizer, built once per process (a replay builds its
    own: the step is replayed from the weights it builds)."""
    if kind not in _models:
        torch.manual_seed(0)
        model = Classifier(kind)
        _models[kind] = (model, torch.compile(model), torch.optim.SGD(model.parameters(), lr=0.1))
    return _models[kind]


def train_step(batch):
    model, compiled, optimizer = model_for(batch["model"])
    loss = F.cross_entropy(compiled(batch["tokens"]), batch["label"])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def batches(kind, n=4, size=16):
    g = torch.Generator().manual_seed(1)
    for b in range(n):
        tokens = torch.randint(0, VOCAB, (size, TOKENS), generator=g)
        if b == 2:
            tokens[11, 5] = VOCAB + 3  # sample tok-043: a token id past the vocabulary
        yield {"tokens": tokens, "label": torch.randint(0, CLASSES, (size,), generator=g),
               "id": ["tok-%03d" % (b * size + i) for i in range(size)], "model": kind}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("bag", "embedding"), default="bag")
    p.add_argument("--out", default="crash.bin")
    p.add_argument("--cold", action="store_true",
                   help='leave out the recorder\'s meta "compiled", as recorders before it noted one (a cold replay)')
    p.add_argument("--keep-disk", action="store_true", help="record_on_failure(keep=\"disk\"): the batch written "
                   "before each step, left behind by an abort")
    a = p.parse_args()
    for batch in batches(a.model):
        with reduce_batch.record_on_failure(a.out, batch, step=train_step, sample_ids=batch["id"],
                                            meta={"compiled": None} if a.cold else None,
                                            keep="disk" if a.keep_disk else None):
            train_step(batch)
