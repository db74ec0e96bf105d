"""The infiniband collector over fixture trees in the kernel's /sys/class/infiniband layout (an InfiniBand HDR
port, a RoCE port with mlx5's hw_counters, a port without a PMA), its exposition through the real sampler and
renderer, and RDMA traffic as network evidence for a training job whose collectives cross nodes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from headroom.analysis.signals import host_signals
from headroom.samples import InfinibandPort, InfinibandSample, SourceResult
from headroom.sources import REGISTRY, CollectorError, Paths, SourceContext, load_all
from headroom.sources.infiniband import InfinibandCollector, parse_counter, parse_rate, parse_state

from situations import DISTRIBUTED, Gpu, Host, analyse, build_window

SYS = Path(__file__).parent / "fixtures" / "infiniband" / "sys"
GB = 1e9


def collector(sysfs: Path = SYS, **settings) -> InfinibandCollector:
    return InfinibandCollector(SourceContext(paths=Paths(procfs=sysfs / "no-proc", sysfs=sysfs), settings=settings))


def test_infiniband_is_registered_and_on_by_default():
    load_all()
    assert REGISTRY["infiniband"] is InfinibandCollector and InfinibandCollector.default_enabled


# ------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(("text", "value"), [
    ("200 Gb/sec (4X HDR)\n", 25_000_000_000), ("100 Gb/sec (2X HDR)\n", 12_500_000_000),
    ("56 Gb/sec (4X FDR)\n", 7_000_000_000), ("2.5 Gb/sec (1X SDR)\n", 312_500_000)])
def test_rate_is_gigabits_in_bytes_per_second(text, value):
    assert parse_rate(text) == value


def test_counters_states_and_their_refusals():
    assert parse_counter("2500000000\n") == 2500000000
    assert parse_counter("N/A (no PMA)\n") is None
    assert parse_state("4: ACTIVE\n") == "ACTIVE" and parse_state("1: DOWN") == "DOWN"
    for parse, text, message in [(parse_counter, "-3", "expected a decimal counter"),
                                 (parse_counter, "12 34", "expected a decimal counter"),
                                 (parse_state, "ACTIVE", "expected 'id: NAME'"),
                                 (parse_rate, "fast", "expected '<number> Gb/sec"),
                                 (parse_rate, "100 Mb/sec", "expected '<number> Gb/sec")]:
        with pytest.raises(ValueError, match=message):
            parse(text)


# ----------------------------------------------------------------------------------------- collector
def test_ports_of_the_fixture_tree_in_bytes():
    """port_rcv_data / port_xmit_data count 4-byte words; the rate is the speed; the error and congestion
    counters a port has (RoCE's hw_counters) come by name; a port without a PMA has no traffic figures."""
    ib, roce, old = collector().collect().devices
    assert (ib.device, ib.hca, ib.port, ib.link_layer, ib.state) == ("mlx5_0/1", "mlx5_0", 1, "InfiniBand", "ACTIVE")
    assert (ib.receive_bytes, ib.transmit_bytes) == (4 * 2500000000, 4 * 3000000000)
    assert (ib.receive_packets, ib.transmit_packets, ib.speed_bytes_per_second) == (41000000, 43000000, 25 * 10**9)
    assert ib.events == {"symbol_error": 0, "link_downed": 1, "port_rcv_errors": 0, "port_xmit_discards": 3,
                         "port_xmit_wait": 123456, "out_of_sequence": 0, "local_ack_timeout_err": 0}
    assert (roce.device, roce.link_layer, roce.receive_bytes, roce.speed_bytes_per_second) == (
        "mlx5_1/1", "Ethernet", 2800000000, 12_500_000_000)
    assert {k: roce.events[k] for k in ("out_of_sequence", "np_cnp_sent", "rp_cnp_handled", "roce_adp_retrans")} == {
        "out_of_sequence": 17, "np_cnp_sent": 40, "rp_cnp_handled": 38, "roce_adp_retrans": 5}
    assert "rx_write_requests" not in roce.events  # not an error or congestion counter
    assert (old.device, old.state, old.receive_bytes, old.transmit_packets) == ("qib0/1", "DOWN", None, None)


def test_no_rdma_device_is_an_empty_sample(tmp_path):
    assert collector(tmp_path).collect() == InfinibandSample(devices=())


def test_path_sysfs_is_where_it_reads(tmp_path):
    """--path.sysfs: a host's sysfs mounted elsewhere (/host/sys in a DaemonSet)."""
    shutil.copytree(SYS, tmp_path / "host" / "sys")
    (tmp_path / "host/sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data").write_text("7\n")
    ports = {p.device: p for p in collector(tmp_path / "host" / "sys").collect().devices}
    assert ports["mlx5_0/1"].transmit_bytes == 28


def test_device_filters_are_on_the_hca_name():
    assert [p.device for p in collector(device_exclude="^qib").collect().devices] == ["mlx5_0/1", "mlx5_1/1"]
    assert [p.device for p in collector(device_include="mlx5_1").collect().devices] == ["mlx5_1/1"]


def test_text_the_kernel_does_not_write_is_one_line_naming_the_file(tmp_path):
    shutil.copytree(SYS, tmp_path / "sys")
    bad = tmp_path / "sys/class/infiniband/mlx5_1/ports/1/counters/port_rcv_data"
    bad.write_text("lots\n")
    with pytest.raises(CollectorError) as err:
        collector(tmp_path / "sys").collect()
    assert str(err.value) == f"cannot parse {bad}: expected a decimal counter or 'N/A (no PMA)', got 'lots'"


def test_a_port_that_goes_away_is_dropped_and_a_new_one_found(tmp_path):
    shutil.copytree(SYS, tmp_path / "sys")
    c = collector(tmp_path / "sys")
    assert len(c.collect().devices) == 3
    shutil.rmtree(tmp_path / "sys/class/infiniband/mlx5_1")
    shutil.copytree(SYS / "class/infiniband/mlx5_1", tmp_path / "sys/class/infiniband/mlx5_2")
    assert [p.device for p in c.collect().devices] == ["mlx5_0/1", "mlx5_2/1", "qib0/1"]
    c.close()


def test_exposition_through_the_sampler():
    from headroom.exposition.render import render as render_exposition
    from headroom.sampler import Sampler

    sampler = Sampler(render=render_exposition, collectors=[collector()], interval=1.0, collector_timeout=10.0)
    try:
        text = sampler.tick().exposition.decode()
    finally:
        sampler.stop()
    for line in ('headroom_infiniband_port_receive_bytes_total{device="mlx5_0",port="1"} 10000000000',
                 'headroom_infiniband_port_transmit_bytes_total{device="mlx5_1",port="1"} 2600000000',
                 'headroom_infiniband_port_rate_bytes{device="mlx5_0",port="1"} 25000000000',
                 'headroom_infiniband_port_active{device="mlx5_1",port="1",link_layer="Ethernet"} 1',
                 'headroom_infiniband_port_active{device="qib0",port="1",link_layer="InfiniBand"} 0',
                 'headroom_infiniband_port_events_total{device="mlx5_1",port="1",counter="np_cnp_sent"} 40',
                 'headroom_collector_success{collector="infiniband"} 1'):
        assert line in text, line
    assert 'headroom_infiniband_port_receive_bytes_total{device="qib0"' not in text  # N/A: absent, never 0


# ------------------------------------------------------------------------------------------------ analysis
WAITING = dict(util=0.97, power=250.0, sm_active=0.1)  # busy, not computing (GPM)


def rdma(rate: float, speed: float, duty: float = 1.0):
    """An 'infiniband' source: one HDR port carrying ``rate`` bytes/s each way, ``duty`` of each 10 s."""
    def extra(t: int):
        carried = sum(1.0 for s in range(t) if (s % 10) < duty * 10)
        port = InfinibandPort(device="mlx5_0/1", hca="mlx5_0", port=1, link_layer="InfiniBand", state="ACTIVE",
                              receive_bytes=int(rate * carried), transmit_bytes=int(rate * carried),
                              receive_packets=0, transmit_packets=0, speed_bytes_per_second=int(speed))
        return {"infiniband": SourceResult("infiniband", True, 0.001, InfinibandSample(devices=(port,)))}
    return extra


def trainer(host: Host, gpus: list[Gpu], extra=None):
    window = build_window(host, gpus, extra=extra)
    (wf,) = analyse(DISTRIBUTED, window, gpus_of={"trainer": tuple(range(len(gpus)))}).workload_findings
    return wf.verdict


def test_rdma_traffic_reaches_the_host_network_signals():
    h = host_signals(build_window(Host(nic=(1e6, 12.5 * GB)), [Gpu()], extra=rdma(20 * GB, 25 * GB)), 30.0)
    assert h.net_busiest_device == "mlx5_0/1" and h.net_busiest_bytes_per_second == pytest.approx(20 * GB, rel=0.01)
    assert h.net_device == "mlx5_0/1" and h.net_ratio == pytest.approx(0.8, rel=0.01)
    assert h.net_steady == 1.0


def test_ranks_waiting_on_collectives_over_rdma_are_network_bound():
    """NCCL over verbs: the NIC's counters see almost nothing, the HCA's port carries steady traffic."""
    v = trainer(Host(nic=(1e6, 12.5 * GB)), [Gpu(**WAITING), Gpu(**WAITING)], extra=rdma(12 * GB, 25 * GB))
    assert v.primary == "network", (v.scores, v.evidence["network"])
    assert "mlx5_0/1 carries 12000 MB/s" in v.evidence["network"]


def test_starved_ranks_beside_a_saturated_port_are_network_bound_and_bursts_are_not():
    starved = trainer(Host(nic=(1e6, 12.5 * GB)), [Gpu(util=0.3, power=150.0)] * 2, extra=rdma(24 * GB, 25 * GB))
    assert starved.primary == "network" and "mlx5_0/1 at 192.0 Gbit/s" in starved.evidence["network"], (
        starved.scores, starved.evidence["network"])
    bursts = trainer(Host(nic=(1e6, 12.5 * GB)), [Gpu(**WAITING)], extra=rdma(12 * GB, 25 * GB, duty=0.3))
    assert bursts.scores["network"] < 0.5 and "bursts, not steady traffic" in bursts.evidence["network"]


def test_config_takes_the_filters_and_refuses_a_bad_regex_in_one_line():
    from headroom.config import ConfigError, check_config_text

    config = check_config_text("collectors:\n  infiniband:\n    device_include: '^mlx5_'\n", "c.yaml")
    settings = {k: v for k, v in config.collectors["infiniband"].items() if k != "enabled"}
    assert [p.hca for p in collector(**settings).collect().devices] == ["mlx5_0", "mlx5_1"]
    with pytest.raises(ConfigError) as err:
        check_config_text("collectors:\n  infiniband:\n    device_exclude: '(mlx'\n", "c.yaml")
    assert "\n" not in str(err.value) and "collectors.infiniband.device_exclude" in str(err.value)


# node_exporter's infiniband collector (prometheus/procfs sysfs/class_infiniband.go) over the same tree
NODE_EXPORTER_NAMES = {
    "headroom_infiniband_port_receive_bytes_total": "node_infiniband_port_data_received_bytes_total",
    "headroom_infiniband_port_transmit_bytes_total": "node_infiniband_port_data_transmitted_bytes_total",
    "headroom_infiniband_port_receive_packets_total": "node_infiniband_port_packets_received_total",
    "headroom_infiniband_port_transmit_packets_total": "node_infiniband_port_packets_transmitted_total",
    "headroom_infiniband_port_rate_bytes": "node_infiniband_rate_bytes_per_second",
}
NODE_EXPORTER_EVENTS = {"symbol_error": "node_infiniband_symbol_error_total",
                        "link_downed": "node_infiniband_link_downed_total",
                        "port_rcv_errors": "node_infiniband_port_errors_received_total",
                        "port_xmit_discards": "node_infiniband_port_discards_transmitted_total",
                        "port_xmit_wait": "node_infiniband_port_transmit_wait_total"}


def test_the_same_figures_as_a_real_node_exporter():
    """A real node_exporter (Debian's prometheus-node-exporter, installed by `make test`) and headroom read the same
    fixture tree through --path.sysfs: every port series headroom exports has node_exporter's value."""
    import subprocess
    import sys
    import time

    from prometheus_client.parser import text_string_to_metric_families

    from conftest import ROOT, free_port, http_get

    binary = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
    assert shutil.which(binary), "node_exporter missing: `make test` installs Debian's prometheus-node-exporter"

    def series(text: str) -> dict[tuple[str, tuple], float]:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    port = free_port()
    proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                             "--collector.infiniband", f"--path.sysfs={SYS}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                status, _, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=1)
                if status == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "node_exporter did not start"
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
    node = series(body.decode())
    assert node[("node_scrape_collector_success", (("collector", "infiniband"),))] == 1
    r = subprocess.run([sys.executable, "-m", "headroom", "snapshot", "--samples", "1", "--collector.disable-defaults",
                        "--collector.infiniband", f"--path.sysfs={SYS}"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    compared = 0
    for (name, labels), value in series(r.stdout).items():
        d = dict(labels)
        if name in NODE_EXPORTER_NAMES:
            key = (NODE_EXPORTER_NAMES[name], labels)
        elif name == "headroom_infiniband_port_events_total" and d["counter"] in NODE_EXPORTER_EVENTS:
            key = (NODE_EXPORTER_EVENTS[d["counter"]], (("device", d["device"]), ("port", d["port"])))
        else:
            continue
        assert node.get(key) == value, (name, labels, value, node.get(key))
        compared += 1
    assert compared == 22, compared  # 4 counters x 2 ports, 3 rates, 5 events x 2 ports and qib0's symbol_error


def test_bytes_that_are_not_utf8_name_the_file_in_one_line(tmp_path):
    shutil.copytree(SYS, tmp_path / "sys")
    (tmp_path / "sys/class/infiniband/mlx5_0/ports/1/link_layer").write_bytes(b"Infini\xffBand\n")
    state = tmp_path / "sys/class/infiniband/mlx5_0/ports/1/state"
    state.write_bytes(b"4: ACT\xffIVE\n")
    with pytest.raises(CollectorError) as err:
        collector(tmp_path / "sys").collect()
    assert str(err.value).startswith(f"cannot parse {state}: ") and "\n" not in str(err.value)
