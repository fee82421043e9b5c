"""The unbalanced-training study of the SFT paper (dmlkit_lab.studies.sft_unbalanced): split, schemes, end to end."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from dmlkit.augment.augmented_loss import FeatureAugmentedLoss
from dmlkit.cli import main as cli_main
from dmlkit_lab.studies.sft_unbalanced import (
    UnbalancedStudyConfig,
    build_objective,
    class_scores,
    make_unbalanced_split,
)


def _labels(sizes: list[int]) -> torch.Tensor:
    """Dataset labels with ``sizes[c]`` images of class ``c``, interleaved (not sorted by class)."""
    lab = torch.cat([torch.full((n,), c) for c, n in enumerate(sizes)])
    return lab[torch.randperm(lab.numel(), generator=torch.Generator().manual_seed(0))]


SIZES = [16, 8, 16, 12, 16, 16, 14, 16, 9, 16, 16, 16]  # classes 1, 3, 6, 8 have < 16 images


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_split_counts_disjoint_and_complete(seed: int) -> None:
    labels = _labels(SIZES)
    s = make_unbalanced_split(labels, num_head=4, num_tail=3, head_train=10, tail_train=2, min_images=16, seed=seed)
    classes = s.classes.tolist()
    assert len(set(classes)) == 7 and all(SIZES[c] >= 16 for c in classes)
    head, tail = set(classes[:4]), set(classes[4:])
    assert not head & tail and s.num_head == 4 and s.num_tail == 3
    # training counts per study class: 10 for head, 2 for tail
    assert s.class_counts.tolist() == [10] * 4 + [2] * 3
    assert s.is_head.tolist() == [True] * 4 + [False] * 3
    # study labels agree with the dataset labels of the indexed images
    assert torch.equal(s.classes[s.train_labels], labels[s.train_indices])
    assert torch.equal(s.classes[s.test_labels], labels[s.test_indices])
    # train and test images are disjoint and together are every image of the chosen classes
    train, test = set(s.train_indices.tolist()), set(s.test_indices.tolist())
    assert not train & test
    chosen = {i for i, c in enumerate(labels.tolist()) if c in head | tail}
    assert train | test == chosen
    assert torch.bincount(s.test_labels, minlength=7).tolist() == [6] * 4 + [14] * 3


def test_split_is_seeded() -> None:
    labels = _labels(SIZES)
    a = make_unbalanced_split(labels, 4, 3, 10, 2, 16, seed=3)
    b = make_unbalanced_split(labels, 4, 3, 10, 2, 16, seed=3)
    c = make_unbalanced_split(labels, 4, 3, 10, 2, 16, seed=4)
    assert torch.equal(a.classes, b.classes) and torch.equal(a.train_indices, b.train_indices)
    assert not (torch.equal(a.classes, c.classes) and torch.equal(a.train_indices, c.train_indices))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_head=6, num_tail=3), "only 8 classes"),
        (dict(head_train=2, tail_train=2), "tail_train"),
        (dict(head_train=16), "min_images"),
        (dict(num_tail=0), "num_tail"),
    ],
)
def test_split_rejects_bad_input(kwargs: dict, match: str) -> None:
    args = dict(num_head=4, num_tail=3, head_train=10, tail_train=2, min_images=16, seed=0) | kwargs
    with pytest.raises(ValueError, match=match):
        make_unbalanced_split(_labels(SIZES), **args)


def test_config_rejects_threshold_outside_counts() -> None:
    assert UnbalancedStudyConfig(head_train=12, tail_train=2).threshold == 7
    with pytest.raises(ValueError, match="tail_threshold"):
        UnbalancedStudyConfig(head_train=12, tail_train=2, tail_threshold=2)
    with pytest.raises(ValueError, match="tail_threshold"):
        UnbalancedStudyConfig(head_train=12, tail_train=2, tail_threshold=13)


class _SpyLoss(nn.Module):
    """A classifier loss that records the labels of every call."""

    def __init__(self, num_classes: int, dim: int) -> None:
        super().__init__()
        self.w = nn.Linear(dim, num_classes)
        self.calls: list[torch.Tensor] = []

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.w(x)

    def forward(self, embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None):  # noqa: D102
        self.calls.append(labels.clone())
        return nn.functional.cross_entropy(self.logits(embeddings), labels)


def _objective(method: str, seed: int = 0) -> tuple[FeatureAugmentedLoss, _SpyLoss, object]:
    split = make_unbalanced_split(_labels(SIZES), 4, 3, 10, 2, 16, seed=seed)
    cfg = UnbalancedStudyConfig(embedding_dim=8, head_train=10, tail_train=2)
    spy = _SpyLoss(split.num_classes, 8)
    obj = build_objective(method, spy, split, cfg, seed)
    assert isinstance(obj, FeatureAugmentedLoss)
    return obj, spy, split


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unbalanced_scheme_moves_head_features_into_tail_classes_only(seed: int) -> None:
    obj, spy, split = _objective("unbalanced", seed)
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(split.num_classes).repeat(4)  # every class, head and tail
    x = torch.nn.functional.normalize(torch.randn(labels.numel(), 8, generator=g), dim=1)
    obj(x, labels)  # first step: no centres yet, nothing generated; the centres get initialised
    spy.calls.clear()
    for _ in range(5):
        obj(torch.nn.functional.normalize(torch.randn(labels.numel(), 8, generator=g), dim=1), labels)
        real, gen = spy.calls[-2], spy.calls[-1]
        assert torch.equal(real, labels)
        # one generated feature per head feature, each labelled with a tail class
        assert gen.numel() == int(split.is_head[labels].sum()) == obj.generator.last_num_generated
        assert not split.is_head[gen].any()
    assert set(torch.cat(spy.calls[1::2]).tolist()) == set(range(split.num_head, split.num_classes))


def test_balanced_scheme_moves_every_feature_to_another_class() -> None:
    obj, spy, split = _objective("balanced")
    labels = torch.arange(split.num_classes).repeat(4)
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(labels.numel(), 8, generator=g), dim=1)
    obj(x, labels)
    spy.calls.clear()
    targets = obj.generator.targets(labels)
    assert (targets != labels).all() and (targets >= 0).all()
    obj(x, labels)
    assert spy.calls[-1].numel() == labels.numel()
    assert split.is_head[spy.calls[-1]].any()  # head classes are targets too


def test_baseline_is_the_plain_classifier_and_scores_come_from_it() -> None:
    split = make_unbalanced_split(_labels(SIZES), 4, 3, 10, 2, 16, seed=0)
    cfg = UnbalancedStudyConfig(embedding_dim=8, head_train=10, tail_train=2)
    spy = _SpyLoss(split.num_classes, 8)
    assert build_objective("baseline", spy, split, cfg, 0) is spy
    x = torch.randn(5, 8)
    assert torch.equal(class_scores(spy, x), spy.w(x))
    with pytest.raises(ValueError, match="class scores"):
        class_scores(nn.Identity(), x)
    with pytest.raises(ValueError, match="method"):
        build_objective("mixed", spy, split, cfg, 0)


def test_tiny_end_to_end_run_writes_the_table(tmp_path) -> None:
    out = tmp_path / "study"
    argv = [
        "--out",
        str(out),
        "--seeds",
        "0",
        "1",
        "--steps",
        "2",
        "--batch-size",
        "8",
        "--num-head",
        "3",
        "--num-tail",
        "2",
        "--image-size",
        "16",
        "--embedding-dim",
        "16",
        "--quiet",
    ]
    assert cli_main(["study", "sft-unbalanced", *argv]) == 0  # the CLI registration, then the study's main
    table = (out / "table.md").read_text()
    assert "| | Baseline | Balanced Train | Unbalanced Train |" in table
    rows = [line for line in table.splitlines() if line.startswith("| Head |") or line.startswith("| Tail |")]
    assert len(rows) == 6 and all(line.count("±") == 3 for line in rows[:2])  # measured, paired differences, paper
    results = json.loads((out / "results.json").read_text())["results"]
    assert sorted((r["seed"], r["method"]) for r in results) == sorted(
        (s, m) for s in (0, 1) for m in ("baseline", "balanced", "unbalanced")
    )
    assert all(0.0 <= r["head"] <= 1.0 and 0.0 <= r["tail"] <= 1.0 for r in results)
    gen = {r["method"]: r["generated_features"] for r in results if r["seed"] == 0}
    assert gen["baseline"] == 0 and gen["balanced"] > 0


def _weights_file(tmp_path, seed: int = 3, in_channels: int = 3):
    from dmlkit.models.backbones import create_backbone

    torch.manual_seed(seed)
    state = create_backbone("resnet20", in_channels=in_channels).state_dict()
    path = tmp_path / "backbone.pt"
    torch.save(state, path)
    return path, state


def test_testbed_preset_fine_tunes_the_pretrained_backbone_at_three_rates(tmp_path) -> None:
    """The backbone starts from the given weights; backbone / new layers / classifier at 1e-4 / 1e-3 / 1e-2."""
    from dmlkit.losses import create_loss
    from dmlkit_lab.studies.sft_unbalanced import _model_config, _parameter_groups, build_embedder

    path, state = _weights_file(tmp_path)
    cfg = UnbalancedStudyConfig.testbed(pretrained=str(path))
    assert (cfg.dataset, cfg.split, cfg.image_size, cfg.embedding_dim) == ("glyphs_testbed", "dml", 32, 128)
    model = build_embedder(_model_config(cfg, 3), 3)
    loaded = model.backbone.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items() if k in loaded) and len(loaded) >= len(state) // 2
    classifier = create_loss(cfg.loss, num_classes=5, embedding_size=cfg.embedding_dim)
    groups = _parameter_groups(model, classifier, cfg)
    ids = [{id(p) for p in g["params"]} for g in groups]
    assert [g["lr"] for g in groups] == [1e-4, 1e-3, 1e-2]
    assert ids[0] == {id(p) for p in model.backbone.parameters() if p.requires_grad}
    assert ids[1] == {id(p) for p in model.head.parameters()}
    assert ids[2] == {id(p) for p in classifier.parameters()} and ids[2]
    assert not any(
        p.requires_grad for m in model.backbone.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()
    )


def test_testbed_cli_runs_on_the_dml_classes(tmp_path) -> None:
    path, _ = _weights_file(tmp_path, in_channels=1)  # glyphs are grey
    out = tmp_path / "study"
    argv = [
        "--out",
        str(out),
        "--testbed",
        "--pretrained",
        str(path),
        "--seeds",
        "0",
        "--steps",
        "2",
        "--batch-size",
        "8",
        "--num-head",
        "3",
        "--num-tail",
        "2",
        "--methods",
        "baseline",
        "unbalanced",
        "--quiet",
    ]
    assert cli_main(["study", "sft-unbalanced", *argv]) == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["dataset"] == "glyphs_testbed" and saved["config"]["split"] == "dml"
    assert (saved["config"]["num_head"], saved["config"]["steps"], saved["config"]["classifier_lr"]) == (3, 2, 1e-2)
    assert "pretrained:" in (out / "table.md").read_text()
    assert {r["method"] for r in saved["results"]} == {"baseline", "unbalanced"}


def test_class_balanced_sampling_draws_every_class_equally_often() -> None:
    """Head classes (10 images) and tail classes (2): uniform draws favour a head class 5 : 1, class-balanced 1 : 1."""
    from dmlkit_lab.studies.sft_unbalanced_split import training_batches

    split = make_unbalanced_split(_labels(SIZES), 4, 4, 10, 2, 12, seed=0)
    draws = {}
    for sampling in ("uniform", "class_balanced"):
        cfg = UnbalancedStudyConfig(
            num_head=4,
            num_tail=4,
            head_train=10,
            tail_train=2,
            min_images=12,
            steps=400,
            batch_size=12,
            sampling=sampling,
        )
        batches = training_batches(split, cfg.sampling, cfg.batch_size, cfg.steps, seed=0)
        assert len(batches) == 400 and all(b.numel() == 12 for b in batches)
        per_class = torch.bincount(split.train_labels[torch.cat(batches)], minlength=8).double()
        draws[sampling] = per_class[:4].mean() / per_class[4:].mean()  # head : tail draws per class
    assert 4.5 < draws["uniform"] < 5.5
    assert 0.9 < draws["class_balanced"] < 1.1
    with pytest.raises(ValueError, match="sampling"):
        UnbalancedStudyConfig(sampling="square_root")
