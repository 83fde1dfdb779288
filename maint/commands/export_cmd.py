"""hermes-maint export: thin CLI over the export modules."""

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from maint.store import lineage as lin
from maint.store.catalog import load_sessions
from maint.commands.common import DryRunOpt, JsonOpt, command, emit_json, filter_options, resolve
from maint.config import load_config
from maint.errors import MaintError, UsageError
from maint.export.verified_delete import delete_if_unchanged, family, fingerprint, refuse_if_busy, verify_files
from maint.export.files import atomic_text, inside, safe_name
from maint.export.render import (iso_time, iter_user_prompts, render_document, render_html, write_jsonl_session,
                                 write_trace)
from maint.export.selection import select_sessions
from maint.selection.filters import parse_filters
from maint.store.targets import hermes_home
from maint.store.connection import open_store
from maint.export.transcript import stored_count

FORMATS = ("jsonl", "md", "qmd", "html", "trace")


def _target_file(output: Optional[str], default_name: str) -> str:
    """``-`` (or nothing) is stdout; an existing directory or a path ending in / gets *default_name*."""
    if not output or output == "-":
        return "-"
    if output.endswith(("/", os.sep)) or Path(output).expanduser().is_dir():
        folder = Path(output).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        return str(inside(folder, default_name))
    path = Path(output).expanduser()
    if not path.parent.is_dir():
        raise UsageError(f"OUTPUT: folder {path.parent} does not exist (expected an existing folder, a file "
                         "path in one, or -)")
    return str(path)


