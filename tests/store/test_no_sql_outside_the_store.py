"""All SQL lives in ``dispatcher/store/``: no string literal anywhere else in the package (or in
``server.py``) starts with an SQL statement. Domain and adapter modules call the store's named
functions instead, so a second connector (PostgreSQL) replaces one folder, not the house."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dispatcher"
STORE = PACKAGE / "store"

# The start of an SQL statement, in upper case as the project writes SQL (so prose such as
# "Update the config" or "select one" is not one). Leading whitespace is allowed.
SQL_START = re.compile(
    r"""\s*(?:
        SELECT\s.*?\bFROM\b
      | (?:INSERT|REPLACE)(?:\s+OR\s+[A-Z]+)?\s+INTO\b
      | UPDATE\s+\w+\s+SET\b
      | DELETE\s+FROM\b
      | (?:CREATE|DROP)\s+(?:UNIQUE\s+|TEMP\s+|TEMPORARY\s+)?(?:TABLE|INDEX|VIEW|TRIGGER)\b
      | ALTER\s+TABLE\b
      | PRAGMA\s+\w+
      | SHOW\s+\w+\s*;?\s*$
      | SET\s+(?:SESSION\s+|LOCAL\s+)?\w+\s*(?:=|TO\b)
      | (?:BEGIN|COMMIT|ROLLBACK|END)(?:\s+(?:DEFERRED|IMMEDIATE|EXCLUSIVE|TRANSACTION))?\s*;?\s*$
      | (?:SAVEPOINT|RELEASE)\s+\w+
      | WITH\s+(?:RECURSIVE\s+)?\w+(?:\s*\([^)]*\))?\s+AS\s*\(
      | (?:VACUUM|ANALYZE|REINDEX)(?:\s+[\w.]+)?\s*;?\s*$ | VACUUM\s+INTO\b | ATTACH\s+DATABASE\b
    )""",
    re.VERBOSE | re.DOTALL,
)


def starts_with_sql(text: str) -> bool:
    return SQL_START.match(text) is not None


def _literal_text(node: ast.AST) -> str | None:
    """A string constant's text; an f-string's text with each placeholder as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def sql_literals(path: Path) -> list[str]:
    """``line: start of literal`` for each string literal in ``path`` that starts with SQL."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        text = _literal_text(node)
        if text is not None and starts_with_sql(text):
            found.append(f"{node.lineno}: {text.strip()[:60]!r}")
    return found


def _outside_the_store() -> list[Path]:
    return sorted(
        [p for p in PACKAGE.rglob("*.py") if STORE not in p.parents] + [ROOT / "server.py"],
    )


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * FROM messages WHERE id = ?",
        "\n    SELECT m.id\n    FROM messages AS m",
        "SELECT COUNT(*), MIN(created_at) FROM messages WHERE {}",
        "INSERT INTO messages (id) VALUES (?)",
        "INSERT OR REPLACE INTO listeners (agent) VALUES (?)",
        "UPDATE messages SET claim_owner = NULL",
        "DELETE FROM sessions WHERE id = ?",
        "CREATE TABLE t (id INTEGER)",
        "CREATE TEMP TABLE prune_gone (id INTEGER)",
        "ALTER TABLE messages ADD COLUMN x",
        "DROP TABLE temp.prune_gone",
        "PRAGMA data_version",
        "PRAGMA busy_timeout = {}",
        "SHOW server_version",
        "SET lock_timeout = {}",
        "SET default_transaction_read_only TO on",
        "BEGIN IMMEDIATE",
        "COMMIT",
        "ROLLBACK",
        "WITH RECURSIVE chain(id) AS (SELECT 1)",
        "WITH kept AS (SELECT id FROM messages)",
        "VACUUM",
        "VACUUM INTO ?",
    ],
)
def test_the_detector_flags_each_kind_of_statement(text):
    assert starts_with_sql(text)


@pytest.mark.parametrize(
    "text",
    [
        "Update the config first.",
        "select a message",
        "SELECT",  # a word in a usage text, no statement
        "Select messages from the inbox",
        "begin the dispatch",
        "BEGIN: the worker starts",
        "With the lock held, write",
        "the store (SELECT * FROM messages) answers",  # SQL inside prose is not its start
        "PRAGMA",
        "SHOW the listener's status",
        "SET it to 5 in config.json",
        "VACUUM afterwards (holds the write lock while it runs).",
        "",
    ],
)
def test_the_detector_leaves_prose_alone(text):
    assert not starts_with_sql(text)


def test_no_sql_outside_the_store():
    offenders = {_name(p): found for p in _outside_the_store() if (found := sql_literals(p))}
    assert offenders == {}, "SQL belongs in dispatcher/store/ (a named function per query): " + repr(offenders)
