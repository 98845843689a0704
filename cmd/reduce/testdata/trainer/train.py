"""A Hugging Face Trainer script as a user has it: a one-layer BERT for sequence classification
built from a config (a vocabulary of 32 and a hidden size of 16: nothing downloaded), a Dataset of
token ids with an id per sample, a collator that pads and keeps the ids, and reduce's recorder
around the Trainer. reduce's end-to-end test crashes it on purpose (sample s-037's label is 7 of
3 classes):

    python train.py --out crash.bin [--state]
"""

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: nothing is downloaded

import torch  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments  # noqa: E402

import reduce_hooks  # noqa: E402

BAD = 37


class Texts(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"id": f"s-{i:03d}", "input_ids": torch.randint(1, 32, (4 + i % 5,), generator=g),
                "label": 7 if i == BAD else i % 3}


def collate(samples):
    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.long)
    mask = torch.zeros(len(samples), longest, dtype=torch.long)
    for k, s in enumerate(samples):
        ids[k, :len(s["input_ids"])] = s["input_ids"]
        mask[k, :len(s["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([s["label"] for s in samples]),
            "sample_id": [s["id"] for s in samples]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="crash.bin")
    p.add_argument("--state", action="store_true", help="record the model's weights too")
    p.add_argument("--work", default="trainer-out", help="the Trainer's output_dir")
    o = p.parse_args()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=3)
    args = TrainingArguments(output_dir=o.work, per_device_train_batch_size=16, num_train_epochs=1, use_cpu=True,
                             report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             remove_unused_columns=False, seed=0)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Texts(),
                      data_collator=collate)
    trainer = reduce_hooks.record_trainer(trainer, o.out, state=o.state, sample_ids=lambda b: b["sample_id"])
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
