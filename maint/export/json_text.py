"""JSON text parsed alike wherever it is parsed: nested at most as deep as SQLite reads it.

Python's parser gives up at its recursion limit less the caller's own stack depth, so one
``tool_calls`` text could parse in one place and not in another (this process and the export's
second process, or SQLite's ``json_valid`` and the Python renderer) when nested about 1,000 deep.
Here JSON nested deeper than SQLite's limit (:data:`MAX_DEPTH`) is not JSON, and JSON within it
parses whatever the stack depth.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any

MAX_DEPTH = 1000  # SQLite's JSON_MAX_DEPTH: json_valid() takes 1,000 nested arrays, not 1,001
SHALLOW = 100  # brackets in all, or levels: parsed in place, whatever the caller's stack
_SPECIAL = re.compile(r'[\\"\[\]{}]')


def depth(text: str) -> int:
    """How deep the arrays and objects of *text* nest (brackets inside strings do not count), in one
    pass over its quotes, backslashes and brackets: linear, however the text is cut off."""
    level = deepest = 0
    in_string, skip = False, -1
    for m in _SPECIAL.finditer(text):
        at = m.start()
        if at == skip:
            continue  # the character a backslash escapes
        c = m.group()
        if in_string:
            if c == "\\":
                skip = at + 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            level += 1
            deepest = max(deepest, level)
        elif c in "]}":
            level -= 1
    return deepest


def loads(text: str | bytes) -> Any:
    """``json.loads``, with the nesting rule above; ValueError for what is not JSON by it.

    Deep JSON (past :data:`SHALLOW` levels) is parsed in a thread of its own, whose stack holds
    nothing else, under a recursion limit raised for it: the caller's own depth (which C calls in
    between make larger than its Python frames show) never decides. ``NaN`` and ``Infinity`` are
    taken, as Python's parser always took them (the renderer's output is kept as it was).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if text.count("[") + text.count("{") <= SHALLOW:
        return json.loads(text)  # nests too little to meet any recursion limit: the usual way
    nesting = depth(text)
    if nesting > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH}")
    if nesting <= SHALLOW:
        return json.loads(text)
    return _in_deep_thread(lambda: json.loads(text), nesting)


def dumps(value: Any, nesting: int, **options: Any) -> str:
    """``json.dumps(value, **options)`` of a value nested *nesting* levels deep (as :func:`loads` gave
    it): deep values are encoded the way :func:`loads` parses them, in a thread of their own."""
    if nesting <= SHALLOW:
        return json.dumps(value, **options)
    return _in_deep_thread(lambda: json.dumps(value, **options), nesting)


def _in_deep_thread(work: Any, nesting: int) -> Any:
    result: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)

    with _raised_limit(nesting + 200):
        worker = threading.Thread(target=run, name="json-deep")
        worker.start()
        worker.join()
    if failure:
        raise failure[0]
    return result[0]


_LIMIT_LOCK = threading.Lock()
_ASKED: list[int] = []  # limits asked for by the deep parses under way
_SAVED: list[int] = []  # the limit before the first of them


@contextlib.contextmanager
def _raised_limit(needed: int) -> Iterator[None]:
    """The interpreter's recursion limit (one for all threads) at least *needed* while any parse needs it,
    then back to what it was."""
    with _LIMIT_LOCK:
        if not _ASKED:
            _SAVED[:] = [sys.getrecursionlimit()]
        _ASKED.append(needed)
        sys.setrecursionlimit(max(_SAVED[0], *_ASKED))
    try:
        yield
    finally:
        with _LIMIT_LOCK:
            _ASKED.remove(needed)
            sys.setrecursionlimit(max(_SAVED[0], *_ASKED) if _ASKED else _SAVED[0])
