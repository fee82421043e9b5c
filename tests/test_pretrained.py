"""Named pretrained backbones: built once, cached by key, checked, never used stale or corrupt.

A tiny recipe (24 pretraining classes, 2 steps of 8 images) is trained once per module; each test
copies its entry into its own ``$DMLKIT_CACHE``.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import re
import warnings

import pytest
import torch
import yaml

from dmlkit.assemble import build_model, build_splits
from dmlkit.assemble import pretrained as P
from dmlkit.cli import main
from dmlkit.config import load_config
from dmlkit.models.config import ModelConfig
from dmlkit import pretrain as T
from tests_helpers import TINY_OVERRIDES

GLYPH_ROOT = str(Path(os.environ["DMLKIT_CACHE"]) / "glyphs")  # the shared test glyph cache, whatever the test's cache
TINY = "tiny-test-resnet20"


def tiny_recipe(steps: int = 2) -> dict:
    recipe = copy.deepcopy(P.RECIPES["glyphs-resnet20"])
    recipe["name"] = "pretrain-tiny"
    recipe["data"].update(root=GLYPH_ROOT, max_classes=24, val_fraction=0.25)
    recipe["model"]["embedding_dim"] = 16
    recipe["train"].update(max_steps=steps, batch_size=8, val_every=2, log_every=1)
    return recipe


@pytest.fixture(autouse=True)
def recipes(monkeypatch):
    monkeypatch.setitem(P.RECIPES, TINY, tiny_recipe())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The entry of the tiny recipe, trained once (~10 s)."""
    cache = tmp_path_factory.mktemp("pretrained-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DMLKIT_CACHE", str(cache))
        mp.setitem(P.RECIPES, TINY, tiny_recipe())
        return T.ensure_pretrained(TINY, quiet=True)


@pytest.fixture
def cache(built, tmp_path, monkeypatch) -> Path:
    """A fresh cache holding a copy of the tiny entry; returns the entry's path in it."""
    monkeypatch.setenv("DMLKIT_CACHE", str(tmp_path / "cache"))
    path = P.pretrained_path(TINY)
    path.parent.mkdir(parents=True)
    shutil.copy(built, path)
    return path


def no_training(*args, **kwargs):
    raise AssertionError("a valid cache entry should have been used, not trained again")


def dml_config(*overrides: str):
    return load_config(
        "configs/quickstart.yaml", [*TINY_OVERRIDES, f"data.root={GLYPH_ROOT}", f"model.pretrained={TINY}", *overrides]
    )


# ------------------------------------------------------------------ building and using
def test_the_entry_holds_the_best_backbone_and_what_made_it(built):
    entry = P.read_pretrained(TINY, built)
    assert entry["backbone"] == "resnet20" and entry["in_channels"] == 1 and entry["key"] == P.pretrained_key(TINY)
    assert built.name == f"{TINY}-{entry['key'][:16]}.pt"
    assert entry["summary"]["steps"] == 2 and "pretrain-tiny" in entry["config"]
    assert all(not k.startswith("backbone.") for k in entry["state_dict"]) and "conv1.weight" in entry["state_dict"]
    assert [p.name for p in built.parent.iterdir()] == [built.name], (
        "the run folder is removed once the entry is written"
    )


def test_a_valid_entry_is_reused_not_trained_again(cache, monkeypatch):
    before = cache.stat().st_mtime_ns
    monkeypatch.setattr(T, "build_trainer", no_training)
    monkeypatch.setattr(T, "resume_trainer", no_training)
    assert T.ensure_pretrained(TINY) == cache
    assert cache.stat().st_mtime_ns == before


def test_a_dml_model_starts_from_the_cached_backbone(cache):
    cfg = dml_config()
    model = build_model(cfg, build_splits(cfg).train).model
    weights = P.read_pretrained(TINY)["state_dict"]
    assert all(torch.equal(v, weights[k]) for k, v in model.backbone.state_dict().items())
    # a finished run's loader asks for no pretrained weights (it loads its own)
    untouched = build_model(cfg, build_splits(cfg).train, pretrained=False).model
    assert not torch.equal(untouched.backbone.state_dict()["conv1.weight"], weights["conv1.weight"])


def test_freeze_bn_keeps_the_pretrained_statistics(cache):
    cfg = dml_config("model.freeze_bn=true")
    model = build_model(cfg, build_splits(cfg).train).model
    weights = P.read_pretrained(TINY)["state_dict"]
    assert torch.equal(model.backbone.state_dict()["bn1.running_var"], weights["bn1.running_var"])
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.backbone.modules())


# ------------------------------------------------------------------ what is never used
def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _alter_one_weight(path: Path) -> None:
    entry = torch.load(path, weights_only=True)
    entry["state_dict"]["conv1.weight"][0, 0, 0, 0] += 1.0  # loadable, same shapes, wrong bytes
    torch.save(entry, path)


