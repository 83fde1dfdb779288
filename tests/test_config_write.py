"""`autoprune on|off` write-back (issue 18, finding 3): config.yaml holds API keys and is often a symlink
into a dotfiles repository, so the edit must keep everything but the one key it sets."""

import difflib
import os
import stat

import pytest

from maint.config import edit_session_key, load_config, set_session_key
from maint.errors import MaintError

BOM = b"\xef\xbb\xbf"


def _changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines between two texts, line endings included."""
    removed, added = [], []
    for line in difflib.ndiff(before.splitlines(keepends=True), after.splitlines(keepends=True)):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    return removed, added


def test_mode_owner_symlink_bom_and_crlf_are_kept(hermes_home, cli, tmp_path, monkeypatch):
    from maint import files

    # As root the file stands for uid 4321's, in a temporary folder that user cannot search: the write is
    # judged as theirs elsewhere (test_config_trust); here only what the edit keeps is.
    monkeypatch.setattr(files, "user_may", lambda uid, path, want: True)
    dots = tmp_path / "dotfiles"
    dots.mkdir()
    real = dots / "hermes-config.yaml"
    original = BOM + (b"# my keys\r\nmodel:   \"gpt-5\"   # favourite\r\nproviders:\r\n    openai: {key: 'sk-x'}\r\n"
                      b"sessions:\r\n    retention_days: 30   # a month\r\n")
    real.write_bytes(original)
    os.chmod(real, 0o600)
    owner = (4321, 4321) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    os.chown(real, *owner)
    os.chown(dots, *owner)
    os.chown(hermes_home, *owner)  # the user's own HERMES_HOME (no store yet) and dotfiles: the user's config
    link = hermes_home / "config.yaml"
    link.symlink_to(os.path.relpath(real, hermes_home))

    result = cli("autoprune", "on")

    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == os.path.relpath(real, hermes_home)  # the link is kept
    st = os.stat(real)
    assert stat.S_IMODE(st.st_mode) == 0o600 and (st.st_uid, st.st_gid) == owner
    data = real.read_bytes()
    assert data.startswith(BOM)
    removed, added = _changed_lines(original[3:].decode(), data[3:].decode())
    assert removed == [] and added == ["    auto_prune: true\r\n"]  # one line, the file's indent and CRLF
    assert load_config().session("auto_prune") is True and load_config().session("retention_days") == 30
    assert not [p.name for p in dots.iterdir() if p.name != real.name]  # no temporary file left behind


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644])
def test_mode_is_neither_widened_nor_changed(hermes_home, cli, mode):
    cfg = hermes_home / "config.yaml"
    cfg.write_text("sessions:\n  retention_days: 30\n")
    os.chmod(cfg, mode)
    assert cli("autoprune", "off").exit_code == 0
    assert stat.S_IMODE(cfg.stat().st_mode) == mode and load_config().session("auto_prune") is False


@pytest.mark.parametrize("before,after", [
    # an existing value is replaced on its own line, its comment and quoting style around it kept
    ("sessions:\n  auto_prune: false   # was off\n  retention_days: 9\n",
     "sessions:\n  auto_prune: true   # was off\n  retention_days: 9\n"),
    ("sessions:\n  auto_prune: 'false'\n", "sessions:\n  auto_prune: true\n"),
    # no sessions mapping: appended, in the file's own indentation
    ("model: x\ndatabase:\n    journal_mode: wal\n", "model: x\ndatabase:\n    journal_mode: wal\nsessions:\n"
                                                      "    auto_prune: true\n"),
    ("", "sessions:\n  auto_prune: true\n"),
    ("# only a comment", "# only a comment\nsessions:\n  auto_prune: true\n"),
    # an empty or null sessions key
    ("sessions:   # later\nx: 1\n", "sessions:   # later\n  auto_prune: true\nx: 1\n"),
    ("sessions: ~\n", "sessions:\n  auto_prune: true\n"),
    # flow mappings stay flow mappings
    ("sessions: {retention_days: 30}\n", "sessions: {auto_prune: true, retention_days: 30}\n"),
    ("sessions: {}\n", "sessions: {auto_prune: true}\n"),
    ("sessions: {auto_prune: no, retention_days: 3}\n", "sessions: {auto_prune: true, retention_days: 3}\n"),
    # a merge key: the own key overrides the merged mapping, which (and whose other users) stay as they are
    ("base: &b\n  retention_days: 5\nsessions:\n  <<: *b\nother: *b\n",
     "base: &b\n  retention_days: 5\nsessions:\n  auto_prune: true\n  <<: *b\nother: *b\n"),
    # the value was an alias: only this key changes, the anchor keeps its value
    ("flag: &f false\nsessions:\n  auto_prune: *f\n", "flag: &f false\nsessions:\n  auto_prune: true\n"),
])
def test_one_line_edit(before, after):
    assert edit_session_key(before, "auto_prune", True) == after


@pytest.mark.parametrize("text,needle", [
    ("base: &b\n  retention_days: 30\nsessions: *b\nother: *b\n", "anchor or alias"),
    ("sessions: &s\n  retention_days: 30\nother: *s\n", "anchor or alias"),
    ("sessions:\n  auto_prune: &f false\nx: *f\n", "anchor"),
    ("sessions:\n  auto_prune: |\n    true\n", "one-line"),
    ("{sessions: {retention_days: 3}}\n", "flow mapping"),
    ("a: 1\n...\n", "document marker"),
    ("- a\n- b\n", "top level must be a mapping"),
])
def test_refused_edits_leave_the_file_alone(hermes_home, cli, text, needle):
    cfg = hermes_home / "config.yaml"
    cfg.write_text(text)
    before = cfg.read_bytes()
    result = cli("autoprune", "on")
    assert result.exit_code != 0 and needle in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1 and cfg.read_bytes() == before
    assert sorted(p.name for p in hermes_home.iterdir()) == ["config.yaml"]


def test_anchored_sessions_no_alias_gains_the_key(hermes_home, cli):
    """The finding as reported: `sessions: *b` used to put auto_prune into `base`, so `other` gained it too."""
    cfg = hermes_home / "config.yaml"
    cfg.write_text("base: &b\n  retention_days: 30\nsessions: *b\nother: *b\n")
    assert cli("autoprune", "on").exit_code == 1
    assert "auto_prune" not in cfg.read_text()


def test_hard_linked_config_is_not_split(hermes_home, cli, tmp_path):
    cfg = hermes_home / "config.yaml"
    cfg.write_text("sessions:\n  retention_days: 30\n")
    os.link(cfg, tmp_path / "backup-link.yaml")
    result = cli("autoprune", "on")
    assert result.exit_code == 1 and "hard links" in result.stderr and "auto_prune" not in cfg.read_text()


def test_dangling_symlink_is_not_followed_into_a_new_file(hermes_home, cli, tmp_path):
    (hermes_home / "config.yaml").symlink_to(tmp_path / "nowhere" / "config.yaml")
    result = cli("autoprune", "on")
    assert result.exit_code == 1 and "missing file" in result.stderr and not (tmp_path / "nowhere").exists()


def test_new_config_is_private(tmp_path):
    path = tmp_path / "home" / "config.yaml"
    path.parent.mkdir()  # a Hermes home is never made by the edit (hostile try 3, F25)
    set_session_key(path, "auto_prune", True)
    assert path.read_text() == "sessions:\n  auto_prune: true\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_file_changed_during_the_edit_is_not_overwritten(tmp_path):
    """The re-check before the rename: a concurrent editor's save is never lost to ours."""
    from maint import config

    path = tmp_path / "config.yaml"
    path.write_text("sessions:\n  retention_days: 30\n")
    before = os.stat(path)
    path.write_text("sessions:\n  retention_days: 31\n  # edited meanwhile\n")
    with pytest.raises(MaintError, match="changed while"):
        config._replace_file(path, b"sessions:\n  auto_prune: true\n", before, path)
    assert "edited meanwhile" in path.read_text() and os.listdir(tmp_path) == ["config.yaml"]


