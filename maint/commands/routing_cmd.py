"""hermes-maint repair-routing [--apply]: options and output; the logic is :mod:`maint.ops.routing`."""

import math
from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt
from maint.commands.output import Terminal
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.store.targets import resolve_targets

def repair_routing(
    apply: Annotated[bool, typer.Option(
        "--apply", help="Perform the adoptions (asks first; snapshots the store).")] = False,
    max_gap_seconds: Annotated[str, typer.Option(
        "--max-gap-seconds", help="Contiguity window between a routed session going quiet and the orphan "
                                  "starting, in seconds.")] = "900",
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete.")] = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Re-attach gateway sessions that have messages but lost their routing identity.

    Reports each orphan, the routed session that would adopt it and the evidence
    (lineage: its parent is a routed session of the same platform; contiguity:
    exactly one routed session of that platform went quiet within the window
    around its start). Ambiguous cases are reported, never applied. --apply
    refuses while any process holds the store, snapshots it, re-stamps each
    orphan and retires the replaced session as superseded_by_repair; a second
    --apply finds nothing. Without --apply (or with --dry-run) nothing is written.

    Example: hermes-maint repair-routing --max-gap-seconds 300; hermes-maint repair-routing --apply
    """
    from maint.commands.recording import metrics_target
    from maint.ops.routing import repair_store

    if apply and dry_run:
        raise UsageError("--apply and --dry-run contradict each other (use one)")
    metrics = metrics_target(metrics_file)
    try:
        gap = float(max_gap_seconds)
    except ValueError:
        gap = -1.0
    if not math.isfinite(gap) or gap < 0:
        raise UsageError(f"--max-gap-seconds: bad value {max_gap_seconds!r} (expected a number of seconds >= 0, "
                         "e.g. 900)")
    op = Terminal(yes=yes, quiet=as_json)
    for_each_store(resolve_targets(db, profile, all_profiles), as_json,
                   lambda target: repair_store(target, op, max_gap_seconds=gap, apply=apply, force=force),
                   _render, job="repair-routing", ran=lambda r: bool(r["adopted"]), metrics_file=metrics)


def _render(r: dict) -> None:
    for f in r["findings"]:
        typer.echo(f"{f['orphan_id']}  ({f['source']}, {f['message_count']} messages)")
        if f["adoptable"]:
            typer.echo(f"  -> adopt into {f['session_key']} (from {f['donor_id']}, evidence: {f['evidence']})")
        else:
            typer.echo(f"  x not repairable: {f['reason']}")
    if not r["findings"]:
        typer.echo("No gateway sessions are missing their routing identity.")
        return
    if not r["apply"]:
        typer.echo(f"{r['adoptable']} of {len(r['findings'])} orphaned session(s) can be repaired"
                   + (". Stop the gateway, then re-run with --apply." if r["adoptable"] else "."))
        return
    if r["snapshot"]:
        typer.echo(f"Snapshot of the store before the repair: {r['snapshot']}")
    for a in r["adopted"]:
        typer.echo(f"{a['orphan_id']} now owns {a['session_key']} ({a['donor_id']} retired as superseded_by_repair)")
    for a in r["not_adopted"]:
        typer.echo(f"{a['orphan_id']} was not adopted: {a['reason']}")
    typer.echo(f"Repaired {len(r['adopted'])} of {r['adoptable']} session(s).")
