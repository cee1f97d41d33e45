"""The pinned agent CLIs (tests/clis/install.sh, found by cli_harness.py): the binary's path, or a
loud skip (a failure under CI=true)."""

from pathlib import Path

import pytest
from cli_harness import require_cli


@pytest.fixture(scope="module")
def claude_bin() -> Path:
    return require_cli("claude")


@pytest.fixture(scope="module")
def codex_bin() -> Path:
    return require_cli("codex")


@pytest.fixture(scope="module")
def gemini_bin() -> Path:
    return require_cli("gemini")


@pytest.fixture(scope="module")
def opencode_bin() -> Path:
    return require_cli("opencode")
