"""Figures as a person reads them, the same in every report, prompt and finding."""

from __future__ import annotations

from maint.store.timestamps import local


def fmt_bytes(n: float) -> str:
    """Binary units, named as such: 1536 -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_time(ts: float | None) -> str:
    """A stored time in local time, to the minute; ``-`` for none."""
    if ts is None:
        return "-"
    return local("%Y-%m-%d %H:%M", ts)
