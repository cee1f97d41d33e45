"""The CLI result corpus (tests/fixtures/cli_results): each CLI's own result, as the launcher
leaves it in the attempt directory, classified into payload-free diagnostics; table-driven,
the known traps included. Plus the pure status functions, one row per case."""

import json
import shutil
from pathlib import Path

import pytest

from dispatcher.clis import results as cli_results
from dispatcher.clis.claude import OUTPUT_FILE as CLAUDE_OUTPUT
from dispatcher.clis.claude.results import claude_status
from dispatcher.clis.codex import OUTPUT_FILE as CODEX_OUTPUT
from dispatcher.clis.codex.results import codex_status
from dispatcher.clis.gemini import OUTPUT_FILE as GEMINI_OUTPUT
from dispatcher.clis.gemini.results import gemini_status
from dispatcher.clis.kimi import KIMI_HOME
from dispatcher.clis.kimi import OUTPUT_FILE as KIMI_OUTPUT
from dispatcher.clis.kimi.results import kimi_status
from dispatcher.clis.results import CLI_STATUSES, LEDGER_KEYS
from dispatcher.dispatch.attempts import clean_diagnostics, ledger_fields
from dispatcher.dispatch.cli_results import cli_diagnostics

CORPUS = Path(__file__).parents[1] / "fixtures" / "cli_results"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
OUTPUT_NAME = {"claude": CLAUDE_OUTPUT, "kimi": KIMI_OUTPUT, "codex": CODEX_OUTPUT, "gemini": GEMINI_OUTPUT}
CANARY = "CANARY-7f3e"
RUNS = sorted(
    str(p.relative_to(CORPUS))
    for p in CORPUS.glob("*/*")
    if p.is_file()
    and not p.name.endswith(".wire.jsonl")
    and p.name != "README.md"
    and p.parent.name in OUTPUT_NAME
    and not (p.parent.name in ("codex", "kimi") and p.name.endswith(".worker.log"))  # a run's stderr, beside it
)


def _diagnostics(tmp_path: Path, run: str, exit_code: int | None) -> dict:
    """Lay the run out as a launcher would, and read it as the supervisor does."""
    source = CORPUS / run
    cli = source.parent.name
    attempt = tmp_path / "attempt"
    attempt.mkdir(mode=0o700)
    if cli == "gemini" and source.suffix == ".log":  # an error: stdout empty, the error object on stderr
        (attempt / OUTPUT_NAME[cli]).write_text("")
        shutil.copyfile(source, attempt / "worker.log")
    else:
        shutil.copyfile(source, attempt / OUTPUT_NAME[cli])
    # codex, kimi: the run's stderr, where Codex reports refused calls and Kimi that it is not logged in
    log = source.with_name(source.name.replace(".stream.jsonl", ".jsonl")).with_suffix(".worker.log")
    if cli in ("codex", "kimi") and log.exists():
        shutil.copyfile(log, attempt / "worker.log")
    wire = source.with_name(source.name.replace(".stream.jsonl", ".wire.jsonl"))
    if cli == "kimi" and wire != source and wire.exists():
        main = attempt / KIMI_HOME / "sessions" / "h" / "s" / "agents" / "main"
        main.mkdir(parents=True)
        shutil.copyfile(wire, main / "wire.jsonl")
    diag = cli_diagnostics(attempt, exit_code)
    assert diag is not None and diag["cli"] == cli
    return diag


def test_the_corpus_covers_every_cli_and_every_listed_file_exists():
    assert {run.split("/")[0] for run in RUNS} == set(OUTPUT_NAME)
    assert set(EXPECTED) <= set(RUNS), set(EXPECTED) - set(RUNS)


@pytest.mark.parametrize("run", RUNS)
def test_every_run_in_the_corpus_is_classified_payload_free(tmp_path, run):
    diag = _diagnostics(tmp_path, run, EXPECTED.get(run, {}).get("exit_code"))
    assert diag["cli_status"] in CLI_STATUSES
    assert set(LEDGER_KEYS) <= set(diag)
    assert clean_diagnostics(diag) == diag  # all of it survives what the supervisor keeps (32 keys, scalars)
    for key, value in diag.items():
        if isinstance(value, list):  # denied_tools: tool names only
            assert all(isinstance(v, str) and cli_results.ENUM.fullmatch(v) for v in value), key
            continue
        assert value is None or isinstance(value, bool | int | float) or cli_results.ENUM.fullmatch(value), key
    assert CANARY not in json.dumps(diag)


