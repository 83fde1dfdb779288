"""hermes-maint stats: options and output; the figures come from :func:`maint.ops.stats.stats_report`."""

import click

from maint.commands.options import command, store_options
from maint.fmt import fmt_bytes


@command("stats")
@store_options()
def stats(stores) -> None:
    """Sessions, messages, sessions per source, file size (with -wal) and free-page share."""
    from maint.ops.stats import stats_report

    stores.run(stats_report, _render)


def _render(r: dict) -> None:
    click.echo(f"Total sessions: {r['sessions']}")
    click.echo(f"Total messages: {r['messages']}")
    for src, n in r["sessions_by_source"].items():
        click.echo(f"  {src}: {n} sessions")
    click.echo(f"Database size: {fmt_bytes(r['file_bytes'])} (WAL {fmt_bytes(r['wal_bytes'])})")
    click.echo(f"Free pages: {r['free_page_share'] * 100:.1f}% ({r['freelist_count']} of {r['page_count']})")
    click.echo(f"Open: {r['open_sessions']}  archived: {r['archived_sessions']}  pinned: {r['pinned_sessions']}")
    click.echo(f"Schema version: {r['schema_version']}  SQLite: {r['sqlite_version']}")
