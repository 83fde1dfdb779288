"""Every text a run writes to stdout and stderr has its control characters escaped, once, for every
command (issue 24, hostile finding F5): a stored title or id, a profile folder's name, an argument
echoed in an error line never drives the terminal. JSON keeps its meaning; documents written to
``-`` are data and stay byte for byte."""

import hashlib
import json
import sqlite3

import pytest

from maint.commands.output import SafeText, escape_controls
from tests.conftest import run_subprocess
from tests.storegen import StoreBuilder

TITLE = "\x1b]0;pwned\x07"
BAD_ID = "\x1b[2Jwiped"
C1_TITLE = "csi\x9b31m"
CONTROL_BYTES = [bytes([c]) for c in [*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f]] + \
    [chr(c).encode() for c in range(0x80, 0xa0)]


def assert_no_controls(*outputs):
    for out in outputs:
        data = out.encode("utf-8", "surrogateescape") if isinstance(out, str) else out
        found = [c for c in CONTROL_BYTES if c in data]
        assert not found, (found, data[:400])


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "hermes"
    store = home / "state.db"
    with StoreBuilder(store, layout="v30") as b:
        b.session("s1", age=100, title=TITLE)
        b.session(BAD_ID, age=90, title=C1_TITLE)
        b.session("other", age=80)
    conn = sqlite3.connect(store)  # stray messages under a hostile id, for recover
    conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'x', 1.0)",
                 ("\x1b[5mlost",))
    conn.commit()
    conn.close()
    profile = home / "profiles" / "evil\x1b]0;x\x07" / "state.db"
    with StoreBuilder(profile, layout="v30") as b:
        b.session("p1", age=10, title=TITLE)
    return home


def run(home, *args):
    return run_subprocess(*args, env={"HERMES_HOME": str(home), "HERMES_MAINT_BUSY_MS": "2000"})


@pytest.mark.parametrize("args", [
    ["list"], ["stats"], ["pin", "s1"], ["pinned"], ["rename", "s1", "fine"],
    ["recover"], ["doctor"], ["list", "--all-profiles"], ["stats", "--all-profiles"], ["doctor", "--all-profiles"],
    ["export", "--session-id", "\x1b[31m"], ["delete", "\x1b[31mnope", "--yes"], ["rename", "\x1b[2J", "t"],
    ["export", "--dry-run", "--format", "md", "--older-than", "1d"], ["prune", "--dry-run", "--older-than", "1d"],
])
def test_no_control_character_reaches_the_terminal(home, args):
    result = run(home, *args)
    assert result.returncode in (0, 1, 2), result.stderr
    assert_no_controls(result.stdout, result.stderr)


def test_the_hostile_text_is_shown_escaped_not_dropped(home):
    listing = run(home, "list")
    assert "]0;pwned" in listing.stdout and "[2Jwiped" in listing.stdout
    pin = run(home, "pin", "s1")
    assert pin.returncode == 0 and "\\u001b]0;pwned\\u0007" in pin.stdout
    error = run(home, "export", "--session-id", "\x1b[31m")
    assert error.returncode == 1 and "\\x1b[31m" in error.stderr or "\\u001b[31m" in error.stderr
    header = run(home, "stats", "--all-profiles")
    assert "== evil\\u001b]0;x\\u0007:" in header.stdout


def test_json_output_keeps_its_meaning(home):
    result = run(home, "list", "--json")
    assert result.returncode == 0, result.stderr
    assert_no_controls(result.stdout)
    titles = {s["id"]: s["title"] for s in json.loads(result.stdout)["sessions"]}
    assert titles["s1"] == TITLE and titles[BAD_ID] == C1_TITLE  # \u009b is JSON's own escape of U+009B


def test_documents_written_to_stdout_stay_byte_for_byte(home, tmp_path):
    """An export to ``-`` is the data: the same bytes as the file, the sha256 it reports."""
    for fmt, args in (("jsonl", []), ("md", ["--session-id", "s1"]), ("jsonl", ["--session-id", BAD_ID])):
        out = tmp_path / f"doc.{fmt}"
        to_file = run(home, "export", out, "--format", fmt, *args, "--json")
        assert to_file.returncode == 0, to_file.stderr
        to_stdout = run_subprocess("export", "-", "--format", fmt, *args, env={"HERMES_HOME": str(home)})
        data = to_stdout.stdout.encode("utf-8", "surrogateescape")
        assert data == out.read_bytes()
        assert hashlib.sha256(data).hexdigest() == json.loads(to_file.stdout)["written"][0]["sha256"]
    assert "csi\x9b31m".encode() in data  # JSON leaves U+009B as it is: the document carries it


def test_safe_text_escapes_c0_del_and_c1_but_tab_and_the_newline_ending_the_write():
    from io import StringIO

    inner = StringIO()
    stream = SafeText(inner)
    assert stream.write("a\tb\nc\x1b[0m\x07\x7f\x85\x9fé\r\n") == 16
    assert inner.getvalue() == "a\tb\\u000ac\\u001b[0m\\u0007\\u007f\\u0085\\u009fé\\u000d\n"
    assert json.loads(escape_controls(json.dumps("\x7f\x9b", ensure_ascii=False))) == "\x7f\x9b"


BIDI = [chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]]


