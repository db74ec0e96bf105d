"""The infiniband collector: RDMA port counters (InfiniBand, and RoCE on Ethernet) from /sys/class/infiniband.

A training job whose collectives cross nodes over RDMA (NCCL's IB transport, on InfiniBand or RoCE) moves its
bytes through the HCA without the kernel's network stack: /proc/net/dev does not see them (an IPoIB or RoCE
netdev counts only its own IP traffic). The port counters do, and they feed the same ``network`` evidence as
the NICs' (analysis/signals.host_signals: each port is a link, with its rate as its speed).

The kernel's layout, as node_exporter's infiniband collector reads it (prometheus/procfs
sysfs/class_infiniband.go), under <sysfs>/class/infiniband/<hca>/ports/<port>/:
  link_layer           "InfiniBand" or "Ethernet" (RoCE)
  state                "4: ACTIVE" (id: name)
  rate                 "200 Gb/sec (4X HDR)" (Gb/s x 125000000 = bytes/s)
  counters/<name>      decimal counters; port_rcv_data and port_xmit_data count 4-byte words (the IB spec's
                       PortRcvData/PortXmitData, "divided by 4"); "N/A (no PMA)" where the port has no
                       performance management agent
  hw_counters/<name>   the driver's own counters (mlx5: RoCE retransmits, congestion notifications ...)

Read every tick: the two data and two packet counters, state and rate, and the EVENT_COUNTERS the port has
(found once per port, when it first appears). Devices and ports are listed again every tick (a directory
listing each: HCAs come and go with SR-IOV and resets). No /sys/class/infiniband (no RDMA device, or the
module not loaded) is an empty sample, not an error.

Settings (``collectors.infiniband``): device_include / device_exclude, regexes on the HCA name (as the net
collector's).
"""

from __future__ import annotations

import os
from pathlib import Path

from headroom.samples import InfinibandPort, InfinibandSample, share_unchanged
from headroom.sources import Collector, DeviceFilter, SourceContext, procfs, register

WORD_BYTES = 4  # port_rcv_data / port_xmit_data count 4-byte words
GBIT_BYTES = 125_000_000  # bytes per second in one Gb/s of ports/<n>/rate
DATA_COUNTERS = ("port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets")
# error and congestion counters exported as headroom_infiniband_port_events_total{counter}: (directory, file)
EVENT_COUNTERS: tuple[tuple[str, str], ...] = (
    ("counters", "symbol_error"),  # bit errors on the wire
    ("counters", "link_downed"),  # the link went down
    ("counters", "port_rcv_errors"),
    ("counters", "port_xmit_discards"),
    ("counters", "port_xmit_wait"),  # ticks with data to send and no credit: congestion downstream
    ("hw_counters", "out_of_sequence"),  # RoCE: packets out of order (a lossy fabric)
    ("hw_counters", "packet_seq_err"),
    ("hw_counters", "local_ack_timeout_err"),  # retransmits after a timeout
    ("hw_counters", "roce_adp_retrans"),
    ("hw_counters", "np_cnp_sent"),  # congestion notifications sent (ECN marked traffic received)
    ("hw_counters", "rp_cnp_handled"),  # congestion notifications acted on (rate reduced)
    ("hw_counters", "out_of_buffer"),  # receive queue had no buffer
)
NOT_AVAILABLE = "N/A"


def parse_counter(text: str) -> int | None:
    """A counters/ or hw_counters/ file: the count, or None for "N/A (no PMA)"; ValueError for anything else."""
    value = text.strip()
    if value.startswith(NOT_AVAILABLE):
        return None
    if not value.isdigit():
        raise ValueError(f"expected a decimal counter or 'N/A (no PMA)', got {value[:40]!r}")
    return int(value)


def parse_state(text: str) -> str:
    """ports/<n>/state or phys_state, "4: ACTIVE": the name; ValueError when not 'id: name'."""
    number, sep, name = text.strip().partition(":")
    if not sep or not number.strip().isdigit() or not name.strip():
        raise ValueError(f"expected 'id: NAME', got {text.strip()[:40]!r}")
    return name.strip()


def parse_rate(text: str) -> int:
    """ports/<n>/rate, "200 Gb/sec (4X HDR)": bytes per second; ValueError when not '<number> Gb/sec ...'."""
    number, _, unit = text.strip().partition(" ")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"expected '<number> Gb/sec ...', got {text.strip()[:40]!r}") from None
    if not unit.startswith("Gb/sec") or value < 0:
        raise ValueError(f"expected '<number> Gb/sec ...', got {text.strip()[:40]!r}")
    return round(value * GBIT_BYTES)


