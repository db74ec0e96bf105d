"""HTTP serving: routes, compression, bounded requests. A scrape only sends pre-rendered bytes.

Routes: ``/`` landing page, the telemetry path (default ``/metrics``), ``/healthz``,
``/api/v1/status`` (JSON); anything else 404, methods other than GET and HEAD 405.
"""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import structlog

from headroom import __version__
from headroom.exposition import landing, openmetrics
from headroom.exposition.render import CONTENT_TYPE
from headroom.exposition.webconfig import TLSAuthHandlerMixin, TLSAuthServerMixin, WebConfig

log = structlog.get_logger("headroom.server")

REQUEST_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS = 512  # open connections (one thread each) beyond which new ones get 503 and are closed


class State(Protocol):
    snapshot: Any

    def healthy(self) -> tuple[bool, str]: ...


class _GzipCache:
    """Compresses each snapshot's exposition at most once per format, on the first scrape that asks for gzip."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[Any, bytes]] = {}  # format -> (snapshot, compressed body)

    def get(self, snapshot: Any, body: bytes | None = None, fmt: str = "text") -> bytes:
        with self._lock:
            cached = self._entries.get(fmt)
            if cached is None or cached[0] is not snapshot:
                data = snapshot.exposition if body is None else body
                cached = self._entries[fmt] = (snapshot, gzip.compress(data, compresslevel=1, mtime=0))
            return cached[1]


class Handler(TLSAuthHandlerMixin, BaseHTTPRequestHandler):
    server: HeadroomHTTPServer
    server_version = f"headroom/{__version__}"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_SECONDS  # idle and half-open connections are dropped after this
    # headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm and the client's
    # delayed ACK add ~40 ms to every response (docs/benchmarks.md)
    disable_nagle_algorithm = True

    def setup(self) -> None:
        self.timeout = self.server.request_timeout
        super().setup()

    # ---------------------------------------------------------------------------------- routing
    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        self._route(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._route(head=True)

    def __getattr__(self, name: str) -> Callable[[], None]:
        if name.startswith("do_"):
            return self._method_not_allowed
        raise AttributeError(name)

    def _method_not_allowed(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"method not allowed\n", "text/plain; charset=utf-8",
                   extra={"Allow": "GET, HEAD"})

    def _route(self, head: bool) -> None:
        srv = self.server
        path = self.path.split("?", 1)[0]
        snapshot = srv.state.snapshot
        if path == srv.telemetry_path:
            if snapshot is None:
                self._send(HTTPStatus.SERVICE_UNAVAILABLE, b"no sample yet\n", "text/plain; charset=utf-8", head=head)
                return
            fmt, body, content_type = exposition_for(snapshot, self.headers.get("Accept"))
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                self._send(HTTPStatus.OK, srv.gzip_cache.get(snapshot, body, fmt), content_type, head=head,
                           extra={"Content-Encoding": "gzip", "Vary": "Accept, Accept-Encoding"})
            else:
                self._send(HTTPStatus.OK, body, content_type, head=head, extra={"Vary": "Accept, Accept-Encoding"})
        elif path in ("/healthz", "/health"):
            ok, reason = srv.state.healthy()
            degraded = _degraded(srv.state, snapshot)
            body = reason if not degraded else reason + "; degraded: " + "; ".join(degraded)
            self._send(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, (body + "\n").encode(),
                       "text/plain; charset=utf-8", head=head)
        elif path == "/api/v1/status":
            self._send(HTTPStatus.OK, landing.status_json(srv.state), "application/json", head=head)
        elif path == "/":
            self._send(HTTPStatus.OK, landing.page(srv.state, srv.telemetry_path), "text/html; charset=utf-8",
                       head=head)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8", head=head)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, head: bool = False,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    # --------------------------------------------------------------------------- quiet, no tracebacks
    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Used by http.server for malformed requests (414, 431, 400 ...): plain text, connection closed.
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # garbage request lines parse as HTTP/0.9: answer with a status line
            self.request_version = "HTTP/1.0"
        try:
            body = f"{code} {message or HTTPStatus(code).phrase}\n".encode("utf-8", "replace")
            self.send_response(code, message)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        pass  # access logs would be per-scrape noise; errors are logged by the server

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("http_request_error", client=self.client_address[0], detail=format % args)


_OPENMETRICS = openmetrics.Converter()


def exposition_for(snapshot: Any, accept: str | None) -> tuple[str, bytes, str]:
    """(format, body, content type) for a scrape: OpenMetrics when its Accept header prefers it (Prometheus
    does by default), the text format 0.0.4 otherwise. Both come from the bytes rendered at the tick."""
    if openmetrics.prefers_openmetrics(accept):
        return "openmetrics", _OPENMETRICS.get(snapshot), openmetrics.CONTENT_TYPE
    return "text", snapshot.exposition, CONTENT_TYPE


def _degraded(state: State, snapshot: Any) -> list[str]:
    """What is broken while the agent itself works: failing collectors, then GPUs that stopped answering."""
    out = [f"{k}: {v}" for k, v in sorted(getattr(state, "failing", {}).items())]
    nvml = snapshot.sample.data("nvml") if snapshot is not None else None
    for g in getattr(nvml, "gpus", ()):
        if not g.up:
            out.append(f"gpu {g.index}" + (f" {g.uuid}" if g.uuid else "") + f": {g.error or 'down'}")
    return out


_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: 20\r\nConnection: close\r\n\r\ntoo many connections\n")


class HeadroomHTTPServer(TLSAuthServerMixin, ThreadingHTTPServer):
    """The agent's listener. ``web_config`` returns the TLS/auth/headers settings to apply now
    (``WebConfigWatcher.current`` re-reads the file on change; the default is plain HTTP).

    Each connection has its own thread; at most ``max_connections`` are open at once, the next ones
    get a 503 and are closed (a connection flood costs refusals, not the host's threads). A connection
    idle for ``request_timeout`` seconds, or stuck in a half-sent request, is dropped."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    max_connections = MAX_CONNECTIONS
    request_timeout = REQUEST_TIMEOUT_SECONDS

    def __init__(self, address: tuple[str, int], state: State, telemetry_path: str = "/metrics",
                 family: int = socket.AF_INET, web_config: Callable[[], WebConfig] = WebConfig) -> None:
        self.address_family = family
        self.web_config = web_config
        self.state = state
        self.telemetry_path = telemetry_path
        self.gzip_cache = _GzipCache()
        self._connections = 0
        self._connections_lock = threading.Lock()
        self._refusing = False
        super().__init__(address, Handler)

    @property
    def open_connections(self) -> int:
        """Connections being served now."""
        return self._connections

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            full = self._connections >= self.max_connections
            if not full:
                self._connections += 1
            changed, self._refusing = full != self._refusing, full
        if changed:
            if full:
                log.warning("http_connection_limit_reached", max_connections=self.max_connections)
            else:
                log.info("http_connections_accepted_again", max_connections=self.max_connections)
        if full:
            try:
                request.setblocking(False)
                request.send(_REFUSED)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._connection_done()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connection_done()

    def _connection_done(self) -> None:
        with self._connections_lock:
            self._connections -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            return  # client went away or timed out: not our problem, not worth a traceback
        log.warning("http_handler_error", client=client_address[0] if client_address else None,
                    error=f"{type(exc).__name__}: {exc}")


def parse_listen_address(value: str) -> tuple[str, int, int]:
    """'host:port', ':port' or '[v6]:port' -> (host, port, address family); ValueError when invalid."""
    host, sep, port_text = value.rpartition(":")
    if not sep:
        raise ValueError(f"listen address {value!r} must be HOST:PORT (e.g. :9843 or 127.0.0.1:9843)")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"listen address {value!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"listen address {value!r}: port must be 0-65535")
    family = socket.AF_INET
    if host.startswith("[") and host.endswith("]"):
        host, family = host[1:-1], socket.AF_INET6
    elif ":" in host:
        raise ValueError(f"listen address {value!r}: write IPv6 addresses in brackets, e.g. [::1]:9843")
    if host == "":
        host = "0.0.0.0"
    return host, port, family
