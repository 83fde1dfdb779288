"""Issue 26's leak classes (and those of later hostile tries, tests.secret_corpus.hostile_round_5 to 12)
through every export format: each class's cases are stored the way Hermes stores them (a prompt, a
tool call's arguments, a tool result, a reply; a BLOB for the BLOB class) and exported with --redact
in jsonl, md, qmd, html, trace and --only user-prompts (jsonl and md). Unredacted, the same export
holds every secret, so no assertion here passes for want of data."""

import json
from collections import defaultdict

import pytest

from maint.export.redact import MASK
from tests.secret_corpus import (
    hostile_round_5,
    hostile_round_6,
    hostile_round_7,
    hostile_round_8,
    hostile_round_9,
    hostile_round_10,
    hostile_round_11,
    hostile_round_12,
    leak_classes,
)
from tests.storegen import StoreBuilder

CLASSES: dict[str, list] = defaultdict(list)
for _case in (leak_classes() + hostile_round_5() + hostile_round_6() + hostile_round_7() + hostile_round_8()
              + hostile_round_9() + hostile_round_10() + hostile_round_11() + hostile_round_12()):
    CLASSES[_case.family].append(_case)

FORMATS = {
    "jsonl": ("--format", "jsonl"), "md": ("--format", "md"), "qmd": ("--format", "qmd"),
    "html": ("--format", "html"), "trace": ("--format", "trace"), "user-prompts": ("--only", "user-prompts"),
    "user-prompts-md": ("--only", "user-prompts", "--format", "md"),
}


def _arguments(text: str) -> str:
    """A tool call's arguments: the case's own JSON object when it is one (keys included), else a file
    the tool writes."""
    try:
        if isinstance(json.loads(text), dict):
            return text
    except ValueError:
        pass
    return json.dumps({"path": "notes.txt", "content": text})


@pytest.fixture(scope="module")
def class_store(tmp_path_factory):
    db = tmp_path_factory.mktemp("classes") / "state.db"
    with StoreBuilder(db) as b:
        for family, cases in CLASSES.items():
            sid = f"class-{family}"
            b.session(sid, messages=0, title=f"leak class {family}")
            rows = []
            for n, case in enumerate(cases):
                stored = case.text.encode() if case.blob else case.text
                call = f"call_{n:04d}abcdefghijklmnopqr"
                calls = case.text if case.text.startswith('[{"id"') else json.dumps(
                    [{"id": call, "type": "function", "function": {"name": "write_file",
                                                                   "arguments": _arguments(case.text)}}])
                rows += [("user", stored, None, None), ("assistant", "on it", calls, None),
                         ("tool", stored, None, call), ("assistant", stored, None, None)]
            for i, (role, content, calls, call_id) in enumerate(rows):
                b.raw.execute("INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, tool_name, "
                              "timestamp) VALUES (?,?,?,?,?,?,?)",
                              (sid, role, content, calls, call_id, "write_file" if role == "tool" else None,
                               b.now - 1000 + i))
    return db


def _export(cli, tmp_path, db, family, fmt, redact):
    out = tmp_path / f"{fmt}-{int(redact)}"
    out.mkdir()
    args = FORMATS[fmt]
    target = out if fmt in ("md", "qmd", "user-prompts-md") else out / "export.txt"
    result = cli("export", target, "--db", db, "--session-id", f"class-{family}",
                 "--redact" if redact else "--no-redact", *args)
    assert result.exit_code == 0, result.output
    return "".join(p.read_text(encoding="utf-8") for p in sorted(out.iterdir()))


def _visible(text: str) -> str:
    """The export as a reader sees it: JSON and HTML escapes undone (a secret must not survive either way)."""
    import html

    unescaped = html.unescape(text)
    for _ in range(4):
        unescaped = unescaped.replace('\\"', '"').replace("\\\\", "\\").replace("\\n", "\n")
    return text + "\n" + unescaped


def _leaked(secret: str, text: str) -> bool:
    width = min(len(secret), 12)
    return any(secret[i:i + width] in text for i in range(len(secret) - width + 1))


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("family", list(CLASSES))
def test_every_leak_class_is_masked_in_every_format(cli, tmp_path, class_store, family, fmt):
    secrets = [p for c in CLASSES[family] for p in c.parts]
    plain = _visible(_export(cli, tmp_path, class_store, family, fmt, redact=False))
    assert [s for s in secrets if not _leaked(s, plain)] == []  # teeth: every secret is in the plain export
    redacted = _export(cli, tmp_path, class_store, family, fmt, redact=True)
    assert MASK in redacted
    assert [s for s in secrets if _leaked(s, _visible(redacted))] == []
    if fmt in ("jsonl", "trace", "user-prompts"):
        for line in redacted.splitlines():
            json.loads(line)  # masks keep JSON valid


def test_trace_tool_input_keys_are_masked(cli, tmp_path, class_store):
    out = _export(cli, tmp_path, class_store, "json-key", "trace", redact=True)
    inputs = [b["input"] for line in out.splitlines() for b in json.loads(line)["message"]["content"]
              if isinstance(b, dict) and b.get("type") == "tool_use"]
    assert {"tokens": {MASK: "repo-a", MASK + "'": "repo-b"}} in inputs
