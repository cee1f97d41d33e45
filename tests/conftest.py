"""Fixtures every folder shares: a bridge root with its config and store per test module, one
claude and one kimi server on it, a fresh store connection per test, and the end of every
listener a test started. Each folder's own conftest.py holds what only that folder uses."""

import os
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

# The helper modules (harness.py, dispatch_harness.py, ...) live here; tests in every folder
# import them by name (the test modules themselves load with --import-mode=importlib).
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pg_server  # noqa: E402

pytest_plugins = ["checkout_guard", "detached_guard"]
from harness import McpAgent, bridge_env, on_backend, start_agents, write_config  # noqa: E402
from xdist.scheduler import LoadScopeScheduling  # noqa: E402

from dispatcher.core.locations import is_postgres_url  # noqa: E402
from dispatcher.store import open_store  # noqa: E402


@pytest.fixture(scope="module")
def bridge_root(tmp_path_factory, backend) -> Path:
    """The module's files (config, runtime directory, SQLite store): one tree per backend, so a
    module run on both never finds the other run's attempt directories."""
    return tmp_path_factory.mktemp("bridge" if backend == "sqlite" else "bridge-pg")


@pytest.fixture(scope="module")
def backend(request) -> str:
    """The store's backend for a module: "sqlite", or in a module marked ``both_backends`` each
    of "sqlite" and "postgres" in turn (its module-scoped servers start once per backend)."""
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="module")
def env(bridge_root, backend, request) -> dict[str, str]:
    return on_backend(bridge_env(bridge_root, write_config(bridge_root / "config.json")), backend, request)


@pytest.fixture(scope="module")
def config_path(env) -> Path:
    return Path(env["AGENT_BRIDGE_CONFIG"])


@pytest.fixture(scope="module")
def launchers(bridge_root) -> Path:
    """Where a dispatcher test module writes its fake launchers."""
    directory = bridge_root / "launchers"
    directory.mkdir()
    return directory


@pytest.fixture(scope="module")
def db_path(env) -> Path | str:
    """The store: a SQLite file's path, or (backend "postgres") its URL."""
    location = env["AGENT_BRIDGE_DB"]
    return location if is_postgres_url(location) else Path(location)


@pytest.fixture(scope="module")
def pair(env, request):
    """One claude and one kimi server on one store, shared by a module's tests: server.py
    processes over stdio, or, in a module that sets ``IN_PROCESS_SERVERS = True`` (it checks the
    tools' logic, not the process), the same servers built in this process behind the SDK's
    in-memory client; in one that sets ``FRESH_INTERPRETER_SERVERS = True`` (it looks at the
    server process from outside), ``python server.py`` itself rather than a fork of the zygote."""
    if getattr(request.module, "IN_PROCESS_SERVERS", False):
        agents = [McpAgent(name, env, in_process=True).wait_ready() for name in ("claude", "kimi")]
    else:
        agents = start_agents(
            ["claude", "kimi"], env, fresh_interpreter=getattr(request.module, "FRESH_INTERPRETER_SERVERS", False)
        )
    yield agents
    for agent in agents:
        agent.close()


@pytest.fixture(scope="module")
def claude(pair):
    return pair[0]


@pytest.fixture(scope="module")
def kimi(pair):
    return pair[1]


@pytest.fixture(autouse=True)
def _end_listeners_started_by_the_test():
    import dispatch_harness

    before = len(dispatch_harness.STARTED)
    yield
    started = dispatch_harness.STARTED[before:]
    del dispatch_harness.STARTED[before:]
    dispatch_harness.end_listeners(started)


@pytest.fixture
def conn(backend, tmp_path, request):
    """A fresh store for the tests of one rule or one transaction: on a real SQLite file, and in
    a module marked ``both_backends`` also on a real PostgreSQL server."""
    location = tmp_path / "bridge.db" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    connection = open_store(location)
    yield connection
    connection.close()