def test_config_that_is_a_fifo_is_refused_not_waited_on(hermes_home):
    """Reading a FIFO as config.yaml used to block every command that loads the config."""
    from maint.errors import UsageError

    os.mkfifo(hermes_home / "config.yaml")
    with pytest.raises(UsageError, match="not a regular file"):
        load_config()


def test_autoprune_on_off_never_lands_elsewhere_than_the_named_store(hermes_home, cli, tmp_path, monkeypatch):
    """Hostile try 3, F25: `autoprune on --db <typo>` turned on nightly pruning of the DEFAULT store (rc 0, the
    message naming another file), `--profile tyop` made a new profile folder, and a missing $HERMES_HOME was
    created as root. Each is now refused like every other command, and nothing is written."""
    from tests.storegen import StoreBuilder

    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("s", age=1)
    (hermes_home / "config.yaml").write_text("sessions:\n  retention_days: 30\n")
    os.chmod(hermes_home / "config.yaml", 0o600)
    before = (hermes_home / "config.yaml").read_bytes()
    typo = tmp_path / "hermes-typo" / "state.db"
    for choice in ("on", "off"):
        result = cli("autoprune", choice, "--db", typo)
        assert result.exit_code == 1 and f"{typo}: no such store" in result.stderr, result.output
        result = cli("autoprune", choice, "--profile", "tyop")
        assert result.exit_code == 2 and "profiles/tyop: no such folder" in result.stderr, result.output
        assert len(result.stderr.strip().splitlines()) == 1
    assert (hermes_home / "config.yaml").read_bytes() == before
    assert not (hermes_home / "profiles").exists() and not typo.parent.exists()
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "nonexistent"))
    result = cli("autoprune", "on")
    assert result.exit_code == 2 and "nonexistent: no such folder" in result.stderr, result.output
    assert not (tmp_path / "nonexistent").exists()
    # a profile (or home) that exists but has no store yet is still configured
    monkeypatch.setenv("HERMES_HOME", str(hermes_home))
    (hermes_home / "profiles" / "fresh").mkdir(parents=True)
    assert cli("autoprune", "on", "--profile", "fresh").exit_code == 0
    assert (hermes_home / "profiles" / "fresh" / "config.yaml").read_text() == "sessions:\n  auto_prune: true\n"
