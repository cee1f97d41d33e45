"""A send whose answer is lost after the server committed it is stored once, and says so honestly.

A real PostgreSQL server behind ``CommitCutProxy``: the connection drops after the server
committed the send's INSERT and before its answer reaches the client. The send used to fail with
"nothing was changed. Retry shortly", and the retry stored the task twice (two attempts, the work
done twice). Now every send has an idempotency key (the caller's ``dedup_key``, else one made for
the call), the call itself retries once with it on a new connection, and when that fails too the
error says the message may have been stored and names the key for the caller's own retry."""

import re

import pytest
from commit_cut_proxy import CommitCutProxy
from dispatch_harness import cli, query
from harness import McpAgent, bridge_env, write_config

from dispatcher.bridge import messages
from dispatcher.core.errors import BridgeError
from dispatcher.store import open_store

AGENTS = frozenset({"claude", "kimi"})


@pytest.fixture
def store(postgres_url):
    open_store(postgres_url).close()  # created and migrated directly: only the sends cross the proxy
    return postgres_url


def _env(tmp_path, url: str) -> dict:
    return {**bridge_env(tmp_path, write_config(tmp_path / "config.json")), "AGENT_BRIDGE_DB": url}


def _sent(url: str) -> list:
    return query(url, "SELECT id, dedup_key FROM messages WHERE sender = 'kimi' ORDER BY id")


@pytest.mark.parametrize(
    ("given", "duplicate"),
    [
        (None, False),  # the call's own fresh key: the stored message can only be this call's
        ("mine", True),  # the caller's key: an earlier call may have stored it; the store's answer stands
    ],
)
def test_the_tools_send_whose_answer_is_lost_is_stored_once_and_answered(tmp_path, store, given, duplicate):
    key_argument = {} if given is None else {"dedup_key": given}
    with CommitCutProxy(store, cuts=1) as proxy:
        agent = McpAgent("kimi", _env(tmp_path, proxy.url)).wait_ready()
        try:
            result = agent.call("send_message", recipient="claude", text="do it once", kind="task", **key_argument)
        finally:
            agent.close()
        assert proxy.cut_count == 1  # the first try's answer was lost after its commit
    assert not result.is_error, result.text
    [(stored_id, key)] = _sent(store)  # stored once: one task, one attempt
    assert (result.data["id"], result.data["duplicate"]) == (stored_id, duplicate)
    assert key == given or (given is None and key.startswith("send-"))


def test_the_commands_send_says_it_may_have_been_stored_and_names_the_key_to_retry_with(tmp_path, store):
    with CommitCutProxy(store, cuts=1, refuse_after_cuts=True) as proxy:
        failed = cli(_env(tmp_path, proxy.url), "send", "--from", "kimi", "--to", "claude", "--task", "do it once")
    assert failed.returncode == 1, failed.stderr
    assert "send_outcome_unknown" in failed.stderr and "the message may have been stored" in failed.stderr
    assert "nothing was changed" not in failed.stderr
    key = re.search(r"--dedup-key (send-[0-9a-f]{32})", failed.stderr).group(1)
    assert _sent(store) == [(_sent(store)[0][0], key)]  # the first try did store it

    again = cli(
        _env(tmp_path, store), "send", "--from", "kimi", "--to", "claude", "--task", "do it once", "--dedup-key", key
    )
    assert again.returncode == 0, again.stderr
    assert "(a repeat of this dedup key: nothing new was sent)" in again.stdout
    assert len(_sent(store)) == 1


def test_another_write_whose_answer_is_lost_does_not_claim_nothing_changed(tmp_path, store):
    """Writes other than a send are not retried; their error no longer says nothing was changed."""
    with CommitCutProxy(store, cuts=1) as proxy:
        started = cli(
            _env(tmp_path, proxy.url), "conversation", "start", "--from", "kimi", "--to", "claude", "--goal", "g"
        )
        assert proxy.cut_count == 1
    assert started.returncode == 1, started.stderr
    assert "store_unavailable" in started.stderr and "may have been done, or not" in started.stderr
    assert "nothing was changed" not in started.stderr
    assert len(_sent(store)) == 1  # it was


def test_every_send_has_a_key_the_callers_or_a_fresh_one():
    assert messages.send_key("mine") == ("mine", False)
    first, second = messages.send_key(None), messages.send_key(None)
    assert first[1] and second[1] and first[0] != second[0] and first[0].startswith("send-")
    with pytest.raises(BridgeError, match="invalid_dedup_key"):
        messages.send_key("agent-bridge:mine")


def test_a_send_without_a_key_is_stored_under_a_fresh_one_and_a_repeat_with_it_is_a_duplicate(tmp_path):
    conn = open_store(tmp_path / "bridge.db")
    try:
        send = {"sender": "kimi", "recipient": "claude", "text": "t", "agents": AGENTS, "kind": "task"}
        first = messages.send_once(lambda: conn, **send)
        [(stored_id, key)] = _sent(tmp_path / "bridge.db")
        assert (first["id"], first["duplicate"]) == (stored_id, False)
        repeat = messages.send_once(lambda: conn, dedup_key=key, **send)
        assert (repeat["id"], repeat["duplicate"]) == (stored_id, True)
        assert len(_sent(tmp_path / "bridge.db")) == 1
    finally:
        conn.close()
