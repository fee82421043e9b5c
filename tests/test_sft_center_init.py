"""``methods.sft.init_centers: data``: before the first step every class centre is its training images' mean.

Checked against brute force (one image at a time, eval mode, in the space the centres live in), on
one process and on two gloo processes (every rank ends with the same centres); a resumed run keeps
the checkpoint's centres and does not embed the training split again; with ``none`` (the default)
a run is the run of the code before the option, bit for bit.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from dmlkit.assemble import build_trainer, resume_trainer
from dmlkit.augment import SFTConfig, ClassCenters, FeatureGenerator, class_sums
from dmlkit.config import load_config
from dmlkit.engine.callbacks import Callback
from dmlkit.engine.checkpoint import load_checkpoint
from dmlkit.methods.sft import SFT, CenterInit, SFTStats
from tests_helpers import TINY_OVERRIDES, stop_after_validation

NUM_CLASSES, IN_DIM, DIM = 6, 5, 4  # class 5 has no image: it keeps no centre


class TinySet:
    """23 labelled vectors of 5 classes; ``with_augment(True)`` adds noise, so augmented means would differ."""

    def __init__(self, augment: bool = True) -> None:
        g = torch.Generator().manual_seed(3)
        self.labels = torch.tensor([0, 1, 2, 3, 4] * 4 + [2, 4, 4])
        self.x = (
            torch.randn(len(self.labels), IN_DIM, generator=g) + 2 * torch.randn(5, IN_DIM, generator=g)[self.labels]
        )
        self.augment = augment

    def with_augment(self, augment: bool) -> "TinySet":
        other = TinySet(augment)
        return other

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.x[i] + (1.0 if self.augment else 0.0), int(self.labels[i])


def tiny_model() -> nn.Module:
    """Linear -> BatchNorm with set running statistics: eval and train mode give different outputs."""
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(IN_DIM, DIM), nn.BatchNorm1d(DIM))
    with torch.no_grad():
        model[0].weight.copy_(torch.randn(DIM, IN_DIM, generator=g))
        model[0].bias.copy_(torch.randn(DIM, generator=g))
        model[1].running_mean.copy_(torch.randn(DIM, generator=g))
        model[1].running_var.copy_(torch.rand(DIM, generator=g) + 0.5)
    return model.train()


class ListLog:
    def __init__(self) -> None:
        self.records: list[dict] = []

    def append(self, record: dict) -> None:
        self.records.append(record)


def fake_trainer(model: nn.Module, rank: int = 0, world: int = 1, step: int = 0) -> SimpleNamespace:
    """The part of ``TrainerView`` the callback reads."""
    fabric = SimpleNamespace(device=torch.device("cpu"), world_size=world, global_rank=rank)
    return SimpleNamespace(fabric=fabric, model=model, state=SimpleNamespace(step=step), log=ListLog())


# (transform, normalize_input) -> the space of the centres, written out independently of FeatureGenerator
SPACES = {
    ("sft", False): lambda out: out,  # the loss's embedding is the network's output
    ("sft", True): lambda out: F.normalize(out, dim=0),  # the loss normalises: centres on the unit sphere
    ("sft_d", True): lambda out: out,  # SFT-d: the pre-normalisation features themselves (Sec. 3.4)
}


def brute_force_means(model: nn.Module, space) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class means, one un-augmented image at a time, eval mode, in float64."""
    data = TinySet(augment=False)
    model.eval()
    means, present = torch.zeros(NUM_CLASSES, DIM, dtype=torch.float64), torch.zeros(NUM_CLASSES, dtype=torch.bool)
    with torch.no_grad():
        for j in range(NUM_CLASSES):
            rows = [space(model(data[i][0][None])[0]).double() for i in range(len(data)) if data[i][1] == j]
            if rows:
                means[j] = sum(rows) / len(rows)
                present[j] = True
    model.train()
    return means, present


