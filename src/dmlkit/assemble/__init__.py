"""The assembly layer: config -> the parts of a run, and the one loader of a finished run.

Above it: the command line, protocols, reports, search and studies. Below it: ``methods``
(the training-side plug-ins), ``engine`` (the loop, which knows no method) and the components.
"""

from dmlkit.assemble.build import (
    BuiltModel,
    Splits,
    build_model,
    build_run,
    build_splits,
    build_trainer,
    default_run_dir,
    reference_dataset,
    resume_trainer,
    run_split,
)
from dmlkit.assemble.eval_model import EMBEDDING_SOURCES, ClassifierOutputs, evaluation_model, find_classifier
from dmlkit.assemble.finished_run import LoadedRun, embed_run, evaluate_run, load_finished_run, resolve_checkpoint

__all__ = [
    "BuiltModel",
    "ClassifierOutputs",
    "EMBEDDING_SOURCES",
    "LoadedRun",
    "Splits",
    "build_model",
    "build_run",
    "build_splits",
    "build_trainer",
    "default_run_dir",
    "embed_run",
    "evaluate_run",
    "evaluation_model",
    "find_classifier",
    "load_finished_run",
    "reference_dataset",
    "resolve_checkpoint",
    "resume_trainer",
    "run_split",
]
