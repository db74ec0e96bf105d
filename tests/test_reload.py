"""SIGHUP re-reads config and drop-ins; a bad file keeps the old configuration running."""

from __future__ import annotations

import json
import signal
import threading
import time

from conftest import http_get

WORKLOAD = """\
  - name: {name}
    kind: inference
    params: 7B
    precision: bf16
    gpus: [0]
"""


def metric(body: bytes, name: str) -> float | None:
    for line in body.decode().splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_sighup_reloads_and_a_bad_file_keeps_the_old_config(tmp_path, agent_factory):
    cfg = tmp_path / "config.yaml"
    dropins = tmp_path / "w.d"
    dropins.mkdir()
    cfg.write_text("agent:\n  sample_interval: 200ms\nworkloads_dir: w.d\nworkloads:\n" + WORKLOAD.format(name="a"))
    agent = agent_factory("--config.file", str(cfg), "--simulate", "demo")
    _, _, body = http_get(agent.url + "/metrics")
    assert metric(body, "headroom_config_last_reload_successful") == 1
    first_ts = metric(body, "headroom_config_last_reload_success_timestamp_seconds")

    # scrape continuously during the reloads: none may fail
    failures, stop = [], threading.Event()

    def scrape():
        while not stop.is_set():
            try:
                status, _, _ = http_get(agent.url + "/metrics", timeout=2)
                if status != 200:
                    failures.append(status)
            except OSError as exc:
                failures.append(repr(exc))

    t = threading.Thread(target=scrape)
    t.start()
    try:
        (dropins / "b.yaml").write_text(WORKLOAD.format(name="b").replace("  - ", "").replace("\n    ", "\n"))
        time.sleep(0.05)
        agent.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: (metric(http_get(agent.url + "/metrics")[2],
                                        "headroom_config_last_reload_success_timestamp_seconds") or 0) > first_ts)

        cfg.write_text("agent:\n  sample_interval: 0\n")  # invalid
        agent.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: metric(http_get(agent.url + "/metrics")[2],
                                       "headroom_config_last_reload_successful") == 0)
        assert agent.proc.poll() is None, "a bad file must not stop the agent"
    finally:
        stop.set()
        t.join()
    assert failures == []
    code, err = agent.stop()
    assert code == 0
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    reloaded = [e for e in events if e["event"] == "config_reloaded"]
    # the workloads the agent has: the file's, its drop-in's, then the demo scenario's profile (issue 29)
    assert reloaded and reloaded[0]["workloads"] == ["a", "b", "chat"]
    failed = [e for e in events if e["event"] == "config_reload_failed"]
    assert len(failed) == 1
    assert failed[0]["errors"] == [f"{cfg}:2:20: agent.sample_interval: must be >= 50ms; got 0s"]


def test_a_stop_signal_that_lands_inside_a_log_line_does_not_deadlock():
    """SIGINT/SIGTERM arrive between two bytecodes of the main thread, which may be writing a log line and holding
    the logger's write lock (not reentrant). The handler logged, so it waited on that lock forever: `make demo`'s
    Ctrl-C hung about 1 in 15 times (the main thread inside "listening"'s line). Here the stream itself calls the
    handler in the middle of a write, as the signal did."""
    from headroom import logs
    from headroom.daemon import Agent

    agent = Agent.__new__(Agent)  # only what the handler touches
    # private: the stop event: only what the handler touches is built (Agent.__new__), or the sampler's clock is stepped; the stop event: only what the handler touches is built (Agent.__new__)
    agent._stop, agent._stop_signal = threading.Event(), None

    class Stream:
        def __init__(self) -> None:
            self.text, self.fired = "", False

        def write(self, text: str) -> int:
            if not self.fired:
                self.fired = True
                agent.request_stop(signal.SIGINT)  # the signal lands inside this line's write
            self.text += text
            return len(text)

        def flush(self) -> None:
            pass

    stream = Stream()
    logs.configure("info", "json", stream=stream)
    done = threading.Event()

    def log_a_line() -> None:
        import structlog

        structlog.get_logger("headroom.test").info("listening", url="http://127.0.0.1:9/")
        done.set()

    t = threading.Thread(target=log_a_line, daemon=True)
    t.start()
    assert done.wait(5.0), "the stop handler deadlocked on the logger's lock"
    # private: the stop event: only what the handler touches is built (Agent.__new__), or the sampler's clock is stepped; the stop event: only what the handler touches is built (Agent.__new__)
    assert agent._stop.is_set() and agent._stop_signal == "SIGINT"
    assert '"listening"' in stream.text
