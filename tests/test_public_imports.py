"""A PML user's imports: what README.md and docs/ import exists, and each package exports its components.

* every ``from dmlkit... import ...`` / ``import dmlkit...`` statement of a fenced code
  block in README.md and docs/**/*.md (any language, multi-line parentheses included)
  is executed name by name;
* ``dmlkit.losses`` exports every loss class as ``pytorch_metric_learning.losses``
  does, ``dmlkit.pooling`` every pooling layer and its function, ``dmlkit.evaluation``
  the metrics, ``dmlkit.proxies`` the k-centre functions; and a new name in a
  submodule's ``__all__`` must reach the package's ``__all__``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
IMPORT = re.compile(
    r"^[ \t]*(?:>>>[ \t]*)?(from[ \t]+dmlkit\b[\w.]*[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)|import[ \t]+dmlkit\b[^\n]*)",
    re.M,
)


def doc_imports(text: str) -> list[tuple[int, str, str | None]]:
    """``(line, module, name or None)`` for every dmlkit import in the fenced code blocks of ``text``."""
    found = []
    for block in FENCE.finditer(text):
        for match in IMPORT.finditer(block.group(1)):
            line = text.count("\n", 0, block.start(1) + match.start(1)) + 1
            for node in ast.parse(match.group(1).strip()).body:
                if isinstance(node, ast.ImportFrom):
                    found += [(line, node.module, alias.name) for alias in node.names]
                else:
                    found += [(line, alias.name, None) for alias in node.names]
    return found


def check_import(module: str, name: str | None) -> None:
    """``from module import name`` (``import module`` when ``name`` is None); raises ImportError if missing."""
    mod = importlib.import_module(module)
    if name is None or name == "*":
        for exported in getattr(mod, "__all__", []) if name == "*" else []:
            check_import(module, exported)
        return
    if not hasattr(mod, name):
        try:
            importlib.import_module(f"{module}.{name}")  # a submodule
        except ModuleNotFoundError:
            raise ImportError(f"cannot import name {name!r} from {module!r}") from None


DOC_IMPORTS = [
    pytest.param(module, name, id=f"{page.relative_to(ROOT)}:{line}:{module}.{name or ''}")
    for page in PAGES
    for line, module, name in doc_imports(page.read_text(encoding="utf-8"))
]


def test_the_extractor_finds_every_form_and_ignores_prose():
    text = (
        "Say `from dmlkit.losses import nothing` in prose.\n"
        "```python\nimport torch\nfrom dmlkit.losses import create_loss, list_losses  # two\n"
        "from dmlkit.pooling import (\n    GSP,\n    gem as g,\n)\n    import dmlkit.evaluation\n```\n"
        "```pycon\n>>> from dmlkit.proxies import greedy_k_center\n```\n"
        "```bash\npython -c 'from dmlkit.x import y'\n```\n"
    )
    assert doc_imports(text) == [
        (4, "dmlkit.losses", "create_loss"),
        (4, "dmlkit.losses", "list_losses"),
        (5, "dmlkit.pooling", "GSP"),
        (5, "dmlkit.pooling", "gem"),
        (9, "dmlkit.evaluation", None),
        (12, "dmlkit.proxies", "greedy_k_center"),
    ]


def test_the_docs_import_something():
    assert len(DOC_IMPORTS) >= 20 and any(p.values[0] == "dmlkit.losses" for p in DOC_IMPORTS)


def test_a_missing_name_is_reported():
    check_import("dmlkit.losses", "metric_cross_entropy")  # a submodule counts
    with pytest.raises(ImportError, match="no_such_loss"):
        check_import("dmlkit.losses", "no_such_loss")
    with pytest.raises(ModuleNotFoundError):
        check_import("dmlkit.no_such_package", None)


@pytest.mark.parametrize("module,name", DOC_IMPORTS)
def test_every_import_of_the_docs_exists(module, name):
    check_import(module, name)


# --------------------------------------------------------------------------- package-level exports

EXPECTED = {
    "dmlkit.losses": [
        # dmlkit's own loss classes (PML exports every loss from pytorch_metric_learning.losses)
        "CrossBatchMemoryLoss", "FastAPLoss", "L2SoftmaxLoss", "MetricCrossEntropy", "MetricCrossEntropyLoss",
        "ZeroShotPredictionLoss", "MergingCentersRegularizer", "WeakLogDistance", "MetricLogDistance",
        # their functions
        "fast_ap_per_query", "metric_bounds", "metric_condition_bound", "one_hot_labels", "check_one_hot",
        "xbm_supported_losses",
        # registry and config
        "create_loss", "create_miner", "list_losses", "list_miners", "loss_defaults", "miner_defaults",
        "default_miner", "register_loss", "register_miner", "get_loss_entry", "get_miner_entry", "ComponentEntry",
        "LossConfig", "build_loss",
    ],
    "dmlkit.pooling": [
        "GAP", "gap", "GMP", "gmp", "GAPGMP", "gap_gmp", "GeM", "gem", "GSP", "generalized_sum_pool",
        "NetVLAD", "netvlad", "AttentionPool", "attention_pool", "gsp_transport",
        "create_pooling", "list_poolings", "register_pooling",
    ],
    "dmlkit.evaluation": [
        "retrieval_metrics", "metric_names", "knn_search", "clustering_metrics", "nmi", "pairwise_f1",
        "retrieval_metrics_from_file", "clustering_metrics_from_file",
        "verification_metrics", "kfold_accuracy", "tar_at_far", "pair_scores", "best_threshold",
    ],
    "dmlkit.proxies": [
        "greedy_k_center", "batched_greedy_k_center", "select_per_class", "sample_class_pool",
        "ProxyBank", "ProxyPairLoss", "ProjectionRegularizer", "CCPConfig", "covering_radius",
    ],
    "dmlkit.augment": [
        "spherical_transform", "degenerate_transform", "translation_transform", "rotation_matrix", "create_transform",
        "ClassCenters", "FeatureGenerator", "FeatureAugmentedLoss", "balanced_targets", "unbalanced_targets",
        "SFTConfig", "build_augmented_loss",
    ],
    "dmlkit.methods": ["Method", "BuildContext", "METHODS", "build_methods", "list_methods"],
    "dmlkit.assemble": ["build_run", "build_trainer", "resume_trainer", "load_finished_run", "evaluate_run", "embed_run"],
}  # fmt: skip

# Names a package deliberately leaves in their submodule, with the reason (none today).
NOT_EXPORTED: set[tuple[str, str]] = set()


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_the_package_exports_its_components(package):
    mod = importlib.import_module(package)
    missing = [n for n in EXPECTED[package] if n not in mod.__all__ or not hasattr(mod, n)]
    assert not missing, f"{package} does not export {missing}"
    namespace: dict = {}
    exec(f"from {package} import *", namespace)
    assert set(mod.__all__) <= set(namespace), "a name of __all__ does not exist"
    assert len(mod.__all__) == len(set(mod.__all__)), "__all__ lists a name twice"


def submodules(package: str) -> list:
    mod = importlib.import_module(package)
    return [importlib.import_module(f"{package}.{i.name}") for i in pkgutil.iter_modules(mod.__path__)]


@pytest.mark.parametrize("package", ["dmlkit.pooling", "dmlkit.evaluation", "dmlkit.proxies", "dmlkit.augment"])
def test_every_public_name_of_a_submodule_reaches_the_package(package):
    exported = set(importlib.import_module(package).__all__)
    missing = [
        f"{sub.__name__}.{name}"
        for sub in submodules(package)
        for name in getattr(sub, "__all__", [])
        if name not in exported and (sub.__name__, name) not in NOT_EXPORTED
    ]
    assert not missing, f"add to {package}.__all__: {missing}"


def test_every_loss_class_reaches_dmlkit_losses():
    import dmlkit.losses as losses
    from dmlkit.losses import registry

    assert set(registry.__all__) <= set(losses.__all__)  # one list: the registry's own __all__
    classes = [
        f"{sub.__name__}.{name}"
        for sub in submodules("dmlkit.losses")
        for name in getattr(sub, "__all__", [])
        if inspect.isclass(getattr(sub, name)) and name not in losses.__all__
    ]
    assert not classes, f"add to dmlkit.losses.__all__: {classes}"
    for name in losses.list_losses():  # a registered loss built by a dmlkit class: that class is exported
        builds = losses.get_loss_entry(name).builds
        if builds is not None and builds.__module__.startswith("dmlkit."):
            assert getattr(losses, builds.__name__, None) is builds, (name, builds)


def test_every_registered_pooling_class_is_exported():
    import dmlkit.pooling as pooling

    for name in pooling.list_poolings():
        cls = type(pooling.create_pooling(name, dim=8))
        assert getattr(pooling, cls.__name__, None) is cls, (name, cls)


# --------------------------------------------------------------------------- names that moved to the lab

MOVED_TO_THE_LAB = {  # old module -> {name: module that holds it now}
    "dmlkit.evaluation": {
        **{
            n: "dmlkit_lab.evaluation.geometry"
            for n in (
                "geometry_report",
                "class_means",
                "scatter_matrices",
                "r_w",
                "r_w_curve",
                "class_divergences",
                "rotation_residuals",
                "covariance_spectra",
            )
        },
        **{
            n: "dmlkit_lab.evaluation.pcc"
            for n in (
                "pcc_diagnostics",
                "pcc_embedding",
                "prototype_cover_delta",
                "prototype_histogram",
                "nearest_prototype",
            )
        },
    },
}


@pytest.mark.parametrize(
    "old,name,new", [(old, n, new) for old, names in MOVED_TO_THE_LAB.items() for n, new in names.items()]
)
def test_a_name_moved_to_the_lab_still_imports_with_a_warning_naming_its_place(old, name, new):
    with pytest.warns(FutureWarning, match=rf"{old}\.{name} moved to {new}\.{name}"):
        obj = getattr(importlib.import_module(old), name)
    assert obj is getattr(importlib.import_module(new), name)
    assert name not in importlib.import_module(old).__all__


def test_an_unknown_name_is_still_an_attribute_error():
    import dmlkit.evaluation

    with pytest.raises(AttributeError, match="no attribute 'no_such_measure'"):
        dmlkit.evaluation.no_such_measure
