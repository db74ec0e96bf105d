"""TLS, basic authentication and response headers from an exporter-toolkit web-config.yml.

The schema is Prometheus exporter-toolkit's (node_exporter's ``--web.config.file``)::

    tls_server_config:
      cert_file: server.crt              # relative paths are relative to this file's directory
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: ca.crt
      min_version: TLS12                 # TLS10 | TLS11 | TLS12 (default) | TLS13
      max_version: TLS13
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # Go names, TLS 1.2 and below
      prefer_server_cipher_suites: true
      client_allowed_sans: [scraper.example.org]
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      prometheus: $2b$12$...             # bcrypt hash

Differences from exporter-toolkit, each failing loudly rather than silently weakening anything:
``RequireAnyClientCert`` (require a certificate without verifying it) cannot be expressed with
Python's ssl module and is refused; ``RequestClientCert`` does not ask for a certificate (Python
cannot ask without verifying), which changes nothing for access control since toolkit ignores that
certificate too; ``curve_preferences``, inline ``cert``/``key``/``client_ca`` and ``rate_limit`` are
refused; ``http_server_config.http2`` is accepted and ignored (the server speaks HTTP/1.1).

Serving: ``TLSAuthServerMixin`` (for the ThreadingHTTPServer) and ``TLSAuthHandlerMixin`` (for the
request handler) apply a ``WebConfig`` per connection and per request; ``WebConfigWatcher`` re-reads
the file and the certificates when they change, so certificate rotation needs no restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import re
import socket
import ssl
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import bcrypt
import structlog
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from headroom.safeio import read_config_bytes, shorten_quoted
from headroom.schema import ConfigError, compose_text, node_kind, unknown_key, where

log = structlog.get_logger("headroom.webconfig")


class WebConfigError(ValueError):
    """A web config that cannot be used; the message names the file, line:column and field path."""


_VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,  # see the module docstring
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNSUPPORTED_CLIENT_AUTH = ("RequireAnyClientCert", "RequireClientCert")

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's tls.CipherSuites() names (the ones exporter-toolkit accepts) -> OpenSSL names. TLS 1.3 suites
# are not configurable in Go either: they are accepted and always on.
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
_CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}

# exporter-toolkit's allow-list: header -> allowed values (None: any value).
_ALLOWED_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

_BCRYPT_HASH = re.compile(r"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")
# Each cost step doubles the work: 12 takes ~0.25 s per check, 14 ~1 s, 31 hours. Above 14 one failed
# login (never cached) holds the single bcrypt slot, and with it every new client's scrape, for seconds.
MAX_BCRYPT_COST = 14
_AUTH_CACHE_SIZE = 1024

_TOP_FIELDS = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS_FIELDS = (
    "cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
    "cipher_suites", "prefer_server_cipher_suites", "client_allowed_sans",
)
_HTTP_FIELDS = ("headers", "http2")
_REFUSED_FIELDS = {
    "rate_limit": "is not supported by headroom",
    "tls_server_config.curve_preferences": "is not supported (Python's ssl module cannot set a curve list); remove it",
    "tls_server_config.cert": "(inline certificate) is not supported; use cert_file",
    "tls_server_config.key": "(inline key) is not supported; use key_file",
    "tls_server_config.client_ca": "(inline CA) is not supported; use client_ca_file",
}


@dataclass(frozen=True)
class TLSSettings:
    """The tls_server_config section, paths resolved against the config file's directory."""

    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str | None = None
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    client_allowed_sans: tuple[str, ...] = ()


