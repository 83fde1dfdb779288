"""hermes-maint list."""

from typing import Annotated

import typer

from maint.commands.common import JsonOpt, command, for_each_target, resolve
from maint.ops.listing import list_conversations, relative_time
from maint.store.connection import open_store
from maint.selection.timeparse import parse_count


@command
def list_sessions(
    targets: dict,
    source: Annotated[str | None, typer.Option("--source", help="Only this platform.")] = None,
    limit: Annotated[str, typer.Option("--limit", help="How many to show (0 = all).")] = "20",
    as_json: JsonOpt = False,
) -> None:
    """Recent conversations: title, preview, last active, id."""
    n = parse_count("--limit", limit)
    stores = resolve(targets)

    def run(target) -> dict:
        with open_store(target.path, readonly=True) as store:
            rows, total = list_conversations(store, source=source, limit=n)
        return {"sessions": rows, "total": total, "shown": len(rows)}

    def render(r: dict) -> None:
        rows = r["sessions"]
        titled = any(row["title"] for row in rows)
        if titled:
            typer.echo(f"{'Title':<22} {'Preview':<40} {'Last Active':<13} ID")
        else:
            typer.echo(f"{'Preview':<50} {'Last Active':<13} {'Src':<6} ID")
        typer.echo("─" * 96)
        for row in rows:
            when = relative_time(row["last_active"])
            if titled:
                typer.echo(f"{(row['title'] or '—')[:22]:<22} {row['preview'][:40]:<40} {when:<13} {row['id']}")
            else:
                typer.echo(f"{row['preview'][:50]:<50} {when:<13} {row['source'][:6]:<6} {row['id']}")
        if r["total"] > r["shown"]:
            typer.echo(f"… {r['total'] - r['shown']} more not shown (use --limit N to see more)")

    for_each_target(stores, as_json, run, render)
