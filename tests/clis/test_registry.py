"""The registry finds the CLI packages itself: adding a CLI adds its package and no registry line."""

import sys
from pathlib import Path

import pytest

from dispatcher.clis import registry


def _package(root: Path, name: str, packages: dict[str, str], modules: tuple[str, ...] = ()) -> str:
    """A package ``name`` under ``root`` with these sub-packages (their __init__ text) and plain modules."""
    top = root / name
    top.mkdir()
    (top / "__init__.py").write_text("")
    for sub, text in packages.items():
        (top / sub).mkdir()
        (top / sub / "__init__.py").write_text(text)
    for module in modules:
        (top / f"{module}.py").write_text("CLI = 'a module, not a CLI package'\n")
    return name


def _cli(name: str) -> str:
    return f"class _Cli:\n    name = {name!r}\n\nCLI = _Cli()\n"


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("clis_under_test")]:
        del sys.modules[name]


def test_every_sub_package_exporting_CLI_is_found_in_name_order(root):
    package = _package(
        root,
        "clis_under_test",
        {"zed": _cli("zed"), "alpha": _cli("alpha"), "helpers": "X = 1\n", "mid": _cli("mid")},
        modules=("base", "launch"),
    )
    assert [cli.name for cli in registry.discover(package)] == ["alpha", "mid", "zed"]


def test_a_CLI_named_otherwise_than_its_package_is_refused_naming_both(root):
    package = _package(root, "clis_under_test", {"alpha": _cli("beta")})
    with pytest.raises(ValueError, match=r"clis_under_test\.alpha\.CLI is named 'beta': name it 'alpha'"):
        registry.discover(package)


def test_a_package_without_CLIs_lists_none(root):
    assert registry.discover(_package(root, "clis_under_test", {"helpers": "X = 1\n"})) == ()


def test_the_real_registry_lists_each_package_under_dispatcher_clis_that_exports_CLI():
    here = Path(registry.__file__).parent
    packages = sorted(p.parent.name for p in here.glob("*/__init__.py") if "\nCLI = " in p.read_text())
    assert list(registry.NAMES) == packages
    assert registry.discover() == registry.CLIS
    assert len(packages) >= 5
    assert all(registry.get(name) is registry.BY_NAME[name] for name in registry.NAMES)


def test_the_channel_wake_path_is_the_one_a_CLI_declares():
    from dispatcher.core.settings import BridgeSettings

    declaring = [cli for cli in registry.CLIS if cli.channel is not None]
    assert [cli.name for cli in declaring] == ["claude"]
    channel = registry.channel()
    assert channel is declaring[0].channel
    assert channel.setting in BridgeSettings.model_fields  # the setting that turns it on exists


def test_two_CLIs_declaring_a_channel_are_refused(monkeypatch):
    from dispatcher.clis.base import Channel

    class _Cli:
        def __init__(self, name: str) -> None:
            self.name, self.channel = name, Channel("x/channel", f"notifications/{name}", "x")

    monkeypatch.setattr(registry, "CLIS", (_Cli("a"), _Cli("b")))
    with pytest.raises(ValueError, match="2 CLIs declare an MCP channel"):
        registry.channel()


@pytest.mark.parametrize(
    ("cli", "launcher", "runs"),
    [
        ("codex", None, "codex"),  # the config names it
        ("codex", "/opt/wrap.sh", "codex"),
        (None, "launchers/kimi_headless.sh", "kimi"),  # an older config: the launcher's file name says
        (None, "/somewhere/else/gemini_headless.sh", "gemini"),
        (None, "launchers/command_headless.sh", None),  # the user's command: no CLI the bridge has
        ({"argv": ["mine"]}, None, None),  # a CLI the agent declares
        ("declared", None, None),  # (the supervisor's word for a declared one: not a registered CLI)
        ("nosuchcli", None, None),
    ],
)
def test_an_agent_runs_the_cli_its_config_names_else_the_one_its_launcher_names(cli, launcher, runs):
    assert registry.agent_cli(cli, launcher) == runs


class _Entry:
    def __init__(self, cli: object, launcher: str | None = None) -> None:
        self.cli, self.launcher = cli, launcher


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (_Entry("codex"), None),
        (_Entry(None, "launchers/codex_headless.sh"), None),
        (_Entry({"argv": ["mine"]}, "launchers/codex_headless.sh"), None),  # as older configs could
        (_Entry("codex", "launchers/codex_headless.sh"), None),
        (_Entry("codex", "launchers/command_headless.sh"), None),  # codex run by the user's command
        (_Entry("nosuchcli"), "agents.a.cli: 'nosuchcli' is not a CLI the bridge has (registered: "),
        (_Entry("codex", "launchers/claude_headless.sh"), "agents.a: its launcher claude_headless.sh runs claude"),
    ],
)
def test_a_config_naming_no_registered_cli_or_two_different_ones_is_refused(entry, said):
    problem = registry.config_problem({"a": entry})
    assert problem is None if said is None else said in problem
    if said is not None and "registered" in said:
        assert ", ".join(registry.NAMES) in problem


def test_a_package_named_as_one_of_the_bridges_own_launchers_is_refused(root):
    package = _package(root, "clis_under_test", {"agent": _cli("agent")})
    with pytest.raises(ValueError, match=r"clis_under_test\.agent: 'agent' names a launcher of the bridge's own"):
        registry.discover(package)
