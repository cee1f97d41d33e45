"""``dispatcher/core/clock.py`` is the only module that reads a clock: the wall clock (``time.time``,
``datetime.now``) and the monotonic one (``time.monotonic``, ``time.perf_counter``). Every other
module asks ``clock``, so the next step (deadlines on the monotonic clock, a test clock) changes
one module. ``time.sleep`` reads no clock and stays allowed. Read from the syntax tree, not by grep."""

import ast

from harness import dispatcher_modules

from dispatcher.core import clock

CLOCK_MODULE = "dispatcher/core/clock.py"
# time.<name> that return a reading of a clock
TIME_READERS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}
# datetime.<name> / date.<name> that read the wall clock
DATE_READERS = {"now", "utcnow", "today"}
# time.<name>(...) that read the wall clock when given no time: (name, arguments that mean "now")
IMPLICIT_NOW = {"gmtime": 0, "localtime": 0, "ctime": 0, "asctime": 0, "strftime": 1}


def _name(node: ast.expr) -> str | None:
    """``time`` for ``time``, ``datetime`` for ``datetime.datetime``: the last name of a dotted value."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def clock_reads(tree: ast.Module) -> list[str]:
    """Each place in ``tree`` that reads a clock, as ``line: what``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = _name(node.value)
            if (owner == "time" and node.attr in TIME_READERS) or (
                owner in ("datetime", "date") and node.attr in DATE_READERS
            ):
                found.append(f"{node.lineno}: {owner}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [f"{node.lineno}: from time import {a.name}" for a in node.names if a.name in TIME_READERS]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _name(node.func.value) == "time"
            and len(node.args) == IMPLICIT_NOW.get(node.func.attr, -1)
        ):
            found.append(f"{node.lineno}: time.{node.func.attr} of now")
    return found


def test_only_the_clock_module_reads_a_clock():
    offenders = {
        path: reads for path, tree in dispatcher_modules() if path != CLOCK_MODULE and (reads := clock_reads(tree))
    }
    assert offenders == {}, f"read the clock through dispatcher.core.clock instead: {offenders}"


def test_the_check_sees_each_way_of_reading_a_clock():
    source = """
import time, datetime as dt
from datetime import datetime, date
from time import monotonic
a = time.time(); b = time.monotonic(); c = time.perf_counter(); d = datetime.now(); e = dt.datetime.utcnow()
f = date.today(); g = time.strftime("%H"); h = time.gmtime(); deadline = time.monotonic_ns
time.sleep(0.1); time.strftime("%H", time.gmtime(0)); datetime.fromtimestamp(0)
"""
    assert len(clock_reads(ast.parse(source))) == 10


def test_the_clock_reads_the_clocks():
    import time

    assert abs(clock.now() - time.time()) < 5
    first = clock.monotonic()
    assert clock.monotonic() >= first
    stamp = clock.utc_stamp()
    assert len(stamp) == 20 and stamp.endswith("Z") and stamp[10] == "T"
