"""The lab's testbed datasets, registered into ``dmlkit.data``'s registry by the lab's plug-in.

Built on the library's embedded ``glyphs`` dataset (``dmlkit.data.datasets.glyphs`` and its rendering, selection
and cache, which stay in the library because ``make run`` trains on them):

- ``glyph_testbed``: ``glyphs_testbed``, the glyph classes cut into pretraining and DML classes;
- ``font_glyphs``: its DML classes in Debian's font faces (``font_faces``, ``font_glyph_table``,
  ``font_glyph_cache``);
- ``collage``: ``glyph_collage``, the thesis' collage study built from the glyphs.
"""

from __future__ import annotations

from dmlkit.data.catalog import DATASETS
from dmlkit_lab.datasets.collage import GlyphCollageDataset
from dmlkit_lab.datasets.font_glyphs import FontGlyphsDataset
from dmlkit_lab.datasets.glyph_testbed import GlyphsTestbedDataset

__all__ = ["FontGlyphsDataset", "GlyphCollageDataset", "GlyphsTestbedDataset", "LAB_DATASETS", "register_datasets"]

LAB_DATASETS = {
    "glyphs_testbed": GlyphsTestbedDataset,
    "glyph_collage": GlyphCollageDataset,
    "font_glyphs": FontGlyphsDataset,
}


def register_datasets() -> None:
    """Register the testbeds under the names configs use (the lab's plug-in calls it once per process)."""
    for name, cls in LAB_DATASETS.items():
        DATASETS.register(name, cls)