class _BasicAuth:
    """bcrypt verification with a bounded cache of successes and a decoy hash for unknown users."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = {name: hashed.encode() for name, hashed in users.items()}
        self._key = os.urandom(32)  # the cache holds keyed digests, never passwords
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()  # one bcrypt at a time: an auth flood costs one core at most
        self._decoy: bytes | None = None

    def _decoy_hash(self) -> bytes:
        """Return a hash as costly as the dearest real one, so unknown users take as long as known ones."""
        if self._decoy is None:
            cost = max(int(hashed.split(b"$")[2]) for hashed in self._users.values())
            self._decoy = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(rounds=cost))
        return self._decoy

    def check(self, user: str, password: str) -> bool:
        """Return True when password is user's; costs one bcrypt unless recently verified."""
        secret = user.encode() + b"\0" + password.encode()
        digest = hmac.new(self._key, secret, hashlib.sha256).digest()
        with self._cache_lock:
            if digest in self._cache:
                self._cache.move_to_end(digest)
                return True
        hashed = self._users.get(user)
        with self._bcrypt_lock:
            if hashed is None:
                bcrypt.checkpw(password.encode(), self._decoy_hash())
                return False
            if not bcrypt.checkpw(password.encode(), hashed):
                return False
        with self._cache_lock:
            self._cache[digest] = None
            while len(self._cache) > _AUTH_CACHE_SIZE:
                self._cache.popitem(last=False)
        return True


@dataclass(frozen=True)
class WebConfig:
    """A validated web config. The default instance means plain HTTP, no auth, no extra headers."""

    path: Path | None = None
    tls: TLSSettings | None = None
    users: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    _context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    _auth: _BasicAuth | None = field(default=None, compare=False, repr=False)
    empty: bool = field(default=False, compare=False)  # the file held no document at all

    def ssl_context(self) -> ssl.SSLContext | None:
        """Return the server-side SSLContext (built and checked at load time), or None for plain HTTP."""
        return self._context

    def watched_files(self) -> tuple[Path, ...]:
        """Return the certificate, key and CA files whose change should trigger a reload."""
        if self.tls is None:
            return ()
        files = [self.tls.cert_file, self.tls.key_file]
        if self.tls.client_ca_file is not None:
            files.append(self.tls.client_ca_file)
        return tuple(files)

    def check_basic_auth(self, authorization_header: str | None) -> bool:
        """Return True if the Authorization header carries valid credentials, or no users are configured."""
        if not self.users:
            return True
        if self._auth is None or not authorization_header:
            return False
        scheme, _, encoded = authorization_header.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, colon, password = decoded.partition(":")
        if not colon:
            return False
        return self._auth.check(user, password)

    # Any: ssl's getpeercert() dict, whose values typeshed types privately (strings, tuples of pairs)
    def check_client_sans(self, peer_cert: dict[str, Any] | None) -> bool:
        """Return True if client_allowed_sans is unset or the client certificate carries one of them."""
        if self.tls is None or not self.tls.client_allowed_sans:
            return True
        if not peer_cert:
            return False
        allowed = {_normalise_san(value) for value in self.tls.client_allowed_sans}
        return any(_normalise_san(value) in allowed for _, value in peer_cert.get("subjectAltName", ()))


def _normalise_san(value: str) -> str:
    """Return an IP address in canonical form (Python prints IPv6 SANs long-hand), anything else as is."""
    value = value.strip()
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value


# ---------------------------------------------------------------------------------------------------
# Loading


