"""hermes-maint stats: options and output; the figures come from :mod:`maint.ops.stats`."""

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.runner import for_each_store
from maint.fmt import fmt_bytes
from maint.store.targets import resolve_targets


def stats(as_json: JsonOpt = False, db: DbOpt = None, profile: ProfileOpt = None,
          all_profiles: AllProfilesOpt = False) -> None:
    """Sessions, messages, sessions per source, file size (with -wal) and free-page share."""
    from maint.ops.stats import stats_report

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, stats_report, _render)


def _render(r: dict) -> None:
    typer.echo(f"Total sessions: {r['sessions']}")
    typer.echo(f"Total messages: {r['messages']}")
    for src, n in r["sessions_by_source"].items():
        typer.echo(f"  {src}: {n} sessions")
    typer.echo(f"Database size: {fmt_bytes(r['file_bytes'])} (WAL {fmt_bytes(r['wal_bytes'])})")
    typer.echo(f"Free pages: {r['free_page_share'] * 100:.1f}% ({r['freelist_count']} of {r['page_count']})")
    typer.echo(f"Open: {r['open_sessions']}  archived: {r['archived_sessions']}  pinned: {r['pinned_sessions']}")
    typer.echo(f"Schema version: {r['schema_version']}  SQLite: {r['sqlite_version']}")