@pytest.mark.parametrize("run", sorted(EXPECTED))
def test_each_run_yields_its_expected_fields(tmp_path, run):
    case = EXPECTED[run]
    diag = _diagnostics(tmp_path, run, case["exit_code"])
    assert {key: diag.get(key) for key in case["expect"]} == case["expect"]


def test_the_traps_are_in_the_corpus():
    traps = {run: EXPECTED[run]["expect"] for run in EXPECTED if "trap" in run}
    # subtype "success" with is_error true is an API error, not a success
    assert any(e["subtype"] == "success" and e["is_error"] and e["cli_status"] == "api_error" for e in traps.values())
    # a budget stop with is_error false is still a budget stop
    assert any(e.get("is_error") is False and e["cli_status"] == "budget_exceeded" for e in traps.values())


# -- the pure status rules, one row per case --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result_json", "subtype", "reason", "is_error", "api_status", "status"),
    [
        ("ok", "success", "completed", False, None, "ok"),
        ("ok", "success", None, False, None, "ok"),
        ("ok", "success", "api_error", True, None, "api_error"),  # the trap: success + is_error
        ("ok", "success", None, True, 500, "api_error"),
        ("ok", "success", None, True, None, "error"),
        ("ok", "error_max_turns", "max_turns", True, None, "max_turns"),
        ("ok", "error_max_budget_usd", "budget_exhausted", True, None, "budget_exceeded"),
        ("ok", "error_max_budget_usd", None, False, None, "budget_exceeded"),  # the trap: is_error false
        ("ok", "success", "budget_exhausted", False, None, "budget_exceeded"),
        ("ok", "error_during_execution", None, True, None, "error"),
        ("ok", "success", "aborted_tools", False, None, "error"),  # not a completed turn
        ("missing", None, None, None, None, "no_result"),
        ("invalid", None, None, None, None, "no_result"),
    ],
)
def test_claude_status(result_json, subtype, reason, is_error, api_status, status):
    assert claude_status(result_json, subtype, reason, is_error, api_status) == status


def test_the_clis_own_words_for_missing_credentials_are_auth_errors_for_all_four():
    """Before, Claude's "Not logged in" was classified api_error (the worker's failure hid its
    cause); Kimi's "No model configured ... /login" and Codex's 401 were plain errors."""
    runs = {
        "claude/captured-2.1.332-not-logged-in.json",
        "claude/captured-2.1.332-invalid-api-key.json",
        "kimi/captured-2.1.0-not-logged-in.stream.jsonl",
        "codex/captured-0.171.0-invalid-api-key.jsonl",
        "gemini/error-auth-41.stderr.log",
    }
    assert {run.split("/")[0] for run in runs} == set(OUTPUT_NAME)
    assert {run for run in runs if EXPECTED[run]["expect"]["cli_status"] == "auth_error"} == runs


@pytest.mark.parametrize(
    ("text", "http_status", "refused"),
    [
        ("Not logged in · Please run /login", None, True),
        ("Invalid API key · Fix external API key", None, True),
        ("No model configured. Run `kimi` and use /login to sign in, then retry", None, True),
        ("unexpected status 401 Unauthorized: Incorrect API key provided", None, True),
        ("Please set an Auth method in your settings.json", None, True),
        ("API key not valid. Please pass a valid API key.", None, True),
        (None, 401, True),
        (None, 403, True),
        ("unexpected status 500 Internal Server Error", 500, False),
        ("done: handled message 1", None, False),
        (None, None, False),
    ],
)
def test_auth_refused(text, http_status, refused):
    assert cli_results.auth_refused(text, http_status) is refused


