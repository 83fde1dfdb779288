"""hermes-maint optimize: give the space inside state.db back to the disk."""

import typer

from maint.commands.common import JsonOpt, command, fmt_bytes, for_each_target, resolve
from maint.store.connection import open_store
from maint.ops.vacuum import optimize as run_optimize


@command
def optimize(targets: dict, as_json: JsonOpt = False) -> None:
    """FTS optimize on every index, a WAL checkpoint, then an in-place VACUUM.

    No data changes. Needs about the store's size in free space; refuses with
    both figures otherwise. Holds the write lock while VACUUM runs: Hermes
    writers wait (they retry for ~16 s), so prefer a quiet moment.
    """
    stores = resolve(targets)

    def run(target) -> dict:
        with open_store(target.path) as store:
            r = run_optimize(store)
        return {"fts_optimized": r.fts_optimized, "bytes_before": r.bytes_before, "bytes_after": r.bytes_after,
                "bytes_freed": max(0, r.bytes_before - r.bytes_after), "seconds": round(r.seconds, 2)}

    def render(r: dict) -> None:
        typer.echo(f"Optimized {', '.join(r['fts_optimized']) or 'no FTS index'}; VACUUM done in {r['seconds']}s")
        typer.echo(f"  size: {fmt_bytes(r['bytes_before'])} -> {fmt_bytes(r['bytes_after'])} "
                   f"({fmt_bytes(r['bytes_freed'])} returned)")

    for_each_target(stores, as_json, run, render)
