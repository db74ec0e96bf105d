"""web-config.yml: real TLS handshakes, basic auth, headers, reload on change, precise errors.

Certificates are made here with the openssl CLI (a CA, two server certificates for rotation, a
CA-signed client certificate and a self-signed one).
"""

from __future__ import annotations

import base64
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import pytest
from structlog.testing import capture_logs

from headroom.exposition import webconfig
from headroom.exposition.webconfig import (
    TLSAuthHandlerMixin,
    TLSAuthServerMixin,
    WebConfig,
    WebConfigError,
    WebConfigWatcher,
    load_web_config,
)

OPENSSL = shutil.which("openssl")


def openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL, "the openssl CLI is needed to make test certificates"
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True)


def make_key_and_csr(name: str, cn: str, cwd: Path) -> None:
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)


def sign(name: str, extensions: str, cwd: Path) -> None:
    (cwd / f"{name}.ext").write_text(extensions)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=cwd)


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=headroom-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=d)
    server_ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    for name in ("server1", "server2"):
        make_key_and_csr(name, name, d)
        sign(name, server_ext, d)
    make_key_and_csr("client", "scraper", d)
    sign("client", "subjectAltName=DNS:scraper.example,IP:10.0.0.7\nextendedKeyUsage=clientAuth\n", d)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "rogue.key", "-out", "rogue.crt", "-days", "2", "-subj", "/CN=rogue",
            "-addext", "subjectAltName=DNS:scraper.example", cwd=d)
    (d / "garbage.crt").write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    return d


@pytest.fixture
def site(tmp_path, certs) -> Path:
    """A config directory holding server.crt/server.key (server1), ca.crt and the client files."""
    for src, dst in [("server1.crt", "server.crt"), ("server1.key", "server.key"), ("ca.crt", "ca.crt"),
                     ("client.crt", "client.crt"), ("client.key", "client.key"),
                     ("rogue.crt", "rogue.crt"), ("rogue.key", "rogue.key"), ("garbage.crt", "garbage.crt"),
                     ("server2.crt", "server2.crt"), ("server2.key", "server2.key")]:
        shutil.copy(certs / src, tmp_path / dst)
    return tmp_path


def write_config(site: Path, text: str) -> Path:
    path = site / "web.yml"
    path.write_text(text)
    return path


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
MTLS = TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"


class Server(TLSAuthServerMixin, ThreadingHTTPServer):
    daemon_threads = True


class Handler(TLSAuthHandlerMixin, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b"headroom_up 1\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's signature
        pass


@pytest.fixture
def serve():
    servers: list[Server] = []

    def start(web_config, handshake_timeout: float = 5.0) -> int:
        server = Server(("127.0.0.1", 0), Handler)
        server.web_config = web_config
        server.tls_handshake_timeout = handshake_timeout
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def client_context(site: Path, cert: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(site / "ca.crt"))
    if cert is not None:
        context.load_cert_chain(site / f"{cert}.crt", site / f"{cert}.key")
    return context


def get(port: int, context: ssl.SSLContext | None, auth: tuple[str, str] | None = None):
    """GET /metrics; return (status, headers, body, server certificate CN or None)."""
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    else:
        conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=5)
    headers = {}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    try:
        conn.request("GET", "/metrics", headers=headers)
        cn = None
        if context is not None:
            subject = dict(x[0] for x in conn.sock.getpeercert()["subject"])
            cn = subject["commonName"]
        response = conn.getresponse()
        return response.status, response.headers, response.read(), cn
    finally:
        conn.close()


# --- TLS ------------------------------------------------------------------------------------------


def test_tls_listener_serves_tls_and_refuses_plain_http(site, serve):
    write_config(site, TLS)
    port = serve(WebConfigWatcher(site / "web.yml").current)
    status, _, body, cn = get(port, client_context(site))
    assert (status, body, cn) == (200, b"headroom_up 1\n", "server1")
    with pytest.raises((http.client.HTTPException, OSError)):
        get(port, None)


def tls11_client() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # so that the client really offers TLS 1.1
    return context


def handshake_version(port: int, context: ssl.SSLContext) -> str:
    with (socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
          context.wrap_socket(raw, server_hostname="localhost") as tls):
        return tls.version()


def test_tls11_client_is_refused_by_the_server_when_min_version_is_tls12(site, serve):
    strict = load_web_config(write_config(site, TLS + "  min_version: TLS12\n"))
    port = serve(lambda: strict)
    with pytest.raises(ssl.SSLError) as refused:
        handshake_version(port, tls11_client())
    # The alert comes from the server: it refused the protocol version the client offered.
    assert "PROTOCOL_VERSION" in str(refused.value).upper()


def test_tls11_client_is_accepted_when_min_version_allows_it(site, serve):
    legacy = load_web_config(write_config(site, TLS + "  min_version: TLS11\n"))
    port = serve(lambda: legacy)
    assert handshake_version(port, tls11_client()) == "TLSv1.1"


