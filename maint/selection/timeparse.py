"""Parsing of the time and number values the filter flags accept.

Each ``read_*`` function returns the value or raises ``ValueError`` with a text that names the
value and the accepted form; the CLI's parameter types and :func:`maint.selection.filters.parse_filters`
put the flag in front of it.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime

from maint.errors import UsageError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_NUMBER = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")
TIME_FORMS = "a duration (30m, 5h, 2d, 1w), a number of days (30) or an ISO date/time (2026-07-05, 2026-07-05 14:30)"


# Moments a filter can name: from the Unix epoch to the end of year 9999 (what datetime can print).
EARLIEST, LATEST = 0.0, 253402300799.0


def read_moment(value: str, now: float | None = None) -> float:
    """An epoch time: durations and bare days count back from *now*; ISO values are local time.

    The result lies between 1970 and 9999: further back than the epoch or past year 9999 is
    refused naming the value, never an overflow deep inside a command. Every refusal here is a
    ``ValueError`` whose text names the value and the accepted forms.
    """
    now = time.time() if now is None else now
    text = str(value).strip()
    try:
        m = _DURATION.match(text)
        if m:
            moment = now - float(m.group(1)) * UNITS[m.group(2).lower()]
        elif _NUMBER.match(text):
            moment = now - float(text) * 86400
        else:
            dt = datetime.fromisoformat(text)
            if dt.tzinfo is None:
                dt = dt.astimezone()  # interpret as local time
            moment = dt.timestamp()
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"bad value {value!r} (expected {TIME_FORMS})") from None
    if not (math.isfinite(moment) and EARLIEST <= moment <= LATEST):
        raise ValueError(f"{value!r} is out of range (expected a time between 1970 and 9999: {TIME_FORMS})")
    return moment


MAX_COUNT = 2**62  # SQLite's LIMIT takes a signed 64-bit integer


def read_count(value: str | int, low: int = 0, high: int = MAX_COUNT) -> int:
    """A whole number written in digits, from *low* to *high*."""
    text = str(value).strip()
    if not re.fullmatch(r"[0-9]+", text) or not low <= int(text) <= high:
        raise ValueError(f"bad value {value!r} (expected a whole number from {low} to {high})")
    return int(text)


def read_amount(value: str | float) -> float:
    """A number of US dollars, 0 or more."""
    try:
        amount = float(str(value).strip())
    except ValueError:
        amount = math.nan
    if not math.isfinite(amount) or amount < 0:
        raise ValueError(f"bad value {value!r} (expected a number of US dollars >= 0, e.g. 0.05)")
    return amount


def parse_moment(flag: str, value: str, now: float | None = None) -> float:
    """:func:`read_moment`, refused as a usage error naming *flag*."""
    try:
        return read_moment(value, now)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
