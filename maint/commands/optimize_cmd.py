"""hermes-maint optimize: options and output; the logic is :func:`maint.ops.vacuum.optimize_store`."""

import click

from maint.commands.options import command, store_options
from maint.commands.params import FilePath
from maint.errors import UsageError
from maint.fmt import fmt_bytes


@command("optimize")
@click.option("--into", type=FilePath("a new file in an existing folder"), metavar="PATH",
              help="Write a compacted copy here (VACUUM INTO) instead of rewriting the store in place.")
@store_options(metrics=True)
def optimize(into, stores) -> None:
    """FTS optimize on every index, a WAL checkpoint, then an in-place VACUUM.

    No data changes. Needs about the store's size in free space; refuses with
    both figures otherwise. Holds the write lock while VACUUM runs: Hermes
    writers wait (they retry for ~16 s), so prefer a quiet moment. Refused
    for a replicated store (Litestream): use --into PATH, which only reads the
    store and writes a compacted, verified copy for you to swap in.
    """
    from maint.ops.vacuum import OptimizeRequest, optimize_store

    if into is not None and len(stores.targets()) > 1:
        raise UsageError("--into: takes one store (not --all-profiles); name it with --db or --profile")
    req = OptimizeRequest(into=into)
    # --into only reads the store: that run is not written into the store's history.
    stores.run(lambda target: optimize_store(target, req), _render, job="optimize", ran=lambda r: r["into"] is None)


def _render(r: dict) -> None:
    if r["into"]:
        click.echo(f"Compacted copy written to {r['into']} in {r['seconds']}s ({r['sessions']} sessions, "
                   f"{r['messages']} messages, journal mode {r['journal_mode']}); the store was not changed")
        click.echo(f"  size: {fmt_bytes(r['bytes_before'])} -> {fmt_bytes(r['bytes_after'])}")
        click.echo("  To use it: stop Hermes (and the replicator), move it over state.db, start them again.")
        return
    if r.get("checkpoint_blocked"):
        click.echo(f"Optimized {', '.join(r['fts_optimized']) or 'no FTS index'}; VACUUM rewrote the store in "
                   f"{r['seconds']}s, but the final checkpoint could not finish: a process holds a read transaction "
                   f"(holders: {r['checkpoint_blocked']}). The rewritten store waits in the -wal until that "
                   "transaction ends; the next checkpoint (Hermes's, or optimize again) then returns the space")
        click.echo(f"  size now: {fmt_bytes(r['bytes_before'])} -> {fmt_bytes(r['bytes_after'])} (-wal included)")
        return
    click.echo(f"Optimized {', '.join(r['fts_optimized']) or 'no FTS index'}; VACUUM done in {r['seconds']}s")
    click.echo(f"  size: {fmt_bytes(r['bytes_before'])} -> {fmt_bytes(r['bytes_after'])} "
               f"({fmt_bytes(r['bytes_freed'])} returned)")
