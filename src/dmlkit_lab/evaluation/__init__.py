"""The lab's measures of an embedding: the SFT paper's geometry (``geometry``) and the prototype convex
combinations of the thesis' Ch. 4 (``pcc``). Formerly ``dmlkit.evaluation.geometry`` / ``dmlkit.evaluation.pcc``;
their names are still reachable there, with a ``FutureWarning``, through the lab's plug-in."""
