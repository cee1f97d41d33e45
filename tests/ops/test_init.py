"""`agent-bridge init` tells the truth: each CLI's version from its own version line and only
when it runs, "found but does not run" with the reason otherwise, Kimi under KIMI_NODE; `--force`
keeps a backup; every directory it creates is 0700.

Before, a Kimi that crashed on too old a Node was reported as version 20.20.2 (Node's, scraped
from the crash), `--force` replaced config.json without a copy, and ~/.config/agent-bridge was 0755."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from harness import PROJECT

from dispatcher.ops.init import CLIS, VERSION_TIMEOUT_SECONDS, read_version

FIXTURES = Path(__file__).parents[1] / "fixtures"
CLI = {cli.agent: cli for cli in CLIS}
KIMI_CRASH = (FIXTURES / "kimi-node20-version-crash.stderr").read_text()


@pytest.mark.parametrize(
    ("agent", "returncode", "stdout", "stderr", "expected"),
    [
        ("claude", 0, "2.1.332 (Claude Code)\n", "", ("2.1.332", None)),
        ("codex", 0, "codex-cli 0.171.0\n", "", ("0.171.0", None)),
        ("kimi", 0, "2.1.0\n", "", ("2.1.0", None)),
        ("kimi", None, "2.1.0\n", "", ("2.1.0", None)),  # printed its version, then lingered
        ("gemini", 0, "0.61.0\n", "", ("0.61.0", None)),
        ("kimi", 1, "", KIMI_CRASH, (None, "exit 1: Node.js v20.20.2")),  # Node's version is not Kimi's
        ("claude", 0, "Claude Code, built 1.2.3-beta\n", "", (None, None)),  # runs; no version line we know
        ("claude", 3, "2.1.332 (Claude Code)\n", "", (None, "exit 3: 2.1.332 (Claude Code)")),  # the exit code counts
        ("gemini", None, "", "", (None, f"it did not answer --version within {VERSION_TIMEOUT_SECONDS:g} s")),
        ("codex", 127, "", "", (None, "exit 127")),
    ],
)
def test_read_version(agent, returncode, stdout, stderr, expected):
    assert read_version(CLI[agent], returncode, stdout, stderr) == expected


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def home(tmp_path) -> dict:
    bins = tmp_path / "bin"
    bins.mkdir()
    _script(bins / "claude", "echo '2.1.332 (Claude Code)'")
    crash = tmp_path / "crash.stderr"
    crash.write_text(KIMI_CRASH)
    _script(bins / "kimi", f"cat {crash} >&2; exit 1")  # what Kimi 2.1.0 does on Node 20
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": f"{bins}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "home" / "xdg-config"),
        "PYTHONPATH": str(PROJECT),
    }
    return {"env": env, "work": work, "bins": bins, "config": tmp_path / "home" / "xdg-config" / "agent-bridge"}


def _init(home: dict, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", "init", "--workspace", str(home["work"]), *args],
        cwd=home["work"],
        env={**home["env"], **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_cli_that_does_not_run_is_reported_with_its_reason_not_a_scraped_version(home):
    done = _init(home)
    assert done.returncode == 0, done.stderr
    assert "claude: " in done.stdout and "2.1.332 (tested)" in done.stdout
    assert "kimi: " in done.stdout and "found but does not run (exit 1: Node.js v20.20.2)" in done.stdout
    assert "set KIMI_NODE" in done.stdout
    assert "20.20.2 (" not in done.stdout  # never reported as Kimi's version


def test_kimi_runs_under_kimi_node(home):
    node = _script(home["bins"] / "node22", 'shift; [ "$1" = --version ] && echo 2.1.0')  # node KIMI_BIN --version
    done = _init(home, KIMI_NODE=str(node))
    assert done.returncode == 0, done.stderr
    assert "2.1.0 (tested)" in done.stdout and "does not run" not in done.stdout


def test_every_directory_init_creates_is_0700_and_force_keeps_a_backup(home):
    assert _init(home).returncode == 0
    config = home["config"] / "config.json"
    for directory in (home["config"], home["config"].parent, Path(home["env"]["HOME"])):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    first = config.read_text()
    config.write_text(first.replace('"dispatch_max_age_seconds": 86400', '"dispatch_max_age_seconds": 600'))
    edited = config.read_text()
    refused = _init(home)
    assert refused.returncode == 2 and "config_exists" in refused.stderr
    forced = _init(home, "--force")
    assert forced.returncode == 0, forced.stderr
    (backup,) = home["config"].glob("config.json.bak-*")
    assert backup.read_text() == edited and stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert f"Kept the previous file as {backup}" in forced.stdout
    assert json.loads(config.read_text())["dispatch_max_age_seconds"] == 86400
    assert not [p for p in home["config"].iterdir() if p.name.endswith(".tmp")]
    assert os.access(config, os.R_OK)


def test_scripted_declares_a_scripted_claude_and_me_with_nothing_to_export(home):
    """The quick start without a model: `init --scripted` ignores the CLIs on PATH, and names the
    scripted worker's launcher in config.json, where a listener started from any shell reads it
    (issue 30, item 2: the worker command was a variable a new terminal did not have)."""
    from dispatcher.core.config import BridgeConfig

    done = _init(home, "--scripted")
    assert done.returncode == 0, done.stderr
    config = json.loads((home["config"] / "config.json").read_text())
    BridgeConfig.model_validate(config)
    agents = config["agents"]
    assert set(agents) == {"claude", "me"}
    assert (agents["claude"]["auto"], agents["me"]["auto"]) == (True, False)
    assert {a["launcher"] for a in agents.values()} == {"launchers/scripted_headless.sh"}
    assert {a["permissions"]["level"] for a in agents.values()} == {"bridge"}
    assert "export" not in done.stdout and "2.1.332" not in done.stdout  # the claude on PATH is not asked
    assert (
        "AGENT_BRIDGE_WORKER_COMMAND"
        not in (PROJECT / "README.md").read_text().split("### Quick start")[1].split("\n## ")[0]
    )


def test_init_force_after_the_quick_start_keeps_me_and_names_what_it_drops(home):
    """Issue 30, item 3: switching to the real Claude Code with `init --force` dropped `me`, and
    `send --from me` then failed unknown_agent with nothing saying how to get it back."""
    assert _init(home, "--scripted").returncode == 0
    config = home["config"] / "config.json"
    document = json.loads(config.read_text())
    document["agents"]["helper"] = {"auto": True, "launcher": "launchers/command_headless.sh"}  # found nowhere now
    document["agents"]["ghost"] = {"cli": "nosuchcli"}  # a person's entry, but naming no CLI the bridge has
    config.write_text(json.dumps(document))
    forced = _init(home, "--force")
    assert forced.returncode == 0, forced.stderr
    agents = json.loads(config.read_text())["agents"]
    assert agents["me"] == document["agents"]["me"]  # kept as written
    assert agents["claude"]["cli"] == "claude" and "launcher" not in agents["claude"]
    assert "helper" not in agents and "ghost" not in agents
    (backup,) = home["config"].glob("config.json.bak-*")
    assert "Kept me from the previous file, as written (auto off: a person answers)." in forced.stdout
    assert (
        f"Dropped ghost, helper of the previous file (not found here, or no longer valid); to add one back, copy its entry from {backup}"
        in forced.stdout
    )


def test_the_quick_start_run_again_changes_nothing_and_the_hint_names_scripted(home):
    """Issue 30, item 6: re-running the quick start failed config_exists, and its hint said `init --force`."""
    assert _init(home, "--scripted").returncode == 0
    again = _init(home, "--scripted")
    assert again.returncode == 0, again.stderr
    assert "already declares this; nothing changed." in again.stdout
    config = home["config"] / "config.json"
    config.write_text(config.read_text().replace('"worker_timeout_seconds": 120', '"worker_timeout_seconds": 60', 1))
    refused = _init(home, "--scripted")
    assert refused.returncode == 2 and "rerun `agent-bridge init --scripted --force`" in refused.stderr


def test_init_writes_where_agent_bridge_config_points(home, tmp_path):
    """Issue 30, item 6: init ignored AGENT_BRIDGE_CONFIG, which every other command honours."""
    elsewhere = tmp_path / "mine" / "config.json"
    done = _init(home, "--scripted", AGENT_BRIDGE_CONFIG=str(elsewhere))
    assert done.returncode == 0, done.stderr
    assert elsewhere.is_file() and f"Wrote {elsewhere}" in done.stdout
    assert not (home["config"] / "config.json").exists()
