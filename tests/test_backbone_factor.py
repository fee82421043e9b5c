"""The pretrained backbone as a factor of paired tables: seeded recipe names, pooled verdicts.

``dmlkit protocol --backbones`` runs every config x seed on each backbone and pools the per-seed paired
differences over them; the pooled figures are checked against a hand computation from the runs' own
``summary.json`` files, the verdict rule against constructed cases.
"""

from __future__ import annotations

import copy
import json
import math
import os
import statistics
from pathlib import Path

import pytest

from dmlkit.assemble import pretrained as P
from dmlkit.config import load_config
from dmlkit.protocols import run_protocol
from dmlkit.protocols.backbones import across_backbones, verdict
from dmlkit.protocols.paired import paired_difference
from tests_helpers import TINY_OVERRIDES

GLYPH_ROOT = str(Path(os.environ["DMLKIT_CACHE"]) / "glyphs")
MAP = "mean_average_precision_at_r"


# ------------------------------------------------------------------ seeded names
def test_a_seed_suffix_names_the_recipe_with_that_seed():
    assert P.split_pretrained_name("glyphs-resnet20@seed7") == ("glyphs-resnet20", 7)
    assert P.pretrained_recipe("glyphs-resnet20@seed7").seed == 7
    assert P.pretrained_recipe("glyphs-resnet20").seed == 0
    assert P.pretrained_key("glyphs-resnet20@seed1") != P.pretrained_key("glyphs-resnet20@seed2")
    # the recipe's own seed is the recipe itself: one key, one cache file
    assert P.canonical_pretrained_name("glyphs-resnet20@seed0") == "glyphs-resnet20"
    assert P.pretrained_path("glyphs-resnet20@seed0") == P.pretrained_path("glyphs-resnet20")
    assert P.pretrained_path("glyphs-resnet20@seed3").name.startswith("glyphs-resnet20@seed3-")


@pytest.mark.parametrize(
    "name",
    [
        "glyphs-resnet20@seed-1",
        "glyphs-resnet20@seedx",
        "glyphs-resnet20@1",
        "glyphs-resnet20@seed",
        "glyphs-resnet20@seed1@seed2",
    ],
)
def test_a_malformed_or_negative_seed_is_a_clear_error(name):
    with pytest.raises(ValueError, match=r"not a pretraining seed; write glyphs-resnet20@seed<N>"):
        P.split_pretrained_name(name)
    cfg = load_config("configs/testbed/testbed.yaml", [f"model.pretrained={name}"])
    with pytest.raises(ValueError, match="not a pretraining seed"):
        P.resolve_pretrained(cfg.model, 1)


def test_an_unknown_recipe_with_a_seed_is_an_unknown_name():
    with pytest.raises(ValueError, match="unknown pretrained backbone 'nope'.*<name>@seed<N>"):
        P.split_pretrained_name("nope@seed1")


def test_the_recipe_pins_its_threads_and_the_key_covers_them(monkeypatch):
    assert P.pretrained_recipe("glyphs-resnet20").train.threads == 1
    key = P.pretrained_key("glyphs-resnet20")
    recipe = copy.deepcopy(P.RECIPES["glyphs-resnet20"])
    recipe["train"]["threads"] = 2
    monkeypatch.setitem(P.RECIPES, "glyphs-resnet20", recipe)
    assert P.pretrained_key("glyphs-resnet20") != key


# ------------------------------------------------------------------ pooling and verdicts
def test_verdict_needs_the_share_on_every_backbone():
    assert verdict([[1, 1, 1, 1, -1], [1, 1, 1, 1, 1], [1, 2, 3, 4, -5]]) == "ahead"
    assert verdict([[1, 1, 1, 1, -1], [1, 1, 1, -1, -1]]) == "not resolved"  # 3/5 on one backbone
    assert verdict([[-1, -1, -1, -1, 1], [-1] * 5]) == "behind"
    assert verdict([[1] * 5, [-1] * 5]) == "not resolved"
    assert verdict([[1] * 5, []]) == "not resolved"  # a backbone without pairs decides nothing
    assert verdict([[0, 0, 0, 0, 0]]) == "not resolved"  # ties are neither


