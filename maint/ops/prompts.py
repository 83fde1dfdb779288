"""repair-prompts: find stored system prompts degraded by older builds, and clear them.

Older gateways could save a maintenance agent's reduced-toolset prompt over a
live session's. A prompt is *verified degraded* only with positive evidence:
it lacks the Skill Safety guidance while the session's stored tool pin
includes ``skill_manage`` (the guidance is always emitted with that tool).
Anything less is reported as unverifiable and never changed. Clearing sets the
prompt to NULL on purpose: Hermes rebuilds a healthy one on the next turn.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from maint import json_text
from maint.store.connection import Store, open_store
from maint.store.holders import STOP_HERMES, refuse_if_held
from maint.store.sqlutil import IdList
from maint.store.text_check import readable_id_sql

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget

SKILL_SAFETY_MARKER = "## Skill Safety"  # also matches upstream's "## Skill Safety Rule" heading


def pin_tool_names(store: Store, raw: Any) -> list[str] | None:
    """The tool names a session's stored pin lists, or None when there is no readable pin.

    The pin is ``sessions.tool_names``: a hash into the content-addressed ``system_prompts``
    table, or (older rows) the JSON inline. Its JSON is a list of names, or a versioned
    object ``{"tools": [...]}`` whose entries are names or tool definitions
    (``{"function": {"name": ...}}``). Any other shape is unreadable.
    """
    if not isinstance(raw, str) or not raw.strip():
        return None
    text = store.system_prompt(raw) or raw
    try:
        pin = json_text.loads(text)
    except (TypeError, ValueError):
        return None
    tools = pin.get("tools") if isinstance(pin, dict) else pin
    if not isinstance(tools, list):
        return None
    names = []
    for item in tools:
        if isinstance(item, str):
            name = item
        elif isinstance(item, dict) and isinstance(item.get("function"), dict):
            name = item["function"].get("name")
        else:
            return None
        if not isinstance(name, str) or not name:
            return None
        names.append(name)
    return names


def stored_prompt(store: Store, row: dict) -> str | None:
    if row.get("system_prompt"):
        return _text(row["system_prompt"])
    return _text(store.system_prompt(row.get("system_prompt_hash")))


def _text(value: Any) -> str | None:
    """A prompt stored as a BLOB or a number (a hand-edited row) read as the text it holds."""
    if value is None or value.__class__ is str:
        return value
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


class Findings(Sequence[dict]):
    """``{id, prompt_chars, reason}`` entries packed into columns: a scan of a big store can find
    thousands, and the report streams them (:func:`maint.commands.output.write_json`)."""

    def __init__(self) -> None:
        self.ids = IdList()
        self._chars = array("q")
        self._reason = array("H")
        self._reasons: list[str] = []

    def append(self, entry: dict) -> None:
        if entry["reason"] not in self._reasons:
            self._reasons.append(entry["reason"])
        self.ids.append(entry["id"])
        self._chars.append(entry["prompt_chars"])
        self._reason.append(self._reasons.index(entry["reason"]))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return {"id": self.ids[index], "prompt_chars": self._chars[index], "reason": self._reasons[self._reason[index]]}


@dataclass
class PromptScan:
    verified: Findings = field(default_factory=Findings)
    unverifiable: Findings = field(default_factory=Findings)


def _cols(store: Store) -> str:
    """The columns the scan reads; a text that is not UTF-8 reads as NULL, ``unreadable`` saying so (hostile try 9,
    L7: one such prompt stopped the scan of the whole store)."""
    cols, bad = ["id"], []
    for c in ("system_prompt", "system_prompt_hash", "tool_names"):
        if store.has_column("sessions", c):
            test = f"(typeof({c}) = 'text' AND maint_not_utf8(CAST({c} AS BLOB)))"
            cols.append(f"iif({test}, NULL, {c}) AS {c}")
            bad.append(test)
        else:
            cols.append(f"NULL AS {c}")
    cols.append(f"({' OR '.join(bad) or '0'}) AS unreadable")
    return ", ".join(cols)


UNREADABLE = "its stored prompt or tool pin is not UTF-8 text; left alone"


# Verdicts kept per distinct prompt hash and tool pin during one scan (both are content-addressed: a hash is
# its text). A store of 400,000 sessions shares a few dozen prompts and pins; reading one per session was two
# queries and a JSON parse per row, half the daily doctor's time at 200k sessions.
SCAN_CACHE = 4096


def _remember(cache: dict, key: Any, value: Any) -> Any:
    if len(cache) >= SCAN_CACHE:
        cache.clear()  # bounded whatever the store holds
    cache[key] = value
    return value


def _unfit_prompts(store: Store) -> list[str]:
    """The hashes of the stored prompts a session pointing at would be reported for (no Skill Safety guidance;
    or text that is not UTF-8, which the scan reads and stops at as before). A hash that is not UTF-8 is no
    session's: Python could not read it."""
    if not store.has_table("system_prompts") or not store.has_column("system_prompts", "prompt"):
        return []
    unfit = []
    for digest, prompt, unreadable in store.conn.execute(
            "SELECT hash, iif(typeof(prompt) = 'text' AND maint_not_utf8(CAST(prompt AS BLOB)), NULL, prompt), "
            "typeof(prompt) = 'text' AND maint_not_utf8(CAST(prompt AS BLOB)) FROM system_prompts "
            "WHERE typeof(hash) = 'text' AND NOT maint_not_utf8(CAST(hash AS BLOB))"):
        text = (_text(prompt) or "").strip()
        if unreadable or (text and SKILL_SAFETY_MARKER not in text):
            unfit.append(digest)
    return unfit


