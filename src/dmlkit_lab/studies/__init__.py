"""Controlled studies of the thesis, each one command that writes its table and figure.

- ``gsp_synthetic``: GAP vs GSP (with and without the zero-shot loss) on bags of trainable tokens (Sec. 5.3.1);
- ``collage``: GAP vs GSP vs GSP + L_ZS on glyph collages, with pooling-weight heat-maps (Sec. 5.3.2);
- ``pcc``: GAP as a convex combination of greedy k-centre prototypes, error vs covering radius (Ch. 4);
- ``sft_unbalanced``: see its module docstring.

``collage`` trains with the ``Trainer`` (one run folder per variant and seed); ``gsp_synthetic`` and
``sft_unbalanced`` train small models with no run folder, in the one bare loop of ``loop``, and write their
``table.md`` with ``tables``; their command lines are ``gsp_synthetic_cli`` and ``sft_unbalanced_cli``.

Run them as ``dmlkit study NAME --out DIR``, or ``python -m dmlkit_lab.studies.MODULE --out DIR`` with MODULE the
module that has ``main`` (``collage``, ``pcc``, ``gsp_zero_shot``, ``gsp_synthetic_cli``, ``sft_unbalanced_cli``).
"""
