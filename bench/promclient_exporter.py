"""A bare prometheus-client exporter, the usual way: a custom collector builds every family at scrape time.

It serves the same families, labels and values as a headroom exposition file (parsed once at start),
so the comparison is the same sample count through prometheus_client's registry and HTTP server. The
default process/platform/gc collectors are removed so only those samples are served.

    python bench/promclient_exporter.py EXPOSITION_FILE PORT
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path


def families_of(text: str) -> list[tuple[str, str, str, list[tuple[dict[str, str], float]]]]:
    """(name, type, help, [(labels, value)]) of every family in a text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for fam in text_string_to_metric_families(text):
        out.append((fam.name, fam.type, fam.documentation, [(dict(s.labels), s.value) for s in fam.samples]))
    return out


class ExpositionCollector:
    """Yields the parsed families as fresh metric families on every collect(), as exporters do."""

    def __init__(self, families: list[tuple[str, str, str, list[tuple[dict[str, str], float]]]]) -> None:
        self.families = families

    def collect(self):  # noqa: ANN201 (prometheus_client protocol)
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

        for name, kind, doc, samples in self.families:
            labels = list(samples[0][0]) if samples else []
            if kind == "counter":
                fam = CounterMetricFamily(name, doc, labels=labels)
            elif kind == "gauge":
                fam = GaugeMetricFamily(name, doc, labels=labels)
            else:
                fam = Metric(name, doc, kind)
                for lab, value in samples:
                    fam.add_sample(name, lab, value)
                yield fam
                continue
            for lab, value in samples:
                fam.add_metric([lab[k] for k in labels], value)
            yield fam


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: promclient_exporter.py EXPOSITION_FILE PORT", file=sys.stderr)
        return 2
    from prometheus_client import (
        GC_COLLECTOR,
        PLATFORM_COLLECTOR,
        PROCESS_COLLECTOR,
        REGISTRY,
        start_http_server,
    )

    for c in (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR):
        REGISTRY.unregister(c)
    REGISTRY.register(ExpositionCollector(families_of(Path(argv[0]).read_text())))
    start_http_server(int(argv[1]), addr="127.0.0.1")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
