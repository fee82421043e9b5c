"""The GSP controlled studies: synthetic token data, glyph collages, PCC (Prop. 4.2.1), each study with a tiny budget."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dmlkit.data import check_dataset, class_disjoint_split, create_dataset
from dmlkit.data.datasets.glyphs import load_glyph_table
from dmlkit.data.datasets.synthetic import TokenSpec, balanced_labels, sample_token_bags
from dmlkit_lab.evaluation.pcc import pcc_diagnostics, pcc_embedding, prototype_cover_delta, prototype_histogram
from dmlkit.proxies.kcenter import greedy_k_center


# ------------------------------------------------------------------ synthetic tokens
def test_token_bags_follow_the_class_fraction():
    spec = TokenSpec()
    labels = balanced_labels(16, 30)
    ids, frac = sample_token_bags(spec, labels, torch.Generator().manual_seed(0))
    assert ids.shape == (480, 50)
    own = (ids // spec.class_tokens == labels[:, None]) & ~spec.is_background(ids)
    assert torch.equal(own | spec.is_background(ids), torch.ones_like(own))  # no token of another class
    assert torch.equal(own.sum(1), torch.round(frac * 50).long())
    assert abs(float(frac.mean()) - 0.5) < 0.02 and abs(float(frac.std()) - 0.1) < 0.02


def test_synthetic_study_tiny_budget(tmp_path):
    from dmlkit_lab.studies.gsp_synthetic import SyntheticStudyConfig, run_study

    cfg = SyntheticStudyConfig(
        max_epochs=2, steps_per_epoch=2, eval_per_class=4, iters=5, patience=1, prototype_init="random"
    )
    results = run_study(cfg, tmp_path)
    assert [r["variant"] for r in results] == ["gap", "gsp", "gsp+zs"]
    table = (tmp_path / "table.md").read_text()
    assert all(f"| {v} |" in table for v in ("gap", "gsp", "gsp+zs"))
    assert (tmp_path / "embedding_space.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "results.json").read_text())["results"]
    assert all(0 <= r["test_map_at_r"] <= 1 for r in saved)
    # tokens stay in the clamped box
    assert all(float(r["tokens"].abs().max()) <= cfg.token_range + 1e-7 for r in results)


# ------------------------------------------------------------------ glyph collages
@pytest.fixture(scope="module")
def collages():
    kw = dict(per_class=3)
    return create_dataset("glyph_collage", "train", **kw), create_dataset("glyph_collage", "test", **kw)


def test_collage_classes_are_disjoint_across_train_val_test(collages):
    train, test = collages
    check_dataset(train)
    check_dataset(test)
    assert train.num_classes == 20 and test.num_classes == 16
    tr_bg, val_bg = train.background_codepoints
    (te_bg,) = test.background_codepoints
    val_fg = {cp for cp, g in zip(train.foreground_codepoints, train.background_group.tolist()) if g == 1}
    tr_fg = set(train.foreground_codepoints) - val_fg
    groups = [tr_fg, val_fg, set(test.foreground_codepoints), set(tr_bg), set(val_bg), set(te_bg)]
    assert sum(len(g) for g in groups) == len(set().union(*groups))  # every character plays one role
    # the engine's hold-out (last 20% of the train classes) is exactly the validation group
    _, val = class_disjoint_split(train, 0.2)
    assert val.num_classes == 4
    assert train.background_group.tolist() == [0] * 16 + [1] * 4


def test_collage_foreground_cell_holds_the_label_glyph(collages):
    train, _ = collages
    table = load_glyph_table()
    half = train.image_size // 2
    for i in range(0, len(train), 7):
        cell = int(train.foreground_cell[i])
        row = int(train.cell_glyph_rows[i, cell])
        assert int(table.codepoints[table.image_class[row]]) == train.foreground_codepoints[int(train.labels[i])]
        r, c = divmod(cell, 2)
        tile = train.images[i, r * half : (r + 1) * half, c * half : (c + 1) * half].float() / 255
        glyph = torch.from_numpy(table.images[row]).float()[None, None] / 255
        expected = F.interpolate(glyph, size=(half, half), mode="area")[0, 0]
        assert (tile - expected).abs().max() <= 0.5 / 255 + 1e-6
        mask = train.foreground_mask(8, 8)[i]
        assert mask.sum() == 16 and mask[r * 4, c * 4]


def test_pooling_weights_are_uniform_for_gap_and_sum_to_one_for_gsp(collages):
    from dmlkit.models import build_embedder
    from dmlkit.models.config import ModelConfig
    from dmlkit_lab.studies.collage import foreground_share, pooling_weights

    x, _ = collages[1].get_batch(range(6))
    mask = collages[1].foreground_mask(8, 8)[:6]
    gap = build_embedder(ModelConfig(pooling="gap", embedding_dim=8), in_channels=1)
    w, hw = pooling_weights(gap, x)
    assert hw == (8, 8) and foreground_share(w, hw, mask) == pytest.approx(0.25)
    gsp = build_embedder(
        ModelConfig(pooling="gsp", pooling_params={"num_prototypes": 4, "iters": 10}, embedding_dim=8), 1
    )
    w, _ = pooling_weights(gsp, x)
    torch.testing.assert_close(w.sum(1), torch.ones(6), atol=1e-4, rtol=0)  # (1/n - rho_j)/mu sums to 1


def test_collage_bad_input():
    with pytest.raises(ValueError, match="even"):
        create_dataset("glyph_collage", "train", image_size=33)
    with pytest.raises(ValueError, match="distinct characters"):
        create_dataset("glyph_collage", "test", test_classes=10_000)


def test_collage_study_tiny_budget(tmp_path):
    from dmlkit_lab.studies.collage import run_study

    results = run_study(tmp_path, ["gsp+zs"], max_steps=2, val_every=2, per_class=4, samples=3, seeds=[0, 1])
    assert [(r["variant"], r["seed"]) for r in results] == [("gsp+zs", 0), ("gsp+zs", 1)]
    assert all(
        0.0 <= r["foreground_weight_share"] <= 1.0 for r in results
    )  # the known answers: test_foreground_share_*
    assert (tmp_path / "heatmaps.png").stat().st_size > 1000
    assert "| gsp+zs | 2 |" in (tmp_path / "table.md").read_text()
    summary = tmp_path / "runs" / "gsp_zs-seed1" / "summary.json"
    stamp = summary.stat().st_mtime_ns
    again = run_study(tmp_path, ["gsp+zs"], max_steps=2, val_every=2, per_class=4, samples=3, seeds=[0, 1])
    assert summary.stat().st_mtime_ns == stamp  # finished runs are reused, not trained again
    assert again == results


# ------------------------------------------------------------------ Chapter 4: PCC
def _brute_histogram(x, v):
    hist = torch.zeros(x.shape[0], v.shape[0], dtype=x.dtype)
    for b in range(x.shape[0]):
        for j in range(x.shape[1]):
            dists = [float((x[b, j] - v[i]).norm()) for i in range(v.shape[0])]
            hist[b, dists.index(min(dists))] += 1.0 / x.shape[1]
    return hist


def test_histogram_is_nearest_prototype_assignment():
    g = torch.Generator().manual_seed(0)
    x, v = torch.randn(3, 7, 4, generator=g, dtype=torch.float64), torch.randn(5, 4, generator=g, dtype=torch.float64)
    torch.testing.assert_close(prototype_histogram(x, v), _brute_histogram(x, v))
    torch.testing.assert_close(pcc_embedding(x, v), _brute_histogram(x, v) @ v)


@settings(max_examples=40, deadline=None)
@example(seed=0, b=2, n=1, d=2, k=1)  # delta > 1 (two far points, one prototype): err^2 <= delta need not hold
@given(
    seed=st.integers(0, 10_000),
    b=st.integers(1, 4),
    n=st.integers(1, 12),
    d=st.integers(1, 6),
    k=st.integers(1, 10),
)
def test_proposition_4_2_1_error_bounded_by_covering_radius(seed, b, n, d, k):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, d, generator=g, dtype=torch.float64)
    x = (
        x / x.norm(dim=-1, keepdim=True).clamp(min=1.0) * torch.rand(b, n, 1, generator=g, dtype=torch.float64)
    )  # unit ball
    points = x.reshape(-1, d)
    v = points[greedy_k_center(points, min(k, points.shape[0]))]
    delta = prototype_cover_delta(points, v)
    err = (pcc_embedding(x, v) - x.mean(1)).norm(dim=-1)
    assert float(err.max()) <= delta + 1e-12
    if delta <= 1.0:  # the statement of Proposition 4.2.1, err^2 <= delta, follows from err <= delta when delta <= 1
        assert float(err.max()) ** 2 <= delta + 1e-12
    diag = pcc_diagnostics(x, v)
    assert (diag["bound_holds"] == 1.0 or delta > 1.0) and diag["max_error"] <= diag[
        "max_mean_nn_distance"
    ] + 1e-12 <= delta + 2e-12


def test_pcc_study_writes_its_table(tmp_path):
    from dmlkit_lab.studies.pcc import run_study

    rows = run_study(tmp_path, ks=(4, 16), classes=2, per_class=3)
    assert [r["k"] for r in rows] == [4, 16] and all(r["bound_holds"] == 1.0 for r in rows)
    assert "| 16 |" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "pcc_error.png").stat().st_size > 1000


def test_pcc_table_on_a_case_with_a_known_answer():
    """Local features on the corners of a 0.3 x 0.4 rectangle. k = 4: every feature is a prototype, PCC = GAP.
    k = 2: greedy k-centre from corner 0 takes the opposite corner (0.3, 0.4); (0.3, 0) joins corner 0 and (0, 0.4)
    joins (0.3, 0.4), so delta = 0.3 and the PCC errors are 0.075 and 0.15 (worked out by hand)."""
    from dmlkit_lab.studies.pcc import pcc_table

    a0, a1, a2, a3 = torch.tensor([[0.0, 0.0], [0.3, 0.0], [0.0, 0.4], [0.3, 0.4]], dtype=torch.float64)
    features = torch.stack([torch.stack([a0, a0, a1, a3]), torch.stack([a2, a2, a2, a1])])
    two, four = pcc_table(features, ks=(2, 4))
    assert four["delta"] == 0.0 and four["max_error"] == pytest.approx(0.0, abs=1e-12)
    assert two["delta"] == pytest.approx(0.3)
    assert two["errors"] == pytest.approx([0.075, 0.15])
    assert two["max_error"] == pytest.approx(0.15) and two["bound_holds"] == 1.0


def test_foreground_share_known_answers(collages):
    """GAP weighs every location 1/n: its share is the foreground quarter's 0.25 exactly; all weight inside the
    mask gives 1, all outside 0; a GSP model's weights (plan summed over prototypes / mu) sum to 1 per image."""
    from dmlkit.models import ModelConfig, build_embedder
    from dmlkit_lab.studies.collage import foreground_share, pooling_weights

    _, test = collages
    images, _ = test.get_batch(range(8))
    mask = test.foreground_mask(8, 8)[:8]
    assert mask.flatten(1).sum(1).tolist() == [16] * 8  # one 4 x 4 quarter of the 8 x 8 map
    gap = build_embedder(ModelConfig(backbone="resnet20", embedding_dim=8), in_channels=test.in_channels)
    weights, hw = pooling_weights(gap, images)
    assert hw == (8, 8) and foreground_share(weights, hw, mask) == pytest.approx(0.25, abs=1e-7)
    inside = mask.flatten(1).double()  # unnormalised: the share divides by the total weight
    assert foreground_share(inside, hw, mask) == pytest.approx(1.0)
    assert foreground_share((~mask).flatten(1).double() / 48, hw, mask) == pytest.approx(0.0)
    gsp = build_embedder(
        ModelConfig(
            backbone="resnet20",
            embedding_dim=8,
            pooling="gsp",
            pooling_params={"num_prototypes": 4, "mu": 0.3, "eps": 20.0},
        ),
        in_channels=test.in_channels,
    )
    weights, _ = pooling_weights(gsp, images)
    torch.testing.assert_close(weights.sum(1), torch.ones(8), atol=1e-4, rtol=0)
    assert weights.std(1).max() > 1e-4  # GSP at eps 20 is not uniform


