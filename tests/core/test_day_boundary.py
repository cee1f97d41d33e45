"""The day a daily budget counts: ``clock.local_day_start`` and ``next_local_day_start`` over
every quarter-hour of a year, in zones whose clocks jump at or across midnight.

America/Havana falls back from 01:00 to 00:00 on 2026-11-01 (midnight happens twice) and springs
forward over midnight in March (it never happens); America/Santiago and America/Asuncion jump at
midnight too; Australia/Lord_Howe moves by half an hour; Asia/Kathmandu is +05:45."""

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from dispatcher.core import clock

ZONES = ("UTC", "America/Havana", "America/Santiago", "America/Asuncion", "Australia/Lord_Howe", "Asia/Kathmandu")
YEAR_START = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
QUARTER_HOURS = range(YEAR_START - 86400, YEAR_START + 366 * 86400, 900)


def _day(ts: float, zone: ZoneInfo | None) -> object:
    return datetime.fromtimestamp(ts, zone).date()


def _check_day(ts: int, zone: ZoneInfo | None) -> None:
    start, end = clock.local_day_start(ts, zone), clock.next_local_day_start(ts, zone)
    assert start <= ts < end, (ts, start, end)
    # The first instant of ts's day: the second before it belongs to the day before.
    assert _day(start, zone) == _day(ts, zone) and _day(start - 1, zone) == _day(ts, zone) - timedelta(days=1)
    assert _day(end, zone) == _day(ts, zone) + timedelta(days=1) and _day(end - 1, zone) == _day(ts, zone)


@pytest.mark.parametrize("name", ZONES)
def test_every_quarter_hour_of_a_year_lies_in_its_own_day(name):
    zone = ZoneInfo(name)
    for ts in QUARTER_HOURS:
        _check_day(ts, zone)


def test_havanas_repeated_midnight_begins_the_day_at_the_first_one():
    havana = ZoneInfo("America/Havana")
    first_midnight = datetime(2026, 11, 1, tzinfo=havana).timestamp()  # 04:00 UTC (still -04:00)
    in_repeated_hour = first_midnight + 3600 + 1800  # 00:30 again, fold=1, now -05:00
    assert datetime.fromtimestamp(in_repeated_hour, havana).fold == 1
    assert clock.local_day_start(in_repeated_hour, havana) == first_midnight
    assert clock.next_local_day_start(first_midnight - 1, havana) == first_midnight
    assert clock.next_local_day_start(in_repeated_hour, havana) - first_midnight == 25 * 3600


def test_this_hosts_zone_is_used_when_none_is_named(monkeypatch):
    """``zone=None`` (this host's zone, ``TZ``) follows the same rule."""
    monkeypatch.setenv("TZ", "America/Havana")
    time.tzset()
    try:
        for ts in range(YEAR_START + 300 * 86400, YEAR_START + 310 * 86400, 900):  # around 2026-11-01
            _check_day(ts, None)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
