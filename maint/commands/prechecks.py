"""What a command refuses from its arguments alone, before any store is opened.

The job-file check calls these on a dry parse, so a job that can never run is refused when the
loop starts instead of failing at every run. Each is the check the command's request makes when
it is built.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable


def _archive(p: dict[str, Any]) -> None:
    from maint.ops.archive import ArchiveRequest

    ArchiveRequest(p["filters"], include_open=p["include_open"], idle=p["idle"])


# Each command's check, fed from a dry parse's parameters (``filters`` already parsed).
BY_COMMAND: dict[str, Callable[[dict[str, Any]], None]] = {
    "archive": _archive,
}
