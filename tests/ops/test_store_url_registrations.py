"""A PostgreSQL store named by URL reaches every file ``register`` writes as that URL: the MCP
server entries, the status line and the hooks of each CLI (issue 30, item 1). Before, each got
``<cwd>/postgresql:/...``, a SQLite file in the folder the user happened to be in."""

import json
import shlex
import tomllib
from pathlib import Path

import pytest
from register_harness import register, register_env

URL = "postgresql://postgres@127.0.0.1:5432/first_day?options=-csearch_path%3Dt_1"


def store_settings(value: object) -> list[str]:
    """Every AGENT_BRIDGE_DB a parsed settings document gives: an ``env`` entry's value, or a
    ``AGENT_BRIDGE_DB=...`` word of a shell command."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "AGENT_BRIDGE_DB" and isinstance(item, str):
                found.append(item)
            else:
                found += store_settings(item)
    elif isinstance(value, list):
        for item in value:
            found += store_settings(item)
    elif isinstance(value, str) and "AGENT_BRIDGE_DB=" in value:
        found += [word.split("=", 1)[1] for word in shlex.split(value) if word.startswith("AGENT_BRIDGE_DB=")]
    return found


def parsed(path: Path) -> object:
    return tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())


@pytest.mark.parametrize("cli", ["claude", "kimi", "codex", "gemini"])
def test_a_postgresql_url_is_written_as_it_is_into_every_entry(tmp_path, cli):
    env = {**register_env(tmp_path), "AGENT_BRIDGE_DB": URL}
    project = tmp_path / "my-project"
    project.mkdir()
    extra = ["--statusline"] if cli == "claude" else []
    done = register(env, cli, "--agent", cli, "--hooks", *extra, cwd=project)
    assert done.returncode == 0, done.stderr
    written = [
        p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".json", ".toml") and p.parent != tmp_path
    ]
    settings = [value for path in written for value in store_settings(parsed(path))]
    # the MCP entry and every hook (and Claude's status line) name the store
    assert len(settings) >= 2, written
    assert set(settings) == {URL}
    assert list(project.iterdir()) == []
