"""Redaction: recall over generated credentials, no damage to look-alikes, Hermes's own redactor as an
oracle, readable masks, and every export format masking what the store holds."""

import json

import pytest

from maint.export.redact import MASK, name_kind, redact_bytes, redact_row, redact_text, redact_value
from tests.conftest import run_subprocess
from tests.secret_corpus import _tool_call, clean_texts, phone_cases, secret_cases
from tests.storegen import StoreBuilder

CASES = secret_cases()
CLEAN = clean_texts()


def leaked(secret: str, text: str) -> bool:
    """True if any 12-character stretch of *secret* (all of it when shorter) survives in *text*."""
    width = min(len(secret), 12)
    return any(secret[i:i + width] in text for i in range(len(secret) - width + 1))


def redacted(case) -> str:
    """What the redactor leaves of a corpus case (a BLOB case as the text of its redacted bytes)."""
    if case.blob:
        return redact_bytes(case.text.encode()).decode("utf-8", "replace")
    return redact_text(case.text)


def test_corpus_is_broad_and_holds_its_secrets():
    assert len(CASES) >= 150
    assert len({c.family for c in CASES}) >= 40
    assert len(CLEAN) >= 100
    assert all(c.secret and all(p in c.text for p in c.parts) for c in CASES)  # else "masked" would be vacuous


def test_recall_is_complete():
    missed = [(c.family, c.text[:100]) for c in CASES if any(leaked(p, redacted(c)) for p in c.parts)]
    assert missed == []


def test_clean_look_alikes_are_left_exactly_as_they_are():
    damaged = [(t[:80], redact_text(t)[:80]) for t in CLEAN if redact_text(t) != t]
    assert damaged == []


def _place_rule_matches(text: str) -> set[str]:
    """The costlier place rules of the redactor whose own pattern matches *text* (the Python scan each does)."""
    from maint.export import redact as r

    low = text.lower()
    found = {name for name, regex in (("prose_is", r._PROSE_IS), ("prose_colon", r._PROSE_COLON),
                                      ("pgpass", r._PGPASS), ("creds_slash", r._CREDS_SLASH),
                                      ("apart_hint", r._APART_HINT), ("secret_arg", r._SECRET_ARG_CALL),
                                      ("basic_encode", r._BASIC_ENCODE)) if regex.search(text)}
    found |= {name for name, regex in (("arg_hint", r._ARG_HINT), ("cmd_hint", r._CMD_HINT),
                                       ("local_ascii", r._LOCAL_ASCII)) if regex.search(low)}
    return found | {"csv" + d for d, regex in r._CSV_HEADS.items() if regex.search(text)}


def test_the_place_rules_pass_ascii_texts_only_to_the_rules_that_can_match():
    """place_rules (one RE2 pass) names every costlier place rule that can match an ASCII text, and the hints
    exactly as their searches of the lower-cased text say; a text that is not ASCII goes to every rule."""
    from maint.export.redact import PLACE_RULES, place_rules

    texts = [c.text for c in CASES] + CLEAN + [_tool_call("w", {"content": c.text}) for c in CASES]
    texts += [line for t in texts for line in t.splitlines()]
    ascii_texts = [t for t in texts if t.isascii()]
    assert len(ascii_texts) >= 1000
    for t in ascii_texts:
        can, found = place_rules(t), _place_rule_matches(t)
        assert found <= can, t
        assert {h for h in can if h.endswith("_hint") or h == "local_ascii"} == \
            {h for h in found if h.endswith("_hint") or h == "local_ascii"}, t
    assert all(set(found) <= set(PLACE_RULES) for found in map(_place_rule_matches, ascii_texts))
    assert place_rules("ein Passwort für die Büchse") == frozenset(PLACE_RULES)


def test_a_text_none_of_the_costlier_place_rules_can_match_is_not_scanned_by_them(monkeypatch):
    """Counted: the gate lets the text through to the place rules (a machine, a token named), but none of the
    costlier ones can match it, so none of them scans it (each was a Python scan of the whole text)."""
    from maint.export import redact as r

    scans = []

    class Counted:
        def __init__(self, name, regex):
            self.name, self.regex = name, regex

        def __getattr__(self, attr):
            scans.append(self.name)
            return getattr(self.regex, attr)

    for name in ("_PROSE_IS", "_PROSE_COLON", "_PGPASS", "_CREDS_SLASH", "_ARG_HINT", "_CMD_HINT", "_LOCAL_ASCII",
                 "_APART_HINT", "_SECRET_ARG_CALL", "_BASIC_ENCODE"):
        monkeypatch.setattr(r, name, Counted(name, getattr(r, name)))
    monkeypatch.setattr(r, "_CSV_HEADS", {d: Counted("csv", x) for d, x in r._CSV_HEADS.items()})
    text = "the build machine lost its token again so we rebuilt it and then the next machine too"
    assert r.gate(text.encode()) == [r.PLACES]
    assert redact_text(text) == text
    assert scans == []
    # a call with a quoted argument (the commonest code the gate lets through): none of the call rules scans it
    call = 'owner = lookup(repo, "main") or "nobody"; print(owner, len(owner))'
    assert r.gate(call.encode()) == [r.PLACES]
    assert redact_text(call) == call
    assert scans == []
    assert redact_text("the build machine lost its token again; the token is Xq7-pLm2-Rt9z-Vw4k") != \
        "the build machine lost its token again; the token is Xq7-pLm2-Rt9z-Vw4k"
    assert "_PROSE_IS" in scans


