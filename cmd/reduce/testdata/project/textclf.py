"""A small text classifier, as a user's training project has it: a Dataset of samples with ids, a
collate that pads each batch to its longest sample, a model with learned positions, and the
training step. reduce's end-to-end tests crash it on purpose (train.py --crash KIND)."""

import torch
import torch.nn.functional as F

VOCAB = 50
CLASSES = 4
MAX_LEN = 64  # learned positions: a longer sequence indexes past the table
KEEP_UNLABELLED = True  # crash "ignored": the Dataset keeps samples labelled -100
DROP_LAST = False  # crash "small": the loader keeps a last batch of one sample


class Texts(torch.utils.data.Dataset):
    """Sample i: {"id", "tokens" (a 1-d int64 tensor of its own length), "label", "key"}."""

    def __init__(self, n=48, seed=0, crash=None):
        g = torch.Generator().manual_seed(seed)
        n += {"small": 1, "ignored": 3}.get(crash, 0)  # the last batch of 16: 1 sample, or 3
        self.samples = []
        for i in range(n):
            length = int(torch.randint(3, 20, (1,), generator=g))
            tokens = torch.randint(1, VOCAB, (length,), generator=g)
            tokens[tokens == 13] = 14  # token 13 is the one whose weights go bad (crash "nan")
            label = int(torch.randint(0, CLASSES, (1,), generator=g))
            self.samples.append({"id": "txt-%03d" % i, "tokens": tokens, "label": label, "key": 1000 + i})
        bad = 37  # the sample the crash is about; it lands in the third batch of 16
        s = self.samples[bad]
        if crash in ("label", "renamed"):
            s["label"] = CLASSES
        elif crash == "token":
            s["tokens"][2] = VOCAB
        elif crash == "length":
            s["tokens"] = torch.randint(1, VOCAB, (70,), generator=g)
            s["tokens"][s["tokens"] == 13] = 14
        elif crash == "nan":
            s["tokens"][1] = 13
        elif crash == "dupkey":
            s["key"] = self.samples[41]["key"]
        elif crash == "column":
            for s in self.samples:
                s["label"] = [s["label"]]  # a label read as a list of one: the collate makes a column
        elif crash == "ignored":
            for s in self.samples[48:]:
                s["label"] = -100  # unlabelled samples, all in the last batch
            if not KEEP_UNLABELLED:
                self.samples = [s for s in self.samples if s["label"] != -100]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]


def collate(samples):
    """Pad to the longest sample of the batch (0 is the padding token)."""
    lengths = torch.tensor([len(s["tokens"]) for s in samples])
    tokens = torch.zeros(len(samples), int(lengths.max()), dtype=torch.int64)
    for i, s in enumerate(samples):
        tokens[i, :len(s["tokens"])] = s["tokens"]
    return {
        "ids": [s["id"] for s in samples],
        "tokens": tokens,
        "lengths": lengths,
        "label": torch.tensor([s["label"] for s in samples]),
        "key": [s["key"] for s in samples],
    }


def collate_renamed(samples):
    """collate, with the batch's keys named as a model hub's collator names them: label is labels."""
    batch = collate(samples)
    batch["labels"] = batch.pop("label")
    return batch


def loader(crash=None):
    """The training loader: batches of 16, collated (crash "renamed": by collate_renamed)."""
    fn = collate_renamed if crash == "renamed" else collate
    return torch.utils.data.DataLoader(Texts(crash=crash), batch_size=16, collate_fn=fn, drop_last=DROP_LAST)


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, 16, padding_idx=0)
        self.pos = torch.nn.Embedding(MAX_LEN, 16)
        self.out = torch.nn.Linear(16, CLASSES)

    def forward(self, tokens, lengths):
        positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
        h = self.tok(tokens) + self.pos(positions)
        mask = (torch.arange(tokens.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(2)
        return self.out((h * mask).sum(1) / lengths.unsqueeze(1))


_objects = {}


def model_and_optimizer():
    """The run's model and optimizer, built once per process (seeded)."""
    if not _objects:
        torch.manual_seed(0)
        model = Classifier()
        _objects["model"] = model
        _objects["optimizer"] = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return _objects["model"], _objects["optimizer"]


def train_step(batch, state=None):
    """One training step on a batch as collate() makes it. reduce replays it: with a state
    recorded, the model and optimizer start from it."""
    model, optimizer = model_and_optimizer()
    if state is not None:
        state.restore(model=model, optimizer=optimizer)
    keys = batch["key"]
    dup = sorted(k for k in set(keys) if keys.count(k) > 1)
    if dup:
        raise ValueError("duplicate key %d in the batch" % dup[0])
    logits = model(batch["tokens"], batch["lengths"])
    loss = F.cross_entropy(logits, batch["label"])
    if not torch.isfinite(loss):
        raise FloatingPointError("loss is %s" % loss.item())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


_norm = {}


def train_step_bn(batch):
    """The step with BatchNorm on the logits (training mode): a batch of one sample is refused."""
    if not _norm:
        torch.manual_seed(1)
        _norm["bn"] = torch.nn.BatchNorm1d(CLASSES).train()
    model, _ = model_and_optimizer()
    logits = _norm["bn"](model(batch["tokens"], batch["lengths"]))
    return F.cross_entropy(logits, batch["label"]).detach()


def train_step_renamed(batch, state=None):
    """train_step on a batch of collate_renamed."""
    batch = dict(batch)
    batch["label"] = batch.pop("labels")
    return train_step(batch, state)
