"""A Transformers script with the Trainer (a one-layer BERT built from a config), for TestRecordCommand: item 41
has a label past num_labels. The default collator, unchanged."""

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, HfArgumentParser


class Texts(Dataset):
    def __init__(self, n=96, bad=None):
        g = torch.Generator().manual_seed(n)
        self.ids = torch.randint(5, 100, (n, 12), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)
        if bad is not None:
            self.labels[bad] = 2  # the data bug: a label past num_labels
    def __len__(self):
        return len(self.labels)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(12, dtype=torch.long), "labels": self.labels[i]}


def main():
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    cfg = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     num_labels=2)
    model = BertForSequenceClassification(cfg)
    Trainer(model=model, args=args, train_dataset=Texts(bad=41)).train()


if __name__ == "__main__":
    main()