def test_max_version_tls12_caps_a_tls13_client(site, serve):
    capped = load_web_config(write_config(site, TLS + "  max_version: TLS12\n"))
    port = serve(lambda: capped)
    assert handshake_version(port, client_context(site)) == "TLSv1.2"


@pytest.mark.parametrize(
    ("situation", "client_cert", "accepted"),
    [
        ("CA-signed client certificate", "client", True),
        ("no client certificate", None, False),
        ("self-signed client certificate", "rogue", False),
    ],
)
def test_required_client_certificate(site, serve, situation, client_cert, accepted):
    config = load_web_config(write_config(site, MTLS))
    port = serve(lambda: config)
    if accepted:
        assert get(port, client_context(site, cert=client_cert))[0] == 200, situation
    else:
        # With TLS 1.3 the client learns of the refusal on its first read, as an alert or a reset.
        with pytest.raises((ssl.SSLError, ConnectionResetError, http.client.HTTPException)):
            get(port, client_context(site, cert=client_cert))


def test_optional_client_certificate_is_verified_only_when_given(site, serve):
    config = load_web_config(write_config(site, TLS + "  client_auth_type: VerifyClientCertIfGiven\n"
                                                      "  client_ca_file: ca.crt\n"))
    port = serve(lambda: config)
    assert get(port, client_context(site))[0] == 200
    assert get(port, client_context(site, cert="client"))[0] == 200
    with pytest.raises((ssl.SSLError, ConnectionResetError, http.client.HTTPException)):
        get(port, client_context(site, cert="rogue"))


@pytest.mark.parametrize(
    ("situation", "allowed", "accepted"),
    [
        ("dns name listed", "[scraper.example]", True),
        ("ip address listed", "['10.0.0.7']", True),
        ("not listed", "[other.example]", False),
    ],
)
def test_client_allowed_sans(site, serve, situation, allowed, accepted):
    config = load_web_config(write_config(site, MTLS + f"  client_allowed_sans: {allowed}\n"))
    port = serve(lambda: config)
    if accepted:
        assert get(port, client_context(site, cert="client"))[0] == 200, situation
    else:
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            get(port, client_context(site, cert="client"))


def test_a_silent_client_neither_blocks_others_nor_holds_its_connection(site, serve):
    config = load_web_config(write_config(site, TLS))
    port = serve(lambda: config, handshake_timeout=0.5)
    silent = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        t0 = time.monotonic()
        assert get(port, client_context(site))[0] == 200
        assert time.monotonic() - t0 < 0.4  # served while the silent client's handshake is still pending
        assert silent.recv(1) == b""  # closed by the server after the handshake timeout
        assert time.monotonic() - t0 < 3
    finally:
        silent.close()


# --- basic auth and headers -----------------------------------------------------------------------