# ------------------------------------------------------------------ issue 20 item 7: the studies as the thesis runs them
def _hand_model(num_prototypes, memory_size=4, warmup_steps=1, normalization="unit_ball"):
    """A synthetic-study GSP model whose tokens 0-3 sit at hand-picked points of the 2-D box."""
    from dmlkit_lab.studies.gsp_synthetic import SyntheticStudyConfig, TokenBagModel

    cfg = SyntheticStudyConfig(
        num_prototypes=num_prototypes,
        memory_size=memory_size,
        warmup_steps=warmup_steps,
        iters=60,
        prototype_init="kcenter",
        normalization=normalization,
    )
    model = TokenBagModel(cfg.spec, cfg, "gsp", torch.Generator().manual_seed(0)).double()
    points = torch.tensor([[0.0, 0.0], [0.1, 0.0], [0.3, 0.3], [-0.2, 0.1]], dtype=torch.float64)
    with torch.no_grad():
        model.tokens[:4] = points
    return model.train(), points


def test_synthetic_study_l2_reading_starts_prototypes_on_the_unit_circle():
    """``normalization="l2"`` (the author's code): the memory keeps l2-normalised GAP vectors, so the k-centre
    prototypes are the hand-picked points' directions: (0.1, 0) -> (1, 0), (0.3, 0.3) -> (0.71, 0.71),
    (-0.2, 0.1) -> (-0.89, 0.45), the zero vector stays 0. A bad reading is refused with the choices."""
    from dmlkit_lab.studies.gsp_synthetic import SyntheticStudyConfig

    model, points = _hand_model(num_prototypes=3, normalization="l2")
    model(torch.tensor([[0, 1, 2, 3, 64, 65]] * 2))  # the skipped batch (warmup_steps=1)
    model(torch.arange(4).repeat_interleave(5).reshape(4, 5))  # fills the memory
    assert model.pool.normalization == "l2" and not model.pools_with_gap
    directions = torch.nn.functional.normalize(points, dim=1)
    torch.testing.assert_close(model.pool.memory.rows, directions)
    # farthest-first from the zero row: every direction is 1 away, (1, 0) comes first; then (-0.89, 0.45)
    # (1 from the zero row, 1.94 from (1, 0)) beats (0.71, 0.71) (0.77 from (1, 0)); the study then clips them to
    # the tokens' box [-0.3, 0.3], as the author's kernel constraint does
    torch.testing.assert_close(model.prototypes.data, directions[[0, 1, 3]].clamp(-0.3, 0.3))
    with pytest.raises(ValueError, match="unit_ball, l2"):
        SyntheticStudyConfig(normalization="cosine")