def _other_key(path: Path) -> None:
    entry = torch.load(path, weights_only=True)
    entry["key"] = "0" * 64  # e.g. a file copied or renamed from another recipe
    torch.save(entry, path)


def _other_default(path: Path) -> None:
    entry = torch.load(path, weights_only=True)
    assert "  - 0.99\n" in entry["config"]
    entry["config"] = entry["config"].replace(
        "  - 0.99\n", "  - 0.999\n"
    )  # trained when train.betas defaulted otherwise
    torch.save(entry, path)


def _other_threads(path: Path) -> None:
    entry = torch.load(path, weights_only=True)
    assert entry["threads"] == 1
    entry["threads"] = 2  # trained from a shell whose thread count the recipe did not pin
    torch.save(entry, path)


def _other_cpu(path: Path) -> None:
    entry = torch.load(path, weights_only=True)
    assert entry["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    entry["cpu_capability"] = (
        "AVX2" if entry["cpu_capability"] == "AVX512" else "AVX512"
    )  # copied from another CPU kind
    torch.save(entry, path)


def _other_torch(path: Path) -> None:
    entry = torch.load(path, weights_only=True)
    entry["versions"]["torch"] = "2.0.0"
    torch.save(entry, path)


@pytest.mark.parametrize(
    "damage",
    [_truncate, _alter_one_weight, _other_key, _other_default, _other_threads, _other_cpu, _other_torch],
    ids=["truncated", "altered", "other-key", "other-default", "other-threads", "other-cpu", "other-torch"],
)
def test_an_unusable_entry_is_refused_with_what_to_run_then_rebuilt(cache, monkeypatch, damage):
    damage(cache)
    expected = {
        _other_threads: "under other conditions.*threads: 2 .recipe: 1.",
        _other_cpu: "under other conditions.*cpu_capability: 'AVX.*' .recipe: 'AVX",
        _other_torch: "under other conditions.*versions",
    }.get(damage, "")
    with pytest.raises(P.PretrainedCacheError, match=expected):
        P.read_pretrained(TINY)
    cfg = dml_config()
    with pytest.raises(ValueError, match=f"unusable.*dmlkit pretrain {TINY}"):
        build_model(cfg, build_splits(cfg).train)
    with pytest.warns(UserWarning, match="building it again"):
        assert T.ensure_pretrained(TINY, quiet=True) == cache
    assert P.read_pretrained(TINY) is not None


def test_a_missing_entry_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLKIT_CACHE", str(tmp_path))
    cfg = dml_config()
    with pytest.raises(ValueError, match=f"not built yet.*dmlkit pretrain {TINY}"):
        build_model(cfg, build_splits(cfg).train)


def test_a_changed_recipe_is_a_new_key_and_the_stale_entry_goes(cache, monkeypatch):
    monkeypatch.setitem(P.RECIPES, TINY, tiny_recipe(steps=4))
    assert P.pretrained_path(TINY) != cache, "the key covers the recipe"
    assert P.read_pretrained(TINY) is None, "the entry of the old recipe is not found under the new key"
    new = T.ensure_pretrained(TINY, quiet=True)
    assert P.read_pretrained(TINY, new)["summary"]["steps"] == 4
    assert sorted(p.name for p in new.parent.iterdir()) == [new.name], "the stale entry is removed"


