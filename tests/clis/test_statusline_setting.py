"""What each CLI with a status line says about it, as doctor's statusline_* checks read it."""

import json

import pytest

from dispatcher.clis import registry
from dispatcher.clis.base import StatuslineSetting

CLAUDE = registry.BY_NAME["claude"]


@pytest.fixture
def settings(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    return tmp_path / "settings.json"


def test_only_claude_has_a_status_line_today():
    assert [cli.name for cli in registry.CLIS if cli.statusline] == ["claude"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),  # the file does not exist
        ("{not json", ("JSONDecodeError", None, True)),
        ("[1, 2]", (None, None, True)),
        (json.dumps({"statusLine": "agent-bridge-statusline"}), (None, None, True)),
        (json.dumps({"model": "x"}), (None, None, True)),
        (json.dumps({"statusLine": {"command": "agent-bridge-statusline"}}), (None, "agent-bridge-statusline", True)),
    ],
    ids=["missing", "not-json", "not-an-object", "statusline-not-an-object", "no-statusline", "ours"],
)
def test_claude_reads_its_settings_status_line_never_raising(settings, text, expected):
    if text is not None:
        settings.write_text(text)
    got = CLAUDE.statusline_setting()
    assert got.path == settings
    if text is None:
        assert got == StatuslineSetting(settings, exists=False)
    else:
        unreadable, command, exists = expected
        assert (got.unreadable, got.command, got.exists) == (unreadable, command, exists)


def test_an_unreadable_settings_file_says_why(settings):
    settings.mkdir()  # a directory where the file should be
    assert CLAUDE.statusline_setting().unreadable == "IsADirectoryError"
