"""Hostile configuration files (issue 11 items 3, 5, 9, 10, 13; docs/reliability.md).

A web config emptied, truncated or weakened while running; FIFOs, /dev/zero and huge files as
config, drop-ins and web config; a YAML alias bomb; secrets echoed in errors; a bcrypt cost that
takes minutes. Real files, real processes (`headroom run`, `headroom check-config`) where users meet them.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import bcrypt
import pytest
from structlog.testing import capture_logs

from headroom.exposition.webconfig import WebConfigWatcher

from conftest import Agent, http_get

TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


def hashed(password: str, rounds: int = 4) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=rounds)).decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", "server.key", "-out", "server.crt", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], cwd=d, check=True, capture_output=True)
    return d


@pytest.fixture
def site(tmp_path, certs) -> Path:
    for name in ("server.crt", "server.key"):
        (tmp_path / name).write_bytes((certs / name).read_bytes())
    return tmp_path


def metric(body: bytes, name: str) -> float | None:
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


# ------------------------------------------------------------------- 3: web config emptied at reload
USERS = 'basic_auth_users:\n  prometheus: "{hash}"\n'


@pytest.mark.parametrize(("situation", "change"), [
    ("emptied (: > web.yml)", ""),
    ("only blank lines", "\n\n   \n"),
    ("truncated after the TLS section", TLS),
    ("truncated inside a key", TLS + "basic_auth_us"),
    ("the TLS section removed", "{users}"),
    ("invalid YAML", TLS + "{users}  - ]["),
])
def test_a_reload_never_turns_tls_or_auth_off(site, situation, change):
    users = USERS.format(hash=hashed("pw"))
    path = site / "web.yml"
    path.write_text(TLS + users)
    watcher = WebConfigWatcher(path, min_check_interval=0)
    good = watcher.current()
    path.write_text(change.format(users=users))
    with capture_logs() as logs:
        kept = watcher.current()
    assert kept is good, situation
    assert kept.ssl_context() is not None and kept.users.keys() == {"prometheus"}
    assert watcher.ok is False
    assert [e["log_level"] for e in logs if e["event"] == "web_config_reload_failed"] == ["error"]
    path.write_text(TLS + users + "http_server_config:\n  headers: {X-Frame-Options: deny}\n")
    assert watcher.current().headers == {"X-Frame-Options": "deny"} and watcher.ok is True


def test_tls_and_users_may_still_be_added_or_changed_at_reload(site):
    path = site / "web.yml"
    path.write_text("")
    watcher = WebConfigWatcher(path, min_check_interval=0)
    path.write_text(TLS + USERS.format(hash=hashed("pw")))
    assert watcher.current().tls is not None and watcher.ok
    path.write_text(TLS + 'basic_auth_users:\n  grafana: "{}"\n'.format(hashed("x")))
    assert watcher.current().users.keys() == {"grafana"} and watcher.ok


def _auth(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_emptying_the_web_config_of_a_running_agent_keeps_auth_and_shows_in_a_metric(tmp_path):
    web = tmp_path / "web.yml"
    web.write_text(USERS.format(hash=hashed("pw")))
    agent = Agent("--simulate", "demo", "--web.config.file", str(web))
    try:
        creds = _auth("prometheus", "pw")
        deadline = time.monotonic() + 30
        while True:
            try:
                if http_get(agent.url + "/metrics", timeout=1, headers=creds)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and agent.proc.poll() is None, "agent did not start"
            time.sleep(0.1)
        assert http_get(agent.url + "/metrics")[0] == 401
        web.write_text("")  # : > web.yml
        time.sleep(1.2)  # the file is checked at most once a second
        assert http_get(agent.url + "/metrics")[0] == 401  # still closed
        deadline = time.monotonic() + 10
        while metric(http_get(agent.url + "/metrics", headers=creds)[2],
                     "headroom_web_config_last_reload_successful") != 0:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        code, err = agent.stop()
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    failed = [e for e in events if e["event"] == "web_config_reload_failed"]
    assert len(failed) == 1 and failed[0]["level"] == "error" and "empty" in failed[0]["error"]
