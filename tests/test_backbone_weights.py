"""Runs pair only on the same backbone weights (protocols/backbone_weights.py): what a run records, what is refused.

The protocol-level case (a moved run refused by ``run_protocol``) is in test_backbone_factor.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from dmlkit.assemble.pretrained import resolve_pretrained_weights
from dmlkit.models.config import ModelConfig
from dmlkit.protocols.backbone_weights import check_same_weights, recorded_weights


def _run(root: Path, name: str, pretrained: dict | None, other: dict | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    environment = {"world_size": 1, **(other or {})}
    if pretrained is not None:
        environment["pretrained"] = pretrained
    (folder / "environment.json").write_text(json.dumps(environment))
    return folder


def test_runs_of_one_name_on_the_same_weights_pass(tmp_path):
    runs = [_run(tmp_path, f"m-seed{s}", {"name": "b", "checksum": "a" * 64}) for s in range(3)]
    runs.append(
        _run(tmp_path, "other-seed0", {"name": "c", "checksum": "b" * 64})
    )  # another backbone name: its own set
    check_same_weights(runs)


def test_two_sets_of_weights_under_one_name_are_refused_with_the_runs_of_each(tmp_path):
    runs = [
        _run(tmp_path, "ms-seed0", {"name": "b", "checksum": "1" * 64}),
        _run(tmp_path, "ms-seed1", {"name": "b", "checksum": "1" * 64}),
        _run(tmp_path, "gsp-seed0", {"name": "b", "checksum": "2" * 64}),
    ]
    with pytest.raises(
        ValueError,
        match=r"'b' started from 2 different sets .*111111111111 in ms-seed0, ms-seed1; "
        r"222222222222 in gsp-seed0.*own --out",
    ):
        check_same_weights(runs)


def test_weights_files_are_told_apart_by_their_bytes(tmp_path):
    runs = [
        _run(tmp_path, "a-seed0", {"file": "w.pt", "sha256": "3" * 64}),
        _run(tmp_path, "b-seed0", {"file": "w.pt", "sha256": "4" * 64}),
    ]
    with pytest.raises(ValueError, match="'w.pt' started from 2 different sets"):
        check_same_weights(runs)


def test_runs_without_a_record_are_not_checked(tmp_path):
    old = _run(tmp_path, "old-seed0", None)  # written before dmlkit recorded the weights
    (tmp_path / "bare-seed0").mkdir()  # no environment.json at all (a run stopped before it started)
    new = _run(tmp_path, "new-seed0", {"name": "b", "checksum": "5" * 64})
    assert recorded_weights(old) is None and recorded_weights(tmp_path / "bare-seed0") is None
    assert recorded_weights(new) == ("b", "5" * 64)
    check_same_weights([old, tmp_path / "bare-seed0", new])


def test_the_identity_of_a_weights_file_is_its_sha256_and_none_without_pretrained_weights(tmp_path):
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"some weights")
    model = ModelConfig(backbone="resnet20", pretrained=str(weights))
    assert resolve_pretrained_weights(model, 1) == (
        model,
        {"file": str(weights), "sha256": hashlib.sha256(b"some weights").hexdigest()},
    )
    for published_or_none in (False, True):
        model = ModelConfig(backbone="resnet20", pretrained=published_or_none)
        assert resolve_pretrained_weights(model, 1) == (model, None)
