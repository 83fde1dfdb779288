"""hermes-maint repair-fts: options and output; the logic is :mod:`maint.ops.fts_repair`."""

from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt
from maint.commands.output import Terminal
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.store.targets import resolve_targets


def repair_fts(
    apply: Annotated[bool, typer.Option("--apply", help="Rebuild each damaged index (asks first).")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete.")] = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Check both search indexes; --apply rebuilds a damaged or incomplete one (no message changes).

    A rebuild holds the write lock for its whole run, so --apply refuses while
    any process holds the store: stop the gateway first. Without --apply (or
    with --dry-run) nothing is written.

      hermes-maint repair-fts            # report only
      hermes-maint repair-fts --apply
    """
    from maint.commands.recording import metrics_target
    from maint.ops.fts_repair import repair_store

    if apply and dry_run:
        raise UsageError("--apply and --dry-run contradict each other (use one)")
    metrics = metrics_target(metrics_file)
    op = Terminal(yes=yes, quiet=as_json)
    for_each_store(resolve_targets(db, profile, all_profiles), as_json,
                   lambda target: repair_store(target, op, apply=apply, force=force),
                   _render, job="repair-fts", ran=lambda r: bool(r["rebuilt"]), metrics_file=metrics)


def _render(r: dict) -> None:
    for what in r["interrupted"]:
        typer.echo(f"  left by a prune stopped midway: {what}"
                   + ("; put back" if r["recovered"] else "; the next prune or sweep puts it back (or --apply)"))
    if not r["damaged"]:
        typer.echo(f"Search indexes ok ({', '.join(r['checked']) or 'none present'}).")
        return
    for table, lines in r["damaged"].items():
        typer.echo(f"  {table}: {lines[0]}")
    if r["apply"]:
        typer.echo(f"Rebuilt {', '.join(r['rebuilt'])}; the integrity check now passes.")
    else:
        typer.echo(f"{len(r['damaged'])} damaged search index(es). Re-run with --apply (stop the gateway first).")
