"""hermes-maint repair-routing [--apply]: options and output; the logic is :func:`maint.ops.routing.repair_store`."""

import click

from maint.commands.options import apply_options, command, force_option, store_options, yes_option
from maint.commands.output import Terminal
from maint.commands.params import Seconds
from maint import PROG


@command("repair-routing")
@apply_options("Perform the adoptions (asks first; snapshots the store).")
@click.option("--max-gap-seconds", type=Seconds(), default=900.0, show_default=True,
              help="Contiguity window between a routed session going quiet and the orphan starting, in seconds.")
@yes_option
@force_option
@store_options(metrics=True)
def repair_routing(apply, max_gap_seconds, yes, force, stores) -> None:
    """Re-attach gateway sessions that have messages but lost their routing identity.

    Reports each orphan, the routed session that would adopt it and the evidence
    (lineage: its parent is a routed session of the same platform; contiguity:
    exactly one routed session of that platform went quiet within the window
    around its start). Ambiguous cases are reported, never applied. --apply
    refuses while any process holds the store, snapshots it, re-stamps each
    orphan and retires the replaced session as superseded_by_repair; a second
    --apply finds nothing. Without --apply (or with --dry-run) nothing is written.

    \b
    Examples:
      hermes-maint repair-routing --max-gap-seconds 300
      hermes-maint repair-routing --apply
    """
    from maint.ops.routing import repair_store

    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: repair_store(target, op, max_gap_seconds=max_gap_seconds, apply=apply, force=force),
               _render, job="repair-routing", ran=lambda r: bool(r["adopted"]))


def _render(r: dict) -> None:
    for sid in r["skipped_not_utf8"]:
        click.echo(f"{PROG}: warning: session {sid}: its row holds text that is not UTF-8; not examined", err=True)
    for f in r["findings"]:
        click.echo(f"{f['orphan_id']}  ({f['source']}, {f['message_count']} messages)")
        if f["adoptable"]:
            click.echo(f"  -> adopt into {f['session_key']} (from {f['donor_id']}, evidence: {f['evidence']})")
        else:
            click.echo(f"  x not repairable: {f['reason']}")
    if not r["findings"]:
        click.echo("No gateway sessions are missing their routing identity.")
        return
    if not r["apply"]:
        click.echo(f"{r['adoptable']} of {len(r['findings'])} orphaned session(s) can be repaired"
                   + (". Stop the gateway, then re-run with --apply." if r["adoptable"] else "."))
        return
    if r["snapshot"]:
        click.echo(f"Snapshot of the store before the repair: {r['snapshot']}")
    for a in r["adopted"]:
        click.echo(f"{a['orphan_id']} now owns {a['session_key']} ({a['donor_id']} ended as {a['donor_end_reason']})")
    for a in r["not_adopted"]:
        click.echo(f"{a['orphan_id']} was not adopted: {a['reason']}")
    click.echo(f"Repaired {len(r['adopted'])} of {r['adoptable']} session(s).")
