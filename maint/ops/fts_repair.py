"""repair-fts: check both search indexes, and rebuild a damaged one once nobody else holds the store.

What a prune stopped midway left (Hermes's FTS5 settings held, messages taken out of an index
ahead of their delete) is put back first: the index may be whole again after that. The checks and
the rebuild are :mod:`maint.ops.fts`, which the prune itself uses; this flow, which uses the
prune, stands above both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from maint.errors import MaintError
from maint.ops import fts
from maint.ops.prune import interrupted, recover_interrupted
from maint.store.connection import open_store
from maint.store.holders import STOP_HERMES, refuse_if_held

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget


def repair_store(target: StoreTarget, op: Operator, *, apply: bool = False, force: bool = False) -> dict[str, Any]:
    """``hermes-maint repair-fts`` on one store: the check; with *apply*, what a stopped prune left put back
    and each damaged index rebuilt in one transaction, once no process holds the store and the operator agrees."""
    with open_store(target.path, readonly=True) as store:
        damaged = fts.damaged(store)
        checked = store.fts_tables
        external = [t for t in checked if not fts.is_inline(store, t) and t not in damaged]
        left = interrupted(store)
    content_note = None
    if external:
        found, content_note = fts.check_content_of(target.path)
        damaged.update({t: lines for t, lines in found.items() if t not in damaged})
    report = {"apply": apply, "dry_run": not apply, "checked": checked, "damaged": damaged, "rebuilt": [],
              "how": {}, "interrupted": left, "recovered": False, "content_check": content_note or "ran"}
    if not apply or not (damaged or left):
        return report
    refuse_if_held(target.path, force=force, doing="rebuild its search index", advice=STOP_HERMES)
    op.confirm(f"Repair the search indexes of {target.path}?", [
        *[f"  {t}: {lines[0]}" for t, lines in damaged.items()],
        *[f"  left by a prune stopped midway: {what}" for what in left],
        "What a stopped prune left is put back first; each damaged index is then rebuilt in one "
        "transaction; no message changes."])
    with open_store(target.path) as store:
        if left:
            recover_interrupted(store)  # the messages it took out go back, so the index may be whole again
            report["recovered"] = True
            damaged = fts.damaged(store, content=True)
            report["damaged"] = damaged
        for table in damaged:
            report["how"][table] = fts.rebuild(store, table)
            report["rebuilt"].append(table)
        still = fts.damaged(store, content=True)
    if still:
        raise MaintError(f"{target.path}: rebuilt {', '.join(report['rebuilt'])} but the check still fails "
                         f"({next(iter(still.values()))[0]}); restore a backup")
    return report
