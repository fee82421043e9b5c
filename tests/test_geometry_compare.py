"""``dmlkit geometry``: r_w and class divergences of run groups, Fig. 4a order, seeds paired.

References are independent: divergences and r_w by numpy loops on tiny hand-made embeddings,
the Fig. 4a order and the seed pairing by hand, and one end-to-end check on a tiny trained
run whose train split is embedded again here.
"""

import json
import statistics

import numpy as np
import pytest
import torch

from dmlkit_lab.report.geometry_compare import (
    R_W_ENERGY,
    RunGeometry,
    compare_geometry,
    fig4a_curves,
    geometry_markdown,
    geometry_summary,
    pair_by_seed,
    paired_differences,
    run_geometry_from_embeddings,
    sort_by_baseline,
)


def _geo(group, seed, classes, divs, r_w=0.5):
    return RunGeometry(
        group, seed, f"{group}-seed{seed}", "train", r_w, {str(R_W_ENERGY): r_w}, list(classes), list(divs)
    )


def _numpy_divergence(x, y, label):
    xs = x[y == label]
    mu = xs.mean(0)
    return float(np.mean([np.sum((v - mu) ** 2) for v in xs]))


def _numpy_r_w(x, y, energy, dims=False):
    labels = sorted(set(y.tolist()))
    mus = np.stack([x[y == c].mean(0) for c in labels])
    s_c = sum(np.outer(m, m) for m in mus) / len(labels)
    s_w = sum(sum(np.outer(v - m, v - m) for v in x[y == c]) / (y == c).sum() for c, m in zip(labels, mus)) / len(
        labels
    )
    w, v = np.linalg.eigh(s_c)
    w, v = w[::-1], v[:, ::-1]
    k = int(np.argmax(np.cumsum(w) / w.sum() >= energy - 1e-12)) + 1
    u = v[:, :k]
    return k if dims else float(np.trace(u.T @ s_w @ u) / np.trace(s_w))


def test_divergences_and_r_w_equal_a_brute_force_reference_with_sparse_labels():
    g = torch.Generator().manual_seed(3)
    labels = torch.tensor([11, 3, 7, 3, 11, 7, 7, 3, 11, 11, 40, 40])  # not contiguous, not sorted
    x = torch.randn(len(labels), 5, generator=g, dtype=torch.float64)
    x[labels == 7] *= 3.0  # one class much wider: a misaligned label would show
    geo = run_geometry_from_embeddings(x, labels, "g", 2)
    xn, yn = x.numpy(), labels.numpy()
    assert geo.classes == [3, 7, 11, 40]
    for c, d in zip(geo.classes, geo.divergences):
        assert d == pytest.approx(_numpy_divergence(xn, yn, c), rel=1e-10)
    assert geo.r_w == pytest.approx(_numpy_r_w(xn, yn, R_W_ENERGY), rel=1e-9)
    assert geo.r_w_curve["0.5"] == pytest.approx(_numpy_r_w(xn, yn, 0.5), rel=1e-9)
    assert (geo.r_w_dims, geo.dim) == (_numpy_r_w(xn, yn, R_W_ENERGY, dims=True), 5)
    divs = [_numpy_divergence(xn, yn, c) for c in (3, 7, 11, 40)]
    assert geo.divergence_mean == pytest.approx(np.mean(divs))
    assert geo.divergence_std == pytest.approx(np.std(divs))  # over classes, population std as geometry_report
    assert geo.divergence_cv == pytest.approx(np.std(divs) / np.mean(divs))


def test_r_w_is_zero_when_deviations_are_orthogonal_to_the_means():
    """Proposition 3's condition built by hand: means in span(e0, e1), deviations along e2, e3."""
    means = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0.6, 0.8, 0, 0]], dtype=torch.float64)
    devs = torch.tensor([[0, 0, 0.1, 0], [0, 0, -0.1, 0], [0, 0, 0, 0.2], [0, 0, 0, -0.2]], dtype=torch.float64)
    x = torch.cat([m + devs for m in means])
    labels = torch.arange(3).repeat_interleave(4)
    assert run_geometry_from_embeddings(x, labels).r_w == pytest.approx(0.0, abs=1e-12)


