"""Tests of rb.hooks.record_trainer and trainer_step with a real Hugging Face Trainer on the
CPU (a one-layer BERT built from a config: nothing downloaded). They skip when transformers cannot
be imported (Debian has none), and fail then under REDUCE_REQUIRE_TRANSFORMERS. The tests of the
wrapper's signatures and arguments run everywhere."""

import importlib
import json
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.errors  # noqa: E402
import reduce_batch.hook_trainer  # noqa: E402
import reduce_batch.hooks  # noqa: E402
import reduce_batch.steps  # noqa: E402
import reduce_batch.trust  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported


def _transformers():
    try:
        return importlib.import_module("transformers")
    except ImportError:
        return None


@pytest.fixture(scope="module")
def transformers():
    t = _transformers()
    if t is None or not hasattr(t, "Trainer"):
        why = "transformers cannot be imported (pip install transformers accelerate)"
        if os.environ.get("REDUCE_REQUIRE_TRANSFORMERS"):
            pytest.fail("REDUCE_REQUIRE_TRANSFORMERS is set and " + why, pytrace=False)
        pytest.skip(why)
    return t


BAD = 21  # the sample whose label is out of range (3 classes)


class Texts(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"id": "t-%02d" % i, "ids": torch.randint(1, 32, (6,), generator=g), "label": 7 if i == BAD else i % 3}


def collate(samples):
    return {"input_ids": torch.stack([s["ids"] for s in samples]),
            "labels": torch.tensor([s["label"] for s in samples]), "sample_id": [s["id"] for s in samples]}


def _trainer(transformers, tmp_path):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=3)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8,
                                          num_train_epochs=1, use_cpu=True, report_to=[], save_strategy="no",
                                          logging_strategy="no", disable_tqdm=True, remove_unused_columns=False,
                                          seed=0)
    return transformers.Trainer(model=transformers.BertForSequenceClassification(config), args=args,
                                train_dataset=Texts(), data_collator=collate)


@pytest.fixture(scope="module")
def crashed(transformers, tmp_path_factory):
    """One run with state=True: (the trainer, the file it wrote)."""
    tmp = tmp_path_factory.mktemp("trainer")
    path = str(tmp / "crash.bin")
    trainer = rb.hooks.record_trainer(_trainer(transformers, tmp), path, state=True,
                                          sample_ids=lambda b: b["sample_id"])
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        trainer.train()
    return trainer, path


def test_records_the_collators_batch_and_its_model(crashed, transformers):
    trainer, path = crashed
    b = rb.load(path)
    assert (b.step["module"], b.step["qualname"]) == ("reduce_batch.hooks", "trainer_step")
    assert "t-%02d" % BAD in b.sample_ids and len(b.sample_ids) == 8
    assert b.data["sample_id"] == b.sample_ids  # the collator's column, kept as it made it
    assert b.data["labels"][b.sample_ids.index("t-%02d" % BAD)].item() == 7
    k = b.sample_ids.index("t-%02d" % BAD)
    assert torch.equal(b.data["input_ids"][k], Texts()[BAD]["ids"])
    info = b.state["trainer"]
    cls = transformers.BertForSequenceClassification
    assert (info["model_class"]["module"], info["model_class"]["qualname"]) == (cls.__module__, cls.__qualname__)
    assert json.loads(info["config"])["hidden_size"] == 16 and info["precision"] == "32"
    # The weights at the crash: the failing step changed none.
    weights = trainer.model.state_dict()
    assert set(b.state["model"]) == set(weights)
    assert all(torch.equal(b.state["model"][n], weights[n]) for n in weights)
    assert b.meta["trainer_model"] == "%s:%s" % (cls.__module__, cls.__qualname__)


def test_the_replay_fails_as_recorded_and_runs_the_recorded_model(crashed, transformers):
    trainer, path = crashed
    old, rb.steps.step_check = rb.steps.step_check, None
    try:
        with pytest.raises(IndexError, match="Target 7 is out of bounds"):
            rb.steps.replay(path)
        b = rb.load(path)
        batch = dict(b.data, labels=b.data["labels"].clamp(max=2))
        loss = rb.hooks.trainer_step(batch, b.state)
        # The same forward in this process: the recorded weights, the generators as the step began.
        model = trainer.model
        model.train()
        rb.steps.restore_rng(b.state)
        want = model(input_ids=batch["input_ids"], labels=batch["labels"], sample_id=batch["sample_id"]).loss
        assert loss.requires_grad is False and torch.equal(loss, want.detach())
        # Without the weights the replay starts from those the config makes: another loss.
        fresh = rb.hooks.trainer_step(batch, rb.State({k: v for k, v in b.state.items() if k != "model"}))
        assert not torch.equal(fresh, loss)
    finally:
        rb.steps.step_check = old