def check_postgres_proof(metafunc: pytest.Metafunc, marker: pytest.Mark) -> None:
    """A ``postgres_proven_by(name, why)`` test runs on SQLite alone: the test ``name`` of the same
    module must exist and run on PostgreSQL, or the mark would hide a path nothing proves."""
    name, why = (*marker.args, None)[:2]
    proof = getattr(metafunc.module, str(name), None)
    marks = {m.name for m in getattr(proof, "pytestmark", [])}
    if not callable(proof) or not why or marks & {"sqlite_only", "store_agnostic", "postgres_proven_by"}:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: postgres_proven_by({name!r}, why) must name a test of its module "
            "that runs on PostgreSQL, and say why that test proves this one's PostgreSQL path"
        )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_backends"):
        # A sqlite_only or store_agnostic test is parametrised too (with SQLite alone): an unparametrised test would
        # be handed whichever module-scoped store the module made last, the PostgreSQL one included.
        one = any(metafunc.definition.get_closest_marker(m) for m in ("sqlite_only", "store_agnostic"))
        proven = metafunc.definition.get_closest_marker("postgres_proven_by")
        if proven is not None:
            check_postgres_proof(metafunc, proven)
            one = True
        backends = ["sqlite"] if one else ["sqlite", "postgres"]
        metafunc.parametrize("backend", backends, indirect=True, scope="module")


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A fresh database of this test process's own on a real PostgreSQL server (``pg_server``)."""
    try:
        with pg_server.fresh_database() as url:
            yield url
    except pg_server.NoServer as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no PostgreSQL server for the postgres tests: {exc}")
        pytest.skip(f"no PostgreSQL server: {exc}")


@pytest.fixture(scope="session")
def new_postgres_store(postgres_database) -> Iterator[Callable[[], str]]:
    """Makes ``postgresql://`` stores: each an empty schema of its own, first on its search path."""
    made = []

    def new() -> str:
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        made.append(schema)
        return f"{postgres_database}?options=-csearch_path%3D{schema}"

    yield new
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        for schema in made:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(scope="session")
def agent_role(postgres_database) -> Iterator[Callable[[str, str], str]]:
    """Sets up a per-agent role on a PostgreSQL store (``agent-bridge db-role``, as the store's
    owner, the fixture's superuser): its URL. Roles are the server's, not one database's, so each
    gets a name of its own and is dropped at the end."""
    from dispatcher.ops.db_role import db_role

    made = []

    def new(store_url: str, agent: str) -> str:
        role = f"ab_{agent.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        made.append(role)
        return str(db_role(store_url, agent, role)["url"])

    yield new
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        for role in made:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[pg_server.ThrowawayServer]:
    """A PostgreSQL server of this test process's own (``pg_server.ThrowawayServer``): for the tests
    that end sessions, stop a writer or need a server no one else's transactions move."""
    try:
        made = pg_server.ThrowawayServer()
    except Exception as exc:  # noqa: BLE001 - no initdb here: the test says so
        if os.environ.get("CI") == "true":
            pytest.fail(f"no PostgreSQL server package for a private server: {exc}")
        pytest.skip(f"no PostgreSQL server package to start a private server: {exc}")
    made.start()
    yield made
    made.remove()


@pytest.fixture
def private_postgres_url(private_postgres) -> str:
    """A fresh database (its own store) on the private server."""
    return pg_server.fresh_database_on(private_postgres.url)


@pytest.fixture
def postgres_url(new_postgres_store) -> str:
    """A ``postgresql://`` store of the test's own."""
    return new_postgres_store()


# -- running in parallel (pytest-xdist, `-n 4 --dist loadscope` in pyproject.toml) -------------
# A test file is one unit of work, so its module-scoped servers and listeners start once. The
# files that load the whole machine for a while (a storm of 32 processes, kill -9 chaos, a
# lock-wait measurement) are one unit together: they run one after another, never side by side.
MACHINE_WIDE = frozenset({"faults/test_storm.py", "faults/test_chaos.py", "ops/test_prune.py"})
# The long folders start first, so the short files fill the end of the run on every worker.
LONG_FIRST = ("faults", "agent_clis", "dispatch", "wake", "ops", "bridge", "mcp")
TESTS = Path(__file__).resolve().parent


def unit_of_work(nodeid: str) -> str:
    """The file of a test (``tests/dispatch/test_listener.py::test_x``), or the machine-wide unit."""
    path = nodeid.split("::", 1)[0]
    return "machine-wide" if path.removeprefix("tests/") in MACHINE_WIDE else path