class _Port:
    """The files of one port, kept open on the live sysfs."""

    def __init__(self, root: Path, hca: str, port: int, keep: bool) -> None:
        self.root = root
        self.hca, self.port = hca, port
        try:
            self.link_layer = (root / "link_layer").read_text(errors="backslashreplace").strip()
        except OSError:
            self.link_layer = ""  # unknown (the label is then empty)
        self.files = {name: procfs.ProcFile(root / "counters" / name, keep) for name in DATA_COUNTERS}
        self.state = procfs.ProcFile(root / "state", keep)
        self.rate = procfs.ProcFile(root / "rate", keep)
        self.events = {name: procfs.ProcFile(root / directory / name, keep)
                       for directory, name in EVENT_COUNTERS if (root / directory / name).is_file()}

    def read(self) -> InfinibandPort:
        """Raises OSError when the port went away, CollectorError (naming the file) for text the kernel does
        not write."""
        def counter(f: procfs.ProcFile) -> int | None:
            try:
                return parse_counter(f.text())
            except ValueError as exc:
                raise procfs.read_failure(Path(f.path), exc) from None

        data = [counter(self.files[name]) for name in DATA_COUNTERS]
        try:
            state = parse_state(self.state.text())
        except ValueError as exc:
            raise procfs.read_failure(Path(self.state.path), exc) from None
        try:
            speed = parse_rate(self.rate.text())
        except (OSError, ValueError):
            speed = None  # unknown (a port down may report none): no speed, the counters still count
        events = {}
        for name, f in self.events.items():
            try:
                value = counter(f)
            except OSError:
                continue
            if value is not None:
                events[name] = value
        rcv, xmit = data[0], data[1]
        return InfinibandPort(
            device=f"{self.hca}/{self.port}", hca=self.hca, port=self.port, link_layer=self.link_layer, state=state,
            receive_bytes=None if rcv is None else rcv * WORD_BYTES,
            transmit_bytes=None if xmit is None else xmit * WORD_BYTES,
            receive_packets=data[2], transmit_packets=data[3], speed_bytes_per_second=speed, events=events)

    def close(self) -> None:
        for f in (*self.files.values(), self.state, self.rate, *self.events.values()):
            f.close()


@register
class InfinibandCollector(Collector):
    name = "infiniband"
    default_enabled = True
    description = "RDMA port traffic, rate and error counters (InfiniBand, RoCE) from /sys/class/infiniband"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._filter = DeviceFilter("infiniband", ctx.settings, "")
        self._root = ctx.paths.sysfs / "class" / "infiniband"
        # the kernel's own sysfs (not a tree of files, nor a host's mounted elsewhere): its files may stay open
        self._keep = procfs.is_live_procfs(ctx.paths.procfs) and os.path.realpath(ctx.paths.sysfs) == "/sys"
        self._ports: dict[tuple[str, int], _Port] = {}
        self._last: dict[str, InfinibandPort] = {}

    def _list(self) -> list[tuple[str, int]]:
        try:
            hcas = sorted(os.listdir(self._root))
        except FileNotFoundError:
            return []  # no RDMA device here
        except OSError as exc:
            raise procfs.read_failure(self._root, exc) from None
        out: list[tuple[str, int]] = []
        for hca in hcas:
            if not self._filter.wanted(hca):
                continue
            try:
                ports = os.listdir(self._root / hca / "ports")
            except OSError:
                continue  # gone since the listing, or not a device
            out.extend((hca, int(p)) for p in sorted(ports, key=lambda p: (len(p), p)) if p.isdigit())
        return out

    def collect(self) -> InfinibandSample:
        """The wanted ports' counters; raises CollectorError when the class directory cannot be listed or a
        counter holds text the kernel does not write."""
        wanted = self._list()
        for gone in self._ports.keys() - set(wanted):
            self._ports.pop(gone).close()
        out = []
        for key in wanted:
            port = self._ports.get(key)
            if port is None:
                port = self._ports[key] = _Port(self._root / key[0] / "ports" / str(key[1]), *key, self._keep)
            try:
                sample = port.read()
            except OSError:
                self._ports.pop(key).close()  # went away between the listing and the read
                continue
            out.append(share_unchanged(sample, self._last.get(sample.device)))
        self._last = {p.device: p for p in out}
        return InfinibandSample(devices=tuple(out))

    def close(self) -> None:
        for port in self._ports.values():
            port.close()
        self._ports.clear()