def test_a_config_field_added_since_takes_its_default_and_a_changed_value_is_stale(cache):
    entry = torch.load(cache, weights_only=True)
    text = entry["config"]
    assert "  freeze_bn: false\n" in text and "  val_split: null\n" in text
    entry["config"] = text.replace("  val_split: null\n", "").replace("  freeze_bn: false\n", "")
    torch.save(entry, cache)  # an entry written before data.val_split and model.freeze_bn existed
    assert P.read_pretrained(TINY) is not None
    entry["config"] = text.replace("  freeze_bn: false\n", "  freeze_bn: true\n")
    torch.save(entry, cache)  # trained with another value of a field: stale
    with pytest.raises(P.PretrainedCacheError, match="stale.*model.freeze_bn"):
        P.read_pretrained(TINY)
    entry["config"] = text.replace("  freeze_bn: false\n", "  freeze_bn: false\n  retired_option: 3\n")
    torch.save(entry, cache)  # a field today's config no longer knows: stale
    with pytest.raises(P.PretrainedCacheError, match="stale.*retired_option"):
        P.read_pretrained(TINY)
    assert "methods:\n  sft:\n    name: null\n" in text and "    alpha: " in text
    entry["config"] = re.sub(r"(  sft:\n(?:    .*\n)*?)    alpha: .*\n", r"\1    alpha: 0.123\n", text)
    torch.save(entry, cache)  # an option of a method the recipe leaves off (SFT's centre step): not stale
    assert P.read_pretrained(TINY) is not None
    entry["config"] = entry["config"].replace("  sft:\n    name: null\n", "  sft:\n    name: sft\n")
    torch.save(entry, cache)  # ... but a recipe trained with that method on is
    with pytest.raises(P.PretrainedCacheError, match="stale.*methods.sft"):
        P.read_pretrained(TINY)
    old_form = yaml.safe_load(text)  # an entry written before the methods: section: the old keys, read as the new
    methods = old_form.pop("methods")
    old_form.update(augment=methods["sft"], ccp=methods["ccp"])
    old_form["train"]["warmup_steps"] = methods["warmup"]["steps"]
    entry["config"] = yaml.safe_dump(old_form, sort_keys=False)
    torch.save(entry, cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # dmlkit's own record: read as the new keys, silently (no file to rename)
        assert P.read_pretrained(TINY) is not None


def test_the_key_covers_the_data_and_the_libraries(monkeypatch):
    key = P.pretrained_key(TINY)
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert P.pretrained_key(TINY) != key
    monkeypatch.undo()
    monkeypatch.setitem(P.RECIPES, TINY, tiny_recipe())
    from dmlkit.data.datasets import glyphs

    monkeypatch.setattr(glyphs, "GLYPHS_RULE", glyphs.GLYPHS_RULE + ";other")
    assert P.pretrained_key(TINY) != key
    monkeypatch.setattr(glyphs, "GLYPHS_RULE", glyphs.GLYPHS_RULE.replace(";other", ""))
    assert P.pretrained_key(TINY) == key
    from functools import partial

    wider = partial(glyphs.GlyphAugmentConfig, rotation_deg=15.0)  # the augmentation's defaults decide the weights too
    monkeypatch.setattr(glyphs, "GlyphAugmentConfig", wider)
    assert P.pretrained_key(TINY) != key


# ------------------------------------------------------------------ bad configs
def test_unknown_name_wrong_architecture_or_channels_are_clear_errors(cache):
    with pytest.raises(ValueError, match="unknown pretrained backbone 'nope'.*glyphs-resnet20"):
        P.resolve_pretrained(ModelConfig(pretrained="nope"), 1)
    with pytest.raises(ValueError, match="is a resnet20, but model.backbone is resnet32"):
        P.resolve_pretrained(ModelConfig(backbone="resnet32", pretrained=TINY), 1)
    with pytest.raises(ValueError, match="takes 1-channel images, but this dataset has 3"):
        P.resolve_pretrained(ModelConfig(pretrained=TINY), 3)
    resolved = P.resolve_pretrained(ModelConfig(pretrained=TINY), 1)
    assert resolved.pretrained == str(cache)
    assert P.resolve_pretrained(ModelConfig(pretrained=False), 1).pretrained is False


def test_an_entry_of_another_architecture_is_refused(cache):
    entry = torch.load(cache, weights_only=True)
    entry["in_channels"] = 3
    torch.save(entry, cache)  # checksum still holds: only the metadata disagrees with the config
    with pytest.raises(ValueError, match="for 3-channel images, not a resnet20 for 1"):
        P.resolve_pretrained(ModelConfig(pretrained=TINY), 1)


def test_each_cpu_kind_keys_its_own_entry(cache, monkeypatch):
    here = P.pretrained_path(TINY)
    assert here == cache and P.read_pretrained(TINY)["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    monkeypatch.setattr(P, "cpu_capability", lambda: "ANOTHER_ISA")  # a machine whose kernels sum in another order
    assert P.pretrained_path(TINY) != here, "another CPU kind must not pick up this machine's entry"
    assert P.read_pretrained(TINY) is None


def test_cli_pretrain_reports_the_entry_and_rejects_configs_without_a_name(cache, monkeypatch, capsys):
    monkeypatch.setattr(T, "build_trainer", no_training)
    assert main(["pretrain", TINY]) == 0
    entry = P.read_pretrained(TINY)
    out = capsys.readouterr().out
    assert str(cache) in out and f"checksum {entry['checksum'][:16]}" in out
    assert f"1 thread(s) on {torch.backends.cpu.get_cpu_capability()} CPU kernels" in out
    assert main(["pretrain", "configs/quickstart.yaml"]) == 2
    assert "names no pretrained backbone" in capsys.readouterr().err


def test_dmlkit_train_builds_a_missing_backbone_on_first_use(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DMLKIT_CACHE", str(tmp_path / "cache"))
    assert P.read_pretrained(TINY) is None
    args = ["train", "configs/quickstart.yaml", "--run-dir", str(tmp_path / "run"), "--quiet"]
    for o in (
        *TINY_OVERRIDES,
        f"data.root={GLYPH_ROOT}",
        f"model.pretrained={TINY}",
        "train.max_steps=2",
        "train.val_every=2",
        "plots=false",
        "eval.clustering=false",
    ):
        args += ["--set", o]
    assert main(args) == 0, capsys.readouterr().err
    assert P.read_pretrained(TINY) is not None and (tmp_path / "run" / "summary.json").is_file()
