"""Printing the times a store holds, whatever they are.

Hermes writes seconds since the epoch as REAL, but REAL affinity keeps whatever a hand edit put
there: ±inf, NaN, years before 1 or after 9999, text. A report must show such a value, not fail on it.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any


def raw(ts: Any) -> str:
    """The stored value as it is (``-inf``, ``1e+17``, ``'2026-12-01'``) for a time that cannot be printed as one."""
    if isinstance(ts, float):
        return repr(ts) if math.isfinite(ts) and abs(ts) < 1e16 else f"{ts:g}"
    return str(ts)


def local(fmt: str, ts: Any) -> str:
    """``time.strftime(fmt)`` of *ts* in local time, or :func:`raw` when the platform cannot hold it."""
    try:
        return time.strftime(fmt, time.localtime(ts))
    except (OverflowError, ValueError, OSError, TypeError):
        return raw(ts)


def utc_iso(ts: Any) -> str:
    """ISO 8601 in UTC with milliseconds, or :func:`raw` when datetime cannot hold it."""
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, ValueError, OSError, TypeError):
        return raw(ts)


def finite_or_none(value: Any) -> Any:
    """A copy of *value* with every non-finite float as None: JSON has no infinity or NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value
