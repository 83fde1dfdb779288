"""hermes-maint recover: options and output; the logic is :mod:`maint.ops.recover`."""

from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt
from maint.commands.output import Terminal
from maint.commands.runner import for_each_store
from maint.fmt import fmt_time
from maint.errors import UsageError
from maint.store.targets import resolve_targets


def recover(
    apply: Annotated[bool, typer.Option("--apply", help="Create the placeholder sessions (asks first).")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Find messages whose session row is missing; --apply gives each session id a placeholder row.

    The placeholder (source 'recovered') is left open: the sweep's orphan
    reaping closes it like other automation sessions once it is idle for
    retention_days. One transaction per session id; no message changes.
    Without --apply (or with --dry-run) nothing is written.

      hermes-maint recover              # report only
      hermes-maint recover --apply      # asks, then creates the placeholders
    """
    from maint.commands.recording import metrics_target
    from maint.ops.recover import recover_store

    if apply and dry_run:
        raise UsageError("--apply and --dry-run contradict each other (use one)")
    metrics = metrics_target(metrics_file)
    op = Terminal(yes=yes, quiet=as_json)
    for_each_store(resolve_targets(db, profile, all_profiles), as_json,
                   lambda target: recover_store(target, op, apply=apply), _render, job="recover",
                   ran=lambda r: bool(r["recovered"]), metrics_file=metrics)


def _render(r: dict) -> None:
    strays = r["stray_sessions"]
    if not strays:
        typer.echo("No stray messages: every message has its session row.")
        return
    if not r["apply"]:
        for s in strays[:20]:
            typer.echo(f"  {s['session_id']}  {s['messages']} message(s), "
                       f"{fmt_time(s['first'])} .. {fmt_time(s['last'])}")
        typer.echo(f"{r['stray_messages']} stray message(s) under {len(strays)} session id(s). "
                   "Re-run with --apply to give each a 'recovered' placeholder session.")
        return
    typer.echo(f"Recovered {len(r['recovered'])} session(s) holding {r['recovered_messages']} message(s) "
               "(source 'recovered', left open: the sweep closes them once idle).")
    for s in r["skipped"]:
        typer.echo(f"  skipped {s['session_id']}: {s['reason']}")
