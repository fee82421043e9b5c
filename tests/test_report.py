"""The HTML report: run folders read and compared, mean/std over seeds, embedded figures, a real browser."""

import base64
import json
import math
import re
import shutil
import statistics
from html.parser import HTMLParser

import pytest
import torch
import yaml

from browser import browser_page  # noqa: F401  (pytest fixture)
from dmlkit.cli import main
from dmlkit.config import load_config
from dmlkit.assemble import build_trainer
from dmlkit.protocols.table import mean_std
from dmlkit.report import build_report, config_differences, flatten, group_runs, load_run
from tests_helpers import TINY_OVERRIDES

PNG = b"\x89PNG\r\n\x1a\n"


class Tables(HTMLParser):
    """Tables (by class attribute, else by order) as lists of rows of cell texts, and the img sources."""

    def __init__(self):
        super().__init__()
        self.tables, self.images, self.scripts = [], [], 0
        self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append((attrs.get("class", ""), []))
        elif tag == "tr":
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(attrs)
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(path):
    parser = Tables()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    """Two tiny runs of one config, seeds 0 and 1."""
    root = tmp_path_factory.mktemp("report")
    for seed in (0, 1):
        cfg = load_config("configs/quickstart.yaml", TINY_OVERRIDES + ["eval.clustering=false", f"seed={seed}"])
        build_trainer(cfg, root / f"seed{seed}", quiet=True).fit()
    return root / "seed0", root / "seed1"


def _copy_as(run, dest, **config_changes):
    """A copy of ``run`` whose config has other values (an experiment that was not trained)."""
    shutil.copytree(run, dest)
    values = yaml.safe_load((dest / "config.yaml").read_text())
    for dotted, value in config_changes.items():
        node = values
        *parents, last = dotted.split("__")
        for key in parents:
            node = node[key]
        node[last] = value
    (dest / "config.yaml").write_text(yaml.safe_dump(values))
    return dest


def test_flatten_and_differences_on_hand_made_configs():
    a = {"seed": 0, "train": {"lr": 0.1, "ks": [1, 2]}, "loss": {"params": {}}}
    b = {"seed": 1, "train": {"lr": 0.1, "ks": [1, 4]}, "loss": {"params": {"m": 2}}, "extra": 3}
    assert flatten(a) == {"seed": 0, "train.lr": 0.1, "train.ks": [1, 2], "loss.params": {}}
    diffs = config_differences([a, b])
    assert diffs == {
        "extra": ["(absent)", 3],
        "loss.params": [{}, "(absent)"],
        "loss.params.m": ["(absent)", 2],
        "seed": [0, 1],
        "train.ks": [[1, 2], [1, 4]],
    }
    assert config_differences([a, a]) == {}


def test_the_report_shows_no_spread_for_one_seed():
    mean, std = mean_std([0.2, 0.4, 0.9], single_std=math.nan)  # as _metrics_section calls it
    assert mean == pytest.approx(statistics.mean([0.2, 0.4, 0.9]))
    assert std == pytest.approx(statistics.stdev([0.2, 0.4, 0.9]))
    assert mean_std([0.5], single_std=math.nan)[0] == 0.5 and math.isnan(mean_std([0.5], single_std=math.nan)[1])


def test_seeds_form_one_group_and_other_configs_another(two_seeds, tmp_path):
    other = _copy_as(two_seeds[0], tmp_path / "triplet", loss__name="triplet", name="renamed")
    runs = [load_run(p) for p in (*two_seeds, other)]
    groups = group_runs(runs)
    assert [len(members) for _, members in groups] == [2, 1]
    assert [label for label, _ in groups] == ["loss.name=multi_similarity", "loss.name=triplet"]


def _metrics_rows(out):
    return dict((cls, rows) for cls, rows in parse(out).tables if cls)["metrics"]


def test_repeats_of_a_seed_are_not_counted_as_seeds(two_seeds, tmp_path):
    again = _copy_as(two_seeds[0], tmp_path / "seed0-again")  # the same config and seed, run twice
    out = build_report([two_seeds[0], again, two_seeds[1]], tmp_path / "r.html")
    header, row = _metrics_rows(out)
    assert row[:2] == ["quickstart", "2 (3 runs: seed 0 ×2)"]
    values = [json.loads((r / "summary.json").read_text())["test"]["mean_average_precision_at_r"] for r in two_seeds]
    assert (
        row[header.index("MAP@R")] == f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"
    )  # over 2 seeds
    per_run = next(rows for cls, rows in parse(out).tables if rows[0][:2] == ["run", "seed"])
    assert [r[1] for r in per_run[1:]] == ["0", "0 (repeat 2)", "1"]


def test_runs_with_another_world_size_are_another_experiment(two_seeds, tmp_path):
    ddp = _copy_as(two_seeds[1], tmp_path / "seed1-ddp")
    env = json.loads((ddp / "environment.json").read_text())
    (ddp / "environment.json").write_text(json.dumps({**env, "world_size": 2}))
    runs = [load_run(p) for p in (*two_seeds, ddp)]
    assert [(label, len(members)) for label, members in group_runs(runs)] == [("world_size=1", 2), ("world_size=2", 1)]
    page = parse(build_report([*two_seeds, ddp], tmp_path / "r.html"))
    runs_table = next(rows for cls, rows in page.tables if rows[0][0] == "run" and "processes" in rows[0])
    assert [r[runs_table[0].index("processes")] for r in runs_table[1:]] == ["1", "1", "2"]
    kernels = (
        f"cpu {env['device']['name']} {torch.backends.cpu.get_cpu_capability()}"  # the CPU's kernels decide the bits
    )
    assert [r[runs_table[0].index("device")] for r in runs_table[1:]] == [kernels] * 3