@pytest.mark.parametrize("transform, normalize_input", list(SPACES))
def test_centres_are_the_class_means_of_the_initial_network(transform, normalize_input):
    model = tiny_model()
    generator = FeatureGenerator(NUM_CLASSES, DIM, transform=transform, normalize_input=normalize_input)
    init = CenterInit(generator, TinySet(augment=True), batch_size=4)  # 23 images: the last batch holds 3
    trainer = fake_trainer(model)
    init.on_train_start(trainer)
    expected, present = brute_force_means(tiny_model(), SPACES[(transform, normalize_input)])
    assert torch.equal(generator.centers.initialized, present) and not present[5]
    torch.testing.assert_close(generator.centers.centers, expected.float(), rtol=0, atol=1e-6)
    assert (generator.centers.centers[5] == 0).all()
    assert model.training  # the mode is restored for the training steps
    (record,) = trainer.log.records
    assert record["split"] == "sft" and record["step"] == 0 and record["sft/center_init_seconds"] >= 0
    assert record["sft/center_init_images"] == 23 and record["sft/center_init_classes"] == 5


def test_a_resumed_trainer_keeps_the_centres_it_has():
    generator = FeatureGenerator(NUM_CLASSES, DIM)
    init = CenterInit(generator, TinySet(), batch_size=4)
    trainer = fake_trainer(tiny_model(), step=4)  # last.pt was loaded: the loop is at step 4
    init.on_train_start(trainer)
    assert not generator.centers.initialized.any() and trainer.log.records == []


def test_set_means_and_class_sums_check_their_input():
    centres = ClassCenters(3, 2)
    x, y = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]]), torch.tensor([0, 0, 2])
    sums, counts = class_sums(x, y, 3)
    assert torch.equal(centres.set_means(sums, counts), torch.tensor([True, False, True]))
    torch.testing.assert_close(centres.centers, torch.tensor([[2.0, 3.0], [0.0, 0.0], [5.0, 0.0]]))
    with pytest.raises(ValueError, match=r"sums must have shape \(3, 2\)"):
        centres.set_means(sums[:2], counts)
    with pytest.raises(ValueError, match="labels must lie in"):
        class_sums(x, torch.tensor([0, 1, 3]), 3)
    with pytest.raises(ValueError, match="mode 'update' or 'pick'"):
        ClassCenters(3, 2, mode="random").set_means(sums, counts)


def test_config_values_are_checked():
    assert SFTConfig(name="sft").init_centers == "none"
    with pytest.raises(ValueError, match=r"methods.sft.init_centers must be one of \('none', 'data'\)"):
        SFTConfig(name="sft", init_centers="mean")
    with pytest.raises(ValueError, match="set methods.sft.centers: update"):
        SFTConfig(name="sft", init_centers="data", centers="random")