def test_sort_by_baseline_orders_classes_by_the_baselines_divergence_and_carries_the_others_along():
    base = _geo("b", 0, [1, 2, 3, 4], [0.3, 0.1, 0.2, 0.1])
    other = _geo("o", 0, [1, 2, 3, 4], [3.0, 1.0, 2.0, 4.0])
    classes, b, o = sort_by_baseline(base, other)
    assert classes == [2, 4, 3, 1]  # tie 0.1: label order
    assert b == [0.1, 0.1, 0.2, 0.3]
    assert o == [1.0, 4.0, 2.0, 3.0]  # the other run's value of the *same* class
    with pytest.raises(ValueError, match="different classes"):
        sort_by_baseline(base, _geo("o", 0, [1, 2, 3, 5], [1, 1, 1, 1]))


def test_pair_by_seed_pairs_equal_seeds_only_and_refuses_repeats():
    base = [_geo("b", s, [0], [1.0]) for s in (2, 0, 1)]
    other = [_geo("o", s, [0], [1.0]) for s in (3, 1, 2)]
    pairs = pair_by_seed(base, other)
    assert [s for s, _, _ in pairs] == [1, 2]
    assert all(b.seed == s and o.seed == s and b.group == "b" and o.group == "o" for s, b, o in pairs)
    with pytest.raises(ValueError, match="appears twice"):
        pair_by_seed(base + [_geo("b", 1, [0], [1.0])], other)


def test_paired_differences_are_per_seed_then_mean_and_sample_std():
    base = [_geo("b", s, [0, 1], [1.0 + s, 2.0], r_w=0.1 * s) for s in range(3)]
    other = [_geo("o", s, [0, 1], [1.5 + 2 * s, 2.0], r_w=0.1 * s + 0.01 * (s + 1)) for s in (2, 1, 0, 5)]
    p = paired_differences(base, other)
    assert p["seeds"] == [0, 1, 2]
    want_rw = [0.01, 0.02, 0.03]
    assert p["r_w"]["per_seed"] == pytest.approx(want_rw)
    assert p["r_w"]["mean"] == pytest.approx(statistics.mean(want_rw))
    assert p["r_w"]["std"] == pytest.approx(statistics.stdev(want_rw))
    want_div = [((1.5 + 2 * s + 2.0) - (1.0 + s + 2.0)) / 2 for s in range(3)]
    assert p["divergence_mean"]["per_seed"] == pytest.approx(want_div)
    assert p["divergence_mean"]["positive"] == 3


def test_fig4a_curves_average_ranks_over_seeds_with_the_next_baseline_seed_as_control():
    base = [_geo("b", 0, [0, 1, 2], [3.0, 1.0, 2.0]), _geo("b", 1, [0, 1, 2], [1.0, 2.0, 6.0])]
    other = [_geo("o", 0, [0, 1, 2], [2.0, 1.5, 2.0]), _geo("o", 1, [0, 1, 2], [2.0, 2.0, 2.0])]
    c = fig4a_curves(base, other)
    # seed 0 order (by base 0): classes 1, 2, 0; seed 1 order (by base 1): classes 0, 1, 2
    assert c["baseline"] == pytest.approx([(1.0 + 1.0) / 2, (2.0 + 2.0) / 2, (3.0 + 6.0) / 2])
    assert c["other"] == pytest.approx([(1.5 + 2.0) / 2, (2.0 + 2.0) / 2, (2.0 + 2.0) / 2])
    # control: seed 0 sorted by base 0 shows base 1's values (2, 6, 1); seed 1 (cyclic) shows base 0's (3, 1, 2)
    assert c["control"] == pytest.approx([(2.0 + 3.0) / 2, (6.0 + 1.0) / 2, (1.0 + 2.0) / 2])
    # shares: seed 0 mean 2 -> below: class 1 (1 -> 1.5 up); above/at: classes 2 (2 -> 2 not down), 0 (3 -> 2 down)
    #         seed 1 mean 3 -> below: classes 0 (1 -> 2 up), 1 (2 -> 2 not up); above: class 2 (6 -> 2 down)
    assert c["below_up"]["other"] == pytest.approx(2 / 3)
    assert c["above_down"]["other"] == pytest.approx(2 / 3)
    # control, seed 0: below class 1 (1 -> 2 up); above classes 2 (2 -> 6 no), 0 (3 -> 1 down)
    #          seed 1: below classes 0 (1 -> 3 up), 1 (2 -> 1 no); above class 2 (6 -> 2 down)
    assert c["below_up"]["control"] == pytest.approx(2 / 3)
    assert c["above_down"]["control"] == pytest.approx(2 / 3)


