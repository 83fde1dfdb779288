"""hermes-maint list: options and output; the rows come from :mod:`maint.ops.listing`."""

from typing import Annotated, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.output import fit, printable
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.selection.timeparse import parse_count
from maint.store.targets import resolve_targets


def list_sessions(
    source: Annotated[Optional[str], typer.Option("--source", help="Only this platform.")] = None,
    limit: Annotated[str, typer.Option("--limit", help="How many to show (0 = all); pinned ones always show.")] = "20",
    workspace: Annotated[Optional[str], typer.Option(
        "--workspace", metavar="NEEDLE",
        help="Only one workspace (git repo root, else working directory): a path substring or the exact "
             "directory name.")] = None,
    sort: Annotated[str, typer.Option(
        "--sort", metavar="ORDER",
        help="started: newest conversation start first, as Hermes lists them (stops at the limit; one lean "
             "pass counts the rest); last-active: most recent activity first (reads every session's newest "
             "message).")
    ] = "started",
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
) -> None:
    """Recent conversations, newest start first: title, preview, last active, id. Pinned ones are always listed.

    Example: hermes-maint list --workspace my-project --limit 50 --sort last-active
    """
    from maint.ops.listing import SORTS, ListRequest, list_store

    n = parse_count("--limit", limit)
    if source is not None and not source.strip():
        raise UsageError("--source: empty value (expected a platform name, e.g. cli or telegram)")
    if sort not in SORTS:
        raise UsageError(f"--sort: {sort!r} (expected {' or '.join(SORTS)})")
    if workspace is not None and not workspace.strip():
        raise UsageError("--workspace: empty value (expected a path substring or a directory name, "
                         "e.g. my-project or ~/code/hermes-agent)")
    req = ListRequest(source=source, limit=n, workspace=workspace, sort=sort, count=as_json)
    for_each_store(resolve_targets(db, profile, all_profiles), as_json, lambda target: list_store(target, req),
                   _render)


def _render(r: dict) -> None:
    from maint.ops.listing import relative_time, source_label

    rows = r["sessions"]
    if not rows:
        typer.echo("No sessions found.")
        return
    titled = any(row["title"] for row in rows)
    if titled:
        typer.echo(f"{'Title':<22} {'Preview':<40} {'Last Active':<13} ID")
        typer.echo("─" * 96)
    else:
        typer.echo(f"{'Preview':<50} {'Last Active':<13} {'Src':<6} ID")
        typer.echo("─" * 86)
    for row in rows:
        when = relative_time(row["last_active"])
        title, preview = printable(row["title"] or "—"), printable(row["preview"])
        sid = printable(row["id"])
        if titled:
            typer.echo(f"{fit(title, 22)} {fit(preview, 40)} {when:<13} {sid}")
        else:
            typer.echo(f"{fit(preview, 50)} {when:<13} {fit(printable(source_label(row['source'])), 6)} {sid}")
    if r["more"]:
        typer.echo("… more not shown (use --limit N to see more)")
