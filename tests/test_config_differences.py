"""``config_differences``: when two configs train the same run (reused run folders, cached backbones)."""

from dmlkit.config import config_differences, dump_config, load_config


def test_same_config_has_no_difference_and_a_changed_value_is_named():
    a = load_config("configs/quickstart.yaml")
    assert config_differences(a, load_config("configs/quickstart.yaml")) == []
    b = load_config("configs/quickstart.yaml", ["train.lr=0.5", "model.embedding_dim=64"])
    assert config_differences(a, b) == ["model.embedding_dim", "train.lr"]


def test_options_of_a_method_both_leave_off_do_not_count():
    a = load_config("configs/quickstart.yaml")
    b = load_config("configs/quickstart.yaml", ["methods.sft.alpha=0.123", "methods.ccp.patience=9"])
    assert config_differences(a, b) == []
    assert dump_config(a) != dump_config(b), "the resolved texts differ: a text comparison would call them two runs"


def test_turning_a_method_on_or_changing_its_option_while_on_counts():
    a = load_config("configs/quickstart.yaml")
    on = load_config("configs/quickstart.yaml", ["methods.sft.name=sft"])
    assert "methods.sft.name" in config_differences(a, on)
    on_other = load_config("configs/quickstart.yaml", ["methods.sft.name=sft", "methods.sft.alpha=0.123"])
    assert config_differences(on, on_other) == ["methods.sft.alpha"]
    ccp = load_config("configs/quickstart.yaml", ["methods.ccp.enabled=true"])
    assert config_differences(
        ccp, load_config("configs/quickstart.yaml", ["methods.ccp.enabled=true", "methods.ccp.patience=9"])
    ) == ["methods.ccp.patience"]