def _folder(output: Optional[str]) -> Path:
    folder = Path(output).expanduser() if output and output != "-" else hermes_home() / "session-exports"
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"OUTPUT: {folder} is a file; md/qmd/trace bulk exports need a folder")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@filter_options
@command
def export(
    targets: dict,
    filters: dict,
    output: Annotated[Optional[str], typer.Argument(help="File, folder, or - for stdout.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="jsonl | md | qmd | html | trace")] = "jsonl",
    session_id: Annotated[Optional[str], typer.Option("--session-id", help="One session (unique prefix ok).")] = None,
    only: Annotated[Optional[str], typer.Option("--only", help="user-prompts: just the prompts (jsonl or md).")] = None,
    lineage: Annotated[str, typer.Option("--lineage", help="segment | logical (md/qmd: a whole compression "
                                                           "lineage as one document).")] = "segment",
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
) -> None:
    """Export sessions: jsonl backups, md/qmd documents with a manifest, standalone html, or traces.

    Bulk filters take ended sessions (pinned and archived included); no filter exports everything.
    """
    if fmt not in FORMATS:
        raise UsageError(f"--format: bad value {fmt!r} (expected one of {', '.join(FORMATS)})")
    if only not in (None, "user-prompts"):
        raise UsageError(f"--only: bad value {only!r} (expected user-prompts)")
    if only and fmt not in ("jsonl", "md"):
        raise UsageError("--only user-prompts works with --format jsonl or md")
    if lineage not in ("segment", "logical"):
        raise UsageError(f"--lineage: bad value {lineage!r} (expected segment or logical)")
    if (upload or public) and fmt != "trace":
        raise UsageError("--upload/--public only apply to --format trace")
    if delete_after_verified:
        if not session_id or not yes:
            raise UsageError("--delete-after-verified needs --session-id and --yes")
        if fmt not in ("jsonl", "md", "qmd") or only:
            raise UsageError("--delete-after-verified works with --format jsonl, md or qmd (full transcripts)")
    spec = parse_filters(filters)
    if fmt in ("md", "qmd") and not session_id and spec.is_empty:
        raise UsageError(f"--format {fmt} bulk export needs at least one filter (or --session-id)")
    do_redact = (fmt == "trace") if redact is None else redact
    target = resolve(targets)[0]
    cfg = load_config()

    with open_store(target.path, readonly=not delete_after_verified) as store:
        with store.snapshot():
            catalog = load_sessions(store)
        chosen = select_sessions(store, session_id, spec, catalog)
        if delete_after_verified:
            members = family(store, chosen[0].id, catalog)  # the named session first, then its delegates
            refuse_if_busy(catalog, members)
            chosen = [catalog[sid] for sid in members]
        cap = cfg.session("max_export_messages")
        if fmt == "jsonl" and not only and isinstance(cap, int) and cap > 0:
            for s in chosen:
                n = stored_count(store, s.id)
                if n > cap:
                    raise MaintError(f"session {s.id} has {n} stored messages, more than "
                                     f"sessions.max_export_messages={cap}; raise the setting (0 = no cap) "
                                     "or export it as md/qmd")
        plan = _plan(catalog, chosen, fmt, output, only, lineage, bool(session_id), delete_after_verified)
        if dry_run:
            report = {"dry_run": True, "format": fmt, "sessions": [s.id for s in chosen],
                      "files": [p["path"] for p in plan]}
            emit_json(report) if as_json else [typer.echo(f"would write {p['path']}  ({', '.join(p['ids'])})")
                                               for p in plan]
            return
        job = Render(store, catalog, fmt, only, do_redact, iso_time(time.time()))
        written = [job.write(entry, fingerprints=delete_after_verified) for entry in plan]
        manifest = _manifest(written, fmt)
        report = {"dry_run": False, "format": fmt, "sessions": [s.id for s in chosen],
                  "files": [w["path"] for w in written], "manifest": manifest, "uploaded": [], "deleted": []}
        if delete_after_verified:
            report["deleted"] = job.verified_delete(written)
    if upload:
        from maint.export.hf_upload import upload_traces

        files = [(w["ids"][0], Path(w["path"])) for w in written if w["path"] != "-"]
        if not files:
            raise UsageError("--upload needs a trace file (give OUTPUT instead of -)")
        report["uploaded"] = upload_traces(files, public=public)
    if as_json:
        emit_json(report)
    elif any(w["path"] != "-" for w in written):
        for w in written:
            typer.echo(f"wrote {w['path']}  ({w['messages']} messages, sha256 {w['sha256'][:12]}…)", err=True)
        for u in report["uploaded"]:
            typer.echo(f"uploaded {u}", err=True)
        if report["deleted"]:
            typer.echo(f"verified and deleted {len(report['deleted'])} session(s): {', '.join(report['deleted'])}",
                       err=True)


def _plan(catalog, chosen, fmt, output, only, lineage, single, per_session=False) -> list[dict]:
    """What files will be written and which sessions go in each."""
    if fmt == "html":
        return [{"path": _target_file(output, "hermes_sessions.html"), "ids": [s.id for s in chosen]}]
    if fmt == "jsonl":
        name = f"hermes_session_{safe_name(chosen[0].id, '')}.jsonl" if single else "hermes_sessions.jsonl"
        if per_session:  # delete-after-verified: one file per family member, in a folder
            folder = _folder(output)
            return [{"path": str(inside(folder, safe_name(s.id, ".jsonl"))), "ids": [s.id]} for s in chosen]
        return [{"path": _target_file(output, name), "ids": [s.id for s in chosen]}]
    if fmt == "trace":
        if single:
            return [{"path": _target_file(output, safe_name(chosen[0].id, ".trace.jsonl")), "ids": [chosen[0].id]}]
        folder = _folder(output)
        return [{"path": str(inside(folder, safe_name(s.id, ".trace.jsonl"))), "ids": [s.id]} for s in chosen]
    folder = _folder(output)
    suffix = ".prompts.md" if only else f".{fmt}"
    if lineage == "logical":
        tree = lin.build(catalog)
        groups, seen = [], set()
        for s in chosen:
            key = tree.chain_of[s.id]
            if key not in seen:
                seen.add(key)
                groups.append(tree.chains[key].ids)
        return [{"path": str(inside(folder, safe_name(ids[0], suffix))), "ids": ids, "lineage": ids}
                for ids in groups]
    return [{"path": str(inside(folder, safe_name(s.id, suffix))), "ids": [s.id]} for s in chosen]


@dataclass
class Render:
    """One export run: the open store, its session records (loaded once) and the chosen format."""

    store: Any
    sessions: dict
    fmt: str
    only: Optional[str]
    redact: bool
    stamp: str

    def render(self, entry: dict, write) -> int:
        store, sessions, redact = self.store, self.sessions, self.redact
        if self.fmt == "jsonl":
            if self.only:
                n = 0
                for sid in entry["ids"]:
                    for rec in iter_user_prompts(store, sid, redact):
                        write(json.dumps(rec, ensure_ascii=False) + "\n")
                        n += 1
                return n
            return sum(write_jsonl_session(store, sid, write, redact) for sid in entry["ids"])
        if self.fmt == "trace":
            return write_trace(store, sessions[entry["ids"][0]], write, redact)
        if self.fmt == "html":
            return render_html(store, [sessions[sid] for sid in entry["ids"]], write, redact)
        doc_fmt = "prompts.md" if self.only else self.fmt
        return render_document(store, doc_fmt, entry["ids"], write, redact, sessions[entry["ids"][0]], self.stamp)

    def write(self, entry: dict, fingerprints: bool = False) -> dict:
        with self.store.snapshot():
            with atomic_text(entry["path"]) as sink:
                n = self.render(entry, sink.write)
            # The delete check needs the transcript as it was exported, from the same snapshot.
            prints = {sid: fingerprint(self.store, sid) for sid in entry["ids"]} if fingerprints else {}
        return {**entry, "messages": n, "sha256": sink.digest.hexdigest(), "fingerprints": prints}

    def verified_delete(self, written: list[dict]) -> list[str]:
        def rerender(entry: dict) -> str:
            h = hashlib.sha256()
            with self.store.snapshot():
                self.render(entry, lambda t: h.update(t.encode("utf-8")))
            return h.hexdigest()

        verify_files(written, rerender)
        ids = [sid for w in written for sid in w["ids"]]
        prints = {sid: p for w in written for sid, p in w["fingerprints"].items()}
        delete_if_unchanged(self.store, ids, prints)
        return ids


def _manifest(written: list[dict], fmt: str) -> Optional[str]:
    files = [w for w in written if w["path"] != "-"]
    if fmt not in ("md", "qmd") or not files:
        return None
    folder = Path(files[0]["path"]).parent
    path = folder / "manifest.jsonl"
    existing = []
    if path.exists():
        names = {Path(w["path"]).name for w in files}
        existing = [line for line in path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("path") not in names]
    with atomic_text(path) as sink:
        for line in existing:
            sink.write(line + "\n")
        for w in files:
            sink.write(json.dumps({"path": Path(w["path"]).name, "messages": w["messages"],
                                   "lineage_ids": w.get("lineage", w["ids"]), "sha256": w["sha256"]}) + "\n")
    return str(path)
