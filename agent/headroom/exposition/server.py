"""HTTP serving: routes, compression, bounded requests. A scrape only sends pre-rendered bytes.

Routes: ``/`` landing page, the telemetry path (default ``/metrics``), ``/healthz``,
``/api/v1/status`` (JSON), ``/runbook`` (docs/runbook.md as HTML, exposition/runbook.py); anything else 404,
methods other than GET and HEAD 405.

Connections (docs/reliability.md, "Slow and idle clients"): a new connection must deliver its whole
first request head (TLS handshake included) within ``REQUEST_HEAD_TIMEOUT_SECONDS``, however slowly
it trickles; a kept-alive connection may then wait ``KEEPALIVE_TIMEOUT_SECONDS`` for its next
request, whose head again has ``REQUEST_HEAD_TIMEOUT_SECONDS`` from its first byte. At most
``MAX_CONNECTIONS`` are open (one thread each) and ``MAX_CONNECTIONS_PER_CLIENT`` per client address;
at the cap a new connection takes the place of an idle one: first the oldest that has not completed
a request yet (silent, or trickling its head), then the longest-idle kept-alive one, then the oldest
still sending a later request's head; it is refused (503) only when every connection is busy answering.
A client that does not read its response counts as idle: a response send that makes no progress for
``WRITE_STALL_TIMEOUT_SECONDS`` closes the connection, and at the cap a writer that has made no progress
for ``STALLED_WRITER_SECONDS`` is replaced first, with the silent heads (oldest progress first).

Request heads are held to what Go's net/http server accepts (``request_line_problem``,
``header_line_problem``): anything else gets 400 and a closed connection.
"""

from __future__ import annotations

import gzip
import io
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, cast

import structlog

from headroom import __version__
from headroom.exposition import landing, openmetrics, runbook, status_api
from headroom.exposition.health import State, health  # health: /healthz's text, also the status API's
from headroom.exposition.render import CONTENT_TYPE
from headroom.exposition.webconfig import TLSAuthHandlerMixin, TLSAuthServerMixin, WebConfig
from headroom.schema import parse_listen_address  # noqa: F401  (its home is schema.py; still importable here)

if TYPE_CHECKING:
    from headroom.samples import Snapshot

log = structlog.get_logger("headroom.server")

REQUEST_HEAD_TIMEOUT_SECONDS = 10.0  # the whole request head, from accept or from its first byte
KEEPALIVE_TIMEOUT_SECONDS = 120.0  # idle between requests: above Prometheus' scrape intervals (15 s, 1 min)
MAX_CONNECTIONS = 512  # open connections (one thread each)
MAX_CONNECTIONS_PER_CLIENT = 128  # open connections from one client address
MAX_REQUEST_BODY_BYTES = 64 * 1024  # a request body up to this is read and discarded; a larger one closes
WRITE_STALL_TIMEOUT_SECONDS = 10.0  # a response send that makes no progress this long closes the connection
STALLED_WRITER_SECONDS = 1.0  # at the cap, a writer without progress this long is replaced like an idle one
WRITE_CHUNK_BYTES = 256 * 1024  # a response goes out in sends of at most this, each one progress

_HEAD, _IDLE, _BUSY, _WRITE = "head", "idle", "busy", "write"

# Request heads are held to what Go's net/http server (Prometheus exporter-toolkit) accepts, so that no proxy
# in front and this server can read one request two ways (docs/serving.md, "Request parsing"): a line ends
# with LF, one CR before it is part of the ending (Go's bufio ReadLine; a bare LF ending is accepted, as Go
# and RFC 9112 2.2 do); the request line has no control character and single spaces; a header line is a token
# name, a colon right after it (no space before it) and a value of VCHAR, SP, HTAB and obs-text (no NUL, CR,
# ESC or other control character); a folded (obs-fold) line is refused (Go joins it; RFC 9112 5.2 allows 400).
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")
_VALUE_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # HTAB is allowed in a value