def test_without_state_the_file_holds_no_weights(transformers, tmp_path):
    path = str(tmp_path / "crash.bin")
    trainer = rb.hooks.record_trainer(_trainer(transformers, tmp_path), path)
    with pytest.raises(IndexError):
        trainer.train()
    b = rb.load(path)
    assert "model" not in b.state and "trainer" in b.state and "rng" in b.state
    assert b.sample_ids == b.data["sample_id"]  # found by the recorder under an id key


def test_the_class_must_be_a_pretrained_model(transformers, tmp_path, monkeypatch):
    """resolve_class for trainer_step, of a file that is the user's: transformers' own
    PreTrainedModel subclasses and the user's; refused: another transformers class, another
    installed module's class, a class of theirs that is not a PreTrainedModel (before anything
    builds it), one of reduce's own; and any class of a file that is not theirs."""
    marker = tmp_path / "marker"
    (tmp_path / "mymodels.py").write_text(
        "import transformers\n\n\n"
        "class Mine(transformers.BertForSequenceClassification):\n    pass\n\n\n"
        "class Plain:\n    def __init__(self, *a, **k):\n        open(%r, 'w').close()\n" % str(marker))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(rb.steps, "step_check", rb.trust.Trust(str(tmp_path), True))
    cls = transformers.BertForSequenceClassification
    assert rb.steps.resolve_class({"module": cls.__module__, "qualname": cls.__qualname__}, "trainer") is cls
    mine = rb.steps.resolve_class({"module": "mymodels", "qualname": "Mine", "file": str(tmp_path / "mymodels.py")},
                            "trainer")
    assert mine.__name__ == "Mine"
    for entry, why in [
        ({"module": "transformers", "qualname": "TrainingArguments"}, "it is not a PreTrainedModel subclass"),
        ({"module": "transformers.models.bert.configuration_bert", "qualname": "BertConfig"},
         "it is not a PreTrainedModel subclass"),
        ({"module": "mymodels", "qualname": "Plain", "file": str(tmp_path / "mymodels.py")},
         "it is not a PreTrainedModel subclass"),
        ({"module": "subprocess", "qualname": "Popen"}, "it is not a PreTrainedModel subclass"),
        ({"module": "reduce_batch", "qualname": "save"}, "its module reduce_batch is reduce's own"),
        ({"module": "transformers.modeling_utils", "qualname": "os.system"}, "it is not a PreTrainedModel subclass"),
        ({"module": "transformers", "qualname": "NoSuchModel"}, "has no attribute 'NoSuchModel'"),
        ({"module": "transformers/../x.py", "qualname": "X"}, "is not a module:qualname of Python names"),
    ]:
        with pytest.raises(rb.errors.HarnessError, match="Trainer model class") as e:
            rb.steps.resolve_class(entry, "trainer")
        assert why in str(e.value), e.value
    state = rb.State({"trainer": {"model_class": {"module": "mymodels", "qualname": "Plain"}, "config": "{}"}})
    with pytest.raises(rb.errors.HarnessError, match="is not a PreTrainedModel subclass"):
        rb.hooks.trainer_step({"input_ids": torch.ones(1, 2, dtype=torch.long)}, state)
    monkeypatch.setattr(rb.steps, "step_check", rb.trust.Trust(str(tmp_path), False, "not yours"))
    with pytest.raises(rb.errors.HarnessError, match="Trainer model class transformers.models.bert.modeling_bert:"
                                               "BertForSequenceClassification is not run: not yours"):
        rb.steps.resolve_class({"module": cls.__module__, "qualname": cls.__qualname__}, "trainer")
    assert not marker.exists()


def test_the_config_names_no_code(transformers, monkeypatch):
    """Keys of a recorded config that would name code or a download are left out."""
    monkeypatch.setattr(rb.steps, "step_check", None)
    cls = transformers.BertForSequenceClassification
    config = transformers.BertConfig(vocab_size=8, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
                                     intermediate_size=4, max_position_embeddings=8, num_labels=2)
    d = dict(json.loads(config.to_json_string(use_diff=False)), attn_implementation="someone/kernels",
             auto_map={"AutoModel": "evil.Model"})
    d["sub"] = {"auto_map": {"AutoModel": "evil.Model"}, "kernel_implementation": "x", "width": 3}
    taken = []
    monkeypatch.setattr(transformers.BertConfig, "from_dict", classmethod(
        lambda c, given, **kw: taken.append(given) or config))
    state = rb.State({"trainer": {"model_class": {"module": cls.__module__, "qualname": cls.__qualname__},
                                  "config": json.dumps(d)}})
    loss = rb.hooks.trainer_step({"input_ids": torch.ones(2, 3, dtype=torch.long), "labels": torch.tensor([0, 1])},
                                     state)
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert "auto_map" not in taken[0] and "attn_implementation" not in taken[0]
    assert taken[0]["sub"] == {"width": 3} and taken[0]["hidden_size"] == 4


