"""Hostile configuration files (issue 11 items 3, 5, 9, 10, 13; docs/reliability.md).

A web config emptied, truncated or weakened while running; FIFOs, /dev/zero and huge files as
config, drop-ins and web config; a YAML alias bomb; secrets echoed in errors; a bcrypt cost that
takes minutes. Real files, real processes (`headroom run`, `headroom check-config`) where users meet them.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import bcrypt
import pytest
from structlog.testing import capture_logs

from headroom.exposition.webconfig import WebConfigError, WebConfigWatcher, load_web_config

from conftest import ROOT, Agent, free_port, http_get

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
        _code, err = agent.stop()
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    failed = [e for e in events if e["event"] == "web_config_reload_failed"]
    assert len(failed) == 1 and failed[0]["level"] == "error" and "empty" in failed[0]["error"]


# -------------------------------------------------- 5: FIFOs, devices and huge files as configuration
def check_config(cfg: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-m", "headroom", "check-config", "--config.file", str(cfg)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"check-config still running after {timeout} s")


def _dropin_dir(tmp_path: Path) -> tuple[Path, Path]:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("agent:\n  sample_interval: 200ms\nworkloads_dir: w.d\n")
    (tmp_path / "w.d").mkdir()
    return cfg, tmp_path / "w.d"


@pytest.mark.parametrize(("situation", "make", "message"), [
    ("a FIFO", lambda p: os.mkfifo(p), "is a FIFO, not a regular file"),
    ("a symlink to /dev/zero", lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
    ("a directory", lambda p: p.mkdir(), "is a directory, not a regular file"),
    ("2 MiB", lambda p: p.write_text("# padding\n" * 210_000), "is 2100000 bytes, more than the 1048576 allowed"),
])
def test_a_hostile_drop_in_is_an_error_for_that_file(tmp_path, situation, make, message):
    cfg, dropins = _dropin_dir(tmp_path)
    make(dropins / "evil.yaml")
    r = check_config(cfg)
    assert r.returncode == 2, (situation, r.stderr)
    assert f"{dropins / 'evil.yaml'}:1:1: (document): cannot read: {message}" in r.stderr
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr


def test_a_fifo_as_config_file_is_refused(tmp_path):
    cfg = tmp_path / "config.yaml"
    os.mkfifo(cfg)
    r = check_config(cfg)
    assert r.returncode == 2 and "is a FIFO, not a regular file" in r.stderr


def test_a_fifo_as_web_config_stops_start_up_with_a_message(tmp_path):
    web = tmp_path / "web.yml"
    os.mkfifo(web)
    try:
        r = subprocess.run([sys.executable, "-m", "headroom", "run", "--simulate", "demo", "--web.listen-address",
                            f"127.0.0.1:{free_port()}", "--web.config.file", str(web)],
                           capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("start-up hung on a FIFO web config")
    assert r.returncode == 1 and f"{web}: cannot read web config: is a FIFO, not a regular file" in r.stderr


def test_a_fifo_certificate_is_refused(site):
    os.mkfifo(site / "fifo.crt")
    (site / "web.yml").write_text("tls_server_config:\n  cert_file: fifo.crt\n  key_file: server.key\n")
    with pytest.raises(WebConfigError, match=r"fifo\.crt: is a FIFO, not a regular file"):
        load_web_config(site / "web.yml")


def _events(err: str) -> list[dict]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_sighup_with_a_fifo_drop_in_fails_the_reload_and_sigterm_still_stops(tmp_path):
    cfg, dropins = _dropin_dir(tmp_path)
    agent = Agent("--config.file", str(cfg), "--simulate", "demo")
    try:
        agent.wait_ready()
        os.mkfifo(dropins / "evil.yaml")
        start = time.monotonic()
        agent.proc.send_signal(signal.SIGHUP)
        while metric(http_get(agent.url + "/metrics")[2], "headroom_config_last_reload_successful") != 0:
            assert time.monotonic() - start < 10, "the reload neither failed nor finished"
            time.sleep(0.1)
        failed_after = time.monotonic() - start
        agent.proc.send_signal(signal.SIGTERM)
        try:
            code = agent.proc.wait(10)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not stop the agent")
    finally:
        _, err = agent.stop()
    assert code == 0
    failed = [e for e in _events(err) if e["event"] == "config_reload_failed"]
    assert len(failed) == 1 and "is a FIFO, not a regular file" in failed[0]["errors"][0]
    print(f"reload with a FIFO drop-in: failed after {failed_after:.2f} s")


_STUCK_RELOAD = """
import sys, threading
import headroom.config, headroom.daemon
headroom.daemon.RELOAD_TIMEOUT_SECONDS = 0.5
real, calls = headroom.config.load_config, []
def load_config(path):
    calls.append(path)
    if len(calls) > 1:
        threading.Event().wait()  # a reload stuck on a file system that never answers
    return real(path)