def test_synthetic_kcenter_start_takes_the_farthest_first_gap_vectors():
    """Sec. 5.3.1 as the author's code runs it: GAP while the memory fills, then the greedy k-centres of the memory.
    Bags of one repeated token have that token as GAP vector, so the memory is the four points (0, 0), (0.1, 0),
    (0.3, 0.3), (-0.2, 0.1); farthest-first from row 0 takes (0, 0), then (0.3, 0.3) (0.42 away), then
    (-0.2, 0.1) (0.22 from its nearest pick, against 0.1 for (0.1, 0)) -- worked out by hand."""
    model, points = _hand_model(num_prototypes=3)
    mixed = torch.tensor([[0, 1, 2, 3, 64, 65]] * 2)
    emb, plan = model(mixed)  # skipped batch (warmup_steps=1): GAP, nothing stored
    torch.testing.assert_close(emb, model.tokens[mixed].mean(1))
    assert plan.abs().sum() == 0 and model.pools_with_gap and int(model.pool.memory.count) == 0
    emb, _ = model(torch.arange(4).repeat_interleave(5).reshape(4, 5))  # fills the memory: GAP for this batch
    torch.testing.assert_close(emb, points)
    assert not model.pools_with_gap
    torch.testing.assert_close(model.prototypes.data, points[[0, 2, 3]])
    emb, plan = model(mixed)  # GSP from now on
    assert not torch.allclose(emb, model.tokens[mixed].mean(1))
    torch.testing.assert_close(plan.sum(dim=(1, 2)), torch.full((2,), 0.3, dtype=torch.float64))


