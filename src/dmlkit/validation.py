"""The argument checks that components and config sections share: type tests and range checks.

Python's ``bool`` is a subclass of ``int``, so ``isinstance(True, int)`` holds and every check of an integer
argument must exclude it first; ``is_int`` and ``is_real`` say it once. ``check_int`` and ``check_real`` test a
value's type and range together and raise a ``ValueError`` in one format that names the key, the allowed range,
the value and, when given, a hint::

    train.lr must be a finite number > 0, got -1.0
    methods.zero_shot.weight must lie in [0, 1) (a finite number; lam of Eq. 5.2.5), got 1.0
"""

from __future__ import annotations

import math

__all__ = ["check_int", "check_real", "is_int", "is_real"]


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


def check_int(
    name: str,
    value: object,
    low: int | None = None,
    high: int | None = None,
    *,
    hint: str = "",
    none: bool = False,
) -> None:
    """Raise ``ValueError`` unless ``value`` is an ``int`` (not a ``bool``) with ``low <= value <= high`` (a bound
    that is None is not checked). ``none``: None is also allowed. ``hint``: what the value means, or a usual one."""
    if none and value is None:
        return
    if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        raise _range_error(name, value, "an int", low, high, False, False, hint, none)


def check_real(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    hint: str = "",
    none: bool = False,
) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite ``int`` or ``float`` (not a ``bool``) within the bounds:
    ``low <= value`` (``low < value`` with ``low_open``) and ``value <= high`` (``value < high`` with ``high_open``);
    a bound that is None is not checked. ``none``: None is also allowed. ``hint`` as for ``check_int``."""
    if none and value is None:
        return
    ok = is_real(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        raise _range_error(name, value, "a finite number", low, high, low_open, high_open, hint, none)


def _show(bound: float) -> str:
    """A bound as the message writes it: a large power of two as ``2**n``."""
    if is_int(bound) and bound >= 2**20 and bound & (bound - 1) == 0:
        return f"2**{bound.bit_length() - 1}"
    return str(bound)


def _range_error(
    name: str,
    value: object,
    kind: str,
    low: float | None,
    high: float | None,
    low_open: bool,
    high_open: bool,
    hint: str,
    none: bool,
) -> ValueError:
    notes = [hint] if hint else []
    if low is not None and high is not None:
        interval = f"{'(' if low_open else '['}{_show(low)}, {_show(high)}{')' if high_open else ']'}"
        want, notes = f"must lie in {interval}", [kind, *notes]
    elif kind == "an int" and low == 1:
        want = "must be a positive int"
    elif low is not None:
        want = f"must be {kind} {'>' if low_open else '>='} {_show(low)}"
    elif high is not None:
        want = f"must be {kind} {'<' if high_open else '<='} {_show(high)}"
    else:
        want = f"must be {kind}"
    notes_text = f" ({'; '.join(notes)})" if notes else ""
    return ValueError(f"{name} {want}{' or null' if none else ''}{notes_text}, got {value!r}")
