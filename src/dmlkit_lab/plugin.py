"""The lab's ``dmlkit.plugins`` entry point: registers the testbed datasets, the pretraining recipes and the
geometry diagnostic, and offers the names that moved here from ``dmlkit.evaluation``.

The library imports the modules of its installed plug-ins once per process, before a config is read and when a
registry (datasets, pretrained recipes, run diagnostics) is asked for a name it does not hold or for its list
(``dmlkit.plugins``). Configs that name ``data.name: glyphs_testbed`` / ``font_glyphs`` / ``glyph_collage`` or
``model.pretrained: glyphs-resnet20[-brief]`` thereby resolve without the library importing the lab.
"""

from __future__ import annotations

from dmlkit.moved import provide_moved
from dmlkit_lab.datasets import register_datasets
from dmlkit_lab.evaluation import geometry, pcc
from dmlkit_lab.recipes import register_recipes
from dmlkit_lab.report.diagnostics import register_diagnostics

register_datasets()  # first: a recipe names its dataset
register_recipes()
register_diagnostics()
for _module in (geometry, pcc):
    for _name in _module.__all__:
        provide_moved("dmlkit.evaluation", _name, getattr(_module, _name))
