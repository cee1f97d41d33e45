"""The fast tier's rule (`uv run pytest -m fast`, CONTRIBUTING.md): one case per reason a test is
left out of it. That a fast test really starts no process is enforced at run time by the audit
hook in tests/conftest.py."""

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import TESTS, check_postgres_proof, is_fast


@dataclass
class Item:
    path: Path = TESTS / "bridge" / "test_messages.py"
    markers: tuple[str, ...] = ()
    fixturenames: tuple[str, ...] = ("conn",)
    params: dict = field(default_factory=dict)

    def get_closest_marker(self, name):
        return name if name in self.markers else None

    @property
    def callspec(self):
        return type("CallSpec", (), {"params": self.params})() if self.params else None


IN_PROCESS = "def test_x(conn):\n    assert conn\n"


def test_an_in_process_test_on_sqlite_is_fast():
    assert is_fast(Item(params={"backend": "sqlite"}), IN_PROCESS)


@pytest.mark.parametrize(
    ("item", "source"),
    [
        (Item(markers=("cli",)), IN_PROCESS),
        (Item(markers=("slow",)), IN_PROCESS),
        (Item(fixturenames=("claude",)), IN_PROCESS),
        (Item(fixturenames=("postgres_url",)), IN_PROCESS),
        (Item(params={"backend": "postgres"}), IN_PROCESS),
        (Item(), "import subprocess\n" + IN_PROCESS),
        (Item(), "from harness import McpAgent\n" + IN_PROCESS),
        (Item(path=TESTS / "dispatch" / "test_checked.py"), IN_PROCESS),
    ],
    ids=["cli", "slow", "server-fixture", "postgres-fixture", "postgres-backend", "subprocess", "mcp-agent", "listed"],
)
def test_a_test_that_leaves_the_process_is_not_fast(item, source):
    assert not is_fast(item, source)


# ---- postgres_proven_by: a test on SQLite alone names the test that proves its PostgreSQL path ----


def _proof_on_both():
    """Stands for a test of the module that runs on both backends."""


@pytest.mark.sqlite_only("stands for a test that runs on SQLite alone")
def _proof_on_sqlite():
    """Stands for a test of the module that does not run on PostgreSQL."""


def _metafunc(**module_names):
    module = type("Module", (), module_names)
    definition = type("Definition", (), {"nodeid": "tests/x/test_y.py::test_z"})()
    return type("Metafunc", (), {"module": module, "definition": definition})()


def test_a_postgres_proof_that_runs_on_postgres_is_accepted():
    mark = pytest.mark.postgres_proven_by("test_proof", "the same wiring").mark
    check_postgres_proof(_metafunc(test_proof=staticmethod(_proof_on_both)), mark)


@pytest.mark.parametrize(
    ("names", "args"),
    [
        ({}, ("test_proof", "the same wiring")),  # no such test: a renamed proof would hide the path
        (
            {"test_proof": staticmethod(_proof_on_sqlite)},
            ("test_proof", "the same wiring"),
        ),  # the proof skips PostgreSQL
        ({"test_proof": staticmethod(_proof_on_both)}, ("test_proof",)),  # no reason given
        ({"test_proof": staticmethod(_proof_on_both)}, ("test_proof", "")),
    ],
    ids=["missing", "proof-on-sqlite", "no-why", "empty-why"],
)
def test_a_postgres_proof_that_proves_nothing_stops_the_run(names, args):
    with pytest.raises(pytest.UsageError, match="must name a test of its module that runs on PostgreSQL"):
        check_postgres_proof(_metafunc(**names), pytest.mark.postgres_proven_by(*args).mark)
