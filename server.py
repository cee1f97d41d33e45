"""Per-agent MCP stdio server: ``AGENT_ID=claude uv run python server.py``."""

import sys
from importlib.util import find_spec
from pathlib import Path

# What the server imports, some of it only once it runs (the store handle's structlog, the SDK):
# looked up, not imported, so that a Python without them is told so before anything starts.
DEPENDENCIES = ("anyio", "mcp", "psutil", "pydantic", "pydantic_settings", "structlog")


def _missing_dependency() -> str | None:
    return next((name for name in DEPENDENCIES if find_spec(name) is None), None)


if __name__ == "__main__":
    missing = _missing_dependency()
    try:
        if missing is not None:
            raise ModuleNotFoundError(name=missing)
        from dispatcher.mcp.serve import run_server
    except ModuleNotFoundError as exc:
        if (exc.name or "dispatcher").startswith("dispatcher"):
            raise  # our own code is missing: a broken checkout, not a Python without the dependencies
        # `python3 server.py` with a Python that lacks them: one line, as every failure before the handshake.
        here = Path(__file__).resolve().parent
        sys.stderr.write(
            f"agent-bridge: missing_dependency: {sys.executable} cannot import {exc.name!r}: run the server with "
            f"the project's environment, `uv run --directory {here} python server.py` (or `uv sync` in {here} "
            "first), or `agent-bridge serve` from an installed agent-bridge\n"
        )
        sys.exit(2)
    sys.exit(run_server())
