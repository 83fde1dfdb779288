"""What every command shares: store options, filter options, errors, output, confirmation.

The option sets are added to a command's signature by decorators, so a filter
flag is declared once here and prune, archive and export all take it the same way.
"""

import functools
import inspect
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import apsw
import typer

from maint.errors import EXIT_FAILED, MaintError, NotATerminal
from maint.store.targets import StoreTarget, resolve_targets

PROG = "hermes-maint"

# name -> (flag, help)
FILTER_FLAGS: dict[str, tuple[str, str]] = {
    "older_than": ("--older-than", "Last activity at least this old: 30m, 5h, 2d, 1w, days, or ISO time."),
    "newer_than": ("--newer-than", "Last activity at most this old (same forms)."),
    "before": ("--before", "Started before this time (duration back from now, days, or ISO time)."),
    "after": ("--after", "Started at or after this time."),
    "source": ("--source", "Platform, exact (cli, telegram, cron ...)."),
    "provider": ("--provider", "Billing provider, exact (case-insensitive)."),
    "end_reason": ("--end-reason", "End reason, exact."),
    "user": ("--user", "Messaging user id, exact."),
    "chat_id": ("--chat-id", "Chat id, exact."),
    "chat_type": ("--chat-type", "Chat type, exact (dm, group ...)."),
    "title": ("--title", "Title substring, case-insensitive."),
    "model": ("--model", "Model substring, case-insensitive."),
    "branch": ("--branch", "Git branch substring, case-insensitive."),
    "cwd": ("--cwd", "Working directory prefix (~ expanded; /a/b matches /a/b/c, not /a/bc)."),
    "min_messages": ("--min-messages", "At least this many messages."),
    "max_messages": ("--max-messages", "At most this many messages."),
    "min_tokens": ("--min-tokens", "At least this many tokens (input + output)."),
    "max_tokens": ("--max-tokens", "At most this many tokens (input + output)."),
    "min_cost": ("--min-cost", "Cost at least this many USD (actual, else estimated)."),
    "max_cost": ("--max-cost", "Cost at most this many USD (actual, else estimated)."),
    "min_tool_calls": ("--min-tool-calls", "At least this many tool calls."),
    "max_tool_calls": ("--max-tool-calls", "At most this many tool calls."),
}

TARGET_PARAMS = {
    "db": (Optional[Path], typer.Option("--db", help="Path to a state.db (overrides --profile).")),
    "profile": (Optional[str], typer.Option("--profile", help="Profile name: $HERMES_HOME/profiles/NAME/state.db.")),
    "all_profiles": (bool, typer.Option("--all-profiles", help="Run over the default store and every profile's.")),
}

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object (JSON lines with --all-profiles).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Show what would change; write nothing.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Skip the confirmation prompt.")]


def _extend_signature(fn: Callable, extra: list[inspect.Parameter], bucket: str) -> Callable:
    """Replace parameter *bucket* of *fn* by the *extra* options, collected back into a dict."""
    sig = inspect.signature(fn)
    names = {p.name for p in extra}
    params = [p for p in sig.parameters.values() if p.name != bucket]
    new_sig = sig.replace(parameters=params + extra)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs[bucket] = {n: kwargs.pop(n) for n in list(kwargs) if n in names}
        return fn(*args, **kwargs)

    wrapper.__signature__ = new_sig  # type: ignore[attr-defined]
    return wrapper


def filter_options(fn: Callable) -> Callable:
    """Adds every shared filter flag; the command receives them as ``filters: dict``."""
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=Annotated[str | None, typer.Option(flag, help=help_, rich_help_panel="Filters")])
        for name, (flag, help_) in FILTER_FLAGS.items()
    ]
    return _extend_signature(fn, extra, "filters")


def target_options(fn: Callable) -> Callable:
    """Adds --db/--profile/--all-profiles; the command receives them as ``targets: dict`` (see resolve)."""
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=(False if t is bool else None),
                          annotation=Annotated[t, opt])
        for name, (t, opt) in TARGET_PARAMS.items()
    ]
    return _extend_signature(fn, extra, "targets")


def resolve(raw: dict) -> list[StoreTarget]:
    return resolve_targets(raw.get("db"), raw.get("profile"), bool(raw.get("all_profiles")))


def fail(message: str, code: int) -> None:
    typer.echo(f"{PROG}: error: {message}", err=True)
    raise typer.Exit(code)


def handle_errors(fn: Callable) -> Callable:
    """Known failures become one line on stderr and their exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MaintError as exc:
            fail(str(exc), exc.exit_code)
        except apsw.FullError:
            fail("disk full while writing the store; the transaction was rolled back, the store is intact",
                 EXIT_FAILED)
        except apsw.Error as exc:
            fail(f"SQLite error: {exc}", EXIT_FAILED)
        except OSError as exc:
            fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "), EXIT_FAILED)
        except KeyboardInterrupt:
            fail("interrupted; finished transactions are committed, the store is consistent", 130)

    return wrapper


def command(fn: Callable) -> Callable:
    """Standard stack for a store command: error handling, then the target options."""
    return target_options(handle_errors(fn))


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, default=str, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def confirm_or_refuse(yes: bool, question: str, summary: list[str]) -> None:
    """Destructive step gate: --yes, or a terminal answer; a pipe without --yes is refused (exit 2)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise NotATerminal("refusing to change the store without confirmation: stdin is not a terminal "
                           "(pass --yes to proceed, or --dry-run to preview)")
    for line in summary:
        typer.echo(line)
    if not typer.confirm(question, default=False):
        typer.echo("Aborted; nothing was changed.")
        raise typer.Exit(EXIT_FAILED)


@contextmanager
def progress(total: int, label: str, quiet: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on a terminal's stderr; silent in a pipe or with --json."""
    if quiet or total <= 0 or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def for_each_target(targets: list[StoreTarget], as_json: bool, run: Callable[[StoreTarget], dict],
                    render: Callable[[dict], None]) -> None:
    """Run a command per store; with several stores each report carries its profile."""
    for target in targets:
        report = run(target)
        report.setdefault("store", str(target.path))
        report["profile"] = target.profile
        if as_json:
            emit_json(report)
        else:
            if len(targets) > 1:
                typer.echo(f"== {target.profile or 'default'}: {target.path}")
            render(report)
