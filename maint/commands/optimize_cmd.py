"""hermes-maint optimize: options and output; the logic is :mod:`maint.ops.vacuum`."""

from typing import Annotated, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, MetricsOpt, ProfileOpt
from maint.commands.runner import for_each_store
from maint.fmt import fmt_bytes
from maint.errors import UsageError
from maint.store.targets import resolve_targets


def optimize(
    into: Annotated[Optional[str], typer.Option(
        "--into", metavar="PATH",
        help="Write a compacted copy here (VACUUM INTO) instead of rewriting the store in place.")] = None,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """FTS optimize on every index, a WAL checkpoint, then an in-place VACUUM.

    No data changes. Needs about the store's size in free space; refuses with
    both figures otherwise. Holds the write lock while VACUUM runs: Hermes
    writers wait (they retry for ~16 s), so prefer a quiet moment. Refused
    for a replicated store (Litestream): use --into PATH, which only reads the
    store and writes a compacted, verified copy for you to swap in.
    """
    from maint.commands.recording import metrics_target
    from maint.ops.vacuum import OptimizeRequest, optimize_store

    metrics = metrics_target(metrics_file)
    targets = resolve_targets(db, profile, all_profiles)
    if into is not None and len(targets) > 1:
        raise UsageError("--into: takes one store (not --all-profiles); name it with --db or --profile")
    req = OptimizeRequest(into=into)
    # --into only reads the store: that run is not written into the store's history.
    for_each_store(targets, as_json, lambda target: optimize_store(target, req), _render, job="optimize",
                   ran=lambda r: r["into"] is None, metrics_file=metrics)


def _render(r: dict) -> None:
    if r["into"]:
        typer.echo(f"Compacted copy written to {r['into']} in {r['seconds']}s ({r['sessions']} sessions, "
                   f"{r['messages']} messages, journal mode {r['journal_mode']}); the store was not changed")
        typer.echo(f"  size: {fmt_bytes(r['bytes_before'])} -> {fmt_bytes(r['bytes_after'])}")
        typer.echo("  To use it: stop Hermes (and the replicator), move it over state.db, start them again.")
        return
    typer.echo(f"Optimized {', '.join(r['fts_optimized']) or 'no FTS index'}; VACUUM done in {r['seconds']}s")
    typer.echo(f"  size: {fmt_bytes(r['bytes_before'])} -> {fmt_bytes(r['bytes_after'])} "
               f"({fmt_bytes(r['bytes_freed'])} returned)")
