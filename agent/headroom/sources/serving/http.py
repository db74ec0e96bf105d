"""One bounded HTTP/1.0 GET of an endpoint: ``Target`` (an http(s) URL parsed) and ``http_get`` (connect, headers,
body, chunked and gzip bodies, all within one deadline and under the body cap); failures are ``ScrapeError``."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from headroom import __version__
from headroom.safeio import excerpt
from headroom.sources.serving.errors import ScrapeError, ScrapeTimeout

DEFAULT_TIMEOUT = 0.5  # seconds: connect + request + headers + body
DEFAULT_MAX_BODY = 8 * 2**20
MAX_HEADER_BYTES = 64 * 1024


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # with the query string

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ScrapeError(f"not an http(s) URL: {url!r}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise ScrapeError(f"bad port in {url!r}: {exc}") from None
        path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme, parts.hostname, port, path)


def http_get(target: Target, timeout: float, max_body: int,
             clock: Callable[[], float] = time.monotonic) -> tuple[int, str, dict[str, str], bytes]:
    """(status, reason, headers lower-cased, body) of one HTTP/1.0 GET, all of it within ``timeout`` seconds.

    HTTP/1.0 with ``Connection: close``: the server ends the body by closing (or gives Content-Length),
    so one socket and one deadline bound every step, whatever the server does between bytes."""
    deadline = clock() + timeout

    def left() -> float:
        remaining = deadline - clock()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    host_header = target.host if ":" not in target.host else f"[{target.host}]"
    request = (f"GET {target.path} HTTP/1.0\r\nHost: {host_header}:{target.port}\r\n"
               f"User-Agent: headroom/{__version__}\r\nAccept: text/plain;version=0.0.4;q=1,*/*;q=0.1\r\n"
               "Accept-Encoding: identity\r\nConnection: close\r\n\r\n").encode("ascii")
    received = 0
    try:
        sock = socket.create_connection((target.host, target.port), timeout=left())
    except TimeoutError:
        raise ScrapeError(f"no connection within {timeout * 1000:.0f} ms") from None
    except OSError as exc:
        raise ScrapeError(f"cannot connect: {exc.strerror or exc}") from None
    try:
        if target.scheme == "https":
            sock.settimeout(left())
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=target.host)
        sock.settimeout(left())
        sock.sendall(request)
        buf = bytearray()
        head_end = -1
        length: int | None = None
        while True:
            sock.settimeout(left())
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
            received += len(chunk)
            if head_end < 0:
                head_end = buf.find(b"\r\n\r\n")
                if head_end < 0:
                    if len(buf) > MAX_HEADER_BYTES:
                        raise ScrapeError(f"response headers longer than {MAX_HEADER_BYTES // 1024} KiB")
                    continue
                status, reason, headers = _head(bytes(buf[:head_end]))
                if "content-length" in headers:
                    try:
                        length = int(headers["content-length"])
                    except ValueError:
                        raise ScrapeError(f"bad Content-Length {excerpt(headers['content-length'])}") from None
                    if length > max_body:
                        raise ScrapeError(f"body of {length} bytes is over the {_size(max_body)} cap "
                                          "(collectors.serving.max_body)")
            body_len = len(buf) - head_end - 4
            if body_len > max_body:
                raise ScrapeError(f"body over the {_size(max_body)} cap (collectors.serving.max_body)")
            if length is not None and body_len >= length:
                break
    except TimeoutError:
        what = "no answer" if received == 0 else f"answer incomplete after {received} bytes"
        raise ScrapeTimeout(f"{what} within {timeout * 1000:.0f} ms (collectors.serving.timeout)") from None
    except ssl.SSLError as exc:
        raise ScrapeError(f"TLS: {exc.reason or exc}") from None
    except OSError as exc:
        raise ScrapeError(f"connection failed: {exc.strerror or exc}") from None
    finally:
        sock.close()
    if head_end < 0:
        raise ScrapeError("connection closed before a complete HTTP response" if buf else
                          "connection closed without an answer")
    body = bytes(buf[head_end + 4:])
    if length is not None:
        body = body[:length]
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    if headers.get("content-encoding", "identity").lower() in ("gzip", "x-gzip"):  # sent despite identity
        body = _gunzip(body, max_body)
    return status, reason, headers, body


def _gunzip(body: bytes, max_body: int) -> bytes:
    import zlib

    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, max_body + 1)
    except zlib.error as exc:
        raise ScrapeError(f"gzip body is corrupt: {exc}") from None
    if len(out) > max_body:
        raise ScrapeError(f"body over the {_size(max_body)} cap once decompressed (collectors.serving.max_body)")
    return out


def _head(raw: bytes) -> tuple[int, str, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ScrapeError(f"not an HTTP response: {lines[0][:60]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    pos = 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            raise ScrapeError("chunked body cut short")
        try:
            size = int(body[pos:end].split(b";")[0], 16)
        except ValueError:
            raise ScrapeError("bad chunk size in a chunked body") from None
        if size == 0:
            return bytes(out)
        out += body[end + 2:end + 2 + size]
        pos = end + 2 + size + 2


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"