def hashed(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


AUTH_AND_HEADERS = """
basic_auth_users:
  prometheus: "{hash}"
http_server_config:
  headers:
    X-Frame-Options: deny
    strict-transport-security: max-age=31536000
"""


@pytest.fixture
def auth_config(site) -> WebConfig:
    return load_web_config(write_config(site, TLS + AUTH_AND_HEADERS.format(hash=hashed("s3cret:pass"))))


@pytest.mark.parametrize(
    ("situation", "auth", "status"),
    [
        ("right password", ("prometheus", "s3cret:pass"), 200),
        ("wrong password", ("prometheus", "s3cret"), 401),
        ("unknown user", ("grafana", "s3cret:pass"), 401),
        ("no credentials", None, 401),
    ],
)
def test_basic_auth_over_tls(site, serve, auth_config, situation, auth, status):
    port = serve(lambda: auth_config)
    got, headers, _, _ = get(port, client_context(site), auth=auth)
    assert got == status, situation
    if status == 401:
        assert headers["WWW-Authenticate"].startswith("Basic realm=")
    # Configured headers ride on every response, 401 included, canonically spelled.
    assert headers["X-Frame-Options"] == "deny"
    assert headers["Strict-Transport-Security"] == "max-age=31536000"


@pytest.mark.parametrize(
    ("situation", "header"),
    [
        ("missing", None),
        ("another scheme", "Bearer abc"),
        ("not base64", "Basic !!!"),
        ("no colon", "Basic " + base64.b64encode(b"prometheus").decode()),
        ("not utf-8", "Basic " + base64.b64encode(b"prometheus:\xff").decode()),
    ],
)
def test_malformed_authorization_is_refused(auth_config, situation, header):
    assert auth_config.check_basic_auth(header) is False, situation


def test_no_users_means_no_auth(site):
    assert load_web_config(write_config(site, "")).check_basic_auth(None) is True


def test_successful_checks_are_cached_and_failures_never_are(auth_config, monkeypatch):
    calls = []
    real = bcrypt.checkpw

    def counting(password, hashed_password):
        calls.append(password)
        return real(password, hashed_password)

    monkeypatch.setattr(webconfig.bcrypt, "checkpw", counting)
    good = "Basic " + base64.b64encode(b"prometheus:s3cret:pass").decode()
    bad = "Basic " + base64.b64encode(b"prometheus:nope").decode()
    unknown = "Basic " + base64.b64encode(b"mallory:nope").decode()
    assert [auth_config.check_basic_auth(h) for h in (good, good, good)] == [True, True, True]
    assert len(calls) == 1
    assert [auth_config.check_basic_auth(h) for h in (bad, bad)] == [False, False]
    assert len(calls) == 3
    # An unknown user still costs a bcrypt (against a decoy), so timing does not reveal who exists.
    assert auth_config.check_basic_auth(unknown) is False
    assert len(calls) == 4


def test_the_success_cache_is_bounded(site, monkeypatch):
    # private: a tuning constant, shortened for the test (no setting or public name for it)
    monkeypatch.setattr(webconfig, "_AUTH_CACHE_SIZE", 2)
    users = {f"user{i}": hashed(f"pw{i}") for i in range(3)}
    text = "basic_auth_users:\n" + "".join(f'  {u}: "{h}"\n' for u, h in users.items())
    config = load_web_config(write_config(site, text))
    calls = []
    real = bcrypt.checkpw
    monkeypatch.setattr(webconfig.bcrypt, "checkpw", lambda p, h: calls.append(p) or real(p, h))

    def check(i: int) -> bool:
        return config.check_basic_auth("Basic " + base64.b64encode(f"user{i}:pw{i}".encode()).decode())

    assert all(check(i) for i in (0, 1, 2))  # user0 is evicted by user2
    assert len(calls) == 3
    assert check(2) and check(1)
    assert len(calls) == 3
    assert check(0)
    assert len(calls) == 4


# --- reload ---------------------------------------------------------------------------------------


def test_certificate_rotation_is_picked_up_without_restart(site, serve):
    write_config(site, TLS)
    watcher = WebConfigWatcher(site / "web.yml", min_check_interval=0)
    port = serve(watcher.current)
    assert get(port, client_context(site))[3] == "server1"
    # Rotate the way cert managers do: new files, renamed into place.
    for suffix in ("crt", "key"):
        shutil.copy(site / f"server2.{suffix}", site / f"server.{suffix}.new")
        os.replace(site / f"server.{suffix}.new", site / f"server.{suffix}")
    assert get(port, client_context(site))[3] == "server2"


def test_checks_happen_at_most_once_per_interval(site):
    write_config(site, TLS)
    now = [100.0]
    watcher = WebConfigWatcher(site / "web.yml", min_check_interval=1.0, clock=lambda: now[0])
    first = watcher.current()
    write_config(site, TLS + AUTH_AND_HEADERS.format(hash=hashed("x")))
    now[0] += 0.5
    assert watcher.current() is first
    now[0] += 0.6
    assert watcher.current().users.keys() == {"prometheus"}


def test_a_broken_change_keeps_the_last_good_config_and_logs_once(site):
    write_config(site, TLS)
    watcher = WebConfigWatcher(site / "web.yml", min_check_interval=0)
    good = watcher.current()
    write_config(site, TLS + "  client_auth_type: Sometimes\n")
    with capture_logs() as logs:
        assert watcher.current() is good
        assert watcher.current() is good
    failures = [e for e in logs if e["event"] == "web_config_reload_failed"]
    assert len(failures) == 1
    assert "tls_server_config.client_auth_type" in failures[0]["error"]
    write_config(site, TLS + "  min_version: TLS13\n")
    assert watcher.current().tls.min_version == "TLS13"


def test_the_first_load_fails_fast(site):
    with pytest.raises(WebConfigError, match="cannot read web config"):
        WebConfigWatcher(site / "absent.yml")


# --- parsing --------------------------------------------------------------------------------------


def test_relative_paths_resolve_against_the_config_directory(site):
    config = load_web_config(write_config(site, MTLS))
    assert config.tls.cert_file == site / "server.crt"
    assert config.tls.client_ca_file == site / "ca.crt"
    assert config.watched_files() == (site / "server.crt", site / "server.key", site / "ca.crt")


@pytest.mark.parametrize(
    ("situation", "text"),
    [
        ("empty file", ""),
        ("empty sections", "tls_server_config:\nbasic_auth_users:\nhttp_server_config:\n"),
        ("tls section without cert fields", "tls_server_config:\n  min_version: TLS13\n"),
        ("http2 switch accepted", "http_server_config:\n  http2: false\n"),
    ],
)
def test_configs_meaning_plain_http(site, situation, text):
    config = load_web_config(write_config(site, text))
    assert config.ssl_context() is None, situation
    assert config.check_basic_auth(None)


GOOD_HASH = "$2b$04$" + "a" * 53


@pytest.mark.parametrize(
    ("situation", "text", "expected"),
    [
        ("yaml syntax error", "tls_server_config:\n  cert_file: [a\n", ":3:1: YAML syntax error: expected ',' or ']'"),
        ("unknown top-level field", "tls_config: {}\n", ":1:1: tls_config: unknown key (expected one of: tls_server_config, http_server_config, basic_auth_users)"),
        ("toolkit field we refuse", "rate_limit: {}\n", ":1:1: rate_limit: is not supported"),
        ("unknown tls field", TLS + "  certfile: x\n", ":4:3: tls_server_config.certfile: unknown key (did you mean 'cert_file'?)"),
        ("curve preferences refused", TLS + "  curve_preferences: [X25519]\n",
         ":4:3: tls_server_config.curve_preferences: is not supported"),
        ("section of the wrong type", "basic_auth_users: [a, b]\n", ":1:19: basic_auth_users: expected a mapping, got a list"),
        ("cert file missing", "tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n",
         ":2:14: tls_server_config.cert_file: cannot read"),
        ("key_file absent", "tls_server_config:\n  cert_file: server.crt\n", "tls_server_config.key_file: missing"),
        ("cert file not a certificate", "tls_server_config:\n  cert_file: garbage.crt\n  key_file: server.key\n",
         ":2:14: tls_server_config.cert_file:"),
        ("key of another certificate", "tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n",
         "do not load as a certificate and its key"),
        ("CA file is not a CA", TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: garbage.crt\n",
         ":5:19: tls_server_config.client_ca_file:"),
        ("bad client auth type", TLS + "  client_auth_type: Sometimes\n",
         ":4:21: tls_server_config.client_auth_type: must be one of NoClientCert, RequestClientCert, "
         "VerifyClientCertIfGiven, RequireAndVerifyClientCert; got 'Sometimes'"),
        ("require-any refused", TLS + "  client_auth_type: RequireAnyClientCert\n",
         "tls_server_config.client_auth_type: RequireAnyClientCert (a certificate required but not verified)"),
        ("verification without CA", TLS + "  client_auth_type: RequireAndVerifyClientCert\n",
         "needs client_ca_file"),
        ("CA without verification", TLS + "  client_ca_file: ca.crt\n",
         "tls_server_config.client_ca_file: a client CA is configured without"),
        ("bad min version", TLS + "  min_version: TLS1.2\n", ":4:16: tls_server_config.min_version: must be one of TLS10"),
        ("max below min", TLS + "  min_version: TLS13\n  max_version: TLS12\n", "TLS12 is below min_version TLS13"),
        ("insecure cipher suite", TLS + "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
         ":4:19: tls_server_config.cipher_suites[0]: unknown or insecure cipher suite"),
        ("sans without required client cert", TLS + "  client_auth_type: VerifyClientCertIfGiven\n"
         "  client_ca_file: ca.crt\n  client_allowed_sans: [a]\n", "needs client_auth_type RequireAndVerifyClientCert"),
        ("boolean that is not", TLS + "  prefer_server_cipher_suites: sometimes\n", "expected true or false"),
        ("header toolkit forbids", "http_server_config:\n  headers:\n    Authorization: x\n",
         ":3:20: http_server_config.headers.Authorization: this header cannot be configured"),
        ("header value outside its enumeration", "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
         "http_server_config.headers.X-Frame-Options: must be one of deny, sameorigin; got 'allow'"),
        ("not a bcrypt hash", "basic_auth_users:\n  prometheus: hunter2\n",
         ":2:15: basic_auth_users.prometheus: not a bcrypt hash"),
        ("password hash missing", "basic_auth_users:\n  prometheus:\n", "basic_auth_users.prometheus: expected a string"),
        ("duplicate user", f"basic_auth_users:\n  a: '{GOOD_HASH}'\n  a: '{GOOD_HASH}'\n", ":3:3: basic_auth_users.a: duplicate key"),
    ],
)
def test_invalid_configs_name_file_position_and_field(site, situation, text, expected):
    path = write_config(site, text)
    with pytest.raises(WebConfigError) as error:
        load_web_config(path)
    message = str(error.value)
    assert message.startswith(str(path)), situation
    assert expected in message, f"{situation}: {message}"


def test_cipher_suites_restrict_tls12(site, serve):
    config = load_web_config(write_config(site, TLS + "  max_version: TLS12\n  cipher_suites:\n"
                                                      "    - TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\n"))
    port = serve(lambda: config)
    with (socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
          client_context(site).wrap_socket(raw, server_hostname="localhost") as tls):
        assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