def test_everything_hermes_masks_we_mask_too():
    """The oracle: Hermes 0.19.0's redact_sensitive_text over the same texts. force=True makes it mask
    whatever HERMES_REDACT_SECRETS says (the switch is read once, at import), as Hermes's own trace
    upload and export --redact call it."""
    from agent.redact import redact_sensitive_text

    cases = CASES + phone_cases()
    hermes_masked = [c for c in cases if not c.blob and c.secret not in redact_sensitive_text(c.text, force=True)]
    assert len(hermes_masked) >= 100  # the oracle has teeth
    ours_missed = [(c.family, c.text[:100]) for c in hermes_masked if leaked(c.secret, redact_text(c.text))]
    assert ours_missed == []


@pytest.mark.parametrize(("text", "expected"), [
    ("OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "OPENAI_API_KEY=[REDACTED]"),
    ("export GITHUB_TOKEN=ghp_1234567890abcdefghijklmnopqrstuvwxyzAB", "export GITHUB_TOKEN=[REDACTED]"),
    ("postgres://admin:hunter2pass@db.local:5432/app", "postgres://admin:[REDACTED]@db.local:5432/app"),
    ("Authorization: Bearer abcdefghijklmnop1234567890", "Authorization: Bearer [REDACTED]"),
    ('{"password": "Sup3rS3cret!", "token_count": 5}', '{"password": "[REDACTED]", "token_count": 5}'),
    ("db:\n  password: hunter2x\n  host: db", "db:\n  password: [REDACTED]\n  host: db"),
    ("psql --password s3cr3t!x -h db", "psql --password [REDACTED] -h db"),
    ("GET https://api.example.com/items/42?token=abc123XYZ456def789&page=2",
     "GET https://api.example.com/items/42?token=[REDACTED]&page=2"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nxyz\n-----END RSA PRIVATE KEY-----",
     "-----BEGIN RSA PRIVATE KEY-----[REDACTED]-----END RSA PRIVATE KEY-----"),
    ("https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/aBcDeFgHiJkLmNoPqRsTuVwX",
     "https://hooks.slack.com/services/[REDACTED]"),
    ("my password is hunter2!", "my password is [REDACTED]!"),
    ("AccountName=logs;AccountKey=abc+def/ghi012==;EndpointSuffix=core.windows.net",
     "AccountName=logs;AccountKey=[REDACTED];EndpointSuffix=core.windows.net"),
])
def test_mask_keeps_the_structure_readable(text, expected):
    assert redact_text(text) == expected


def test_json_text_stays_json():
    """Masks sit inside values, never across a quote or a backslash: stored JSON (tool calls whose
    arguments are JSON in a JSON string, tool results) still parses, with the same keys."""
    args = json.dumps({"command": "export OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z && run",
                       "password": "hunter2!x", "headers": {"Authorization": "Bearer abcdefghijklmnop123456"}})
    stored = json.dumps([{"id": "call_Ab3dEf6hIj9kLm2nOp5qRs8t", "type": "function",
                          "function": {"name": "terminal", "arguments": args}}])
    texts = [stored] + [c.text for c in CASES if _is_json(c.text)]
    assert len(texts) > 5
    for text in texts:
        out = redact_text(text)
        masked, original = _shape(json.loads(out)), _shape(json.loads(text))
        assert _keys_masked(masked, original) == masked
    out = json.loads(redact_text(stored))
    inner = json.loads(out[0]["function"]["arguments"])
    assert out[0]["id"] == "call_Ab3dEf6hIj9kLm2nOp5qRs8t"
    assert inner == {"command": "export OPENAI_API_KEY=[REDACTED] && run", "password": MASK,
                     "headers": {"Authorization": "Bearer [REDACTED]"}}


def _keys_masked(masked, original):
    """*original* with the keys that *masked* masks replaced by "*"."""
    if isinstance(original, list) and isinstance(masked, list) and len(original) == len(masked):
        return [(("*" if m[0] == "*" else o[0]), _keys_masked(m[1], o[1]))
                if isinstance(o, tuple) and isinstance(m, tuple) else _keys_masked(m, o)
                for m, o in zip(masked, original)]
    return original


def _is_json(text):
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def _shape(value):
    """Types and keys, in order; a key that holds a mask stands for the key it masked."""
    if isinstance(value, dict):
        return [("*" if MASK in k else k, _shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def test_redact_value_masks_by_key_name():
    value = {"password": "hunter2x", "nested": [{"api_key": "abc123def456ghi"}], "token_count": 5,
             "id": "call_abc", "Authorization": "Basic dXNlcjpwYXNzd29yZA==", "note": "uses ghp_" + "a1" * 18}
    assert redact_value(value) == {"password": MASK, "nested": [{"api_key": MASK}], "token_count": 5,
                                   "id": "call_abc", "Authorization": "Basic [REDACTED]", "note": "uses [REDACTED]"}


@pytest.mark.parametrize(("name", "kind"), [
    ("OPENAI_API_KEY", "token"), ("apiKey", "token"), ("x-api-key", "token"), ("PGPASSWORD", "password"),
    ("client_secret", "password"), ("SECRET_KEY_BASE", "password"), ("_authToken", "token"), ("NPM_AUTH", "token"),
    ("key", "random"), ("auth", "random"), ("Authorization", "auth"), ("Cookie", "line"), ("key_material", "token"),
    ("token_count", None), ("MAX_TOKENS", None), ("KEY_PATH", None), ("password_reset", None), ("session_key", None),
    ("primary_key", None), ("public_key", None), ("private_key_id", "token"), ("author", None), ("keyboard", None),
    ("forKey", None), ("default_signer", "token"), ("signer_alg", None),
])
def test_name_kind(name, kind):
    assert name_kind(name) == kind


def test_redact_row_keeps_linking_ids_and_numbers():
    secretish = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
    row = {"id": 7, "session_id": secretish, "tool_call_id": secretish, "parent_session_id": secretish,
           "content": f"key {secretish}", "title": f"deploy {secretish}", "timestamp": 1.5, "token_count": None,
           "model_config": json.dumps({"api_key": "abc123def456ghi", "temperature": 0.2})}
    out = redact_row(row)
    assert {k: out[k] for k in ("id", "session_id", "tool_call_id", "parent_session_id", "timestamp",
                                "token_count")} == {k: row[k] for k in ("id", "session_id", "tool_call_id",
                                                                         "parent_session_id", "timestamp",
                                                                         "token_count")}
    assert out["content"] == "key [REDACTED]" and out["title"] == "deploy [REDACTED]"
    assert json.loads(out["model_config"]) == {"api_key": MASK, "temperature": 0.2}
    assert row["content"] == f"key {secretish}"  # the input row is not changed


# -- every export format, through the real CLI --------------------------------------------------------

GH = "ghp_" + "Zx9" * 12
OPENAI = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYz8Q2v4Lk1a"
PW = "Hunter2!xq7"
BEARER = "b3arerT0kenAbCdEfGhIjKlMn"
PEM_LINE = "MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
SECRETS = (GH, OPENAI, AWS, PW, BEARER, PEM_LINE)


@pytest.fixture
def secret_store(tmp_path, layout):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout=layout) as b:
        b.session("leaky", messages=0, title=f"rotate {GH}", cwd=f"/home/u/{GH}",
                  model_config={"api_key": OPENAI}, git_branch=f"fix/{GH}")
        rows = [("user", f"export OPENAI_API_KEY={OPENAI}\nplease deploy", None, None),
                ("assistant", "running it", json.dumps([{"id": "call_Q1w2E3r4T5y6U7i8O9p0", "type": "function",
                                                         "function": {"name": "terminal", "arguments": json.dumps(
                                                             {"command": f"curl -H 'Authorization: Bearer {BEARER}' "
                                                                         "https://api.example.com",
                                                              "password": PW})}}]), None),
                ("tool", json.dumps({"output": f"aws_secret_access_key = {AWS}\n-----BEGIN PRIVATE KEY-----\n"
                                               f"{PEM_LINE}\n-----END PRIVATE KEY-----\n", "exit_code": 0}),
                 None, "call_Q1w2E3r4T5y6U7i8O9p0"),
                ("assistant", f"done; the password is {PW}", None, None)]
        for i, (role, content, calls, call_id) in enumerate(rows):
            b.raw.execute("INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, tool_name, "
                          "timestamp) VALUES (?,?,?,?,?,?,?)",
                          ("leaky", role, content, calls, call_id, "terminal" if role == "tool" else None,
                           b.now - 100 + i))
    return db


@pytest.mark.parametrize("args", [("--format", "jsonl"), ("--format", "md"), ("--format", "qmd"),
                                  ("--format", "html"), ("--format", "trace"), ("--only", "user-prompts"),
                                  ("--only", "user-prompts", "--format", "md")])
def test_every_format_masks_what_the_store_holds(secret_store, tmp_path, args):
    out = tmp_path / "out"
    out.mkdir()
    target = out / "x.txt" if args[-1] in ("jsonl", "html", "trace", "user-prompts") else out
    r = run_subprocess("export", target, "--db", secret_store, "--session-id", "leaky", "--redact", *args)
    assert r.returncode == 0, r.stderr
    text = "".join(p.read_text() for p in sorted(out.iterdir()))
    assert MASK in text
    assert [s for s in SECRETS if s in text] == []
    raw = run_subprocess("export", "-", "--db", secret_store, "--session-id", "leaky", "--no-redact", *args)
    if args[0] == "--format" and args[1] in ("jsonl", "trace"):
        assert OPENAI in raw.stdout and PW in raw.stdout  # the test has teeth: unredacted, they are there


def test_jsonl_redacted_keeps_ids_and_valid_json(secret_store):
    r = run_subprocess("export", "-", "--db", secret_store, "--session-id", "leaky", "--redact")
    (rec,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert rec["id"] == "leaky" and rec["title"] == "rotate [REDACTED]"
    calls = next(m["tool_calls"] for m in rec["messages"] if m["tool_calls"])
    assert isinstance(calls, list)  # Hermes's export format: the parsed list, redacted inside
    assert calls[0]["id"] == "call_Q1w2E3r4T5y6U7i8O9p0"
    assert json.loads(calls[0]["function"]["arguments"])["password"] == MASK
    assert any(m["tool_call_id"] == "call_Q1w2E3r4T5y6U7i8O9p0" for m in rec["messages"])


def test_trace_redacts_every_string_field_by_default(secret_store):
    r = run_subprocess("export", "-", "--db", secret_store, "--session-id", "leaky", "--format", "trace")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert lines and all(GH not in json.dumps(x) for x in lines)  # cwd and gitBranch included
    assert lines[0]["cwd"] == "/home/u/[REDACTED]" and lines[0]["gitBranch"] == "fix/[REDACTED]"
    assert all(x["sessionId"] == "leaky" for x in lines)
    tool_use = next(b for x in lines for b in x["message"]["content"] if isinstance(b, dict)
                    and b.get("type") == "tool_use")
    assert tool_use["id"] == "call_Q1w2E3r4T5y6U7i8O9p0" and tool_use["input"]["password"] == MASK
    assert lines[1]["parentUuid"] == lines[0]["uuid"]


def test_positions_hold_in_text_that_changes_length_when_lower_cased():
    """"İ" lower-cases to two characters: spans must still land on the secret, not beside it."""
    token = "ghp_" + "Zx9" * 12
    text = f"İİ İstanbul ログ: password=hunter2x と {token} 日本語"
    assert redact_text(text) == "İİ İstanbul ログ: password=[REDACTED] と [REDACTED] 日本語"


@pytest.mark.parametrize("text", [
    "a" * 200_000 + "=value", "a." * 100_000 + "=value", "key" * 60_000, "keyKEY-" * 30_000, "token: " * 30_000,
    "password=" + "x" * 200_000, "-----BEGIN RSA PRIVATE KEY-----" + "A" * 200_000, "https://" + "a" * 100_000 + "@",
    "--password " * 20_000, "--a" * 60_000, "\\\"password\\\": \\\"" * 20_000, "sk-" * 60_000, "+1234567" * 20_000,
    '"a" ' * 50_000, "TOKEN = (" + '\n "a"' * 50_000, f"key: {GH}\n" + "Xy9Zw8Vu7Ts6Rq5P\n" * 20_000,
    "aGVsbG8gd29ybGQsIHRoaXMgaXMg" * 10_000, "echo " + "c2stcHJvai1BYjNkRWY2aElq " * 10_000,
    "Private-Lines: 9999\n" + "QUJD\n" * 50_000,
])
def test_adversarial_text_stays_linear(text):
    """The redactor runs on every message of an export: no input may make it backtrack for long."""
    import time

    started = time.process_time()
    redact_text(text)
    assert time.process_time() - started < 2.0


def test_other_draws_of_the_corpus():
    """The same generators with other seeds: other bodies, other contexts. Rules tuned to one draw
    of the corpus would miss here."""
    cases = [c for seed in range(1, 11) for c in secret_cases(seed)]
    missed = [(c.family, c.text[:100]) for c in cases if any(leaked(p, redacted(c)) for p in c.parts)]
    assert missed == []
    damaged = [t[:80] for seed in range(1, 11) for t in clean_texts(seed) if redact_text(t) != t]
    assert damaged == []


# -- issue 26: the leak classes, each by its design ---------------------------------------------------

GH2 = "ghp_" + "Qw8" * 12


def test_secret_keys_are_masked_and_stay_distinct_keys():
    value = {"tokens": {GH: "repo-a", GH2: "repo-b"}, "token_count": 3}
    assert redact_value(value) == {"tokens": {MASK: "repo-a", MASK + "'": "repo-b"}, "token_count": 3}
    assert json.loads(redact_text(json.dumps(value))) == {"tokens": {MASK: "repo-a", MASK + "'": "repo-b"},
                                                          "token_count": 3}


def test_json_escaped_twice_is_redacted_through_its_decoded_values():
    config = json.dumps({"db": {"password": PW, "host": "db"}}, indent=2)
    stored = json.dumps([{"id": "call_1", "type": "function", "function": {
        "name": "write_file", "arguments": json.dumps({"path": "config.json", "content": config})}}])
    assert '\\\\\\"password\\\\\\"' in stored  # the shape that leaked: \\\"password\\\"
    out = json.loads(redact_text(stored))
    args = json.loads(out[0]["function"]["arguments"])
    assert json.loads(args["content"]) == {"db": {"password": MASK, "host": "db"}}
    assert args["content"].startswith('{\n  "db"')  # re-encoded in its own layout
    assert out[0]["id"] == "call_1"


def test_unicode_escapes_cannot_hide_a_token_or_a_name():
    token = OPENAI[1:]
    assert redact_text('{"output": "key=\\u0073' + token + '"}') == '{"output": "key=[REDACTED]"}'
    assert json.loads(redact_text('{"p\\u0061ssword": "' + PW + '"}')) == {"password": MASK}
    assert redact_text('print("\\u0073' + token + '")') == 'print("[REDACTED]")'  # not JSON: the run decoded


def test_blobs_are_redacted_as_the_text_they_hold_keeping_their_other_bytes():
    blob = b"\xff\xfe head OPENAI_API_KEY=" + OPENAI.encode() + b" tail \x00\x01"
    assert redact_bytes(blob) == b"\xff\xfe head OPENAI_API_KEY=" + MASK.encode() + b" tail \x00\x01"
    assert redact_bytes(b"clean \xff bytes") == b"clean \xff bytes"
    row = redact_row({"id": 1, "content": blob, "tool_calls": json.dumps({"password": PW}).encode()})
    assert OPENAI.encode() not in row["content"] and json.loads(row["tool_calls"]) == {"password": MASK}


@pytest.mark.parametrize(("text", "expected"), [
    ("password: |\n  Hunter2!xq7\nhost: db", "password: |\n  [REDACTED]\nhost: db"),
    ("db:\n  password: >-\n    Hunter2!xq7\n    more\n  host: db", "db:\n  password: >-\n    [REDACTED]\n  host: db"),
    ("smtp:\n  password:\n    Hunter2!xq7\n  user: mailer", "smtp:\n  password:\n    [REDACTED]\n  user: mailer"),
])
def test_yaml_block_scalars_and_next_line_values(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("<password>Hunter2!xq7</password>", "<password>[REDACTED]</password>"),
    ("<db:secret>Hunter2!xq7</db:secret>", "<db:secret>[REDACTED]</db:secret>"),
    ('<add key="ApiKey" value="Hunter2!xq7" />', '<add key="ApiKey" value="[REDACTED]" />'),
    ('<entry key="db.password">Hunter2!xq7</entry>', '<entry key="db.password">[REDACTED]</entry>'),
    ('<user name="admin" password="Hunter2!xq7"/>', '<user name="admin" password="[REDACTED]"/>'),
    ("CREATE USER 'app'@'%' IDENTIFIED BY 'Hunter2!xq7';", "CREATE USER 'app'@'%' IDENTIFIED BY '[REDACTED]';"),
    ("ALTER USER app WITH PASSWORD 'Hunter2!xq7';", "ALTER USER app WITH PASSWORD '[REDACTED]';"),
    ("ALTER USER scott IDENTIFIED BY tiger99;", "ALTER USER scott IDENTIFIED BY [REDACTED];"),
    ('os.environ["DB_PASSWORD"] = "Hunter2!xq7"', 'os.environ["DB_PASSWORD"] = "[REDACTED]"'),
    ("cfg['api_key'] = 'Hunter2!xq7'", "cfg['api_key'] = '[REDACTED]'"),
    ("define('DB_PASSWORD', 'Hunter2!xq7');", "define('DB_PASSWORD', '[REDACTED]');"),
    ('os.Setenv("GITHUB_TOKEN", "Hunter2!xq7")', 'os.Setenv("GITHUB_TOKEN", "[REDACTED]")'),
    ('$password = "Hunter2!xq7";', '$password = "[REDACTED]";'),
    ('const apiKey: string = "Hunter2!xq7";', 'const apiKey: string = "[REDACTED]";'),
    ('db_password <- "Hunter2!xq7"', 'db_password <- "[REDACTED]"'),
    ("PASSWORD('Hunter2!xq7')", "PASSWORD('[REDACTED]')"),
    ("db.password Hunter2!xq7", "db.password [REDACTED]"),
    ("ENV DB_PASSWORD Hunter2!xq7", "ENV DB_PASSWORD [REDACTED]"),
    ("requirepass Hunter2!xq7", "requirepass [REDACTED]"),
    ('token = """Hunter2!xq7"""', 'token = """[REDACTED]"""'),
    ("env:\n  - name: DB_PASSWORD\n    value: Hunter2!xq7", "env:\n  - name: DB_PASSWORD\n    value: [REDACTED]"),
])
def test_assignment_shapes_by_the_secret_like_name(text, expected):
    assert redact_text(text) == expected


def test_name_value_pairs_in_json_mask_the_value_by_the_name():
    value = [{"ParameterKey": "DbPassword", "ParameterValue": PW}, {"name": "LOG_LEVEL", "value": "debug"}]
    assert redact_value(value) == [{"ParameterKey": "DbPassword", "ParameterValue": MASK},
                                   {"name": "LOG_LEVEL", "value": "debug"}]


def test_hostile_depth_never_raises():
    """JSON as deep as the parser takes, JSON strings nested in JSON strings, and Python structures
    deeper than the recursion limit: redacted, never a RecursionError."""
    deep = "[" * 999 + json.dumps({"password": PW}) + "]" * 999
    out = redact_text(deep)
    assert PW not in out and out.count("[") == deep.count("[") + out.count(MASK) == 1000
    too_deep = "[" * 1500 + json.dumps({"password": PW}) + "]" * 1500
    assert PW not in redact_text(too_deep)  # not JSON by our rule: redacted as text
    nested = json.dumps({"password": PW})
    for _ in range(12):
        nested = json.dumps({"content": nested})
    assert PW not in redact_text(nested)
    value: object = {"password": PW}
    for _ in range(50_000):
        value = [value]
    out = redact_value(value)
    for _ in range(50_000):
        out = out[0]
    assert out == {"password": MASK}


def test_recall_is_complete_inside_tool_call_arguments():
    """Every case again, as a file a tool call writes: its text JSON-encoded twice in the stored
    tool_calls. The raw text decides whether to decode, so this checks that nothing escaping can
    change (line ends, quotes, backslashes) hides a case from that decision."""
    missed = []
    for c in CASES:
        if c.blob:
            continue
        stored = json.dumps([{"id": "call_1", "type": "function", "function": {
            "name": "write_file", "arguments": json.dumps({"path": "f.txt", "content": c.text})}}])
        out = redact_text(stored)
        inner = json.loads(json.loads(out)[0]["function"]["arguments"])["content"]
        if any(leaked(p, inner) for p in c.parts):
            missed.append((c.family, c.text[:100]))
    assert missed == []


# -- a fifth hostile try: the classes that still leaked ----------------------------------------------

def test_base64_that_decodes_to_a_secret_is_masked_whole():
    import base64

    wrapped = base64.b64encode(OPENAI.encode()).decode()
    assert redact_text(f"echo {wrapped} | base64 -d > ~/.openai") == "echo [REDACTED] | base64 -d > ~/.openai"
    harmless = base64.b64encode(b"hello world, this is a harmless sentence").decode()
    assert redact_text(f"echo {harmless} | base64 -d") == f"echo {harmless} | base64 -d"
    env = base64.b64encode(f"DEBUG=1\nGITHUB_TOKEN={GH}\n".encode()).decode()
    assert json.loads(redact_text(json.dumps({"data": env}))) == {"data": MASK}


def test_putty_private_key_lines_are_masked():
    ppk = ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: me\nPublic-Lines: 1\n"
           "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\nPrivate-Lines: 2\n"
           f"{PEM_LINE}\n{PEM_LINE[::-1]}\nPrivate-MAC: {'ab' * 32}\n")
    out = redact_text(ppk)
    assert PEM_LINE not in out and PEM_LINE[::-1] not in out
    assert out.startswith(ppk[:ppk.index("Private-Lines")]) and "Private-Lines: 2\n[REDACTED]\nPrivate-MAC" in out


@pytest.mark.parametrize("space", ["\u00a0", "\u2009", "\u202f", "\u3000", "\u2007"])
def test_unicode_spaces_around_the_separator(space):
    assert redact_text(f"token{space}={space}{PW}") == f"token{space}={space}[REDACTED]"
    assert redact_text(f"token_count{space}={space}512") == f"token_count{space}={space}512"


@pytest.mark.parametrize(("text", "expected"), [
    ("the stripe key is sk_live_51AbCdEfGhIjKlMn\nOpQrStUvWxYz0123 (wrapped)\nthanks",
     "the stripe key is [REDACTED]\n[REDACTED] (wrapped)\nthanks"),
    (f"my token: {GH}\nthanks", f"my token: {MASK}\nthanks"),
    ('export OPENAI_API_KEY="sk-proj-Ab3dEf6hIj9kLm2nOp5q\\\nRs8tUv1wXy4zAb3dEf6h"',
     'export OPENAI_API_KEY="[REDACTED]"'),
    ('TOKEN = (\n    "ghp_osCes0tjCOubh4BlNS"\n    "99WtLwQk2mZ7xYpR3s"\n)',
     'TOKEN = (\n    "[REDACTED]"\n    "[REDACTED]"\n)'),
    ('const apiKey = "sk-proj-Ab3dEf6hIj9kLm2n" +\n  "Op5qRs8tUv1wXy4z";',
     'const apiKey = "[REDACTED]" +\n  "[REDACTED]";'),
    ('h = {"X-Token": "ghp_osCes0tjCOubh4BlNS" "99WtLwQk2mZ7xYpR3s"}', 'h = {"X-Token": "[REDACTED]" "[REDACTED]"}'),
    ('names = (\n    "alpha"\n    "beta"\n)', 'names = (\n    "alpha"\n    "beta"\n)'),
    ('f(\n  "ghp_osCes0tjCOubh4BlNS"\n  "99WtLwQk2mZ7xYpR3s"\n)', 'f(\n  "[REDACTED]"\n  "[REDACTED]"\n)'),
    # not a continuation: a CSV row's first field, a short value's next line, two string statements
    ("user,api_key\nalice,Xy9Zw8Vu7Ts6Rq5P\nbob2024x,Ab3dEf6hIj9kLm2n",
     "user,api_key\nalice,[REDACTED]\nbob2024x,[REDACTED]"),
    ("password: hunter2\nAb3dEf6hIj9kLm2n is the build id", "password: [REDACTED]\nAb3dEf6hIj9kLm2n is the build id"),
    ('PASSWORD = "Xy9Zw8Vu7Ts6"\n"echo done"', 'PASSWORD = "[REDACTED]"\n"echo done"'),
])
def test_a_secret_split_across_lines_is_masked_in_every_part(text, expected):
    assert redact_text(text) == expected


def test_an_escaped_tab_in_tool_call_arguments_hides_no_separator():
    stored = _tool_call("write_file", {"path": "app.conf", "content": f"password\t=\t{PW}"})
    assert "password\\\\t=\\\\t" in stored  # the raw text the gate sees
    args = json.loads(json.loads(redact_text(stored))[0]["function"]["arguments"])
    assert args["content"] == f"password\t=\t{MASK}"


def test_gcp_private_key_id_is_masked_by_name():
    key_id = "3b7c482eb6c4f46ec73da5940c281008f4b019a2"
    out = json.loads(redact_text(json.dumps({"type": "service_account", "private_key_id": key_id,
                                             "client_id": "1234567890"}, indent=2)))
    assert out == {"type": "service_account", "private_key_id": MASK, "client_id": "1234567890"}
    assert redact_text("primary_key=True") == "primary_key=True"


def test_the_gate_sets_aside_keyword_arguments_that_pass_on_their_own_name():
    """OpenAI(api_key=api_key) is code the rules skip; the gate's second look lets such a text pass
    untouched, and still lets through one that holds a value beside it."""
    from maint.export.redact import gate

    assert not gate(b"client = OpenAI(api_key=api_key)\n") and not gate(b"f(token = token, retries=3)")
    for text in ("f(api_key=api_key, password=hunter2x)", "f(apikey=my_key)", "cfg.api_key=api_key)"):
        assert gate(text.encode()), text
    assert redact_text("f(api_key=api_key, password=hunter2x)") == "f(api_key=api_key, password=[REDACTED])"
    assert redact_text("f(apikey=my_key)") == "f(apikey=[REDACTED])"


def test_a_tool_call_id_that_holds_a_keyword_is_no_name_and_does_not_pass_the_gate():
    """call_…Pw…", "type": a tool call id is on every tool call and its result, and one in 40 spells a keyword
    by chance (the gate's "NAME", value). No rule reads it as a name, and the gate's second look sets it
    aside; a name beside it, or an id that is part of a longer name, still counts."""
    from maint.export.redact import gate

    ids = ("call_abcPwXyz0123456789abcd", "toolu_01AbCdEfGhTokenIjKlMn9P")
    for call_id in ids:
        stored = json.dumps([{"id": call_id, "type": "function",
                              "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}}])
        assert not gate(stored.encode()), call_id
        assert name_kind(call_id) is None
        assert redact_text(f'"{call_id}", "Xk3!dLq9zz"') == f'"{call_id}", "Xk3!dLq9zz"'
    assert redact_text(f'{{"id": "{ids[0]}", "db_password": "Xk3!dLq9zz"}}') == \
        f'{{"id": "{ids[0]}", "db_password": "{MASK}"}}'
    for text in (f'"my.{ids[0]}", "Xk3!dLq9zz"', f'"{ids[0]}_pw", "Xk3!dLq9zz"', '"call_password", "Xk3!dLq9zz"',
                 '"call_abcdefghijklmnopqrstPw", "Xk3!dLq9zz"'):  # a longer name; no digit: not an id
        assert gate(text.encode()), text
        assert MASK in redact_text(text), text


def test_the_gate_takes_escapes_that_spell_ascii_or_a_unicode_space_only():
    from maint.export.redact import gate

    assert not gate(json.dumps({"query": "ログを確認して"}).encode())  # \u30ed…: no token is spelt so
    assert gate(b'{"output": "key=\\u0073k-proj-Ab3dEf6hIj9kLm2nOp5q"}')
    stored = json.dumps({"content": f"token\u00a0=\u00a0{PW}"})
    assert "\\u00a0" in stored and gate(stored.encode())
    assert json.loads(redact_text(stored)) == {"content": f"token\u00a0=\u00a0{MASK}"}


def test_an_argument_list_is_read_as_the_command_line_it_spells():
    """["docker", "login", "-p", PW]: no word names the password, the command line does (hostile try 6)."""
    args = {"argv": ["docker", "login", "-u", "ci", "-p", "vPBwt.ATX5OtfF8", "registry.acme.io"]}
    assert redact_value(args) == {"argv": ["docker", "login", "-u", "ci", "-p", MASK, "registry.acme.io"]}
    calls = json.dumps([{"function": {"name": "terminal", "arguments": json.dumps(args)}}])
    assert "vPBwt.ATX5OtfF8" in calls and "vPBwt.ATX5OtfF8" not in redact_text(calls)
    clean = {"argv": ["ls", "-la", "/tmp", "--color", "auto"]}
    assert redact_value(clean) is clean


def test_an_aws_key_id_as_a_json_key_names_its_secret():
    secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY1"
    out = redact_value({"AKIAZ3MQ7RVW2XK4PL6N": secret})
    assert list(out.values()) == [MASK] and list(out) == [MASK]


# -- an eighth hostile try: values with no name, or away from it; look-alikes that name a secret -----------

@pytest.mark.parametrize(("text", "expected"), [
    ("curl -X POST https://hooks.zapier.com/hooks/catch/4472676/5j2gkk/",
     "curl -X POST https://hooks.zapier.com/hooks/catch/[REDACTED]/"),
    ('sqlcmd -S sql01 -U sa -P Hunter2!xq7 -Q "SELECT 1"', 'sqlcmd -S sql01 -U sa -P [REDACTED] -Q "SELECT 1"'),
    ("snmpwalk -v3 -u mon -A Hunter2!xq7 -X Xk3!dLq9zz 10.0.0.1",
     "snmpwalk -v3 -u mon -A [REDACTED] -X [REDACTED] 10.0.0.1"),
    ("lftp -u backup,Hunter2!xq7 sftp://files", "lftp -u backup,[REDACTED] sftp://files"),
    ("username admin secret 0 Hunter2!xq7", "username admin secret 0 [REDACTED]"),
    ("kubectl create secret generic db --from-literal=user=app --from-literal=root=Hunter2!xq7",
     "kubectl create secret generic db --from-literal=user=app --from-literal=root=[REDACTED]"),
    ("restic backup /srv --password-file <(echo Hunter2!xq7)", "restic backup /srv --password-file <(echo [REDACTED])"),
    ('keychain.set("Hunter2!xq7", forKey: "apiToken")', 'keychain.set("[REDACTED]", forKey: "apiToken")'),
    ('.basic_auth("deploy", Some("Hunter2!xq7"))', '.basic_auth("deploy", Some("[REDACTED]"))'),
    ('echo "::add-mask::Hunter2!xq7"', 'echo "::add-mask::[REDACTED]"'),
    ("<name>fs.s3a.secret.key</name><value>Hunter2!xq7</value>",
     "<name>fs.s3a.secret.key</name><value>[REDACTED]</value>"),
    ("トークンは Hunter2xq7 です", "トークンは [REDACTED] です"),
    ("STRIPE_SECRET_KEY=sk_live_51HqLy2AbCdEfGhIjKlMnOpQrStUvWxYz", "STRIPE_SECRET_KEY=[REDACTED]"),
])
def test_values_found_by_their_place(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize("text", [
    "username admin secret 5 $1$mERr$hx5rVt7rPNoS4wqbXKX7m0", 'keychain.string(forKey: "apiToken")',
    'echo "::add-mask::$TOKEN"', "PGPASSWORD=${DB_PASSWORD:?unset}", "val pw = findViewById<EditText>(R.id.password)",
    "Create a TOKEN at https://github.com/settings/tokens",
    "STRIPE_PUBLISHABLE_KEY=pk_live_51HqLy2AbCdEfGhIjKlMnOpQrStUvWxYz",
])
def test_names_and_places_that_hold_no_secret_stay(text):
    assert redact_text(text) == text


# -- a ninth hostile try (redact-hostile-2): each class by its design, the mask keeping the structure ---------------

@pytest.mark.parametrize(("text", "expected"), [
    # a collection named as secrets: each value directly in it, not its harmless neighbours
    ("passwords:\n  - Hunter2!xq7\n  - Xk3!dLq9zz\nhost: db", "passwords:\n  - [REDACTED]\n  - [REDACTED]\nhost: db"),
    ("secrets:\n  stripe: Hunter2!xq7\n  region: eu-west-1\n  user: app",
     "secrets:\n  stripe: [REDACTED]\n  region: eu-west-1\n  user: app"),
    ('[secrets]\nstripe = "Hunter2!xq7"\nregion = "eu"\n[server]\nport = "Xk3!dLq9zz"',
     '[secrets]\nstripe = "[REDACTED]"\nregion = "eu"\n[server]\nport = "Xk3!dLq9zz"'),
    ('{"api_keys": ["Ab3dEf6hIj9kLm2nOp5q", null], "user": "Xk3!dLq9zz"}',
     '{"api_keys": ["[REDACTED]", null], "user": "Xk3!dLq9zz"}'),
    # syntax: a YAML tag stays, the value after it goes; a multi-line string keeps its lines
    ("smtp:\n  password: !!binary SHVudGVyMiF4cTc=", "smtp:\n  password: !!binary [REDACTED]"),
    ("unseal_key = '''\nHunter2!xq7\n'''", "unseal_key = '''\n[REDACTED]\n'''"),
    ('var dbPassword string = "Hunter2!xq7"', 'var dbPassword string = "[REDACTED]"'),
    ("PASSWORD = %q(Hunter2!xq7)", "PASSWORD = %q([REDACTED])"),
    # command lines: -p after -u in one command, a port is no password
    ("twine upload -u acme -p Hunter2!xq7 dist/*", "twine upload -u acme -p [REDACTED] dist/*"),
    ("docker run -u 1000 -p 8080:80 nginx && twine upload -u acme -p Hunter2!xq7",
     "docker run -u 1000 -p 8080:80 nginx && twine upload -u acme -p [REDACTED]"),
    ("mysql -u root -p'Hunter2!xq7' shop", "mysql -u root -p'[REDACTED]' shop"),
    # by position: the secret beside its access key id, the password after host and user
    ("new AWS.Credentials('AKIAIOSFODNN7EXAMPLE', 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY')",
     "new AWS.Credentials('[REDACTED]', '[REDACTED]')"),
    ("ssh.connect('10.0.0.5', 22, 'root', 'Hunter2!xq7')", "ssh.connect('10.0.0.5', 22, 'root', '[REDACTED]')"),
    # a value in four spaced groups, whole; postfix's sasl_passwd; recovery codes under their heading
    ("gmail app password: abcd efgh ijkl mnop", "gmail app password: [REDACTED]"),
    ("[smtp.gmail.com]:587 alerts@acme.io:mgrfohsjgelmmqcb", "[smtp.gmail.com]:587 alerts@acme.io:[REDACTED]"),
    ("GitHub recovery codes\nme4tr-svs0z\nvq29l-f562h\n\nKeep them safe.",
     "GitHub recovery codes\n[REDACTED]\n[REDACTED]\n\nKeep them safe."),
])
def test_round_9_classes_keep_the_structure(text, expected):
    assert redact_text(text) == expected


def test_a_collection_named_as_secrets_in_a_trace_tool_input():
    """The trace redacts tool input value by value (redact_value): a list or a map named as secrets is judged there
    as in JSON text, and its harmless neighbours stay."""
    value = {"passwords": {"prod": "Hunter2!xq7", "dev_host": "db.local"}, "api_keys": ["Ab3dEf6hIj9kLm2nOp5q"],
             "tokens": {"input": 1200, "model": "gpt-4o-2024-08-06"}}
    assert redact_value(value) == {"passwords": {"prod": MASK, "dev_host": "db.local"}, "api_keys": [MASK],
                                   "tokens": {"input": 1200, "model": "gpt-4o-2024-08-06"}}


def test_round_10_shape_prefixes_pass_the_gate_only_with_a_body():
    """Round 10's vendor prefixes in the gate: a bare token passes it, but an escaped line end before a name
    ("\\napi_key" spells napi_), a git SHA or a timestamp that starts with 00 (Okta's prefix) do not, so the
    gate's second look still sets OpenAI(api_key=api_key) aside."""
    from maint.export.redact import gate

    for text in ('{"output": "x = 1\\napi_key = os.environ[\'K\']\\nclient = OpenAI(api_key=api_key)\\n"}',
                 "commit 003f3053f479b7421bfed0d36b7521aa00c1d2e3", '"updated": "2026-11-30T10:00:00.000000Z"',
                 "ship it as-is", "live_stream"):
        assert not gate(text.encode()), text
    for token in ("napi_" + "k3v9" * 16, "00FNwf63Hz5mmAfPi54vx7vE_C5DMQCEPMKq0dIPhy", "u+SgZlCfAl3-s4C8RUx7",
                  "as-RUsLJTth0sUEBhiPOcSVVp"):
        assert gate(f"ran it with {token} and got HTTP 200".encode()), token
        assert token not in redact_text(f"ran it with {token} and got HTTP 200")


@pytest.mark.parametrize(("text", "expected"), [
    (" id | name | api_key\n----+------+----------\n  1 | acme | dYcJUcH288bqX7SIgIkXKGuzJNowKMSX\n  2 | globex | \n",
     " id | name | api_key\n----+------+----------\n  1 | acme | [REDACTED]\n  2 | globex | \n"),
    ("-[ RECORD 1 ]-----\nid       | 2\nusername | billing\npassword | x87PJkS78Lrv~+.n~x\nport     | 587\n",
     "-[ RECORD 1 ]-----\nid       | 2\nusername | billing\npassword | [REDACTED]\nport     | 587\n"),
    ("│ NAME       │ VALUE       │\n├────────────┼─────────────┤\n│ SMTP_USER  │ mailer      │\n"
     "│ SMTP_PASS  │ o0ZRv2Y!E!j │\n",
     "│ NAME       │ VALUE       │\n├────────────┼─────────────┤\n│ SMTP_USER  │ mailer      │\n"
     "│ SMTP_PASS  │ [REDACTED] │\n"),
    ("Host         Port    User      Password                  Database\ndb.example   25060   doadmin   "
     "AVNS_FKNMLBQJ6fN2ZXzHsg5  defaultdb\n",
     "Host         Port    User      Password                  Database\ndb.example   25060   doadmin   "
     "[REDACTED]  defaultdb\n"),
])
def test_output_tables_mask_the_cells_a_secret_header_or_name_names(text, expected):
    """Round 12: an output table is read from a cell naming a secret; only the cells it names are masked, the rows,
    bars and alignment stay (a header over its column, a NAME/VALUE header, a two-column table of bars)."""
    assert redact_text(text) == expected
