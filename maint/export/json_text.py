"""JSON text parsed alike wherever it is parsed: nested at most as deep as SQLite reads it.

Python's parser gives up at its recursion limit less the caller's own stack depth, so one
``tool_calls`` text could parse in one place and not in another (this process and the export's
second process, or SQLite's ``json_valid`` and the Python renderer) when nested about 1,000 deep.
Here JSON nested deeper than SQLite's limit (:data:`MAX_DEPTH`) is not JSON, and JSON within it
parses whatever the stack depth.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

MAX_DEPTH = 1000  # SQLite's JSON_MAX_DEPTH: json_valid() takes 1,000 nested arrays, not 1,001
SHALLOW = 100  # brackets in all: parsed straight away, whatever the stack depth
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
    """``json.loads``, with the nesting rule above; ValueError for what is not JSON by it."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if text.count("[") + text.count("{") <= SHALLOW:
        return json.loads(text)  # nests too little to meet any recursion limit: the usual way
    nesting = depth(text)
    if nesting > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH}")
    frames, frame = 0, sys._getframe()
    while frame is not None:
        frames, frame = frames + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, frames + nesting + 100))
    try:
        return json.loads(text)
    finally:
        sys.setrecursionlimit(limit)
