"""hermes-maint list: options and output; the rows come from :mod:`maint.ops.listing`."""

from typing import Annotated, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.output import printable
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.selection.timeparse import parse_count
from maint.store.targets import resolve_targets


def list_sessions(
    source: Annotated[Optional[str], typer.Option("--source", help="Only this platform.")] = None,
    limit: Annotated[str, typer.Option("--limit", help="How many to show (0 = all).")] = "20",
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
) -> None:
    """Recent conversations: title, preview, last active, id."""
    from maint.ops.listing import list_conversations
    from maint.store.connection import open_store

    n = parse_count("--limit", limit)
    if source is not None and not source.strip():
        raise UsageError("--source: empty value (expected a platform name, e.g. cli or telegram)")

    def run(target) -> dict:
        with open_store(target.path, readonly=True) as store:
            rows, total = list_conversations(store, source=source, limit=n)
        return {"sessions": rows, "total": total, "shown": len(rows)}

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render)


def _render(r: dict) -> None:
    from maint.ops.listing import relative_time

    rows = r["sessions"]
    titled = any(row["title"] for row in rows)
    if titled:
        typer.echo(f"{'Title':<22} {'Preview':<40} {'Last Active':<13} ID")
    else:
        typer.echo(f"{'Preview':<50} {'Last Active':<13} {'Src':<6} ID")
    typer.echo("─" * 96)
    for row in rows:
        when = relative_time(row["last_active"])
        title, preview = printable(row["title"] or "—"), printable(row["preview"])
        sid, source = printable(row["id"]), printable(row["source"])
        if titled:
            typer.echo(f"{title[:22]:<22} {preview[:40]:<40} {when:<13} {sid}")
        else:
            typer.echo(f"{preview[:50]:<50} {when:<13} {source[:6]:<6} {sid}")
    if r["total"] > r["shown"]:
        typer.echo(f"… {r['total'] - r['shown']} more not shown (use --limit N to see more)")