def test_safe_text_escapes_bidi_overrides_and_isolates():
    from io import StringIO

    inner = StringIO()
    SafeText(inner).write("a" + "".join(BIDI) + "b\u200dc")
    assert inner.getvalue() == "a" + "".join(f"\\u{ord(c):04x}" for c in BIDI) + "b\u200dc"  # ZWJ (emoji) kept
    assert json.loads(escape_controls(json.dumps("x\u202ey", ensure_ascii=False))) == "x\u202ey"


def test_rename_shows_a_bidi_override_in_the_previous_title_escaped_as_list_does(tmp_path):
    """Hostile try 3, F17: `rename` printed the previous title with a raw U+202E (RIGHT-TO-LEFT OVERRIDE):
    "invoice\\u202efdp.exe" read "invoiceexe.pdf" on the terminal; `list` escaped it."""
    store = tmp_path / "state.db"
    with StoreBuilder(store, layout="v30") as b:
        b.session("s1", age=10, title="invoice\u202efdp.exe")
        b.session("s2", age=10, title="iso\u2067late")
    listing = run_subprocess("list", "--json", "--db", store)
    assert {s["title"] for s in json.loads(listing.stdout)["sessions"]} == {"invoice\u202efdp.exe", "iso\u2067late"}
    shown = {}
    for args in (["list"], ["rename", "s1", "ok"], ["rename", "s2", "fine"]):
        result = run_subprocess(*args, "--db", store)
        assert result.returncode == 0, result.stderr
        assert not any(c in result.stdout + result.stderr for c in BIDI), result.stdout
        shown[args[0] + args[-1]] = result.stdout
    assert "invoice\\u202efdp.exe" in shown["listlist"]
    assert "previous title: invoice\\u202efdp.exe" in shown["renameok"]
    assert "previous title: iso\\u2067late" in shown["renamefine"]


FORGED = "hermes-maint doctor /home/alice/.hermes/state.db: OK - 0 critical, 0 warning, 24 ok"


def test_a_line_break_inside_a_value_never_starts_a_line_of_its_own():
    """Hostile try 4, G11: a newline in a value (a profile folder's name, a title) was written raw, so a user
    forged report lines in root's job log; CR and the other controls were escaped. Each write is one line:
    a break inside it is a value's, shown as \\u000a. Our own multi-line text (help) is marked as such."""
    from io import StringIO

    from maint.commands.output import own_lines

    inner = StringIO()
    stream = SafeText(inner)
    stream.write(f"== evil\n{FORGED}: /x/state.db\n")
    stream.write("\n")  # a blank line: the break that ends the write
    stream.write(own_lines("Usage: hermes-maint\n\n  Options:") + "\n")
    assert inner.getvalue() == f"== evil\\u000a{FORGED}: /x/state.db\n\nUsage: hermes-maint\n\n  Options:\n"


def test_a_profile_named_with_a_newline_forges_no_line_of_an_all_profiles_run(tmp_path):
    home = tmp_path / "hermes"
    with StoreBuilder(home / "state.db", layout="v30") as b:
        b.session("s1", age=100)
    name = f"evil\n{FORGED}\rX"
    with StoreBuilder(home / "profiles" / name.replace("/", "_") / "state.db", layout="v30") as b:
        b.session("p1", age=10)
    for args in (["doctor", "--all-profiles", "--summary"], ["stats", "--all-profiles"], ["list", "--all-profiles"],
                 ["prune", "--all-profiles", "--dry-run", "--older-than", "1d"]):
        result = run(home, *args)
        assert result.returncode in (0, 1), result.stderr
        lines = (result.stdout + result.stderr).splitlines()
        assert not [ln for ln in lines if ln.startswith("hermes-maint doctor /home/alice")], lines
        assert any("evil\\u000ahermes-maint doctor _home_alice_" in ln for ln in lines), lines
        assert_no_controls(result.stdout, result.stderr)


def test_rename_shows_a_line_break_in_the_previous_title_escaped(tmp_path):
    store = tmp_path / "state.db"
    with StoreBuilder(store, layout="v30") as b:
        b.session("s1", age=10, title="old\nDeleted 0 sessions\rX")
    result = run_subprocess("rename", "s1", "new", "--db", store)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == ["  previous title: old\\u000aDeleted 0 sessions\\u000dX"]


def test_help_pages_keep_their_lines():
    for args in (["--help"], ["list", "--help"], []):
        result = run_subprocess(*args)
        text = result.stdout or result.stderr
        assert "\\u000a" not in text and len(text.splitlines()) > 5, text


def test_piped_output_shows_escape_sequences_escaped_not_stripped(tmp_path):
    """Hostile try 5, H4: into a pipe (a job's log), click stripped ANSI sequences from what we echo after the
    columns were measured: `pinned` glued the source to a mangled id, `stats` printed two distinct sources alike.
    Piped output shows them escaped, as a terminal does."""
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        b.session("kept_one", age=200, messages=1, title="T\x1b[31mRED", source="cli\x1b[2J", pinned=1)
        b.session("other", age=1, messages=1, source="cli")
    for args in (["pinned"], ["stats"]):
        result = run_subprocess(*args, "--db", db)  # stdout is a pipe
        assert result.returncode == 0, result.stderr
        assert "\\u001b[2J" in result.stdout or "\\u001b[2" in result.stdout, result.stdout
        assert_no_controls(result.stdout)
    assert "kept_one" in run_subprocess("pinned", "--db", db).stdout
