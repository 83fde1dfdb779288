"""hermes-maint stats."""

import typer

from maint.commands.common import JsonOpt, command, fmt_bytes, for_each_target, resolve
from maint.ops.stats import store_stats
from maint.store.connection import open_store


@command
def stats(targets: dict, as_json: JsonOpt = False) -> None:
    """Sessions, messages, sessions per source, file size (with -wal) and free-page share."""
    stores = resolve(targets)

    def run(target) -> dict:
        with open_store(target.path, readonly=True) as store:
            return store_stats(store)

    def render(r: dict) -> None:
        typer.echo(f"Total sessions: {r['sessions']}")
        typer.echo(f"Total messages: {r['messages']}")
        for src, n in r["sessions_by_source"].items():
            typer.echo(f"  {src}: {n} sessions")
        typer.echo(f"Database size: {fmt_bytes(r['file_bytes'])} (WAL {fmt_bytes(r['wal_bytes'])})")
        typer.echo(f"Free pages: {r['free_page_share'] * 100:.1f}% ({r['freelist_count']} of {r['page_count']})")
        typer.echo(f"Open: {r['open_sessions']}  archived: {r['archived_sessions']}  pinned: {r['pinned_sessions']}")
        typer.echo(f"Schema version: {r['schema_version']}  SQLite: {r['sqlite_version']}")

    for_each_target(stores, as_json, run, render)
