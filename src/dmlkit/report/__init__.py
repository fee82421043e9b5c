"""Reports on finished runs: an HTML page comparing run folders, and nearest-neighbour galleries.

- ``build_report(run_dirs, out)``: the self-contained page of ``dmlkit report`` (``html``);
- ``run_gallery(run_dir, out)``: the gallery of ``dmlkit gallery`` (``gallery``);
- ``write_projector(run_dir, split)``: a split's embeddings for TensorBoard's projector, ``dmlkit tensorboard`` (``projector``);
- ``load_run`` / ``group_runs`` / ``config_differences``: reading and comparing run folders (``runs``);
- ``run_diagnostics(run_dir)``: ``dmlkit evaluate --diagnostics`` (``diagnostics``; the lab adds the SFT geometry).

The SFT geometry of run groups side by side (``dmlkit geometry``) is the lab's: ``dmlkit_lab.report.geometry_compare``.

This package sits beside ``protocols``: it reads run folders and rebuilds models
through ``engine``, and draws with ``viz``.
"""

from dmlkit.report.html import build_report, render_report
from dmlkit.report.runs import RunRecord, config_differences, flatten, group_runs, load_run, load_runs

__all__ = [
    "RunRecord",
    "build_report",
    "config_differences",
    "flatten",
    "group_runs",
    "load_run",
    "load_runs",
    "render_report",
    "run_gallery",
]


def __getattr__(name: str):
    # run_gallery imports the engine (torch models, datasets): only when asked for.
    if name == "run_gallery":
        from dmlkit.report.gallery import run_gallery

        return run_gallery
    raise AttributeError(name)