def _without_line_ending(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
    return raw


def request_line_problem(raw: bytes) -> str | None:
    """Why a raw request line (with its line ending) is refused with 400, None when it is not."""
    line = _without_line_ending(raw)
    if not line:
        return None  # http.server closes the connection without an answer, as Go skips it
    if _CONTROL.search(line):
        return "control character in the request line"
    words = line.split(b" ")
    if not all(words):
        return "malformed request line"
    if not _TOKEN.fullmatch(words[0]):
        return "invalid method"
    return None


def header_line_problem(raw: bytes) -> str | None:
    """Why a raw header line (with its line ending) is refused with 400, None when it is not."""
    line = _without_line_ending(raw)
    if line[:1] in (b" ", b"\t"):
        return "folded or indented header line"
    name, colon, value = line.partition(b":")
    if not colon:
        return "header line without a colon"
    if not _TOKEN.fullmatch(name):
        return "invalid header name"
    if _VALUE_CONTROL.search(value):
        return "invalid header value"
    return None


class _HeadReader:
    """Stands in for rfile while http.server reads a request's header lines: keeps the first line's problem
    (the stdlib's email parser would silently end the headers at ``Name : value`` or split at a bare CR)."""

    def __init__(self, rfile: io.BufferedIOBase) -> None:
        self._rfile = rfile
        self.problem: str | None = None

    def readline(self, limit: int = -1) -> bytes:
        line = self._rfile.readline(limit)
        if self.problem is None and line not in (b"\r\n", b"\n", b"") and line.endswith(b"\n"):
            self.problem = header_line_problem(line)
        return line

    def __getattr__(self, name: str) -> Any:  # Any: whatever rfile's attribute is (a delegating proxy)
        return getattr(self._rfile, name)


class _Conn:
    """One open connection: its client address, socket and where it is in the request cycle."""

    __slots__ = ("client", "sock", "state", "since", "deadline", "served")

    def __init__(self, client: str, sock: socket.socket, now: float, deadline: float) -> None:
        self.client = client
        self.sock = sock
        self.state = _HEAD
        self.since = now
        self.deadline = deadline
        self.served = False  # has completed a request

    def drop(self) -> None:
        """Shut the socket down from another thread: a read blocked on it returns at once."""
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)  # the plain method, also for an SSLSocket
        except (OSError, ValueError):
            pass


class _ResponseWriter(io.BufferedIOBase):
    """The handler's wfile: sends in chunks and records each one's progress on the connection, so the accept
    loop can close a client that does not read its response (module docstring) and replace it at the cap."""

    def __init__(self, sock: socket.socket, server: HeadroomHTTPServer, conn: _Conn | None) -> None:
        super().__init__()
        self._sock, self._server, self._conn = sock, server, conn

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # Any: BufferedIOBase.write's buffer, whose len() the caller counts
        srv, conn = self._server, self._conn
        view = memoryview(data).cast("B")
        srv.mark(conn, _WRITE, srv.write_stall_timeout)
        try:
            while view:
                sent = self._sock.send(view[:WRITE_CHUNK_BYTES])
                view = view[sent:]
                srv.mark(conn, _WRITE, srv.write_stall_timeout)  # progress: the stall deadline starts again
        finally:
            srv.mark(conn, _BUSY, 0.0)
        return len(data)


