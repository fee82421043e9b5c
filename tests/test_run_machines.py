"""Runs pair only on one kind of machine (protocols/run_machines.py), and a table can be rebuilt from the kept
records of its runs (``config.yaml``, ``summary.json``, ``environment.json``) without training them again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from dmlkit.protocols import run_protocol
from dmlkit.protocols.run_machines import check_same_machine, machine_kind
from tests_helpers import TINY_OVERRIDES

KEPT = ("config.yaml", "summary.json", "environment.json")


def _run(root: Path, name: str, environment: dict | None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    if environment is not None:
        (folder / "environment.json").write_text(json.dumps(environment))
    return folder


def _cpu(capability: str = "AVX2", threads: int = 1, **other) -> dict:
    device = {"type": "cpu", "name": "x86_64", "capability": capability}
    return {"world_size": 1, "num_nodes": 1, "device": device, "precision": "32-true", "threads": threads, **other}


def test_runs_of_one_kind_pass_whatever_else_their_environments_hold(tmp_path):
    runs = [_run(tmp_path, f"m-seed{s}", _cpu(platform=f"host{s}", versions={"torch": "2.13.0"})) for s in range(3)]
    assert machine_kind(runs[0]) == "cpu AVX2, 1 thread(s), precision 32-true, 1 process(es) on 1 node(s)"
    check_same_machine(runs)


@pytest.mark.parametrize(
    "other, shown",
    [
        (_cpu("AVX512"), "cpu AVX512, 1 thread(s)"),
        (_cpu(threads=2), "cpu AVX2, 2 thread(s)"),
        ({**_cpu(), "precision": "bf16-mixed"}, "precision bf16-mixed"),
        ({**_cpu(), "world_size": 2}, "2 process(es) on 1 node(s)"),
        (
            {
                "world_size": 1,
                "num_nodes": 1,
                "device": {"type": "cuda", "name": "NVIDIA H200"},
                "precision": "32-true",
            },
            "cuda NVIDIA H200, precision 32-true",
        ),
    ],
)
def test_a_run_of_another_kind_is_refused_with_the_runs_of_each_kind(tmp_path, other, shown):
    runs = [_run(tmp_path, "ms-seed0", _cpu()), _run(tmp_path, "ms-seed1", _cpu()), _run(tmp_path, "ccp-seed0", other)]
    with pytest.raises(ValueError, match=r"ran on 2 kinds of machine \(") as caught:
        check_same_machine(runs)
    message = str(caught.value)
    assert f"{shown}" in message and "ccp-seed0" in message and "ms-seed0, ms-seed1" in message
    assert "own --out" in message


def test_runs_that_record_no_machine_are_not_checked(tmp_path):
    bare = _run(tmp_path, "bare-seed0", None)
    old = _run(tmp_path, "old-seed0", {"world_size": 1})  # written before the device was recorded
    damaged = _run(tmp_path, "damaged-seed0", None)
    (damaged / "environment.json").write_text("{not json")
    assert machine_kind(bare) is machine_kind(old) is machine_kind(damaged) is None
    check_same_machine([bare, old, damaged, _run(tmp_path, "new-seed0", _cpu("AVX512"))])


def _renamed_quickstart(tmp_path: Path, name: str) -> str:
    text = Path("configs/quickstart.yaml").read_text().replace("name: quickstart", f"name: {name}", 1)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def test_a_table_is_rebuilt_from_its_runs_kept_records_and_refuses_a_run_of_another_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # the same kind on any machine
    configs = [_renamed_quickstart(tmp_path, "base"), _renamed_quickstart(tmp_path, "other")]
    overrides = [*TINY_OVERRIDES, "plots=false", "eval.clustering=false", "train.lr=0.01", "train.threads=1"]
    trained = tmp_path / "trained"
    run_protocol("holdout", configs, trained, seeds=[0, 1], overrides=overrides, baselines=["base"])
    kept = tmp_path / "kept"
    subprocess.run(["bash", "scripts/keep_run_records.sh", str(trained), str(kept)], check=True, capture_output=True)
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == sorted(
        f"{n}-seed{s}/{record}" for n in ("base", "other") for s in (0, 1) for record in KEPT
    ), "the three records of each finished run, nothing else"

    rebuilt = run_protocol("holdout", configs, kept, seeds=[0, 1], overrides=overrides, baselines=["base"], reuse=True)
    assert not list(kept.glob("*/*.pt")), "nothing was trained again"
    original, again = (json.loads((d / "results.json").read_text()) for d in (trained, kept))
    assert again["paired"] == original["paired"] and again["runs"] == original["runs"]
    assert "| other | base | 2 |" in rebuilt

    environment = json.loads((kept / "other-seed1" / "environment.json").read_text())
    environment["device"]["capability"] = "AVX512"  # kept on another machine kind
    (kept / "other-seed1" / "environment.json").write_text(json.dumps(environment))
    with pytest.raises(ValueError, match=r"2 kinds of machine .*cpu AVX512, 1 thread\(s\).*other-seed1"):
        run_protocol("holdout", configs, kept, seeds=[0, 1], overrides=overrides, baselines=["base"], reuse=True)


def test_the_kind_a_run_would_record_is_known_before_it_starts_only_on_one_cpu_process(monkeypatch):
    from dmlkit.config import load_config
    from dmlkit.protocols.run_machines import planned_kind

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    train = load_config("configs/quickstart.yaml", ["train.threads=null"]).train
    assert planned_kind(train, 2) == "cpu AVX2, 2 thread(s), precision 32-true, 1 process(es) on 1 node(s)"
    pinned = load_config("configs/quickstart.yaml", ["train.threads=1", "train.precision=bf16-mixed"]).train
    assert planned_kind(pinned, 2) == "cpu AVX2, 1 thread(s), precision bf16-mixed, 1 process(es) on 1 node(s)"
    assert planned_kind(load_config("configs/quickstart.yaml", ["train.devices=2"]).train, 1) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # auto picks the GPU: its kind is known later
    assert planned_kind(train, 1) is None


def test_a_command_that_would_train_beside_kept_runs_of_another_machine_stops_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    configs = [_renamed_quickstart(tmp_path, "base"), _renamed_quickstart(tmp_path, "other")]
    overrides = [*TINY_OVERRIDES, "plots=false", "eval.clustering=false", "train.threads=1"]
    out = tmp_path / "runs"
    run_protocol("holdout", configs[:1], out, seeds=[0], overrides=overrides)
    environment = json.loads((out / "base-seed0" / "environment.json").read_text())
    environment["device"]["capability"] = "AVX512"  # the baseline's record was kept from another machine kind
    (out / "base-seed0" / "environment.json").write_text(json.dumps(environment))
    for jobs in (1, 2):
        with pytest.raises(
            ValueError, match=r"would run on 2 kinds of machine .*cpu AVX2, 1 thread\(s\).*other-seed0 \(to train\)"
        ):
            run_protocol("holdout", configs, out, seeds=[0], overrides=overrides, baselines=["base"], jobs=jobs)
        assert not (out / "other-seed0").exists(), "nothing was trained"
    environment["device"]["capability"] = "AVX2"  # the same kind: the command trains and pairs
    (out / "base-seed0" / "environment.json").write_text(json.dumps(environment))
    run_protocol("holdout", configs, out, seeds=[0], overrides=overrides, baselines=["base"])
    assert (out / "other-seed0" / "summary.json").is_file()
