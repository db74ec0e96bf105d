"""`make fleet`: N simulated GPU hosts (headroom.simulation.fleet), one real `headroom run` each on a free
loopback port, and a real Prometheus scraping them through file_sd with the recording rules and alerts loaded,
remote-writing to a real VictoriaMetrics single node (the long-term store: docs/fleet.md#outgrowing-one-prometheus).

    python -m bench.fleet                      # 20 hosts; prints Prometheus' and VictoriaMetrics' URLs, runs until Ctrl-C
    python -m bench.fleet --hosts 100 --measure 300 --write-docs   # benchmark: the fleet section of docs/benchmarks.md

The scrape job is deploy/prometheus/file-sd.yml's (same relabelling: instance = host name), the target file is
written by headroom.fleet.file_sd, and the remote write deploy/prometheus/remote-write.yml's `victoria-metrics`
entry (same write_relabel_configs: only what the Fleet dashboard and `headroom fleet-report` read), exactly as a
platform team would run them. tests/test_fleet.py drives the same class with 20 hosts, tests/test_longterm_store.py
with six and the store. Each agent runs with its archetype's configuration plus FAST analysis windows (so bottleneck
verdicts settle in seconds, not minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.host import cpu_seconds, listening_port, rss_bytes
from headroom.fleet import file_sd
from headroom.simulation.fleet import SimHost, fleet

ROOT = Path(__file__).resolve().parent.parent
RULE_FILES = sorted((ROOT / "grafana" / "rules").glob("*.yml"))
SD_EXAMPLE = ROOT / "deploy" / "prometheus" / "file-sd.yml"
REMOTE_WRITE_EXAMPLE = ROOT / "deploy" / "prometheus" / "remote-write.yml"
REMOTE_WRITE_NAME = "victoria-metrics"  # the entry of REMOTE_WRITE_EXAMPLE the fleet ships to
VM_BINARY = "victoria-metrics"  # Debian's package of the single node (/usr/bin/victoria-metrics)
# VictoriaMetrics evaluates an instant query for a time less than -search.latencyOffset ago (default 30 s, for
# slow remote writers) at that long ago instead. The fleet's Prometheus ships every second: 2 s keeps it current.
VM_LATENCY_OFFSET_S = 2
FAST = {"short_window": "5s", "long_window": "30s", "hold": "3s"}
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- fleet:begin -->", "<!-- fleet:end -->"


def http_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class RunningHost:
    sim: SimHost
    port: int
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Fleet:
    """N agents and one Prometheus under WORKDIR; stop() ends every process it started."""

    def __init__(self, n: int, workdir: Path, scrape_interval: str = "1s", sample_interval: str = "1s",
                 long_term_store: bool = False, hosts: list[SimHost] | None = None) -> None:
        self.hosts_spec = hosts if hosts is not None else fleet(n)
        self.workdir = workdir
        self.scrape_interval = scrape_interval
        self.sample_interval = sample_interval
        self.hosts: list[RunningHost] = []
        self.prometheus: subprocess.Popen | None = None
        self.prom_port = 0
        self.long_term_store = long_term_store
        self.victoria_metrics: subprocess.Popen | None = None
        self.vm_port = 0

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    @property
    def victoria_metrics_url(self) -> str:
        """VictoriaMetrics' base URL: its Prometheus query API is under it (/api/v1/query, also /prometheus/...)."""
        return f"http://127.0.0.1:{self.vm_port}"

    # ------------------------------------------------------------------------------------------- start
    def start(self) -> None:
        for sim in self.hosts_spec:
            d = self.workdir / sim.name
            d.mkdir(parents=True, exist_ok=True)
            (d / "scenario.yaml").write_text(yaml.safe_dump(sim.scenario, sort_keys=False))
            config = {**sim.config, "analysis": {**sim.config.get("analysis", {}), **FAST}}
            (d / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            log = (d / "agent.log").open("wb")
            proc = subprocess.Popen(
                [sys.executable, "-m", "headroom", "run", "--simulate", str(d / "scenario.yaml"), "--config.file",
                 str(d / "config.yaml"), "--web.listen-address", "127.0.0.1:0", "--sample.interval",
                 self.sample_interval, "--log.level", "warn", "--log.format", "json"],
                stdout=log, stderr=subprocess.STDOUT, cwd=d)
            log.close()
            self.hosts.append(RunningHost(sim, 0, proc))
        for h in self.hosts:  # port 0: each agent binds a port the kernel picks; we read which (no free-port race)
            h.port = listening_port(h.proc, 60, f"agent {h.sim.name}")
        inventory = {"hosts": [{"name": h.sim.name, "address": "127.0.0.1", "port": h.port,
                                "labels": {"archetype": h.sim.archetype}} for h in self.hosts]}
        file_sd.write_atomically(self.workdir / "targets" / "headroom.json", file_sd.target_groups(inventory))
        if self.long_term_store:
            self._start_victoria_metrics()
        self._start_prometheus()

    def prometheus_config(self) -> dict[str, Any]:
        """deploy/prometheus/file-sd.yml with this run's intervals, rule files and target directory."""
        config = yaml.safe_load(SD_EXAMPLE.read_text())
        [job] = config["scrape_configs"]
        job["scrape_interval"] = self.scrape_interval
        job["scrape_timeout"] = self.scrape_interval
        job["file_sd_configs"] = [{"files": [str(self.workdir / "targets" / "*.json")], "refresh_interval": "5s"}]
        config["global"] = {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval}
        config["rule_files"] = [str(p) for p in RULE_FILES]
        config["scrape_configs"].append({"job_name": "prometheus", "static_configs": [
            {"targets": ["PROMETHEUS"]}]})
        if self.vm_port:
            [entry] = [e for e in yaml.safe_load(REMOTE_WRITE_EXAMPLE.read_text())["remote_write"]
                       if e.get("name") == REMOTE_WRITE_NAME]
            entry["url"] = f"{self.victoria_metrics_url}/api/v1/write"
            # ship each second (default 5 s), so the store lags Prometheus by about a second
            entry["queue_config"] = {**entry.get("queue_config", {}), "batch_send_deadline": "1s"}
            config["remote_write"] = [entry]
        return config

    def _start_victoria_metrics(self) -> None:
        if not shutil.which(VM_BINARY):
            raise RuntimeError(f"{VM_BINARY} is not installed: `make system-deps` installs Debian's package")
        log = (self.workdir / "victoria-metrics.log").open("wb")
        self.victoria_metrics = subprocess.Popen(
            [VM_BINARY, "-httpListenAddr=127.0.0.1:0", f"-storageDataPath={self.workdir / 'victoria-metrics'}",
             "-retentionPeriod=1d", f"-search.latencyOffset={VM_LATENCY_OFFSET_S}s", "-loggerLevel=WARN"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.vm_port = listening_port(self.victoria_metrics, 60, "victoria-metrics")

    def _start_prometheus(self) -> None:
        if not shutil.which("prometheus"):
            raise RuntimeError("prometheus is not installed: `make system-deps` installs Debian's package")
        # Prometheus scrapes itself: its config names its own address, known only once it listens. It starts on
        # port 0 with a config that scrapes the agents only; the self-scrape job is added once its port is known.
        config = self.prometheus_config()
        self_job = config["scrape_configs"].pop()
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = (self.workdir / "prometheus.log").open("wb")
        self.prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'tsdb'}", "--web.listen-address=127.0.0.1:0",
             "--web.enable-lifecycle"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.prom_port = listening_port(self.prometheus, 60, "prometheus")
        config["scrape_configs"].append(self_job)
        text = yaml.safe_dump(config).replace("PROMETHEUS", f"127.0.0.1:{self.prom_port}")
        (self.workdir / "prometheus.yml").write_text(text)
        # reload through the lifecycle endpoint: it waits until Prometheus has loaded its first config (a SIGHUP
        # that early would kill it) and answers once the new one is applied
        request = urllib.request.Request(self.prometheus_url + "/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=60):
            pass

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Every agent answers /healthz and every target is up in Prometheus."""
        deadline = time.monotonic() + timeout
        pending = list(self.hosts)
        while pending and time.monotonic() < deadline:
            for h in list(pending):
                if h.proc.poll() is not None:
                    log = (self.workdir / h.sim.name / "agent.log").read_text()[-2000:]
                    raise RuntimeError(f"agent {h.sim.name} exited {h.proc.returncode}: {log}")
                try:
                    with urllib.request.urlopen(h.url + "/healthz", timeout=2):
                        pending.remove(h)
                except urllib.error.HTTPError:
                    pending.remove(h)  # 503 while the first sample is pending: listening is enough
                except OSError:
                    pass
            time.sleep(0.3)
        if pending:
            raise RuntimeError(f"agents not listening after {timeout} s: {[h.sim.name for h in pending]}")
        while time.monotonic() < deadline:
            if self.prometheus is not None and self.prometheus.poll() is not None:
                raise RuntimeError("prometheus exited: " + (self.workdir / "prometheus.log").read_text()[-2000:])
            try:
                up = self.query('count(up{job="headroom"} == 1)')
                if up and int(float(up[0]["value"][1])) == len(self.hosts):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"not every target up after {timeout} s")

    # ------------------------------------------------------------------------------------------- query
    def api(self, path: str, **params: str) -> Any:
        doc = http_json(f"{self.prometheus_url}{path}?{urllib.parse.urlencode(params)}")
        if doc.get("status") != "success":
            raise RuntimeError(f"{path}: {doc}")
        return doc["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("/api/v1/query", query=expr)["result"]

    def store_query(self, expr: str, at: float) -> list[dict]:
        """EXPR at AT (Unix seconds) from the long-term store, through its Prometheus-compatible query API."""
        url = f"{self.victoria_metrics_url}/prometheus/api/v1/query?{urllib.parse.urlencode({'query': expr, 'time': at})}"
        doc = http_json(url)
        if doc.get("status") != "success":
            raise RuntimeError(f"victoria-metrics: {expr}: {doc}")
        return doc["data"]["result"]

    def wait_for(self, expr: str, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                result = self.query(expr)
            except OSError:
                result = []
            if result or time.monotonic() > deadline:
                return result
            time.sleep(0.5)

    # ------------------------------------------------------------------------------------------- measure
    def measure(self, seconds: float) -> dict[str, Any]:
        """Agent CPU and RSS over SECONDS; series per host by GPU count; Prometheus ingestion and rule cost."""
        pids = {h.sim.name: h.proc.pid for h in self.hosts}
        cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        cpu = {n: (cpu_seconds(p) - cpu0[n]) / elapsed for n, p in pids.items()}
        rss = {n: rss_bytes(p)[0] for n, p in pids.items()}
        samples = {r["metric"]["instance"]: int(float(r["value"][1]))
                   for r in self.query('scrape_samples_scraped{job="headroom"}')}
        by_gpus: dict[int, list[int]] = {}
        for h in self.hosts:
            by_gpus.setdefault(h.sim.gpus, []).append(samples.get(h.sim.name, 0))
        window = max(int(seconds), 10)
        appended = self.query(f'rate(prometheus_tsdb_head_samples_appended_total[{window}s])')
        head_series = self.query("prometheus_tsdb_head_series")
        groups = self.api("/api/v1/rules")["groups"]
        prom_cpu = cpu_seconds(self.prometheus.pid) if self.prometheus else 0.0
        return {
            "hosts": len(self.hosts), "gpus": sum(h.sim.gpus for h in self.hosts), "seconds": round(elapsed, 1),
            "scrape_interval": self.scrape_interval, "sample_interval": self.sample_interval,
            "agent_cpu_cores": cpu, "agent_rss_bytes": rss, "samples_per_host": samples,
            "samples_by_gpu_count": {g: sorted(v) for g, v in sorted(by_gpus.items())},
            "ingested_samples_per_second": float(appended[0]["value"][1]) if appended else None,
            "head_series": int(float(head_series[0]["value"][1])) if head_series else None,
            "rule_groups": {f"{Path(g['file']).stem}/{g['name']}": {"evaluation_seconds": g["evaluationTime"],
                                                                      "rules": len(g["rules"])} for g in groups},
            "prometheus_rss_bytes": rss_bytes(self.prometheus.pid)[0] if self.prometheus else None,
            "prometheus_cpu_seconds_total": prom_cpu,
            "load_average_1m": round(os.getloadavg()[0], 1),
            "remote_write": bool(self.vm_port),
        }

    # ------------------------------------------------------------------------------------------- stop
    def stop(self) -> None:
        # the store last: Prometheus flushes its remote-write queue when it stops, retrying a store already gone
        # until its flush deadline (a minute)
        for procs in ([h.proc for h in self.hosts] + [p for p in (self.prometheus,) if p],
                      [p for p in (self.victoria_metrics,) if p]):
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 20
            for p in procs:
                try:
                    p.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _median(values: list[float]) -> float:
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def markdown(m: dict[str, Any]) -> str:
    """The fleet section of docs/benchmarks.md."""
    n = m["hosts"]
    cpu, rss = list(m["agent_cpu_cores"].values()), list(m["agent_rss_bytes"].values())
    eval_total = sum(g["evaluation_seconds"] for g in m["rule_groups"].values())
    lines = [
        BEGIN, "## Fleet: Prometheus cost per host", "",
        f"Measured by `python -m bench.fleet --hosts {n} --scrape-interval {m['scrape_interval']} --measure "
        f"{int(m['seconds'])} --write-docs` (`make fleet-bench` runs it with 100 hosts): {n} simulated hosts with {m['gpus']} GPUs (headroom.simulation.fleet: 8-GPU training "
        "hosts, inference hosts, idle, CPU-, disk- and power-bound hosts), one `headroom run` each, sampling "
        f"every {m['sample_interval']}, and one Prometheus scraping them every {m['scrape_interval']} through "
        "file_sd with every recording rule and alert loaded (evaluated at the scrape interval)"
        + (", remote-writing to a VictoriaMetrics single node" if m.get("remote_write") else "") + ", all on this "
        "machine. Series per host are Prometheus' own `scrape_samples_scraped`; the budget test "
        "(tests/test_fleet.py) fails when a change adds more.", "",
        "| GPUs per host | hosts | series per host, median (max) |", "|---|---|---|",
    ]
    for gpus, values in m["samples_by_gpu_count"].items():
        lines.append(f"| {gpus} | {len(values)} | {_median(values):.0f} ({max(values)}) |")
    ingest = m["ingested_samples_per_second"] or 0.0
    interval = float(m["scrape_interval"].rstrip("s"))
    lines += [
        "", "| measure | value |", "|---|---|",
        f"| samples appended per second (all hosts, incl. rule results and Prometheus' self-scrape) | {ingest:.0f} |",
        f"| samples appended per second per host | {ingest / n:.0f} at a {m['scrape_interval']} scrape interval"
        + ("" if interval == 15 else f" ({ingest / n * interval / 15:.0f} at 15 s)") + " |",
        f"| head series | {m['head_series']} ({m['head_series'] / n:.0f} per host) |",
        f"| rule evaluation time, all groups, per evaluation (`/api/v1/rules` evaluationTime) | "
        f"{eval_total * 1000:.1f} ms ({eval_total * 1000 / n:.2f} ms per host) |",
    ]
    for name, g in m["rule_groups"].items():
        lines.append(f"| ... group {name} ({g['rules']} rules) | {g['evaluation_seconds'] * 1000:.2f} ms |")
    lines += [
        f"| agent CPU, median (max) over the {n} agents | {_median(cpu) * 100:.1f} % ({max(cpu) * 100:.1f} %) of "
        f"a core over {m['seconds']} s |",
        f"| agent RSS, median (max) | {_median(rss) / 2**20:.1f} MiB ({max(rss) / 2**20:.1f} MiB) |",
        f"| Prometheus RSS | {(m['prometheus_rss_bytes'] or 0) / 2**20:.0f} MiB |",
        "", f"All agents and Prometheus share the machine's cores (1-minute load average {m.get('load_average_1m')} "
        "at the end of the run, other work included), so agent CPU and rule evaluation times (wall clock) include "
        "contention; the per-tick table above is the cost of one agent alone. Under that load an agent whose "
        "collectors miss their deadline exports a tick with only its own self-metrics (about 60 series): the "
        "medians ignore those.", END,
    ]
    return "\n".join(lines) + "\n"


def write_docs(section: str, path: Path = DOCS) -> None:
    """Replaces the fleet section of docs/benchmarks.md (or appends it)."""
    text = path.read_text()
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=20, help="simulated hosts (default 20)")
    p.add_argument("--scrape-interval", default="1s", help="Prometheus scrape and rule interval (default 1s)")
    p.add_argument("--measure", type=float, metavar="SECONDS",
                   help="measure for SECONDS once everything is up, print JSON, stop (default: run until Ctrl-C)")
    p.add_argument("--write-docs", action="store_true", help="with --measure: rewrite the fleet section of "
                                                             "docs/benchmarks.md")
    p.add_argument("--long-term-store", action=argparse.BooleanOptionalAction, default=True,
                   help="remote-write to a VictoriaMetrics single node started beside Prometheus (default: yes)")
    p.add_argument("--workdir", help="keep scenarios, logs and the TSDB here (default: a temporary directory)")
    args = p.parse_args(argv)
    if args.hosts < 1:
        p.error("--hosts must be at least 1")
    import tempfile

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="headroom-fleet-"))
    f = Fleet(args.hosts, workdir, scrape_interval=args.scrape_interval, long_term_store=args.long_term_store)
    try:
        f.start()
        f.wait_ready(timeout=60 + 3 * args.hosts)
        store = f", VictoriaMetrics on {f.victoria_metrics_url}" if f.vm_port else ""
        print(f"fleet: {args.hosts} agents, Prometheus on {f.prometheus_url}{store} (files in {workdir})", flush=True)
        if args.measure is None:
            print("Ctrl-C stops everything", flush=True)
            while all(h.proc.poll() is None for h in f.hosts):
                time.sleep(1)
            print("an agent exited; stopping", file=sys.stderr)
            return 1
        f.wait_for('instance_team_workload:headroom_gpu_idle_cost:increase1d', timeout=180)
        m = f.measure(args.measure)
        print(json.dumps(m, indent=1))
        if args.write_docs:
            write_docs(markdown(m))
        return 0
    except KeyboardInterrupt:
        return 0
    except RuntimeError as exc:
        print(f"fleet: {exc}", file=sys.stderr)
        return 1
    finally:
        f.stop()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