class _GzipCache:
    """Compresses each snapshot's exposition at most once per format, on the first scrape that asks for gzip."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[Snapshot, bytes]] = {}  # format -> (snapshot, compressed body)

    def get(self, snapshot: Snapshot, body: bytes | None = None, fmt: str = "text") -> bytes:
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
    timeout = REQUEST_HEAD_TIMEOUT_SECONDS  # bounds each read and write; heads and idle waits have deadlines
    # headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm and the client's
    # delayed ACK add ~40 ms to every response (docs/benchmarks.md)
    disable_nagle_algorithm = True
    raw_requestline: bytes  # set by http.server's handle_one_request (its stubs leave it out)

    def setup(self) -> None:
        # per connection: socketserver reads it from the instance (its stubs call it a class variable)
        self.timeout = self.server.request_head_timeout  # type: ignore[misc]
        self._conn = self.server.connection_of_this_thread()
        if self._conn is not None:
            self._conn.sock = self.request  # the TLS socket, when wrapped
        super().setup()
        self.wfile = _ResponseWriter(self.connection, self.server, self._conn)

    # ---------------------------------------------------------------------------- connection cycle
    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection and self._wait_for_next_request():
            self.handle_one_request()

    def _wait_for_next_request(self) -> bool:
        """Idle until the next request's first byte (True) or until the client leaves or is dropped."""
        srv, conn = self.server, self._conn
        if conn is not None:
            conn.served = True
        srv.mark(conn, _IDLE, srv.keepalive_timeout)
        try:
            self.connection.settimeout(srv.keepalive_timeout + srv.request_head_timeout)  # a backstop only
            # a buffered reader: StreamRequestHandler's rbufsize -1 (the stubs say BufferedIOBase, without peek)
            data = cast(io.BufferedReader, self.rfile).peek(1)
            self.connection.settimeout(self.timeout)
        except (OSError, ValueError):
            return False
        if not data:
            return False
        srv.mark(conn, _HEAD, srv.request_head_timeout)
        return True

    def request_framing_ok(self) -> bool:
        """Check Host and the body's framing before anything else (called by TLSAuthHandlerMixin).

        HTTP/0.9 is refused (its answers carry no status line); HTTP/1.1 needs exactly one Host; Transfer-Encoding and an invalid or conflicting
        Content-Length get 400 and a closed connection (a body that is not read would otherwise be
        taken as the next request); a body up to MAX_REQUEST_BODY_BYTES is read and discarded, a
        larger one is answered and the connection closed."""
        problem = self._head_reader.problem if self._head_reader is not None else None
        if problem:
            self.send_error(HTTPStatus.BAD_REQUEST, problem)
            return False
        if self.request_version == "HTTP/0.9":  # "GET /x" or "GET /x HTTP/0.9": a response without headers
            self.send_error(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported")
            return False
        headers = self.headers
        hosts = headers.get_all("Host") or []
        if self.request_version != "HTTP/1.0" and len(hosts) != 1:
            self.send_error(HTTPStatus.BAD_REQUEST, "missing Host header" if not hosts else "more than one Host header")
            return False
        if headers.get_all("Transfer-Encoding"):
            self.send_error(HTTPStatus.BAD_REQUEST, "Transfer-Encoding in a request is not supported")
            return False
        lengths = {v.strip() for line in headers.get_all("Content-Length") or [] for v in line.split(",")}
        if not lengths:
            return True
        if len(lengths) > 1:
            self.send_error(HTTPStatus.BAD_REQUEST, "conflicting Content-Length headers")
            return False
        (text,) = lengths
        if not (text.isascii() and text.isdigit()) or len(text) > 18:
            self.send_error(HTTPStatus.BAD_REQUEST, "invalid Content-Length")
            return False
        length = int(text)
        if length > MAX_REQUEST_BODY_BYTES:
            self.close_connection = True  # answered, then closed: the body is never read
            return True
        try:
            if length and len(self.rfile.read(length)) < length:
                self.close_connection = True
        except (OSError, ValueError):
            self.close_connection = True
        return True

    _head_reader: _HeadReader | None = None

    def parse_request(self) -> bool:
        problem = request_line_problem(self.raw_requestline)
        if problem:
            # as http.server's own parse_request does on a bad request line (its stubs say command is a str)
            self.command, self.requestline, self.request_version = None, "", "HTTP/1.0"  # type: ignore[assignment]
            self.server.mark(self._conn, _BUSY, 0.0)
            self.send_error(HTTPStatus.BAD_REQUEST, problem)
            return False
        rfile = self.rfile
        self._head_reader = _HeadReader(rfile)  # checks each header line as http.server reads it
        self.rfile = cast(io.BufferedIOBase, self._head_reader)  # readline checked, the rest delegated
        try:
            ok = super().parse_request()
        finally:
            self.rfile = rfile
        self.server.mark(self._conn, _BUSY, 0.0)
        return ok

    def handle_expect_100(self) -> bool:
        if self._head_reader is not None and self._head_reader.problem:
            return True  # no "100 Continue" for a head that request_framing_ok answers with 400
        return super().handle_expect_100()

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
            body, content_type, extra = self._metrics_response(snapshot)
            self._send(HTTPStatus.OK, body, content_type, head=head, extra=extra)
        elif path in ("/healthz", "/health"):
            ok, text, _ = health(srv.state, snapshot)
            self._send(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, (text + "\n").encode(),
                       "text/plain; charset=utf-8", head=head)
        elif path == "/api/v1/status":
            self._send(HTTPStatus.OK, status_api.status_json(srv.state), "application/json", head=head)
        elif path == "/":
            self._send(HTTPStatus.OK, landing.page(srv.state, srv.telemetry_path), "text/html; charset=utf-8",
                       head=head)
        elif path == "/runbook":
            self._send(HTTPStatus.OK, runbook.page(), "text/html; charset=utf-8", head=head)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8", head=head)

    def _metrics_response(self, snapshot: Snapshot) -> tuple[bytes, str, dict[str, str]]:
        """The exposition in the format (Accept) and encoding (Accept-Encoding, q-values honoured) the
        request asks for: (body, content type, extra headers)."""
        fmt, body, content_type = exposition_for(snapshot, self.headers.get("Accept"))
        vary = {"Vary": "Accept, Accept-Encoding"}
        if accepts_gzip(self.headers.get_all("Accept-Encoding") or ()):
            return self.server.gzip_cache.get(snapshot, body, fmt), content_type, {"Content-Encoding": "gzip", **vary}
        return body, content_type, vary

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, head: bool = False,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature, its Any)
        pass  # access logs would be per-scrape noise; errors are logged by the server

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 (as log_message)
        log.debug("http_request_error", client=self.client_address[0], detail=format % args)


