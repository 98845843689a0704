"""Tests of rb.hooks.lightning_callback and lightning_step with a real Lightning Trainer on the
CPU. They skip when neither lightning nor pytorch_lightning can be imported (Debian has neither),
and fail then under REDUCE_REQUIRE_LIGHTNING. test_imports_without_lightning runs everywhere."""

import importlib
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reduce_batch as rb  # noqa: E402
import reduce_batch.errors  # noqa: E402
import reduce_batch.hooks  # noqa: E402
import reduce_batch.steps  # noqa: E402


def _import(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# The Lightning packages installed, by import name: the callback takes either.
PACKAGES = {n: m for n, m in ((n, _import(n)) for n in ("lightning.pytorch", "pytorch_lightning")) if m is not None}


@pytest.fixture
def lightning_packages():
    if not PACKAGES:
        why = "neither lightning nor pytorch_lightning can be imported (pip install lightning)"
        if os.environ.get("REDUCE_REQUIRE_LIGHTNING"):
            pytest.fail("REDUCE_REQUIRE_LIGHTNING is set and " + why, pytrace=False)
        pytest.skip(why)
    return PACKAGES


BAD = 27  # the sample with the bad label; batch 3 of 8


class Samples(torch.utils.data.Dataset):
    def __init__(self, bad_label=7, n=40):
        self.n, self.bad_label = n, bad_label

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.randn(6, generator=torch.Generator().manual_seed(i))
        return {"id": "s-%03d" % i, "x": x, "y": self.bad_label if i == BAD else i % 4}


def as_dict(samples):
    return {"ids": [s["id"] for s in samples], "x": torch.stack([s["x"] for s in samples]),
            "y": torch.tensor([s["y"] for s in samples])}


def as_tuple(samples):
    d = as_dict(samples)
    return d["x"], d["y"], d["ids"]


def _modules(L):
    """The test's LightningModules for one package (the Trainer takes its own package's only)."""

    class Labels(L.LightningModule):
        """cross_entropy on a dict batch; transfer_batch_to_device marks the batch it moves."""

        def __init__(self, width=6, classes=4):
            super().__init__()
            self.save_hyperparameters()
            self.lin = torch.nn.Linear(width, classes)

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            return dict(super().transfer_batch_to_device(batch, device, dataloader_idx), moved=True)

        def training_step(self, batch, batch_idx):
            assert batch["moved"]  # in the replay too
            return F.cross_entropy(self.lin(batch["x"]), batch["y"])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Weights(L.LightningModule):
        """A tuple batch; its weights go NaN before batch 2, whose loss then raises."""

        def __init__(self, width=6):
            super().__init__()
            self.save_hyperparameters()
            self.lin = torch.nn.Linear(width, 4)

        def on_train_batch_start(self, batch, batch_idx):
            if batch_idx == 2:
                with torch.no_grad():
                    self.lin.weight[0, 0] = float("nan")

        def training_step(self, batch):
            loss = F.cross_entropy(self.lin(batch[0]), batch[1])
            if not torch.isfinite(loss):
                raise FloatingPointError("loss is %s" % loss.item())
            return {"loss": loss}

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class NoHparams(Labels):
        """Needs an argument and records none: reduce cannot rebuild it."""

        def __init__(self, width):
            L.LightningModule.__init__(self)
            self.lin = torch.nn.Linear(width, 4)

    class FailsInValidation(Labels):
        def validation_step(self, batch, batch_idx):
            raise RuntimeError("validation broke")

    class Dtype(Labels):
        """Fails on every batch, saying the dtype its layer computes in."""

        def training_step(self, batch, batch_idx):
            raise ValueError("logits in %s" % self.lin(batch["x"]).dtype)

    class Masked(L.LightningModule):
        """A regression whose missing targets (NaN) are indexed out of the loss: the gradient of one
        is NaN all the same (0 * NaN), the weights go NaN, and the next batch's loss raises."""

        def __init__(self, width=6):
            super().__init__()
            self.save_hyperparameters()
            self.lin = torch.nn.Linear(width, 1)

        def training_step(self, batch, batch_idx):
            y = batch["y"].float()
            valid = torch.isfinite(y)
            loss = ((self.lin(batch["x"]).squeeze(1) - y) ** 2)[valid].sum() / valid.sum().clamp(min=1)
            if not torch.isfinite(loss):
                raise FloatingPointError("loss is %s" % loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    return Labels, Weights, NoHparams, FailsInValidation, Dtype, Masked


# The modules at the top level, one set per package, so that the replay imports them by name.
for _name, _L in PACKAGES.items():
    for _cls in _modules(_L):
        _cls.__qualname__ = _cls.__name__ = "%s_%s" % (_cls.__name__, _name.replace(".", "_"))
        globals()[_cls.__name__] = _cls


def module(name, package):
    return globals()["%s_%s" % (name, package.replace(".", "_"))]


def fit(L, model, callback, collate=as_dict, val=False, bad_label=7, precision="32-true"):
    loader = torch.utils.data.DataLoader(Samples(bad_label), batch_size=8, collate_fn=collate)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
                        limit_val_batches=1 if val else 0, num_sanity_val_steps=0, precision=precision)
    trainer.fit(model, loader, loader if val else None)


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_records_the_cpu_batch_and_replays_training_step(lightning_packages, package, tmp_path):
    if package not in lightning_packages:
        pytest.skip("%s is not installed" % package)
    L = lightning_packages[package]
    path = str(tmp_path / "crash.bin")
    cb = rb.hooks.lightning_callback(path)
    assert isinstance(cb, L.Callback)
    model = module("Labels", package)()
    with pytest.raises(IndexError, match="Target 7 is out of bounds") as crash:
        fit(L, model, cb)
    assert cb.saved == path

    b = rb.load(path)
    want = as_dict([Samples()[i] for i in range(24, 32)])
    # The loader's batch as it was before transfer_batch_to_device (no "moved"), structure kept.
    assert list(b.data) == ["ids", "x", "y"]
    assert b.data["ids"] == want["ids"] == b.sample_ids
    assert torch.equal(b.data["x"], want["x"]) and torch.equal(b.data["y"], want["y"])
    assert b.error["exception"].endswith("IndexError")
    assert (b.step["module"], b.step["qualname"]) == ("reduce_batch.hooks", "lightning_step")
    info = b.state["lightning"]
    assert info["hparams"] == {"width": 6, "classes": 4}
    assert info["batch_idx"] == 3
    assert info["module_class"]["qualname"] == type(model).__qualname__
    assert b.meta["lightning_module"].endswith(":" + type(model).__qualname__)
    for k, v in model.state_dict().items():  # the weights at the crash
        assert torch.equal(b.state["model"][k], v), k
    with pytest.raises(IndexError) as again:
        rb.steps.replay(path)
    assert str(again.value) == str(crash.value)


def test_the_recorded_weights_are_the_replays(lightning_packages, tmp_path):
    package, L = next(iter(lightning_packages.items()))
    paths = {}
    for state in (True, False):
        paths[state] = str(tmp_path / ("state.bin" if state else "bare.bin"))
        with pytest.raises(FloatingPointError, match="loss is nan"):
            fit(L, module("Weights", package)(), rb.hooks.lightning_callback(paths[state], state=state),
                collate=as_tuple, bad_label=1)
    b = rb.load(paths[True])
    assert isinstance(b.data, tuple) and len(b.data) == 3 and b.data[2][0] == "s-016"
    assert b.state["lightning"]["batch_idx"] == 2
    with pytest.raises(FloatingPointError, match="loss is nan"):
        rb.steps.replay(paths[True])
    # Without the weights, the module starts from its initial ones: the step passes.
    assert "model" not in rb.load(paths[False]).state
    assert torch.isfinite(rb.steps.replay(paths[False]))


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_the_replay_computes_in_the_recorded_precision(lightning_packages, tmp_path, precision):
    package, L = next(iter(lightning_packages.items()))
    path = str(tmp_path / "crash.bin")
    with pytest.raises(ValueError, match="logits in torch.bfloat16"):
        fit(L, module("Dtype", package)(), rb.hooks.lightning_callback(path), precision=precision)
    assert rb.load(path).state["lightning"]["precision"] == precision
    with pytest.raises(ValueError, match="logits in torch.bfloat16"):
        rb.steps.replay(path)


def test_a_module_without_hparams_is_recorded_with_a_warning(lightning_packages, tmp_path, capfd):
    package, L = next(iter(lightning_packages.items()))
    path = str(tmp_path / "crash.bin")
    with pytest.raises(IndexError):
        fit(L, module("NoHparams", package)(6), rb.hooks.lightning_callback(path))
    err = capfd.readouterr().err
    assert "saved the failing batch to %s" % path in err
    assert "cannot be rebuilt" in err and "save_hyperparameters()" in err and "--entry" in err
    assert rb.load(path).samples == 8
    with pytest.raises(rb.errors.HarnessError, match="save_hyperparameters"):
        rb.steps.replay(path)


def test_a_failure_outside_training_records_nothing(lightning_packages, tmp_path, capfd):
    package, L = next(iter(lightning_packages.items()))
    path = str(tmp_path / "crash.bin")
    with pytest.raises(RuntimeError, match="validation broke"):
        fit(L, module("FailsInValidation", package)(), rb.hooks.lightning_callback(path), val=True, bad_label=1)
    assert not os.path.exists(path)
    assert "came outside training" in capfd.readouterr().err


def test_imports_without_lightning():
    """reduce_hooks needs only reduce_batch, the standard library and torch; the callback says what
    is missing."""
    code = ("import sys; sys.modules['lightning'] = sys.modules['pytorch_lightning'] = None\n"
            "import reduce_batch.hooks as reduce_hooks\n"
            "assert not [m for m in sys.modules if 'lightning' in m and sys.modules[m]]\n"
            "try:\n    reduce_hooks.lightning_callback()\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "neither lightning nor pytorch_lightning" in out.stdout


def test_hooks_need_the_recorder_of_their_version(tmp_path):
    """reduce_hooks.py beside a reduce_batch.py of another version: an ImportError that says how to
    print both again."""
    (tmp_path / "reduce_batch.py").write_text('__version__ = "0.1.0"\n')
    (tmp_path / "reduce_hooks.py").write_text(open(os.path.join(HERE, "reduce_batch", "hooks.py")).read())
    out = subprocess.run([sys.executable, "-c", "import reduce_hooks"], cwd=str(tmp_path), capture_output=True,
                         text=True)
    assert out.returncode == 1 and "needs reduce_batch.py of the same version, not 0.1.0" in out.stderr, out.stderr
    assert "reduce recorder --hooks > reduce_hooks.py" in out.stderr


def test_a_window_records_the_steps_before_and_replays_them(lightning_packages, tmp_path):
    """window=2: the batches since the older of the last two copies of the module's weights and
    optimizer state; the replay runs them in order, each with its optimizer step, then the failing
    one. Without them the failing batch passes."""
    package, L = next(iter(lightning_packages.items()))
    path = str(tmp_path / "crash.bin")
    cb = rb.hooks.lightning_callback(path, window=2, sample_ids=lambda b: b["ids"])
    with pytest.raises(FloatingPointError, match="loss is nan"):
        fit(L, module("Masked", package)(), cb, bad_label=float("nan"))  # sample 27: batch 3 of 5
    assert cb.saved == path
    b = rb.load(path)
    assert b.failed_step == 4
    assert [(index, samples) for index, _, _, samples in b.window] == [(2, 8), (3, 8)]
    assert b.window[1][2][3] == "s-027" and torch.isnan(b.window[1][1]["y"][3])
    assert set(b.state) >= {"lightning", "model", "optimizer", "rng"}
    assert b.state["optimizer"]["state"], "the momentum buffers at the window's start"
    with pytest.raises(FloatingPointError, match="loss is nan"):
        rb.steps.replay(path)
    # The failing batch alone, from the window's start, passes: the cause is in step 3.
    alone = rb.load(path)
    alone.window = []
    assert torch.isfinite(rb.steps._call_step(rb.steps.resolve_step(alone.step), alone))


class CliModule:  # a module's class, at the top level, as LightningCLI's are
    def __init__(self, hidden=4):
        self.hidden = hidden


def test_cli_hparams_rebuild(capsys):
    """LightningCLI puts _instantiator (and _class_path) in self.hparams: no argument of the module's __init__, they
    are left out of what the recording keeps and of cls(**hparams), so that the module is rebuilt."""
    from reduce_batch import hook_lightning

    module = CliModule()
    module.hparams = {"hidden": 4, "_instantiator": "lightning.pytorch.cli.instantiate_module", "_class_path": "x.Y"}
    info = hook_lightning._lightning_info(None, module, 3)
    assert info["hparams"] == {"hidden": 4}
    assert "cannot be rebuilt" not in capsys.readouterr().err
    assert CliModule(**hook_lightning._own_hparams(module.hparams)).hidden == 4


def test_lightning_cli_callback(tmp_path, lightning_packages):
    """The callback as a class, given on LightningCLI's command line (jsonargparse builds it from its typed
    __init__): the failing batch is recorded with its dataset indices, and its module rebuilds from
    the hyperparameters LightningCLI saved."""
    pytest.importorskip("jsonargparse")
    cls = rb.hooks.LightningCallback
    assert issubclass(cls, tuple(m.Callback for m in PACKAGES.values()))
    script = os.path.join(HERE, "..", "..", "cmd", "reduce", "testdata", "record", "lightning_cli.py")
    p = subprocess.run([sys.executable, script, "fit", "--trainer.max_epochs=1", "--trainer.accelerator=cpu",
                        "--trainer.logger=false", "--trainer.enable_checkpointing=false",
                        "--trainer.enable_progress_bar=false", "--trainer.callbacks+=reduce_batch.hooks.LightningCallback",
                        "--trainer.callbacks.path=crash.bin"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=HERE), check=False)
    assert p.returncode == 1 and "saved the failing batch to crash.bin" in p.stderr, p.stderr[-3000:]
    b = rb.load(str(tmp_path / "crash.bin"))
    assert "123" in b.sample_ids and b.meta["sample_ids"] == "dataset index"
    assert "_instantiator" not in b.state["lightning"]["hparams"]
    batch, fn = reduce_batch.steps.load_candidate(str(tmp_path / "crash.bin"))
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        fn(batch)