def _may_report(store: Store) -> tuple[str, tuple]:
    """Which sessions the scan reads: those with an inline prompt, a prompt reference that is not text, or a
    reference to an unfit stored prompt. The others (pointing at a prompt with the guidance, or at none) have
    nothing to report: reading each of 420,000 rows to learn that was 2 of the daily doctor's 12 s."""
    if not store.has_column("sessions", "system_prompt_hash"):
        return "", ()
    inline = "s.system_prompt IS NOT NULL OR " if store.has_column("sessions", "system_prompt") else ""
    return (f" AND ({inline}(s.system_prompt_hash IS NOT NULL AND typeof(s.system_prompt_hash) <> 'text') "
            "OR s.system_prompt_hash IN (SELECT value FROM json_each(?)))", (json.dumps(_unfit_prompts(store)),))


def scan(store: Store) -> PromptScan:
    result = PromptScan()
    by_hash: dict[str, tuple[bool, int]] = {}  # prompt hash -> (nothing to report, prompt chars)
    by_pin: dict[str, tuple[str, ...] | None] = {}
    narrow, params = _may_report(store)
    for row in store.iter_rows(f"SELECT {_cols(store)} FROM sessions s WHERE {readable_id_sql('s')}{narrow} "
                               "ORDER BY id", params):
        digest = row.get("system_prompt_hash")
        if row["unreadable"]:
            result.unverifiable.append({"id": row["id"], "prompt_chars": 0, "reason": UNREADABLE})
            continue
        if row.get("system_prompt") or not isinstance(digest, str):
            prompt = (stored_prompt(store, row) or "").strip()
            fine, chars = not prompt or SKILL_SAFETY_MARKER in prompt, len(prompt)
        else:
            fine, chars = by_hash.get(digest) or _remember(by_hash, digest, _verdict(store, digest))
        if chars < 0:
            result.unverifiable.append({"id": row["id"], "prompt_chars": 0, "reason": UNREADABLE})
            continue
        if fine:
            continue
        entry = {"id": row["id"], "prompt_chars": chars}
        raw = row.get("tool_names")
        if isinstance(raw, str):
            names = by_pin[raw] if raw in by_pin else _remember(by_pin, raw, _names(store, raw))
        else:
            names = _names(store, raw)
        if names is not None and "skill_manage" in names:
            result.verified.append({**entry, "reason": "Skill Safety guidance missing while the tool pin "
                                                       "includes skill_manage"})
        elif names is None:
            result.unverifiable.append({**entry, "reason": "Skill Safety guidance missing but the tool pin is "
                                                           "absent or unreadable"})
        elif set(names) == {"memory"}:
            result.unverifiable.append({**entry, "reason": "memory-only tool pin may be a user toolset; clear it "
                                                           "explicitly by SESSION_ID"})
    return result


def _verdict(store: Store, digest: str) -> tuple[bool, int]:
    """(nothing to report, the prompt's length) of the stored prompt *digest*; (False, -1) when it is not UTF-8."""
    try:
        prompt = (_text(store.system_prompt(digest)) or "").strip()
    except UnicodeDecodeError:
        return False, -1
    return not prompt or SKILL_SAFETY_MARKER in prompt, len(prompt)


def _names(store: Store, raw: Any) -> tuple[str, ...] | None:
    names = pin_tool_names(store, raw)
    return None if names is None else tuple(names)


def clear_prompts(store: Store, ids: list[str]) -> list[str]:
    """NULL each prompt in its own short transaction; Hermes rebuilds it next turn."""
    cleared = []
    sets = ["system_prompt = NULL"]
    if store.has_column("sessions", "system_prompt_hash"):
        sets.append("system_prompt_hash = NULL")
    for sid in ids:
        with store.write() as conn:
            conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", (sid,))
            if store.conn.changes():
                cleared.append(sid)
    return cleared


def targeted(store: Store, ref: str, *, exact: bool = False) -> PromptScan:
    """One session named by the operator: its prompt is cleared whatever it says (if it has one). *exact*: a
    whole id only (a clear without a confirmation at a terminal)."""
    from maint.store.catalog import resolve_session

    sid = resolve_session(store, ref, exact=exact)
    row = store.rows(f"SELECT {_cols(store)} FROM sessions WHERE id = ?", (sid,))[0]
    try:
        prompt = None if row["unreadable"] else stored_prompt(store, row)
    except UnicodeDecodeError:  # the stored prompt it points at
        prompt = None
        row["unreadable"] = 1
    result = PromptScan()
    if prompt or row["unreadable"]:  # named by the operator: cleared, readable or not
        result.verified.append({"id": sid, "reason": "targeted clear", "prompt_chars": len(prompt or "")})
    return result


def repair_store(target: StoreTarget, op: Operator, *, session_id: str | None = None, apply: bool = False,
                 force: bool = False) -> dict[str, Any]:
    """``hermes-maint repair-prompts`` on one store: the scan (or the one session named); with *apply*, the
    verified prompts cleared once no process holds the store and the operator agrees."""
    with open_store(target.path, readonly=not apply) as store:
        # Without a confirmation at a terminal, a SESSION_ID must be a whole id, never a prefix.
        result = targeted(store, session_id, exact=apply and not op.asks) if session_id is not None else scan(store)
    ids = result.verified.ids
    cleared: list[str] = []
    if apply and ids:
        refuse_if_held(target.path, force=force, doing="repair", advice=STOP_HERMES)
        op.confirm(f"Clear {len(ids)} stored prompt(s) in {target.path}?",
                   [f"  {v['id']}  ({v['prompt_chars']} chars) - {v['reason']}" for v in result.verified])
        with open_store(target.path) as store:
            cleared = clear_prompts(store, ids)
    return {"store": str(target.path), "verified": ids, "unverifiable": result.unverifiable, "apply": apply,
            "cleared": cleared, "findings": result.verified}
