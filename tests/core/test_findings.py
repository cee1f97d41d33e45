"""The table of finding codes (``dispatcher.core.findings``): each code declared once, with a
level and a fix, and every code doctor's table of checks reports declared there."""

import re
from pathlib import Path

import pytest

from dispatcher.core.findings import (
    CODES,
    DOCTOR,
    LEVELS,
    OK,
    STATUSLINE,
    TOP,
    WARN,
    Code,
    _table,
    finding,
)

SOURCE = Path(__file__).parents[2] / "dispatcher" / "core" / "findings.py"


def test_every_code_has_a_level_and_every_code_a_person_must_act_on_a_fix():
    for name, code in CODES.items():
        assert code.levels and set(code.levels) <= set(LEVELS), name
        if set(code.levels) != {OK}:  # an ok-only code has nothing to fix (render shows no fix for ok)
            assert code.fixes and all(text.strip() for text in code.fixes.values()), f"{name} has no fix text"
        assert all("\n" not in text for text in code.fixes.values()), f"{name}'s fix is not one line"


def test_no_code_is_declared_twice():
    declared = re.findall(r'Code\(\s*"([a-z_]+)"', SOURCE.read_text())
    assert len(declared) == len(set(declared)) == len(CODES)
    with pytest.raises(ValueError, match="store_ok is declared twice"):
        _table(Code("store_ok", (OK,)), Code("store_ok", (OK,)))


def test_doctor_shows_every_code_and_the_status_surfaces_have_their_words():
    for name, code in CODES.items():
        assert DOCTOR in code.surfaces, name
        if code.surfaces - {DOCTOR}:
            assert code.surfaces >= {STATUSLINE, TOP} and code.short, f"{name} is shown while working without words"
        else:
            assert not code.short, f"{name} has status-line words but no status surface"


def test_every_code_has_exactly_one_check_named_by_it():
    from dispatcher.ops.doctor.table import CHECKS, RUNNER_CODES

    named = [check.name for check in CHECKS] + list(RUNNER_CODES)
    assert len(named) == len(set(named)), "a code is reported by two checks"
    assert set(named) == set(CODES), f"no check: {sorted(set(CODES) - set(named))}"
    assert all(check.run.__name__ == check.name and check.code is CODES[check.name] for check in CHECKS)


def test_a_finding_takes_its_fix_from_the_table_and_only_a_declared_level():
    made = finding("store_mode", "bridge.db is 0644", path="/x/bridge.db")
    assert (made.level, made.fix, made.agent) == ("error", "chmod 600 /x/bridge.db", None)
    agent = finding("listener_not_running", "not running", "kimi")
    assert agent.fix == "agent-bridge listener enable --agent kimi"
    assert finding("cost_unknown", "m", "kimi", level=WARN).level == WARN
    with pytest.raises(ValueError, match="cost_unknown is declared with levels"):
        finding("cost_unknown", "m", "kimi", level="error")
    with pytest.raises(ValueError, match="say which"):  # a code with two levels needs one chosen
        finding("cost_unknown", "m", "kimi")
    with pytest.raises(KeyError):
        finding("no_such_code", "m")


def test_every_cli_init_knows_has_its_sign_in_fix():
    from dispatcher.clis import registry

    assert all(cli.login.fix.startswith("run `") for cli in registry.CLIS)  # each module's own
    assert CODES["cli_not_authenticated"].fix_text(fix="run `x login`") == "run `x login`"


def test_every_cli_modules_own_fix_says_what_to_do():
    from dispatcher.clis import registry
    from dispatcher.core.permissions import PermissionProfile

    fixes = [cli.login.fix for cli in registry.CLIS]
    for cli in registry.CLIS:
        for level in ("read", "edit", "project"):
            found = cli.enforcement(PermissionProfile.from_json({"level": level}), lambda name: None)
            fixes += [found.fix] if found is not None and found.kind == "refused" else []
    assert len(fixes) > len(registry.CLIS)  # a refusal's fix among them (Kimi at project)
    assert all(fix.split()[0] in ACTIONS for fix in fixes), fixes


# The first word of a fix: an action, or a command to run. "nothing to do" is a fix only for a
# warning that resolves itself (store_missing, schema_old); {runs_on} is init's table's own words,
# {fix} a CLI module's own (its login's fix, its enforcement's fix: checked below).
ACTIONS = {
    "add", "agent-bridge", "check", "chmod", "chown", "decide", "export", "fix", "free", "give", "install",
    "lower", "make", "mkdir", "move", "raise", "read", "rerun", "retry;", "review", "rm", "run", "see", "set",
    "systemctl", "upgrade",
}  # fmt: skip


def test_every_fix_says_what_to_do():
    vague = {}
    for name, code in CODES.items():
        for variant, text in code.fixes.items():
            if not text or text in ("{runs_on}", "{fix}"):
                continue
            first = re.sub(r"^to [^,]+, ", "", text).split()[0]  # "to have them dispatched, set ..."
            if text.startswith("nothing to do"):
                assert WARN in code.levels, f"{name}: 'nothing to do' for a code that is not a warning"
            elif first not in ACTIONS:
                vague[f"{name}/{variant}" if variant else name] = text
    assert not vague, f"fixes that do not start with what to do: {vague}"
