"""Trace upload against hostile endpoints (issue 18: 6 and 11): every request times out, every repo path is
checked before the first request, and the result is reported per file."""

import json
import time

import pytest

from maint.errors import MaintError
from maint.export.hf_upload import repo_paths, upload_traces
from tests.conftest import run_subprocess
from tests.hf_fake import Hub, Silent
from tests.storegen import StoreBuilder, small_store

TOKEN = "hf_localtesttoken_abcdefghijklmnop"


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        for sid in ("a1", "a2", "a3"):
            b.session(sid, age=30, messages=2)
        b.session("/etc/abs_id", age=30, messages=2, source="cron")
    return db


def _env(url, timeout="60"):
    return {"HF_ENDPOINT": url, "HF_TOKEN": TOKEN, "HERMES_MAINT_HTTP_TIMEOUT_S": timeout}


def test_hung_endpoint_times_out_naming_it(store, tmp_path):
    """Finding 6: an endpoint that accepts and never answers used to hang the export forever."""
    out = tmp_path / "t.trace.jsonl"
    with Silent() as hub:
        started = time.monotonic()
        r = run_subprocess("export", out, "--db", store, "--format", "trace", "--session-id", "a1", "--upload",
                           env=_env(hub.url, "1"), timeout=90)
        took = time.monotonic() - started
        asked = hub.request_lines()
    assert r.returncode == 1, r.stderr
    line, = r.stderr.strip().splitlines()
    assert hub.url in line and "did not answer" in line and "HERMES_MAINT_HTTP_TIMEOUT_S" in line
    assert "Traceback" not in r.stderr and TOKEN not in r.stderr and out.exists()
    # one request for the user, not huggingface_hub's five retries with back-off
    assert [a for a in asked if "/api/whoami" in a] == ["GET /api/whoami-v2 HTTP/1.1"], asked
    assert took < 60, took  # one 1 s timeout and process start-up, not forever


def test_endpoint_stalling_mid_run_reports_each_file(store, tmp_path):
    out = tmp_path / "traces"
    with Hub(stall={"sessions/a2.jsonl"}) as hub:
        # 5 s: every answer for a1 comes well within it on a loaded machine; a2's never comes
        r = run_subprocess("export", out, "--db", store, "--format", "trace", "--source", "cli", "--upload", "--json",
                           env=_env(hub.url, "5"), timeout=120)
        landed = set(hub.repos["tester/hermes-traces"]["files"])
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    status = {u["path_in_repo"]: (u["ok"], u["error"] or "") for u in report["uploaded"]}
    assert status["sessions/a1.jsonl"] == (True, "")
    assert status["sessions/a2.jsonl"][0] is False and "stopped answering" in status["sessions/a2.jsonl"][1]
    assert status["sessions/a3.jsonl"][0] is False and status["sessions/a3.jsonl"][1].startswith("not attempted")
    assert landed == {"sessions/a1.jsonl"}
    assert "1 of 3 uploads" not in r.stderr and "2 of 3 uploads failed (1 went up)" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["a1.trace.jsonl", "a2.trace.jsonl", "a3.trace.jsonl"]


def test_endpoint_dripping_an_answer_is_cut_at_the_request_deadline(store, tmp_path):
    """A byte every 0.3 s never trips a 3 s read timeout; the total deadline of a request (6 s) still ends it.
    (Both limits leave a loaded machine seconds to answer a1's requests and to send each byte of the drip.)"""
    out = tmp_path / "traces"
    env = {**_env("", "3"), "HERMES_MAINT_HTTP_DEADLINE_S": "6"}
    with Hub(drip={"sessions/a2.jsonl"}) as hub:
        env["HF_ENDPOINT"] = hub.url
        started = time.monotonic()
        r = run_subprocess("export", out, "--db", store, "--format", "trace", "--source", "cli", "--upload", "--json",
                           env=env, timeout=120)
        took = time.monotonic() - started
        landed = set(hub.repos["tester/hermes-traces"]["files"])
    assert r.returncode == 1, r.stderr
    status = {u["path_in_repo"]: (u["ok"], u["error"] or "") for u in json.loads(r.stdout)["uploaded"]}
    assert status["sessions/a1.jsonl"] == (True, "")
    assert status["sessions/a2.jsonl"][0] is False, status
    assert "no complete answer within 6 s" in status["sessions/a2.jsonl"][1], status
    assert status["sessions/a3.jsonl"][1].startswith("not attempted"), status
    assert landed == {"sessions/a1.jsonl"}
    assert took < 60, took  # the drip alone would go on until the hub closes (120 s)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon", "86401"])
