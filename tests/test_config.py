"""Configs: YAML + dotted overrides into typed dataclasses; bad keys and types are clear errors."""

import pytest
import yaml

from dmlkit.config import ExperimentConfig, apply_overrides, dump_config, from_dict, load_config, to_dict


def test_defaults_round_trip_through_yaml():
    cfg = ExperimentConfig()
    assert from_dict(ExperimentConfig, yaml.safe_load(dump_config(cfg))) == cfg


def test_quickstart_config_loads():
    cfg = load_config("configs/quickstart.yaml")
    assert cfg.data.name == "glyphs"
    assert cfg.loss.name == "multi_similarity"
    assert cfg.model.backbone == "resnet20"


def test_dotted_overrides_are_typed():
    cfg = load_config(
        "configs/quickstart.yaml", ["train.lr=0.5", "train.max_steps=7", "loss.params.alpha=3", "data.max_classes=null"]
    )
    assert cfg.train.lr == 0.5 and isinstance(cfg.train.lr, float)
    assert cfg.train.max_steps == 7
    assert cfg.loss.params == {"alpha": 3}
    assert cfg.data.max_classes is None


def test_int_is_accepted_for_float_but_not_str_for_int():
    assert from_dict(ExperimentConfig, {"train": {"lr": 1}}).train.lr == 1.0
    with pytest.raises(ValueError, match="train.max_steps"):
        from_dict(ExperimentConfig, {"train": {"max_steps": "many"}})
    with pytest.raises(ValueError, match="train.max_steps"):
        from_dict(ExperimentConfig, {"train": {"max_steps": True}})


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ValueError) as err:
        load_config("configs/quickstart.yaml", ["train.learning_rate=0.1"])
    message = str(err.value)
    assert "learning_rate" in message and "lr" in message and "max_steps" in message


def test_unknown_top_level_section():
    with pytest.raises(ValueError, match="valid keys are: name, seed"):
        from_dict(ExperimentConfig, {"trian": {}})


def test_override_syntax_errors():
    with pytest.raises(ValueError, match="key.path=value"):
        apply_overrides({}, ["train.lr"])
    with pytest.raises(ValueError, match="is a value, not a section"):
        apply_overrides({"seed": 1}, ["seed.x=2"])


def test_missing_config_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_list_values():
    cfg = load_config(None, ["eval.ks=[1, 5, 10]"])
    assert cfg.eval.ks == [1, 5, 10]
    with pytest.raises(ValueError, match=r"eval.ks\[1\]"):
        load_config(None, ["eval.ks=[1, x]"])
    assert to_dict(cfg)["eval"]["ks"] == [1, 5, 10]


def test_exponent_without_dot_is_a_float():
    # PyYAML reads 1e-4 as a string (YAML 1.1); a float field takes it as the number.
    assert load_config(None, ["train.lr=1e-4"]).train.lr == 1e-4
    with pytest.raises(ValueError, match="train.lr"):
        load_config(None, ["train.lr=fast"])


SHIPPED = sorted(__import__("pathlib").Path("configs").rglob("*.yaml"))


@pytest.mark.parametrize("path", [p for p in SHIPPED if not p.name.startswith("_")], ids=lambda p: str(p))
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    assert cfg.name == path.stem


@pytest.mark.parametrize("path", [p for p in SHIPPED if p.name.startswith("_")], ids=lambda p: str(p))
def test_shipped_fragments_name_no_run(path):
    """A ``_*.yaml`` file is a fragment for ``base:`` lists: it must not set the name of the configs it ends."""
    assert "name" not in __import__("yaml").safe_load(path.read_text())


def test_a_list_of_bases_merges_in_order_then_the_file(tmp_path):
    (tmp_path / "method.yaml").write_text(
        "name: m\nloss:\n  name: triplet_margin\ntrain:\n  lr: 0.5\n  batch_size: 32\n"
    )
    (tmp_path / "_regime.yaml").write_text("train:\n  lr: 0.125\n  max_steps: 9\n")
    (tmp_path / "v.yaml").write_text("base: [method.yaml, _regime.yaml]\nname: v\ntrain:\n  max_steps: 11\n")
    cfg = load_config(tmp_path / "v.yaml")
    assert (cfg.name, cfg.loss.name, cfg.train.lr, cfg.train.batch_size, cfg.train.max_steps) == (
        "v",
        "triplet_margin",
        0.125,
        32,
        11,
    )
    (tmp_path / "w.yaml").write_text("base: [_regime.yaml, method.yaml]\nname: w\n")
    assert load_config(tmp_path / "w.yaml").train.lr == 0.5  # the later base wins
    (tmp_path / "x.yaml").write_text("base: [method.yaml, x.yaml]\nname: x\n")
    with pytest.raises(ValueError, match="cycle"):
        load_config(tmp_path / "x.yaml")
    for bad in ("[]", "[method.yaml, 3]", "7"):
        (tmp_path / "y.yaml").write_text(f"base: {bad}\nname: y\n")
        with pytest.raises(ValueError, match="non-empty list of such paths"):
            load_config(tmp_path / "y.yaml")


def test_base_configs_merge_and_cycles_are_reported(tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\ntrain:\n  lr: 0.5\n  batch_size: 32\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yaml").write_text("base: ../a.yaml\nname: b\ntrain:\n  lr: 0.25\n")
    cfg = load_config(tmp_path / "sub" / "b.yaml", ["train.max_steps=7"])
    assert (cfg.name, cfg.train.lr, cfg.train.batch_size, cfg.train.max_steps) == ("b", 0.25, 32, 7)
    (tmp_path / "c.yaml").write_text("base: d.yaml\nname: c\n")
    (tmp_path / "d.yaml").write_text("base: c.yaml\nname: d\n")
    with pytest.raises(ValueError, match="cycle"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "e.yaml").write_text("base: missing.yaml\nname: e\n")
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path / "e.yaml")
