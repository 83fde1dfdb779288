"""Our tuning settings, in one table: each read from ``hermes_maint:`` in $HERMES_HOME/config.yaml, and
overridden by its ``HERMES_MAINT_*`` environment variable (docs/configuration.md lists them, from this table).

An unset or empty value means the default; anything else must be a finite number in range, or the command
stops with a usage error (exit 2) naming where the value came from, the value and the accepted form, before
anything is written. A setting that is silently ignored would mislead at 3 a.m.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from maint.errors import UsageError


@dataclass(frozen=True)
class Setting:
    key: str  # under hermes_maint: in config.yaml
    env: str
    default: float
    low: float
    high: float
    unit: str
    help: str
    low_open: bool = True  # the low bound itself is refused


SETTINGS: dict[str, Setting] = {s.key: s for s in (
    Setting("batch_ms", "HERMES_MAINT_BATCH_MS", 150, 0, 60_000, "milliseconds",
            "Lock time each write transaction of ours aims at; Hermes's writers wait at most about this long."),
    Setting("busy_ms", "HERMES_MAINT_BUSY_MS", 5000, 0, 3_600_000, "milliseconds",
            "How long we wait for a write lock another process holds before giving up (nothing changed).",
            low_open=False),
    Setting("max_unit_s", "HERMES_MAINT_MAX_UNIT_S", 1.0, 0, 86400, "seconds",
            "A conversation whose delete would hold the lock longer is kept while other processes have the "
            "store open (prune it with Hermes stopped); Hermes gives up on a write after about 1.3 s."),
    Setting("write_limit_s", "HERMES_MAINT_WRITE_LIMIT_S", 300.0, 0, 86400, "seconds",
            "The longest one write transaction of ours may run: a statement still running then (a trigger in the "
            "store that never ends) is stopped and its transaction rolled back, so the write lock is never held "
            "for good. An index rebuild (repair-fts --apply) is not bounded."),
    Setting("http_timeout_s", "HERMES_MAINT_HTTP_TIMEOUT_S", 60.0, 0, 3600, "seconds",
            "Connect, read and write timeout of each request to the Hugging Face Hub (export --upload)."),
    Setting("http_deadline_s", "HERMES_MAINT_HTTP_DEADLINE_S", 900.0, 0, 86400, "seconds",
            "Total time one request to the Hub may take, however slowly it trickles."),
    Setting("import_record_mb", "HERMES_MAINT_IMPORT_RECORD_MB", 256, 0, 4096, "MiB",
            "The largest session record (one line of a jsonl export) `import` reads; a longer line is refused, "
            "naming it (parsing a record takes about four times its size in memory)."),
    Setting("import_future_days", "HERMES_MAINT_IMPORT_FUTURE_DAYS", 1.0, 0, 36_500, "days",
            "How far past now a session's or message's time may be for `import` (a host clock that ran ahead); a "
            "later one is refused, naming it. Raise it to import back what such a clock wrote."),
    Setting("stop_grace_s", "HERMES_MAINT_STOP_GRACE_S", 30.0, 0, 86400, "seconds",
            "After SIGTERM or SIGINT, how long `jobs run` lets the running job stop before it exits anyway.",
            low_open=False),
)}

_config_section: list[Any] = []  # the hermes_maint mapping of $HERMES_HOME/config.yaml, read once


def _section() -> Any:
    if not _config_section:
        from maint.config import load_config

        _config_section.append(load_config().maint_section)
    return _config_section[0]


def value(key: str) -> float:
    """The setting *key*: its environment variable, else ``hermes_maint.<key>``, else the default."""
    s = SETTINGS[key]
    raw = os.environ.get(s.env)
    if raw is not None and raw.strip():
        return _checked(s, raw, f"{s.env}={raw!r}")
    section = _section()
    configured = section.get(key) if isinstance(section, dict) else None
    if configured is None or (isinstance(configured, str) and not configured.strip()):
        return float(s.default)
    return _checked(s, configured, f"hermes_maint.{key}: {configured!r}")


def _checked(s: Setting, raw: Any, shown: str) -> float:
    if isinstance(raw, bool):
        number = math.nan
    elif isinstance(raw, (int, float)):
        number = float(raw)
    elif isinstance(raw, str) and raw.isascii():
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
    else:
        number = math.nan
    too_low = number <= s.low if s.low_open else number < s.low
    if not math.isfinite(number) or too_low or number > s.high:
        floor = f"above {_plain(s.low)}" if s.low_open else f"from {_plain(s.low)}"
        raise UsageError(f"{shown}: expected a number of {s.unit} {floor}, at most {_plain(s.high)}")
    return number


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def table() -> str:
    """The settings as a Markdown table (docs/configuration.md is checked against it)."""
    rows = ["| `hermes_maint:` key | environment variable | default | accepted | what it sets |",
            "| --- | --- | ---: | --- | --- |"]
    for s in SETTINGS.values():
        floor = f"> {_plain(s.low)}" if s.low_open else f">= {_plain(s.low)}"
        rows.append(f"| `{s.key}` | `{s.env}` | {_plain(s.default)} | {floor}, <= {_plain(s.high)} {s.unit} | "
                    f"{s.help} |")
    return "\n".join(rows)
