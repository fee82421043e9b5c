"""The shared argument checks (dmlkit.validation): one message format naming the key, the range, the value and
the hint; ``bool`` is no number; a bound that is open excludes its end."""

from __future__ import annotations

import math

import pytest

from dmlkit.validation import check_int, check_real


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: check_int("a.n", 0, 1), "a.n must be a positive int, got 0"),
        (lambda: check_int("a.n", 1, 2), "a.n must be an int >= 2, got 1"),
        (lambda: check_int("a.n", True, 0), "a.n must be an int >= 0, got True"),
        (lambda: check_int("a.n", 1.0, 0), "a.n must be an int >= 0, got 1.0"),
        (lambda: check_int("a.n", 9, high=8), "a.n must be an int <= 8, got 9"),
        (lambda: check_int("a.n", 5, 0, 4, hint="a.k=5"), "a.n must lie in [0, 4] (an int; a.k=5), got 5"),
        (lambda: check_int("a.n", 0, 1, 2**40), "a.n must lie in [1, 2**40] (an int), got 0"),
        (
            lambda: check_int("a.n", 1, 2, none=True, hint="per class"),
            "a.n must be an int >= 2 or null (per class), got 1",
        ),
        (lambda: check_real("a.x", -1, 0, hint="usual 0.2"), "a.x must be a finite number >= 0 (usual 0.2), got -1"),
        (lambda: check_real("a.x", 0.0, 0, low_open=True), "a.x must be a finite number > 0, got 0.0"),
        (lambda: check_real("a.x", math.inf, 0), "a.x must be a finite number >= 0, got inf"),
        (lambda: check_real("a.x", math.nan), "a.x must be a finite number, got nan"),
        (lambda: check_real("a.x", False, 0), "a.x must be a finite number >= 0, got False"),
        (lambda: check_real("a.x", 1, 0, 1, high_open=True), "a.x must lie in [0, 1) (a finite number), got 1"),
        (lambda: check_real("a.x", 0, 0, 1, low_open=True), "a.x must lie in (0, 1] (a finite number), got 0"),
        (lambda: check_real("a.x", 1.5, high=1, high_open=True), "a.x must be a finite number < 1, got 1.5"),
    ],
)
def test_a_value_out_of_range_is_named_with_its_range(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == message


def test_values_in_range_and_allowed_nulls_pass():
    check_int("a.n", 1, 1, 1)
    check_int("a.n", None, 1, none=True)
    check_real("a.x", 0, 0, 1, high_open=True)
    check_real("a.x", 1, 0, 1, low_open=True)
    check_real("a.x", None, 0, none=True)
    with pytest.raises(ValueError, match="got None"):
        check_real("a.x", None, 0)