@pytest.mark.parametrize(
    ("stream", "exit_code", "reason", "error_code", "status"),
    [
        ("ok", 0, None, None, "ok"),
        ("ok", 75, None, None, "retryable"),
        ("missing", 75, None, None, "retryable"),
        ("ok", 1, "error", "provider.api_error", "api_error"),
        ("ok", 1, None, None, "error"),
        ("ok", 0, "error", "tool.failed", "error"),
        ("ok", 0, "failed", None, "error"),
        ("ok", 0, "end_turn", None, "ok"),  # an unknown success word is not a failure
        ("ok", 1, "max_steps_reached", None, "max_turns"),
        ("missing", None, None, None, "no_result"),
    ],
)
def test_kimi_status(stream, exit_code, reason, error_code, status):
    assert kimi_status(stream, exit_code, reason, error_code) == status


@pytest.mark.parametrize(
    ("events", "exit_code", "completed", "failed", "errors", "status"),
    [
        ("ok", 0, 1, 0, 0, "ok"),
        ("ok", 1, 0, 1, 1, "api_error"),
        ("ok", 1, 1, 1, 0, "error"),
        ("ok", 1, 1, 0, 0, "error"),
        ("missing", None, 0, 0, 0, "no_result"),
        ("ok", 0, 0, 0, 0, "no_result"),  # thread.started only: it never finished a turn
    ],
)
def test_codex_status(events, exit_code, completed, failed, errors, status):
    assert codex_status(events, exit_code, completed, failed, errors) == status


@pytest.mark.parametrize(
    ("result_json", "exit_code", "error_code", "status"),
    [
        ("ok", 0, None, "ok"),
        ("missing", 0, None, "no_result"),
        ("ok", 41, 41, "auth_error"),
        ("ok", 42, None, "input_error"),
        ("ok", 52, None, "config_error"),
        ("ok", 53, None, "max_turns"),
        ("ok", 55, None, "untrusted_workspace"),
        ("ok", 130, None, "cancelled"),
        ("ok", 244, 500, "api_error"),  # HTTP 500 mod 256
        ("ok", 173, 429, "api_error"),  # HTTP 429 mod 256
        ("ok", 1, None, "error"),
        ("ok", 1, 42, "input_error"),  # exit 1 with a known error code in the JSON
        ("ok", None, 53, "max_turns"),
        ("missing", None, None, "no_result"),
    ],
)
def test_gemini_status(result_json, exit_code, error_code, status):
    assert gemini_status(result_json, exit_code, error_code) == status


# -- diagnostics -> ledger columns -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("diag", "cap", "expected"),
    [
        (
            {"cli_status": "ok", "cost_usd": 0.5, "input_tokens": 10, "output_tokens": 2},
            None,
            {"cli_status": "ok", "cost_usd": 0.5, "input_tokens": 10, "output_tokens": 2, "cost_overshoot_usd": None},
        ),
        (
            {"cli_status": "budget_exceeded", "cost_usd": 0.0731},
            0.05,
            {"cli_status": "budget_exceeded", "cost_usd": 0.0731, "cost_overshoot_usd": 0.0231},
        ),
        ({"cost_usd": 0.01}, 0.05, {"cost_usd": 0.01, "cost_overshoot_usd": 0.0}),
        ({"cost_usd": None}, 0.05, {"cost_usd": None, "cost_overshoot_usd": None}),
        (
            {"cost_usd": -1, "input_tokens": -5, "output_tokens": True, "cli_status": "not a word!"},
            None,
            {"cost_usd": None, "input_tokens": None, "output_tokens": None, "cli_status": None},
        ),
        ({"cost_usd": float("nan")}, 1.0, {"cost_usd": None}),
        (None, 1.0, {"cli_status": None, "cost_usd": None, "cost_overshoot_usd": None}),
    ],
)
def test_ledger_fields(diag, cap, expected):
    fields = ledger_fields(diag, cap)
    assert {k: fields[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("run", "ledger"),
    [
        ("gemini/permissions-bridge.json", None),
        ("gemini/permissions-read.json", "read_file"),
        ("gemini/permissions-shell.json", "read_file,run_shell_command,write_file"),
        ("gemini/success-with-tool-failures.json", None),  # failures after a decision are no denials
    ],
)
def test_gemini_denied_tools_reach_the_ledger_as_names(tmp_path, run, ledger):
    diag = clean_diagnostics(_diagnostics(tmp_path, run, 0))
    assert ledger_fields(diag, None)["denied_tools"] == ledger
