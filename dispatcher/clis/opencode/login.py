"""Which variables hold opencode's credentials here, beside ``opencode auth login``'s file: the
ones the user's global config names as a provider's key (``"apiKey": "{env:NAME}"``), for
``doctor``'s login check. opencode reads no fixed variable of its own."""

import re
from collections.abc import Mapping

from dispatcher.clis.launch import read_user_file
from dispatcher.clis.opencode.user_files import user_config, user_dirs

ENV_REFERENCE = re.compile(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}")  # opencode's variable substitution


def named_variables(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The variables named as ``provider.<id>.options.apiKey`` in the user's global opencode config
    (plain JSON), in order, each once; () when it names none or cannot be read."""
    document = user_config(read_user_file, user_dirs(environ)[0])
    providers = document.get("provider") if isinstance(document, dict) else None
    found: list[str] = []
    for provider in providers.values() if isinstance(providers, dict) else ():
        options = provider.get("options") if isinstance(provider, dict) else None
        key = options.get("apiKey") if isinstance(options, dict) else None
        if isinstance(key, str) and (named := ENV_REFERENCE.fullmatch(key.strip())):
            found.append(named.group(1))
    return tuple(dict.fromkeys(found))
