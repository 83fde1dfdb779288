"""The options commands share, declared once so every command spells and explains them alike.

Store targets are three plain parameters in each command's signature (``db: DbOpt = None`` …),
resolved with :func:`maint.store.targets.resolve_targets`. The 22 filter flags of prune, archive
and export are added by :func:`filter_options`, which parses them at the edge and hands the
command one typed :class:`~maint.selection.filters.Filters` value.
"""

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

DbOpt = Annotated[Optional[str], typer.Option(
    "--db", metavar="PATH", help="Path to a state.db (instead of the default store).")]
ProfileOpt = Annotated[Optional[str], typer.Option(
    "--profile", help="Profile name: $HERMES_HOME/profiles/NAME/state.db.")]
AllProfilesOpt = Annotated[bool, typer.Option(
    "--all-profiles", help="Run over the default store and every profile's, one report each.")]
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print one JSON object (one line per store with --all-profiles).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Show what would change; write and create nothing.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Skip the confirmation prompt.")]
MetricsOpt = Annotated[Optional[str], typer.Option(
    "--metrics-file", metavar="PATH",
    help="Write Prometheus figures here after the run (a *.prom file in node_exporter's textfile directory; "
         "default: config.yaml's hermes_maint.metrics_file).")]

# parameter name -> (flag, help)
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


def filter_options(fn: Callable) -> Callable:
    """Add every filter flag to *fn*'s options; *fn* receives them parsed, as ``filters: Filters``.

    One declaration for three commands: writing the 22 flags into each signature would repeat
    them three times and let the copies drift apart.
    """
    sig = inspect.signature(fn)
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=Annotated[Optional[str],
                                               typer.Option(flag, help=help_, rich_help_panel="Filters")])
        for name, (flag, help_) in FILTER_FLAGS.items()
    ]
    params = [p for p in sig.parameters.values() if p.name != "filters"]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from maint.selection.filters import parse_filters

        raw = {name: kwargs.pop(name) for name in FILTER_FLAGS}
        return fn(*args, filters=parse_filters(raw), **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params + extra)  # type: ignore[attr-defined]
    return wrapper
