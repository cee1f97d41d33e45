"""The suite's server zygote (``tests/server_zygote.py``): a forked server is the server a test
asked for, and nothing of it outlives the client that started it."""

import os
import signal

import psutil
from dispatch_harness import wait_until
from harness import McpAgent, bridge_env, sql, write_config


def _trampolines() -> list[psutil.Process]:
    return [p for p in psutil.Process().children() if "server_trampoline.py" in " ".join(p.cmdline())]


def test_a_forked_server_takes_the_callers_environment_and_serves_its_agent(tmp_path):
    env = bridge_env(tmp_path, write_config(tmp_path / "config.json"))
    kimi = McpAgent("kimi", env).wait_ready()
    try:
        sent = kimi.ok("send_message", recipient="claude", text="from a fork")
        assert sql(env["AGENT_BRIDGE_DB"], "SELECT sender FROM messages WHERE id = ?", (sent["id"],)) == [("kimi",)]
        (server,) = sql(env["AGENT_BRIDGE_DB"], "SELECT pid FROM sessions WHERE agent = 'kimi'")[0]
        assert server != os.getpid()  # a process of its own
    finally:
        kimi.close()


def test_a_killed_client_side_leaves_no_server(tmp_path):
    env = bridge_env(tmp_path, write_config(tmp_path / "config.json"))
    before = {p.pid for p in _trampolines()}
    kimi = McpAgent("kimi", env).wait_ready()
    try:
        kimi.ok("receive_messages")
        (server,) = sql(env["AGENT_BRIDGE_DB"], "SELECT pid FROM sessions WHERE agent = 'kimi'")[0]
        (trampoline,) = [p for p in _trampolines() if p.pid not in before]
        trampoline.send_signal(signal.SIGKILL)
        wait_until(
            lambda: not psutil.pid_exists(server) or psutil.Process(server).status() == "zombie",
            what="the zygote to end the server of a killed trampoline",
        )
    finally:
        kimi.close()


def test_servers_asked_for_from_several_threads_at_once_all_start(tmp_path):
    """A module may start its servers from a thread pool: the zygote is started once, by the first."""
    from concurrent.futures import ThreadPoolExecutor

    env = bridge_env(tmp_path, write_config(tmp_path / "config.json"))
    with ThreadPoolExecutor(4) as pool:
        agents = list(pool.map(lambda name: McpAgent(name, env), ["kimi", "claude", "kimi", "claude"]))
    try:
        assert all(agent.wait_ready().ok("receive_messages") is not None for agent in agents)
    finally:
        for agent in agents:
            agent.close()
