"""Your own components on the command line: the modules a config imports before its names are resolved.

A loss, pooling, dataset or method registered from your own code (docs/extending.md) is known to the
registries only once that code has run. A config names that code in ``imports`` (``--import`` on
``dmlkit train`` adds to it)::

    imports: [my_project.dml_parts, plugins/toy.py]

Each entry is a module on ``sys.path`` (the current folder included, as ``python -m`` has it) or the path
of a ``.py`` file; ``load_config`` imports them before anything is built, and writes file paths into the
resolved config as absolute paths, so the run's saved ``config.yaml`` brings them back for ``--resume``,
``evaluate``, ``gallery``, ``search`` and ``report`` from any folder. A module is imported once per process
(registering a name twice is an error of the registries).

An installed package can instead declare its modules as entry points of the group ``dmlkit.plugins``
(``[project.entry-points."dmlkit.plugins"] my_parts = "my_project.dml_parts"`` in its pyproject.toml);
``load_config`` imports every one of them, once per process, before the config's own ``imports``.
Code run from a source tree that is not installed (``PYTHONPATH=src``, as on a machine without a package index)
has no entry points: ``DMLKIT_PLUGINS=module[,module...]`` names the modules to import in their place.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["ENTRY_POINT_GROUP", "import_entry_point_plugins", "import_plugins", "normalize_imports"]

ENTRY_POINT_GROUP = "dmlkit.plugins"
PLUGINS_ENV = "DMLKIT_PLUGINS"
_entry_points_done = False


def _is_file_entry(entry: str) -> bool:
    return entry.endswith(".py") or "/" in entry or os.sep in entry


def normalize_imports(entries: object, base_dir: str | Path | None = None) -> list[str]:
    """``imports`` checked (a list of non-empty strings) with file entries made absolute: the current folder
    first, then ``base_dir`` (the config file's folder)."""
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, str) and e.strip() for e in entries):
        raise ValueError(
            f"imports must be a list of module names or .py paths, e.g. [my_project.parts, plugins/toy.py]; "
            f"got {entries!r}"
        )
    out = []
    for entry in entries:
        if _is_file_entry(entry):
            candidates = [Path(entry).expanduser()] + ([Path(base_dir) / entry] if base_dir is not None else [])
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                raise ValueError(
                    f"imports: no such file '{entry}' (looked in {', '.join(str(c.parent.resolve()) for c in candidates)}); "
                    "give the path of a .py file or a module name on PYTHONPATH"
                )
            entry = str(found.resolve())
        out.append(entry)
    return out


def _import_file(path: str) -> None:
    module_name = "dmlkit_plugin_" + "".join(c if c.isalnum() else "_" for c in path)
    if module_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise


def import_plugins(entries: Sequence[str]) -> None:
    """Import every entry of a normalised ``imports`` list (once per process); ``ValueError`` naming a failure."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # a console script's sys.path lacks the current folder
    for entry in entries:
        try:
            _import_file(entry) if _is_file_entry(entry) else importlib.import_module(entry)
        except ValueError:
            raise
        except Exception as err:
            raise ValueError(
                f"imports: '{entry}' failed to import ({type(err).__name__}: {err}); fix the module or "
                "remove it from imports"
            ) from err


def import_entry_point_plugins() -> None:
    """Import the modules that installed packages declare in the ``dmlkit.plugins`` entry-point group (once)."""
    global _entry_points_done
    if _entry_points_done:
        return
    _entry_points_done = True
    from importlib.metadata import entry_points

    for name in filter(None, (part.strip() for part in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ValueError(
                f"{PLUGINS_ENV} names the module '{name}', which does not import ({err}); "
                "fix the name or the PYTHONPATH"
            ) from err
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as err:
            raise ValueError(
                f"the dmlkit plugin '{point.name}' ({point.value}) of an installed package failed to import "
                f"({type(err).__name__}: {err}); fix or uninstall that package"
            ) from err
