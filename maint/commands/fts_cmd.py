"""hermes-maint repair-fts: options and output; the logic is :mod:`maint.ops.fts`."""

from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt
from maint.commands.output import confirm_or_refuse
from maint.commands.runner import for_each_store
from maint.errors import MaintError, UsageError
from maint.store.targets import resolve_targets


def repair_fts(
    apply: Annotated[bool, typer.Option("--apply", help="Rebuild each damaged index (asks first).")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete.")] = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Check both search indexes; --apply rebuilds a damaged or incomplete one (no message changes).

    A rebuild holds the write lock for its whole run, so --apply refuses while
    any process holds the store: stop the gateway first. Without --apply (or
    with --dry-run) nothing is written.

      hermes-maint repair-fts            # report only
      hermes-maint repair-fts --apply
    """
    from maint.commands.recording import metrics_target
    from maint.ops import fts
    from maint.ops.prune import interrupted, recover_interrupted
    from maint.store.connection import open_store
    from maint.store.holders import STOP_HERMES, refuse_if_held

    if apply and dry_run:
        raise UsageError("--apply and --dry-run contradict each other (use one)")
    metrics = metrics_target(metrics_file)

    def run(target) -> dict:
        with open_store(target.path, readonly=True) as store:
            damaged = fts.damaged(store)
            checked = store.fts_tables
            left = interrupted(store)
        report = {"apply": apply, "dry_run": not apply, "checked": checked, "damaged": damaged, "rebuilt": [],
                  "how": {}, "interrupted": left, "recovered": False}
        if not apply or not (damaged or left):
            return report
        refuse_if_held(target.path, force=force, doing="rebuild its search index", advice=STOP_HERMES)
        confirm_or_refuse(yes, f"Repair the search indexes of {target.path}?", [
            f"  {t}: {lines[0]}" for t, lines in damaged.items()] + [
            f"  left by a prune stopped midway: {what}" for what in left] + [
            "What a stopped prune left is put back first; each damaged index is then rebuilt in one "
            "transaction; no message changes."])
        with open_store(target.path) as store:
            if left:
                recover_interrupted(store)  # the messages it took out go back, so the index may be whole again
                report["recovered"] = True
                damaged = fts.damaged(store)
                report["damaged"] = damaged
            for table in damaged:
                report["how"][table] = fts.rebuild(store, table)
                report["rebuilt"].append(table)
            still = fts.damaged(store)
        if still:
            raise MaintError(f"{target.path}: rebuilt {', '.join(report['rebuilt'])} but the check still fails "
                             f"({next(iter(still.values()))[0]}); restore a backup")
        return report

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render, job="repair-fts",
                   ran=lambda r: bool(r["rebuilt"]), metrics_file=metrics)


def _render(r: dict) -> None:
    for what in r["interrupted"]:
        typer.echo(f"  left by a prune stopped midway: {what}"
                   + ("; put back" if r["recovered"] else "; the next prune or sweep puts it back (or --apply)"))
    if not r["damaged"]:
        typer.echo(f"Search indexes ok ({', '.join(r['checked']) or 'none present'}).")
        return
    for table, lines in r["damaged"].items():
        typer.echo(f"  {table}: {lines[0]}")
    if r["apply"]:
        typer.echo(f"Rebuilt {', '.join(r['rebuilt'])}; the integrity check now passes.")
    else:
        typer.echo(f"{len(r['damaged'])} damaged search index(es). Re-run with --apply (stop the gateway first).")
