"""Numbers from outside (a client's JSON, a settings file), read before anything converts them.

JSON and TOML integers have no bound in Python, while ``float()``, ``math.isfinite`` and
``int(float)`` raise ``OverflowError`` past a double's range: a 400-digit integer in a request
must be answered as a wrong value, not as a crash. So a number is taken only when a double
holds it, and every caller compares it with its range before converting it.
"""

from __future__ import annotations

import math
import sys


def finite_number(value: object) -> int | float | None:
    """``value`` when it is a number a double holds (an int, not a bool, within a double's
    range; a finite float), else None. Comparing an int with a float is exact in Python, so the
    check itself converts nothing."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -sys.float_info.max <= value <= sys.float_info.max else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None
