"""How commands talk to the operator: JSON lines, human figures, the confirmation gate, progress."""

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer

from maint.errors import Declined, Interrupted, NotATerminal
from maint.store.sqlutil import write_json
from maint.store.timestamps import local


def emit_json(obj: Any) -> None:
    write_json(obj, sys.stdout.write)
    sys.stdout.write("\n")
    sys.stdout.flush()


def printable(text: object) -> str:
    """Stored text as one safe terminal line: escape sequences and line breaks shown, never obeyed."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def fit(text: str, width: int) -> str:
    """*text* cut and padded to *width* terminal columns: wide (CJK) characters take two."""
    from unicodedata import east_asian_width

    out, used = [], 0
    for ch in text:
        w = 2 if east_asian_width(ch) in ("W", "F") else 1
        if used + w > width:
            break
        out.append(ch)
        used += w
    return "".join(out) + " " * (width - used)


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return local("%Y-%m-%d %H:%M", ts)


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def confirm_or_refuse(yes: bool, question: str, summary: list[str]) -> None:
    """Destructive step gate: --yes, or a terminal answer; a pipe without --yes is refused (exit 2).

    "no" raises :class:`Declined` (exit 1); Ctrl-C or Ctrl-D at the prompt raises
    :class:`Interrupted` (exit 130). Either way nothing was changed.
    """
    if yes:
        return
    if not sys.stdin.isatty():
        raise NotATerminal("refusing to change the store without confirmation: stdin is not a terminal "
                           "(pass --yes to proceed, or --dry-run to preview)")
    for line in summary:
        typer.echo(printable(line))  # ids and titles are stored text: shown, never obeyed
    try:
        agreed = typer.confirm(question, default=False)
    except (KeyboardInterrupt, EOFError, typer.Abort):
        raise Interrupted("aborted at the prompt; nothing was changed") from None
    if not agreed:
        raise Declined("declined at the prompt; nothing was changed")


@contextmanager
def progress(total: int, label: str, quiet: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on a terminal's stderr; silent in a pipe, with --json, and under the scheduler."""
    if quiet or total <= 0 or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
