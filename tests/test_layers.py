"""The layers of dispatcher/ (core < store < bridge < clis < wake | dispatch < mcp < ops) are kept:
import-linter's layers contract in pyproject.toml fails the suite on any import that goes up,
or between the two independent adapters (wake and dispatch). Its forbidden contract keeps the
database driver (sqlite3) inside dispatcher/store/, the connector boundary."""

import functools
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
