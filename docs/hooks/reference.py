"""MkDocs hook: the reference tables that the code is the truth of, generated at build time.

A page asks for a table with a marker line; the hook replaces it:
- ``<!-- generated: config -->``: config.json's keys, from the pydantic models and the comment
  written above each field;
- ``<!-- generated: settings -->``: the ``AGENT_BRIDGE_*`` settings, from ``BridgeSettings``;
- ``<!-- generated: tools -->``: the MCP tools, from the server's tool table (``mcp_server.TOOLS``);
- ``<!-- generated: doctor -->``: doctor's checks, from its table (``ops.doctor.table.CHECKS``) and
  the finding codes' levels and fixes (``core.findings.CODES``).
The command line's reference is mkdocs-click's (docs/commands.md).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.M)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda match: TABLES[match.group(1)](), markdown)


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The ``#`` comment lines written directly above each field of the model's class body."""
    source = textwrap.dedent(inspect.getsource(model))
    lines = source.splitlines()
    comments: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#"):
                above.insert(0, lines[row].strip().lstrip("#").strip())
                row -= 1
            comments[node.target.id] = " ".join(above)
    return comments


def _plain_type(annotation: Any) -> str:
    """The type as a reader writes it: ``Annotated`` metadata (validators, tags) left out, a union as ``a | b``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _plain_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_plain_type(arg) for arg in typing.get_args(annotation))
    text = str(annotation) if not isinstance(annotation, type) else annotation.__name__
    return re.sub(r"\b(?:typing|pathlib|dispatcher\.[\w.]+)\.", "", text).replace("NoneType", "None")


def _type_name(annotation: Any) -> str:
    return _plain_type(annotation).replace("|", "\\|")


def _bounds(info: FieldInfo) -> str:
    words = []
    for item in info.metadata:
        for name, symbol in (
            ("ge", "≥"),
            ("gt", ">"),
            ("le", "≤"),
            ("lt", "<"),
            ("min_length", "length ≥"),
            ("max_length", "length ≤"),
            ("pattern", "matches"),
        ):
            value = getattr(item, name, None)
            if value is not None:
                words.append(f"{symbol} `{value}`")
    return ", ".join(words)


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "computed"
    if info.default is PydanticUndefined:
        return "required"
    return f"`{info.default!r}`" if info.default is not None else "absent"


def _model_table(model: type[BaseModel], title: str) -> str:
    comments: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if isinstance(klass, type) and issubclass(klass, BaseModel) and klass is not BaseModel:
            comments.update(_field_comments(klass))
    doc = inspect.cleandoc(model.__doc__ or "").split("\n\n")[0].replace("\n", " ")
    rows = [f"### {title}", "", doc, "", "| key | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        meaning = info.description or comments.get(name, "")
        rows.append(f"| `{name}` | {_type_name(info.annotation)} | {_default(info)} | {_bounds(info)} | {meaning} |")
    return "\n".join(rows) + "\n"


def config_tables() -> str:
    from dispatcher.core.config import AgentConfig, BridgeConfig, Prices
    from dispatcher.core.permissions import PermissionProfile

    return "\n".join(
        [
            _model_table(BridgeConfig, "The file"),
            _model_table(AgentConfig, "An agent (`agents.NAME`)"),
            _model_table(PermissionProfile, "A permission profile (`agents.NAME.permissions`)"),
            _model_table(Prices, "Prices (`agents.NAME.prices`)"),
        ]
    )


def settings_table() -> str:
    from dispatcher.core.settings import ENV_PREFIX, BridgeSettings

    comments = _field_comments(BridgeSettings)
    rows = ["| variable | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    for name, info in BridgeSettings.model_fields.items():
        variable = info.validation_alias if isinstance(info.validation_alias, str) else ENV_PREFIX + name.upper()
        meaning = info.description or comments.get(name, "")
        rows.append(
            f"| `{variable}` | {_type_name(info.annotation)} | {_default(info)} | {_bounds(info)} | {meaning} |"
        )
    return "\n".join(rows) + "\n"


def tools_table() -> str:
    from dispatcher.mcp.mcp_server import TOOLS

    rows = ["| tool | offered to | parameters | what it does |", "|---|---|---|---|"]
    for spec in TOOLS:
        signature = inspect.signature(spec.method)
        hints = typing.get_type_hints(spec.method, include_extras=False)
        parameters = ", ".join(
            f"`{name}`" + ("" if parameter.default is inspect.Parameter.empty else "?")
            for name, parameter in signature.parameters.items()
            if name != "self" and name in hints
        )
        summary = inspect.cleandoc(spec.method.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        roles = ", ".join(sorted(spec.roles))
        rows.append(f"| `{spec.method.__name__}` | {roles} | {parameters} | {summary} |")
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def doctor_table() -> str:
    """Doctor's checks, in the order they run: each row's code, level(s), question and fix, from
    its table (``dispatcher.ops.doctor.table.CHECKS``) and the codes' declarations (``core.findings.CODES``)."""
    from dispatcher.core.findings import CODES, DOCTOR
    from dispatcher.ops.doctor.table import CHECKS, RUNNER_CODES

    rows = ["| code | level | what it asks | fix | needs | also shown by |", "|---|---|---|---|---|---|"]
    entries = [(CODES[code], question, "the runner") for code, question in RUNNER_CODES.items()]
    entries += [(c.code, inspect.cleandoc(c.run.__doc__ or "").split("\n\n")[0], c.needs) for c in CHECKS]
    for code, question, needs in entries:
        fixes = (
            "; ".join(f"{variant}: {text}" if variant else text for variant, text in code.fixes.items() if text) or "—"
        )
        shown = ", ".join(sorted(code.surfaces - {DOCTOR})) or "—"
        levels = " or ".join(code.levels)
        rows.append(f"| `{code.name}` | {levels} | {_cell(question) or '—'} | {_cell(fixes)} | {needs} | {shown} |")
    return "\n".join(rows) + "\n"


TABLES = {"config": config_tables, "settings": settings_table, "tools": tools_table, "doctor": doctor_table}
