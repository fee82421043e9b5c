"""The lab's ``dmlkit.plugins`` entry point: registers the testbed datasets and the pretraining recipes.

The library imports the modules of its installed plug-ins once per process, before a config is read and when a
registry (datasets, pretrained recipes) is asked for a name it does not hold (``dmlkit.plugins``). Configs that
name ``data.name: glyphs_testbed`` / ``font_glyphs`` / ``glyph_collage`` or ``model.pretrained:
glyphs-resnet20[-brief]`` thereby resolve without the library importing the lab.
"""

from __future__ import annotations

from dmlkit_lab.datasets import register_datasets
from dmlkit_lab.recipes import register_recipes

register_datasets()  # first: a recipe names its dataset
register_recipes()