def test_summary_markdown_and_figures_from_hand_made_groups(tmp_path, monkeypatch):
    import dmlkit_lab.report.geometry_compare as gc

    groups = {
        "base": [_geo("base", s, [0, 1, 2], [0.1, 0.2, 0.3 + s / 10], r_w=0.4 + s / 100) for s in range(3)],
        "sft": [_geo("sft", s, [0, 1, 2], [0.15, 0.2, 0.25], r_w=0.5) for s in range(3)],
    }
    summary = geometry_summary(groups, "base")
    assert summary["groups"]["base"]["r_w"]["mean"] == pytest.approx(0.41)
    assert summary["groups"]["sft"]["paired"]["r_w"]["per_seed"] == pytest.approx([0.1, 0.09, 0.08])
    assert "paired" not in summary["groups"]["base"]
    md = geometry_markdown(summary)
    assert "| sft | 3 | +0.0900 ± 0.0100 (3/3)" in md
    with pytest.raises(ValueError, match="baseline"):
        geometry_summary(groups, "nope")

    monkeypatch.setattr(gc, "_group_names", lambda dirs: [("base", ["b0", "b1", "b2"]), ("sft", ["s0", "s1", "s2"])])
    by_path = {f"{name[0]}{s}": r for name, runs in groups.items() for s, r in enumerate(runs)}
    monkeypatch.setattr(gc, "run_geometry", lambda p, split, group, cache: by_path[p])
    out = compare_geometry(["x"], tmp_path / "geo", baseline="base")
    assert json.loads((tmp_path / "geo" / "geometry.json").read_text())["baseline"] == "base"
    assert out["fig4a_curves"]["sft"]["seeds"] == [0, 1, 2]
    for name in ("geometry.md", "geometry_r_w.png", "geometry_divergences.png"):
        assert (tmp_path / "geo" / name).stat().st_size > 0
    with pytest.raises(ValueError, match="none of the groups"):
        compare_geometry(["x"], tmp_path / "geo2", baseline="nope")


def test_end_to_end_on_a_tiny_run_matches_a_fresh_embedding_and_leaves_the_runs_alone(tmp_path):
    import shutil

    import yaml

    from dmlkit.assemble import build_trainer, load_finished_run
    from dmlkit.cli import main
    from dmlkit.config import load_config
    from dmlkit.engine.embed import embed_dataset
    from tests_helpers import TINY_OVERRIDES

    base = tmp_path / "base"
    overrides = TINY_OVERRIDES + [
        "plots=false",
        "name=base",
        "seed=0",
        "train.max_steps=2",
        "eval.clustering=false",
        "data.max_classes=12",
        "train.val_every=100",
    ]
    build_trainer(load_config("configs/quickstart.yaml", overrides), base, quiet=True).fit()
    twin = tmp_path / "twin"  # the same weights under another config name: a second group, zero differences
    shutil.copytree(base, twin)
    cfg = yaml.safe_load((twin / "config.yaml").read_text())
    cfg["name"] = "twin"
    (twin / "config.yaml").write_text(yaml.safe_dump(cfg))
    runs = [base, twin]
    before = {p: sorted(q.name for q in p.rglob("*")) for p in runs}
    assert main(["geometry", *map(str, runs), "--out", str(tmp_path / "geo"), "--baseline", "base"]) == 0
    assert {p: sorted(q.name for q in p.rglob("*")) for p in runs} == before  # nothing written into the runs
    summary = json.loads((tmp_path / "geo" / "geometry.json").read_text())
    assert set(summary["groups"]) == {"base", "twin"} and summary["groups"]["base"]["split"] == ["train"]
    assert summary["groups"]["twin"]["paired"]["r_w"]["per_seed"] == [0.0]
    run = load_finished_run(base)
    x, y = embed_dataset(run.features, run.split("train"), 128)
    xn, yn = x.double().numpy(), y.numpy()
    want = [_numpy_divergence(xn, yn, c) for c in sorted(set(yn.tolist()))]
    assert summary["groups"]["base"]["divergence_mean"]["per_seed"] == pytest.approx([np.mean(want)], rel=1e-5)
    assert summary["groups"]["base"]["r_w"]["per_seed"] == pytest.approx([_numpy_r_w(xn, yn, R_W_ENERGY)], rel=1e-4)
    assert len(list((tmp_path / "geo" / "cache").glob("*.json"))) == 2  # read back on the next call
