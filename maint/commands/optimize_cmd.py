"""hermes-maint optimize: options and output; the logic is :mod:`maint.ops.vacuum`."""

from typing import Annotated, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, MetricsOpt, ProfileOpt
from maint.commands.output import fmt_bytes
from maint.commands.runner import for_each_store
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
    from maint.config import config_path_for, load_config
    from maint.ops.vacuum import check_into, vacuum_into
    from maint.ops.vacuum import optimize as run_optimize
    from maint.store.connection import open_store

    metrics = metrics_target(metrics_file)
    targets = resolve_targets(db, profile, all_profiles)
    dest = None
    if into is not None:
        if len(targets) > 1:
            raise UsageError("--into: takes one store (not --all-profiles); name it with --db or --profile")
        dest = check_into(into)

    def run(target) -> dict:
        if dest is not None:
            with open_store(target.path, readonly=True) as store:
                c = vacuum_into(store, dest)
            return {"into": c.path, "fts_optimized": [], "bytes_before": c.bytes_before, "bytes_after": c.bytes_after,
                    "bytes_freed": max(0, c.bytes_before - c.bytes_after), "seconds": round(c.seconds, 2),
                    "journal_mode": c.journal_mode, "sessions": c.sessions, "messages": c.messages}
        cfg = load_config(config_path_for(target.path if db is not None else None, target.profile))
        with open_store(target.path) as store:
            r = run_optimize(store, replicated=cfg.maint("replicated") is True)
        return {"into": None, "fts_optimized": r.fts_optimized, "bytes_before": r.bytes_before,
                "bytes_after": r.bytes_after, "bytes_freed": max(0, r.bytes_before - r.bytes_after),
                "seconds": round(r.seconds, 2), "journal_mode": None, "sessions": None, "messages": None}

    # --into only reads the store: that run is not written into the store's history.
    for_each_store(targets, as_json, run, _render, job="optimize", ran=lambda r: r["into"] is None,
                   metrics_file=metrics)


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