_OPENMETRICS = openmetrics.Converter()


def exposition_for(snapshot: Snapshot, accept: str | None) -> tuple[str, bytes, str]:
    """(format, body, content type) for a scrape: OpenMetrics when its Accept header prefers it (Prometheus
    does by default), the text format 0.0.4 otherwise. Both come from the bytes rendered at the tick."""
    if openmetrics.prefers_openmetrics(accept):
        return "openmetrics", _OPENMETRICS.get(snapshot), openmetrics.CONTENT_TYPE
    return "text", snapshot.exposition, CONTENT_TYPE


def accepts_gzip(accept_encoding: Iterable[str]) -> bool:
    """Whether Accept-Encoding header values (RFC 9110 12.5.3, q-values included) allow gzip.

    ``gzip;q=0`` refuses it; ``*`` stands for gzip when gzip is not named; a malformed q counts as 0."""
    named: float | None = None
    star: float | None = None
    for line in accept_encoding:
        for item in line.split(","):
            coding, _, params = item.partition(";")
            coding = coding.strip().lower()
            q = 1.0
            for param in params.split(";"):
                key, _, value = param.partition("=")
                if key.strip().lower() == "q":
                    try:
                        q = float(value.strip())
                    except ValueError:
                        q = 0.0
                    if not 0.0 <= q <= 1.0:  # also NaN
                        q = 0.0
            if coding in ("gzip", "x-gzip"):
                named = q if named is None else max(named, q)
            elif coding == "*":
                star = q
    if named is not None:
        return named > 0
    return star is not None and star > 0


def _refusal(reason: bytes) -> bytes:
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s\n" % (len(reason) + 1, reason))


_REFUSED = _refusal(b"too many connections")
_REFUSED_CLIENT = _refusal(b"too many connections from this address")


