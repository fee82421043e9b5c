"""The type tests that argument checks share: is a value an integer, is it a real number (``bool`` is neither).

Python's ``bool`` is a subclass of ``int``, so ``isinstance(True, int)`` holds and every check of an integer
argument must exclude it first; these helpers say it once. Each check still writes its own message, which names
the argument and the fix.
"""

from __future__ import annotations


__all__ = ["is_int", "is_real"]


def is_int(value: object, numpy: bool = False) -> bool:
    """``value`` is an ``int`` (with ``numpy``, also a numpy integer), not a ``bool``."""
    if isinstance(value, bool):
        return False
    if numpy:
        import numpy as np

        return isinstance(value, (int, np.integer))
    return isinstance(value, int)


def is_real(value: object) -> bool:
    """``value`` is an ``int`` or ``float`` (not a ``bool``); finiteness and range are the caller's to check."""
    return not isinstance(value, bool) and isinstance(value, (int, float))
