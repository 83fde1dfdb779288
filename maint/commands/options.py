"""The options commands share, declared once so every command spells and explains them alike.

Options that belong together reach a command as one value, gathered as the command line is
parsed (:class:`Command`): the store flags as ``stores`` (:class:`~maint.commands.runner.Stores`),
the 22 filter flags of prune, archive and export as ``filters``
(:class:`~maint.selection.filters.Filters`), ``--apply``/``--dry-run`` as ``apply``. So a job
file's dry parse (``make_context``, never ``invoke``) refuses what a run would refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from maint.commands.params import FilePath, Filter
from maint.commands.runner import Stores, guard
from maint.errors import UsageError

DB_HELP = "Path to a state.db (instead of the default store)."
METRICS_HELP = ("Write Prometheus figures here after the run (a *.prom file in node_exporter's textfile directory; "
                "default: config.yaml's hermes_maint.metrics_file).")

# parameter name -> (flag, help); the kind of value each takes is the selection engine's (filters.FLAGS)
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

Gather = tuple[tuple[str, ...], Callable[..., Any]]  # the options' names, and what builds their one value


class OwnHelp:
    """A help page is our own text over several lines: written as it is (:func:`maint.commands.output.own_lines`)."""

    def get_help(self, ctx: click.Context) -> str:
        from maint.commands.output import own_lines

        return own_lines(super().get_help(ctx))  # type: ignore[misc]


class Command(OwnHelp, click.Command):
    """A hermes-maint command: gathered options, the one error boundary, and its filters in a section of their own."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        self._refuse_repeats(ctx, args)
        rest = super().parse_args(ctx, args)
        for name, (members, build) in getattr(self.callback, "__maint_gather__", {}).items():
            ctx.params[name] = build(**{m: ctx.params.pop(m) for m in members if m in ctx.params})
        return rest

    def _refuse_repeats(self, ctx: click.Context, args: list[str]) -> None:
        """An option that takes one value, given twice, is refused: click keeps the last one silently, so
        ``--db a.db --db b.db`` (or a job's own --db with the loop's) would act on a store named second."""
        options = {name: p for p in self.get_params(ctx) if isinstance(p, click.Option) and not p.multiple
                   and not p.count and not p.is_flag for name in p.opts}  # a flag twice is the flag once
        seen: dict[str, str] = {}
        tokens = iter(args)
        for token in tokens:
            if token == "--":
                return
            name = token.split("=", 1)[0] if token.startswith("--") else token
            param = options.get(name)
            if param is None:
                continue
            if param.name in seen:
                raise click.UsageError(f"{name} was given more than once (expected one {name}; nothing was done)",
                                       ctx)
            seen[param.name] = token
            if "=" not in token:
                next(tokens, None)  # its value, whatever it looks like

    def invoke(self, ctx: click.Context) -> Any:
        return guard(lambda: super(Command, self).invoke(ctx))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and not isinstance(param, click.Argument):  # those are click's own section
                sections.setdefault(getattr(param, "section", "Options"), []).append(record)
        for title, records in sections.items():
            with formatter.section(title):
                formatter.write_dl(records)


class Group(OwnHelp, click.Group):
    """A group of hermes-maint commands (``jobs``): its commands are :class:`Command`."""

    command_class = Command


def command(name: str | None = None, **kwargs: Any) -> Callable[[Callable], Command]:
    """``click.command`` with :class:`Command` (help from the docstring; ``\\b`` keeps an example block as written)."""
    return click.command(name, cls=Command, **kwargs)


def _gather(fn: Callable, name: str, members: tuple[str, ...], build: Callable[..., Any]) -> None:
    gathered = dict(getattr(fn, "__maint_gather__", {}))
    gathered[name] = (members, build)
    fn.__maint_gather__ = gathered  # type: ignore[attr-defined]


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
dry_run_option = click.option("--dry-run", is_flag=True, help="Show what would change; write and create nothing.")
yes_option = click.option("--yes", "-y", is_flag=True, help="Skip the confirmation prompt.")
force_option = click.option("--force", is_flag=True, help="Proceed when the holder check could not complete.")
db_option = click.option("--db", type=FilePath("the path of a state.db file"), metavar="PATH", help=DB_HELP)
all_profiles_option = click.option("--all-profiles", is_flag=True,
                                   help="Run over the default store and every profile's, one report each.")
metrics_option = click.option("--metrics-file", type=FilePath("a path to a *.prom file"), metavar="PATH",
                              help=METRICS_HELP)
jobs_dir_option = click.option("--jobs-dir", type=FilePath("a folder of job files"), metavar="PATH",
                               help="Job catalogue folder (default: shipped).")


def store_options(*, all_profiles: bool = True, metrics: bool = False,
                  db_help: str = DB_HELP) -> Callable[[Callable], Callable]:
    """--json, --db, --profile[, --all-profiles][, --metrics-file], reaching the command as ``stores``.

    A command whose every run names one store (a session id, a snapshot, a file of sessions)
    does not offer --all-profiles at all: passing it is click's "no such option".
    """

    def decorate(fn: Callable) -> Callable:
        options = [
            click.option("--json", "as_json", is_flag=True, help="Print one JSON object" + (
                " (one line per store with --all-profiles)." if all_profiles else ".")),
            click.option("--db", type=FilePath("the path of a state.db file"), metavar="PATH", help=db_help),
            click.option("--profile", metavar="NAME", help="Profile name: $HERMES_HOME/profiles/NAME/state.db."),
            *([all_profiles_option] if all_profiles else []),
            *([metrics_option] if metrics else []),
        ]
        for option in reversed(options):
            fn = option(fn)
        _gather(fn, "stores", ("as_json", "db", "profile", "all_profiles", "metrics_file"),
                lambda **values: Stores(**values, metrics=metrics))
        return fn

    return decorate


def apply_options(help: str) -> Callable[[Callable], Callable]:
    """--apply (with this help) and --dry-run, reaching the command as ``apply``; both at once is refused."""

    def build(apply: bool = False, dry_run: bool = False) -> bool:
        if apply and dry_run:
            raise UsageError("--apply and --dry-run contradict each other (use one)")
        return apply

    def decorate(fn: Callable) -> Callable:
        fn = dry_run_option(fn)
        fn = click.option("--apply", is_flag=True, help=help)(fn)
        _gather(fn, "apply", ("apply", "dry_run"), build)
        return fn

    return decorate


def filter_options(fn: Callable) -> Callable:
    """Add every filter flag to *fn*'s options, in a "Filters" section of the help; *fn* receives them
    read and checked together, as ``filters: Filters``.

    One declaration for three commands: writing the 22 flags into each would repeat them three
    times and let the copies drift apart.
    """
    from maint.selection.filters import FLAGS, build_filters

    for name, (flag, help_) in reversed(FILTER_FLAGS.items()):
        kind = FLAGS[name][1]
        fn = click.option(flag, name, type=Filter(kind), metavar=Filter(kind).name.upper(), help=help_)(fn)
        fn.__click_params__[-1].section = "Filters"
    _gather(fn, "filters", tuple(FILTER_FLAGS), lambda **values: build_filters(values))
    return fn
