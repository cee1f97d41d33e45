"""opencode's credential variables (doctor's login check): the ones the user's global config names
as a provider's key, ``"apiKey": "{env:NAME}"``, one case per shape of that file."""

import json

import pytest

from dispatcher.clis import registry


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ({"provider": {"a": {"options": {"apiKey": "{env:A_KEY}"}}}}, ("A_KEY",)),
        (
            {"provider": {"a": {"options": {"apiKey": "{env:A_KEY}"}}, "b": {"options": {"apiKey": " {env:B} "}}}},
            ("A_KEY", "B"),
        ),
        (
            {"provider": {"a": {"options": {"apiKey": "{env:A_KEY}"}}, "b": {"options": {"apiKey": "{env:A_KEY}"}}}},
            ("A_KEY",),
        ),
        ({"provider": {"a": {"options": {"apiKey": "sk-literal"}}}}, ()),  # a key written in the file
        ({"provider": {"a": {"options": {"apiKey": "x{env:A_KEY}"}}}}, ()),  # not the whole value
        ({"provider": {"a": {"options": {"baseURL": "{env:URL}"}}}}, ()),  # not a key
        ({"mcp": {"m": {"environment": {"T": "{env:TOKEN}"}}}}, ()),  # an MCP server's, not a provider's
        ({"provider": {"a": {"options": {"apiKey": "{env:1BAD}"}}}}, ()),
        ({"provider": ["not", "an", "object"]}, ()),
        ("not json {", ()),
        (None, ()),  # no config at all
    ],
)
def test_the_variables_its_config_names_as_provider_keys(tmp_path, document, named):
    config = tmp_path / "xdg" / "opencode"
    config.mkdir(parents=True)
    if document is not None:
        text = document if isinstance(document, str) else json.dumps(document)
        (config / "opencode.json").write_text(text)
    environ = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert registry.get("opencode").credential_variables(environ) == named


def test_the_other_clis_credentials_are_their_fixed_variables(tmp_path):
    for cli in registry.CLIS:
        if cli.name != "opencode":
            assert cli.credential_variables({"HOME": str(tmp_path)}) == cli.login.variables