# --------------------------------------------------------------------------- two processes
class Wrapped(nn.Module):
    """Stands for Fabric's DDP wrapper: ``.module`` is the bare network; its own forward would run collectives."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x):
        raise AssertionError("the DDP-wrapped forward was called: shards of different sizes would hang")


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        generator = FeatureGenerator(NUM_CLASSES, DIM, transform="sft", normalize_input=True)
        CenterInit(generator, TinySet(), batch_size=4).on_train_start(fake_trainer(Wrapped(tiny_model()), rank, world))
        torch.save(
            {"centers": generator.centers.centers, "initialized": generator.centers.initialized},
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()


def test_every_process_ends_with_the_same_centres(tmp_path):
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert torch.equal(ranks[0]["centers"], ranks[1]["centers"])  # bit for bit
    assert torch.equal(ranks[0]["initialized"], ranks[1]["initialized"])
    expected, present = brute_force_means(tiny_model(), SPACES[("sft", True)])
    assert torch.equal(ranks[0]["initialized"], present)
    torch.testing.assert_close(ranks[0]["centers"], expected.float(), rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- in a run
QUICK = TINY_OVERRIDES + [
    "plots=false",
    "eval.clustering=false",
    "train.log_every=1",
    "methods.sft.name=sft",
    "data.max_classes=8",
]  # 6 training classes, batches of 4 classes x 4


def generator_of(trainer) -> FeatureGenerator:
    (generator,) = [m for m in trainer.objective.modules() if isinstance(m, FeatureGenerator)]
    return generator


class CentresAtStart(Callback):
    """Runs after the methods' callbacks: keeps the centres the first step will use and the embedded split."""

    def __init__(self) -> None:
        self.centers = self.initialized = self.expected = None

    def on_train_start(self, trainer):
        g = generator_of(trainer)
        self.centers, self.initialized = g.centers.centers.clone(), g.centers.initialized.clone()
        if trainer.state.step == 0:  # brute force over the un-augmented training split, one image at a time
            train, model = trainer.splits.train.with_augment(False), trainer.model
            model.eval()
            sums = torch.zeros_like(self.centers, dtype=torch.float64)
            counts = torch.zeros(len(self.centers), dtype=torch.float64)
            with torch.no_grad():
                for i in range(len(train)):
                    image, label = train[i]
                    sums[label] += model(image[None])[0].double()
                    counts[label] += 1
            model.train()
            self.expected = (sums / counts[:, None]).float()


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_starts_from_the_data_centres_and_its_resume_keeps_the_checkpoints(tmp_path, monkeypatch):
    cfg = load_config("configs/quickstart.yaml", QUICK + ["methods.sft.init_centers=data"])
    first = CentresAtStart()
    with pytest.raises(KeyboardInterrupt):
        build_trainer(cfg, tmp_path / "cut", callbacks=[first, stop_after_validation(4)], quiet=True).fit()
    assert first.initialized.all()  # every training class has a centre before the first step
    torch.testing.assert_close(first.centers, first.expected, rtol=0, atol=1e-5)
    logged = records(tmp_path / "cut")
    (init,) = [r for r in logged if r["split"] == "sft"]
    assert init["step"] == 0 and init["sft/center_init_classes"] == 6 and init["sft/center_init_images"] > 6
    assert [r["sft/generated"] for r in logged if r["split"] == "train"] == [
        16,
        16,
        16,
        16,
    ]  # the whole batch, from step 1

    saved = load_checkpoint(tmp_path / "cut" / "last.pt")  # step 4
    key = next(k for k in saved["objective"] if k.endswith("centers.centers"))
    calls = []
    monkeypatch.setattr(CenterInit, "class_sums", lambda self, *a: calls.append(a) or pytest.fail("recomputed"))
    resumed = CentresAtStart()
    resume_trainer(tmp_path / "cut", callbacks=[resumed], quiet=True).fit()
    assert calls == [] and resumed.expected is None
    assert torch.equal(resumed.centers, saved["objective"][key])  # the checkpoint's centres, not fresh means
    assert not torch.equal(resumed.centers, first.centers)  # 4 steps of Eq. 9 moved them
    assert len([r for r in records(tmp_path / "cut") if r["split"] == "sft"]) == 1


def test_none_trains_exactly_as_before_the_option(tmp_path, monkeypatch):
    run = lambda name, *extra: build_trainer(  # noqa: E731
        load_config("configs/quickstart.yaml", QUICK + ["train.max_steps=4", "train.val_every=4", *extra]),
        tmp_path / name,
        quiet=True,
    ).fit()
    run("none", "methods.sft.init_centers=none")
    with monkeypatch.context() as m:  # SFT's hooks without init_centers: the statistics only
        m.setattr(SFT, "callbacks", lambda self: [SFTStats(self.generated)])
        run("before")
    a, b = load_checkpoint(tmp_path / "none" / "last.pt"), load_checkpoint(tmp_path / "before" / "last.pt")
    for part in ("model", "objective"):
        assert a[part].keys() == b[part].keys()
        for key, value in a[part].items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, b[part][key]), (part, key)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "elapsed"} for r in rs]  # noqa: E731
    assert strip(records(tmp_path / "none")) == strip(records(tmp_path / "before"))
    train = [r for r in records(tmp_path / "none") if r["split"] == "train"]
    assert [r["sft/generated"] for r in train] == [0, 8, 16, 16]  # as on the code before the option (commit 55e1d5f)
    assert not [r for r in records(tmp_path / "none") if r["split"] == "sft"]


def test_the_testbed_config_is_testbed_sft_with_centres_from_the_data():
    import dataclasses

    cfg, base = load_config("configs/testbed/testbed_sft_init.yaml"), load_config("configs/testbed/testbed_sft.yaml")
    assert (
        cfg.name == "testbed_sft_init"
        and cfg.methods.sft.init_centers == "data"
        and base.methods.sft.init_centers == "none"
    )
    sft = dataclasses.replace(cfg.methods.sft, init_centers="none")
    assert dataclasses.replace(cfg, name=base.name, methods=cfg.methods.replace(sft=sft)) == base
