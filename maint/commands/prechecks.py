"""What a command refuses from its arguments alone, before any store is opened.

The command calls its check first; the job-file check calls the same one on a dry parse, so a job
that can never run is refused when the loop starts instead of failing at every run.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from maint.errors import UsageError
from maint.selection.filters import Filters


def archive(filters: Filters, idle: bool, include_open: bool) -> None:
    if idle:
        if not filters.is_empty or include_open:
            raise UsageError("--idle is a selection of its own (idle for sessions.auto_archive_days, open ones "
                             "included); drop the filters and --include-open")
    elif filters.is_empty:
        raise UsageError("archive needs at least one filter (refusing to archive the whole history); "
                         "e.g. --newer-than 5h or --title 'dry run'")


# Each command's check, fed from a dry parse's parameters (``filters`` already parsed).
BY_COMMAND: dict[str, Callable[[dict[str, Any]], None]] = {
    "archive": lambda p: archive(p["filters"], p["idle"], p["include_open"]),
}