headroom.config.load_config = load_config
from headroom.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_reload_stuck_in_the_kernel_is_reported_and_sigterm_still_stops(tmp_path):
    cfg, _ = _dropin_dir(tmp_path)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", _STUCK_RELOAD, "run", "--config.file", str(cfg), "--simulate",
                             "demo", "--web.listen-address", f"127.0.0.1:{port}", "--log.format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if http_get(url + "/healthz", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while metric(http_get(url + "/metrics")[2], "headroom_config_last_reload_successful") != 0:
            assert time.monotonic() < deadline, "a stuck reload was not reported"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(10)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not stop the agent while a reload was stuck")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().decode()
    assert code == 0, err[-2000:]
    assert [e["event"] for e in _events(err) if e["event"].startswith("config_reload")] == ["config_reload_stuck"]


# --------------------------------------------------------------------------------- 9: alias bombs
BOMB = "".join(f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
# nine levels of nine (9**9 leaves) where validation walks them: inside a workload profile
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB + "workloads: [{name: w, kind: inference, params: 7B, gpus: *i}]\n"


def _limited_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))  # a bomb must not take the shared host down


def test_an_alias_bomb_fails_fast_with_its_position(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(BOMB)
    try:
        r = subprocess.run([sys.executable, "-m", "headroom", "check-config", "--config.file", str(cfg)],
                           capture_output=True, text=True, timeout=30, preexec_fn=_limited_memory)
    except subprocess.TimeoutExpired:
        pytest.fail("check-config still expanding the alias bomb after 30 s")
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{cfg}:6:4: (document): aliases expand the document past 100000 nodes" in r.stderr
    from headroom.config import ConfigError, check_config_text

    cpu = time.thread_time()
    with pytest.raises(ConfigError):
        check_config_text(BOMB)
    assert time.thread_time() - cpu < 1.0  # CPU time of this thread: no race with the host's load


@pytest.mark.parametrize(("text", "fragment"), [
    ("workloads: &a [*a]\n", "1:12: (document): an alias refers to a node that contains it"),
    ("x: &a {k: [1, *a]}\nworkloads: *a\n", "an alias refers to a node that contains it"),
    ("a: &a x\nworkloads: [" + ", ".join(["*a"] * 10_001) + "]\n", "more than 10000 alias references"),
])
def test_recursive_and_excessive_aliases_are_errors(text, fragment):
    from headroom.config import ConfigError, check_config_text

    with pytest.raises(ConfigError) as info:
        check_config_text(text)
    assert fragment in str(info.value)


def test_ordinary_anchors_still_work():
    from headroom.config import check_config_text

    text = (
        "workloads:\n  - {name: a, kind: inference, params: &p 7B, precision: &b bf16, gpus: &g [0]}\n"
        "  - {name: b, kind: inference, params: *p, precision: *b, gpus: *g}\n")
    config = check_config_text(text)
    assert [w.name for w in config.workloads] == ["a", "b"]


# ------------------------------------------------------------- 10: errors quote excerpts, not files
SECRET = "".join(f"SECRET_LINE_{i}=s3cr3t-value-{i:04d}\n" for i in range(20))


def test_a_web_config_symlinked_to_a_secret_is_not_printed_back(tmp_path):
    (tmp_path / "secret.env").write_text(SECRET)
    (tmp_path / "web.yml").symlink_to(tmp_path / "secret.env")
    with pytest.raises(WebConfigError) as info:
        load_web_config(tmp_path / "web.yml")
    message = str(info.value)
    assert "expected a mapping" in message
    assert "SECRET_LINE" not in message  # the value is named by its kind ("got a string"), never quoted
    assert len(message) < 250


def test_a_drop_in_symlinked_to_a_secret_is_not_printed_back(tmp_path):
    cfg, dropins = _dropin_dir(tmp_path)
    (tmp_path / "secret.env").write_text("name: w\nkind: inference\nparams: 7B\ngpus: [0]\nprecision: |-\n"
                                         + "".join("  " + line + "\n" for line in SECRET.splitlines()))
    (dropins / "w.yaml").symlink_to(tmp_path / "secret.env")
    r = check_config(cfg)
    assert r.returncode == 2 and "precision: expected one of" in r.stderr
    assert "SECRET_LINE_1=" not in r.stderr and "'... (668 characters)" in r.stderr and len(r.stderr) < 300
    (dropins / "w.yaml").unlink()
    (dropins / "w.yaml").write_text("name: w\nkind: inference\nparams: 7B\ngpus: [0]\n" + SECRET.replace("=", ": "))
    r = check_config(cfg)
    assert r.returncode == 2 and "SECRET_LINE_0: unknown key" in r.stderr  # a key: short, kept whole


# ------------------------------------------------------------------------------ 13: bcrypt cost cap
@pytest.mark.parametrize("cost", [15, 20, 31])
def test_a_bcrypt_cost_above_the_maximum_is_refused(tmp_path, cost):
    salted = hashed("pw").replace("$04$", f"${cost:02d}$", 1)  # a real hash's layout, the cost field raised
    (tmp_path / "web.yml").write_text(f'basic_auth_users:\n  prometheus: "{salted}"\n')
    start = time.thread_time()
    with pytest.raises(WebConfigError, match=rf"web.yml:2:15: basic_auth_users.prometheus: bcrypt cost {cost} is "
                                             r"above the maximum of 14"):
        load_web_config(tmp_path / "web.yml")
    assert time.thread_time() - start < 1.0  # refused without hashing


def test_the_maximum_bcrypt_cost_is_accepted(tmp_path):
    (tmp_path / "web.yml").write_text(f'basic_auth_users:\n  prometheus: "{hashed("pw").replace("$04$", "$14$", 1)}"\n')
    assert load_web_config(tmp_path / "web.yml").users.keys() == {"prometheus"}


# ----------------------------------------------------------------------------- 8: window memory budget
def test_a_window_that_needs_gigabytes_is_refused_by_check_config(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("agent:\n  sample_interval: 50ms\n  window: 1d\n")
    r = check_config(cfg)
    assert r.returncode == 2
    assert (f"{cfg}:3:11: agent.window: a window of 1d sampled every 50ms with 8 GPUs needs about 33,750 MiB, "
            "above the 256 MiB budget") in r.stderr


@pytest.mark.parametrize("agent", ["sample_interval: 1s\n  window: 3h", "sample_interval: 50ms\n  window: 10m",
                                   "sample_interval: 100ms\n  window: 20m"])
def test_windows_within_the_budget_pass(tmp_path, agent):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"agent:\n  {agent}\n")
    assert check_config(cfg).returncode == 0


def test_the_agent_caps_the_window_when_the_host_has_more_gpus_than_validation_assumed():
    from headroom.daemon import cap_window
    from headroom.exposition.render import render as render_exposition
    from headroom.sampler import Sampler
    from headroom.samples import GpuSample, NvmlSample
    from headroom.sources import Collector, SourceContext

    class ManyGpus(Collector):
        name = "nvml"

        def collect(self):
            return NvmlSample(up=True, gpus=tuple(GpuSample(index=i, uuid=f"GPU-{i}", name="H100", pci_bus_id=str(i))
                                                  for i in range(64)))

    sampler = Sampler(render=render_exposition, collectors=[ManyGpus(SourceContext())], interval=0.05, window_seconds=600)
    try:
        sampler.tick()
        with capture_logs() as logs:
            fits = cap_window(sampler, 600)
        assert fits == 256 * 2**20 // (4096 + 2048 * 64) and sampler.window.maxlen == fits
        assert [e["event"] for e in logs] == ["window_capped"]
        assert cap_window(sampler, 60) is None  # 60 s fits
    finally:
        sampler.stop()


def test_an_alias_bomb_in_the_web_config_fails_fast(tmp_path):
    (tmp_path / "web.yml").write_text(BOMB.replace("workloads: [{name: w, kind: inference, params: 7B, gpus: *i}]",
                                                   "basic_auth_users: {a: *i}"))
    start = time.thread_time()
    with pytest.raises(WebConfigError, match=r"web.yml:6:4: aliases expand the document past 100000 nodes"):
        load_web_config(tmp_path / "web.yml")
    assert time.thread_time() - start < 1.0
