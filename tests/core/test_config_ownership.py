"""A config or launcher that someone else controls is refused, by the rules ssh applies to
authorized_keys. Before, a config.json owned by another user, a link to one, a world-writable
config.json and a launcher owned by ``nobody`` were all accepted, and the launcher ran as root."""

import json
import os
from pathlib import Path

import pytest
from dispatch_harness import cli, make_launcher, post_task, write_config_atomic

from dispatcher.core.config import ConfigError, load_config
from dispatcher.core.private_files import writable_by_others

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def _config(directory: Path) -> Path:
    path = directory / "config.json"
    path.write_text(json.dumps({"agents": {"claude": {"launcher": "launchers/claude_headless.sh"}}}))
    path.chmod(0o600)
    return path


def test_a_config_of_yours_in_a_private_directory_loads(tmp_path):
    assert "claude" in load_config(_config(tmp_path)).agents


def test_a_world_writable_config_is_refused(tmp_path):
    path = _config(tmp_path)
    path.chmod(0o666)
    with pytest.raises(ConfigError, match="world-writable") as refused:
        load_config(path)
    assert str(path) in str(refused.value) and "chmod go-w" in str(refused.value)


def test_a_config_in_a_group_writable_directory_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    path = _config(shared)
    shared.chmod(0o775)
    assert writable_by_others(path) == f"{shared} is group-writable (mode 775)"
    with pytest.raises(ConfigError, match="group-writable"):
        load_config(path)


def test_a_sticky_root_directory_like_tmp_is_allowed(tmp_path):
    """No one else can rename or replace your entries in /tmp (root's, sticky)."""
    assert Path("/tmp").stat().st_mode & 0o1000
    assert writable_by_others(_config(tmp_path)) is None


@needs_root
def test_a_config_owned_by_another_user_is_refused(tmp_path):
    path = _config(tmp_path)
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match=f"belongs to uid {NOBODY}"):
        load_config(path)


@needs_root
def test_a_link_to_another_users_config_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    target = _config(theirs)
    os.chown(target, NOBODY, NOBODY)
    link = tmp_path / "config.json.link"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match=f"{target} belongs to uid {NOBODY}"):
        load_config(link)


@needs_root
def test_a_launcher_owned_by_another_user_is_never_run(env, config_path, launchers, db_path, tmp_path):
    launches = tmp_path / "launches"
    launcher = make_launcher(launchers, "succeed", FAKE_WORKER_LAUNCHES=str(launches))
    os.chown(launcher, NOBODY, NOBODY)
    write_config_atomic(config_path, launcher, auto=False)
    message_id = post_task(db_path, "run a launcher nobody owns")
    done = cli(env, "dispatch", str(message_id))
    result = json.loads(done.stdout)
    assert (result["outcome"], result["error_kind"]) == ("failed", "spawn:PermissionError"), done.stderr
    assert not launches.exists()