def test_synthetic_eval_bags_do_not_enter_the_memory():
    from dmlkit_lab.studies.gsp_synthetic import _embed

    model, _ = _hand_model(num_prototypes=2, warmup_steps=0)
    _embed(model, torch.arange(4).repeat_interleave(5).reshape(4, 5))
    assert int(model.pool.memory.count) == 0 and model.pools_with_gap and model.training


def test_synthetic_prototypes_and_tokens_stay_in_the_box_even_at_a_huge_learning_rate(tmp_path):
    """With lr 0.5 Adam moves every coordinate by about 0.5 per step: only the clamp keeps them in [-0.3, 0.3]."""
    from dmlkit_lab.studies.gsp_synthetic import SyntheticStudyConfig, train_variant

    for init in ("kcenter", "random"):
        cfg = SyntheticStudyConfig(
            max_epochs=3,
            steps_per_epoch=3,
            eval_per_class=3,
            iters=10,
            patience=5,
            lr=0.5,
            prototype_init=init,
            warmup_steps=0,
            memory_size=64,
        )
        r = train_variant("gsp", cfg)
        assert r["kcenter_step"] == (1 if init == "kcenter" else None)  # one batch of 64 bags fills the memory
        assert float(r["prototypes"].abs().max()) <= cfg.token_range + 1e-7
        assert float(r["tokens"].abs().max()) <= cfg.token_range + 1e-7
        assert float(r["prototypes"].abs().max()) > cfg.token_range - 1e-3  # they were pushed against the wall