def test_report_of_two_seeds(two_seeds, tmp_path):
    run0 = _copy_as(two_seeds[0], tmp_path / "seed0")
    run1 = two_seeds[1]
    shutil.copy(run0 / "plots" / "test_distances.png", run0 / "plots" / "ccp_proxies.png")  # method figures
    (run0 / "plots" / "geometry_test").mkdir()
    shutil.copy(run0 / "plots" / "test_distances.png", run0 / "plots" / "geometry_test" / "sft_divergence.png")
    out = build_report([run0, run1], tmp_path / "sub" / "report.html")
    page = parse(out)
    text = out.read_text(encoding="utf-8")
    assert page.scripts == 0 and "http://" not in text and "https://" not in text and "<link" not in text

    tables = dict((cls, rows) for cls, rows in page.tables if cls)
    metrics = tables["metrics"]
    header, row = metrics[0], metrics[1]
    assert len(metrics) == 2 and row[:2] == ["quickstart", "2"]
    summaries = [json.loads((r / "summary.json").read_text())["test"] for r in two_seeds]
    for name, short in (("precision_at_1", "P@1"), ("recall_at_2", "R@2"), ("mean_average_precision_at_r", "MAP@R")):
        values = [s[name] for s in summaries]
        assert row[header.index(short)] == f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"

    diff = next(rows for cls, rows in page.tables if rows[0][0] == "config key")
    assert diff == [["config key", "seed0", "seed1"], ["seed", "0", "1"]]

    sources = [img["src"] for img in page.images]
    assert all(src.startswith("data:image/png;base64,") for src in sources)
    assert all(base64.b64decode(src.split(",", 1)[1]).startswith(PNG) for src in sources)
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", text)
    # curves + (projection, distances) per run + the two method figures, captioned by their paths in plots/.
    assert len(sources) == 1 + 2 * 2 + 2
    assert "ccp_proxies.png" in captions and "geometry_test/sft_divergence.png" in captions
    assert text.index("Method-specific figures") < text.index("geometry_test/sft_divergence.png")
    assert "seed0: test_embeddings_pca.png" in captions and "seed1: test_distances.png" in captions
    assert "No gallery" in text


def test_report_escapes_names(two_seeds, tmp_path):
    odd = _copy_as(two_seeds[1], tmp_path / "odd", name="<b>bold</b>", loss__name="<i>x</i>")
    text = build_report([two_seeds[0], odd], tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<i>x</i>" not in text and "&lt;i&gt;x&lt;/i&gt;" in text


def test_a_run_without_plots_is_reported_with_a_note(two_seeds, tmp_path):
    bare = _copy_as(two_seeds[1], tmp_path / "bare")
    shutil.rmtree(bare / "plots")
    out = build_report([two_seeds[0], bare], tmp_path / "r.html")
    text = out.read_text(encoding="utf-8")
    assert "bare: no plots/test_embeddings_pca.png" in text and "bare: no plots/test_distances.png" in text
    assert len(parse(out).images) == 1 + 2  # the curves of both runs, seed0's two figures


def test_not_a_run_folder_names_the_missing_file(two_seeds, tmp_path):
    with pytest.raises(ValueError, match="config.yaml"):
        build_report([tmp_path], tmp_path / "r.html")
    with pytest.raises(ValueError, match="no such directory"):
        load_run(tmp_path / "nowhere")
    unfinished = tmp_path / "unfinished"
    shutil.copytree(two_seeds[0], unfinished)
    (unfinished / "summary.json").unlink()
    with pytest.raises(ValueError, match=r"missing summary.json .*--resume"):
        load_run(unfinished)
    with pytest.raises(ValueError, match="more than once"):
        build_report([two_seeds[0], two_seeds[0]], tmp_path / "r.html")
    with pytest.raises(ValueError, match="at least one run folder"):
        build_report([], tmp_path / "r.html")


def test_report_command(two_seeds, tmp_path, capsys):
    out = tmp_path / "cli.html"
    assert main(["report", *map(str, two_seeds), "--out", str(out), "--title", "two seeds"]) == 0
    assert "<h1>two seeds</h1>" in out.read_text(encoding="utf-8")
    assert main(["report", str(tmp_path), "--out", str(out)]) == 2
    assert "missing config.yaml" in capsys.readouterr().err


def test_report_renders_in_a_browser(browser_page, two_seeds, tmp_path):
    # run 0 has a gallery in plots/ already; run 1's is drawn for the report.
    run0 = _copy_as(two_seeds[0], tmp_path / "seed0")
    shutil.copy(run0 / "plots" / "test_distances.png", run0 / "plots" / "nearest_neighbours.png")
    out = build_report([run0, two_seeds[1]], tmp_path / "report.html", gallery=True, queries=2, k=3)
    page = browser_page.page
    page.goto(out.as_uri())
    page.wait_for_load_state("load")
    table = page.locator("table.metrics")
    assert table.is_visible()
    assert table.locator("tbody tr").count() == 1
    assert "±" in table.locator("tbody tr").first.inner_text()
    sizes = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
    assert len(sizes) == 1 + 2 * 2 + 2  # curves, projections and histograms, two galleries
    assert all(done and w > 0 and h > 0 for done, w, h in sizes)
    assert page.locator("h2", has_text="Nearest neighbours").is_visible()
    assert page.locator("figcaption", has_text="drawn for this report").count() == 1
    browser_page.assert_no_console_errors()


def test_config_values_are_shown_as_yaml_spells_them():
    from dmlkit.report.html import _fmt

    assert [_fmt(v) for v in (None, True, False, 0.000123456, 3, "gap")] == [
        "null",
        "true",
        "false",
        "0.0001235",
        "3",
        "gap",
    ]
