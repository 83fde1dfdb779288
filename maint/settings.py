"""Numbers the environment may set (``HERMES_MAINT_*``), read and refused the same way everywhere.

An unset or empty variable means the default; anything else must be a finite number in range, or
the command stops with a usage error (exit 2) naming the variable, the value and the accepted form,
before anything is written. A setting that is silently ignored would mislead at 3 a.m.
"""

from __future__ import annotations

import math
import os

from maint.errors import UsageError


def env_number(name: str, default: float, *, low: float, high: float, low_open: bool = True,
               unit: str = "seconds") -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw) if raw.isascii() else math.nan
    except ValueError:
        value = math.nan
    too_low = value <= low if low_open else value < low
    if not math.isfinite(value) or too_low or value > high:
        floor = f"above {_plain(low)}" if low_open else f"from {_plain(low)}"
        raise UsageError(f"{name}={raw!r}: expected a number of {unit} {floor}, at most {_plain(high)}")
    return value


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
