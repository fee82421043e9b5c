"""The lab's ``dmlkit.plugins`` entry point: registers the lab's parts (testbed datasets, pretraining recipes)
into the library's registries."""

from __future__ import annotations