def test_synthetic_study_tiny_budget_three_seeds_pairs_with_gap(tmp_path):
    from dmlkit_lab.studies.gsp_synthetic import SyntheticStudyConfig, run_study
    from dmlkit_lab.studies.paired_runs import paired_differences

    cfg = SyntheticStudyConfig(
        max_epochs=2, steps_per_epoch=2, eval_per_class=4, iters=5, patience=1, warmup_steps=1, memory_size=64
    )
    results = run_study(cfg, tmp_path, seeds=[0, 1, 2])
    assert [(r["seed"], r["variant"]) for r in results] == [(s, v) for s in (0, 1, 2) for v in ("gap", "gsp", "gsp+zs")]
    assert all(r["kcenter_step"] == 2 for r in results if r["variant"] != "gap")
    diffs = paired_differences(results)
    by = {(r["seed"], r["variant"]): r["test_map_at_r"] for r in results}
    assert [d["test_map_at_r"] for d in diffs] == [
        by[s, v] - by[s, "gap"] for s in (0, 1, 2) for v in ("gsp", "gsp+zs")
    ]
    assert "| gsp | 0: " in (tmp_path / "table.md").read_text()


def test_collage_pretrained_overrides_build_the_section_5_2_4_model():
    """Pretrained mode: backbone map -> 1x1 conv to 128-d -> pooling -> l2 with no head, for GAP and GSP alike (only
    the pooling and the name differ); the backbone learns at a tenth of the new layers' rate with frozen BatchNorm."""
    import dataclasses

    from dmlkit.config import load_config
    from dmlkit.models import build_embedder
    from dmlkit_lab.studies.collage import variant_overrides

    gap_o = variant_overrides("gap", 10, 5, 0, backbone="pretrained")
    gsp_o = variant_overrides("gsp", 10, 5, 0, backbone="pretrained")
    assert {o.split("=")[0] for o in set(gap_o) ^ set(gsp_o)} == {"name", "model.pooling", "model.pooling_params"}
    cfg = load_config(None, gsp_o)
    assert cfg.model.pretrained == "glyphs-resnet20" and cfg.model.freeze_bn
    assert cfg.model.local_dim == 128 == cfg.model.embedding_dim and cfg.model.head == "none"
    assert cfg.train.head_lr == pytest.approx(10 * cfg.train.lr)
    assert cfg.model.pooling_params["init"] == "kcenter" and cfg.model.pooling_params["mu"] == 0.2
    x = torch.randn(3, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    for overrides in (gap_o, gsp_o):
        cfg = load_config(None, overrides)
        model = build_embedder(dataclasses.replace(cfg.model, pretrained=False), in_channels=1).eval()
        conv = model.local_projection
        assert isinstance(conv, torch.nn.Conv2d) and conv.kernel_size == (1, 1) and conv.out_channels == 128
        with torch.no_grad():
            out = model.encode(x)
            feature_map = model.backbone(x)  # (B, 64, 8, 8)
        by_hand = torch.einsum("oc,bchw->bohw", conv.weight[:, :, 0, 0], feature_map) + conv.bias[None, :, None, None]
        torch.testing.assert_close(out.local, by_hand, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.embedding, F.normalize(out.pooled, dim=1))  # the pooled vector is the embedding
        if cfg.model.pooling == "gap" or model.pooling.pools_with_gap:  # GSP pools with GAP until its memory is full
            torch.testing.assert_close(out.pooled, by_hand.mean(dim=(2, 3)), atol=1e-5, rtol=1e-5)


def test_collage_pooling_weights_of_a_gsp_layer_in_its_warmup_are_uniform(collages):
    from dmlkit.models import ModelConfig, build_embedder
    from dmlkit_lab.studies.collage import pooling_entropy, pooling_weights

    x, _ = collages[1].get_batch(range(4))
    model = build_embedder(
        ModelConfig(
            pooling="gsp", embedding_dim=8, pooling_params={"num_prototypes": 4, "init": "kcenter", "memory_size": 64}
        ),
        in_channels=1,
    )
    assert model.pooling.pools_with_gap
    weights, hw = pooling_weights(model, x)
    torch.testing.assert_close(weights, torch.full((4, 64), 1 / 64))
    assert pooling_entropy(weights) == pytest.approx(math.log(64))


def test_pooling_entropy_known_answers():
    from dmlkit_lab.studies.collage import pooling_entropy

    assert pooling_entropy(torch.tensor([[1.0, 0.0, 0.0, 0.0]])) == pytest.approx(0.0)
    assert pooling_entropy(torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.25] * 4])) == pytest.approx(
        (math.log(2) + math.log(4)) / 2
    )
    assert pooling_entropy(torch.tensor([[2.0, 2.0, 0.0, 0.0]])) == pytest.approx(math.log(2))  # rows are normalised