def test_a_compiled_trainers_model_is_compiled_again(transformers, monkeypatch):
    """TrainingArguments(torch_compile=True): the replay compiles the rebuilt model with the
    recorded backend (here "eager": no C++ compiler needed), and only a backend this torch has."""
    monkeypatch.setattr(rb.steps, "step_check", None)
    from torch._dynamo.utils import counters

    cls = transformers.BertForSequenceClassification
    config = transformers.BertConfig(vocab_size=8, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
                                     intermediate_size=4, max_position_embeddings=8, num_labels=2)
    info = {"model_class": {"module": cls.__module__, "qualname": cls.__qualname__},
            "config": config.to_json_string(use_diff=False), "compile": {"backend": "eager", "mode": ""}}
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "labels": torch.tensor([0, 1])}
    counters.clear()
    loss = rb.hooks.trainer_step(batch, rb.State({"trainer": info}))
    assert torch.isfinite(loss) and counters["stats"].get("unique_graphs", 0) > 0
    info["compile"]["backend"] = "os:system"
    with pytest.raises(rb.errors.HarnessError, match="backend 'os:system' is not one of this torch's"):
        rb.hooks.trainer_step(batch, rb.State({"trainer": info}))


class _OldTrainer:
    """A Trainer of an older release: training_step(model, inputs), no num_items_in_batch."""
    model = None

    def __init__(self):
        self.calls = []

    def training_step(self, model, inputs):
        self.calls.append((model, inputs))
        if inputs["y"].max() > 2:
            raise IndexError("Target %d is out of bounds." % inputs["y"].max())
        return torch.tensor(0.5)


def test_any_signature_passes_through(tmp_path, capfd):
    path = tmp_path / "crash.bin"
    trainer = _OldTrainer()
    assert rb.hooks.record_trainer(trainer, path, sample_ids=[10, 11]) is trainer
    assert "is not a transformers PreTrainedModel" in capfd.readouterr().err  # said at the start
    good = {"y": torch.tensor([0, 1])}
    assert trainer.training_step("m", good).item() == 0.5
    assert trainer.training_step(model="m", inputs=good).item() == 0.5
    assert trainer.calls == [("m", good), ("m", good)] and not path.exists()
    bad = {"y": torch.tensor([1, 4])}
    with pytest.raises(IndexError, match="Target 4"):
        trainer.training_step(model="m", inputs=bad)
    b = rb.load(path)
    assert torch.equal(b.data["y"], bad["y"]) and b.sample_ids == ["10", "11"] and b.step is None
    assert "Target 4 is out of bounds" in b.error["text"]
    # Wrapped again: the original once, the last call's settings.
    other = tmp_path / "other.bin"
    rb.hooks.record_trainer(trainer, other)
    with pytest.raises(IndexError):
        trainer.training_step("m", bad)
    assert other.exists() and len(trainer.calls) == 4


def test_reduce_batch_names_it_too(tmp_path):
    """reduce_batch.record_trainer, the name a user of the recorder alone tries, says where the hooks'
    one is (the recorder imports no hooks: no circle); that one records."""
    with pytest.raises(AttributeError, match="reduce_batch.hooks.record_trainer where the package is installed"):
        rb.record_trainer  # noqa: B018
    path = tmp_path / "crash.bin"
    trainer = _OldTrainer()
    assert rb.hooks.record_trainer(trainer, path) is trainer
    with pytest.raises(IndexError):
        trainer.training_step("m", {"y": torch.tensor([5])})
    assert rb.load(path).data["y"].tolist() == [5]


def test_record_trainer_refuses_what_it_records(tmp_path):
    for k in ("step", "error", "window", "keep"):
        with pytest.raises(TypeError, match="record_trainer: %s=" % k):
            rb.hooks.record_trainer(_OldTrainer(), tmp_path / "c.bin", **{k: 1})
    with pytest.raises(TypeError, match="want a transformers Trainer"):
        rb.hooks.record_trainer(object(), tmp_path / "c.bin")


class _OnDevice(torch.Tensor):
    """A CPU tensor that says it is on a GPU: the batch a Trainer's loader moved there."""

    @property
    def device(self):
        return torch.device("cuda", 0)


def test_a_batch_on_a_device_is_copied_before_the_step(capfd):
    cpu = {"x": torch.ones(2, 3), "y": [torch.tensor([1, 2])]}
    copying = []
    assert rb.hook_trainer._kept_on_cpu(torch, cpu, copying) is cpu and not copying  # the collator's own: a reference
    moved = {"x": torch.ones(2, 3).as_subclass(_OnDevice), "y": [torch.tensor([1, 2])]}
    for _ in range(2):
        kept = rb.hook_trainer._kept_on_cpu(torch, moved, copying)
        assert kept is not moved and kept["x"] is not moved["x"] and kept["y"][0] is not moved["y"][0]
        assert torch.equal(kept["x"], moved["x"]) and torch.equal(kept["y"][0], moved["y"][0])
    err = capfd.readouterr().err
    assert err.count("keeping a CPU copy of each batch before its step") == 1 and "cuda:0" in err
