"""The shared filter engine: every flag, value forms, bad values and empty windows."""

import time
from datetime import datetime

import pytest

from maint.errors import UsageError
from maint.selection.filters import parse_filters
from maint.store.sqlutil import cwd_under
from maint.selection.timeparse import parse_moment

NOW = 1_800_000_000.0


@pytest.mark.parametrize("value,seconds", [("30m", 1800), ("5h", 5 * 3600), ("2d", 2 * 86400),
                                           ("1w", 7 * 86400), ("30", 30 * 86400), ("1.5", 1.5 * 86400)])
def test_durations_and_bare_days(value, seconds):
    assert parse_moment("--older-than", value, NOW) == NOW - seconds


def test_iso_values_are_local_time():
    expected = datetime(2026, 7, 5, 14, 30).astimezone().timestamp()
    assert parse_moment("--before", "2026-07-05 14:30", NOW) == expected
    assert parse_moment("--before", "2026-07-05", NOW) == datetime(2026, 7, 5).astimezone().timestamp()


@pytest.mark.parametrize("flag,value", [("older_than", "yesterday"), ("newer_than", "-5h"), ("before", "5x"),
                                        ("after", "2026-13-45"), ("min_messages", "-1"), ("max_tokens", "ten"),
                                        ("min_cost", "-0.5"), ("max_cost", "nan"), ("max_tool_calls", "1.5"),
                                        ("source", ""), ("cwd", " ")])
def test_bad_values_name_the_flag(flag, value):
    with pytest.raises(UsageError) as err:
        parse_filters({flag: value}, NOW)
    assert "--" + flag.replace("_", "-") in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("raw", [{"older_than": "5h", "newer_than": "2h"},
                                 {"after": "2026-07-05 14:30", "before": "2026-07-05 09:00"},
                                 {"min_messages": "10", "max_messages": "3"},
                                 {"min_cost": "1", "max_cost": "0.5"}])
def test_empty_windows_are_errors(raw):
    with pytest.raises(UsageError, match="empty"):
        parse_filters(raw, NOW)


def test_window_combination_is_accepted():
    f = parse_filters({"newer_than": "5h", "older_than": "1h"}, NOW)
    assert f.active_after == NOW - 5 * 3600 and f.active_before == NOW - 3600


def test_cwd_prefix_semantics(monkeypatch):
    assert cwd_under("/a/b", "/a/b")
    assert cwd_under("/a/b/c", "/a/b")
    assert not cwd_under("/a/bc", "/a/b")
    assert not cwd_under(None, "/a/b")
    monkeypatch.setenv("HOME", "/home/op")
    assert parse_filters({"cwd": "~/scratch/"}, NOW).cwd == "/home/op/scratch"


def test_no_flags_is_empty():
    assert parse_filters({}, time.time()).is_empty
    assert not parse_filters({"source": "cli"}, time.time()).is_empty