def test_collage_paired_differences_pair_by_seed():
    from dmlkit_lab.studies.collage import paired_differences

    runs = [
        {"variant": v, "seed": s, "test_map_at_r": m, "test_precision_at_1": p}
        for v, s, m, p in [
            ("gap", 0, 0.5, 0.7),
            ("gap", 1, 0.4, 0.6),
            ("gsp", 1, 0.45, 0.5),
            ("gsp", 0, 0.3, 0.9),
            ("gsp", 2, 0.9, 0.9),
        ]
    ]  # seed 2 has no GAP run: left out
    diffs = paired_differences(runs)
    assert [(d["seed"], round(d["test_map_at_r"], 6), round(d["test_precision_at_1"], 6)) for d in diffs] == [
        (1, 0.05, -0.1),
        (0, -0.2, 0.2),
    ]


def test_collage_testbed_pool_uses_no_class_the_backbone_was_pretrained_on():
    """The default layout trains on glyph 'train' characters, the first half by code point = glyphs_testbed's
    'pretrain' split (the classes glyphs-resnet20 learned); class_pool='testbed' draws every role from the DML side."""
    import numpy as np

    from dmlkit_lab.datasets.glyph_testbed import testbed_classes

    table = load_glyph_table()
    codepoints = np.asarray(table.codepoints)
    pretrain = set(codepoints[testbed_classes(codepoints, "pretrain")].tolist())
    dml_test = set(codepoints[testbed_classes(codepoints, "test")].tolist())

    def roles(ds):
        return set(ds.foreground_codepoints) | {cp for group in ds.background_codepoints for cp in group}

    default_train = create_dataset("glyph_collage", "train", per_class=1)
    assert roles(default_train) <= pretrain  # the overlap the docs report
    train = create_dataset("glyph_collage", "train", per_class=2, class_pool="testbed")
    test = create_dataset("glyph_collage", "test", per_class=2, class_pool="testbed")
    check_dataset(train)
    assert not roles(train) & pretrain and not roles(test) & pretrain
    assert roles(test) <= dml_test and not roles(train) & roles(test)
    assert len(roles(train)) == 28 and len(roles(test)) == 20
    with pytest.raises(ValueError, match="class_pool"):
        create_dataset("glyph_collage", "train", per_class=1, class_pool="imagenet")