def test_bad_deadline_setting_refused_before_anything_is_written(store, tmp_path, value):
    out = tmp_path / "t.trace.jsonl"
    env = {**_env("http://127.0.0.1:9", "1"), "HERMES_MAINT_HTTP_DEADLINE_S": value}
    r = run_subprocess("export", out, "--db", store, "--format", "trace", "--session-id", "a1", "--upload", env=env)
    assert r.returncode == 2 and f"HERMES_MAINT_HTTP_DEADLINE_S={value!r}" in r.stderr, r.stderr
    assert not out.exists() and "Traceback" not in r.stderr


def test_file_refused_by_the_hub_is_reported_and_the_rest_go_up(store, tmp_path):
    """Finding 11: a bulk upload used to stop at the first failing file, without saying what went up."""
    out = tmp_path / "traces"
    with Hub(refuse={"sessions/a2.jsonl"}) as hub:
        r = run_subprocess("export", out, "--db", store, "--format", "trace", "--source", "cli", "--upload", "--json",
                           env=_env(hub.url))
        landed = set(hub.repos["tester/hermes-traces"]["files"])
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert [(u["path_in_repo"], u["ok"]) for u in report["uploaded"]] == [
        ("sessions/a1.jsonl", True), ("sessions/a2.jsonl", False), ("sessions/a3.jsonl", True)]
    assert landed == {"sessions/a1.jsonl", "sessions/a3.jsonl"}
    assert all(u["file"] and u["file"].startswith(str(out)) for u in report["uploaded"])
    assert "1 of 3 uploads failed (2 went up)" in r.stderr and "Traceback" not in r.stderr


def test_session_id_with_slashes_uploads_under_its_sanitised_name(store, tmp_path):
    """Finding 11 as reported: the id `/etc/abs_id` became the repo path `sessions//etc/abs_id.jsonl`."""
    out = tmp_path / "traces"
    with Hub() as hub:
        r = run_subprocess("export", out, "--db", store, "--format", "trace", "--source", "cron", "--upload", "--json",
                           env=_env(hub.url))
        landed = set(hub.repos["tester/hermes-traces"]["files"])
    assert r.returncode == 0, r.stderr
    from maint.export.files import safe_name

    assert landed == {f"sessions/{safe_name('/etc/abs_id', '')}.jsonl"}  # _etc_abs_id-<hash of the real id>
    assert all("/" not in path[len("sessions/"):] for path in landed)
    assert json.loads(r.stdout)["uploaded"][0]["ok"] is True


@pytest.mark.parametrize("names,needle", [
    (["ok", "/etc/abs_id"], "not a valid file name"),
    (["ok", ".hidden"], "not a valid file name"),
    (["ok", ".."], "not a valid file name"),
    (["ok", "x" * 300], "not a valid file name"),
    (["same", "same"], "would both upload to sessions/same.jsonl"),
])
def test_every_repo_path_is_checked_before_the_first_request(tmp_path, monkeypatch, names, needle):
    files = []
    for i, name in enumerate(names):
        path = tmp_path / f"{i}.jsonl"
        path.write_text("{}\n")
        files.append((name, path))
    with Hub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        with pytest.raises(MaintError, match=needle):
            upload_traces(files)
        assert hub.requests == []  # refused before anything was sent, the valid file included


