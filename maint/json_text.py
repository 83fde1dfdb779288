"""Stored JSON text parsed alike wherever it is parsed, and never deeper than :data:`MAX_DEPTH`.

Python's parser recurses, so JSON nested near its recursion limit parses or fails depending on how
deep the caller's own stack is. Hermes's own JSON never nests more than a few levels; text nested
deeper than :data:`MAX_DEPTH` is therefore not taken as JSON anywhere (it stays the text it is), and
what is within the bound parses from any caller. The depth is found in one linear pass before parsing.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 100
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
    """``json.loads``, or ValueError for text that is not JSON or nests deeper than :data:`MAX_DEPTH`.

    ``NaN`` and ``Infinity`` are taken, as Python's parser takes them.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if text.count("[") + text.count("{") > MAX_DEPTH and depth(text) > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return json.loads(text)
