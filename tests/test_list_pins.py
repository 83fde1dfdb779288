"""list with thousands of pinned sessions stays a page: LIMIT conversations, then up to LIMIT pinned ones the
limit cut off (newest first), then a line counting the rest; --limit 0 lists them all. Bounded by the rows
Python reads (previews fetched), not by time."""

import pytest

from maint.ops import listing
from maint.ops.listing import list_conversations
from maint.store.connection import open_store

PINS, RECENT = 40, 8


@pytest.fixture
def pinned_store(make_store):
    b = make_store("v30")
    for n in range(RECENT):
        b.session(f"new{n}", age=1 + n * 0.1)
    for n in range(PINS):
        b.session(f"pin{n:02d}", age=30 + n, pinned=1, archived=int(n % 4 == 0))
    b.close()
    return b.path


def test_text_list_shows_a_page_of_pins_and_counts_the_rest(pinned_store, cli):
    out = cli("list", "--db", pinned_store, "--limit", "5").stdout.splitlines()
    ids = [line.split()[-1] for line in out[2:-2]]
    assert ids == [f"new{n}" for n in range(5)] + [f"pin{n:02d}" for n in range(5)]
    assert out[-2] == "… more not shown (use --limit N to see more)"
    assert out[-1] == f"… {PINS - 5} more pinned not shown (--limit 0 lists them all)"


def test_json_counts_the_pins_left_out_and_limit_0_lists_them_all(pinned_store, cli):
    r = cli.json("list", "--db", pinned_store, "--limit", "3")
    assert [s["id"] for s in r["sessions"]] == ["new0", "new1", "new2", "pin00", "pin01", "pin02"]
    assert r["pinned_not_shown"] == PINS - 3 and r["total"] == PINS + RECENT and r["more"] is True
    every = cli.json("list", "--db", pinned_store, "--limit", "0")
    assert every["shown"] == PINS + RECENT and every["pinned_not_shown"] == 0


def test_few_pins_past_the_limit_all_show_without_a_count_line(make_store, cli):
    b = make_store("v30")
    for n in range(6):
        b.session(f"new{n}", age=1 + n)
    b.session("pin_old", age=40, pinned=1)
    b.close()
    out = cli("list", "--db", b.path, "--limit", "3").stdout.splitlines()
    assert out[-2].split()[-1] == "pin_old" and out[-1] == "… more not shown (use --limit N to see more)"
    assert not any("pinned not shown" in line for line in out)


@pytest.mark.parametrize("sort", ["started", "last-active"])
@pytest.mark.parametrize("count", [False, True])
def test_rows_read_into_python_are_bounded_by_the_limit_not_the_pins(pinned_store, monkeypatch, sort, count):
    previews = []
    real = listing._preview
    monkeypatch.setattr(listing, "_preview", lambda store, sid: previews.append(sid) or real(store, sid))
    with open_store(pinned_store, readonly=True) as store:
        rows, total, more, cut = list_conversations(store, limit=4, sort=sort, count=count)
    assert len(rows) == 8 and len(previews) == 8
    assert [r["pinned"] for r in rows] == [False] * 4 + [True] * 4 and cut == PINS - 4
    assert more is True and total == (PINS + RECENT if count else None)