def test_repo_paths_of_sanitised_names():
    assert repo_paths([("20250305_091523_a1b2", None), ("_etc_abs_id", None)]) == [
        "sessions/20250305_091523_a1b2.jsonl", "sessions/_etc_abs_id.jsonl"]


@pytest.mark.parametrize("value", ["0", "-5", "inf", "nan", "soon", "7200"])
def test_bad_timeout_setting_refused_before_anything_is_written(store, tmp_path, value):
    out = tmp_path / "t.trace.jsonl"
    r = run_subprocess("export", out, "--db", store, "--format", "trace", "--session-id", "a1", "--upload",
                       env=_env("http://127.0.0.1:9", value))
    assert r.returncode == 2 and f"HERMES_MAINT_HTTP_TIMEOUT_S={value!r}" in r.stderr, r.stderr
    assert not out.exists() and "Traceback" not in r.stderr


def test_trace_upload_without_output_goes_through_a_private_temporary_file(tmp_path):
    from tests.hf_fake import Hub

    store = small_store(tmp_path / "state.db")
    with Hub() as hub:
        result = run_subprocess("export", "--format", "trace", "--session-id", "old0", "--upload", "--db", store,
                                "--json", env={"HF_TOKEN": "hf_test_token", "HF_ENDPOINT": hub.url})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["files"] == [] and len(report["uploaded"]) == 1
    assert not list(tmp_path.glob("**/*.trace.jsonl"))


def test_a_killed_uploads_private_trace_is_removed_by_the_next_upload(tmp_path):
    """As hostile try 4, G6 found for the salvage: a trace upload killed by SIGKILL left its private trace (a
    session's whole transcript) in $TMPDIR for ever. The next upload removes the folders no live run holds."""
    import fcntl
    import os

    from tests.hf_fake import Hub

    store = small_store(tmp_path / "state.db")
    temp = tmp_path / "tmp"
    dead, live = temp / "hermes-maint-trace-k1ll3d", temp / "hermes-maint-trace-l1v3"
    for folder in (dead, live):
        folder.mkdir(parents=True, mode=0o700)
        (folder / "old0.trace.jsonl").write_text('{"a transcript": "left by a killed run"}\n')
    holder = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # an upload still running
    try:
        with Hub() as hub:
            result = run_subprocess("export", "--format", "trace", "--session-id", "old0", "--upload", "--db", store,
                                    "--json", env={"HF_TOKEN": "hf_test_token", "HF_ENDPOINT": hub.url,
                                                   "TMPDIR": str(temp)})
    finally:
        os.close(holder)
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["uploaded"]) == 1
    assert sorted(p.name for p in temp.iterdir()) == [live.name] and (live / "old0.trace.jsonl").exists()


def test_upload_without_token_says_the_temporary_trace_was_removed(store, tmp_path):
    """Issue 25 item 6: --upload without OUTPUT writes a private temporary trace that is gone when the
    command ends; the refusal said it "was kept"."""
    env = {"HF_TOKEN": "", "HF_ENDPOINT": "http://127.0.0.1:9"}
    r = run_subprocess("export", "--db", store, "--format", "trace", "--session-id", "a1", "--upload", env=env)
    assert r.returncode == 1, r.stderr
    line, = r.stderr.strip().splitlines()
    assert "HF_TOKEN" in line and "was removed" in line and "kept" not in line
    assert not list(tmp_path.glob("**/*.trace.jsonl"))


def test_upload_without_token_says_a_named_output_was_kept(store, tmp_path):
    out = tmp_path / "t.trace.jsonl"
    r = run_subprocess("export", out, "--db", store, "--format", "trace", "--session-id", "a1", "--upload",
                       env={"HF_TOKEN": "", "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert r.returncode == 1, r.stderr
    assert "were kept" in r.stderr and out.exists()
