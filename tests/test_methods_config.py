"""The ``methods:`` section: one sub-section per method with one "is it on" rule. The old keys (``augment:``,
``ccp:``, ``loss.zero_shot_*``, ``train.warmup_steps``) still read, with a FutureWarning, in stored run records
only; in a user's own YAML or ``--set`` they are unknown keys whose error names the new key."""

import json
import warnings

import pytest
import yaml

from dmlkit.assemble import build_trainer, evaluate_run, resume_trainer
from dmlkit.config import MethodsConfig, config_differences, dump_config, load_config, to_dict
from dmlkit.cli import main
from dmlkit.config_migration import OLD_KEYS, REMOVED_IN
from dmlkit.methods import METHODS
from dmlkit.report import load_run
from tests_helpers import TINY_OVERRIDES, stop_after_validation

NEW_FORM = """
name: all_methods
model: {pooling: gsp, normalize: none}
loss: {name: multi_similarity}
methods:
  sft: {name: sft_d, lam: 0.3, normalize_input: true}
  ccp: {enabled: true, proxies_per_class: 2, pool_size: 3}
  zero_shot: {weight: 0.2, params: {ridge: 0.1}}
  warmup: {steps: 2}
train: {lr: 0.002}
"""

OLD_FORM = """
name: all_methods
model: {pooling: gsp, normalize: none}
loss: {name: multi_similarity, zero_shot_weight: 0.2, zero_shot_params: {ridge: 0.1}}
augment: {name: sft_d, lam: 0.3, normalize_input: true}
ccp: {enabled: true, proxies_per_class: 2, pool_size: 3}
train: {lr: 0.002, warmup_steps: 2}
"""

NEW_KEYS = [
    "methods.sft",
    "methods.ccp",
    "methods.zero_shot.weight",
    "methods.zero_shot.params",
    "methods.warmup.steps",
]


