"""The kinds of value options and arguments take: click parameter types that check as they parse.

A bad value is refused while click parses the command line, before anything runs: one line that
names the flag, the value and the accepted form, exit 2 (the flag is put in front by
:func:`maint.commands.runner.usage_message`). ``--help`` shows each kind by its name (INTEGER,
TIME, USD, PATH ...). The readers are the library's own (:mod:`maint.selection.timeparse`), so a
job file's dry parse and a library caller refuse the same values with the same words.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import click

from maint.selection.filters import read_value
from maint.selection.timeparse import MAX_COUNT, read_count


def now(ctx: click.Context | None) -> float:
    """The instant every time on one command line counts back from."""
    if ctx is None:
        return time.time()
    return ctx.find_root().meta.setdefault("hermes_maint.now", time.time())


class Checked(click.ParamType):
    """A value checked by a reader that raises ``ValueError`` naming the value and the accepted form."""

    def read(self, text: str, ctx: click.Context | None) -> Any:
        raise NotImplementedError

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):  # a default, already of its kind
            return value
        try:
            return self.read(value, ctx)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class WholeNumber(Checked):
    name = "integer"

    def __init__(self, low: int = 0, high: int = MAX_COUNT, form: str | None = None) -> None:
        self.low, self.high, self.form = low, high, form

    def read(self, text: str, ctx: click.Context | None) -> int:
        try:
            return read_count(text, self.low, self.high)
        except ValueError:
            if self.form is None:
                raise
            raise ValueError(f"bad value {text!r} (expected {self.form})") from None


class Seconds(Checked):
    name = "seconds"

    def read(self, text: str, ctx: click.Context | None) -> float:
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"bad value {text!r} (expected a number of seconds >= 0, e.g. 900)")
        return seconds


class Text(Checked):
    """Text that must not be empty (nor only blanks)."""

    name = "text"
    empty = "empty value"

    def __init__(self, expected: str = "a non-empty string") -> None:
        self.expected = expected

    def read(self, text: str, ctx: click.Context | None) -> Any:
        if not text.strip():
            raise ValueError(f"{self.empty} (expected {self.expected})")
        return text


class FilePath(Text):
    """A path (``~`` expanded) that must not be empty; whether it must exist is the command's to say."""

    name = "path"
    empty = "empty path"

    def read(self, text: str, ctx: click.Context | None) -> Path:
        return Path(super().read(text, ctx)).expanduser()


class Filter(Checked):
    """One filter flag's value, read by the selection engine (:func:`maint.selection.filters.read_value`).

    Every time of one command line counts back from the same instant, so ``--newer-than 1h --older-than 1h``
    is a window of one moment, not an empty one.
    """

    NAMES = {"time": "time", "count": "integer", "usd": "usd", "text": "text", "dir": "dir"}

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = self.NAMES[kind]

    def read(self, text: str, ctx: click.Context | None) -> Any:
        return read_value(self.kind, text, now(ctx))
