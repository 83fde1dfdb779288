"""hermes-maint prune: options and output; plan, confirm and delete are :func:`maint.ops.prune.prune_store`."""

from typing import Annotated

import typer

from maint.commands.options import (AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt,
                                   filter_options)
from maint.commands.output import Terminal, printable
from maint.commands.runner import for_each_store
from maint.fmt import fmt_bytes, fmt_time
from maint.selection.filters import Filters
from maint.store.targets import resolve_targets


@filter_options
def prune(
    filters: Filters,
    include_archived: Annotated[
        bool, typer.Option("--include-archived", help="Also delete archived sessions.")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Delete ended sessions: bare = inactive for 90 days; any filter turns the 90 days off.

    Open sessions, sessions with a turn or compression in progress, and pinned
    ones are never deleted. A compression lineage goes only as a whole;
    delegate (subagent) children go with their parent.
    """
    from maint.commands.recording import metrics_target
    from maint.ops.prune import PruneRequest, prune_store

    metrics = metrics_target(metrics_file)
    req = PruneRequest(filters, include_archived=include_archived, dry_run=dry_run)
    op = Terminal(yes=yes, quiet=as_json)
    for_each_store(resolve_targets(db, profile, all_profiles), as_json, lambda target: prune_store(target, req, op),
                   _render, job="prune", ran=lambda r: not r["dry_run"], metrics_file=metrics)


def _render(r: dict) -> None:
    verb = "Would delete" if r["dry_run"] else "Deleted"
    rule = f" (implicit rule: inactive >= {r['implicit_days']:g} days)" if r["implicit_days"] else ""
    typer.echo(f"{verb} {r['matched']} sessions, {r['messages']} messages{rule}")
    if r.get("bytes") is not None and r["dry_run"]:
        typer.echo(f"  stored text: {fmt_bytes(r['bytes'])}")
    if r["oldest"]:
        typer.echo(f"  oldest: {printable(r['oldest']['id'])} (last active {fmt_time(r['oldest']['last_active'])})")
        typer.echo(f"  newest: {printable(r['newest']['id'])} (last active {fmt_time(r['newest']['last_active'])})")
    if r["dry_run"]:
        for sid in r["session_ids"][:20]:
            typer.echo(f"    {printable(sid)}")
        if len(r["session_ids"]) > 20:
            typer.echo(f"    … {len(r['session_ids']) - 20} more")
    for reason, n in sorted(r["held_back"].items()):
        typer.echo(f"  kept {n} matching lineage(s): {reason.replace('_', ' ')}")
    if r.get("skipped_changed"):
        typer.echo(f"  skipped {len(r['skipped_changed'])} sessions that changed while pruning")
    if r.get("skipped_too_big"):
        typer.echo(f"  kept {len(r['skipped_too_big'])} sessions in conversations too big to delete while other "
                   "processes have the store open (their delete would hold the lock past HERMES_MAINT_MAX_UNIT_S); "
                   "stop Hermes and prune again")
