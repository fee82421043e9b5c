"""The import graph of ``src/dmlkit`` against DESIGN.md: no cycles (type-only and lazy imports included),
and the layer rules ("which way imports point") hold.

The graph is read from the source with ``ast``: every ``import`` / ``from ... import`` anywhere in a
module (top level, inside functions, under ``TYPE_CHECKING``) is an edge between modules of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "dmlkit"

COMPONENTS = ("models", "losses", "pooling", "augment", "proxies", "data", "evaluation", "distributed")
TOOL_LAYERS = ("methods", "engine", "assemble", "protocols", "cli", "studies", "report", "search", "serve", "pretrain")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(name: str) -> bool:
    return (SRC / Path(*name.split(".")) / "__init__.py").is_file()


def resolve(name: str, modules: set[str]) -> str | None:
    """The package module that ``name`` (a module or a name inside one) refers to."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(path: Path, modules: set[str]) -> set[str]:
    here = module_name(path)
    base = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                root = base.split(".")
                root = root[: len(root) - node.level + 1]
                prefix = ".".join(root + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
        else:
            continue
        for target in targets:
            if target.startswith("dmlkit"):
                resolved = resolve(target, modules)
                if resolved and resolved != here:
                    found.add(resolved)
    return found


def import_graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in files}
    graph = {module_name(p): imports_of(p, modules) for p in files}
    # a package's __init__ re-exporting its own submodules is not a dependency of those submodules on it
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not (is_package(t) and name.startswith(t + "."))}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_graph_reader_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def violations(forbidden: dict[str, tuple[str, ...]]) -> list[str]:
    out = []
    for module, targets in import_graph().items():
        banned = forbidden.get(layer(module), ())
        out += [f"{module} -> {t}" for t in sorted(targets) if layer(t) in banned]
    return out


def test_components_import_no_tool_layer():
    rules = {c: TOOL_LAYERS + ("config",) for c in COMPONENTS}
    assert violations(rules) == []


@pytest.mark.parametrize("lower, higher", [
    ("engine", ("methods", "assemble", "config", "protocols", "cli", "models", "losses", "augment", "proxies", "pooling")),
    ("methods", ("assemble", "protocols", "cli", "report", "search", "serve", "studies", "pretrain")),
    ("assemble", ("pretrain", "protocols", "cli", "report", "search", "serve", "studies")),
    ("evaluation", ("augment", "losses", "proxies", "engine", "methods", "models")),
    ("data", ("models",)),
])
def test_layers_point_down(lower, higher):
    assert violations({lower: higher}) == []


def test_the_trainer_knows_no_method():
    text = (PACKAGE / "engine" / "trainer.py").read_text().lower()
    for word in ("ccp", "zero_shot", "plan_key", "normalize_input", "warmup", "sft", "dmlkit.augment", "proxies"):
        assert word not in text, word
