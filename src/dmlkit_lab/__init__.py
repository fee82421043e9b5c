"""dmlkit_lab: what produces this project's own tables, on top of the dmlkit library.

The library (``dmlkit``) is what a user imports and runs: components, engine, evaluation, search, serving and
the tools train, evaluate, protocols, tune, export. The lab is what this project's results come from: the
controlled studies, the testbed datasets, the pretraining recipes, the geometry and PCC studies, and their
plots and tables. The lab imports the library; the library never imports the lab (``tests/test_architecture.py``).

The library reaches the lab only through its plug-in mechanism (``dmlkit.plugins``): the installed package
declares ``dmlkit_lab.plugin`` as a ``dmlkit.plugins`` entry point, which registers the testbed datasets and the
pretraining recipes, and its commands (``dmlkit study``, ``dmlkit geometry``) as ``dmlkit.commands`` entry
points (``dmlkit_lab.commands``). A config that names ``data.name: font_glyphs`` or
``model.pretrained: glyphs-resnet20-brief`` therefore resolves as before (docs/architecture.md, "Library and lab").
"""
