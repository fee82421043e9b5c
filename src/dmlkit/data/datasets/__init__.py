"""The datasets: each file is one dataset (or one base that several share), registered by name with
``@register_dataset`` (``registry``; ``dmlkit.data.catalog`` builds on it).

- ``base``: ``DMLDataset``, the interface every dataset follows, and ``check_dataset``;
- ``glyphs``: the embedded default dataset, built by ``glyph_render`` (fonts and rendering one font),
  ``glyph_select`` (which characters become classes) with ``glyph_duplicates`` (which renderings of a class
  are kept), ``glyph_table`` (the rendered table) and ``glyph_cache`` (its ``.npz`` cache);
  ``stored_images``: ``StoredGlyphImages``, the base of the glyph datasets' items (the lab's testbeds built on
  the glyphs, ``glyphs_testbed``, ``font_glyphs`` and ``glyph_collage``, are in ``dmlkit_lab.datasets``);
- ``array_images``: base of the small in-memory datasets ``mnist``, ``fashion_mnist``, ``cifar``;
- ``image_list``: base of the benchmarks read from their official annotation files ``cub``, ``cars``,
  ``sop``, ``inshop``, ``vehicleid``; ``image_folder``: a user's own images, one sub-folder per class,
  laid out flat or split (``folder_layout``), a flat folder's classes split by ``class_split``;
  ``unreadable``: finding and skipping corrupt image files;
- ``synthetic``: the token bags of the synthetic GSP study.

Import the datasets through ``dmlkit.data`` (``create_dataset``, ``GlyphsDataset``, ...).
"""
