"""hermes-maint export: options and output; the pipeline is :mod:`maint.export.pipeline`."""

import sys
from enum import StrEnum
from typing import Annotated, Optional

import typer

from maint.commands.options import DbOpt, DryRunOpt, JsonOpt, ProfileOpt, filter_options
from maint.commands.output import Terminal, emit_json, write_json
from maint.commands.runner import naming_store
from maint.errors import MaintError, UsageError
from maint.selection.filters import Filters
from maint.store.targets import resolve_targets


class Format(StrEnum):
    jsonl = "jsonl"
    md = "md"
    qmd = "qmd"
    html = "html"
    trace = "trace"


class Only(StrEnum):
    user_prompts = "user-prompts"


class Lineage(StrEnum):
    segment = "segment"
    logical = "logical"


@filter_options
def export(
    filters: Filters,
    output: Annotated[Optional[str], typer.Argument(help="File, folder, or - for stdout.")] = None,
    fmt: Annotated[Format, typer.Option("--format", help="jsonl | md | qmd | html | trace")] = Format.jsonl,
    session_id: Annotated[Optional[str], typer.Option("--session-id", help="One session (unique prefix ok).")] = None,
    only: Annotated[Optional[Only], typer.Option("--only",
                                                 help="user-prompts: just the prompts (jsonl or md).")] = None,
    lineage: Annotated[Lineage, typer.Option("--lineage", help="segment | logical (md/qmd: a whole compression "
                                                               "lineage as one document).")] = Lineage.segment,
    redact: Annotated[Optional[bool], typer.Option("--redact/--no-redact",
                                                   help="Mask secrets (default: on for trace, off otherwise).")] = None,
    upload: Annotated[bool, typer.Option("--upload", help="trace: upload to your private HF dataset.")] = False,
    public: Annotated[bool, typer.Option("--public", help="trace upload: allow a public dataset.")] = False,
    delete_after_verified: Annotated[bool, typer.Option("--delete-after-verified",
                                                        help="With --session-id and --yes: delete the session "
                                                             "once its export is proven.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Required with --delete-after-verified.")] = False,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: Annotated[bool, typer.Option("--all-profiles", hidden=True)] = False,
) -> None:
    """Export sessions: jsonl backups, md/qmd documents with a manifest, standalone html, or traces.

    Bulk filters take ended sessions (pinned and archived included); no filter exports everything.
    --format trace alone traces the most recent session to stdout.
    """
    from maint.export.pipeline import ExportRequest, export_store

    if all_profiles:
        raise UsageError("export works on one store (its files would collide); use --profile NAME per profile")
    if delete_after_verified and not yes:
        raise UsageError("--delete-after-verified needs --session-id and --yes")
    req = ExportRequest(fmt=fmt.value, output=output, session_id=session_id, filters=filters,
                        only=only.value if only else None, lineage=lineage.value, redact=redact, upload=upload,
                        public=public, delete_after_verified=delete_after_verified, dry_run=dry_run)
    target = resolve_targets(db, profile, False)[0]
    with naming_store(target.path):
        try:
            report = export_store(target, req, Terminal(yes=yes, quiet=as_json))
        except MaintError as exc:
            # The upload was refused before any file went up: the files written are still reported.
            if as_json and getattr(exc, "report", None) is not None:
                _emit_report({**exc.report, "upload_error": str(exc)})
            raise
    if dry_run:
        entries = report.pop("entries")  # the human preview names each file's sessions; the JSON lists files
        if as_json:
            emit_json(report)
            return
        for e in entries:
            where = e["path"] or "(a temporary file, uploaded)"
            typer.echo(f"would write {where}  ({', '.join(e['ids'])})"
                       + ("  [replaces the existing file]" if e.get("replaces") else ""), err=e["path"] == "-")
        return
    failed = [u for u in report["uploaded"] if not u["ok"]]
    if as_json:
        _emit_report(report)
        _refuse_failed_uploads(report, failed)
        return
    for w in report["written"]:
        where = "stdout" if w["path"] == "-" else w["path"]
        if w["path"] in report["files"] or w["path"] == "-":
            replaced = " (replaced the existing file)" if w["path"] in report["replaced"] else ""
            typer.echo(f"wrote {where}{replaced}  ({w['messages']} messages, sha256 {w['sha256'][:12]}…)", err=True)
    for u in report["uploaded"]:
        if u["ok"]:
            typer.echo(f"uploaded {u['repo']}/{u['path_in_repo']}", err=True)
        else:
            typer.echo(f"not uploaded: {u['file'] or u['path_in_repo']}: {u['error']}", err=True)
    _refuse_failed_uploads(report, failed)
    if report["deleted"]:
        typer.echo(f"verified and deleted {len(report['deleted'])} session(s): {', '.join(report['deleted'])}",
                   err=True)


def _emit_report(report: dict) -> None:
    to_stdout = any(w["path"] == "-" for w in report["written"])
    stream = sys.stderr if to_stdout else sys.stdout  # never inside a document
    write_json(report, stream.write)
    stream.write("\n")
    stream.flush()


def _refuse_failed_uploads(report: dict, failed: list[dict]) -> None:
    """Exit 1 after the report when any file did not go up (each one is listed in the report)."""
    if failed:
        done = len(report["uploaded"]) - len(failed)
        raise MaintError(f"{len(failed)} of {len(report['uploaded'])} uploads failed ({done} went up); "
                         "the local files were kept")
