"""The import graph of ``src/dmlkit`` against the layers of docs/architecture.md ("which way imports point"):
no cycles (type-only and function-level imports included), the layer rules hold, importing a low layer
does not load a higher one, and the library never imports the lab (``src/dmlkit_lab``), which reaches it only
through the plug-in entry points.

Two readings, because each misses what the other sees:

* The static graph is read from the source with ``ast``: every ``import`` / ``from ... import`` anywhere in a
  module (top level, inside functions, under ``TYPE_CHECKING``) is an edge between modules of the package
  (``test_the_graph_reader_sees_every_import_statement``). It cannot see an import by a computed name (the
  registries' ``import_submodules``, the lazy exports of ``dmlkit.losses``, the CLI's tables of study and
  benchmark modules), nor what a package's ``__init__`` drags in: an allowed edge to ``dmlkit.data.x`` runs
  ``dmlkit/data/__init__.py``, which loads every dataset.
* So the entry points that must stay light are also imported in a fresh interpreter, and the modules they
  load are checked: reading a config loads no method, no loop and no loss; the models load no dataset.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "dmlkit"

COMPONENTS = ("models", "losses", "pooling", "augment", "proxies", "data", "evaluation", "distributed")
TOOL_LAYERS = ("methods", "engine", "assemble", "protocols", "cli", "report", "search", "serve", "pretrain")


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
    return imports_in(path.read_text(), module_name(path), path.name == "__init__.py", modules)


def imports_in(source: str, here: str, is_init: bool, modules: set[str]) -> set[str]:
    """The package modules that ``source`` (module ``here``) imports, wherever the statement stands."""
    base = here if is_init else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
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
                return stack[stack.index(nxt) :] + [nxt]
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


def test_the_graph_reader_sees_every_import_statement():
    source = textwrap.dedent("""
        from typing import TYPE_CHECKING
        import dmlkit.a
        if TYPE_CHECKING:
            from dmlkit.b import Thing
        def later():
            from dmlkit import c
            from . import d
        class K:
            def method(self):
                import dmlkit.e.f
    """)
    modules = {"dmlkit", "dmlkit.a", "dmlkit.b", "dmlkit.c", "dmlkit.d", "dmlkit.e", "dmlkit.e.f", "dmlkit.here"}
    assert imports_in(source, "dmlkit.here", False, modules) == {
        "dmlkit",
        "dmlkit.a",
        "dmlkit.b",
        "dmlkit.c",
        "dmlkit.d",
        "dmlkit.e.f",
    }


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


@pytest.mark.parametrize(
    "lower, higher",
    [
        (
            "engine",
            ("methods", "assemble", "config", "protocols", "cli", "models", "losses", "augment", "proxies", "pooling"),
        ),
        ("methods", ("assemble", "protocols", "cli", "report", "search", "serve", "pretrain")),
        ("assemble", ("pretrain", "protocols", "cli", "report", "search", "serve")),
        ("evaluation", ("augment", "losses", "proxies", "engine", "methods", "models")),
        ("data", ("models",)),
        ("config", ("methods", "assemble", "protocols", "cli", "report", "search", "serve", "pretrain")),
    ],
)
def test_layers_point_down(lower, higher):
    assert violations({lower: higher}) == []


def test_the_trainer_knows_no_method():
    text = (PACKAGE / "engine" / "trainer.py").read_text().lower()
    for word in ("ccp", "zero_shot", "plan_key", "normalize_input", "warmup", "sft", "dmlkit.augment", "proxies"):
        assert word not in text, word


def loaded_by(module: str) -> list[str]:
    """The ``dmlkit`` modules that ``import module`` loads in a fresh interpreter."""
    code = f"import sys, {module}; print(' '.join(sorted(m for m in sys.modules if m.startswith('dmlkit'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def is_config_module(module: str) -> bool:
    name = module.rpartition(".")[2]
    return name == "config" or name.endswith("_config")


# what a config needs of the losses to name one: the registry (filled on its first lookup) and PML's options
LOSS_CONFIG_NEEDS = {"dmlkit.losses", "dmlkit.losses.registry", "dmlkit.losses.pml_options"}


def test_reading_a_config_loads_no_method_no_loop_and_no_loss():
    loaded = loaded_by("dmlkit.config")
    assert [m for m in loaded if layer(m) == "methods"] == []
    assert [m for m in loaded if layer(m) == "engine" and m != "dmlkit.engine" and not is_config_module(m)] == []
    assert [m for m in loaded if layer(m) == "losses" and m not in LOSS_CONFIG_NEEDS and not is_config_module(m)] == []


def test_the_models_load_no_dataset():
    assert [m for m in loaded_by("dmlkit.models") if m.startswith("dmlkit.data.datasets")] == []


# --------------------------------------------------------------------------- the library and the lab

LAB = "dmlkit_lab"


def lab_imports_in(source: str) -> list[str]:
    """Where ``source`` reaches the lab: every ``import`` / ``from ... import`` of ``dmlkit_lab`` wherever it stands
    (top level, in a function, under ``TYPE_CHECKING``), and every ``importlib.import_module`` / ``__import__``
    of a string naming it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if not node.level else []
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            names = [node.args[0].value] if called in ("import_module", "__import__") else []
        else:
            continue
        found += [
            f"line {node.lineno}: {n}" for n in names if isinstance(n, str) and (n == LAB or n.startswith(LAB + "."))
        ]
    return found


def test_the_lab_reader_sees_every_way_to_import_the_lab():
    source = textwrap.dedent("""
        import dmlkit_lab
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from dmlkit_lab.datasets import FontGlyphsDataset
        def later():
            import dmlkit_lab.studies.pcc as pcc
            import importlib
            return importlib.import_module("dmlkit_lab.recipes"), __import__("dmlkit_lab")
        from dmlkit.data import DATASETS  # the library: fine
        from . import dmlkit_lab_like  # relative: inside dmlkit
    """)
    assert [f.split(": ")[1] for f in lab_imports_in(source)] == [
        "dmlkit_lab",
        "dmlkit_lab.datasets",
        "dmlkit_lab.studies.pcc",
        "dmlkit_lab.recipes",
        "dmlkit_lab",
    ]


def test_the_library_never_imports_the_lab():
    found = [
        f"{path.relative_to(SRC)} {where}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for where in lab_imports_in(path.read_text())
    ]
    assert found == [], "the library imports the lab (register from the lab's plug-in instead): " + "; ".join(found)


def test_the_lab_is_reached_through_its_entry_points():
    from importlib.metadata import entry_points

    assert {(p.name, p.value) for p in entry_points(group="dmlkit.plugins")} >= {("dmlkit_lab", "dmlkit_lab.plugin")}
    assert {p.value.split(":")[0] for p in entry_points(group="dmlkit.commands")} <= {"dmlkit_lab.commands"}


def test_importing_the_library_loads_no_lab_module():
    for module in ("dmlkit", "dmlkit.data", "dmlkit.config", "dmlkit.models", "dmlkit.evaluation", "dmlkit.cli"):
        assert [m for m in loaded_by(module) if m.startswith(LAB)] == [], module
