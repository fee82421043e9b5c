"""Named pretrained backbones: their recipes, where their weights are cached, and the checked loading.

A config that says ``model.pretrained: glyphs-resnet20`` fine-tunes a backbone that dmlkit
trains itself, once, as the papers fine-tune ImageNet weights: the *recipe* of a name is an
experiment config, registered with ``register_pretrained_recipe`` (``RECIPES``). The library ships
no recipe; this project's own (normalized softmax on the ``pretrain`` classes of ``glyphs_testbed``,
class-disjoint from the DML classes) are registered by the lab's plug-in (``dmlkit_lab.recipes``). ``dmlkit pretrain CONFIG`` (or the
first ``dmlkit train`` / ``dmlkit protocol`` of a config that needs it) trains the recipe with
the ordinary trainer (``dmlkit.pretrain``) and keeps the backbone's weights in

    ``<cache root>/pretrained/<name>-<key[:16]>.pt``   (``$DMLKIT_CACHE`` or ``~/.cache/dmlkit``)

where ``key`` is the SHA-256 of what determines the weights (``pretrained_key``): the entry
format, the name, the recipe as written (seed and ``train.threads`` included), the dataset's
fingerprint (glyphs: version, selection rule, fonts, size), the versions of torch and
pytorch-metric-learning, and the instruction set of the CPU's kernels (``cpu_capability``: AVX2 and AVX512
kernels sum in other orders, and on a fresh AMD Zen 3 (AVX2) machine the ``brief`` recipes ended on other weights
than on the machines before, of another kind; docs/results/font_testbed.md). A changed recipe, dataset, library or CPU kind gives
another file name, so such an entry is never picked up, and a cache shared by machines of two kinds holds one
entry for each. The thread count is in the recipe because float reductions (a
convolution's backward, a matrix product) are split over the intra-op threads, so the same recipe
trained with 1 and with 2 threads ends on different weights (docs/results/testbed.md measured a
3-point MAP@R gap between two such backbones); the trainer pins ``train.threads`` whatever the shell's
``OMP_NUM_THREADS``. The entry stores its key, the thread count, library versions and CPU capability it was
trained with, its backbone and input channels, a SHA-256 of its tensors
and the recipe's full resolved config (every default included); ``read_pretrained`` compares that
config with today's resolution of the recipe, so a changed *default* (say ``train.betas``) makes
the entry stale too. A config field added since the entry was written takes its default, as it
does when an old run folder is reused (``protocols.runs``): dmlkit adds options with defaults that
keep what existing configs do, and keying on the full resolved text would throw away every backbone
whenever any method gains an option. A field the
entry holds and today's config no longer knows makes it stale. A renamed, truncated, altered or
stale file raises ``PretrainedCacheError`` and is rebuilt, never used.

A name may carry a pretraining seed, ``<recipe>@seed<N>`` (``glyphs-resnet20@seed1``): the recipe
with ``seed: N``, cached under that name like the default. The backbone is a random factor of every
fine-tuning table (the seed of the pretraining moves the fine-tuned MAP@R by more than most method
effects), so ``dmlkit protocol --backbones`` pairs methods over several of them. ``<recipe>@seed<N>``
with the recipe's own seed is the recipe itself (one cache entry). (A change of the training
*code* that changes weights, or a new field whose default changes what a recipe does, needs a new
``PRETRAINED_FORMAT``.)

``resolve_pretrained`` (called by ``build_model`` before the embedder is built) turns the name
into the checked weights file, or raises a ``ValueError`` that says what to run: the entry is
missing or corrupt, the name is unknown, or the config's backbone or input channels differ
from the recipe's. This module builds nothing: training a recipe is tool-level work
(``dmlkit.pretrain``), above this layer.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import torch
import yaml

from dmlkit.config import ExperimentConfig, config_differences, from_dict
from dmlkit.config_migration import migrate_values
from dmlkit.data.cache import cache_root
from dmlkit.data.catalog import DATASETS
from dmlkit.engine.environment import cpu_capability
from dmlkit.models.config import ModelConfig

__all__ = [
    "PRETRAINED_FORMAT",
    "PretrainedCacheError",
    "RECIPES",
    "canonical_pretrained_name",
    "config_drift",
    "is_pretrained_name",
    "list_pretrained",
    "pretrained_key",
    "pretrained_path",
    "pretrained_recipe",
    "read_pretrained",
    "register_pretrained_recipe",
    "resolve_pretrained",
    "resolve_pretrained_weights",
    "split_pretrained_name",
    "state_checksum",
    "training_conditions",
]

PRETRAINED_FORMAT = (
    3  # 2: the entry records the threads and library versions it was trained with; 3: and the CPU capability
)


class _Recipes(dict):
    """name -> recipe; a name not found (and a listing, ``list_pretrained``) first imports the installed plug-ins,
    which register recipes with ``register_pretrained_recipe`` (this project's own: ``dmlkit_lab.recipes``)."""

    def _plugins(self) -> None:
        from dmlkit.plugins import import_entry_point_plugins

        import_entry_point_plugins()

    def __missing__(self, name: str) -> dict[str, Any]:
        self._plugins()
        if not dict.__contains__(self, name):
            raise KeyError(name)
        return dict.__getitem__(self, name)

    def __contains__(self, name: object) -> bool:
        if not dict.__contains__(self, name):
            self._plugins()
        return dict.__contains__(self, name)


#: name -> the experiment config (as YAML values) whose trained backbone the name stands for.
RECIPES: dict[str, dict[str, Any]] = _Recipes()


def register_pretrained_recipe(name: str, recipe: dict[str, Any]) -> None:
    """Make ``model.pretrained: <name>`` (and ``<name>@seed<N>``) train and load the backbone of ``recipe``, an
    experiment config as YAML values (checked here). A name is registered once."""
    if not isinstance(name, str) or not name or "@" in name:
        raise ValueError(f"a pretrained recipe's name is a non-empty string without '@', got {name!r}")
    if dict.__contains__(RECIPES, name):
        raise ValueError(f"pretrained backbone '{name}' is registered twice")
    from_dict(ExperimentConfig, copy.deepcopy(recipe))  # a bad recipe fails here, not at its first use
    RECIPES[name] = copy.deepcopy(recipe)


class PretrainedCacheError(ValueError):
    """A cached pretrained backbone that cannot be used: unreadable, of another key, or altered."""


def list_pretrained() -> list[str]:
    """The names ``model.pretrained`` accepts besides ``true`` / ``false`` / a weights file (each also as
    ``<name>@seed<N>``)."""
    RECIPES._plugins()
    return sorted(RECIPES)


_SEEDED = re.compile(r"^(?P<base>[^@]+)@(?P<suffix>.*)$")
_SEED_SUFFIX = re.compile(r"^seed(?P<seed>[0-9]+)$")


def split_pretrained_name(name: str) -> tuple[str, int | None]:
    """``(recipe name, pretraining seed or None)`` of ``name`` (``glyphs-resnet20@seed1`` -> ``("glyphs-resnet20", 1)``).

    Raises ``ValueError`` for an unknown recipe or a seed suffix that is not ``seed<N>`` with N >= 0.
    """
    match = _SEEDED.match(name)
    base, suffix = (match["base"], match["suffix"]) if match else (name, None)
    if base not in RECIPES:
        raise ValueError(
            f"unknown pretrained backbone '{base}'; valid names are: {', '.join(list_pretrained())} (each also as "
            "<name>@seed<N>), or give model.pretrained the path of a weights file (or true / false)"
        )
    if suffix is None:
        return base, None
    seed = _SEED_SUFFIX.match(suffix)
    if seed is None or int(seed["seed"]) > 2**31:
        raise ValueError(
            f"pretrained backbone '{name}': '@{suffix}' is not a pretraining seed; write {base}@seed<N> with N a "
            f"non-negative integer (e.g. {base}@seed1), or {base} for the recipe's own seed"
        )
    return base, int(seed["seed"])


def is_pretrained_name(value: object) -> bool:
    """Whether ``value`` names a recipe (``<recipe>`` or ``<recipe>@<anything>``: a bad seed is then an error
    of ``split_pretrained_name``, not a weights file that does not exist)."""
    return isinstance(value, str) and value.split("@", 1)[0] in RECIPES


def canonical_pretrained_name(name: str) -> str:
    """``name`` as its cache entry is named: the recipe's name when the seed is the recipe's own."""
    base, seed = split_pretrained_name(name)
    return base if seed is None or seed == RECIPES[base].get("seed", 0) else f"{base}@seed{seed}"


def _recipe_values(name: str) -> dict[str, Any]:
    base, seed = split_pretrained_name(name)
    values = copy.deepcopy(RECIPES[base])
    if seed is not None:
        values["seed"] = seed
    return values


def pretrained_recipe(name: str) -> ExperimentConfig:
    """The experiment config that trains backbone ``name`` (``<recipe>`` or ``<recipe>@seed<N>``)."""
    return from_dict(ExperimentConfig, _recipe_values(name))


def _dataset_fingerprint(cfg: ExperimentConfig) -> str:
    fingerprint = getattr(DATASETS.get(cfg.data.name), "fingerprint", None)
    return fingerprint(cfg.data.root, cfg.data.image_size) if fingerprint is not None else f"dataset {cfg.data.name}"


def pretrained_key(name: str) -> str:
    """SHA-256 (hex) of everything that determines the weights of ``name`` (module docstring)."""
    import pytorch_metric_learning

    name = canonical_pretrained_name(name)
    cfg = pretrained_recipe(name)
    record = {
        "format": PRETRAINED_FORMAT,
        "name": name,
        "recipe": _recipe_values(name),
        "data": _dataset_fingerprint(cfg),
        "torch": torch.__version__,
        "pytorch_metric_learning": pytorch_metric_learning.__version__,
        "cpu_capability": cpu_capability(),
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def config_drift(stored: str, current: ExperimentConfig) -> list[str]:
    """The dotted keys where the resolved config ``stored`` (YAML text) and ``current`` differ
    (``config_differences``: a field added since takes its default, the options of a method both leave
    off are not compared); a key that today's classes do not know is reported as ``<stored config: ...>``."""
    try:
        old_cfg = from_dict(
            ExperimentConfig, migrate_values(yaml.safe_load(stored) or {}, "in the stored config", warn=False)
        )
    except (ValueError, TypeError, KeyError) as err:
        return [f"<stored config: {err}>"]
    return config_differences(old_cfg, current)


def pretrained_path(name: str, key: str | None = None) -> Path:
    """Where the weights of ``name`` are cached: ``<cache root>/pretrained/<name>-<key[:16]>.pt``."""
    key = pretrained_key(name) if key is None else key
    return cache_root() / "pretrained" / f"{canonical_pretrained_name(name)}-{key[:16]}.pt"


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 of a state dict: every tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for k in sorted(state):
        t = state[k].detach().cpu().contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def read_pretrained(name: str, path: Path | None = None) -> dict[str, Any] | None:
    """The cache entry of ``name`` (a dict with ``state_dict``, ``backbone``, ``in_channels``, ``summary``, ...),
    ``None`` when there is none, or ``PretrainedCacheError`` when the file is there but unusable."""
    name = canonical_pretrained_name(name)
    key = pretrained_key(name)
    path = pretrained_path(name, key) if path is None else Path(path)
    if not path.is_file():
        return None
    try:
        entry = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for a truncated or foreign file
        raise PretrainedCacheError(f"'{path}' cannot be read ({type(err).__name__}: {err})") from err
    fields = ("format", "name", "key", "backbone", "in_channels", "state_dict", "checksum", "config")
    if not isinstance(entry, dict) or any(f not in entry for f in fields):
        raise PretrainedCacheError(f"'{path}' is not a dmlkit pretrained-backbone entry")
    if entry["format"] != PRETRAINED_FORMAT or entry["name"] != name or entry["key"] != key:
        raise PretrainedCacheError(f"'{path}' holds weights of another recipe, dataset or library version (stale)")
    made_with = training_conditions(pretrained_recipe(name))
    differ = [f"{k}: {entry.get(k)!r} (recipe: {v!r})" for k, v in made_with.items() if entry.get(k) != v]
    if differ:
        raise PretrainedCacheError(
            f"'{path}' was trained under other conditions than the recipe's (stale): {'; '.join(differ)}"
        )
    drift = config_drift(str(entry["config"]), pretrained_recipe(name))
    if drift:
        raise PretrainedCacheError(
            f"'{path}' was trained with another resolution of the recipe (stale): {', '.join(drift[:5])}"
        )
    state = entry["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise PretrainedCacheError(f"'{path}' holds no state dict of tensors")
    if state_checksum(state) != entry["checksum"]:
        raise PretrainedCacheError(f"the weights in '{path}' do not match their checksum (altered or damaged)")
    return entry


def training_conditions(recipe: ExperimentConfig) -> dict[str, Any]:
    """What besides the recipe decides the weights, as an entry records it: the intra-op thread count, the
    versions of torch and pytorch-metric-learning, and the instruction set of the CPU's kernels."""
    import pytorch_metric_learning

    return {
        "threads": recipe.train.threads,
        "versions": {
            "torch": str(torch.__version__),
            "pytorch_metric_learning": str(pytorch_metric_learning.__version__),
        },
        "cpu_capability": cpu_capability(),
    }


def _what_to_run(name: str) -> str:
    return (
        f"run `dmlkit pretrain {name}` (or `dmlkit pretrain CONFIG` with this config) to build it; "
        "`dmlkit train` and `dmlkit protocol` also build it on first use"
    )


def resolve_pretrained(model: ModelConfig, in_channels: int) -> ModelConfig:
    """``model`` with a pretrained *name* replaced by its checked cached weights file (else unchanged);
    ``resolve_pretrained_weights`` without the identity."""
    return resolve_pretrained_weights(model, in_channels)[0]


def resolve_pretrained_weights(model: ModelConfig, in_channels: int) -> tuple[ModelConfig, dict[str, str] | None]:
    """``(model with a pretrained name replaced by its checked cache file, the weights' identity)``.

    The identity is what a run records as ``environment.json``'s ``pretrained``: ``{"name", "checksum"}`` for a named
    backbone (the tensor checksum of the cache entry read and checked here, once), ``{"file", "sha256"}`` for a
    weights file, ``None`` for the backbone factory's published weights or none. A name does not tell the weights
    apart across machines: two pretrainings of one recipe on a GPU end on different weights (cuDNN's autotuner picks
    among convolution algorithms that sum in other orders), and a run folder moved from another machine was
    fine-tuned from that machine's entry. ``dmlkit.protocols.backbone_weights`` pairs runs only when these agree.

    Raises ``ValueError`` (what to run or to change) for an unknown name, a config whose backbone or
    input channels differ from the recipe's, and a missing or unusable cache entry.
    """
    name = model.pretrained
    if not isinstance(name, str):
        return model, None  # true / false: the backbone factory's published weights or none
    if not is_pretrained_name(name) and (Path(name).expanduser().is_file() or "/" in name or Path(name).suffix):
        file = Path(name).expanduser()  # a weights file: the backbone factory loads (and checks) it
        identity = {"file": name, "sha256": hashlib.sha256(file.read_bytes()).hexdigest()} if file.is_file() else None
        return model, identity  # a missing file: the backbone factory names it
    name = canonical_pretrained_name(name)  # an unknown name or a malformed seed raises here
    recipe = pretrained_recipe(name)
    if recipe.model.backbone != model.backbone:
        raise ValueError(
            f"pretrained backbone '{name}' is a {recipe.model.backbone}, but model.backbone is {model.backbone}; "
            f"set model.backbone: {recipe.model.backbone}, or another model.pretrained"
        )
    recipe_channels = getattr(DATASETS.get(recipe.data.name), "in_channels", in_channels)
    if recipe_channels != in_channels:
        raise ValueError(
            f"pretrained backbone '{name}' takes {recipe_channels}-channel images, but this dataset has "
            f"{in_channels}; pick a dataset with {recipe_channels} channel(s) or another model.pretrained"
        )
    path = pretrained_path(name)
    try:
        entry = read_pretrained(name, path)
    except PretrainedCacheError as err:
        raise ValueError(
            f"the cached pretrained backbone '{name}' is unusable: {err}; {_what_to_run(name)} again"
        ) from err
    if entry is None:
        raise ValueError(f"pretrained backbone '{name}' is not built yet (no {path}); {_what_to_run(name)}")
    if entry["backbone"] != model.backbone or entry["in_channels"] != in_channels:
        raise ValueError(
            f"'{path}' holds a {entry['backbone']} for {entry['in_channels']}-channel images, not a {model.backbone} "
            f"for {in_channels}; delete it and {_what_to_run(name)}"
        )
    return dataclasses.replace(model, pretrained=str(path)), {"name": name, "checksum": str(entry["checksum"])}