# ignore: webconfig.TLSAuthServerMixin.finish_request takes a socket where BaseServer's takes its _RequestType
# (a socket, or a datagram pair this TCP server never gets); webconfig.py is typed on its own (issue 31)
class HeadroomHTTPServer(TLSAuthServerMixin, ThreadingHTTPServer):  # type: ignore[misc]
    """The agent's listener. ``web_config`` returns the TLS/auth/headers settings to apply now
    (``WebConfigWatcher.current`` re-reads the file on change; the default is plain HTTP).

    Each connection has its own thread. Limits (instance attributes, module docstring): the request
    head deadline, the keep-alive timeout, ``max_connections`` and ``max_connections_per_client``.
    Deadlines are enforced by the accept loop (``service_actions``, every poll interval), which
    shuts a late connection's socket down, so a client trickling one byte at a time cannot extend them."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    max_connections = MAX_CONNECTIONS
    max_connections_per_client = MAX_CONNECTIONS_PER_CLIENT
    request_head_timeout = REQUEST_HEAD_TIMEOUT_SECONDS
    keepalive_timeout = KEEPALIVE_TIMEOUT_SECONDS
    write_stall_timeout = WRITE_STALL_TIMEOUT_SECONDS
    stalled_writer_seconds = STALLED_WRITER_SECONDS

    def __init__(self, address: tuple[str, int], state: State, telemetry_path: str = "/metrics",
                 family: int = socket.AF_INET, web_config: Callable[[], WebConfig] = WebConfig) -> None:
        self.address_family = family
        self.web_config = web_config
        self.state = state
        self.telemetry_path = telemetry_path
        self.gzip_cache = _GzipCache()
        self._conns: set[_Conn] = set()
        self._per_client: dict[str, int] = {}
        self._connections_lock = threading.Lock()
        self._local = threading.local()
        self._refusing = False
        self._next_sweep = 0.0
        self.connections_evicted = 0
        super().__init__(address, Handler)

    @property
    def open_connections(self) -> int:
        """Connections being served now."""
        return len(self._conns)

    def connection_of_this_thread(self) -> _Conn | None:
        return getattr(self._local, "conn", None)

    def connection_socket_changed(self, sock: socket.socket) -> None:
        """TLSAuthServerMixin: the connection is now this (TLS) socket."""
        conn = self.connection_of_this_thread()
        if conn is not None:
            conn.sock = sock

    def mark(self, conn: _Conn | None, state: str, timeout: float) -> None:
        """Move a connection to ``state``, which it may keep for ``timeout`` seconds (busy: unlimited)."""
        if conn is not None:
            now = time.monotonic()
            conn.state, conn.since, conn.deadline = state, now, now + timeout

    def _victim(self, now: float) -> _Conn | None:
        """The connection a new one replaces at the cap (module docstring), None when all are busy."""
        best = None
        best_key: tuple[int, float] = (0, 0.0)
        for c in self._conns:
            if c.state == _BUSY or (c.state == _WRITE and now - c.since < self.stalled_writer_seconds):
                continue
            # a writer's `since` is its last progress: a client not reading its answer ranks with the silent heads
            key = (2 if c.state == _WRITE or not c.served else 1 if c.state == _IDLE else 0, -c.since)
            if best is None or key > best_key:
                best, best_key = c, key
        return best

    # Any: socketserver's request (for this TCP server a socket: webconfig's finish_request takes one) and client
    # address, as BaseServer types them
    def process_request(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0]) if client_address else ""
        now = time.monotonic()
        victim = refusal = None
        with self._connections_lock:
            full = len(self._conns) >= self.max_connections
            if self._per_client.get(client, 0) >= self.max_connections_per_client:
                refusal = _REFUSED_CLIENT
            elif full:
                victim = self._victim(now)
                if victim is None:
                    refusal = _REFUSED
                else:
                    self._forget(victim)
                    self.connections_evicted += 1
            conn = None
            if refusal is None:
                conn = _Conn(client, request, now, now + self.request_head_timeout)
                self._conns.add(conn)
                self._per_client[client] = self._per_client.get(client, 0) + 1
            changed, self._refusing = full != self._refusing, full
        if changed:
            if full:
                log.warning("http_connection_limit_reached", max_connections=self.max_connections,
                            policy="replace the longest idle or slowest connection; 503 when all are busy")
            else:
                log.info("http_connections_accepted_again", max_connections=self.max_connections)
        if victim is not None:
            victim.drop()
        if conn is None:
            try:
                request.setblocking(False)
                request.send(refusal)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            threading.Thread(target=self._serve_connection, args=(request, client_address, conn),
                             daemon=True).start()
        except BaseException:
            self._connection_done(conn)
            self.shutdown_request(request)
            raise

    def _serve_connection(self, request: Any, client_address: Any, conn: _Conn) -> None:  # as process_request
        self._local.conn = conn
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._connection_done(conn)

    def _forget(self, conn: _Conn) -> None:
        """Remove conn from the books (lock held); False when it was already gone."""
        if conn in self._conns:
            self._conns.discard(conn)
            left = self._per_client.get(conn.client, 1) - 1
            if left:
                self._per_client[conn.client] = left
            else:
                self._per_client.pop(conn.client, None)

    def _connection_done(self, conn: _Conn) -> None:
        with self._connections_lock:
            self._forget(conn)

    def service_actions(self) -> None:
        """Called by serve_forever between accepts (at least every poll interval): drop the connections
        whose request head, keep-alive wait or response send (no progress) is past its deadline."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + 0.05
        with self._connections_lock:
            late = [c for c in self._conns if c.state != _BUSY and c.deadline <= now]
            for c in late:
                self._forget(c)
        for c in late:
            c.drop()

    def handle_error(self, request: Any, client_address: Any) -> None:  # as process_request
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            return  # client went away or timed out: not our problem, not worth a traceback
        log.warning("http_handler_error", client=client_address[0] if client_address else None,
                    error=f"{type(exc).__name__}: {exc}")
