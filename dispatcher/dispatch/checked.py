"""What the listener has done in a forked child, to stay light: the settings and config.json
validated, its environment fingerprinted.

The listener keeps its resident memory small (README, "The listener's footprint"), and pydantic
would be most of it, OpenSSL (``hashlib``) 3.5 MiB more. So the one definition of valid settings
(``BridgeSettings``) and of a valid config.json (``BridgeConfig``) runs in a child forked for it,
which imports them, sends the validated document back as JSON on a pipe and exits; the listener
keeps the views (``SettingsView``, ``ConfigView``). Their refusals are the same words: a
``BridgeError`` the child raised is raised again here with its code and message, a
``ConfigError`` with its reason. The environment's record (``environment.record``) is made
the same way.
"""

import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dispatcher.core.config_view import ConfigView
from dispatcher.core.errors import BridgeError, ConfigError
from dispatcher.core.settings_view import SettingsView
from dispatcher.dispatch import environment
from dispatcher.dispatch.procs import fork_without_store

# A child killed from outside (the OOM killer, a kill aimed at the listener's command line,
# which its children share) is no answer about the file: the check is made again, this often.
CHECK_TRIES = 3


class CheckFailed(BridgeError):
    """The child gave no answer, ``CHECK_TRIES`` times: it was killed or could not be forked.
    Nothing is known about the file then; its caller tries again later (a listener starting
    says so in one line and stops)."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            "check_failed",
            f"the settings or config.json could not be checked: {reason}; start the listener again "
            "(if this repeats, the machine is out of memory or processes)",
        )
        self.reason = reason


def _in_child(work: Callable[[], Any]) -> Any:
    """What ``work()`` returns (JSON data), computed in a forked child that exits right after;
    a child that gives no answer is forked again, up to ``CHECK_TRIES`` times."""
    for _ in range(CHECK_TRIES - 1):
        with contextlib.suppress(CheckFailed):
            return _in_one_child(work)
    return _in_one_child(work)


def _in_one_child(work: Callable[[], Any]) -> Any:
    sys.stdout.flush()  # (nothing buffered may be written twice)
    sys.stderr.flush()
    try:
        read, write = os.pipe()
    except OSError as exc:  # out of descriptors
        raise CheckFailed(f"cannot make a pipe ({exc.strerror})") from None
    try:
        pid = fork_without_store()
    except OSError as exc:  # out of processes or memory
        os.close(read)
        os.close(write)
        raise CheckFailed(f"cannot fork ({exc.strerror})") from None
    if pid == 0:
        status = 1
        try:
            os.close(read)
            try:
                answer = {"result": work()}
            except BridgeError as exc:
                answer = {"error": [exc.code, exc.message]}
            with open(write, "w", encoding="utf-8") as pipe:  # noqa: PTH123 - a pipe's descriptor
                json.dump(answer, pipe)
            status = 0
        except BaseException:  # noqa: BLE001 - said on stderr; the parent reports the exit status
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(status)
    os.close(write)
    with open(read, encoding="utf-8") as pipe:  # noqa: PTH123 - a pipe's descriptor
        text = pipe.read()
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status != 0 or not text:
        raise CheckFailed(f"the process checking it exited {status} without an answer")
    answer = json.loads(text)
    if "error" in answer:
        raise BridgeError(*answer["error"])
    return answer["result"]


def checked_settings() -> SettingsView:
    """The settings from the environment, as ``BridgeSettings`` validates them (``invalid_setting``)."""

    def work() -> dict[str, Any]:
        from dispatcher.core.settings import BridgeSettings

        return SettingsView.document(BridgeSettings())

    return SettingsView.of(_in_child(work))


def checked_config(path: Path) -> ConfigView:
    """config.json as ``load_config`` reads and validates it, each agent's CLI one the registry
    lists (``registry.config_problem``); raises a ``ConfigError``."""

    def work() -> dict[str, Any]:
        from dispatcher.clis import registry
        from dispatcher.core.config import load_config

        try:
            config = load_config(path)
        except ConfigError as exc:
            return {"reason": exc.reason}
        if (problem := registry.config_problem(config.agents)) is not None:
            return {"reason": problem}
        profiles = {agent: config.permissions(agent).model_dump(mode="json") for agent in config.agents}
        return {"document": config.model_dump(mode="json"), "profiles": profiles}

    done = _in_child(work)
    if "reason" in done:
        raise ConfigError(path, done["reason"])
    return ConfigView.of(done["document"], done["profiles"])


def environment_record() -> dict[str, Any]:
    """``environment.record`` of this process's environment (the same in the child); when the
    child gives no answer, the names alone (``environment.difference`` then compares nothing)."""
    try:
        return dict(_in_child(lambda: environment.record(os.environ)))
    except CheckFailed:
        return {"names": environment.taken(os.environ)}
