"""hermes-maint optimize: options and output; the logic is :mod:`maint.ops.vacuum`."""

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.output import fmt_bytes
from maint.commands.runner import for_each_store
from maint.store.targets import resolve_targets


def optimize(as_json: JsonOpt = False, db: DbOpt = None, profile: ProfileOpt = None,
             all_profiles: AllProfilesOpt = False) -> None:
    """FTS optimize on every index, a WAL checkpoint, then an in-place VACUUM.

    No data changes. Needs about the store's size in free space; refuses with
    both figures otherwise. Holds the write lock while VACUUM runs: Hermes
    writers wait (they retry for ~16 s), so prefer a quiet moment.
    """
    from maint.ops.vacuum import optimize as run_optimize
    from maint.store.connection import open_store

    def run(target) -> dict:
        with open_store(target.path) as store:
            r = run_optimize(store)
        return {"fts_optimized": r.fts_optimized, "bytes_before": r.bytes_before, "bytes_after": r.bytes_after,
                "bytes_freed": max(0, r.bytes_before - r.bytes_after), "seconds": round(r.seconds, 2)}

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render)


def _render(r: dict) -> None:
    typer.echo(f"Optimized {', '.join(r['fts_optimized']) or 'no FTS index'}; VACUUM done in {r['seconds']}s")
    typer.echo(f"  size: {fmt_bytes(r['bytes_before'])} -> {fmt_bytes(r['bytes_after'])} "
               f"({fmt_bytes(r['bytes_freed'])} returned)")
