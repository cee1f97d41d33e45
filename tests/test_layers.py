"""The layers of dispatcher/ (core < store < bridge < clis < wake | dispatch < mcp < ops) are kept:
import-linter's layers contract in pyproject.toml fails the suite on any import that goes up,
or between the two independent adapters (wake and dispatch). Its forbidden contract keeps the
database driver (sqlite3) inside dispatcher/store/, the connector boundary."""

import functools
import re
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent


@functools.cache
def _lint_imports() -> str:
    """What `lint-imports` says about the contracts (run once per test process)."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    return done.stdout + done.stderr


def test_imports_only_go_down_the_layers():
    said = _lint_imports()
    assert "dispatcher layers: ops > mcp > wake | dispatch > clis > bridge > store > core KEPT" in said, (
        f"`uv run lint-imports` found imports that break the layers:\n{said}"
    )


def test_only_the_store_imports_the_database_driver():
    """The domain names the connector only through dispatcher.store (Connection, Row, STORE_ERRORS),
    so a second connector slots in under store/ without touching it."""
    said = _lint_imports()
    assert "only dispatcher.store imports the database driver (sqlite3) KEPT" in said, (
        f"`uv run lint-imports`: a module outside dispatcher/store/ imports sqlite3:\n{said}"
    )


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The dispatcher modules ``name`` imports anywhere in its file (function-local imports too)."""
    import ast

    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found |= {m for m in (module, *(f"{module}.{a.name}" for a in node.names)) if m in modules}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
    return found - {name}


def test_no_import_circles_not_even_through_function_local_imports():
    paths = {}
    for path in (PROJECT / "dispatcher").rglob("*.py"):
        parts = path.relative_to(PROJECT).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _imports(path, name, set(paths)) for name, path in paths.items()}
    circles = []
    for start in graph:  # a module that can reach itself again
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module == start:
                circles.append(start)
                break
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, ()))
    assert circles == [], f"modules that import themselves through others: {sorted(circles)}"


def test_each_layer_says_in_three_lines_what_lives_there_and_what_it_may_import():
    import ast

    for init in sorted((PROJECT / "dispatcher").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert 0 < len(doc.splitlines()) <= 3 and "import" in doc, f"{init.relative_to(PROJECT)}: {doc!r}"


# --- each agent CLI is named only in its own module -----------------------------------------


def _cli_name() -> "re.Pattern[str]":
    """Any CLI the registry finds (a new package is checked as soon as it exists)."""
    from dispatcher.clis import registry

    return re.compile("(?i)" + "|".join(map(re.escape, registry.NAMES)))


CLI_NAME = _cli_name()
# What may still name a CLI outside dispatcher/clis/, and why; each entry must still need it
# (a stale one fails), so the list only shrinks. TODO.md lists moving them.
NAMED_OUTSIDE_CLIS = {
    "dispatcher/core/settings.py": "AGENT_BRIDGE_CLAUDE_CHANNEL (field claude_channel), the name users set: kept for "
    "compatibility, as data; clis/claude/ declares it as its Channel.setting",
    "dispatcher/ops/demo.py": "the demo's agent ids (claude, kimi) and the CLI it names (kimi): data of the demo's "
    "config, kept on purpose (a demo shows named agents)",
}


def _cli_mentions(path: Path) -> list[tuple[int, str]]:
    """Where a module names a CLI in code: an identifier (a name, attribute, function, class,
    argument, keyword or import) or a string that is a word or path (a dict key, a compared
    value, a file name), never a docstring, a comment or a sentence of a message."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words = [node.name]
        elif isinstance(node, ast.arg):
            words = [node.arg]
        elif isinstance(node, ast.keyword):
            words = [node.arg or ""]
        elif isinstance(node, ast.alias):
            words = [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            words = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words = [node.value] if re.fullmatch(r"[A-Za-z0-9_.:/-]+", node.value) else []
        found += [(node.lineno, word) for word in words if CLI_NAME.search(word)]
    return found


def test_no_module_outside_dispatcher_clis_names_an_agent_cli_in_code():
    """Adding or upgrading a CLI touches its own package under dispatcher/clis/ (and its tests):
    everything else asks the registry. Prose (docstrings, comments, messages) may name one."""
    named = {}
    for path in sorted((PROJECT / "dispatcher").rglob("*.py")):
        relative = str(path.relative_to(PROJECT))
        if relative.startswith("dispatcher/clis/"):
            continue
        if mentions := _cli_mentions(path):
            named[relative] = mentions
    unexpected = {path: found[:5] for path, found in named.items() if path not in NAMED_OUTSIDE_CLIS}
    assert unexpected == {}, f"ask dispatcher/clis/registry.py instead of naming a CLI: {unexpected}"
    stale = sorted(set(NAMED_OUTSIDE_CLIS) - set(named))
    assert stale == [], f"these no longer name a CLI: take them out of NAMED_OUTSIDE_CLIS: {stale}"
