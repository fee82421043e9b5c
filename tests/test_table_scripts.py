"""The table scripts (``scripts/testbed_verdicts.sh``, ``scripts/font_testbed_tables.sh``, and the configs and pairs
``scripts/gpu_font_testbed_tables.sh`` hands to the GPU batch): every protocol call
they make names config files that exist and baselines that pair every run (``assign_baselines``), checked by
running the scripts with ``DMLKIT`` pointing at a stub that records its arguments instead of training."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from dmlkit.config import load_config
from dmlkit.protocols.paired import assign_baselines

ROOT = Path(__file__).resolve().parents[1]

STUB = """#!/bin/bash
# records one `dmlkit protocol ...` call and leaves the table files the script copies
printf '%q ' "$@" >> "$CALLS"; echo >> "$CALLS"
while [ $# -gt 0 ]; do [ "$1" = --out ] && { mkdir -p "$2"; touch "$2/results.md" "$2/results.json"; }; shift; done
"""


def _run_script(script: str, tmp_path: Path, groups: tuple[str, ...] = (), **extra_env: str):
    """Runs ``script`` with ``DMLKIT`` pointing at the recording stub; the calls land in ``tmp_path/calls.txt``."""
    stub = tmp_path / "dmlkit"
    stub.write_text(STUB)
    stub.chmod(0o755)
    env = {
        **os.environ,
        "DMLKIT": str(stub),
        "CALLS": str(tmp_path / "calls.txt"),
        "OUT": str(tmp_path / "out"),
        **extra_env,
    }
    return subprocess.run(["bash", script, *groups], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _calls(script: str, tmp_path: Path, groups: tuple[str, ...] = (), **extra_env: str) -> list[list[str]]:
    done = _run_script(script, tmp_path, groups, **extra_env)
    assert done.returncode == 0, done.stderr[-2000:]
    return [shlex.split(line) for line in (tmp_path / "calls.txt").read_text().splitlines()]


def _option(args: list[str], flag: str) -> list[str]:
    """The values after ``flag`` up to the next ``--option``."""
    start = args.index(flag) + 1
    end = next((i for i in range(start, len(args)) if args[i].startswith("--")), len(args))
    return args[start:end]


@pytest.mark.parametrize("script, tables", [("scripts/testbed_verdicts.sh", 5), ("scripts/font_testbed_tables.sh", 6)])
def test_every_table_call_names_existing_configs_and_pairs_every_run(tmp_path, script, tables):
    calls = _calls(script, tmp_path)
    assert len(calls) == tables
    paired: set[tuple[str, str]] = set()
    for args in calls:
        assert args[:2] == ["protocol", "holdout"]
        configs = _option(args, "holdout")
        assert configs and all((ROOT / c).is_file() for c in configs), configs
        names = [load_config(ROOT / c).name for c in configs]
        paired |= set(_check_every_run_is_paired_or_a_baseline(names, _option(args, "--baseline")).items())
    # the pairs a name prefix would get wrong: CCP against its loss validated as CCP is, FastAP Hard against Random
    assert all(base.endswith(("_val", "_val25")) for run, base in paired if "_ccp" in run), paired
    assert any(run.endswith("fastap_hard") and base.endswith("fastap_random") for run, base in paired), paired


# the groups whose every loss has its dmlkit tune layer in configs/font_testbed/tuned (docs/results/font_testbed.md)
TUNED_GROUPS = ("ms", "sft", "gsp", "ccp")


def test_the_tuned_rows_run_through_the_same_groups_and_pairs(tmp_path):
    (tmp_path / "untuned").mkdir()
    untuned = _calls("scripts/font_testbed_tables.sh", tmp_path / "untuned", TUNED_GROUPS)
    tuned = _calls("scripts/font_testbed_tables.sh", tmp_path, TUNED_GROUPS, CONFIG_DIR="configs/font_testbed/tuned")
    assert len(tuned) == len(TUNED_GROUPS)
    for args, plain in zip(tuned, untuned):
        configs = _option(args, "holdout")
        assert all(c.startswith("configs/font_testbed/tuned/") and (ROOT / c).is_file() for c in configs), configs
        assert [Path(c).name for c in configs] == [Path(c).name for c in _option(plain, "holdout")]
        assert _option(args, "--baseline") == _option(plain, "--baseline")
        names = [load_config(ROOT / c).name for c in configs]
        _check_every_run_is_paired_or_a_baseline(names, _option(args, "--baseline"))


def test_the_searched_rows_pair_against_the_rows_they_are_compared_with(tmp_path):
    (call,) = _calls("scripts/font_testbed_tables.sh", tmp_path, ("searched",), CONFIG_DIR="configs/font_testbed/tuned")
    configs = _option(call, "holdout")
    assert all(c.startswith("configs/font_testbed/tuned/") and (ROOT / c).is_file() for c in configs), configs
    names = [load_config(ROOT / c).name for c in configs]
    pairs = _check_every_run_is_paired_or_a_baseline(names, _option(call, "--baseline"))
    assert pairs == {
        "font_testbed_ccp_searched": "font_testbed_val",
        "font_testbed_ccp": "font_testbed_val",
        "font_testbed_gsp_zs_searched": "font_testbed_gsp",
        "font_testbed_gsp_zs": "font_testbed_gsp",
        "font_testbed_sft_searched": "font_testbed",
        "font_testbed_sft": "font_testbed",
        "font_testbed_gsp": "font_testbed",  # the baselines of the rows above, each against MS
        "font_testbed_val": "font_testbed",
    }


def test_the_searched_group_asks_for_the_tuned_configs(tmp_path):
    done = _run_script("scripts/font_testbed_tables.sh", tmp_path, ("searched",))
    assert done.returncode == 2 and "CONFIG_DIR=configs/font_testbed/tuned" in done.stderr
    assert not (tmp_path / "calls.txt").exists()  # refused before any run


def _check_every_run_is_paired_or_a_baseline(names: list[str], baselines: list[str]) -> dict[str, str]:
    pairs = assign_baselines(names, baselines)  # raises when a run has no baseline
    assert set(pairs) | set(pairs.values()) | {b for b in baselines if "=" not in b} == set(names)
    return pairs


GPU_STUB = """#!/bin/bash
# records the configs and the environment gpu_protocol_batch.sh would run with
{ printf '%q ' "$@"; echo; echo "$BASELINE"; echo "$BACKBONES"; } > "$CALLS"
"""


CCP_LOSS_ROWS = (
    "font_testbed_triplet font_testbed_triplet_val font_testbed_triplet_ccp_sample font_testbed_contrastive_c2 "
    "font_testbed_contrastive_c2_val font_testbed_contrastive_c2_ccp font_testbed_val font_testbed_ccp"
)


@pytest.mark.parametrize(
    "rows", [None, "font_testbed font_testbed_gsp font_testbed_val font_testbed_ccp", CCP_LOSS_ROWS]
)
def test_the_gpu_font_script_names_existing_configs_and_pairs_every_run(tmp_path, rows):
    stub = tmp_path / "batch.sh"
    stub.write_text(GPU_STUB)
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "BATCH": str(stub), "CALLS": str(calls), "INSTALL_DEBS": "0"}
    env.pop("BASELINE", None)
    if rows:
        env["ROWS"] = rows
    done = subprocess.run(
        ["bash", "scripts/gpu_font_testbed_tables.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    configs_line, baseline_line, _ = calls.read_text().splitlines()
    configs = shlex.split(configs_line)
    assert configs and all((ROOT / c).is_file() for c in configs), configs
    names = [load_config(ROOT / c).name for c in configs]
    if rows:
        assert names == rows.split()
    pairs = _check_every_run_is_paired_or_a_baseline(names, baseline_line.split())
    assert pairs["font_testbed_ccp"] == "font_testbed_val"
    if rows == CCP_LOSS_ROWS:  # a name prefix would pair CCP with its loss unvalidated
        assert pairs["font_testbed_triplet_ccp_sample"] == "font_testbed_triplet_val"
        assert pairs["font_testbed_contrastive_c2_ccp"] == "font_testbed_contrastive_c2_val"
