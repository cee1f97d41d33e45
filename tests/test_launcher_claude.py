"""launchers/claude_headless.sh flags added after the real runs (issue 8 §4), checked with
the fake CLI of test_launchers.py: no session transcript, the non-worker bridge tools
removed from what the model is offered, and the per-task budget."""

import pytest
from test_launchers import CLAUDE, claude_result, ctx, record, run, write_output  # noqa: F401 (ctx: fixture)

NON_WORKER = ["mcp__agent_bridge__start_conversation", "mcp__agent_bridge__listener"]


def test_no_session_persistence_and_non_worker_tools_not_offered(ctx):  # noqa: F811
    proc = run(CLAUDE, ctx, CLAUDE_BIN=str(ctx["fake"]), FAKE_OUTPUT_FILE=write_output(ctx, claude_result()))
    assert proc.returncode == 0, proc.stderr
    argv = record(ctx)["argv"]
    assert "--no-session-persistence" in argv
    assert argv[argv.index("--disallowedTools") + 1].split(",") == NON_WORKER
    # variadic: followed by another option, so it cannot swallow anything
    assert argv[argv.index("--disallowedTools") + 2].startswith("-")
    assert "--max-budget-usd" not in argv
    assert "CLAUDE_CONFIG_DIR" not in record(ctx)["env"]  # the user's own config dir is left alone


def test_the_user_config_dir_is_passed_through_unchanged(ctx):  # noqa: F811
    run(CLAUDE, ctx, CLAUDE_BIN=str(ctx["fake"]), CLAUDE_CONFIG_DIR="/somewhere/.claude")
    assert record(ctx)["env"]["CLAUDE_CONFIG_DIR"] == "/somewhere/.claude"


@pytest.mark.parametrize("budget", ["0.25", "3", ".5", "10.00"])
def test_max_cost_becomes_max_budget_usd(ctx, budget):  # noqa: F811
    proc = run(CLAUDE, ctx, CLAUDE_BIN=str(ctx["fake"]), AGENT_BRIDGE_MAX_COST_USD=budget)
    assert proc.returncode == 0, proc.stderr
    argv = record(ctx)["argv"]
    assert argv[argv.index("--max-budget-usd") + 1] == budget


@pytest.mark.parametrize("budget", ["0", "0.0", "-1", "abc", "1e3", "1.", "1 2", "$5"])
def test_a_bad_max_cost_is_a_bad_invocation(ctx, budget):  # noqa: F811
    proc = run(CLAUDE, ctx, CLAUDE_BIN=str(ctx["fake"]), AGENT_BRIDGE_MAX_COST_USD=budget)
    assert proc.returncode == 2
    assert "AGENT_BRIDGE_MAX_COST_USD" in proc.stderr
