"""The documentation cannot rot: every ```python block of docs/ and README.md runs, docs/cli.md matches the CLI.

Blocks of one page run in order in one namespace (a later block may use an earlier one's
names), each page in a fresh namespace, all pages in one child process (so components a
page registers do not leak into other tests). A block fenced as ```python no-run is skipped:
use it only for code that truly cannot run here.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dmlkit.cli_reference import cli_reference

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```\s*$", re.S | re.M)

RUNNER = r"""
import json, sys, traceback
pages = json.load(open(sys.argv[1]))
results = {}
for page, blocks in pages.items():
    namespace = {"__name__": "__main__"}
    results[page] = None
    for number, (line, code) in enumerate(blocks, start=1):
        try:
            exec(compile(code, f"{page}:{line}", "exec"), namespace)
        except BaseException:
            results[page] = f"block {number} (line {line}) failed:\n" + traceback.format_exc()
            break
json.dump(results, open(sys.argv[2], "w"))
"""


def python_blocks(text):
    """``(line, code)`` of the runnable python blocks of a markdown text."""
    blocks = []
    for match in FENCE.finditer(text):
        if "no-run" in match.group(1):
            continue
        line = text.count("\n", 0, match.start()) + 2
        blocks.append((line, match.group(2)))
    return blocks


def page_id(path):
    return str(path.relative_to(ROOT))


def test_python_blocks_are_found_and_no_run_is_skipped():
    text = "x\n```python\na = 1\n```\n```python no-run\nimport nowhere\n```\n```bash\nls\n```\n```python\nb = a\n```\n"
    assert python_blocks(text) == [(3, "a = 1\n"), (12, "b = a\n")]


def run_pages(pages, tmp):
    """Run ``{page: [(line, code), ...]}`` in a child process; ``{page: None or the error}``."""
    (tmp / "pages.json").write_text(json.dumps(pages))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp / "pages.json"), str(tmp / "results.json")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp / "results.json").read_text())


def test_the_runner_reports_the_failing_block(tmp_path):
    results = run_pages(
        {"ok.md": [(3, "a = 1\n"), (7, "assert a == 1\n")], "bad.md": [(5, "x = 1\n"), (9, "1 / 0\n")]}, tmp_path
    )
    assert results["ok.md"] is None
    assert "block 2 (line 9)" in results["bad.md"] and "ZeroDivisionError" in results["bad.md"]


@pytest.fixture(scope="module")
def snippet_results(tmp_path_factory):
    pages = {page_id(p): python_blocks(p.read_text(encoding="utf-8")) for p in PAGES}
    return run_pages({k: v for k, v in pages.items() if v}, tmp_path_factory.mktemp("docs"))


@pytest.mark.parametrize("page", [page_id(p) for p in PAGES if python_blocks(p.read_text(encoding="utf-8"))])
def test_snippets_of_the_page_run(page, snippet_results):
    assert snippet_results[page] is None, snippet_results[page]


def test_the_own_images_path_is_a_snippet_that_runs_from_the_folder_to_export():
    """The page a practitioner with photos/<class>/*.jpg follows is run by test_snippets_of_the_page_run."""
    code = "".join(block for _, block in python_blocks((ROOT / "docs" / "datasets.md").read_text(encoding="utf-8")))
    for step in (
        '"train", "configs/own_images.yaml"',
        '"evaluate"',
        '"embed"',
        '"index", "build"',
        '"search"',
        '"export"',
    ):
        assert step in code, step
    assert "docs/datasets.md#your-own-images" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_method_page_has_a_snippet_and_config_keys():
    for name in ("sft", "fastap", "weak_metric_ce"):
        text = (ROOT / "docs" / "methods" / f"{name}.md").read_text(encoding="utf-8")
        assert python_blocks(text), f"docs/methods/{name}.md has no runnable snippet"
        assert "pytorch_metric_learning" in text and "## Config" in text


def test_cli_reference_is_up_to_date():
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == cli_reference(), "docs/cli.md is out of date: run python -m dmlkit.cli_reference"


def test_cli_reference_lists_every_command_and_option():
    from dmlkit.cli import _parser

    text = cli_reference()
    sub = next(a for a in _parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, parser in sub.choices.items():
        assert f"### `dmlkit {name}`" in text
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in text, (name, option)


def test_links_between_pages_resolve():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).is_file(), f"{page_id(page)} links to missing {target}"


def heading_anchors(text):
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens, a repeat
    numbered (``-1``, ``-2``); lines inside fenced blocks are not headings."""
    anchors, seen, fenced = set(), {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            repeats = seen.get(slug, 0)
            seen[slug] = repeats + 1
            anchors.add(f"{slug}-{repeats}" if repeats else slug)
    return anchors


def test_heading_anchors_follow_githubs_rule():
    text = "# The tables: SFT + L_ZS, CCP's knobs\n```\n# not a heading\n```\n## Cost\n## Cost\n"
    assert heading_anchors(text) == {"the-tables-sft--l_zs-ccps-knobs", "cost", "cost-1"}


def test_links_to_a_section_name_one_of_its_headings():
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#:]*\.md|)#([^)]+)\)", page.read_text(encoding="utf-8")):
            linked = page.parent / target if target else page
            if linked.is_file():  # a missing page is test_links_between_pages_resolve's failure
                assert anchor in heading_anchors(linked.read_text(encoding="utf-8")), (
                    f"{page_id(page)}: {target}#{anchor}"
                )


def test_the_concepts_page_names_exactly_the_losses_that_take_ref_emb():
    import torch

    from dmlkit.losses import create_loss, list_losses

    text = (ROOT / "docs" / "concepts.md").read_text()
    sentence = re.search(
        r"`ref_labels`, e\.g\. CCP's proxies\) is accepted by (.*?); the other losses refuse", text, re.S
    )
    named = set(re.findall(r"`(\w+)`", sentence.group(1)))
    gen = torch.Generator().manual_seed(0)
    x, y = torch.nn.functional.normalize(torch.randn(16, 8, generator=gen), dim=1), torch.arange(4).repeat_interleave(4)
    accepted = set()
    for name in list_losses():
        loss = create_loss(name, num_classes=4, embedding_size=8)
        try:
            loss(x, y, ref_emb=x.clone(), ref_labels=y)
        except ValueError:
            continue
        accepted.add(name)
    assert named == accepted