def test_across_backbones_pools_the_per_seed_differences():
    method = {
        "a": [{"seed": s, "m": v} for s, v in enumerate([0.5, 0.6, 0.7])],
        "b": [{"seed": s, "m": v} for s, v in enumerate([0.3, 0.1, 0.2])],
    }
    base = {
        "a": [{"seed": s, "m": v} for s, v in enumerate([0.4, 0.4, 0.4])],
        "b": [{"seed": s, "m": v} for s, v in enumerate([0.2, 0.2, 0.2])],
    }
    pooled = across_backbones({b: paired_difference(method[b], base[b], ["m"]) for b in ("a", "b")}, ["m"])
    da, db = [0.1, 0.2, 0.3], [0.1, -0.1, 0.0]
    assert pooled["n"] == 6 and pooled["backbones"] == ["a", "b"]
    assert pooled["mean"]["m"] == pytest.approx(statistics.mean(da + db))
    assert pooled["seed_std"]["m"] == pytest.approx(math.sqrt((statistics.variance(da) + statistics.variance(db)) / 2))
    assert pooled["backbone_std"]["m"] == pytest.approx(statistics.stdev([statistics.mean(da), statistics.mean(db)]))
    assert pooled["wins"]["m"] == [3, 1] and pooled["seeds"]["m"] == [3, 3]
    assert pooled["verdict"]["m"] == "not resolved"


# ------------------------------------------------------------------ the protocol over backbones
def _tiny_recipe(seed: int) -> dict:
    recipe = copy.deepcopy(P.RECIPES["glyphs-resnet20"])
    recipe["seed"] = seed
    recipe["data"].update(root=GLYPH_ROOT, max_classes=24, val_fraction=0.25)
    recipe["model"]["embedding_dim"] = 16
    recipe["train"].update(max_steps=2, batch_size=8, val_every=2, log_every=1)
    return recipe


def _renamed(tmp_path: Path, name: str, extra: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"base: {Path('configs/quickstart.yaml').resolve()}\nname: {name}\n{extra}")
    return path


def test_protocol_pairs_within_each_backbone_and_pools_over_them(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(P.RECIPES, "tiny-factor", _tiny_recipe(0))
    backbones = ["tiny-factor", "tiny-factor@seed1"]
    configs = [_renamed(tmp_path, "base"), _renamed(tmp_path, "other", "loss:\n  name: contrastive\n")]
    overrides = [
        *TINY_OVERRIDES,
        f"data.root={GLYPH_ROOT}",
        "plots=false",
        "eval.clustering=false",
        "train.max_steps=4",
        "train.val_every=4",
        "train.threads=1",
    ]
    out = tmp_path / "table"
    table = run_protocol(
        "holdout",
        configs,
        out,
        seeds=[0, 1],
        overrides=[*overrides, "train.lr=0.01"],
        baselines=["base"],
        backbones=backbones,
    )
    record = json.loads((out / "results.json").read_text())
    test = {
        (b, n, s): json.loads((out / b / f"{n}-seed{s}" / "summary.json").read_text())["test"][MAP]
        for b in backbones
        for n in ("base", "other")
        for s in (0, 1)
    }
    for b in backbones:
        assert load_config(out / b / "other-seed0" / "config.yaml").model.pretrained == b
    deltas = {b: [test[b, "other", s] - test[b, "base", s] for s in (0, 1)] for b in backbones}
    assert deltas["tiny-factor"] != deltas["tiny-factor@seed1"], "two backbones should give two sets of runs"
    for b in backbones:
        per_backbone = record["paired"][f"other [{b}]"]
        assert per_backbone["baseline"] == f"base [{b}]"
        assert per_backbone["deltas"][MAP] == pytest.approx(deltas[b])
    pooled = record["paired"]["across_backbones"]["other"]
    everything = deltas["tiny-factor"] + deltas["tiny-factor@seed1"]
    assert pooled["mean"][MAP] == pytest.approx(statistics.mean(everything))
    assert pooled["backbone_std"][MAP] == pytest.approx(statistics.stdev([statistics.mean(d) for d in deltas.values()]))
    assert pooled["verdict"][MAP] == verdict(list(deltas.values()))
    assert "| other [tiny-factor@seed1] | base [tiny-factor@seed1] | 2 |" in table
    assert "Pooled over the backbones tiny-factor, tiny-factor@seed1" in table
    # every run records the weights it started from: its backbone's name and the entry's tensor checksum
    for b in backbones:
        weights = {"name": b, "checksum": P.read_pretrained(b)["checksum"]}
        for n in ("base", "other"):
            for s in (0, 1):
                assert json.loads((out / b / f"{n}-seed{s}" / "environment.json").read_text())["pretrained"] == weights
    # a run moved in from another machine: the same backbone name, other weights -> the table is refused
    moved = out / "tiny-factor" / "other-seed1" / "environment.json"
    environment = json.loads(moved.read_text())
    environment["pretrained"]["checksum"] = "f" * 64
    moved.write_text(json.dumps(environment))
    with pytest.raises(
        ValueError, match=r"'tiny-factor' started from 2 different sets .*ffffffffffff in other-seed1\)"
    ):
        run_protocol(
            "holdout",
            configs,
            out,
            seeds=[0, 1],
            overrides=[*overrides, "train.lr=0.01"],
            baselines=["base"],
            backbones=backbones,
            reuse=True,
        )


def test_bad_backbone_lists_fail_before_anything_trains(tmp_path):
    config = "configs/testbed/testbed.yaml"
    with pytest.raises(ValueError, match="names one backbone twice"):
        run_protocol("holdout", [config], tmp_path, seeds=[0], backbones=["glyphs-resnet20", "glyphs-resnet20@seed0"])
    with pytest.raises(
        ValueError,
        match="takes pretrained-backbone names .* or weights files; got 'resnet50.pt', which is "
        r"neither \(no such file\)",
    ):
        run_protocol("holdout", [config], tmp_path, seeds=[0], backbones=["resnet50.pt"])
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "w.pt").write_bytes(b"weights")
    with pytest.raises(ValueError, match=r"would share the label 'w' \(their runs' folder\)"):
        run_protocol(
            "holdout",
            [config],
            tmp_path / "out",
            seeds=[0],
            backbones=[str(tmp_path / "a" / "w.pt"), str(tmp_path / "b" / "w.pt")],
        )
    with pytest.raises(ValueError, match="names one backbone twice"):
        run_protocol(
            "holdout",
            [config],
            tmp_path / "out",
            seeds=[0],
            backbones=[str(tmp_path / "a" / "w.pt"), str(tmp_path / "b" / ".." / "a" / "w.pt")],
        )
    for folder in ("a", "b"):
        (tmp_path / folder / "w.pt").unlink()
        (tmp_path / folder).rmdir()
    with pytest.raises(ValueError, match="not a pretraining seed"):
        run_protocol("holdout", [config], tmp_path, seeds=[0], backbones=["glyphs-resnet20@seed-2"])
    with pytest.raises(ValueError, match="run the fair protocol once per backbone"):
        run_protocol("fair", [config], tmp_path, seeds=[0], backbones=["glyphs-resnet20"])
    assert list(tmp_path.iterdir()) == []


