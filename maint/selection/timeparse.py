"""Parsing of the time and number values the filter flags accept."""

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


def parse_moment(flag: str, value: str, now: float | None = None) -> float:
    """An epoch time: durations and bare days count back from *now*; ISO values are local time.

    The result lies between 1970 and 9999: further back than the epoch or past year 9999 is a
    usage error naming the value, never an overflow deep inside a command.
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
        raise UsageError(f"{flag}: bad value {value!r} (expected {TIME_FORMS})") from None
    if not (math.isfinite(moment) and EARLIEST <= moment <= LATEST):
        raise UsageError(f"{flag}: {value!r} is out of range (expected a time between 1970 and 9999: {TIME_FORMS})")
    return moment


MAX_COUNT = 2**62  # SQLite's LIMIT takes a signed 64-bit integer


def parse_count(flag: str, value: str | int) -> int:
    text = str(value).strip()
    if not re.fullmatch(r"[0-9]+", text) or int(text) > MAX_COUNT:
        raise UsageError(f"{flag}: bad value {value!r} (expected a whole number from 0 to {MAX_COUNT})")
    return int(text)


def parse_amount(flag: str, value: str | float) -> float:
    try:
        amount = float(str(value).strip())
    except ValueError:
        raise UsageError(f"{flag}: bad value {value!r} (expected a number of US dollars >= 0, e.g. 0.05)") from None
    if not math.isfinite(amount) or amount < 0:
        raise UsageError(f"{flag}: bad value {value!r} (expected a number of US dollars >= 0, e.g. 0.05)")
    return amount
