"""``agent-bridge metrics serve``: the whole store's figures on ``/metrics``, on a loopback
address only (docs/metrics.md). Each scrape opens a read-only connection, reads, and closes it."""

import socket
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from dispatcher.core.config import load_config
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import shown
from dispatcher.core.metric_rules import scope_of
from dispatcher.core.processes import this_host
from dispatcher.core.settings import BridgeSettings
from dispatcher.dispatch.lease import holder_alive
from dispatcher.dispatch.metrics import ListenerFact, StoreCollector, registry_of
from dispatcher.store import Connection
from dispatcher.store.listeners import listener_holder
from dispatcher.store.readonly import open_read_only
from dispatcher.store.store_clock import store_now


class _Ipv6Server(WSGIServer):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass  # a line per scrape on stderr would be noise: the scrapes are Prometheus's to count


def store_collector(settings: BridgeSettings) -> StoreCollector:
    """The collector of the whole store (``scope_of("serve")``): every agent config.json
    declares, every host's attempts."""
    config = load_config(settings.config_path())
    host = this_host()

    def connect() -> Connection:
        conn = open_read_only(settings.db)
        if conn is None:
            raise BridgeError("store_missing", f"there is no store at {shown(settings.db)} yet")
        return conn

    def listeners(conn: Connection, now: float) -> Iterator[ListenerFact]:
        for agent in config.agents:
            holder = listener_holder(conn, agent)
            yield ListenerFact(agent, None if holder is None else holder.host, holder_alive(holder, host, now))

    return StoreCollector(
        connect,
        lambda conn: conn.close(),
        scope_of("serve", None, host),
        now=store_now,
        config=config,
        agents=sorted(config.agents),
        listeners=listeners,
    )


def metrics_server(settings: BridgeSettings, bind: str, port: int) -> WSGIServer:
    """The server, bound to ``bind`` (the command line refuses one that is not loopback,
    ``metric_rules.non_loopback``); port 0: a free one."""
    probe = open_read_only(settings.db)
    if probe is None:
        raise BridgeError("store_missing", f"there is no store at {shown(settings.db)}; nothing to export yet.")
    probe.close()
    app = make_wsgi_app(registry_of(store_collector(settings)))
    server_class = _Ipv6Server if ":" in bind else WSGIServer
    return make_server(bind, port, app, server_class=server_class, handler_class=_Quiet)


def serve(server: WSGIServer, bind: str, announce: Callable[[str], None]) -> None:
    where = f"[{bind}]" if ":" in bind else bind
    announce(f"agent-bridge: metrics on http://{where}:{server.server_port}/metrics (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
