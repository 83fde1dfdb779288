"""hermes-maint history: options and output; the history is :mod:`maint.ops.history`."""

import json
from typing import Annotated, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.runner import for_each_store
from maint.fmt import fmt_time
from maint.errors import UsageError
from maint.store.targets import resolve_targets


def history(
    kind: Annotated[Optional[str], typer.Option("--kind", help="Only this job (sweep, prune, archive, optimize, "
                                                               "backup, repair-…, recover).")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many runs, newest first (1-100).")] = 20,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
) -> None:
    """Past runs of every job on this store (the last 100 of each kind), newest first.

      hermes-maint history
      hermes-maint history --kind sweep --json
    """
    from maint.ops import history as hist

    if kind is not None and kind not in hist.KINDS:
        raise UsageError(f"--kind: unknown job {kind!r} (expected one of {', '.join(hist.KINDS)})")
    if not 1 <= limit <= hist.KEEP:
        raise UsageError(f"--limit: bad value {limit} (expected a whole number from 1 to {hist.KEEP})")

    for_each_store(resolve_targets(db, profile, all_profiles), as_json,
                   lambda target: hist.history_report(target, kind, limit), _render)


def _render(r: dict) -> None:
    if not r["runs"]:
        typer.echo("No recorded runs" + (f" of {r['kind']}" if r["kind"] else "") + ".")
        return
    for e in r["runs"]:
        took = f"{e['seconds']:.1f}s" if e["seconds"] is not None else "-"
        typer.echo(f"{fmt_time(e['at'])}  {e['kind']:<15} {took:>8}  rows {e['rows']:<7} {_gist(e['report'])}")


def _gist(report: dict) -> str:
    """The report's scalar fields on one line (lists, mappings and the store path left out)."""
    parts = [f"{k}={json.dumps(v, default=str)}" for k, v in report.items()
             if k not in ("store", "profile") and not isinstance(v, (list, dict)) and v is not None]
    text = " ".join(parts)
    return text if len(text) <= 110 else text[:109] + "…"
