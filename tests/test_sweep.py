"""Parameter sweeps: grid parsing, run naming, invalid points, tables, figures and reuse of finished runs."""

import json
import math
from functools import partial

import pytest

from dmlkit.cli import main
from dmlkit.config import load_config
from dmlkit.protocols.sweep import grid_points, parse_grid, point_name, run_sweep, sweep_cells
from dmlkit.viz.sweep_plots import sweep_figure
from tests_helpers import TINY_OVERRIDES

QUICK = TINY_OVERRIDES + ["plots=false", "eval.clustering=false", "train.max_steps=2", "train.val_every=2"]


def test_parse_grid_keeps_order_and_values():
    grid = parse_grid(["methods.ccp.proxies_per_class=1,2", "methods.ccp.pool_size = 4, 6 ,8"])
    assert grid == {"methods.ccp.proxies_per_class": ["1", "2"], "methods.ccp.pool_size": ["4", "6", "8"]}
    points = grid_points(grid)
    assert len(points) == 6
    assert points[0] == (("methods.ccp.proxies_per_class", "1"), ("methods.ccp.pool_size", "4"))
    assert points[-1] == (("methods.ccp.proxies_per_class", "2"), ("methods.ccp.pool_size", "8"))


@pytest.mark.parametrize(
    "specs, match",
    [
        (["methods.ccp.pool_size"], "KEY=V1,V2"),
        (["=1,2"], "KEY=V1,V2"),
        (["train.lr=1e-3,,1e-4"], "empty value"),
        (["train.lr=1e-3,1e-3"], "repeats"),
        (["train.lr=1e-3", "train.lr=1e-4"], "twice"),
        ([], "at least one"),
    ],
)
def test_bad_grids_are_rejected(specs, match):
    with pytest.raises(ValueError, match=match):
        parse_grid(specs)


def test_point_names_are_distinct_and_file_safe():
    grid = parse_grid(["train.lr=1e-3,1e-4", "model.pooling=gap,gap+gmp"])
    names = [point_name("ms", p) for p in grid_points(grid)]
    assert len(set(names)) == len(names)
    assert names[0] == "ms__lr1e-3__poolinggap"
    assert all("/" not in n and "=" not in n for n in names)


def test_sweep_trains_each_point_skips_invalid_ones_and_reuses(tmp_path):
    grid = parse_grid(["methods.ccp.proxies_per_class=1,2", "methods.ccp.pool_size=1,3"])
    overrides = QUICK + ["methods.ccp.enabled=true", "methods.ccp.patience=1"]
    sweep = partial(run_sweep, "holdout", ["configs/experiments/ccp/contrastive.yaml"], grid, tmp_path, seeds=[0])
    table = sweep(overrides=overrides)
    record = json.loads((tmp_path / "results.json").read_text())
    entries = {tuple(e["point"].values()): e for e in record["results"]}
    assert "pool_size (1) must be >=" in entries[("2", "1")]["invalid"]
    trained = [p for p, e in entries.items() if "invalid" not in e]
    assert sorted(trained) == [("1", "1"), ("1", "3"), ("2", "3")]
    for point in trained:
        name = entries[point]["name"]
        run = tmp_path / f"{name}-seed0"
        assert (run / "summary.json").is_file()
        cfg = load_config(run / "config.yaml")
        assert (cfg.methods.ccp.proxies_per_class, cfg.methods.ccp.pool_size) == tuple(int(v) for v in point)
        assert len(entries[point]["per_seed"]) == 1
    assert "invalid" in table and table.count("(n=1)") == 3
    assert (tmp_path / "sweep.png").stat().st_size > 0
    assert sweep(overrides=overrides, reuse=True) == table
    moved = tmp_path / f"{entries[trained[0]]['name']}-seed0" / "environment.json"
    environment = json.loads(moved.read_text())
    environment["device"] = {"type": "cuda", "name": "NVIDIA H200"}  # one point's run kept from a GPU
    moved.write_text(json.dumps(environment))
    with pytest.raises(ValueError, match=r"2 kinds of machine .*cuda NVIDIA H200"):
        sweep(overrides=overrides, reuse=True)


def test_a_key_no_config_accepts_is_an_error_listing_the_valid_keys(tmp_path):
    with pytest.raises(ValueError, match="every grid point is rejected.*(valid|unknown)"):
        run_sweep("holdout", ["configs/quickstart.yaml"], parse_grid(["train.no_such_key=1,2"]), tmp_path)
    assert not any(tmp_path.iterdir())


def test_fair_protocol_is_not_a_sweep_protocol(tmp_path):
    with pytest.raises(ValueError, match="single-model protocol"):
        run_sweep("fair", ["configs/quickstart.yaml"], parse_grid(["train.lr=1e-3"]), tmp_path)


def test_sweep_cells_mark_missing_points_nan():
    results = [
        {"config": "a", "point": {"k": "1"}, "summary": {"m": (0.5, 0.1)}},
        {"config": "a", "point": {"k": "2"}, "summary": {}},
    ]
    cells = sweep_cells(results, "m")
    assert cells["a"][("1",)] == (0.5, 0.1)
    assert math.isnan(cells["a"][("2",)][0])


@pytest.mark.parametrize("keys", [["batch"], ["proxies", "pool"]])
def test_sweep_figure_draws_one_or_two_keys(tmp_path, keys):
    grid = {"batch": ["16", "32", "64"], "proxies": ["1", "2"], "pool": ["2", "4"]}
    cells = {
        name: {
            tuple(v for _, v in p): (0.4 + 0.01 * i, 0.01)
            for i, p in enumerate(grid_points({k: grid[k] for k in keys}))
        }
        for name in ("c2", "c2_ccp")
    }
    cells["c2"][tuple(grid[k][0] for k in keys)] = (math.nan, math.nan)
    sweep_figure(cells, keys, grid, "mean_average_precision_at_r", tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="one or two"):
        sweep_figure(cells, ["a", "b", "c"], grid, "m", tmp_path / "g.png")


def test_cli_sweep_writes_the_table(tmp_path, capsys):
    args = ["sweep", "holdout", "configs/quickstart.yaml", "--grid", "train.batch_size=8,16", "--out", str(tmp_path)]
    for override in QUICK:
        if not override.startswith("train.batch_size"):
            args += ["--set", override]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "batch_size=8" in out and "batch_size=16" in out
    assert (tmp_path / "quickstart__batch_size8-seed0" / "summary.json").is_file()