class _Reader:
    """Walks a composed YAML node tree, raising WebConfigError with file:line:column and field path."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, node: Node | None, field_path: str, message: str) -> WebConfigError:
        at = where(str(self.path), node) if node is not None else str(self.path)
        message = shorten_quoted(message)  # never print back a file that turned out to be a secret
        return WebConfigError(f"{at}: {shorten_quoted(field_path)}: {message}" if field_path else f"{at}: {message}")

    @staticmethod
    def is_null(node: Node) -> bool:
        return isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null"

    def mapping(self, node: Node, field_path: str, allowed: tuple[str, ...] | None) -> dict[str, Node]:
        """Return key -> value node for a mapping; unknown keys (when allowed is given) are errors."""
        if not isinstance(node, MappingNode):
            raise self.fail(node, field_path, f"expected a mapping, got {node_kind(node)}")
        result: dict[str, Node] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                raise self.fail(key_node, field_path or "(top level)", f"keys must be strings, got {node_kind(key_node)}")
            key = key_node.value
            key_path = f"{field_path}.{key}" if field_path else key
            if key in result:
                raise self.fail(key_node, key_path, "duplicate key")
            if allowed is not None and key not in allowed:
                if key_path in _REFUSED_FIELDS:
                    raise self.fail(key_node, key_path, _REFUSED_FIELDS[key_path])
                raise self.fail(key_node, key_path, unknown_key(key, allowed))
            result[key] = value_node
        return result

    def string(self, node: Node, field_path: str) -> str:
        if not isinstance(node, ScalarNode) or self.is_null(node):
            raise self.fail(node, field_path, f"expected a string, got {node_kind(node)}")
        return str(node.value)  # a scalar node's text (PyYAML is untyped)

    def boolean(self, node: Node, field_path: str) -> bool:
        if not isinstance(node, ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            raise self.fail(node, field_path, f"expected true or false, got {node_kind(node)}")
        return node.value.lower() in ("true", "yes", "on", "y")

    def strings(self, node: Node, field_path: str) -> list[tuple[Node, str]]:
        if not isinstance(node, SequenceNode):
            raise self.fail(node, field_path, f"expected a list of strings, got {node_kind(node)}")
        return [(item, self.string(item, f"{field_path}[{i}]")) for i, item in enumerate(node.value)]

    def choice(self, node: Node, field_path: str, choices: tuple[str, ...]) -> str:
        value = self.string(node, field_path)
        if value not in choices:
            raise self.fail(node, field_path, f"must be one of {', '.join(choices)}; got {value!r}")
        return value


def load_web_config(path: str | os.PathLike[str]) -> WebConfig:
    """Read, validate and return the web config at path, with its SSLContext built.

    Raises WebConfigError naming file, line:column and field for any problem: YAML syntax, unknown
    keys, wrong types, bad enumerations, missing or unreadable files, certificates that do not load.
    """
    path = Path(path)
    try:
        raw = read_config_bytes(path)
    except OSError as exc:
        raise WebConfigError(f"{path}: cannot read web config: {exc.strerror or exc}") from None
    try:  # UTF-8, YAML syntax and alias bombs (refused here, not in a walk that expands them) as config.yaml's
        root = compose_text(raw, str(path))
    except ConfigError as exc:
        raise WebConfigError(str(exc.issues[0]).replace(": (document): ", ": ", 1)) from None
    reader = _Reader(path)
    if root is None or reader.is_null(root):
        return WebConfig(path=path, empty=True)
    top = reader.mapping(root, "", _TOP_FIELDS)
    base = path.parent

    tls = None
    context = None
    if "tls_server_config" in top and not reader.is_null(top["tls_server_config"]):
        tls, context = _load_tls(reader, top["tls_server_config"], base)

    headers: dict[str, str] = {}
    if "http_server_config" in top and not reader.is_null(top["http_server_config"]):
        http = reader.mapping(top["http_server_config"], "http_server_config", _HTTP_FIELDS)
        if "http2" in http:
            reader.boolean(http["http2"], "http_server_config.http2")
        if "headers" in http and not reader.is_null(http["headers"]):
            headers = _load_headers(reader, http["headers"])

    users: dict[str, str] = {}
    if "basic_auth_users" in top and not reader.is_null(top["basic_auth_users"]):
        for user, node in reader.mapping(top["basic_auth_users"], "basic_auth_users", None).items():
            field_path = f"basic_auth_users.{user}"
            hashed = reader.string(node, field_path)
            if not _BCRYPT_HASH.match(hashed):
                raise reader.fail(node, field_path, "not a bcrypt hash (expected $2a$, $2b$ or $2y$, cost, 53 characters)")
            cost = int(hashed[4:6])
            if cost > MAX_BCRYPT_COST:
                raise reader.fail(node, field_path, f"bcrypt cost {cost} is above the maximum of {MAX_BCRYPT_COST} "
                                                    f"(each check would take about {2 ** (cost - 12) / 4:g} s); "
                                                    f"hash the password again with a cost of 10 to {MAX_BCRYPT_COST}")
            users[user] = hashed

    return WebConfig(
        path=path,
        tls=tls,
        users=MappingProxyType(users),
        headers=MappingProxyType(headers),
        _context=context,
        _auth=_BasicAuth(users) if users else None,
    )


def _load_headers(reader: _Reader, node: Node) -> dict[str, str]:
    """Return the validated response headers, canonically spelled, from http_server_config.headers."""
    canonical = {name.lower(): name for name in _ALLOWED_HEADERS}
    headers: dict[str, str] = {}
    for name, value_node in reader.mapping(node, "http_server_config.headers", None).items():
        field_path = f"http_server_config.headers.{name}"
        if name.lower() not in canonical:
            raise reader.fail(value_node, field_path, f"this header cannot be configured; allowed: {', '.join(_ALLOWED_HEADERS)}")
        proper = canonical[name.lower()]
        value = reader.string(value_node, field_path)
        if "\r" in value or "\n" in value:
            raise reader.fail(value_node, field_path, "header values cannot contain line breaks")
        allowed = _ALLOWED_HEADERS[proper]
        if allowed is not None and value.lower() not in allowed:
            raise reader.fail(value_node, field_path, f"must be one of {', '.join(allowed)}; got {value!r}")
        headers[proper] = value
    return headers


def _load_tls(reader: _Reader, node: Node, base: Path) -> tuple[TLSSettings | None, ssl.SSLContext | None]:
    """Return the TLS settings and a checked server SSLContext, or (None, None) if the section is empty."""
    section = "tls_server_config"
    fields = reader.mapping(node, section, _TLS_FIELDS)
    present = {k: v for k, v in fields.items() if not reader.is_null(v) and not (isinstance(v, ScalarNode) and v.value == "")}
    if not any(k in present for k in ("cert_file", "key_file", "client_ca_file", "client_auth_type")):
        return None, None  # exporter-toolkit: no TLS field set means plain HTTP
    for required in ("cert_file", "key_file"):
        if required not in present:
            raise reader.fail(node, f"{section}.{required}", "missing: TLS needs both cert_file and key_file")

    def path_of(name: str) -> Path:
        return base / reader.string(present[name], f"{section}.{name}")

    cert_file, key_file = path_of("cert_file"), path_of("key_file")
    ca_file = path_of("client_ca_file") if "client_ca_file" in present else None
    client_auth = "NoClientCert"
    if "client_auth_type" in present:
        auth_node = present["client_auth_type"]
        client_auth = reader.string(auth_node, f"{section}.client_auth_type")
        if client_auth in _UNSUPPORTED_CLIENT_AUTH:
            raise reader.fail(auth_node, f"{section}.client_auth_type",
                              f"{client_auth} (a certificate required but not verified) cannot be enforced with "
                              "Python's ssl module; use RequireAndVerifyClientCert with client_ca_file")
        client_auth = reader.choice(auth_node, f"{section}.client_auth_type", tuple(_VERIFY_MODES))
    verify_mode = _VERIFY_MODES[client_auth]
    if ca_file is not None and client_auth == "NoClientCert":
        raise reader.fail(present["client_ca_file"], f"{section}.client_ca_file",
                          "a client CA is configured without a client_auth_type that verifies clients")
    if verify_mode != ssl.CERT_NONE and ca_file is None:
        raise reader.fail(present["client_auth_type"], f"{section}.client_auth_type",
                          f"{client_auth} needs client_ca_file to verify client certificates against")

    min_version = "TLS12"
    max_version = None
    if "min_version" in present:
        min_version = reader.choice(present["min_version"], f"{section}.min_version", tuple(_TLS_VERSIONS))
    if "max_version" in present:
        max_version = reader.choice(present["max_version"], f"{section}.max_version", tuple(_TLS_VERSIONS))
        if _TLS_VERSIONS[max_version] < _TLS_VERSIONS[min_version]:
            raise reader.fail(present["max_version"], f"{section}.max_version",
                              f"{max_version} is below min_version {min_version}")

    suites: list[str] = []
    if "cipher_suites" in present:
        for i, (item, name) in enumerate(reader.strings(present["cipher_suites"], f"{section}.cipher_suites")):
            if name not in _CIPHER_SUITES and name not in _TLS13_SUITES:
                raise reader.fail(item, f"{section}.cipher_suites[{i}]",
                                  f"unknown or insecure cipher suite {name!r}; known: {', '.join(_CIPHER_SUITES)}")
            suites.append(name)
    prefer_server = True
    if "prefer_server_cipher_suites" in present:
        prefer_server = reader.boolean(present["prefer_server_cipher_suites"], f"{section}.prefer_server_cipher_suites")
    sans: list[str] = []
    if "client_allowed_sans" in present:
        sans = [value for _, value in reader.strings(present["client_allowed_sans"], f"{section}.client_allowed_sans")]
        if sans and client_auth != "RequireAndVerifyClientCert":
            raise reader.fail(present["client_allowed_sans"], f"{section}.client_allowed_sans",
                              "needs client_auth_type RequireAndVerifyClientCert")

    settings = TLSSettings(
        cert_file=cert_file, key_file=key_file, client_auth_type=client_auth, client_ca_file=ca_file,
        min_version=min_version, max_version=max_version, cipher_suites=tuple(suites),
        prefer_server_cipher_suites=prefer_server, client_allowed_sans=tuple(sans),
    )

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():  # the ssl module deprecates TLS 1.0/1.1; asking for them is the user's call
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = _TLS_VERSIONS[min_version]
        if max_version is not None:
            context.maximum_version = _TLS_VERSIONS[max_version]
    legacy = _TLS_VERSIONS[min_version] < ssl.TLSVersion.TLSv1_2
    openssl_suites = [_CIPHER_SUITES[name] for name in suites if name in _CIPHER_SUITES]
    cipher_string = ":".join(openssl_suites) if openssl_suites else "DEFAULT"
    if legacy:
        # OpenSSL 3 refuses TLS 1.0/1.1 at security level 1 and above.
        cipher_string += ":@SECLEVEL=0"
    if openssl_suites or legacy:
        try:
            context.set_ciphers(cipher_string)
        except ssl.SSLError as exc:
            raise reader.fail(present.get("cipher_suites", node), f"{section}.cipher_suites",
                              f"OpenSSL accepts none of these: {exc.reason or exc}") from None
    if prefer_server:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE

    for name, file in (("cert_file", cert_file), ("key_file", key_file), ("client_ca_file", ca_file)):
        if file is None:
            continue
        try:  # regular files only: OpenSSL would block forever on a FIFO
            read_config_bytes(file)
        except OSError as exc:
            raise reader.fail(present[name], f"{section}.{name}", f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:
        raise reader.fail(present["cert_file"], f"{section}.cert_file",
                          f"{cert_file} and key_file {key_file} do not load as a certificate and its key: "
                          f"{exc.reason or exc}") from None
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(ca_file))
        except ssl.SSLError as exc:
            raise reader.fail(present["client_ca_file"], f"{section}.client_ca_file",
                              f"{ca_file} holds no usable CA certificate: {exc.reason or exc}") from None
    context.verify_mode = verify_mode
    if client_auth == "RequestClientCert":
        log.warning("web_config_client_cert_not_requested", client_auth_type=client_auth,
                    reason="Python's ssl cannot request a certificate without verifying it; access is unchanged")
    if legacy:
        log.warning("web_config_legacy_tls_enabled", min_version=min_version)
    return settings, context


# ---------------------------------------------------------------------------------------------------
# Reloading


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    """Return (mtime_ns, size, inode) of path, or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class WebConfigWatcher:
    """Keeps the web config current: re-reads it when the file or its certificates change.

    The first load happens in the constructor and raises WebConfigError (fail fast at start-up). Later,
    a change that does not load keeps the previous good config and logs web_config_reload_failed once
    (``ok`` False, the ``headroom_web_config_last_reload_successful`` metric 0). A reload never
    weakens the listener: an empty file, one without TLS while TLS is on, or one without users while
    basic auth is on is such a failure too (a truncated write or ``: > web.yml`` must not turn TLS or
    authentication off); turning them off takes a restart.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        min_check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._interval = min_check_interval
        self._clock = clock
        self._lock = threading.Lock()
        before = self._stats((self.path,))
        self._config = load_web_config(self.path)
        self._seen = self._fingerprint(self._config, before)
        self._failed: tuple[object, ...] | None = None
        self._last_check = clock()
        self.ok = True  # the last reload attempt succeeded
        self.error: str | None = None

    @staticmethod
    def _stats(paths: tuple[Path, ...]) -> dict[Path, tuple[int, int, int] | None]:
        return {p: _stat_key(p) for p in paths}

    def _fingerprint(self, config: WebConfig, stats: dict[Path, tuple[int, int, int] | None]) -> tuple[object, ...]:
        """Return (path, stat) for the config file and every file config names, preferring stats taken
        before config was loaded, so that a change racing with the load is seen on the next check."""
        paths = (self.path, *config.watched_files())
        return tuple((p, stats[p] if p in stats else _stat_key(p)) for p in paths)

    def current(self) -> WebConfig:
        """Return the current config, re-reading it first if a watched file changed (checked at most once per interval)."""
        if self._clock() - self._last_check < self._interval:
            return self._config
        with self._lock:
            now = self._clock()
            if now - self._last_check < self._interval:
                return self._config
            self._last_check = now
            before = self._stats((self.path, *self._config.watched_files()))
            fingerprint = self._fingerprint(self._config, before)
            if fingerprint == self._seen or fingerprint == self._failed:
                return self._config
            try:
                config = load_web_config(self.path)
                _refuse_weakening(self._config, config, self.path)
            except WebConfigError as exc:
                self._failed = fingerprint
                self.ok, self.error = False, str(exc)
                log.error("web_config_reload_failed", path=str(self.path), error=str(exc),
                          kept="the previous web config")
                return self._config
            self._config = config
            self._seen = self._fingerprint(config, before)
            self._failed = None
            self.ok, self.error = True, None
            log.info("web_config_reloaded", path=str(self.path), tls=config.tls is not None,
                     users=len(config.users), headers=len(config.headers))
            return config


def _refuse_weakening(old: WebConfig, new: WebConfig, path: Path) -> None:
    """WebConfigError when reloading ``new`` over ``old`` would turn TLS or basic auth off."""
    if new.empty:
        raise WebConfigError(f"{path}: the web config is empty (a truncated or emptied file?): an empty file "
                             "would mean no TLS and no users; restart the agent to serve without them")
    if old.tls is not None and new.tls is None:
        raise WebConfigError(f"{path}: tls_server_config is gone: turning TLS off needs a restart")
    if old.users and not new.users:
        raise WebConfigError(f"{path}: basic_auth_users is gone: turning authentication off needs a restart")


# ---------------------------------------------------------------------------------------------------
# Serving


class TLSAuthServerMixin:
    """TLS per connection for a socketserver/http.server server: put it before ThreadingHTTPServer.

    The server instance needs ``web_config``: a callable returning the WebConfig to apply (e.g.
    ``WebConfigWatcher.current``, or ``WebConfig`` for plain HTTP). The handshake runs in the
    connection's own thread (ThreadingMixIn calls finish_request there) under
    ``tls_handshake_timeout``, so a slow or half-open client never blocks the accept loop or others.
    """

    web_config: Callable[[], WebConfig]
    tls_handshake_timeout: float = 10.0

    def connection_socket_changed(self, sock: socket.socket) -> None:
        """Hook: the connection's socket is now ``sock`` (the TLS one); servers that track sockets override it."""

    # Any: socketserver's client address (typeshed's _RetAddress, Any: a (host, port) pair for TCP)
    def finish_request(self, request: socket.socket, client_address: Any) -> None:
        context = self.web_config().ssl_context()
        if context is None:
            super().finish_request(request, client_address)  # type: ignore[misc]
            return
        previous_timeout = request.gettimeout()
        request.settimeout(self.tls_handshake_timeout)
        try:
            connection = context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError) as exc:
            log.debug("tls_handshake_failed", client=str(client_address[0]), error=str(exc))
            return
        # wrap_socket took over the file descriptor: `request` is now detached, so this function
        # owns `connection` and must close it (socketserver's shutdown of `request` is a no-op).
        self.connection_socket_changed(connection)
        try:
            try:
                connection.do_handshake()
            except (OSError, ValueError) as exc:
                log.debug("tls_handshake_failed", client=str(client_address[0]), error=str(exc))
                return
            if not self.web_config().check_client_sans(connection.getpeercert()):
                log.debug("tls_client_san_refused", client=str(client_address[0]))
                return
            connection.settimeout(previous_timeout)  # from here the handler's own `timeout` applies
            super().finish_request(connection, client_address)  # type: ignore[misc]
        finally:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()


