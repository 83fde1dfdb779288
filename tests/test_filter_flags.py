"""Each filter flag selects exactly the documented sessions on a real store (prune --dry-run)."""

import pytest

from tests.conftest import file_hash


@pytest.fixture
def store(make_store, layout, tmp_path):
    b = make_store(layout)
    b.session("a_cli_old", source="cli", age=100, started_age=200, title="Smoke Test alpha", messages=2,
              cwd="/work/scratch", git_branch="feature/Old-Experiment", billing_provider="OpenRouter",
              input_tokens=100, output_tokens=50, actual_cost_usd=0.002, tool_call_count=0)
    b.session("b_tg_group", source="telegram", age=40, started_age=41, messages=6, user_id="12345",
              chat_id="-100", chat_type="group", end_reason="done", model="claude-sonnet",
              input_tokens=5000, output_tokens=1000, estimated_cost_usd=0.5, tool_call_count=4,
              cwd="/work/scratchpad")
    b.session("c_cron_recent", source="cron", age=0.1, started_age=0.15, messages=1, end_reason="cron_complete",
              title="nightly smoke", cwd="/work/scratch/sub", model="GPT-5-mini", tool_call_count=2,
              input_tokens=10, output_tokens=10, actual_cost_usd=0.0)
    b.session("d_cli_mid", source="cli", age=10, started_age=12, messages=4, end_reason="user_exit",
              billing_provider="anthropic", chat_type="dm", user_id="999")
    b.close()
    return b.path


CASES = [
    (["--older-than", "30"], {"a_cli_old", "b_tg_group"}),
    (["--older-than", "12h"], {"a_cli_old", "b_tg_group", "d_cli_mid"}),
    (["--newer-than", "5h"], {"c_cron_recent"}),
    (["--newer-than", "15d", "--older-than", "1d"], {"d_cli_mid"}),
    (["--before", "100"], {"a_cli_old"}),
    (["--after", "1d"], {"c_cron_recent"}),
    (["--source", "telegram"], {"b_tg_group"}),
    (["--source", "tele"], set()),
    (["--provider", "openrouter"], {"a_cli_old"}),
    (["--end-reason", "user_exit"], {"d_cli_mid"}),
    (["--user", "12345"], {"b_tg_group"}),
    (["--chat-id", "-100"], {"b_tg_group"}),
    (["--chat-type", "dm"], {"d_cli_mid"}),
    (["--title", "smoke"], {"a_cli_old", "c_cron_recent"}),
    (["--model", "gpt-5"], {"a_cli_old", "c_cron_recent", "d_cli_mid"}),
    (["--branch", "old-experiment"], {"a_cli_old"}),
    (["--cwd", "/work/scratch"], {"a_cli_old", "c_cron_recent"}),
    (["--cwd", "/work/scratch/"], {"a_cli_old", "c_cron_recent"}),
    (["--min-messages", "4"], {"b_tg_group", "d_cli_mid"}),
    (["--max-messages", "2"], {"a_cli_old", "c_cron_recent"}),
    (["--min-tokens", "150"], {"a_cli_old", "b_tg_group"}),
    (["--max-tokens", "150"], {"a_cli_old", "c_cron_recent", "d_cli_mid"}),
    (["--min-cost", "0.1"], {"b_tg_group"}),
    (["--max-cost", "0.01"], {"a_cli_old", "c_cron_recent", "d_cli_mid"}),
    (["--min-tool-calls", "2"], {"b_tg_group", "c_cron_recent"}),
    (["--max-tool-calls", "0"], {"a_cli_old", "d_cli_mid"}),
    (["--source", "cli", "--older-than", "30"], {"a_cli_old"}),
    ([], {"a_cli_old"}),  # bare: inactive >= 90 days
]


@pytest.mark.parametrize("args,expected", CASES, ids=[" ".join(c[0]) or "bare" for c in CASES])
def test_flag_selects(cli, store, args, expected):
    before = file_hash(store)
    report = cli.json("prune", "--db", store, "--dry-run", *args)
    assert set(report["session_ids"]) == expected
    assert report["matched"] == len(expected)
    assert file_hash(store) == before


def test_any_filter_turns_implicit_days_off(cli, store):
    report = cli.json("prune", "--db", store, "--dry-run", "--source", "cron")
    assert report["implicit_days"] is None and report["session_ids"] == ["c_cron_recent"]
    assert cli.json("prune", "--db", store, "--dry-run")["implicit_days"] == 90


@pytest.mark.parametrize("args,needle", [
    (["--older-than", "soon"], "--older-than"),
    (["--min-messages", "-3"], "--min-messages"),
    (["--newer-than", "2h", "--older-than", "5h"], "empty window"),
    (["--max-cost", "cheap"], "--max-cost"),
])
def test_bad_values_exit_2_one_line(cli, store, args, needle):
    before = file_hash(store)
    result = cli("prune", "--db", store, *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.output
    assert file_hash(store) == before
