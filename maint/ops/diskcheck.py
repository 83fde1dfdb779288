"""The low-disk question, asked while ``sessions.auto_prune`` is absent from config.yaml.

Low means free < 2 GB, or free < 20 GB and under 10 % of the filesystem. The
estimate of what pruning would free is weighted by stored bytes, so many tiny
old messages do not inflate it; when pruning would not solve the problem we
say so plainly.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from maint import json_text
from maint.config import Config, set_session_key
from maint.flow import target_config
from maint.fmt import fmt_bytes
from maint.selection.filters import implicit_prune_filters
from maint.ops.prune import plan_prune, plan_stored_bytes
from maint.store.connection import Store, check_regular_file, open_store
from maint.store.runlock import RunLockHeld

if TYPE_CHECKING:
    from maint.store.targets import StoreTarget

GB = 10**9
PROMPT_KEY = "hermes_maint.autoprune_prompt"
LATER_S = 7 * 86400
SMALL_SHARE = 0.05  # history under 5 % of the disk: pruning will not fix a full disk


@dataclass
class DiskFigures:
    total: int
    free: int

    @property
    def low(self) -> bool:
        return self.free < 2 * GB or (self.free < 20 * GB and self.free < 0.10 * self.total)

    @property
    def shortfall(self) -> int:
        """Bytes to free before the disk is no longer low (0 when it is not)."""
        return max(0, int(max(2 * GB, min(20 * GB, 0.10 * self.total))) - self.free)


def disk_figures(path: Path, usage: Callable = shutil.disk_usage) -> DiskFigures:
    u = usage(path)
    return DiskFigures(total=u.total, free=u.free)


def estimate(store: Store, retention_days: int, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    plan = plan_prune(store, implicit_prune_filters(now, retention_days), now=now)
    return {"sessions": plan.sessions, "messages": plan.messages, "stored_bytes": plan_stored_bytes(store),
            "store_bytes": sum(store.file_sizes().values())}


def prompt_state(store: Store) -> dict[str, Any]:
    try:
        state = json_text.loads(store.get_meta(PROMPT_KEY) or "{}")
        return state if isinstance(state, dict) else {}
    except ValueError:
        return {}


def should_ask(cfg: Config, store: Store, figures: DiskFigures, now: float) -> bool:
    if cfg.has_session_key("auto_prune") or not figures.low:
        return False
    state = prompt_state(store)
    if state.get("later_until") and now < state["later_until"]:
        return False
    return not state.get("asked_at") or bool(state.get("later_until"))


def notice(figures: DiskFigures, est: dict[str, Any], retention_days: int) -> list[str]:
    lines = [f"Low disk space: {fmt_bytes(figures.free)} free of {fmt_bytes(figures.total)} "
             f"on the filesystem holding state.db."]
    if est["sessions"] == 0:
        lines.append(f"Pruning would not solve this: no ended session is older than {retention_days} days.")
    else:
        lines.append(f"Pruning sessions inactive for {retention_days} days would remove {est['sessions']} "
                     f"sessions, about {fmt_bytes(est['stored_bytes'])} of stored history.")
        if est["stored_bytes"] < figures.shortfall:
            # Pruning frees at most the prunable history; when that is short of what the disk lacks,
            # say so, whatever share of the disk the store holds.
            lines.append(f"That will not solve the disk problem: it frees about {fmt_bytes(est['stored_bytes'])}, "
                         f"and the disk needs about {fmt_bytes(figures.shortfall)} more free space; "
                         "look for what else fills it.")
        elif est["store_bytes"] < SMALL_SHARE * figures.total:
            lines.append("That will not solve the disk problem: the session history is a small share of "
                         "the disk.")
    lines.append("Pruning frees space inside state.db; `hermes-maint optimize` gives it back to the disk.")
    lines.append("Answer with: hermes-maint autoprune on | off | later   (status shows this again)")
    return lines


def record_asked(store: Store, now: float) -> None:
    state = prompt_state(store)
    state.update(asked_at=now, later_until=None)
    store.set_meta(PROMPT_KEY, json.dumps(state))


def answer(cfg: Config, store: Store | None, choice: str, now: float | None = None,
           store_path: Path | None = None) -> str:
    """Act on the operator's answer; *store_path* is the store whose config on/off edits (whose owner a root
    run writes it for)."""
    now = time.time() if now is None else now
    if choice == "on":
        set_session_key(cfg.path, "auto_prune", True, store=store_path)
        return f"sessions.auto_prune set to true in {cfg.path}"
    if choice == "off":
        set_session_key(cfg.path, "auto_prune", False, store=store_path)
        return f"sessions.auto_prune set to false in {cfg.path}; you will not be asked again"
    if choice == "later":
        if store is not None:
            state = prompt_state(store)
            state.update(later_until=now + LATER_S)
            store.set_meta(PROMPT_KEY, json.dumps(state))
        return "will ask again in one week"
    raise ValueError(choice)


def low_disk_notice(db: Path, cfg: Config, retention_days: int, now: float | None = None) -> list[str]:
    """The low-disk question's lines, once per store (recorded as asked); [] when not due.

    *retention_days* is what the sweep prunes past: the estimate says what that would free.
    """
    now = time.time() if now is None else now
    try:
        store = open_store(db)
    except RunLockHeld:  # another run of ours has the store; it asks, or the next run will
        return []
    with store:
        figures = disk_figures(db.parent)
        if not should_ask(cfg, store, figures, now):
            return []
        lines = notice(figures, estimate(store, retention_days, now), retention_days)
        record_asked(store, now)
    return lines


def autoprune_store(target: StoreTarget, choice: str) -> dict[str, Any]:
    """``hermes-maint autoprune on|off|later|status`` for one store: the answer's message, or the status.

    on/off edit the config.yaml of the store's Hermes home, as every command finds it: a --db store must
    exist (a mistyped path would otherwise fall back to $HERMES_HOME's config), and a profile or home folder
    is never made by it (see :func:`maint.config.set_session_key`)."""
    if choice in ("on", "off") and target.explicit:
        check_regular_file(target.path)  # "no such store", as every other command says
    cfg = target_config(target)
    if choice in ("on", "off"):  # each Hermes home has its own config.yaml
        return {"choice": choice, "config": str(cfg.path), "message": answer(cfg, None, choice,
                                                                             store_path=target.path)}
    if choice == "later":
        with open_store(target.path) as store:
            return {"choice": "later", "message": answer(cfg, store, "later")}
    state = {}
    if target.path.exists() or target.explicit:  # no default store yet: the config and disk alone
        with open_store(target.path, readonly=True) as store:
            state = prompt_state(store)
    figures = disk_figures(target.path.parent if target.path.exists() else cfg.path.parent)
    return {"auto_prune": cfg.session("auto_prune"), "configured": cfg.has_session_key("auto_prune"),
            "config": str(cfg.path), "disk_free": figures.free, "disk_total": figures.total,
            "low_disk": figures.low, "prompt": state}