class TLSAuthHandlerMixin:
    """Basic auth and configured headers for a BaseHTTPRequestHandler: put it before the handler class.

    Every request is checked against the server's current ``web_config()`` (so revoking a user takes
    effect on the next request, even on a kept-alive connection); an unauthorised one gets 401 with
    WWW-Authenticate and never reaches do_GET. Configured headers are added to every response,
    errors and 401s included. Override ``requires_auth`` to exempt paths.
    """

    realm = "headroom"

    def requires_auth(self) -> bool:
        """Return whether this request needs credentials (all do by default, as in exporter-toolkit)."""
        return True

    def _current_web_config(self) -> WebConfig:
        config: WebConfig = self.server.web_config()  # type: ignore[attr-defined]  # HeadroomHTTPServer's
        return config

    def request_framing_ok(self) -> bool:
        """Hook run before authentication: False when the request was already answered (e.g. a 400)."""
        return True

    def parse_request(self) -> bool:
        if not super().parse_request():  # type: ignore[misc]
            return False
        if not self.request_framing_ok():
            return False
        config = self._current_web_config()
        self._headroom_web_config = config
        if not self.requires_auth() or config.check_basic_auth(self.headers.get("Authorization")):  # type: ignore[attr-defined]
            return True
        body = b"Unauthorized\n"
        self.send_response(401)  # type: ignore[attr-defined]
        self.send_header("WWW-Authenticate", f'Basic realm="{self.realm}", charset="UTF-8"')  # type: ignore[attr-defined]
        self.send_header("Content-Type", "text/plain; charset=utf-8")  # type: ignore[attr-defined]
        self.send_header("Content-Length", str(len(body)))  # type: ignore[attr-defined]
        self.send_header("Connection", "close")  # type: ignore[attr-defined]
        self.end_headers()
        if self.command != "HEAD":  # type: ignore[attr-defined]
            self.wfile.write(body)  # type: ignore[attr-defined]
        return False

    def end_headers(self) -> None:
        config = getattr(self, "_headroom_web_config", None) or self._current_web_config()
        for name, value in config.headers.items():
            self.send_header(name, value)  # type: ignore[attr-defined]
        super().end_headers()  # type: ignore[misc]
