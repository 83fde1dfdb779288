"""Rendering sessions for export: JSON lines, user prompts, Markdown/QMD/HTML documents, traces.

Every renderer takes rows as they stream from the store and writes pieces to a
sink, so one session never has to fit in memory.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from functools import lru_cache
import time
import uuid
from typing import Any
from collections.abc import Callable, Iterable, Iterator

from jinja2 import Environment, FunctionLoader, select_autoescape

from maint import json_text
from maint.store.catalog import SessionInfo
from maint.export.redact import redact_bytes, redact_row, redact_text, redact_value
from maint.store.connection import USAGE_TABLE, Store
from maint.store.timestamps import utc_iso
from maint.export.transcript import Timings, iter_messages

TEMPLATES = "maint.export.templates"  # package data: the top-level templates/ folder


def _load_template(name: str) -> str:
    return resources.files(TEMPLATES).joinpath(name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def environment() -> Environment:
    """Built once per process: a bulk md export renders thousands of files from the same templates."""
    env = Environment(loader=FunctionLoader(_load_template), autoescape=select_autoescape(["html.j2"]),
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["when"] = iso_time
    env.filters["tool_calls"] = tool_call_names
    env.filters["inert"] = inert
    return env


_INERT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "`": "&#96;",
                        "{": "&#123;", "}": "&#125;", "@": "&#64;", "$": "&#36;", "\\": "&#92;"})


def inert(value: Any) -> str:
    """Stored text for a Quarto (qmd) document: HTML in which nothing Quarto or pandoc acts on survives (code
    fences and inline code, ``{lang}`` cells, ``{{< shortcodes >}}``, citations, math, raw HTML), so it shows
    as written and is never run, included, or able to end the element around it."""
    return str(value).translate(_INERT)


def iso_time(ts: Any) -> str:
    if not isinstance(ts, (int, float)):
        return ""
    return utc_iso(ts)


def tool_call_names(raw: Any) -> str:
    try:
        calls = json_text.loads(raw) if isinstance(raw, str) else raw
    except ValueError:  # not JSON, or nested past json_text.MAX_DEPTH
        return str(raw)
    if not isinstance(calls, list):
        return ""
    names = [(c.get("function") or {}).get("name") or c.get("name") or "tool" for c in calls if isinstance(c, dict)]
    return ", ".join(names)


def session_row(store: Store, session_id: str) -> dict[str, Any]:
    return store.rows("SELECT * FROM sessions WHERE id = ?", (session_id,))[0]


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


def _dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


# -- JSON lines backup --------------------------------------------------------------------------

def referenced_prompts(store: Store, row: dict[str, Any]) -> dict[str, str] | None:
    """The content-addressed prompts (v30 ``system_prompts``) the row points at; None when the layout has none.

    The row holds only their hashes, and a delete removes prompts nobody references any more, so a
    backup carries the text itself: import puts it back.
    """
    if not store.has_table("system_prompts"):
        return None
    refs = sorted({v for c in ("system_prompt_hash", "tool_names") if isinstance(v := row.get(c), str) and v})
    if not refs:
        return {}
    return {h: p for h, p in store.conn.execute(
        f"SELECT hash, prompt FROM system_prompts WHERE hash IN ({','.join('?' * len(refs))}) ORDER BY hash", refs)}




def model_usage(store: Store, session_id: str) -> list[dict[str, Any]] | None:
    """The session's per-model usage rows (every column the store has, in a fixed order); None when the layout has
    no such table.

    A delete takes them with the session and Hermes keeps them nowhere else (the row holds only totals), so a
    backup carries them: import puts them back (hostile try 15, S17)."""
    if not store.has_table(USAGE_TABLE):
        return None
    order = ", ".join(str(n) for n in range(1, len(store.columns(USAGE_TABLE)) + 1))
    return store.rows(f"SELECT * FROM {USAGE_TABLE} WHERE session_id = ? ORDER BY {order}", (session_id,))


def write_jsonl_session(store: Store, session_id: str, write: Callable[[str], None], redact: bool,
                        kept_children: list[str] | None = None) -> int:
    """One line: the full session row, every stored message (flags included), the prompts it references
    (stores with content-addressed prompts), its per-model usage rows (stores with that table) and its timings;
    for a verified delete, the children it keeps and unlinks (*kept_children*), so that importing the line links
    them again."""
    from maint.export.fast_jsonl import PARSED_SQL, last_active_sql, resolved_columns

    row = session_row(store, session_id)
    prompts = referenced_prompts(store, row)
    usage = model_usage(store, session_id)
    resolved = resolved_columns(store)
    if resolved:  # as upstream's get_session writes it: the prompt the hash names, else the column
        row["system_prompt"] = store.scalar(f"SELECT {resolved['system_prompt']} FROM sessions s WHERE s.id = ?",
                                            (session_id,))
    if redact:
        row = redact_row(row)
        prompts = None if prompts is None else {h: redact_value(p) for h, p in prompts.items()}
        usage = None if usage is None else [redact_row(u) for u in usage]
    head = _dumps(row)
    if len(row):  # Hermes's export_all: last_active after the row, before the messages
        last = store.scalar(f"SELECT {last_active_sql(store, '?1')}", (session_id,))
        if redact:
            last = redact_text(last) if last.__class__ is str else redact_bytes(last) if last.__class__ is bytes \
                else last
        write(head[:-1] + ', "last_active": ' + _dumps(last) + ', "messages": [')
    else:
        write('{"messages": [')
    timings = Timings()
    n = 0
    for msg in iter_messages(store, session_id):
        timings.add(msg)
        write(("," if n else "") + _message_json(store, redact_row(msg) if redact else msg, PARSED_SQL))
        n += 1
    tail = "" if prompts is None else ', "system_prompts": ' + _dumps(prompts)
    if usage is not None:
        tail += ', "model_usage": ' + _dumps(usage)
    if kept_children is not None:
        tail += ', "kept_children": ' + _dumps(kept_children)
    write("]" + tail + ', "timings": ' + _dumps(timings.block()) + "}\n")
    return n


def _message_json(store: Store, msg: dict[str, Any], parsed_sql: dict[str, str]) -> str:
    """A message as Hermes's export writes it: ``tool_calls`` and multimodal ``content`` as the JSON they hold
    (minified by SQLite, the same call the SQL-built lines make), or the stored string where that is not
    plain JSON."""
    parsed = {}
    for col, sql in parsed_sql.items():
        value = msg.get(col)
        if value.__class__ is str and value:
            out = store.scalar(sql, (value,))
            if out is not None:
                parsed[col] = out
    if not parsed:
        return _dumps(msg)
    return "{" + ", ".join(f"{_dumps(k)}: {parsed[k] if k in parsed else _dumps(v)}" for k, v in msg.items()) + "}"


def iter_user_prompts(store: Store, session_id: str, redact: bool) -> Iterator[dict[str, Any]]:
    index = 0
    for msg in iter_messages(store, session_id, display=True):
        content = msg.get("content")
        if isinstance(content, bytes):  # a prompt stored as a BLOB: the text it holds
            content = content.decode("utf-8", "replace")
        if msg.get("role") != "user" or not isinstance(content, str):
            continue
        text = redact_text(content) if redact else content
        yield {"session_id": session_id, "index": index, "timestamp": msg.get("timestamp"), "text": text}
        index += 1


# -- documents (md / qmd / html) ----------------------------------------------------------------

def display_messages(store: Store, ids: Iterable[str], redact: bool) -> Iterator[dict[str, Any]]:
    for sid in ids:
        for msg in iter_messages(store, sid, display=True):
            if msg.get("role") == "system":
                continue
            yield redact_row(msg) if redact else msg


def render_document(store: Store, fmt: str, lineage_ids: list[str], write: Callable[[str], None],
                    redact: bool, session_id: str, exported_at: str) -> int:
    """One md/qmd document for a session (or a whole compression lineage); returns messages written."""
    messages = display_messages(store, lineage_ids, redact)
    if fmt == "prompts.md":  # count what the document shows: the prompts
        messages = (m for m in messages if m.get("role") == "user")
    counter = _Counter(messages)
    meta = session_row(store, session_id)
    if redact:
        meta = redact_row(meta)
    template = environment().get_template(f"session.{fmt}.j2")
    for chunk in template.generate(session=meta, lineage_ids=lineage_ids, messages=counter,
                                   exported_at=exported_at):
        write(chunk)
    return counter.count


def render_html(store: Store, session_ids: Iterable[str], write: Callable[[str], None], redact: bool) -> int:
    counter = _Counter([])
    metas = [redact_row(session_row(store, sid)) if redact else session_row(store, sid) for sid in session_ids]

    def messages_of(sid: str) -> Iterator[dict[str, Any]]:
        counter.iterable = display_messages(store, [sid], redact)
        yield from counter

    template = environment().get_template("export.html.j2")
    for chunk in template.generate(sessions=metas, messages_of=messages_of, exported_at=iso_time(time.time())):
        write(chunk)
    return counter.count


class _Counter:
    """Iterates and counts, so a template can stream rows while we learn how many it wrote."""

    def __init__(self, iterable: Iterable[dict[str, Any]]):
        self.iterable, self.count = iterable, 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for item in self.iterable:
            self.count += 1
            yield item


# -- Claude Code trace --------------------------------------------------------------------------

def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        try:
            parsed = json_text.loads(content) if content.startswith("[") else None
        except ValueError:  # not JSON, or nested past json_text.MAX_DEPTH
            parsed = None
        if isinstance(parsed, list):
            content = parsed
        else:
            return [{"type": "text", "text": content}]
    out = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, dict) and part.get("type") == "text":
            out.append({"type": "text", "text": part.get("text", "")})
        elif isinstance(part, dict) and part.get("type") in ("image_url", "image"):
            out.append({"type": "text", "text": "[image omitted]"})
        else:
            out.append({"type": "text", "text": _dumps(part)})
    return out


def _stable_id(call: dict[str, Any]) -> str:
    """An id for a tool call stored without one, derived from the call itself so re-exports agree."""
    return hashlib.sha256(_dumps(call).encode("utf-8")).hexdigest()[:16]


def _tool_uses(raw: Any) -> list[dict[str, Any]]:
    try:
        calls = json_text.loads(raw) if isinstance(raw, str) else raw
    except ValueError:  # not JSON, or nested past json_text.MAX_DEPTH
        return []
    out = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        fn = call.get("function") or {}
        args = fn.get("arguments")
        try:
            parsed = json_text.loads(args) if isinstance(args, str) and args.strip() else (args or {})
        except ValueError:  # not JSON, or nested past json_text.MAX_DEPTH
            parsed = {"_raw": args}
        out.append({"type": "tool_use", "id": call.get("id") or f"toolu_{_stable_id(call)}",
                    "name": fn.get("name") or call.get("name") or "tool", "input": parsed})
    return out


def _redact_message(message: dict[str, Any]) -> dict[str, Any]:
    """Every string a trace message carries from the store: text, tool input (key by key, so
    ``{"password": ...}`` is masked by its name), tool names and ids, tool output, model."""
    content = message["content"]
    out = {**message, "content": redact_value(content) if isinstance(content, str)
           else [_redact_block(block) for block in content]}
    if "model" in message:
        out["model"] = redact_value(message["model"])
    return out


def _redact_block(block: dict[str, Any]) -> dict[str, Any]:
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": redact_value(block["text"])}
    if kind == "tool_use":
        return {"type": "tool_use", "id": redact_value(block["id"]), "name": redact_value(block["name"]),
                "input": redact_value(block["input"])}
    return {"type": kind, "tool_use_id": redact_value(block["tool_use_id"]), "content": redact_value(block["content"])}


def write_trace(store: Store, session: SessionInfo, write: Callable[[str], None], redact: bool) -> int:
    """Claude Code JSONL, the shape the Hugging Face Agent Trace Viewer detects.

    uuids are derived from the session and message ids, so the same store renders the same trace.
    With *redact*, every string field that comes from the store is redacted: text, tool input and
    output, tool names and ids, model, cwd, branch and session id. The rest (uuids, timestamps,
    types) we generate.
    """
    parent = None
    n = 0
    common = {"isSidechain": False, "userType": "external", "cwd": session.cwd or "", "sessionId": session.id,
              "version": "hermes-agent", "gitBranch": session.git_branch or ""}
    if redact:
        common.update(cwd=redact_text(common["cwd"]), sessionId=redact_text(session.id),
                      gitBranch=redact_text(common["gitBranch"]))
    for msg in iter_messages(store, session.id, display=True):
        role = msg.get("role")
        if role == "system":
            continue
        if redact:  # a BLOB is redacted as the text it holds, before it is shown as its repr
            msg = {k: redact_bytes(v) if v.__class__ is bytes else v for k, v in msg.items()}
        turn = str(uuid.uuid5(uuid.NAMESPACE_URL, f"hermes:{session.id}:{msg.get('id')}"))
        entry = {"parentUuid": parent, **common, "uuid": turn, "timestamp": iso_time(msg.get("timestamp"))}
        if role == "assistant":
            blocks = _blocks(msg.get("content")) + _tool_uses(msg.get("tool_calls"))
            entry.update(type="assistant", message={"role": "assistant", "model": session.model or "unknown",
                                                    "content": blocks or [{"type": "text", "text": ""}]})
        elif role == "tool":
            content = msg.get("content") if isinstance(msg.get("content"), str) else _dumps(msg.get("content"))
            entry.update(type="user", message={"role": "user", "content": [{
                "type": "tool_result", "tool_use_id": msg.get("tool_call_id") or msg.get("tool_name") or "tool",
                "content": content}]})
        else:
            content = msg.get("content")
            body: Any = content if isinstance(content, str) else _blocks(content)
            entry.update(type="user", message={"role": "user", "content": body})
        if redact:
            entry["message"] = _redact_message(entry["message"])
        write(_dumps(entry) + "\n")
        parent = turn
        n += 1
    return n
