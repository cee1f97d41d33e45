"""The MCP exchange under per-agent PostgreSQL roles: the message, claim and conversation tests
of this folder run again here with each real server connecting as its own agent's role (set up
by ``agent-bridge db-role``), so the row policies admit everything an agent's server does as
itself. The tests' own checks (``sql``, ``db_path``) use the owner's URL."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import roles_fixtures
from dispatch_harness import cli
from harness import PROJECT, McpAgent, collected_again, sql, start_agents

SOURCES = ("test_messages", "test_claims_across_processes", "test_conversations")
RACERS = 8  # as test_claims_across_processes races them


# The module's fixtures: a PostgreSQL store, a role per agent, the servers on them.
backend, role_urls, pair = roles_fixtures.backend, roles_fixtures.role_urls, roles_fixtures.pair


@pytest.fixture(scope="module")
def racers(env, role_urls):
    """test_claims_across_processes's racers, on their agents' roles."""
    agents = start_agents(["claude"] + ["kimi"] * RACERS, env, role_urls)
    yield agents[0], agents[1:]
    for agent in agents:
        agent.close()


for _source in SOURCES:
    globals().update(collected_again(Path(__file__).with_name(f"{_source}.py")))


def test_each_server_connects_as_its_own_agents_role(claude, kimi, db_path, role_urls):
    claude.ok("receive_messages"), kimi.ok("receive_messages")
    roles = {url.split("//")[1].split("@")[0] for url in role_urls.values()}
    connected = {
        row[0] for row in sql(db_path, "SELECT usename FROM pg_stat_activity WHERE datname = current_database()")
    }
    assert roles <= connected, connected


def test_a_server_given_another_agents_role_refuses_to_start(env, role_urls, db_path):
    """AGENT_ID says kimi, the role is claude's: one line before the handshake, exit 2, nothing written."""
    before = sql(db_path, "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM sessions)")
    done = subprocess.run(
        [sys.executable, str(PROJECT / "server.py")],
        env={**os.environ, **env, "AGENT_ID": "kimi", "AGENT_BRIDGE_DB": role_urls["claude"]},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    [line] = done.stderr.splitlines()
    assert line.startswith("agent-bridge: wrong_agent_role: AGENT_ID is kimi, but the role") and "db-role kimi" in line
    assert sql(db_path, "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM sessions)") == before


def test_a_shared_role_still_serves_any_agent(env, db_path):
    """The owner's URL (a role mapped to no agent): identity is AGENT_ID, as before."""
    server = McpAgent("kimi", {**env, "AGENT_BRIDGE_DB": db_path})
    try:
        assert server.ok("send_message", recipient="claude", text="as before")["id"] > 0
    finally:
        server.close()


def test_a_broadcast_reaches_its_copies_recipients_and_who_counts_others_mail(claude, kimi, db_path):
    for agent in (claude, kimi):
        while ids := [m["id"] for m in agent.ok("receive_messages", limit=100)["messages"]]:
            agent.ok("mark_read", message_ids=ids)
    sent = claude.ok("send_message", recipient="*", kind="notice", text="release at 5", dedup_key="roles-rel-5")
    [copy] = kimi.ok("receive_messages")["messages"]
    assert (copy["id"], copy["sender"], copy["text"]) == (sent["ids"][0], "claude", "release at 5")
    # Mail to kimi that claude's role may not read (kimi's note to itself): who still counts it.
    sql(db_path, "INSERT INTO messages (sender, recipient, text, created_at) VALUES ('kimi', 'kimi', 'x', 1)")
    [seen] = claude.ok("who", agent="kimi")["agents"]
    assert seen["unread"] == 2
    assert [m["id"] for m in kimi.ok("receive_messages")["messages"]][0] == sent["ids"][0]


def test_the_status_line_on_one_agents_role_counts_every_agents_waiting_mail(claude, kimi, env, db_path, role_urls):
    for agent in (claude, kimi):
        while ids := [m["id"] for m in agent.ok("receive_messages", limit=100)["messages"]]:
            agent.ok("mark_read", message_ids=ids)
    sql(db_path, "INSERT INTO messages (sender, recipient, text, created_at) VALUES ('kimi', 'kimi', 'x', 1)")
    done = cli({**env, "AGENT_BRIDGE_DB": role_urls["claude"]}, "statusline")
    assert done.returncode == 0 and "[kimi] stopped · 1 unread" in done.stdout, (done.stdout, done.stderr)
