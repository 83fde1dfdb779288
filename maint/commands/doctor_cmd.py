"""hermes-maint doctor: options and output; the checks are :mod:`maint.ops.doctor`."""

from enum import StrEnum
from typing import Annotated, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, MetricsOpt, ProfileOpt
from maint.commands.output import Terminal
from maint.commands.runner import for_each_store
from maint.errors import EXIT_FAILED, UsageError
from maint.store.targets import resolve_targets


class FailOn(StrEnum):
    warning = "warning"
    critical = "critical"


def doctor(
    full: Annotated[bool, typer.Option("--full", help="integrity_check instead of quick_check (slower).")] = False,
    fail_on: Annotated[Optional[FailOn], typer.Option(
        "--fail-on", help="Exit 1 when a finding at this level or worse exists.")] = None,
    summary: Annotated[bool, typer.Option("--summary", help="One line per store (for cron mail).")] = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Check a store without writing to it: integrity, search indexes, sizes, holders, config, repairs due.

    Each finding is ok, warning or critical, says what and why, and names the
    exact command that fixes it. Examples:

      hermes-maint doctor
      hermes-maint doctor --all-profiles --summary --fail-on critical
      hermes-maint doctor --json --metrics-file /var/lib/node_exporter/textfile/hermes.prom
    """
    from maint.commands.recording import metrics_target
    from maint.ops.doctor import doctor_store, fails, summary_line

    if summary and as_json:
        raise UsageError("--summary and --json are exclusive (use one)")
    targets = resolve_targets(db, profile, all_profiles)
    try:
        metrics = metrics_target(metrics_file)
    except UsageError:
        if metrics_file is not None:
            raise
        metrics = None  # a broken config.yaml is the doctor's finding, not a stop
    op = Terminal(quiet=as_json or summary)
    reports = for_each_store(targets, as_json, lambda target: doctor_store(target, op, full=full),
                             lambda r: typer.echo(summary_line(r)) if summary else _render(r, several=len(targets) > 1),
                             metrics_file=metrics, findings=True)
    if any(fails(r, fail_on.value if fail_on else None) for r in reports):
        raise typer.Exit(EXIT_FAILED)


def _render(r: dict, several: bool) -> None:
    from maint.ops.doctor import RANK, SEVERITIES

    if not several:
        typer.echo(f"Store: {r['store']}")
    width = max([17] + [len(f["kind"]) + 2 for f in r["findings"]])  # a kind never runs into its text
    for f in sorted(r["findings"], key=lambda f: -RANK[f["severity"]]):
        label = f["severity"].upper() if f["severity"] != "ok" else "ok"
        typer.echo(f"  {label:<9}{f['kind']:<{width}}{f['what']}")
        if f["fix"]:
            typer.echo(f"  {'':<9}{'':<{width}}fix: {f['fix']}")
    c = r["counts"]
    typer.echo(f"{r['worst'].upper()}: " + ", ".join(f"{c[s]} {s}" for s in reversed(SEVERITIES))
               + f" ({r['seconds']:.1f}s)")