class ByUnitOfWork(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return unit_of_work(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log) -> LoadScopeScheduling:
    # xdist's own loadgroup cannot be used: it renames items through Node._nodeid, which
    # pytest 9 no longer reads, so its groups silently fall apart into single tests.
    return ByUnitOfWork(config, log)


# -- the fast tier (`uv run pytest -m fast`, CONTRIBUTING.md) -------------------------------------
# Pure and in-process tests: no agent CLI, no PostgreSQL server, no process of their own. A test is
# in it unless its module starts processes (one of these words is in its source), it asks for a
# server or PostgreSQL fixture, it runs on the PostgreSQL backend, or it is marked cli or slow.
STARTS_PROCESSES = (
    "subprocess",
    "Popen",
    "McpAgent",
    "start_agents",
    "start_listener",
    "os.fork",
    "tmux",
    "pexpect",
    "pg_server",
)
NOT_IN_PROCESS_FIXTURES = frozenset(
    {"claude", "kimi", "pair", "postgres_url", "new_postgres_store", "agent_role", "postgres_database"}
)


# Modules whose code under test starts processes without the module naming one (the audit hook
# below found them: the checked config's forked child, a CLI's version probe, `dispatch`).
STARTS_PROCESSES_THROUGH_THE_CODE = frozenset(
    {
        "core/test_config_ownership.py",
        "dispatch/test_checked.py",
        "dispatch/test_listener_restart.py",
        "ops/test_budget_views.py",
        "ops/test_commands_on_both_backends.py",
        "ops/test_costs.py",
        "ops/test_dispatch_command.py",
        "ops/test_register_hooks.py",
        "ops/test_store_url_registrations.py",
        "wake/test_wake_mcp.py",
    }
)


def is_fast(item: pytest.Item, module_source: str) -> bool:
    if item.get_closest_marker("cli") or item.get_closest_marker("slow"):
        return False
    if item.path.relative_to(TESTS).as_posix() in STARTS_PROCESSES_THROUGH_THE_CODE:
        return False
    if NOT_IN_PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
        return False
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("backend") == "postgres":
        return False
    return not any(word in module_source for word in STARTS_PROCESSES)


# A fast test that starts a process anyway (through the code it calls) fails, naming what it
# started: the tier stays in-process as tests are added. An audit hook sees every start.
SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec"})
_spawned_during_fast_test: list[str] | None = None


def _note_spawns(event: str, args: tuple) -> None:
    if _spawned_during_fast_test is not None and event in SPAWN_EVENTS:
        _spawned_during_fast_test.append(f"{event}: {str(args[:2])[:160]}")


sys.addaudithook(_note_spawns)


@pytest.fixture(autouse=True)
def _a_fast_test_starts_no_process(request) -> Iterator[None]:
    global _spawned_during_fast_test
    if request.node.get_closest_marker("fast") is None:
        yield
        return
    _spawned_during_fast_test = []
    try:
        yield
        spawned = _spawned_during_fast_test
    finally:
        _spawned_during_fast_test = None
    assert not spawned, f"a fast test started processes (take its module out of the fast tier): {spawned[:3]}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    sources: dict[Path, str] = {}
    for item in items:
        if item.path not in sources:
            sources[item.path] = item.path.read_text(encoding="utf-8")
        if is_fast(item, sources[item.path]):
            item.add_marker(pytest.mark.fast)

    def rank(item: pytest.Item) -> tuple[int, bool]:
        path = item.path.relative_to(TESTS)
        folder = LONG_FIRST.index(path.parts[0]) if path.parts[0] in LONG_FIRST else len(LONG_FIRST)
        return folder, path.as_posix() not in MACHINE_WIDE

    items.sort(key=rank)  # stable: each file keeps its own order


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile the checkout and the venv once, before any test starts a process.

    The processes the tests start run with PYTHONDONTWRITEBYTECODE (``bridge_env``, and on some
    machines the whole environment), so a module no process was allowed to cache is compiled again
    by every process that imports it: in a fresh clone a server's imports then cost ~2.1 s of CPU
    instead of ~1.06 s. Compiling takes ~8 s of CPU once, and well under a second when done."""
    if "PYTEST_XDIST_WORKER" in os.environ:  # the controller did it for its workers
        return
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            "-j0",
            sysconfig.get_paths()["purelib"],
            TESTS.parent / "dispatcher",
            TESTS,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
