"""The seeding helpers under the data package's name: ``derive_seed``, ``make_generator``, ``check_seed``.

They live in ``dmlkit.seeding`` (models and methods seed too, and must not load the datasets to do so);
this module re-exports them for the data modules and for code that imports them from here.
"""

from __future__ import annotations

from dmlkit.seeding import check_seed, derive_seed, make_generator

__all__ = ["check_seed", "derive_seed", "make_generator"]
