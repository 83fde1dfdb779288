"""hermes-maint prune: options and output; plan, confirm and delete are :func:`maint.ops.prune.prune_store`."""

import click

from maint.commands.options import command, dry_run_option, filter_options, store_options, yes_option
from maint.commands.output import Terminal, printable
from maint.fmt import fmt_bytes, fmt_time


@command("prune")
@click.option("--include-archived", is_flag=True, help="Also delete archived sessions.")
@dry_run_option
@yes_option
@store_options(metrics=True)
@filter_options
def prune(filters, include_archived, dry_run, yes, stores) -> None:
    """Delete ended sessions: bare = inactive for 90 days; any filter turns the 90 days off.

    Open sessions, sessions with a turn or compression in progress, and pinned
    ones are never deleted. A compression lineage goes only as a whole;
    delegate (subagent) children go with their parent.
    """
    from maint.ops.prune import PruneRequest, prune_store

    req = PruneRequest(filters, include_archived=include_archived, dry_run=dry_run)
    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: prune_store(target, req, op), _render, job="prune", ran=lambda r: not r["dry_run"])


def _render(r: dict) -> None:
    verb = "Would delete" if r["dry_run"] else "Deleted"
    rule = f" (implicit rule: inactive >= {r['implicit_days']:g} days)" if r["implicit_days"] else ""
    click.echo(f"{verb} {r['matched']} sessions, {r['messages']} messages{rule}")
    if r.get("bytes") is not None and r["dry_run"]:
        click.echo(f"  stored text: {fmt_bytes(r['bytes'])}")
    if r["oldest"]:
        click.echo(f"  oldest: {printable(r['oldest']['id'])} (last active {fmt_time(r['oldest']['last_active'])})")
        click.echo(f"  newest: {printable(r['newest']['id'])} (last active {fmt_time(r['newest']['last_active'])})")
    if r["dry_run"]:
        for sid in r["session_ids"][:20]:
            click.echo(f"    {printable(sid)}")
        if len(r["session_ids"]) > 20:
            click.echo(f"    … {len(r['session_ids']) - 20} more")
    for reason, n in sorted(r["held_back"].items()):
        click.echo(f"  kept {n} matching lineage(s): {reason.replace('_', ' ')}")
    for sid in r.get("ids_not_utf8") or []:
        click.echo(f"  kept {sid}: its id is not valid UTF-8 (never pruned; fix or delete it with SQL)")
    if r.get("skipped_changed"):
        click.echo(f"  skipped {len(r['skipped_changed'])} sessions that changed while pruning")
    if r.get("skipped_too_big"):
        click.echo(f"  kept {len(r['skipped_too_big'])} sessions in conversations too big to delete while other "
                   "processes have the store open (their delete would hold the lock past HERMES_MAINT_MAX_UNIT_S); "
                   "stop Hermes and prune again")