def _load_warned(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(*args, **kwargs)
    return cfg, [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def _names_each_new_key(messages):
    for key in NEW_KEYS:
        assert any(f"is now '{key}'" in m for m in messages), (key, messages)


def test_a_stored_record_in_the_old_form_loads_as_its_new_form_with_a_warning(tmp_path):
    (tmp_path / "new.yaml").write_text(NEW_FORM)
    (tmp_path / "old.yaml").write_text(OLD_FORM)
    new, new_warnings = _load_warned(tmp_path / "new.yaml", stored=True)
    old, messages = _load_warned(tmp_path / "old.yaml", stored=True)
    assert new_warnings == [] and old == new == load_config(tmp_path / "new.yaml")
    assert new.methods.enabled_sections() == ["sft", "ccp", "zero_shot", "warmup"]
    _names_each_new_key(messages)
    assert all(f"dmlkit {REMOVED_IN}" in m and "old.yaml" in m for m in messages)  # which file, and until when


@pytest.mark.parametrize(
    "text, hint",
    [
        ("augment: {name: sft}", "'augment' is now 'methods.sft'"),
        ("ccp: {enabled: true}", "'ccp' is now 'methods.ccp'"),
        (
            "loss: {zero_shot_weight: 0.1}",
            "in section 'loss' ('loss.zero_shot_weight' is now 'methods.zero_shot.weight')",
        ),
        ("loss: {zero_shot_params: {ridge: 0.1}}", "'loss.zero_shot_params' is now 'methods.zero_shot.params'"),
        ("train: {warmup_steps: 3}", "'train.warmup_steps' is now 'methods.warmup.steps'"),
    ],
)
def test_an_old_key_in_a_users_own_file_is_an_unknown_key_naming_the_new_one(tmp_path, text, hint):
    (tmp_path / "mine.yaml").write_text(f"base: {tmp_path / 'new.yaml'}\n{text}\n")
    (tmp_path / "new.yaml").write_text(NEW_FORM)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # refused, not migrated
        with pytest.raises(ValueError, match="unknown config key") as err:
            load_config(tmp_path / "mine.yaml")
    assert hint in str(err.value)


@pytest.mark.parametrize(
    "override, hint",
    [
        ("augment.lam=0.4", "'augment' is now 'methods.sft'"),
        ("ccp.enabled=true", "'ccp' is now 'methods.ccp'"),
        ("loss.zero_shot_weight=0.1", "'loss.zero_shot_weight' is now 'methods.zero_shot.weight'"),
        ("loss.zero_shot_params={ridge: 0.2}", "'loss.zero_shot_params' is now 'methods.zero_shot.params'"),
        ("train.warmup_steps=3", "'train.warmup_steps' is now 'methods.warmup.steps'"),
    ],
)
def test_an_old_key_in_an_override_is_an_unknown_key_naming_the_new_one(override, hint):
    with pytest.raises(ValueError, match="unknown config key") as err:
        load_config("configs/quickstart.yaml", [override])
    assert hint in str(err.value)


def test_an_unknown_key_that_is_no_old_key_gets_no_hint():
    with pytest.raises(ValueError, match="unknown config key") as err:
        load_config("configs/quickstart.yaml", ["train.bogus=1"])
    assert "is now" not in str(err.value)


@pytest.mark.parametrize(
    "old, new",
    [
        ("augment: {name: sft}", "methods: {sft: {lam: 0.3}}"),
        ("ccp: {enabled: true}", "methods: {ccp: {patience: 2}}"),
        ("loss: {zero_shot_weight: 0.1}", "methods: {zero_shot: {weight: 0.2}}"),
        ("train: {warmup_steps: 3}", "methods: {warmup: {steps: 3}}"),
    ],
)
def test_a_stored_record_giving_the_old_and_the_new_key_is_refused(tmp_path, old, new):
    (tmp_path / "both.yaml").write_text(f"{old}\n{new}\n")
    with pytest.raises(ValueError, match="keep only 'methods"):
        load_config(tmp_path / "both.yaml", stored=True)


def test_every_old_key_has_a_field_and_every_section_one_on_rule():
    cfg = load_config(None)
    for new in OLD_KEYS.values():
        node = cfg
        for key in new:
            node = getattr(node, key)  # AttributeError: the mapping names a key that does not exist
    for section in to_dict(cfg)["methods"]:
        assert isinstance(getattr(type(getattr(cfg.methods, section)), "active"), property), section


@pytest.mark.parametrize(
    "override, method",
    [
        ("methods.sft.name=sft", "sft"),
        ("methods.ccp.enabled=true", "ccp"),
        ("methods.zero_shot.weight=0.1", "zero_shot"),
        ("methods.warmup.steps=2", "warmup"),
    ],
)
def test_from_config_follows_the_sections_on_rule(override, method):
    off, on = load_config("configs/quickstart.yaml"), load_config("configs/quickstart.yaml", [override])
    assert method not in off.methods.enabled_sections() and METHODS.get(method).from_config(off) is None
    assert on.methods.enabled_sections() == [method] and METHODS.get(method).from_config(on) is not None


def test_config_differences_skips_the_options_of_methods_both_leave_off():
    a = load_config("configs/quickstart.yaml")
    b = load_config("configs/quickstart.yaml", ["methods.zero_shot.params={ridge: 0.1}", "methods.ccp.patience=9"])
    assert config_differences(a, b) == []
    c = load_config("configs/quickstart.yaml", ["methods.zero_shot.weight=0.1"])
    d = load_config(
        "configs/quickstart.yaml", ["methods.zero_shot.weight=0.1", "methods.zero_shot.params={ridge: 0.1}"]
    )
    assert config_differences(c, d) == ["methods.zero_shot.params.ridge"]
    assert config_differences(a, c) == ["methods.zero_shot.weight"]


def test_the_sections_check_their_values_once_with_the_new_key_in_the_message():
    for override, message in [
        ("methods.zero_shot.weight=1.0", "methods.zero_shot.weight must lie in"),
        ("methods.zero_shot.params={bogus: 1}", "unknown methods.zero_shot.params"),
        ("methods.warmup.steps=-1", "methods.warmup.steps must be an int"),
        ("methods.sft.name=sft_d", "set methods.sft.normalize_input: true"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_config("configs/quickstart.yaml", [override])
    assert MethodsConfig().enabled_sections() == []


def _old_form(values):
    """A resolved config dict as a run folder saved it before ``methods:`` existed."""
    methods = values.pop("methods")
    values["augment"], values["ccp"] = methods["sft"], methods["ccp"]
    values["loss"]["zero_shot_weight"] = methods["zero_shot"]["weight"]
    values["loss"]["zero_shot_params"] = methods["zero_shot"]["params"]
    values["train"]["warmup_steps"] = methods["warmup"]["steps"]
    return values


def test_an_old_run_folder_resumes_evaluates_reports_and_reruns(tmp_path, capsys):
    cfg = load_config(
        "configs/quickstart.yaml",
        TINY_OVERRIDES + ["plots=false", "eval.clustering=false", "methods.sft.name=sft", "methods.warmup.steps=2"],
    )
    run_dir = tmp_path / "old_run"
    with pytest.raises(KeyboardInterrupt):
        build_trainer(cfg, run_dir, callbacks=[stop_after_validation(4)], quiet=True).fit()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(_old_form(yaml.safe_load(dump_config(cfg))), sort_keys=False))
    saved, messages = _load_warned(run_dir / "config.yaml", stored=True)
    assert saved == cfg
    _names_each_new_key(messages)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        summary = resume_trainer(run_dir, quiet=True).fit()
        metrics = evaluate_run(run_dir, split="test")
        record = load_run(run_dir)
        capsys.readouterr()
        assert main(["train", str(run_dir / "config.yaml"), "--quiet"]) == 2  # read as its run's own record
    assert "already holds a run that finished" in capsys.readouterr().err
    for key, value in summary["test"].items():
        assert metrics[key] == pytest.approx(value, abs=1e-6), key
    assert record.config["methods"]["sft"]["name"] == "sft" and "augment" not in record.config
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    resumed_steps = [r for r in logged if r["split"] == "train" and r["step"] > 4]
    assert resumed_steps and all("loss/generated" in r for r in resumed_steps)  # SFT was on in the resumed part
