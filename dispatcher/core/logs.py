"""structlog setup: JSON lines to stderr and, optionally, to a private (0600) log file.

stdout is the MCP protocol stream, so nothing here ever writes to it. Log events carry
ids, codes, stages and numbers only: callers never pass message text or goals.
Call ``configure_logging`` before building an MCPServer: the SDK's own logging setup
is a ``basicConfig`` that does nothing once the root logger has handlers.
"""

import importlib
import logging
import sys
import types
from pathlib import Path
from typing import TextIO

from dispatcher.core.private_files import ensure_private_dir, open_private_append

# What structlog imports at load and never uses here. rich (the `top` extra), when it is installed,
# for its console renderer and pretty tracebacks: about a third of the CPU of a process that only
# logs, and nothing here renders with it (JSON lines); it is hidden while structlog loads, and
# importable again after. asyncio (with ssl, about 12 MiB of a fresh interpreter's resident
# memory), for its async logging methods, which nothing here calls: while structlog loads it gets
# a stand-in that imports the real asyncio at its first use.
_HIDE_RICH = "rich" not in sys.modules
_DEFER_ASYNCIO = "asyncio" not in sys.modules


class _ImportedOnUse(types.ModuleType):
    """Stands in for a module until an attribute of it is used: then the real one is imported."""

    def __getattr__(self, name: str) -> object:
        if sys.modules.get(self.__name__) is self:  # (used while structlog loads: never, but never a loop)
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


if _HIDE_RICH:
    sys.modules["rich"] = None  # type: ignore[assignment]
if _DEFER_ASYNCIO:
    sys.modules["asyncio"] = _ImportedOnUse("asyncio")
try:
    import structlog
finally:
    if _HIDE_RICH:
        del sys.modules["rich"]
    if _DEFER_ASYNCIO:
        del sys.modules["asyncio"]  # the next `import asyncio` loads the real one


class _PrivateFileHandler(logging.StreamHandler[TextIO]):
    """A handler on a log file opened once, without following links (see private_files)."""

    def __init__(self, path: Path, level: int) -> None:
        ensure_private_dir(path.parent, "runtime directory")
        super().__init__(open(open_private_append(path), "a", encoding="utf-8", buffering=1))  # noqa: SIM115, PTH123 - the handler owns and closes it; an fd (O_NOFOLLOW, 0600) Path.open cannot take
        self.setLevel(level)

    def close(self) -> None:
        try:
            self.stream.close()
        finally:
            super().close()


def configure_logging(
    *, stderr_level: int = logging.WARNING, log_file: Path | None = None, file_level: int = logging.INFO
) -> None:
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(stderr_level)
    handlers: list[logging.Handler] = [stderr]
    if log_file is not None:
        handlers.append(_PrivateFileHandler(log_file, file_level))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
        if isinstance(old, _PrivateFileHandler):
            old.close()
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(min(h.level for h in handlers))
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.stdlib.get_logger(name)