def test_a_weights_file_is_a_backbone_labelled_by_its_name(tmp_path, monkeypatch):
    """A cache entry carried to another machine (whose torch gives another cache key) is given as a file: its runs
    go under ``out/<file stem>/``, record the file, and train exactly as the named backbone's runs do."""
    monkeypatch.setenv("DMLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(P.RECIPES, "tiny-factor", _tiny_recipe(0))
    config = _renamed(tmp_path, "base")
    overrides = [
        *TINY_OVERRIDES,
        f"data.root={GLYPH_ROOT}",
        "plots=false",
        "eval.clustering=false",
        "train.max_steps=4",
        "train.val_every=4",
        "train.threads=1",
        "train.lr=0.01",
    ]
    run_protocol(
        "holdout", [config], tmp_path / "built", seeds=[0], overrides=overrides, backbones=["tiny-factor@seed1"]
    )
    carried = tmp_path / "elsewhere" / "seed1_from_cpu.pt"
    carried.parent.mkdir()
    carried.write_bytes(P.pretrained_path("tiny-factor@seed1").read_bytes())
    out = tmp_path / "table"
    table = run_protocol("holdout", [config], out, seeds=[0], overrides=overrides, backbones=[str(carried)])
    run = out / "seed1_from_cpu" / "base-seed0"
    assert "| base [seed1_from_cpu] (n=1) |" in table
    assert json.loads((out / "results.json").read_text())["backbones"] == {"seed1_from_cpu": str(carried)}
    recorded = json.loads((run / "environment.json").read_text())["pretrained"]
    assert recorded["file"] == str(carried) and len(recorded["sha256"]) == 64
    by_name = json.loads((tmp_path / "built" / "tiny-factor@seed1" / "base-seed0" / "summary.json").read_text())
    by_file = json.loads((run / "summary.json").read_text())
    assert by_file["test"] == by_name["test"], "the file holds the named backbone's weights: the same run"
