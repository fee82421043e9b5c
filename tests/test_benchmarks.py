"""The benchmarks' harness, their import rules, and ``dmlkit bench`` outside a source checkout."""

import ast
import time
from pathlib import Path

import numpy as np

from benchmarks import _harness as h
from dmlkit.cli import BENCHMARKS, main

FOLDER = Path(h.__file__).parent
MODULES = {p.stem: p for p in FOLDER.glob("*.py") if p.stem != "__init__"}


def test_table_fits_columns_and_aligns_numbers_right():
    out = h.table(["", "ms", "ratio"], [["plain", "1.50", "1.00x"], ["with SFT", "12.25", "8.17x"]])
    assert out.splitlines() == [
        "             ms  ratio",
        "plain      1.50  1.00x",
        "with SFT  12.25  8.17x",
    ]


def test_interleaved_calls_round_robin_after_warmup():
    calls = []
    times = h.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=2, warmup=1)
    assert calls == ["a", "b"] * 3 and [len(t) for t in times.values()] == [2, 2]
    assert h.median_time(lambda: None, repeats=3) >= 0


def _hold_8_mib() -> float:
    x = np.ones(8 * 2**20 // 8)  # freed before returning; held long enough for the 1 ms sampler
    time.sleep(0.05)
    return float(x.sum())


def test_measure_sees_a_temporary_allocation():
    m = h.measure(_hold_8_mib, warmup=1)
    assert m.value == 2**20 and m.seconds > 0
    assert m.peak_extra_bytes >= 6 * 2**20 and m.peak_anon_bytes >= 6 * 2**20
    assert m.as_dict()["probe"] == m.probe


def test_run_worker_finds_the_benchmarks_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = h.run_worker("benchmarks.fastap", "dmlkit", ["--sizes", 8, "--dim", 4])
    assert res["peak_extra_bytes"] >= 0 and 0.0 <= res["loss"] <= 1.0


def _benchmark_imports(path: Path) -> list[tuple[str, str]]:
    """(benchmark module, imported name) for every import of another benchmark module, lazy ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "benchmarks":
            sub = node.module.split(".")[1:]
            for alias in node.names:
                out.append((sub[0], alias.name) if sub else (alias.name, ""))
        elif isinstance(node, ast.Import):
            out += [(a.name.split(".")[1], "") for a in node.names if a.name.startswith("benchmarks.")]
    return out


def test_benchmarks_share_only_the_harness_and_public_names_without_cycles():
    graph = {}
    for name, path in MODULES.items():
        imports = _benchmark_imports(path)
        private = [(mod, n) for mod, n in imports if mod != "_harness" and n.startswith("_")]
        assert not private, f"{name} imports private names of other benchmarks: {private}"
        graph[name] = {mod for mod, _ in imports if mod != name}
    state: dict[str, int] = {}

    def visit(node: str, stack: tuple[str, ...]) -> None:
        assert state.get(node) != 1, f"import cycle among benchmarks: {' -> '.join(stack + (node,))}"
        if state.get(node) == 2:
            return
        state[node] = 1
        for nxt in graph.get(node, ()):
            visit(nxt, stack + (node,))
        state[node] = 2

    for node in graph:
        visit(node, ())
    assert graph["_harness"] == set()


def test_every_benchmark_is_reachable_from_the_command_line():
    helpers = {"_harness", "sft_step"}  # the harness, and the second table of ``sft``
    assert set(BENCHMARKS) == set(MODULES) - helpers
    assert all(module == f"benchmarks.{name}" for name, module in BENCHMARKS.items())
    for name in BENCHMARKS:
        assert "def main(" in MODULES[name].read_text() and 'if __name__ == "__main__":' in MODULES[name].read_text()


def test_bench_outside_a_source_checkout_says_so(tmp_path, monkeypatch, capsys):
    import dmlkit

    monkeypatch.setattr(dmlkit, "__file__", str(tmp_path / "site-packages" / "dmlkit" / "__init__.py"))
    assert main(["bench", "sft"]) == 2
    assert "source checkout" in capsys.readouterr().err
