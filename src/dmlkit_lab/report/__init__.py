"""The lab's reports on finished runs: the geometry of run groups side by side (``geometry_compare``, ``dmlkit
geometry``) and the geometry diagnostic of ``dmlkit evaluate --diagnostics`` (``diagnostics``)."""
