"""The font testbed's tuned rows (``configs/font_testbed/tuned``): each is its untuned row with only the keys of
its loss's layer changed (a loss with nothing to search: unchanged), a row whose method was searched too is a tuned
row with only its method's layer changed, and each layer holds the best values of the study it names under
``docs/results/studies`` (a typo in a copied value, or a layer that also moved another key, fails here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from dmlkit.config import config_differences, load_config, to_dict
from dmlkit.report.runs import flatten
from dmlkit.tune.catalog import default_space

ROOT = Path(__file__).resolve().parents[1]
TUNED = ROOT / "configs" / "font_testbed" / "tuned"
ROWS = sorted(p.name for p in TUNED.glob("font_testbed*.yaml"))
LAYERS = sorted(p.name for p in TUNED.glob("_*.yaml"))


def _bases(row: str) -> list[str]:
    return yaml.safe_load((TUNED / row).read_text())["base"]


def test_every_layer_has_rows_and_every_row_a_layer():
    assert LAYERS and ROWS
    used = {base for row in ROWS for base in _bases(row) if base.startswith("_")}
    assert used == set(LAYERS)


def _component_tuned(layer: dict, pooling: str) -> str:
    """The one method (``methods.<name>.*``) or pooling (``model.pooling_params.*`` of ``pooling``) a layer sets."""
    names = set()
    for key in layer:
        if key.startswith("methods."):
            names.add(key.split(".")[1])
        elif key.startswith("model.pooling_params."):
            names.add(pooling)
        else:
            raise AssertionError(f"a method's layer sets {key}, neither a method's knob nor the pooling's")
    assert len(names) == 1, f"a method's layer tunes one method or pooling, not {sorted(names)}"
    return names.pop()


@pytest.mark.parametrize("row", ROWS)
def test_a_tuned_row_is_its_untuned_row_with_only_its_layers_keys(row):
    bases = _bases(row)
    parent = (TUNED / bases[0]).resolve()
    tuned, untuned = load_config(TUNED / row), load_config(parent)
    layers = [flatten(yaml.safe_load((TUNED / base).read_text())) for base in bases[1:]]
    if parent.parent == TUNED:  # a row whose method was searched too extends a tuned row, under its own name
        assert tuned.name == Path(row).stem != untuned.name
        # the layer _ccp.yaml (or _ccp_c2.yaml, searched on another loss) tunes methods.ccp alone, _gsp_triplet.yaml
        # the GSP pooling's parameters alone
        layer_name = bases[1].removesuffix(".yaml").lstrip("_")
        assert len(layers) == 1
        assert layer_name.startswith(_component_tuned(layers[0], tuned.model.pooling))
        untuned = load_config(parent, overrides=[f"name={tuned.name}"])
    else:
        assert parent == (TUNED.parent / row).resolve(), "a tuned row extends the untuned row of the same name"
        assert tuned.name == untuned.name  # the same name, so the tables pair the rows as the untuned ones
    if len(bases) == 1:  # a loss with nothing to search runs as it is, so its group runs whole
        with pytest.raises(ValueError, match="no shipped search space"):
            default_space(tuned.loss.name)
        assert config_differences(untuned, tuned) == []
        return
    changed = set(config_differences(untuned, tuned))
    assert changed <= {key for layer in layers for key in layer}  # empty where the search kept the borrowed values
    values = flatten(to_dict(tuned))
    for layer in layers:
        for key, value in layer.items():
            assert values[key] == value


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_holds_the_best_values_of_its_study(layer):
    text = (TUNED / layer).read_text()
    study = re.search(r"docs/results/studies/([\w-]+)", text)
    assert study, f"{layer} names its study folder"
    best = json.loads((ROOT / "docs" / "results" / "studies" / study.group(1) / "best.json").read_text())
    assert flatten(yaml.safe_load(text)) == best["params"]
    assert f"trial {best['trial']}," in text and f"{100 * best['value']:.2f}" in text
